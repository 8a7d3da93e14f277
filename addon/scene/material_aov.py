"""Inject shader AOVs that expose a material's base colour, metallic and roughness.

For every material that the exported view layer can see we add, next to the
surface BSDF, three ``Shader AOV Output`` nodes fed from *whatever feeds the BSDF
inputs* (textures included), plus a constant "mask" AOV of 1 that tells the
exporter which pixels carry material values (and lets it un-premultiply
anti-aliased edges). :class:`MaterialAOVs` removes every node, and every
view-layer AOV it added, on exit, so the .blend is left unchanged.

Mapping from surface shaders to contract values (documented fallback):

=============================  ===================  ==============  ==========
surface shader (first found)   albedo               roughness       metallic
=============================  ===================  ==============  ==========
Principled BSDF                Base Color input     Roughness       Metallic
Diffuse BSDF                   Color input          1.0 (no spec.)  0
Glossy / Anisotropic BSDF      Color input          Roughness       1
Glass / Refraction BSDF        Color input          Roughness       0
Emission, Background, other    0.5 grey             0.5             0
material without nodes (4.x)   0.8 (default)        0.5             0
=============================  ===================  ==============  ==========

"First found" walks from the Material Output's Surface input through Mix/Add
Shader nodes (and reroutes), depth first, first input first, and prefers a
Principled BSDF anywhere in that walk over the other shader types; when only
node groups are found it searches inside them (AOV nodes are then added to the
group's tree, once per group, and removed afterwards). Objects
with no material, or with a material that cannot be edited (linked from a
library), have mask 0 and are given Blender's default surface: albedo 0.8,
roughness 0.5, metallic 0.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import bpy

#: view-layer AOV names (prefixed so they never clash with the user's AOVs)
AOV_ALBEDO = "_gbx_albedo"
AOV_METALLIC = "_gbx_metallic"
AOV_ROUGHNESS = "_gbx_roughness"
AOV_MASK = "_gbx_mask"
AOVS = ((AOV_ALBEDO, "COLOR"), (AOV_METALLIC, "VALUE"), (AOV_ROUGHNESS, "VALUE"), (AOV_MASK, "VALUE"))

#: values used where no material information exists (Blender's default surface)
DEFAULT_ALBEDO = (0.8, 0.8, 0.8)
DEFAULT_ROUGHNESS = 0.5
DEFAULT_METALLIC = 0.0
#: values for emission / unknown shaders
UNKNOWN_ALBEDO = (0.5, 0.5, 0.5)
UNKNOWN_ROUGHNESS = 0.5

# shader node idname -> (colour input, roughness input or constant, metallic constant)
_FALLBACK = {
    "ShaderNodeBsdfDiffuse": ("Color", 1.0, 0.0),
    "ShaderNodeBsdfGlossy": ("Color", "Roughness", 1.0),
    "ShaderNodeBsdfAnisotropic": ("Color", "Roughness", 1.0),
    "ShaderNodeBsdfGlass": ("Color", "Roughness", 0.0),
    "ShaderNodeBsdfRefraction": ("Color", "Roughness", 0.0),
}
_PASS_THROUGH = {"ShaderNodeMixShader", "ShaderNodeAddShader", "NodeReroute"}


def uses_nodes(material) -> bool:
    """Whether ``material`` renders from its node tree (always true in bpy >= 5.0)."""
    if material.node_tree is None:
        return False
    return bpy.app.version >= (5, 0, 0) or bool(material.use_nodes)


def _shader_nodes(socket, seen=None) -> List[bpy.types.Node]:
    """Shader nodes reachable upstream of ``socket`` through mix/add/reroute nodes."""
    seen = set() if seen is None else seen
    out = []
    for link in socket.links:
        if not link.is_valid or link.is_muted:
            continue
        node = link.from_node
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.bl_idname in _PASS_THROUGH:
            for inp in node.inputs:
                if inp.type == "SHADER" or node.bl_idname == "NodeReroute":
                    out.extend(_shader_nodes(inp, seen))
        else:
            out.append(node)
    return out


def _group_output(tree):
    outs = [n for n in tree.nodes if n.bl_idname == "NodeGroupOutput"]
    active = [n for n in outs if getattr(n, "is_active_output", False)]
    return (active or outs or [None])[0]


def _find_bsdf(tree, sockets, depth=0):
    """``(tree, node)``: the defining BSDF upstream of ``sockets``, entering node groups."""
    nodes = []
    seen = set()
    for sock in sockets:
        nodes.extend(_shader_nodes(sock, seen))
    for kind in ("ShaderNodeBsdfPrincipled", *_FALLBACK):
        for n in nodes:
            if n.bl_idname == kind:
                return tree, n
    for n in nodes:
        if n.bl_idname == "ShaderNodeGroup" and n.node_tree is not None and depth < 4:
            gout = _group_output(n.node_tree)
            if gout is not None:
                t, b = _find_bsdf(n.node_tree, [i for i in gout.inputs if i.type == "SHADER"], depth + 1)
                if b is not None and b.bl_idname != "ShaderNodeGroup":
                    return t, b
    return tree, (nodes[0] if nodes else None)


def find_surface_bsdf_in_tree(material):
    """``(node_tree, node)`` of the BSDF that defines the material's G-buffer values.

    The first Principled BSDF reachable from the active Cycles material output's
    Surface input (through Mix/Add Shader and reroute nodes), else the first
    Diffuse/Glossy/Glass-type BSDF, else the same search inside node groups
    (``node_tree`` is then the group's tree), else the first shader node found
    (emission, ...), else ``(tree, None)``.
    """
    tree = material.node_tree
    if tree is None:
        return None, None
    out = tree.get_output_node("CYCLES")
    if out is None:
        return tree, None
    return _find_bsdf(tree, [out.inputs["Surface"]])


def find_surface_bsdf(material) -> Optional[bpy.types.Node]:
    """The BSDF node whose inputs define the material's G-buffer values (see
    :func:`find_surface_bsdf_in_tree`), or ``None``."""
    return find_surface_bsdf_in_tree(material)[1]


def material_sources(material):
    """How albedo, metallic and roughness of ``material`` are obtained.

    Returns:
        ``(tree, sources)``: the node tree holding the sockets (the material's,
        or a node group's) and a dict ``{"albedo": src, "metallic": src,
        "roughness": src}`` where each ``src`` is either an input socket of
        ``tree`` (use its link, or its default value) or a constant (tuple for
        colour, float).
    """
    unknown = {"albedo": UNKNOWN_ALBEDO, "metallic": 0.0, "roughness": UNKNOWN_ROUGHNESS}
    if not uses_nodes(material):
        return None, {
            "albedo": tuple(material.diffuse_color[:3]),
            "metallic": float(material.metallic),
            "roughness": float(material.roughness),
        }
    tree, bsdf = find_surface_bsdf_in_tree(material)
    if bsdf is None or getattr(tree, "library", None) is not None:
        return material.node_tree, unknown
    if bsdf.bl_idname == "ShaderNodeBsdfPrincipled":
        return tree, {
            "albedo": bsdf.inputs["Base Color"],
            "metallic": bsdf.inputs["Metallic"],
            "roughness": bsdf.inputs["Roughness"],
        }
    if bsdf.bl_idname in _FALLBACK:
        col, rough, metal = _FALLBACK[bsdf.bl_idname]
        return tree, {
            "albedo": bsdf.inputs[col],
            "metallic": float(metal),
            "roughness": bsdf.inputs[rough] if isinstance(rough, str) else float(rough),
        }
    return material.node_tree, unknown


def _feed(tree, src, dst_socket, is_colour: bool) -> None:
    """Make ``dst_socket`` carry ``src`` (a socket's link or value, or a constant)."""
    if isinstance(src, bpy.types.NodeSocket):
        live = [l for l in src.links if l.is_valid and not l.is_muted]
        if live:
            tree.links.new(live[0].from_socket, dst_socket)
            return
        val = src.default_value
        if is_colour:
            val = tuple(val)[:3] if hasattr(val, "__len__") else (float(val),) * 3
            dst_socket.default_value = (*val, 1.0)
        else:
            dst_socket.default_value = float(val[0] if hasattr(val, "__len__") else val)
        return
    if is_colour:
        dst_socket.default_value = (*tuple(src)[:3], 1.0)
    else:
        dst_socket.default_value = float(src)


def _materials_in_use(scene, view_layer) -> List[bpy.types.Material]:
    mats = {}
    for ob in view_layer.objects if view_layer is not None else scene.objects:
        for slot in getattr(ob, "material_slots", ()):
            m = slot.material
            if m is not None:
                mats[m.name_full] = m
    return list(mats.values())


class MaterialAOVs:
    """Context manager: inject the G-buffer AOVs into a scene, remove them on exit.

    On enter it
      * adds view-layer AOVs :data:`AOVS` (colour ``_gbx_albedo``; values
        ``_gbx_metallic``, ``_gbx_roughness``, ``_gbx_mask``),
      * adds Shader AOV Output nodes to every editable node-based material used
        by the view layer: the mask AOV in the material, and albedo / metallic /
        roughness next to the surface BSDF (inside its node group when the BSDF
        is in one), linked from the sockets that feed the BSDF inputs.

    On exit it removes exactly the nodes (and so their links) and AOVs it added.
    """

    def __init__(self, scene, view_layer):
        self.scene = scene
        self.view_layer = view_layer
        self._nodes: List[Tuple[bpy.types.Material, str]] = []
        self._aovs: List[str] = []
        self._groups = set()
        self.injected: Dict[str, str] = {}  # material name -> shader kind used

    def __enter__(self):
        try:
            existing = {a.name for a in self.view_layer.aovs}
            for name, typ in AOVS:
                if name in existing:
                    continue
                aov = self.view_layer.aovs.add()
                aov.name = name
                aov.type = typ
                self._aovs.append(aov.name)
            # a view layer's object list is synced lazily: objects linked from Python to a
            # scene that is not the active one are missing from it until an update
            self.view_layer.update()
            for mat in _materials_in_use(self.scene, self.view_layer):
                self._inject(mat)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _add_aov(self, owner, tree, index, name, location):
        node = tree.nodes.new("ShaderNodeOutputAOV")
        node.name = f"_gbx_aov_{index}"
        node.aov_name = name
        node.location = location
        self._nodes.append((owner, node.name))
        return node

    def _inject(self, mat) -> None:
        if mat.library is not None or mat.node_tree is None:
            return
        if not uses_nodes(mat):
            return  # rendered without nodes: no AOV possible; mask stays 0
        mtree = mat.node_tree
        out = mtree.get_output_node("CYCLES")
        if out is None:
            return
        tree, src = material_sources(mat)
        bsdf = find_surface_bsdf(mat)
        self.injected[mat.name_full] = bsdf.bl_idname if bsdf is not None else "none"
        x, y = out.location
        mask = self._add_aov(mat, mtree, 3, AOV_MASK, (x, y - 800))
        mask.inputs["Value"].default_value = 1.0
        if tree is not mtree:  # the BSDF lives in a node group: inject there, once per group
            if tree.name in self._groups:
                return
            self._groups.add(tree.name)
            owner = tree
        else:
            owner = mat
        for i, (name, key) in enumerate(((AOV_ALBEDO, "albedo"), (AOV_METALLIC, "metallic"),
                                         (AOV_ROUGHNESS, "roughness"))):
            node = self._add_aov(owner, tree, i, name, (x, y - 200 * (i + 1)))
            if key == "albedo":
                _feed(tree, src[key], node.inputs["Color"], True)
            else:
                _feed(tree, src[key], node.inputs["Value"], False)

    def __exit__(self, *exc):
        for owner, node_name in reversed(self._nodes):
            tree = owner.node_tree if isinstance(owner, bpy.types.Material) else owner
            node = tree.nodes.get(node_name) if tree is not None else None
            if node is not None:
                tree.nodes.remove(node)
        self._nodes.clear()
        self._groups.clear()
        for name in reversed(self._aovs):
            for aov in self.view_layer.aovs:
                if aov.name == name:
                    self.view_layer.aovs.remove(aov)
                    break
        self._aovs.clear()
        return False
