"""Lights files (``restyle --lights FILE``): parsing, validation and per-frame values.

The format is documented in ``docs/lights.md``; in short::

    {"format": "gbuffer-lights", "version": 1, "space": "world" | "camera",
     "lights": [{"name": "Key", "type": "point" | "spot" | "area" | "sun",
                 "color": [r, g, b], "power": 500.0, "position": [x, y, z],
                 "direction": [dx, dy, dz], "axis_u": [ux, uy, uz],
                 "radius": 0.1, "spot_size_deg": 45, "spot_blend": 0.15,
                 "shape": "square" | "rectangle" | "disk" | "ellipse", "size": 1.0, "size_y": 1.0,
                 "angle_deg": 0.5,
                 "keyframes": [{"frame": 1, "power": 0.0}, {"frame": 24, "power": 500.0}]}]}

Units are Blender's: ``power`` in watts for point, spot and area lights, irradiance in
W/m^2 for a sun; positions and sizes in the units of the G-buffer's depth (metres for a
scene export or a metric / solved camera); angles in degrees; ``color`` linear Rec.709.
``direction`` is where the light points (Blender: the light object's local -Z axis);
``axis_u`` is its local +X (the area light's ``size`` side). ``space: "world"``: in the
world of the frames' cameras (the scene camera, or the solved camera of a tracked shot),
which every frame must carry in its header; ``"camera"``: camera space of each frame
(OpenGL: +X right, +Y up, the camera looks down -Z).

Every problem is an :class:`LightsError` (an :class:`~backend.errors.InputError`,
exit 2 on the command line) whose message is one line naming the file and the light.
This module never imports ``bpy``.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError

FORMAT = "gbuffer-lights"
VERSION = 1
LIGHT_TYPES = ("point", "spot", "area", "sun")
AREA_SHAPES = ("square", "rectangle", "disk", "ellipse")
SPACES = ("world", "camera")

#: defaults of the animatable values (Blender's defaults for a new light, except power)
DEFAULTS: Dict[str, Any] = {
    "color": (1.0, 1.0, 1.0), "power": None, "position": (0.0, 0.0, 0.0),
    "direction": (0.0, 0.0, -1.0), "axis_u": None, "radius": 0.0, "spot_size_deg": 45.0,
    "spot_blend": 0.15, "size": 1.0, "size_y": None, "angle_deg": 0.526,
}
#: keys that hold 3-vectors
VECTORS = ("color", "position", "direction", "axis_u")
#: keys that must be >= 0, and their upper bounds (None: unbounded)
NON_NEGATIVE = {"radius": None, "size": None, "size_y": None, "spot_blend": 1.0,
                "spot_size_deg": 180.0, "angle_deg": 180.0}
#: keys each type uses (a key not listed for the type is refused as a likely mistake)
USES = {
    "point": ("color", "power", "position", "radius"),
    "spot": ("color", "power", "position", "direction", "radius", "spot_size_deg", "spot_blend"),
    "area": ("color", "power", "position", "direction", "axis_u", "size", "size_y"),
    "sun": ("color", "power", "direction", "angle_deg"),
}
STATIC_KEYS = ("name", "type", "shape", "shadow", "keyframes")


class LightsError(InputError):
    """A lights file that cannot be used: one line naming the file and the light."""


@dataclass(frozen=True)
class LightState:
    """One light's values at one frame, in camera space (OpenGL axes, depth units).

    Attributes:
        name, type: as in the file. ``shape``: area shape (``square`` for others).
        shadow: cast shadows (the file's ``shadow``, default true).
        color: linear RGB (3,) float64, >= 0. ``power``: W (point/spot/area) or W/m^2 (sun).
        position: (3,) camera space (unused by a sun). ``direction``: (3,) unit, where
            the light points. ``axis_u``: (3,) unit, the area light's first side.
        radius, size, size_y: depth units; ``spot_size``, ``angle``: radians (full cone /
            sun disc angle); ``spot_blend`` in [0, 1].
    """

    name: str
    type: str
    shape: str
    shadow: bool
    color: np.ndarray
    power: float
    position: np.ndarray
    direction: np.ndarray
    axis_u: np.ndarray
    radius: float
    spot_size: float
    spot_blend: float
    size: float
    size_y: float
    angle: float


@dataclass(frozen=True)
class Light:
    """A parsed light: static keys and its keyframes (sorted by frame).

    ``base`` holds the values outside any keyframe; ``keys`` is a tuple of
    ``(frame, {key: value})``; values between keyframes are linearly interpolated
    (directions renormalised), held before the first and after the last.
    """

    name: str
    type: str
    shape: str
    base: Mapping[str, Any]
    keys: Tuple[Tuple[int, Mapping[str, Any]], ...]
    shadow: bool = True

    def values(self, frame: int) -> Dict[str, Any]:
        """The animatable values at scene / G-buffer frame ``frame``."""
        out = dict(self.base)
        for key in {k for _f, d in self.keys for k in d}:
            pts = [(f, d[key]) for f, d in self.keys if key in d]
            if frame <= pts[0][0]:
                out[key] = pts[0][1]
            elif frame >= pts[-1][0]:
                out[key] = pts[-1][1]
            else:
                i = next(j for j, (f, _v) in enumerate(pts) if f > frame)
                (f0, v0), (f1, v1) = pts[i - 1], pts[i]
                t = (frame - f0) / float(f1 - f0)
                out[key] = tuple(np.asarray(v0, float) * (1 - t) + np.asarray(v1, float) * t) \
                    if isinstance(v0, tuple) else v0 * (1 - t) + v1 * t
        return out


@dataclass(frozen=True)
class LightRig:
    """A parsed lights file: ``space`` (``world`` or ``camera``), the lights, the file
    name (for messages) and :attr:`digest` (sha256 of the canonical JSON: it enters the
    restyle settings hash)."""

    source: str
    space: str
    lights: Tuple[Light, ...]
    digest: str

    def at(self, frame: int, camera_to_world: Optional[np.ndarray] = None) -> List[LightState]:
        """Every light at ``frame`` in camera space.

        Args:
            frame: the G-buffer frame number (= scene frame of a scene export).
            camera_to_world: 4x4 Blender camera matrix of that frame (needed, and only
                used, when :attr:`space` is ``world``; a scale in it is removed).

        Raises:
            LightsError: ``world`` space without a camera; a light behind the camera
                that cannot reach anything in front of it (naming file, light, frame).
        """
        if self.space == "world":
            if camera_to_world is None:
                raise LightsError(f"lights file {self.source}: space 'world' needs G-buffer frames that "
                                  f"carry a camera (scene export or a camera-tracked decompose); frame {frame} "
                                  f"has none: use space 'camera'", file=self.source, frame=frame)
            rot, loc = _rigid(camera_to_world)
        else:
            rot, loc = np.eye(3), np.zeros(3)
        return [_state(self.source, lt, lt.values(frame), rot, loc, frame) for lt in self.lights]


def _rigid(m: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    m = np.asarray(m, dtype=np.float64).reshape(4, 4)
    rot = m[:3, :3] / np.maximum(np.linalg.norm(m[:3, :3], axis=0, keepdims=True), 1e-12)
    return rot, m[:3, 3]


def _unit(v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return a / max(float(np.linalg.norm(a)), 1e-12)


def _state(source: str, lt: Light, v: Dict[str, Any], rot: np.ndarray, loc: np.ndarray,
           frame: Optional[int]) -> LightState:
    """World (or camera) values -> camera space (``rot``/``loc``: camera-to-world)."""
    pos = rot.T @ (np.asarray(v["position"], np.float64) - loc)
    d = _unit(rot.T @ _unit(v["direction"]))
    u = v.get("axis_u")
    u = _unit(rot.T @ _unit(u)) if u is not None else _unit(np.cross(d, [0.0, 1.0, 0.0]) if abs(d[1]) < 0.9
                                                             else np.cross(d, [1.0, 0.0, 0.0]))
    u = _unit(u - d * float(u @ d))  # orthogonal to the direction
    spot = math.radians(v["spot_size_deg"])
    st = LightState(lt.name, lt.type, lt.shape, lt.shadow, np.asarray(v["color"], np.float64), float(v["power"]), pos, d, u,
                    float(v["radius"]), spot, float(v["spot_blend"]), float(v["size"]),
                    float(v["size"] if v.get("size_y") is None or lt.shape in ("square", "disk") else v["size_y"]),
                    math.radians(v["angle_deg"]))
    _check_in_front(source, st, frame)
    return st


def _check_in_front(source: str, st: LightState, frame: Optional[int]) -> None:
    """Refuse a light placed behind the camera (camera-space z > 0) whose emission
    cannot reach anything in front of it (z < 0): a spot whose whole cone points back,
    an area light facing straight back. A point light behind the camera still lights
    what faces the camera, and a sun has no position: both are kept."""
    if st.type not in ("spot", "area") or st.position[2] <= 0.0:
        return
    back = math.degrees(math.acos(float(np.clip(st.direction[2], -1.0, 1.0))))  # angle to +Z (backward)
    reach = math.degrees(st.spot_size) / 2.0 if st.type == "spot" else 90.0 - 1e-3
    if back + reach <= 90.0:
        raise LightsError(f"lights file {source}: light {st.name!r} is behind the camera (camera-space z = "
                          f"{st.position[2]:.3g}) and points away from it{'' if frame is None else f' at frame {frame}'}: it lights nothing "
                          f"the camera sees", file=source, frame=frame)


def _finite_number(source: str, name: str, key: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise LightsError(f"lights file {source}: light {name!r}: {key} must be a number, got {x!r}", file=source)
    if not math.isfinite(float(x)):
        raise LightsError(f"lights file {source}: light {name!r}: {key} is {x} (NaN or infinite)", file=source)
    return float(x)


def _value(source: str, name: str, key: str, x: Any) -> Any:
    """One checked animatable value (vector keys as tuples of floats)."""
    if key in VECTORS:
        if not isinstance(x, (list, tuple)) or len(x) != 3:
            raise LightsError(f"lights file {source}: light {name!r}: {key} must be a list of 3 numbers, "
                              f"got {x!r}", file=source)
        vec = tuple(_finite_number(source, name, key, c) for c in x)
        if key == "color" and min(vec) < 0:
            raise LightsError(f"lights file {source}: light {name!r}: color {list(vec)} has a negative "
                              f"component (use a negative power to subtract light)", file=source)
        if key in ("direction", "axis_u") and math.sqrt(sum(c * c for c in vec)) < 1e-9:
            raise LightsError(f"lights file {source}: light {name!r}: {key} is the zero vector", file=source)
        return vec
    f = _finite_number(source, name, key, x)
    if key in NON_NEGATIVE:
        hi = NON_NEGATIVE[key]
        if f < 0 or (hi is not None and f > hi):
            what = "negative" if f < 0 else f"above {hi:g}"
            raise LightsError(f"lights file {source}: light {name!r}: {key} is {f:g} ({what}; "
                              f"allowed 0..{'' if hi is None else f'{hi:g}'})", file=source)
        if key == "spot_size_deg" and f == 0:
            raise LightsError(f"lights file {source}: light {name!r}: spot_size_deg is 0 (a cone lights "
                              f"nothing)", file=source)
    return f


def _parse_light(source: str, i: int, d: Any) -> Light:
    if not isinstance(d, dict):
        raise LightsError(f"lights file {source}: light #{i + 1} must be a JSON object, got {type(d).__name__}",
                          file=source)
    name = d.get("name", f"light #{i + 1}")
    if not isinstance(name, str) or not name.strip():
        raise LightsError(f"lights file {source}: light #{i + 1}: name must be a non-empty string", file=source)
    kind = d.get("type")
    if kind not in LIGHT_TYPES:
        raise LightsError(f"lights file {source}: light {name!r}: type must be one of {', '.join(LIGHT_TYPES)}, "
                          f"got {kind!r}", file=source)
    uses = USES[kind]
    shape = d.get("shape", "square")
    if shape not in AREA_SHAPES or (kind != "area" and "shape" in d):
        raise LightsError(f"lights file {source}: light {name!r}: shape {shape!r} (area lights only: "
                          f"{', '.join(AREA_SHAPES)})", file=source)
    for key in d:
        if key not in STATIC_KEYS and key not in uses:
            raise LightsError(f"lights file {source}: light {name!r}: unknown key {key!r} for a {kind} light "
                              f"(it takes {', '.join(uses)}, keyframes)", file=source)
    base = {k: (None if DEFAULTS[k] is None else _value(source, name, k, DEFAULTS[k])) for k in DEFAULTS}
    for key in uses:
        if key in d:
            base[key] = _value(source, name, key, d[key])
    keys = _parse_keys(source, name, uses, d.get("keyframes", []))
    shadow = d.get("shadow", True)
    if not isinstance(shadow, bool):
        raise LightsError(f"lights file {source}: light {name!r}: shadow must be true or false, got {shadow!r}",
                          file=source)
    if base["power"] is None and not (keys and "power" in keys[0][1]):
        raise LightsError(f"lights file {source}: light {name!r}: power is missing (W; W/m^2 for a sun)",
                          file=source)
    if base["power"] is None:
        base["power"] = keys[0][1]["power"]
    return Light(name, kind, shape, base, keys, shadow)


def _parse_keys(source: str, name: str, uses: Sequence[str], raw: Any) -> Tuple[Tuple[int, Dict[str, Any]], ...]:
    if not isinstance(raw, list):
        raise LightsError(f"lights file {source}: light {name!r}: keyframes must be a list", file=source)
    keys: Dict[int, Dict[str, Any]] = {}
    for k in raw:
        fr = k.get("frame") if isinstance(k, dict) else None
        if isinstance(fr, bool) or not isinstance(fr, int):
            raise LightsError(f"lights file {source}: light {name!r}: every keyframe needs an integer 'frame', "
                              f"got {k!r}"[:300], file=source)
        if fr in keys:
            raise LightsError(f"lights file {source}: light {name!r}: two keyframes at frame {fr}", file=source)
        vals = {}
        for key, x in k.items():
            if key == "frame":
                continue
            if key not in uses:
                raise LightsError(f"lights file {source}: light {name!r}: keyframe {fr}: unknown key {key!r}",
                                  file=source)
            vals[key] = _value(source, name, f"{key}", x)
        keys[fr] = vals
    return tuple(sorted(keys.items()))


def parse_lights(data: Any, source: str = "<lights>") -> LightRig:
    """Check and parse a lights document (the JSON already loaded).

    Raises:
        LightsError: one line naming ``source`` and the light at fault.
    """
    import hashlib

    if not isinstance(data, dict):
        raise LightsError(f"lights file {source}: must be a JSON object with a 'lights' list", file=source)
    if data.get("format", FORMAT) != FORMAT or data.get("version", VERSION) != VERSION:
        raise LightsError(f"lights file {source}: format {data.get('format')!r} version {data.get('version')!r}; "
                          f"expected {FORMAT!r} version {VERSION}", file=source)
    space = data.get("space", "camera")
    if space not in SPACES:
        raise LightsError(f"lights file {source}: space must be 'world' or 'camera', got {space!r}", file=source)
    raw = data.get("lights")
    if not isinstance(raw, list) or not raw:
        raise LightsError(f"lights file {source}: 'lights' must be a non-empty list", file=source)
    lights = tuple(_parse_light(source, i, d) for i, d in enumerate(raw))
    names = [lt.name for lt in lights]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise LightsError(f"lights file {source}: light {dup[0]!r}: two lights share that name", file=source)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, allow_nan=True).encode()).hexdigest()
    rig = LightRig(source, space, lights, digest)
    if space == "camera":  # positions are known now: check every keyframe once
        for lt in lights:
            for fr in sorted({f for f, _k in lt.keys}) or [None]:
                _state(source, lt, lt.values(0 if fr is None else fr), np.eye(3), np.zeros(3), fr)
    return rig


def load_lights(path: os.PathLike) -> LightRig:
    """Read and check a lights file (``docs/lights.md``).

    Raises:
        LightsError: missing or unreadable file, malformed JSON, or a bad light (one line
            naming the file and the light).
    """
    from ..input_files import is_special_file_error, loads_bounded, read_text

    source = os.fsdecode(os.fspath(path))
    try:  # a regular file only: a FIFO is refused, never waited on (issue 36)
        text = read_text(source, "the lights file", LightsError)
    except LightsError as e:
        if is_special_file_error(e):
            raise
        raise LightsError(f"lights file {source}: cannot be read ({e})", file=source) from None
    except OSError as e:
        raise LightsError(f"lights file {source}: cannot be read ({getattr(e, 'strerror', None) or e})",
                          file=source) from None
    try:
        data = loads_bounded(text)
    except (ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else e
        raise LightsError(f"lights file {source}: malformed JSON ({why})", file=source) from None
    return parse_lights(data, source)


def frame_camera(meta: Mapping[str, Any]) -> Optional[np.ndarray]:
    """The 4x4 Blender camera-to-world matrix a G-buffer header carries, or ``None``:
    ``camera_matrix_world`` (scene export) or ``camera.camera_to_world`` with
    ``convention`` ``blender`` (camera-tracked decompose)."""
    m = meta.get("camera_matrix_world")
    cam = meta.get("camera")
    if m is None and isinstance(cam, dict) and cam.get("convention", "blender") == "blender":
        m = cam.get("camera_to_world")
    if m is None:
        return None
    a = np.asarray(m, dtype=np.float64)
    return a if a.shape == (4, 4) and np.isfinite(a).all() else None
