"""World from Plate: a Blender World lit like the footage (issue 39, item 3).

A restyle writes the plate's lighting into its result folder
(:mod:`backend.jobs.restyle_plate`): ``plate_lighting.exr``, an equirectangular radiance
map in Blender's world axes for a camera looking along +Y with +Z up. This operator
loads it into a World named ``G-Buffer Plate`` (Environment Texture -> Background ->
World Output) and makes it the scene's world, so CG added to the shot sits in the same
light. When the scene has a camera, a Mapping node turns the map by the camera's
orientation at the current frame (the map was estimated in the camera's frame); without
one the map is used as written.
"""
from __future__ import annotations

import math
import os

import bpy

WORLD_NAME = "G-Buffer Plate"
EXR_NAME = "plate_lighting.exr"


def plate_lighting_path(result_dir: str) -> str:
    """``result_dir/plate_lighting.exr`` (absolute); raises FileNotFoundError naming it."""
    path = os.path.join(bpy.path.abspath(result_dir), EXR_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: restyle this shot first (the embedded renderer writes it)")
    return path


def _camera_rotation(scene):
    """Euler rotation turning the map (camera looking along +Y, +Z up) into the scene
    camera's orientation now; identity without a camera."""
    from mathutils import Euler

    cam = scene.camera
    if cam is None:
        return Euler((0.0, 0.0, 0.0))
    level = Euler((math.pi / 2, 0.0, 0.0)).to_matrix()  # a camera looking along +Y, +Z up
    rot = cam.matrix_world.to_3x3().normalized()
    # the Environment Texture looks the map up at M^-1 d for a world direction d: the
    # Mapping node rotates the lookup vector by (level @ rot^-1)
    return (level @ rot.inverted()).to_euler()


def build_world(scene, exr_path: str):
    """Make (or refresh) the ``G-Buffer Plate`` World from ``exr_path`` and assign it."""
    world = bpy.data.worlds.get(WORLD_NAME) or bpy.data.worlds.new(WORLD_NAME)
    if world.node_tree is None:  # Blender 4.x; 5.x worlds always have one (use_nodes deprecated)
        world.use_nodes = True
    nt = world.node_tree
    nt.nodes.clear()
    img = bpy.data.images.load(exr_path, check_existing=True)
    img.reload()
    coord = nt.nodes.new("ShaderNodeTexCoord")
    mapping = nt.nodes.new("ShaderNodeMapping")
    mapping.vector_type = "VECTOR"
    mapping.inputs["Rotation"].default_value = _camera_rotation(scene)
    env = nt.nodes.new("ShaderNodeTexEnvironment")
    env.image = img
    bg = nt.nodes.new("ShaderNodeBackground")
    out = nt.nodes.new("ShaderNodeOutputWorld")
    nt.links.new(coord.outputs["Generated"], mapping.inputs["Vector"])
    nt.links.new(mapping.outputs["Vector"], env.inputs["Vector"])
    nt.links.new(env.outputs["Color"], bg.inputs["Color"])
    nt.links.new(bg.outputs["Background"], out.inputs["Surface"])
    for i, n in enumerate((coord, mapping, env, bg, out)):
        n.location = (i * 220.0 - 440.0, 0.0)
    scene.world = world
    return world


class GBUFFER_OT_world_from_plate(bpy.types.Operator):
    """Make the scene's World from the plate's lighting the last Restyle estimated
    (plate_lighting.exr in its result folder), so CG added to the shot sits in the same light"""

    bl_idname = "gbuffer.world_from_plate"
    bl_label = "World from Plate"
    bl_options = {"REGISTER", "UNDO"}

    directory: bpy.props.StringProperty(name="Result folder", subtype="DIR_PATH",
                                        description="A restyle result folder (default: the last result)")

    def execute(self, context):
        folder = self.directory or context.scene.gbuffer_editor.result_dir
        if not folder:
            self.report({"ERROR"}, "No restyle result yet: run Restyle first")
            return {"CANCELLED"}
        try:
            world = build_world(context.scene, plate_lighting_path(folder))
        except (FileNotFoundError, RuntimeError) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        self.report({"INFO"}, f"World {world.name!r} built from {os.path.join(folder, EXR_NAME)}")
        return {"FINISHED"}


classes = (GBUFFER_OT_world_from_plate,)
