"""Seeded procedural training scenes for the embedded inverse renderer (bpy side).

:func:`build_scene` clears a Blender scene and fills it, from a numpy random
generator, with one of three layouts:

* ``room``: floor, walls (sometimes a ceiling), furniture-like boxes (tables,
  cabinets, shelves), primitives, pictures on the walls; area / point lights,
  warm or coloured, plus an interior HDR; eye-level camera, depth ~1-10 m.
* ``outdoor``: a flat or displaced terrain with photo or procedural textures,
  scattered buildings, walls, rocks (displaced spheres), trees, poles; an HDR
  environment (visible background) or a physical sky with the sun at a random
  height, or overcast; camera at eye level or drone height, depth up to ~100 m.
* ``tabletop``: a few objects 0.5-5 m away on a textured table / ground, studio
  or room lighting.

Materials are Principled BSDFs whose Base Color, Roughness and Metallic are
driven by procedural textures (noise, voronoi, brick, checker, wave), by
photographs from ``skimage.data`` (box-projected image textures) or constants,
covering dielectrics and metals. :func:`camera_path` gives short camera moves
for clips. Everything is reproducible from the generator's seed.

Realism notes: photographs and the eight CC0 HDR maps shipped with Blender
(``datafiles/studiolights/world``) are used because data realism, not model
size, limited real-image depth accuracy.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import bpy
import numpy as np
from mathutils import Euler, Matrix, Vector

from tools.source_package import checkout_module

# The backend as the extension package's copy, as render_dataset.py imports it (one copy
# of the backend in the process).
srgb_to_linear = checkout_module("backend.colour").srgb_to_linear

#: skimage photographs usable as textures; (name, kind) kind: tile = tileable
#: surface texture, photo = picture. ``stereo_motorcycle`` is excluded: it is an
#: evaluation image.
PHOTOS = (
    ("brick", "tile"), ("grass", "tile"), ("gravel", "tile"), ("coins", "tile"), ("moon", "tile"),
    ("coffee", "photo"), ("astronaut", "photo"), ("rocket", "photo"), ("chelsea", "photo"),
    ("camera", "photo"), ("page", "tile"), ("text", "photo"), ("hubble_deep_field", "photo"),
    ("immunohistochemistry", "tile"), ("clock", "photo"), ("colorwheel", "photo"),
)
SCENE_KINDS = ("room", "outdoor", "tabletop")
SCENE_WEIGHTS = (0.5, 0.32, 0.18)
#: bumped when the generated scenes change (stored in every frame header)
GENERATOR_VERSION = 5


# ----------------------------------------------------------------------------------------
# assets
def hdr_maps() -> List[Path]:
    """The CC0 HDR environment maps shipped with Blender (sorted ``.exr`` paths)."""
    d = Path(bpy.utils.system_resource("DATAFILES")) / "studiolights" / "world"
    return sorted(d.glob("*.exr"))


def photo_image(name: str, cache_dir: os.PathLike):
    """A ``bpy`` image of ``skimage.data.<name>`` (sRGB PNG cached in ``cache_dir``)."""
    img = bpy.data.images.get(f"photo_{name}")
    if img is not None:
        return img
    path = Path(cache_dir) / f"{name}.png"
    if not path.exists():
        import skimage.data
        from PIL import Image

        arr = getattr(skimage.data, name)()
        if arr.dtype != np.uint8:
            arr = (np.clip(arr.astype(np.float64), 0, 1) * 255).astype(np.uint8)
        if arr.ndim == 3 and arr.shape[2] == 4:
            arr = arr[..., :3]
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.png")
        Image.fromarray(arr).save(tmp)
        os.replace(tmp, path)
    img = bpy.data.images.load(str(path), check_existing=True)
    img.name = f"photo_{name}"
    img.colorspace_settings.name = "sRGB"
    img.use_fake_user = True
    return img


def clear_scene(scene) -> None:
    """Remove every object and the data blocks built by previous scenes (images kept)."""
    ids = []
    for coll in (bpy.data.objects, bpy.data.meshes, bpy.data.materials, bpy.data.lights, bpy.data.cameras,
                 bpy.data.worlds, bpy.data.textures, bpy.data.node_groups, bpy.data.curves, bpy.data.actions):
        ids.extend(coll)
    ids.extend(c for c in bpy.data.collections)
    if ids:
        bpy.data.batch_remove(ids)
    for img in list(bpy.data.images):
        if img.users == 0 and not img.use_fake_user:
            bpy.data.images.remove(img)


# ----------------------------------------------------------------------------------------
# helpers
def _u(rng, a, b):
    return float(rng.uniform(a, b))


def _logu(rng, a, b):
    return float(math.exp(rng.uniform(math.log(a), math.log(b))))


def _hsv(h, s, v):
    import colorsys

    return colorsys.hsv_to_rgb(h % 1.0, s, v)


def _srgb_to_lin(c) -> tuple:
    """sRGB-encoded colour -> linear, as a tuple of floats (for socket default values)."""
    return tuple(srgb_to_linear(c).tolist())


def _natural_colour(rng) -> tuple:
    """Linear RGB of a plausible real-world surface colour (mostly desaturated)."""
    r = rng.random()
    if r < 0.45:  # neutral greys / whites / blacks
        v = _u(rng, 0.08, 0.9)
        return _srgb_to_lin(_hsv(_u(rng, 0, 1), _u(rng, 0, 0.08), v))
    if r < 0.8:  # earthy / wood / warm
        return _srgb_to_lin(_hsv(_u(rng, 0.02, 0.14), _u(rng, 0.2, 0.7), _u(rng, 0.2, 0.85)))
    return _srgb_to_lin(_hsv(_u(rng, 0, 1), _u(rng, 0.3, 0.9), _u(rng, 0.2, 0.9)))


METAL_COLOURS = ((0.91, 0.92, 0.92), (0.95, 0.64, 0.54), (1.0, 0.78, 0.34), (0.56, 0.57, 0.58),
                 (0.97, 0.96, 0.91), (0.66, 0.63, 0.58))


# ----------------------------------------------------------------------------------------
# materials
class MaterialFactory:
    """Builds random Principled BSDF materials; ``cache_dir`` holds photo PNGs."""

    def __init__(self, rng, cache_dir):
        self.rng = rng
        self.cache_dir = cache_dir
        self.count = 0

    def _new(self, name):
        self.count += 1
        m = bpy.data.materials.new(f"{name}_{self.count}")
        if bpy.app.version < (5, 0, 0):
            m.use_nodes = True
        tree = m.node_tree
        bsdf = next(n for n in tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
        return m, tree, bsdf

    def _coords(self, tree, scale):
        tc = tree.nodes.new("ShaderNodeTexCoord")
        mp = tree.nodes.new("ShaderNodeMapping")
        mp.inputs["Scale"].default_value = (scale, scale, scale)
        rng = self.rng
        mp.inputs["Location"].default_value = (_u(rng, 0, 10), _u(rng, 0, 10), _u(rng, 0, 10))
        mp.inputs["Rotation"].default_value = (0, 0, _u(rng, 0, 6.28))
        tree.links.new(tc.outputs["Object"], mp.inputs["Vector"])
        return mp.outputs["Vector"]

    def _procedural(self, tree, vec):
        """A random procedural texture; returns (colour-ish output, factor output)."""
        rng = self.rng
        kind = rng.choice(["noise", "voronoi", "brick", "checker", "wave", "noise"])
        if kind == "noise":
            t = tree.nodes.new("ShaderNodeTexNoise")
            t.inputs["Scale"].default_value = _logu(rng, 1, 20)
            t.inputs["Detail"].default_value = _u(rng, 1, 8)
            t.inputs["Roughness"].default_value = _u(rng, 0.4, 0.7)
            fac = t.outputs["Fac"]
        elif kind == "voronoi":
            t = tree.nodes.new("ShaderNodeTexVoronoi")
            t.inputs["Scale"].default_value = _logu(rng, 2, 30)
            fac = t.outputs["Distance"]
        elif kind == "brick":
            t = tree.nodes.new("ShaderNodeTexBrick")
            t.inputs["Scale"].default_value = _logu(rng, 1, 8)
            t.inputs["Color1"].default_value = (*_natural_colour(rng), 1)
            t.inputs["Color2"].default_value = (*_natural_colour(rng), 1)
            t.inputs["Mortar"].default_value = (*_natural_colour(rng), 1)
            fac = t.outputs["Fac"]
        elif kind == "checker":
            t = tree.nodes.new("ShaderNodeTexChecker")
            t.inputs["Scale"].default_value = _logu(rng, 1, 10)
            fac = t.outputs["Fac"]
        else:
            t = tree.nodes.new("ShaderNodeTexWave")
            t.inputs["Scale"].default_value = _logu(rng, 1, 10)
            t.inputs["Distortion"].default_value = _u(rng, 0, 10)
            t.inputs["Detail"].default_value = _u(rng, 0, 6)
            fac = t.outputs["Fac"]
        tree.links.new(vec, t.inputs["Vector"])
        return kind, t, fac

    def _ramp(self, tree, fac, c1, c2):
        ramp = tree.nodes.new("ShaderNodeValToRGB")
        ramp.color_ramp.elements[0].color = (*c1, 1)
        ramp.color_ramp.elements[1].color = (*c2, 1)
        ramp.color_ramp.elements[0].position = _u(self.rng, 0.0, 0.4)
        ramp.color_ramp.elements[1].position = _u(self.rng, 0.6, 1.0)
        tree.links.new(fac, ramp.inputs["Fac"])
        return ramp.outputs["Color"]

    def _map_range(self, tree, fac, lo, hi):
        mr = tree.nodes.new("ShaderNodeMapRange")
        mr.inputs["To Min"].default_value = lo
        mr.inputs["To Max"].default_value = hi
        tree.links.new(fac, mr.inputs["Value"])
        return mr.outputs["Result"]

    def _photo(self, tree, vec, name, tint=None):
        img = photo_image(name, self.cache_dir)
        t = tree.nodes.new("ShaderNodeTexImage")
        t.image = img
        t.projection = "BOX"
        t.projection_blend = 0.25
        tree.links.new(vec, t.inputs["Vector"])
        col = t.outputs["Color"]
        if tint is not None:
            mix = tree.nodes.new("ShaderNodeMix")
            mix.data_type = "RGBA"
            mix.blend_type = "MULTIPLY"
            mix.inputs["Factor"].default_value = 1.0
            tree.links.new(col, mix.inputs[6])
            mix.inputs[7].default_value = (*tint, 1)
            col = mix.outputs[2]
        return col, t

    def _bump(self, tree, bsdf, fac, strength):
        b = tree.nodes.new("ShaderNodeBump")
        b.inputs["Strength"].default_value = strength
        b.inputs["Distance"].default_value = 0.02
        tree.links.new(fac, b.inputs["Height"])
        tree.links.new(b.outputs["Normal"], bsdf.inputs["Normal"])

    def _painted(self, m, tree, bsdf, vec):
        """Painted wall / plaster: light desaturated colour, subtle noise, matte."""
        rng = self.rng
        base = np.array(_srgb_to_lin(_hsv(_u(rng, 0.0, 1.0), _u(rng, 0.0, 0.25) ** 1.5, _u(rng, 0.55, 0.95))))
        noise = tree.nodes.new("ShaderNodeTexNoise")
        noise.inputs["Scale"].default_value = _logu(rng, 2, 40)
        tree.links.new(vec, noise.inputs["Vector"])
        col = self._ramp(tree, noise.outputs["Fac"], tuple(base * _u(rng, 0.85, 0.97)), tuple(np.minimum(base * 1.03, 1)))
        tree.links.new(col, bsdf.inputs["Base Color"])
        bsdf.inputs["Roughness"].default_value = _u(rng, 0.5, 0.95)
        bsdf.inputs["Metallic"].default_value = 0.0
        if rng.random() < 0.5:
            self._bump(tree, bsdf, noise.outputs["Fac"], _u(rng, 0.02, 0.15))
        return m

    def _floor(self, m, tree, bsdf, vec):
        """Wood planks, tiles or carpet."""
        rng = self.rng
        r = rng.random()
        if r < 0.45:  # wood: stretched noise/wave between two browns
            t = tree.nodes.new("ShaderNodeTexWave")
            t.inputs["Scale"].default_value = _u(rng, 1, 6)
            t.inputs["Distortion"].default_value = _u(rng, 2, 12)
            t.inputs["Detail"].default_value = _u(rng, 2, 8)
            tree.links.new(vec, t.inputs["Vector"])
            h, v = _u(rng, 0.04, 0.11), _u(rng, 0.2, 0.75)
            c1 = _srgb_to_lin(_hsv(h, _u(rng, 0.4, 0.75), v))
            c2 = _srgb_to_lin(_hsv(h, _u(rng, 0.4, 0.75), v * _u(rng, 0.5, 0.85)))
            col = self._ramp(tree, t.outputs["Fac"], c2, c1)
            rough = self._map_range(tree, t.outputs["Fac"], _u(rng, 0.15, 0.4), _u(rng, 0.35, 0.7))
        elif r < 0.75:  # tiles
            t = tree.nodes.new("ShaderNodeTexBrick")
            t.inputs["Scale"].default_value = _u(rng, 0.8, 3.0)
            t.inputs["Color1"].default_value = (*_natural_colour(rng), 1)
            c2 = np.array(t.inputs["Color1"].default_value[:3]) * _u(rng, 0.8, 1.0)
            t.inputs["Color2"].default_value = (*c2, 1)
            t.inputs["Mortar"].default_value = (*_srgb_to_lin(_hsv(0, 0, _u(rng, 0.3, 0.9))), 1)
            t.inputs["Mortar Size"].default_value = _u(rng, 0.005, 0.03)
            t.inputs["Brick Width"].default_value = _u(rng, 0.3, 1.0)
            t.inputs["Row Height"].default_value = t.inputs["Brick Width"].default_value * _u(rng, 0.5, 1.0)
            tree.links.new(vec, t.inputs["Vector"])
            col = t.outputs["Color"]
            rough = self._map_range(tree, t.outputs["Fac"], _u(rng, 0.05, 0.4), _u(rng, 0.6, 0.9))
            self._bump(tree, bsdf, t.outputs["Fac"], _u(rng, 0.1, 0.4))
        else:  # carpet
            t = tree.nodes.new("ShaderNodeTexNoise")
            t.inputs["Scale"].default_value = _u(rng, 20, 200)
            tree.links.new(vec, t.inputs["Vector"])
            c = np.array(_natural_colour(rng))
            col = self._ramp(tree, t.outputs["Fac"], tuple(c * 0.7), tuple(c))
            rough = self._map_range(tree, t.outputs["Fac"], 0.85, 1.0)
            self._bump(tree, bsdf, t.outputs["Fac"], _u(rng, 0.2, 0.6))
        tree.links.new(col, bsdf.inputs["Base Color"])
        tree.links.new(rough, bsdf.inputs["Roughness"])
        bsdf.inputs["Metallic"].default_value = 0.0
        return m

    def make(self, role: str = "object", scale: float = 1.0) -> bpy.types.Material:
        """A random material. ``role``: object / floor / wall / ground / picture:NAME.

        ``scale``: texture repeats per metre (roughly).
        """
        rng = self.rng
        m, tree, bsdf = self._new(role.split(":")[0])
        info = {}
        if role.startswith("picture:"):
            name = role.split(":", 1)[1]
            img = photo_image(name, self.cache_dir)
            t = tree.nodes.new("ShaderNodeTexImage")
            t.image = img
            tc = tree.nodes.new("ShaderNodeTexCoord")
            tree.links.new(tc.outputs["UV"], t.inputs["Vector"])
            tree.links.new(t.outputs["Color"], bsdf.inputs["Base Color"])
            bsdf.inputs["Roughness"].default_value = _u(rng, 0.2, 0.7)
            bsdf.inputs["Metallic"].default_value = 0.0
            return m
        vec = self._coords(tree, scale * _logu(rng, 0.5, 2.0))
        if role == "wall" and rng.random() < 0.55:
            return self._painted(m, tree, bsdf, vec)
        if role == "floor" and rng.random() < 0.65:
            return self._floor(m, tree, bsdf, vec)
        r = rng.random()
        metal = rng.random() < (0.08 if role in ("floor", "wall", "ground") else 0.25)
        tile_photos = [n for n, k in PHOTOS if k == "tile"]
        if role == "water":
            bsdf.inputs["Base Color"].default_value = (*_srgb_to_lin(_hsv(_u(rng, 0.4, 0.6), _u(rng, 0.3, 0.8),
                                                                             _u(rng, 0.08, 0.35))), 1)
            bsdf.inputs["Roughness"].default_value = _u(rng, 0.02, 0.15)
            bsdf.inputs["Metallic"].default_value = 0.0
            waves = tree.nodes.new("ShaderNodeTexNoise")
            waves.inputs["Scale"].default_value = _u(rng, 0.5, 4.0)
            waves.inputs["Detail"].default_value = _u(rng, 2, 8)
            tree.links.new(vec, waves.inputs["Vector"])
            self._bump(tree, bsdf, waves.outputs["Fac"], _u(rng, 0.05, 0.3))
            return m
        if role == "ground" and r < 0.6:
            name = rng.choice(["grass", "gravel", "brick", "grass", "gravel", "moon"])
            tint = {"grass": _hsv(_u(rng, 0.2, 0.33), _u(rng, 0.3, 0.7), _u(rng, 0.5, 1.0)),
                    "gravel": _hsv(_u(rng, 0.05, 0.12), _u(rng, 0.0, 0.3), _u(rng, 0.6, 1.0)),
                    "brick": _hsv(_u(rng, 0.0, 0.06), _u(rng, 0.3, 0.6), _u(rng, 0.6, 1.0))}.get(
                name, _hsv(0, 0, _u(rng, 0.5, 1.0)))
            col, _ = self._photo(tree, vec, name, tint=_srgb_to_lin(tint))
            tree.links.new(col, bsdf.inputs["Base Color"])
            bsdf.inputs["Roughness"].default_value = _u(rng, 0.6, 1.0)
            bsdf.inputs["Metallic"].default_value = 0.0
            self._bump(tree, bsdf, col, _u(rng, 0.05, 0.4))
            return m
        if r < 0.35:  # photograph texture
            names = tile_photos if role in ("floor", "wall") or rng.random() < 0.5 else [n for n, _ in PHOTOS]
            name = str(rng.choice(names))
            tint = None if rng.random() < 0.5 else _natural_colour(rng)
            col, _ = self._photo(tree, vec, name, tint=tint)
            tree.links.new(col, bsdf.inputs["Base Color"])
            if rng.random() < 0.5:
                tree.links.new(self._map_range(tree, col, _u(rng, 0.1, 0.6), _u(rng, 0.5, 1.0)),
                               bsdf.inputs["Roughness"])
            else:
                bsdf.inputs["Roughness"].default_value = _u(rng, 0.2, 1.0)
            bsdf.inputs["Metallic"].default_value = 1.0 if metal else 0.0
            if rng.random() < 0.4:
                self._bump(tree, bsdf, col, _u(rng, 0.05, 0.3))
        elif r < 0.75:  # procedural
            kind, tex, fac = self._procedural(tree, vec)
            if kind == "brick":
                col = tex.outputs["Color"]
            else:
                if metal:
                    c1 = METAL_COLOURS[rng.integers(len(METAL_COLOURS))]
                    c2 = tuple(np.clip(np.array(c1) * _u(rng, 0.5, 1.0), 0, 1))
                else:
                    c1, c2 = _natural_colour(rng), _natural_colour(rng)
                col = self._ramp(tree, fac, c1, c2)
            tree.links.new(col, bsdf.inputs["Base Color"])
            # roughness from a second texture (or the same), metallic maybe masked
            kind2, tex2, fac2 = self._procedural(tree, vec)
            tree.links.new(self._map_range(tree, fac2, _u(rng, 0.05, 0.5), _u(rng, 0.4, 1.0)),
                           bsdf.inputs["Roughness"])
            if metal and rng.random() < 0.3:  # rusty / painted metal: metallic mask
                tree.links.new(self._map_range(tree, fac, 0.0, 1.0), bsdf.inputs["Metallic"])
            else:
                bsdf.inputs["Metallic"].default_value = 1.0 if metal else 0.0
            if rng.random() < 0.5:
                self._bump(tree, bsdf, fac, _u(rng, 0.05, 0.5))
            info["tex"] = kind
        else:  # plain
            if metal:
                bsdf.inputs["Base Color"].default_value = (*METAL_COLOURS[rng.integers(len(METAL_COLOURS))], 1)
                bsdf.inputs["Metallic"].default_value = 1.0
                bsdf.inputs["Roughness"].default_value = _u(rng, 0.05, 0.6)
            else:
                bsdf.inputs["Base Color"].default_value = (*_natural_colour(rng), 1)
                bsdf.inputs["Metallic"].default_value = 0.0
                bsdf.inputs["Roughness"].default_value = _u(rng, 0.1, 1.0)
        return m


# ----------------------------------------------------------------------------------------
# geometry
def _link(obj, mat):
    obj.data.materials.clear()
    obj.data.materials.append(mat)
    return obj


def _box(name, size, loc, rot_z=0.0, mat=None):
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=loc, rotation=(0, 0, rot_z))
    ob = bpy.context.active_object
    ob.name = name
    ob.scale = size
    if mat is not None:
        _link(ob, mat)
    return ob


def _smooth(ob):
    for p in ob.data.polygons:
        p.use_smooth = True


def _primitive(rng, loc, size, mat):
    kind = rng.choice(["cube", "sphere", "cylinder", "cone", "torus", "ico", "monkey"])
    if kind == "cube":
        ob = _box("prim", (size * _u(rng, 0.5, 1.5), size * _u(rng, 0.5, 1.5), size * _u(rng, 0.5, 1.5)),
                  (loc[0], loc[1], 0), rot_z=_u(rng, 0, 6.28))
        ob.location.z = loc[2] + ob.scale.z / 2
    elif kind == "sphere":
        bpy.ops.mesh.primitive_uv_sphere_add(radius=size / 2, location=(loc[0], loc[1], loc[2] + size / 2),
                                             segments=32, ring_count=16)
        ob = bpy.context.active_object
        _smooth(ob)
    elif kind == "cylinder":
        h = size * _u(rng, 0.5, 2.5)
        bpy.ops.mesh.primitive_cylinder_add(radius=size / 2, depth=h, location=(loc[0], loc[1], loc[2] + h / 2),
                                            vertices=32)
        ob = bpy.context.active_object
    elif kind == "cone":
        h = size * _u(rng, 0.7, 2.0)
        bpy.ops.mesh.primitive_cone_add(radius1=size / 2, depth=h, location=(loc[0], loc[1], loc[2] + h / 2),
                                        vertices=32)
        ob = bpy.context.active_object
    elif kind == "torus":
        bpy.ops.mesh.primitive_torus_add(major_radius=size / 2, minor_radius=size / 6,
                                         location=(loc[0], loc[1], loc[2] + size / 6),
                                         rotation=(_u(rng, -0.3, 0.3), 0, 0))
        ob = bpy.context.active_object
        _smooth(ob)
    elif kind == "monkey":
        bpy.ops.mesh.primitive_monkey_add(size=size, location=(loc[0], loc[1], loc[2] + size / 2),
                                          rotation=(0, 0, _u(rng, 0, 6.28)))
        ob = bpy.context.active_object
        sub = ob.modifiers.new("sub", "SUBSURF")
        sub.levels = sub.render_levels = 1
        _smooth(ob)
    else:  # displaced ico sphere: rock / blob
        ob = _rock(rng, (loc[0], loc[1], loc[2] + size * 0.35), size / 2)
    _link(ob, mat)
    return ob


def _rock(rng, loc, radius):
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=4, radius=radius, location=loc)
    ob = bpy.context.active_object
    ob.scale = (_u(rng, 0.7, 1.4), _u(rng, 0.7, 1.4), _u(rng, 0.4, 1.0))
    tex = bpy.data.textures.new("rock_tex", "CLOUDS")
    tex.noise_scale = _u(rng, 0.3, 1.0) * radius
    tex.noise_depth = 2
    d = ob.modifiers.new("disp", "DISPLACE")
    d.texture = tex
    d.texture_coords = "OBJECT"
    d.strength = radius * _u(rng, 0.2, 0.6)
    d.mid_level = 0.5
    _smooth(ob)
    return ob


def _terrain(rng, size, mat, amplitude):
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=96, y_subdivisions=96, size=size, location=(0, 0, 0))
    ob = bpy.context.active_object
    if amplitude > 0:
        tex = bpy.data.textures.new("terrain_tex", "CLOUDS")
        tex.noise_scale = _u(rng, 8, 30)
        tex.noise_depth = 2
        d = ob.modifiers.new("disp", "DISPLACE")
        d.texture = tex
        d.texture_coords = "GLOBAL"
        d.strength = amplitude
        d.mid_level = 0.5
    _smooth(ob)
    _link(ob, mat)
    return ob


def _table(rng, loc, mats, rot_z):
    w, d, h = _u(rng, 0.8, 2.0), _u(rng, 0.6, 1.2), _u(rng, 0.7, 0.8)
    top_t = _u(rng, 0.03, 0.06)
    mat = mats.make("object", 2.0)
    c, s = math.cos(rot_z), math.sin(rot_z)
    obs = [_box("table_top", (w, d, top_t), (loc[0], loc[1], h - top_t / 2), rot_z, mat)]
    leg = _u(rng, 0.04, 0.08)
    legmat = mat if rng.random() < 0.6 else mats.make("object", 2.0)
    for sx in (-1, 1):
        for sy in (-1, 1):
            dx, dy = sx * (w / 2 - leg), sy * (d / 2 - leg)
            obs.append(_box("table_leg", (leg, leg, h - top_t),
                            (loc[0] + c * dx - s * dy, loc[1] + s * dx + c * dy, (h - top_t) / 2), rot_z, legmat))
    return obs, h


def _local(loc, rot_z, dx, dy):
    c, s = math.cos(rot_z), math.sin(rot_z)
    return loc[0] + c * dx - s * dy, loc[1] + s * dx + c * dy


def _sofa(rng, loc, mats, rot_z):
    w, d = _u(rng, 1.4, 2.4), _u(rng, 0.8, 1.0)
    seat_h, back_h, arm = _u(rng, 0.35, 0.5), _u(rng, 0.35, 0.5), _u(rng, 0.1, 0.25)
    mat = mats.make("object", 3.0)
    _box("sofa_seat", (w, d, seat_h), (*_local(loc, rot_z, 0, 0), seat_h / 2), rot_z, mat)
    _box("sofa_back", (w, 0.2, back_h), (*_local(loc, rot_z, 0, d / 2 - 0.1), seat_h + back_h / 2), rot_z, mat)
    for sx in (-1, 1):
        _box("sofa_arm", (arm, d, seat_h + 0.2), (*_local(loc, rot_z, sx * (w / 2 - arm / 2), 0), (seat_h + 0.2) / 2),
             rot_z, mat)
    return seat_h + back_h


def _chair(rng, loc, mats, rot_z):
    s, h = _u(rng, 0.4, 0.55), _u(rng, 0.42, 0.5)
    mat = mats.make("object", 3.0)
    _box("chair_seat", (s, s, 0.05), (*_local(loc, rot_z, 0, 0), h), rot_z, mat)
    _box("chair_back", (s, 0.04, _u(rng, 0.4, 0.6)), (*_local(loc, rot_z, 0, s / 2), h + 0.25), rot_z, mat)
    for sx in (-1, 1):
        for sy in (-1, 1):
            _box("chair_leg", (0.04, 0.04, h), (*_local(loc, rot_z, sx * (s / 2 - 0.03), sy * (s / 2 - 0.03)), h / 2),
                 rot_z, mat)


def _bookshelf(rng, loc, mats, rot_z):
    w, d, h = _u(rng, 0.6, 1.6), _u(rng, 0.25, 0.4), _u(rng, 1.0, 2.2)
    frame = mats.make("object", 2.0)
    n_shelves = int(rng.integers(3, 6))
    t = 0.03
    for sx in (-1, 1):
        _box("shelf_side", (t, d, h), (*_local(loc, rot_z, sx * (w / 2 - t / 2), 0), h / 2), rot_z, frame)
    _box("shelf_back", (w, t, h), (*_local(loc, rot_z, 0, d / 2 - t / 2), h / 2), rot_z, frame)
    for k in range(n_shelves + 1):
        z = k * (h - t) / n_shelves + t / 2
        _box("shelf_board", (w, d, t), (*_local(loc, rot_z, 0, 0), z), rot_z, frame)
        if k == n_shelves:
            break
        gap = (h - t) / n_shelves - t
        x = -w / 2 + t
        book_mats = [mats.make("object", 8.0) for _ in range(3)]
        while x < w / 2 - t - 0.05 and rng.random() < 0.93:
            bw = _u(rng, 0.02, 0.07)
            bh = gap * _u(rng, 0.6, 0.95)
            _box("book", (bw, d * _u(rng, 0.6, 0.9), bh), (*_local(loc, rot_z, x + bw / 2, 0), z + t / 2 + bh / 2),
                 rot_z, book_mats[int(rng.integers(3))])
            x += bw + _u(rng, 0.0, 0.05)
    return h


def _shelf(rng, loc, mats, rot_z):
    w, d, h = _u(rng, 0.6, 2.0), _u(rng, 0.3, 0.6), _u(rng, 0.8, 2.2)
    mat = mats.make("object", 2.0)
    return [_box("cabinet", (w, d, h), (loc[0], loc[1], h / 2), rot_z, mat)], h


# ----------------------------------------------------------------------------------------
# lighting
def _world_hdr(rng, world, path, strength, rotation):
    tree = world.node_tree
    tree.nodes.clear()
    env = tree.nodes.new("ShaderNodeTexEnvironment")
    env.image = bpy.data.images.load(str(path), check_existing=True)
    env.image.use_fake_user = True
    tc = tree.nodes.new("ShaderNodeTexCoord")
    mp = tree.nodes.new("ShaderNodeMapping")
    mp.inputs["Rotation"].default_value = (0, 0, rotation)
    bg = tree.nodes.new("ShaderNodeBackground")
    bg.inputs["Strength"].default_value = strength
    out = tree.nodes.new("ShaderNodeOutputWorld")
    tree.links.new(tc.outputs["Generated"], mp.inputs["Vector"])
    tree.links.new(mp.outputs["Vector"], env.inputs["Vector"])
    tree.links.new(env.outputs["Color"], bg.inputs["Color"])
    tree.links.new(bg.outputs["Background"], out.inputs["Surface"])


def sky_types() -> List[str]:
    """Physical sky models available in this bpy (5.0: MULTIPLE/SINGLE_SCATTERING; 4.x: NISHITA)."""
    probe = bpy.data.worlds.new("_probe")
    if bpy.app.version < (5, 0, 0):
        probe.use_nodes = True
    n = probe.node_tree.nodes.new("ShaderNodeTexSky")
    items = list(n.bl_rna.properties["sky_type"].enum_items.keys())
    bpy.data.worlds.remove(probe)
    return [k for k in ("MULTIPLE_SCATTERING", "SINGLE_SCATTERING", "NISHITA") if k in items]


def _world_sky(rng, world, elevation, rotation, strength):
    tree = world.node_tree
    tree.nodes.clear()
    sky = tree.nodes.new("ShaderNodeTexSky")
    types = sky_types()
    sky.sky_type = str(rng.choice(types))
    sky.sun_elevation = elevation
    sky.sun_rotation = rotation
    if hasattr(sky, "air_density"):
        sky.air_density = _u(rng, 0.5, 2.0)
    if hasattr(sky, "aerosol_density"):
        sky.aerosol_density = _u(rng, 0.5, 3.0)
    elif hasattr(sky, "dust_density"):
        sky.dust_density = _u(rng, 0.5, 3.0)
    bg = tree.nodes.new("ShaderNodeBackground")
    bg.inputs["Strength"].default_value = strength
    out = tree.nodes.new("ShaderNodeOutputWorld")
    tree.links.new(sky.outputs["Color"], bg.inputs["Color"])
    tree.links.new(bg.outputs["Background"], out.inputs["Surface"])
    return sky.sky_type


def _world_flat(world, colour, strength):
    tree = world.node_tree
    tree.nodes.clear()
    bg = tree.nodes.new("ShaderNodeBackground")
    bg.inputs["Color"].default_value = (*colour, 1)
    bg.inputs["Strength"].default_value = strength
    out = tree.nodes.new("ShaderNodeOutputWorld")
    tree.links.new(bg.outputs["Background"], out.inputs["Surface"])


def _light(kind, loc, energy, colour, size=0.5, rot=(0, 0, 0)):
    data = bpy.data.lights.new(f"light_{kind}", kind)
    data.energy = energy
    data.color = colour
    if kind == "AREA":
        data.size = size
    elif kind in ("POINT", "SPOT"):
        data.shadow_soft_size = size
    elif kind == "SUN":
        data.angle = size
    ob = bpy.data.objects.new(f"light_{kind}", data)
    ob.location = loc
    ob.rotation_euler = rot
    bpy.context.scene.collection.objects.link(ob)
    return ob


def _light_colour(rng):
    r = rng.random()
    if r < 0.55:  # white-ish / warm / cool
        return tuple(_hsv(_u(rng, 0.05, 0.12) if rng.random() < 0.7 else _u(rng, 0.55, 0.62), _u(rng, 0, 0.35), 1))
    if r < 0.8:
        return (1.0, 1.0, 1.0)
    return tuple(_hsv(_u(rng, 0, 1), _u(rng, 0.4, 0.9), 1))  # coloured


# ----------------------------------------------------------------------------------------
# layouts
def _new_world(scene):
    w = bpy.data.worlds.new("world")
    if bpy.app.version < (5, 0, 0):
        w.use_nodes = True
    scene.world = w
    return w


def _wall_with_window(rng, name, size, loc, mat):
    """A wall box (``size``, centred at ``loc``, thin along x or y) with a window
    opening, built from four boxes around the hole. Returns the opening's centre."""
    sx, sy, sz = size
    along_x = sx > sy  # the wall spans x (thin in y) or spans y (thin in x)
    length, thick = (sx, sy) if along_x else (sy, sx)
    ww = _u(rng, 0.8, min(2.5, length * 0.5))
    wh = _u(rng, 0.8, min(1.8, sz - 0.9))
    uc = _u(rng, -length / 2 + ww / 2 + 0.3, length / 2 - ww / 2 - 0.3)
    z_lo, z_hi = 0.7 + wh / 2, sz - 0.2 - wh / 2
    zc = _u(rng, z_lo, max(z_lo, z_hi))
    z0 = loc[2] - sz / 2
    # (u centre, u size, z centre, z size) of the four pieces
    pieces = [
        ((-length / 2 + uc - ww / 2) / 2, uc - ww / 2 + length / 2, sz / 2, sz),  # left
        ((uc + ww / 2 + length / 2) / 2, length / 2 - uc - ww / 2, sz / 2, sz),  # right
        (uc, ww, (zc - wh / 2) / 2, zc - wh / 2),  # below
        (uc, ww, (zc + wh / 2 + sz) / 2, sz - zc - wh / 2),  # above
    ]
    for k, (u, us, z, zs) in enumerate(pieces):
        if us <= 1e-3 or zs <= 1e-3:
            continue
        if along_x:
            _box(f"{name}_{k}", (us, thick, zs), (loc[0] + u, loc[1], z0 + z), 0, mat)
        else:
            _box(f"{name}_{k}", (thick, us, zs), (loc[0], loc[1] + u, z0 + z), 0, mat)
    return (loc[0] + uc, loc[1], z0 + zc) if along_x else (loc[0], loc[1] + uc, z0 + zc)


