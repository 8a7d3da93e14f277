"""Blender 4.2/4.5 versus 5.0 differences in the compositor API, in one place.

Every other module builds compositor nodes through these helpers, so the version
checks live here only. Names were verified by introspection (``bl_rna.properties``)
on bpy 4.5.15 and 5.0.1:

============================  ==================================  ===============================
concept                       4.2 / 4.5                           5.0
============================  ==================================  ===============================
scene's compositor tree       ``scene.use_nodes`` +               ``scene.compositing_node_group``
                              ``scene.node_tree``                 (a ``CompositorNodeTree`` data-block)
final output                  ``CompositorNodeComposite``         ``NodeGroupOutput`` + interface socket
value / math nodes            ``CompositorNodeValue`` / ``Math``  ``ShaderNodeValue`` / ``ShaderNodeMath``
File Output folder            ``base_path`` (folder + prefix)     ``directory`` + ``file_name``
File Output inputs            ``layer_slots`` (multilayer) /      ``file_output_items.new(type, name)``
                              ``file_slots``
multilayer EXR                ``format.file_format =              ``format.media_type =
                              'OPEN_EXR_MULTILAYER'``             'MULTI_LAYER_IMAGE'``
written file                  single part, ``Pass.Chan``           multi-part, one part per pass
VSE strips                    ``sequence_editor.sequences``       ``sequence_editor.strips``
Z Combine options             ``use_alpha``, ``use_antialias_z``  input sockets ``Use Alpha``,
                              (sockets of those names too)        ``Anti-Alias``
============================  ==================================  ===============================

Reading the files Blender writes (single- or multi-part, any layer prefix) is done by
:func:`backend.contract.read_frame`, re-exported here as :func:`read_gbuffer_frame`.
"""
from __future__ import annotations

import os

import bpy

#: True on Blender 5.0 and later.
IS_50 = bpy.app.version >= (5, 0, 0)

#: File Output item socket types for the 5.0 API, by contract socket type.
_ITEM_TYPE = {"RGBA": "RGBA", "VALUE": "FLOAT", "VECTOR": "VECTOR"}


def compositor_tree(scene, create: bool = True):
    """The scene's compositor node tree, created (and enabled) when ``create``.

    Returns:
        ``bpy.types.CompositorNodeTree`` or ``None`` when absent and not created.
    """
    if IS_50:
        tree = scene.compositing_node_group
        if tree is None and create:
            tree = bpy.data.node_groups.new(f"{scene.name} Compositor", "CompositorNodeTree")
            scene.compositing_node_group = tree
        return tree
    if scene.node_tree is None or not scene.use_nodes:
        if not create:
            return scene.node_tree
        fresh = scene.node_tree is None
        scene.use_nodes = True
        if fresh:
            # 4.x fills a new tree with Render Layers -> Reroute -> Composite / Viewer; a
            # Render Layers node would make every compositor render also render the 3D scene.
            for node in list(scene.node_tree.nodes):
                if node.bl_idname in {"CompositorNodeRLayers", "NodeReroute"}:
                    scene.node_tree.nodes.remove(node)
    return scene.node_tree


def is_compositor_tree(tree) -> bool:
    """True for a compositor node tree (the type name is the same on both versions)."""
    return tree is not None and getattr(tree, "bl_idname", "") == "CompositorNodeTree"


def output_socket(tree):
    """The input socket that receives the final image (created when missing).

    4.x: the ``Image`` input of a Composite node. 5.0: the ``Image`` input of a Group
    Output node, with an ``Image`` colour socket added to the tree interface.
    """
    if IS_50:
        node = next((n for n in tree.nodes if n.bl_idname == "NodeGroupOutput"), None)
        if node is None:
            node = tree.nodes.new("NodeGroupOutput")
        if not any(
            getattr(i, "in_out", "") == "OUTPUT" and i.name == "Image" for i in tree.interface.items_tree
        ):
            tree.interface.new_socket("Image", in_out="OUTPUT", socket_type="NodeSocketColor")
        return node.inputs["Image"]
    node = next((n for n in tree.nodes if n.bl_idname == "CompositorNodeComposite"), None)
    if node is None:
        node = tree.nodes.new("CompositorNodeComposite")
    return node.inputs["Image"]


