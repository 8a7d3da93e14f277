"""Test scenes with known materials, rendered by Cycles through our own scene export
(issue 25): exact albedo, roughness and metallic per pixel to score single-frame
material estimates against.

:func:`build_scene` makes one scene from a seed: a textured ground plane and 5-7
objects (spheres, cubes, cylinders, a torus) with Principled materials drawn from four
families -- matte dielectrics, glossy dielectrics, polished metals, rough metals --
with plain or procedurally textured base colours; a sun (white or tinted) that casts
shadows, a coloured sky (world background) and, on some seeds, a coloured point light.
The camera looks down at the objects from a random azimuth. A third of the dielectric
colours and half of the metal colours are grey (achromatic reflectance edges, as on
real footage). :func:`render_scene`
exports the frame with ``export_scene_gbuffers`` (exact passes) and returns the
contract frame's arrays.

Seeds are split in code: :data:`TUNE_SEEDS` for choosing methods and constants,
:data:`HELDOUT_SEEDS` for the numbers we report (never tuned on). Needs ``bpy``.
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Dict, List

import numpy as np

#: seeds methods and constants are chosen on
TUNE_SEEDS = tuple(range(0, 16))
#: seeds the reported numbers come from; never used for choosing anything
HELDOUT_SEEDS = tuple(range(100, 108))

FAMILIES = ("matte", "glossy", "metal_polished", "metal_rough")


def _colour(rng: random.Random, grey: bool = False):
    if grey:
        v = rng.uniform(0.1, 0.9)
        return (v, v, v)
    h, s, v = rng.random(), rng.uniform(0.2, 0.9), rng.uniform(0.15, 0.9)
    import colorsys

    return colorsys.hsv_to_rgb(h, s, v)


def _material(name: str, rng: random.Random, family: str, textured: bool, tex_scale: float = 1.0):
    import bpy

    m = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    t = m.node_tree
    p = next(n for n in t.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    rough = {"matte": (0.6, 1.0), "glossy": (0.03, 0.3), "metal_polished": (0.02, 0.2),
             "metal_rough": (0.35, 0.7)}[family]
    p.inputs["Roughness"].default_value = rng.uniform(*rough)
    p.inputs["Metallic"].default_value = 1.0 if family.startswith("metal") else 0.0
    # real scenes have many achromatic surfaces (white hulls, grey animals, black tyres):
    # a third of dielectrics and half of metals are grey
    c1 = _colour(rng, grey=rng.random() < (0.5 if family.startswith("metal") else 0.33))
    if family.startswith("metal"):
        c1 = tuple(0.5 + 0.5 * c for c in c1)  # metals are bright (F0 0.5..1)
    if textured:
        c2 = _colour(rng, grey=rng.random() < 0.33)
        tex = t.nodes.new("ShaderNodeTexChecker" if rng.random() < 0.5 else "ShaderNodeTexNoise")
        tex.inputs["Scale"].default_value = rng.uniform(3.0, 8.0) * tex_scale
        if tex.bl_idname == "ShaderNodeTexChecker":
            tex.inputs["Color1"].default_value = (*c1, 1.0)
            tex.inputs["Color2"].default_value = (*c2, 1.0)
            t.links.new(tex.outputs["Color"], p.inputs["Base Color"])
        else:
            mix = t.nodes.new("ShaderNodeMixRGB")
            mix.inputs["Color1"].default_value = (*c1, 1.0)
            mix.inputs["Color2"].default_value = (*c2, 1.0)
            t.links.new(tex.outputs["Fac"], mix.inputs["Fac"])
            t.links.new(mix.outputs[0], p.inputs["Base Color"])
    else:
        p.inputs["Base Color"].default_value = (*c1, 1.0)
    return m


def build_scene(seed: int, size=(256, 192), n_frames: int = 1, orbit_deg: float = 30.0):
    """A fresh Cycles scene for ``seed`` (see the module docstring); with ``n_frames > 1``
    the camera orbits ``orbit_deg`` degrees around the objects over the frames (for the
    multi-view materials path: a static scene seen from several directions)."""
    import bpy

    rng = random.Random(seed)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.render.resolution_x, scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.frame_start = scene.frame_end = 1
    world = bpy.data.worlds.new("w")
    scene.world = world
    if bpy.app.version < (5, 0, 0):
        world.use_nodes = True
    bg = world.node_tree.nodes["Background"]
    sky = (0.5, 0.65, 1.0) if rng.random() < 0.6 else _colour(rng)
    bg.inputs["Color"].default_value = (*sky, 1.0)
    bg.inputs["Strength"].default_value = rng.uniform(0.3, 1.0)

    bpy.ops.mesh.primitive_plane_add(size=30.0, location=(0, 0, 0))
    ground = bpy.context.active_object
    ground.data.materials.append(_material("ground", rng, rng.choice(("matte", "matte", "glossy")), True, 6.0))
    shapes = ("sphere", "cube", "cylinder", "torus")
    for i in range(rng.randint(5, 7)):
        kind = rng.choice(shapes)
        r = rng.uniform(0.35, 0.8)
        loc = (rng.uniform(-2.2, 2.2), rng.uniform(-1.8, 2.2), r)
        if kind == "sphere":
            bpy.ops.mesh.primitive_uv_sphere_add(radius=r, location=loc, segments=48, ring_count=24)
            bpy.ops.object.shade_smooth()
        elif kind == "cube":
            bpy.ops.mesh.primitive_cube_add(size=1.6 * r, location=(loc[0], loc[1], 0.8 * r),
                                            rotation=(0, 0, rng.uniform(0, math.pi)))
        elif kind == "cylinder":
            bpy.ops.mesh.primitive_cylinder_add(radius=0.7 * r, depth=2 * r, location=loc, vertices=48)
            bpy.ops.object.shade_smooth()
        else:
            bpy.ops.mesh.primitive_torus_add(major_radius=r, minor_radius=0.35 * r,
                                             location=(loc[0], loc[1], 0.35 * r))
            bpy.ops.object.shade_smooth()
        fam = FAMILIES[(i + seed) % len(FAMILIES)] if i < 4 else rng.choice(FAMILIES)
        bpy.context.active_object.data.materials.append(
            _material(f"m{i}", rng, fam, textured=rng.random() < 0.4))

    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    sun.data.energy = rng.uniform(2.5, 5.0)
    sun.data.angle = math.radians(rng.uniform(0.5, 5.0))
    sun.data.color = (1.0, 1.0, 1.0) if rng.random() < 0.5 else tuple(0.6 + 0.4 * c for c in _colour(rng))
    sun.rotation_euler = (math.radians(rng.uniform(20, 60)), 0.0, math.radians(rng.uniform(0, 360)))
    scene.collection.objects.link(sun)
    if rng.random() < 0.5:
        pt = bpy.data.objects.new("pt", bpy.data.lights.new("pt", "POINT"))
        pt.data.energy = rng.uniform(100, 400)
        pt.data.color = _colour(rng)
        pt.location = (rng.uniform(-3, 3), rng.uniform(-3, 3), rng.uniform(1.5, 3.0))
        scene.collection.objects.link(pt)

    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.data.lens = 28.0
    scene.collection.objects.link(cam)
    scene.camera = cam
    az0 = math.radians(rng.uniform(0, 360))
    dist, height = rng.uniform(4.5, 5.5), rng.uniform(2.5, 3.5)
    target = np.array([0.0, 0.2, 0.4])
    scene.frame_end = n_frames
    for i in range(n_frames):  # an orbit of orbit_deg around the target (one frame: az0)
        az = az0 + math.radians(orbit_deg) * (i / (n_frames - 1) - 0.5 if n_frames > 1 else 0.0)
        cam.location = (dist * math.sin(az), -dist * math.cos(az), height)
        d = target - np.array(cam.location)
        pitch = math.atan2(math.hypot(d[0], d[1]), -d[2])
        yaw = math.atan2(d[1], d[0]) - math.pi / 2
        cam.rotation_euler = (pitch, 0.0, yaw)
        if n_frames > 1:
            cam.keyframe_insert("location", frame=i + 1)
            cam.keyframe_insert("rotation_euler", frame=i + 1)
    return scene


def render_shot(seed: int, out: Path, n_frames: int = 7, orbit_deg: float = 30.0, size=(256, 192),
                samples: int = 16) -> List[Dict]:
    """Render ``seed`` with an orbiting camera (:func:`build_scene`) into ``out`` unless
    already there; one dict per frame as :func:`render_scene` gives, plus ``camera_to_world``
    (4x4, Blender's convention) and ``intrinsics`` ``[fx, fy, cx, cy]`` from the export's
    manifest."""
    from backend import contract

    out = Path(out)
    if not (out / f"gbuffer_{n_frames:04d}.exr").is_file():
        from gbuffer_editor.addon.scene.export import export_scene_gbuffers

        export_scene_gbuffers(build_scene(seed, size, n_frames, orbit_deg), out, samples=samples, denoise=True)
    rows = contract.read_manifest(out)["frames"]
    shots = []
    for row in rows:
        d = _frame_arrays(out / row["file"])
        d.update(camera_to_world=np.asarray(row["camera_matrix_world"], np.float64),
                 intrinsics=list(row["intrinsics"]), frame=row["frame"])
        shots.append(d)
    return shots


def _frame_arrays(path: Path) -> Dict[str, np.ndarray]:
    from backend import contract

    fr = contract.read_frame(path)
    return {"rgb": np.ascontiguousarray(fr.combined[..., :3], np.float32), "albedo": fr.albedo[..., :3],
            "roughness": fr.roughness, "metallic": fr.metallic, "normal": fr.normal, "depth": fr.depth,
            "mask": fr.confidence > 0.5}


def render_scene(seed: int, out: Path, size=(256, 192), samples: int = 16) -> Dict[str, np.ndarray]:
    """Render ``seed`` into ``out`` (a scene-export folder) unless already there; return
    ``rgb`` (scene-linear Combined), ``albedo``, ``roughness``, ``metallic``, ``normal``,
    ``depth`` and ``mask`` (geometry, not sky: exported Confidence > 0.5) as float32 arrays."""
    out = Path(out)
    path = out / "gbuffer_0001.exr"
    if not path.is_file():
        from gbuffer_editor.addon.scene.export import export_scene_gbuffers

        scene = build_scene(seed, size)
        export_scene_gbuffers(scene, out, samples=samples, denoise=True)
    return _frame_arrays(path)