def _rgbd_camera_xy(rng, W, D):
    """RGB-D-capture framing: a point with 0.6 m clearance, and the yaw of one wall it
    faces (+-25 deg) at 1.2-4.5 m; falls back to the farthest wall."""
    x, y = _u(rng, -W / 2 + 0.6, W / 2 - 0.6), _u(rng, -D / 2 + 0.6, D / 2 - 0.6)
    # Blender camera at yaw 0 looks along +Y; yaw a looks along (-sin a, cos a)
    walls = [(0.0, D / 2 - y), (math.pi, y + D / 2), (-math.pi / 2, W / 2 - x), (math.pi / 2, x + W / 2)]
    ok = [wall for wall in walls if 1.2 <= wall[1] <= 4.5]
    yaw, _dist = ok[int(rng.integers(len(ok)))] if ok else max(walls, key=lambda wall: wall[1])
    return (x, y), yaw + _u(rng, -0.45, 0.45)


def _build_room(rng, scene, mats, hdrs, camera_style: str = "default"):
    W, D, H = _u(rng, 3, 9), _u(rng, 3, 10), _u(rng, 2.4, 3.6)
    floor_mat = mats.make("floor", 1.0)
    wall_mat = mats.make("wall", 0.7)
    t = 0.1
    _box("floor", (W + 2 * t, D + 2 * t, t), (0, 0, -t / 2), 0, floor_mat)
    walls = [((W + 2 * t, t, H), (0, D / 2 + t / 2, H / 2)), ((W + 2 * t, t, H), (0, -D / 2 - t / 2, H / 2)),
             ((t, D, H), (W / 2 + t / 2, 0, H / 2)), ((t, D, H), (-W / 2 - t / 2, 0, H / 2))]
    windows = []
    for i, (size, loc) in enumerate(walls):
        mat = wall_mat if rng.random() < 0.8 else mats.make("wall", 0.7)
        if i != 1 and rng.random() < 0.3:  # a window (never in the wall behind the camera)
            windows.append(_wall_with_window(rng, f"wall{i}", size, loc, mat))
        else:
            _box(f"wall{i}", size, loc, 0, mat)
    ceiling = rng.random() < 0.6
    if ceiling:
        _box("ceiling", (W + 2 * t, D + 2 * t, t), (0, 0, H + t / 2), 0, mats.make("wall", 0.5))
    # pictures on walls (photographs)
    for _ in range(int(rng.integers(0, 4))):
        name = str(rng.choice(["coffee", "astronaut", "rocket", "chelsea", "camera", "hubble_deep_field",
                               "clock", "text", "page", "colorwheel"]))
        pw, ph = _u(rng, 0.4, 1.4), _u(rng, 0.3, 1.0)
        side = int(rng.integers(4))
        z = _u(rng, 1.0, min(H - 0.3, 2.2))
        if side < 2:
            y = (D / 2 - 0.01) * (1 if side == 0 else -1)
            loc, rot = (_u(rng, -W / 2 + pw, W / 2 - pw), y, z), (math.pi / 2, 0, 0 if side == 1 else math.pi)
        else:
            x = (W / 2 - 0.01) * (1 if side == 2 else -1)
            loc, rot = (x, _u(rng, -D / 2 + pw, D / 2 - pw), z), (math.pi / 2, 0, math.pi / 2 if side == 2 else -math.pi / 2)
        bpy.ops.mesh.primitive_plane_add(size=1.0, location=loc, rotation=rot)
        ob = bpy.context.active_object
        ob.scale = (pw, ph, 1)
        _link(ob, mats.make(f"picture:{name}"))
    # furniture along walls and in the room
    if camera_style == "rgbd":
        cam_xy, rgbd_yaw = _rgbd_camera_xy(rng, W, D)
    else:
        cam_xy = (_u(rng, -W / 2 + 0.6, W / 2 - 0.6) * 0.6, -D / 2 + _u(rng, 0.5, min(2.0, D / 2)))
    n_items = int(rng.integers(5, 14))
    for _ in range(n_items):
        for _try in range(10):
            x, y = _u(rng, -W / 2 + 0.4, W / 2 - 0.4), _u(rng, -D / 2 + 0.4, D / 2 - 0.4)
            if math.hypot(x - cam_xy[0], y - cam_xy[1]) > 1.2:
                break
        r = rng.random()
        rot_z = float(rng.choice([0, math.pi / 2, math.pi, -math.pi / 2])) + _u(rng, -0.2, 0.2)
        if r < 0.22:
            obs, h = _table(rng, (x, y), mats, rot_z)
            for _ in range(int(rng.integers(0, 4))):  # things on the table
                _primitive(rng, (x + _u(rng, -0.3, 0.3), y + _u(rng, -0.2, 0.2), h), _u(rng, 0.08, 0.35),
                           mats.make("object", 4.0))
            for k in range(int(rng.integers(0, 4))):  # chairs around it
                a = rot_z + k * math.pi / 2
                _chair(rng, (x + 0.8 * math.sin(a), y - 0.8 * math.cos(a)), mats, a)
        elif r < 0.37:
            _shelf(rng, (x, y), mats, rot_z)
        elif r < 0.52:
            _sofa(rng, (x, y), mats, rot_z)
        elif r < 0.65:
            _chair(rng, (x, y), mats, rot_z)
        elif r < 0.8:
            _primitive(rng, (x, y, 0), _u(rng, 0.2, 1.0), mats.make("object", 2.0))
        else:
            _rock(rng, (x, y, 0.1), _u(rng, 0.1, 0.4))
            _link(bpy.context.active_object, mats.make("object", 3.0))
    # against the walls: bookshelves, cabinets, doors, rug
    for _ in range(int(rng.integers(0, 4))):
        side = int(rng.integers(4))
        if side < 2:
            along = _u(rng, -W / 2 + 0.8, W / 2 - 0.8)
            pos, rot_z = (along, (D / 2 - 0.25) * (1 if side == 0 else -1)), (0.0 if side == 0 else math.pi)
        else:
            along = _u(rng, -D / 2 + 0.8, D / 2 - 0.8)
            pos, rot_z = (((W / 2 - 0.25) * (1 if side == 2 else -1)), along), (-math.pi / 2 if side == 2 else math.pi / 2)
        if math.hypot(pos[0] - cam_xy[0], pos[1] - cam_xy[1]) < 1.0:
            continue
        if rng.random() < 0.6:
            _bookshelf(rng, pos, mats, rot_z)
        else:
            _shelf(rng, pos, mats, rot_z)
    if rng.random() < 0.5:  # door on the far wall
        dw = _u(rng, 0.8, 1.0)
        _box("door", (dw, 0.06, 2.05), (_u(rng, -W / 2 + 0.6, W / 2 - 0.6), D / 2 - 0.02, 1.025), 0,
             mats.make("object", 2.0))
    if rng.random() < 0.4:  # rug
        _box("rug", (_u(rng, 1, 3), _u(rng, 1, 3), 0.01), (_u(rng, -1, 1), _u(rng, -1, 2), 0.005),
             _u(rng, -0.3, 0.3), mats.make("floor", 3.0))
    if rng.random() < 0.5:  # baseboards
        bmat = mats.make("wall", 1.0)
        for size, loc in ((W, D / 2 - 0.01), (W, -D / 2 + 0.01)):
            _box("baseboard", (size, 0.02, 0.08), (0, loc, 0.04), 0, bmat)
    # lights
    col = _light_colour(rng)
    lights = {"colour": list(col)}
    if ceiling or rng.random() < 0.5:
        for _ in range(int(rng.integers(1, 4))):
            kind = "AREA" if rng.random() < 0.6 else "POINT"
            loc = (_u(rng, -W / 2 + 0.5, W / 2 - 0.5), _u(rng, -D / 2 + 0.5, D / 2 - 0.5), H - 0.05)
            _light(kind, loc, _u(rng, 100, 600) * (1 if kind == "AREA" else 0.6),
                   col if rng.random() < 0.8 else _light_colour(rng), size=_u(rng, 0.3, 1.5))
    world = _new_world(scene)
    if rng.random() < 0.75:
        hdr = hdrs[int(rng.integers(len(hdrs)))]
        dim = 0.4 if ceiling and not windows else 1.0
        _world_hdr(rng, world, hdr, _u(rng, 0.3, 1.5) * dim, _u(rng, 0, 6.28))
        lights["world"] = hdr.stem
    else:
        _world_flat(world, _light_colour(rng), _u(rng, 0.2, 1.0))
        lights["world"] = "flat"
    lights["windows"] = len(windows)
    if (not ceiling or windows) and rng.random() < 0.5:
        _light("SUN", (0, 0, 10), _u(rng, 1, 4), _light_colour(rng), size=0.05,
               rot=(_u(rng, 0.1, 0.9), 0, _u(rng, 0, 6.28)))
    # camera: eye level near one wall, looking into the room
    height = _u(rng, 1.1, 1.8) if rng.random() < 0.85 else _u(rng, 0.4, min(2.2, H - 0.3))
    # look at a point in the far half of the room (mostly across it, not into a wall)
    tx, ty = _u(rng, -W / 2, W / 2) * 0.7, _u(rng, 0.0, D / 2)
    yaw = math.atan2(-(tx - cam_xy[0]), ty - cam_xy[1]) + _u(rng, -0.15, 0.15)
    pitch = _u(rng, -0.4, 0.05)
    cam = dict(loc=(cam_xy[0], cam_xy[1], height), yaw=yaw, pitch=pitch, roll=_u(rng, -0.05, 0.05),
               lens=_u(rng, 18, 36), max_step=0.12)
    if camera_style == "rgbd":  # hand-held RGB-D capture: eye level, toward a wall, ~60 deg FOV
        cam.update(loc=(cam_xy[0], cam_xy[1], _u(rng, 1.0, 1.7)), yaw=rgbd_yaw, pitch=_u(rng, -0.5, -0.05),
                   lens=_u(rng, 28, 34), max_step=0.05)
    return {"layout": "room", "camera_style": camera_style, "size": [W, D, H], "ceiling": ceiling, "lights": lights,
            "world": lights["world"]}, cam


