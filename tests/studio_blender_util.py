"""Test-only helpers for opening our EXR frames in Blender's compositor (bpy 4.5 and 5.0):
an Image node's sockets, and a Vector Blur render driven by our Vector pass."""
from __future__ import annotations

import bpy

IS_50 = bpy.app.version >= (5, 0, 0)


def new_scene(name: str, width: int, height: int):
    """A scene with an empty compositor tree at ``width x height``; returns ``(scene, tree)``."""
    sc = bpy.data.scenes.new(name)
    sc.render.resolution_x, sc.render.resolution_y, sc.render.resolution_percentage = width, height, 100
    sc.render.use_sequencer = False
    if IS_50:
        tree = bpy.data.node_groups.new(f"{name} compositor", "CompositorNodeTree")
        sc.compositing_node_group = tree
    else:
        sc.use_nodes = True
        tree = sc.node_tree
        for n in list(tree.nodes):
            tree.nodes.remove(n)
    return sc, tree


def output_socket(tree):
    """The final image input (Group Output on 5.0, Composite on 4.x)."""
    if IS_50:
        node = tree.nodes.new("NodeGroupOutput")
        tree.interface.new_socket("Image", in_out="OUTPUT", socket_type="NodeSocketColor")
        return node.inputs["Image"]
    return tree.nodes.new("CompositorNodeComposite").inputs["Image"]


def image_node(tree, path: str):
    """An Image node on the file at ``path`` (a multilayer file shows its passes)."""
    img = bpy.data.images.load(str(path), check_existing=False)
    node = tree.nodes.new("CompositorNodeImage")
    node.image = img
    return node


def sockets(node) -> dict:
    """Enabled output sockets of a node: name -> type."""
    return {o.name: o.type for o in node.outputs if o.enabled}


def vector_blur(tree, image_socket, depth_socket, speed_socket, samples: int = 32):
    """A Vector Blur node fed by the given sockets (depth: 'Z' on 4.x, 'Depth' on 5.0)."""
    vb = tree.nodes.new("CompositorNodeVecBlur")
    ins = {s.name: s for s in vb.inputs}
    tree.links.new(image_socket, ins["Image"])
    tree.links.new(depth_socket, ins.get("Depth") or ins["Z"])
    tree.links.new(speed_socket, ins["Speed"])
    if "Samples" in ins:
        ins["Samples"].default_value = samples
    elif hasattr(vb, "samples"):
        vb.samples = samples
    return vb


def render_to_exr(scene, path: str) -> None:
    """Render the compositor of ``scene`` to a single-layer float EXR at ``path``."""
    s = scene.render.image_settings
    if hasattr(s, "media_type"):
        s.media_type = "IMAGE"
    s.file_format = "OPEN_EXR"
    s.color_depth = "32"
    scene.render.filepath = str(path)
    with bpy.context.temp_override(scene=scene):
        bpy.ops.render.render(write_still=True, scene=scene.name)
