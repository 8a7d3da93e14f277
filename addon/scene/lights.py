"""The scene's Blender lights as a lights file (``docs/lights.md``), bpy side.

:func:`scene_lights` gathers every point, spot, area and sun light that renders
(``hide_render`` off, in the view layer) into the ``gbuffer-lights`` JSON that
``restyle --lights`` and :func:`backend.renderers.lights.light_contribution` read:
colour, power (``energy * 2^exposure``, Blender's units), position, direction
(the object's -Z), ``axis_u`` (its +X), sizes times the object's scale, spot cone and
blend, sun angle, each evaluated at every frame asked for (so keyframed, driven or
parented lights animate: one keyframe per frame). Every light that renders is
*added* to the footage, except lights that likely already lit the plate, which are
skipped with a warning naming each (issue 39 trial): the lights a scene export recorded
as rendering its frames (``plate_lights``; they are in the plate, adding them again
counts them twice) and Blender's startup default light (``Light``, a 1000 W point light
at its factory place, unanimated: nobody placed it to relight the shot; move it or
change its power and it is taken). The result names the lights taken and skipped. ``space="world"`` writes Blender world
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
#: Blender's startup scene's light: "Light", a 1000 W point light at this world location
STARTUP_LIGHT_POWER = 1000.0
STARTUP_LIGHT_LOCATION = (4.0762, 1.0055, 5.9039)


def startup_default(ob) -> bool:
    """``ob`` is Blender's startup default light as the factory scene has it: named
    ``Light`` (or ``Light.001``...), a 1000 W point light at its factory location (within
    1 mm), not animated."""
    d = ob.data
    if ob.name.split(".")[0] != "Light" or d.type != "POINT" or abs(float(d.energy) - STARTUP_LIGHT_POWER) > 1e-3:
        return False
    if ob.animation_data is not None or getattr(d, "animation_data", None) is not None:
        return False
    loc = ob.location if ob.parent is None else ob.matrix_world.translation  # (matrix_world lags a new object)
    return max(abs(float(loc[i]) - STARTUP_LIGHT_LOCATION[i]) for i in range(3)) < 1e-3


def _skip_reason(ob, plate_lights) -> str:
    """Why ``ob`` is not taken ('' : it is)."""
    if ob.name in plate_lights:
        return "it rendered the scene export's frames, so it is in the plate already (adding it would count it twice)"
    if startup_default(ob):
        return ("Blender's startup default light (1000 W point at its factory place): likely not placed for "
                "this shot; move it or change its power to use it")
    return ""


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
                 camera=None, numbers: Optional[Sequence[int]] = None,
                 plate_lights: Iterable[str] = ()) -> Dict[str, Any]:
    """The scene's rendering lights as a ``gbuffer-lights`` document (a dict for ``json.dump``).

    Args:
        scene: a ``bpy.types.Scene``.
        frames: scene frames to evaluate (default ``frame_start..frame_end``); with one
            frame the values are written without keyframes.
        space: ``world`` (Blender world coordinates) or ``camera`` (relative to
            ``camera``, default ``scene.camera``, at each frame).
        numbers: the G-buffer frame number of each of ``frames`` (what the keyframes
            are written with; default the scene frames themselves).
        plate_lights: names of lights that lit the plate (a scene export's manifest
            ``settings.lights``): skipped, with a warning.

    Returns:
        ``{"format", "version", "space", "lights": [...], "warnings": [...], "taken":
        [names], "skipped": [{"name", "reason"}]}``; the current frame is restored
        afterwards. Each skipped light also has a line in ``warnings``.

    Raises:
        ValueError: an unknown ``space``; ``camera`` space without a camera; no light,
            or none left after skipping (naming the skipped ones and why).
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
    plate_lights = set(plate_lights)
    skipped = [{"name": ob.name, "reason": _skip_reason(ob, plate_lights)} for ob in obs]
    skipped = [sk for sk in skipped if sk["reason"]]
    obs = [ob for ob in obs if ob.name not in {sk["name"] for sk in skipped}]
    skip_lines = [f"light {sk['name']!r} not added: {sk['reason']}" for sk in skipped]
    if not obs:
        raise ValueError(f"scene {scene.name!r}: no light to add; " + "; ".join(skip_lines))
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
    lights, warnings = [], list(skip_lines)
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
    return {"format": "gbuffer-lights", "version": 1, "space": space, "lights": lights, "warnings": warnings,
            "taken": [lt["name"] for lt in lights], "skipped": skipped}