def _build_outdoor(rng, scene, mats, hdrs):
    water = rng.random() < 0.15
    if water:  # lake / sea / harbour: calm opaque water surface, boats, a far shore
        amp = 0.0
        _terrain(rng, 400.0, mats.make("water", _logu(rng, 0.3, 1.5)), 0.0)
        for _ in range(int(rng.integers(1, 5))):
            dist, ang = _logu(rng, 8, 80), _u(rng, -0.8, 0.8)
            L = _u(rng, 3, 15)
            _box("boat", (L, L * _u(rng, 0.25, 0.4), _u(rng, 0.8, 2.5)),
                 (dist * math.sin(ang), dist * math.cos(ang), 0.3), _u(rng, 0, 6.28), mats.make("object", 1.0))
        shore = _u(rng, 60, 180)
        _box("shore", (600, 40, _u(rng, 1, 6)), (0, shore + 20, 0), _u(rng, -0.2, 0.2),
                              mats.make("ground", 0.5))
    else:
        amp = 0.0 if rng.random() < 0.45 else _u(rng, 0.3, 4.0)
        _terrain(rng, 400.0, mats.make("ground", _logu(rng, 0.3, 1.5)), amp)
    street = (not water) and rng.random() < 0.35
    n = int(rng.integers(6, 30))
    info = {"layout": "outdoor", "terrain_amp": amp, "street": street, "water": water}
    for i in range(n):
        if street:
            side = 1 if i % 2 else -1
            x = side * _u(rng, 5, 12)
            y = _u(rng, 3, 90)
        else:
            dist = _logu(rng, 3, 90)
            ang = _u(rng, -1.2, 1.2)
            x, y = dist * math.sin(ang), dist * math.cos(ang)
            if water:
                y = shore + _u(rng, 2, 30)
        r = rng.random()
        z = -0.3 if amp > 0 else 0.0
        if r < (0.5 if street else 0.2):  # building
            w, d, h = _u(rng, 4, 15), _u(rng, 4, 15), _logu(rng, 3, 30)
            _box("building", (w, d, h), (x + side * w / 2 if street else x, y, z + h / 2),
                 0 if street else _u(rng, 0, 6.28), mats.make("wall", 0.3))
        elif r < 0.45:  # rock
            ob = _rock(rng, (x, y, z + 0.2), _logu(rng, 0.3, 3))
            _link(ob, mats.make("object", 1.0))
        elif r < 0.7:  # tree: trunk + crown
            h = _u(rng, 2, 10)
            bpy.ops.mesh.primitive_cylinder_add(radius=_u(rng, 0.1, 0.4), depth=h, location=(x, y, z + h / 2),
                                                vertices=12)
            _link(bpy.context.active_object, mats.make("object", 2.0))
            crown = _rock(rng, (x, y, z + h), _u(rng, 1, 3.5))
            _link(crown, mats.make("ground", 2.0))
        elif r < 0.8:  # wall / fence
            L = _u(rng, 3, 20)
            _box("wall", (L, _u(rng, 0.1, 0.5), _u(rng, 0.5, 3)), (x, y, z + 0.75), _u(rng, 0, 6.28),
                 mats.make("wall", 0.5))
        else:
            _primitive(rng, (x, y, z), _u(rng, 0.5, 3), mats.make("object", 1.0))
    world = _new_world(scene)
    r = rng.random()
    if r < 0.55:
        hdr = hdrs[int(rng.integers(len(hdrs)))]
        _world_hdr(rng, world, hdr, _u(rng, 0.5, 2.0), _u(rng, 0, 6.28))
        info["world"] = hdr.stem
        if rng.random() < 0.4:
            _light("SUN", (0, 0, 10), _u(rng, 1, 5), _light_colour(rng), size=0.02,
                   rot=(_u(rng, 0.2, 1.2), 0, _u(rng, 0, 6.28)))
    elif r < 0.85:
        elev = _u(rng, 0.03, 1.2)
        info["world"] = _world_sky(rng, world, elev, _u(rng, 0, 6.28), _u(rng, 0.2, 1.0))
        info["sun_elevation"] = elev
    else:  # overcast
        g = _u(rng, 0.6, 1.0)
        _world_flat(world, (g, g * _u(rng, 0.97, 1.0), g * _u(rng, 0.97, 1.06)), _u(rng, 0.5, 2.0))
        info["world"] = "overcast"
    if rng.random() < 0.85:
        height = _u(rng, 1.2, 2.0)
    else:
        height = _logu(rng, 3, 20)
    cam = dict(loc=(street and _u(rng, -2, 2) or 0.0, 0.0, height + (amp * 0.5 if amp else 0.0)),
               yaw=_u(rng, -0.3, 0.3), pitch=_u(rng, -0.15, 0.1) - (0.3 if height > 3 else 0.0),
               roll=_u(rng, -0.04, 0.04), lens=_u(rng, 18, 50), max_step=0.6)
    return info, cam


