"""Textured static scenes with moving cameras, rendered by Cycles through our own scene
export: exact depth, normals and cameras for the multi-view tests (issue 14).

:func:`render_shot` builds a room (textured floor, back and side walls, three boxes;
procedural Cycles textures, so stereo has something to match), animates the camera
along one of :data:`MOVES` and exports every frame with
``gbuffer_editor.addon.scene.export.export_scene_gbuffers``. It then writes what a user
would bring to Decompose: the frames as an sRGB PNG sequence and a camera file (our
JSON, exact cameras from the export's manifest). Needs ``bpy``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

#: camera moves: name -> (location at t in [0, 1], (pitch, yaw) in degrees at t)
MOVES = {
    # straight sideways dolly across the room, looking at the back wall
    "dolly": lambda t: ((-0.6 + 1.2 * t, -5.0, 1.4), (84.0, 0.0)),
    # an arc around the middle box, always facing it
    "orbit": lambda t: ((4.6 * math.sin(math.radians(-14 + 28 * t)), -4.6 * math.cos(math.radians(-14 + 28 * t)),
                         1.5), (82.0, -14 + 28 * t)),
    # walking forward with handheld jitter
    "handheld": lambda t: ((0.15 * math.sin(7 * t), -5.2 + 1.0 * t, 1.45 + 0.04 * math.sin(11 * t)),
                           (85.0 + 1.2 * math.sin(9 * t), 2.0 * math.sin(5 * t))),
}


def _textured(name: str, scale: float, colour: Tuple[float, float, float], kind: str = "noise"):
    """A Principled material whose base colour is a high-contrast procedural texture."""
    import bpy

    m = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    t = m.node_tree
    p = next(n for n in t.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    p.inputs["Roughness"].default_value = 0.7
    tex = t.nodes.new("ShaderNodeTexNoise" if kind == "noise" else "ShaderNodeTexVoronoi")
    tex.inputs["Scale"].default_value = scale
    if kind == "noise":
        tex.inputs["Detail"].default_value = 8.0
    coord = t.nodes.new("ShaderNodeTexCoord")
    t.links.new(coord.outputs["Object"], tex.inputs["Vector"])
    mix = t.nodes.new("ShaderNodeMixRGB")
    mix.inputs["Color1"].default_value = (0.03, 0.03, 0.03, 1.0)
    mix.inputs["Color2"].default_value = (*colour, 1.0)
    ramp = t.nodes.new("ShaderNodeMath")
    ramp.operation = "MULTIPLY_ADD"  # contrast: (x - 0.5) * 3 + 0.5
    ramp.inputs[1].default_value = 3.0
    ramp.inputs[2].default_value = -1.0
    ramp.use_clamp = True
    t.links.new(tex.outputs[0 if kind == "noise" else "Distance"], ramp.inputs[0])
    t.links.new(ramp.outputs[0], mix.inputs["Fac"])
    t.links.new(mix.outputs[0], p.inputs["Base Color"])
    return m


def _box(name, loc, size, mat):
    import bpy

    bpy.ops.mesh.primitive_cube_add(size=1.0, location=loc)
    ob = bpy.context.active_object
    ob.name = name
    ob.scale = size
    ob.data.materials.append(mat)
    return ob


def build_room(move: str, n_frames: int, size: Tuple[int, int]):
    """A fresh scene: the room, a sun, a sky and the camera animated along ``move``."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.render.resolution_x, scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.frame_start, scene.frame_end = 1, n_frames
    world = bpy.data.worlds.new("w")
    scene.world = world
    if bpy.app.version < (5, 0, 0):
        world.use_nodes = True
    world.node_tree.nodes["Background"].inputs["Strength"].default_value = 1.5
    _box("floor", (0, 0, -0.05), (12, 14, 0.1), _textured("floor", 14.0, (0.9, 0.8, 0.6)))
    _box("back", (0, 4.0, 2.5), (12, 0.1, 5), _textured("back", 12.0, (0.7, 0.8, 0.95)))
    _box("left", (-4.0, 0, 2.5), (0.1, 14, 5), _textured("left", 12.0, (0.9, 0.6, 0.6)))
    _box("right", (4.0, 0, 2.5), (0.1, 14, 5), _textured("right", 12.0, (0.6, 0.9, 0.6)))
    _box("box1", (-1.2, 0.5, 0.6), (1.0, 1.0, 1.2), _textured("b1", 6.0, (0.95, 0.9, 0.3), "voronoi"))
    _box("box2", (0.6, 1.8, 0.9), (1.4, 0.8, 1.8), _textured("b2", 5.0, (0.4, 0.7, 0.95)))
    _box("box3", (1.6, -0.6, 0.35), (0.7, 0.7, 0.7), _textured("b3", 8.0, (0.95, 0.5, 0.3), "voronoi"))
    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    sun.data.energy = 4.0
    sun.rotation_euler = (math.radians(50), math.radians(10), math.radians(30))
    scene.collection.objects.link(sun)
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.data.lens = 24.0
    cam.data.clip_start = 0.05
    scene.collection.objects.link(cam)
    scene.camera = cam
    path = MOVES[move]
    for i in range(n_frames):
        loc, (pitch, yaw) = path(i / max(1, n_frames - 1))
        cam.location = loc
        cam.rotation_euler = (math.radians(pitch), 0.0, math.radians(-yaw))
        cam.keyframe_insert("location", frame=i + 1)
        cam.keyframe_insert("rotation_euler", frame=i + 1)
    return scene


def render_shot(out: Path, move: str, n_frames: int = 7, size=(320, 180), samples: int = 16) -> Dict:
    """Render ``move`` into ``out``: ``gt/`` (exported G-buffers), ``shot/`` (PNG frames),
    ``cameras.json`` (exact cameras, metres). Returns the paths and exact depths/normals."""
    import cv2

    from gbuffer_editor.addon.scene.export import export_scene_gbuffers
    from gbuffer_editor.backend import contract as ext_contract

    from backend import contract
    from backend.colour import linear_to_srgb
    from backend.multiview.camera_files import save_cameras_json
    from backend.multiview.cameras import Camera

    scene = build_room(move, n_frames, size)
    export_scene_gbuffers(scene, out / "gt", samples=samples, denoise=True)
    man = ext_contract.read_manifest(out / "gt")
    shot = out / "shot"
    shot.mkdir(parents=True, exist_ok=True)
    cams, depths, normals = {}, [], []
    for row in man["frames"]:
        fr = contract.read_frame(out / "gt" / row["file"])
        rgb8 = (linear_to_srgb(fr.combined[..., :3]) * 255 + 0.5).astype(np.uint8)
        cv2.imwrite(str(shot / f"shot_{row['frame']:04d}.png"), rgb8[..., ::-1])
        cams[row["frame"]] = Camera.from_c2w_opengl(np.asarray(row["camera_matrix_world"]), size[0], size[1],
                                                    *row["intrinsics"], name=str(row["frame"]))
        depths.append(fr.depth)
        normals.append(fr.normal)
    save_cameras_json(out / "cameras.json", cams, units="metres", depth_range=(0.5, 100.0))
    return {"shot": shot, "cameras": out / "cameras.json", "depths": depths, "normals": normals,
            "cams": cams}