def new_value_node(tree, value: float = 0.0, name: str = "Value"):
    """A constant-value node (``CompositorNodeValue`` on 4.x, ``ShaderNodeValue`` on 5.0)."""
    node = tree.nodes.new("ShaderNodeValue" if IS_50 else "CompositorNodeValue")
    node.name = node.label = name
    node.outputs[0].default_value = value
    return node


def new_math_node(tree, operation: str = "ADD"):
    """A math node (``CompositorNodeMath`` on 4.x, ``ShaderNodeMath`` on 5.0)."""
    node = tree.nodes.new("ShaderNodeMath" if IS_50 else "CompositorNodeMath")
    node.operation = operation
    return node


def new_zcombine_node(tree, use_alpha: bool = True, antialias: bool = True):
    """A Z Combine node (inputs by index on both versions: image A, depth A, image B,
    depth B; outputs: image, depth) with its alpha and anti-alias options set."""
    node = tree.nodes.new("CompositorNodeZcombine")
    for prop, socket, value in (("use_alpha", "Use Alpha", use_alpha), ("use_antialias_z", "Anti-Alias", antialias)):
        if socket in node.inputs:  # 5.0 (4.5 lists the sockets too, but reads the properties)
            node.inputs[socket].default_value = value
        if hasattr(node, prop):
            setattr(node, prop, value)
    return node


def new_multilayer_file_output(tree, passes, name: str = "G-buffer output"):
    """A File Output node writing one multilayer OpenEXR (32-bit float, ZIP) per frame.

    Args:
        passes: sequence of ``(pass name, socket type)`` with socket type one of
            ``RGBA``, ``VALUE``, ``VECTOR`` (:data:`backend.contract.PASSES`). Inputs are
            created in this order and named after the passes, so the written layers are
            ``<Pass>.<chan>`` (5.0 writes one part per pass).

    Returns:
        The node; set its folder with :func:`set_file_output_path`.
    """
    node = tree.nodes.new("CompositorNodeOutputFile")
    node.name = node.label = name
    fmt = node.format
    if IS_50:
        fmt.media_type = "MULTI_LAYER_IMAGE"
        node.file_output_items.clear()
        for pass_name, socket_type in passes:
            node.file_output_items.new(_ITEM_TYPE[socket_type], pass_name)
    else:
        fmt.file_format = "OPEN_EXR_MULTILAYER"
        node.layer_slots.clear()
        for pass_name, _ in passes:
            node.layer_slots.new(pass_name)
    fmt.color_depth = "32"
    fmt.exr_codec = "ZIP"
    return node


def file_output_inputs(node) -> dict:
    """Pass name -> input socket of a File Output node (skips 5.0's empty extension socket)."""
    return {s.name: s for s in node.inputs if s.name}


def set_file_output_path(node, directory: str, prefix: str) -> None:
    """Make ``node`` write into ``directory`` with file name ``prefix``.

    Put ``####`` in ``prefix`` for the frame number: both versions then number still
    renders too (5.0 appends no number to a still render otherwise).
    """
    directory = os.path.abspath(bpy.path.abspath(directory))
    if IS_50:
        node.directory = directory + os.sep
        node.file_name = prefix
    else:
        node.base_path = os.path.join(directory, prefix)


def file_output_path(node) -> tuple:
    """``(directory, prefix)`` a File Output node writes to."""
    if IS_50:
        return bpy.path.abspath(node.directory), node.file_name
    d, p = os.path.split(bpy.path.abspath(node.base_path))
    return d, p


def strips(scene):
    """The VSE strip collection of ``scene`` (``strips`` on 5.0, ``sequences`` on 4.x)."""
    se = scene.sequence_editor or scene.sequence_editor_create()
    return se.strips if hasattr(se, "strips") else se.sequences


def read_gbuffer_frame(path):
    """Read a G-buffer EXR written by us or by either Blender version's File Output node.

    Blender 5.0 writes multilayer EXR as multi-part files with channels named
    ``<Pass>.<chan>`` (no layer prefix); 4.x writes a single part. Both are read by
    :func:`backend.contract.read_frame`, which reads every part and finds passes under
    any layer prefix.

    Returns:
        :class:`backend.contract.GBufferFrame` (float32 arrays).

    Raises:
        backend.contract.ContractError: unreadable file or missing pass (names both).
    """
    from ..backend import contract

    return contract.read_frame(path)