def _build_tabletop(rng, scene, mats, hdrs):
    ground = mats.make("floor", 2.0)
    bpy.ops.mesh.primitive_plane_add(size=60, location=(0, 0, 0))
    _link(bpy.context.active_object, ground)
    if rng.random() < 0.4:  # back wall
        _box("backwall", (60, 0.1, 20), (0, _u(rng, 3, 8), 10), 0, mats.make("wall", 0.5))
    for _ in range(int(rng.integers(3, 10))):
        dist = _u(rng, 0.8, 5)
        ang = _u(rng, -0.6, 0.6)
        _primitive(rng, (dist * math.sin(ang), dist * math.cos(ang), 0), _u(rng, 0.15, 1.0),
                   mats.make("object", 4.0))
    world = _new_world(scene)
    hdr = hdrs[int(rng.integers(len(hdrs)))]
    _world_hdr(rng, world, hdr, _u(rng, 0.4, 1.5), _u(rng, 0, 6.28))
    info = {"layout": "tabletop", "world": hdr.stem}
    for _ in range(int(rng.integers(0, 3))):
        kind = str(rng.choice(["AREA", "POINT"]))
        loc = (_u(rng, -3, 3), _u(rng, -1, 4), _u(rng, 1.5, 4))
        rot = (Vector((0, 2, 0)) - Vector(loc)).to_track_quat("-Z", "Y").to_euler()
        _light(kind, loc, _u(rng, 50, 500), _light_colour(rng), size=_u(rng, 0.2, 2), rot=rot)
    cam = dict(loc=(0, _u(rng, -1.5, 0), _u(rng, 0.4, 1.6)), yaw=_u(rng, -0.2, 0.2),
               pitch=_u(rng, -0.6, -0.1), roll=_u(rng, -0.05, 0.05), lens=_u(rng, 24, 60), max_step=0.05)
    return info, cam


