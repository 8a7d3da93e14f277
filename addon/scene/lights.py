"""The scene's Blender lights as a lights file (``docs/lights.md``), bpy side.

:func:`scene_lights` gathers every point, spot, area and sun light that renders
(``hide_render`` off, in the view layer) into the ``gbuffer-lights`` JSON that
``restyle --lights`` and :func:`backend.renderers.lights.light_contribution` read:
colour, power (``energy * 2^exposure``, Blender's units), position, direction
(the object's -Z), ``axis_u`` (its +X), sizes times the object's scale, spot cone and
blend, sun angle, each evaluated at every frame asked for (so keyframed, driven or
parented lights animate: one keyframe per frame). Every light that renders is
*added* to the footage: lights that already lit the plate (a scene export's own lights)
must be disabled in renders first, or they count twice. ``space="world"`` writes Blender world
coordinates (use with G-buffers that carry the scene or solved camera); ``"camera"``
writes them relative to ``camera`` (default the scene camera) at each frame.

Not carried over (a ``warnings`` list in the result names each case): blackbody
temperature colour (the light's Color is used), ``normalize`` off, node-based light
shaders, ``spread`` below 180 degrees, square or non-uniformly scaled spot cones, and a
light's ray-visibility settings. ``use_shadow`` off is carried as ``"shadow": false``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence

import bpy

KINDS = {"POINT": "point", "SPOT": "spot", "AREA": "area", "SUN": "sun"}


def _vec(v) -> List[float]:
    return [float(x) for x in v]


def _light_values(ob, cam_inv) -> Dict[str, Any]:
    """One light's values at the current frame (world, or camera space via ``cam_inv``)."""
    data = ob.data
    m = ob.matrix_world if cam_inv is None else cam_inv @ ob.matrix_world
    col = [m.col[i].to_3d() for i in range(4)]
    sx, sy = col[0].length, col[1].length
    vals: Dict[str, Any] = {
        "color": _vec(data.color),
        "power": float(data.energy) * 2.0 ** float(getattr(data, "exposure", 0.0)),
    }
    kind = KINDS[data.type]
    if kind != "sun":
        vals["position"] = _vec(col[3])
    if kind != "point":
        vals["direction"] = _vec(-col[2].normalized())
    if kind in ("point", "spot"):
        vals["radius"] = float(data.shadow_soft_size)
    if kind == "spot":
        vals["spot_size_deg"] = math.degrees(float(data.spot_size))
        vals["spot_blend"] = float(data.spot_blend)
    if kind == "area":
        vals["axis_u"] = _vec(col[0].normalized())
        two = data.shape in ("RECTANGLE", "ELLIPSE")
        vals["size"] = float(data.size) * sx
        vals["size_y"] = float(data.size_y if two else data.size) * sy
    if kind == "sun":
        vals["angle_deg"] = math.degrees(float(data.angle))
    return vals


def _warnings(ob) -> List[str]:
    data, out = ob.data, []
    if getattr(data, "use_temperature", False):
        out.append(f"light {ob.name!r}: its blackbody temperature is not carried over (its Color is used)")
    if not getattr(data, "normalize", True):
        out.append(f"light {ob.name!r}: 'Normalize' is off; the power is taken as normalised")
    if getattr(data, "use_nodes", False):
        out.append(f"light {ob.name!r}: its node shader is ignored (Color x Power is used)")
    if data.type == "SPOT" and getattr(data, "use_square", False):
        out.append(f"light {ob.name!r}: its square cone is taken as round")
    sc = ob.matrix_world.to_scale()
    if data.type == "SPOT" and abs(sc[0] - sc[1]) > 1e-4 * max(abs(sc[0]), abs(sc[1]), 1e-9):
        out.append(f"light {ob.name!r}: its non-uniform scale (an elliptic cone) is taken as a round cone")
    if data.type == "AREA" and float(getattr(data, "spread", math.pi)) < math.pi - 1e-4:
        out.append(f"light {ob.name!r}: its spread is ignored (a full 180 degree emitter is used)")
    return out


def scene_lights(scene, frames: Optional[Iterable[int]] = None, *, space: str = "world",
                 camera=None, numbers: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The scene's rendering lights as a ``gbuffer-lights`` document (a dict for ``json.dump``).

    Args:
        scene: a ``bpy.types.Scene``.
        frames: scene frames to evaluate (default ``frame_start..frame_end``); with one
            frame the values are written without keyframes.
        space: ``world`` (Blender world coordinates) or ``camera`` (relative to
            ``camera``, default ``scene.camera``, at each frame).
        numbers: the G-buffer frame number of each of ``frames`` (what the keyframes
            are written with; default the scene frames themselves).

    Returns:
        ``{"format", "version", "space", "lights": [...], "warnings": [...]}``; the
        current frame is restored afterwards.

    Raises:
        ValueError: an unknown ``space``; ``camera`` space without a camera; no light.
    """
    if space not in ("world", "camera"):
        raise ValueError(f"space must be 'world' or 'camera', got {space!r}")
    cam = camera or scene.camera
    if space == "camera" and cam is None:
        raise ValueError(f"scene {scene.name!r} has no camera: lights cannot be made camera-relative")
    layer = bpy.context.view_layer if bpy.context.scene == scene else scene.view_layers[0]
    obs = [ob for ob in scene.objects if ob.type == "LIGHT" and ob.data.type in KINDS and not ob.hide_render
           and ob.visible_get(view_layer=layer)]
    if not obs:
        raise ValueError(f"scene {scene.name!r} has no point, spot, area or sun light that renders")
    frames = list(frames) if frames is not None else list(range(scene.frame_start, scene.frame_end + 1))
    numbers = list(numbers) if numbers is not None else frames
    if len(numbers) != len(frames):
        raise ValueError(f"{len(numbers)} frame numbers for {len(frames)} frames")
    old = (scene.frame_current, scene.frame_subframe)
    per: Dict[str, List[Dict[str, Any]]] = {ob.name: [] for ob in obs}
    try:
        for f, num in zip(frames, numbers):
            scene.frame_set(int(f))
            cam_inv = cam.matrix_world.inverted() if space == "camera" else None
            for ob in obs:
                per[ob.name].append(dict(_light_values(ob, cam_inv), frame=int(num)))
    finally:
        scene.frame_set(old[0], subframe=old[1])
    lights, warnings = [], []
    for ob in obs:
        entry: Dict[str, Any] = {"name": ob.name, "type": KINDS[ob.data.type]}
        if not getattr(ob.data, "use_shadow", True):
            entry["shadow"] = False
        if ob.data.type == "AREA":
            # sizes already carry the object's scale, so a scaled square is a rectangle
            entry["shape"] = "ellipse" if ob.data.shape in ("DISK", "ELLIPSE") else "rectangle"
        keys = per[ob.name]
        first = {k: v for k, v in keys[0].items() if k != "frame"}
        entry.update(first)
        if len(keys) > 1 and any({k: v for k, v in kf.items() if k != "frame"} != first for kf in keys[1:]):
            entry["keyframes"] = keys
        lights.append(entry)
        warnings += _warnings(ob)
    return {"format": "gbuffer-lights", "version": 1, "space": space, "lights": lights, "warnings": warnings}