def build_scene(scene, rng: np.random.Generator, cache_dir: os.PathLike, kind: Optional[str] = None,
                camera_style: str = "default") -> dict:
    """Clear ``scene`` and build a random layout (see module docstring) with a camera.

    Args:
        scene: the ``bpy.types.Scene`` (its objects and data blocks are removed).
        rng: numpy generator; the same seed gives the same scene.
        cache_dir: folder for cached photo textures.
        kind: force a layout (``room``/``outdoor``/``tabletop``).
        camera_style: ``default``, or ``rgbd`` for rooms: an RGB-D-capture framing
            (eye level 1.0-1.7 m, facing a wall 1.2-4.5 m away +-25 deg, pitched down
            3-29 deg, lens 28-34 mm = 56-65 deg horizontal FOV, like NYU/Kinect captures).

    Raises:
        ValueError: unknown ``camera_style``, or ``rgbd`` for a layout other than ``room``.

    Returns:
        JSON-serialisable description (layout, world, lights, camera base pose).
    """
    clear_scene(scene)
    hdrs = hdr_maps()
    mats = MaterialFactory(rng, cache_dir)
    kind = kind or str(rng.choice(SCENE_KINDS, p=SCENE_WEIGHTS))
    builder = {"room": _build_room, "outdoor": _build_outdoor, "tabletop": _build_tabletop}[kind]
    if camera_style not in ("default", "rgbd"):
        raise ValueError(f"camera_style must be 'default' or 'rgbd', got {camera_style!r}")
    if camera_style == "rgbd":
        if kind != "room":
            raise ValueError(f"camera_style 'rgbd' needs the room layout, got {kind!r}")
        info, cam = builder(rng, scene, mats, hdrs, camera_style="rgbd")
    else:
        info, cam = builder(rng, scene, mats, hdrs)
    cdata = bpy.data.cameras.new("camera")
    cdata.lens = cam["lens"]
    cdata.sensor_width = 36.0
    cdata.sensor_fit = "AUTO"
    cdata.clip_start = 0.05
    cdata.clip_end = 1000.0
    cob = bpy.data.objects.new("camera", cdata)
    scene.collection.objects.link(cob)
    scene.camera = cob
    info["camera"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cam.items()}
    info["n_objects"] = len(scene.objects)
    info["generator_version"] = GENERATOR_VERSION
    return info


def camera_path(rng: np.random.Generator, cam: dict, n: int) -> List[Matrix]:
    """``n`` camera world matrices for a short move (translation + slow yaw/pitch).

    The move is constant-velocity (a random direction, up to ``cam['max_step']``
    Blender units per frame) with a small constant angular velocity, like a
    hand-held or dolly shot.
    """
    step = cam["max_step"] * _u(rng, 0.0, 1.0)
    ang = _u(rng, 0, 6.28)
    vel = Vector((step * math.cos(ang), step * math.sin(ang), step * _u(rng, -0.2, 0.2)))
    dyaw, dpitch = _u(rng, -0.03, 0.03), _u(rng, -0.01, 0.01)
    out = []
    for k in range(n):
        loc = Vector(cam["loc"]) + vel * k
        # Blender camera looks down -Z; pitch 0 = horizontal, looking along +Y at yaw 0
        rot = Euler((math.pi / 2 + cam["pitch"] + dpitch * k, cam["roll"], cam["yaw"] + dyaw * k), "XYZ")
        out.append(Matrix.Translation(loc) @ rot.to_matrix().to_4x4())
    return out


def clear_camera_path(scene, cameras: Sequence[Matrix], margin: float = 0.3) -> List[str]:
    """Delete objects whose (evaluated) bounding box, grown by ``margin``, holds a camera.

    Keeps cameras out of rocks, tree crowns and buildings. Returns removed names.
    """
    bpy.context.view_layer.update()
    points = [m.to_translation() for m in cameras]
    removed = []
    for ob in list(scene.objects):
        if ob.type != "MESH":
            continue
        inv = ob.matrix_world.inverted_safe()
        sc = [max(abs(v), 1e-6) for v in ob.matrix_world.to_scale()]
        lo = [min(c[k] for c in ob.bound_box) - margin / sc[k] for k in range(3)]
        hi = [max(c[k] for c in ob.bound_box) + margin / sc[k] for k in range(3)]
        for p in points:
            q = inv @ p
            if all(lo[k] <= q[k] <= hi[k] for k in range(3)):
                removed.append(ob.name)
                bpy.data.objects.remove(ob)
                break
    return removed
