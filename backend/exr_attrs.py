"""OpenEXR standard attributes for our frames: camera matrices, lens, frame rate, timecode.

Comp and render tools read a frame's camera from OpenEXR's standard ``M44f``
attributes, not from our ``gbuffer/camera`` JSON. This module builds them from a
frame's metadata (``camera``, ``intrinsics``, ``fps``, ``frame_number``), so every
writer stamps the same ones (:func:`standard_attributes`), and decodes them back
(:func:`camera_from_header`).

Conventions (OpenEXR "Standard Optional Attributes", ``ImfStandardAttributes.h``):

* ``worldToCamera``: world -> camera space of the renderer, camera space left-handed
  (+x right, +y up, +z the viewing direction: points in front have z > 0).
* ``worldToNDC``: world -> normalised device coordinates, (0, 0) the upper-left and
  (1, 1) the lower-right corner of the display window; apply, divide by w, drop z.
* Imath matrices multiply row vectors (``p' = p M``): the stored matrix is the
  transpose of the column-vector matrix used below.
* ``pinholeFocalLength`` / ``cameraFocalLength`` in mm and ``cameraAperture`` (the
  horizontal film width, mm) for a 36 mm wide sensor (:data:`SENSOR_WIDTH_MM`, the
  full-frame equivalent; our cameras are known in pixels, so only the ratio
  focal / aperture = fx / width is measured).
* ``framesPerSecond`` (rational) and ``timeCode`` (non-drop-frame, from the frame
  number and the rounded rate).

This module never imports ``bpy``.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

#: film width assumed for the mm values (full-frame equivalent)
SENSOR_WIDTH_MM = 36.0
_FLIP_Z = np.diag([1.0, 1.0, -1.0, 1.0])  # OpenGL camera (-Z forward) <-> OpenEXR camera (+Z forward)


def world_to_camera(c2w_opengl: Sequence[Sequence[float]]) -> np.ndarray:
    """``4 x 4`` float64 column-vector world -> left-handed camera matrix (OpenEXR's
    camera space) from a Blender/OpenGL camera-to-world matrix."""
    return _FLIP_Z @ np.linalg.inv(np.asarray(c2w_opengl, np.float64))


def world_to_ndc(c2w_opengl, intrinsics: Sequence[float], width: int, height: int) -> np.ndarray:
    """``4 x 4`` float64 column-vector world -> NDC matrix: ``x = (fx X/Z + cx) / width``,
    ``y = (cy - fy Y/Z) / height`` in the left-handed camera space (intrinsics in pixels,
    pixel centres at +0.5, as :class:`backend.multiview.cameras.Camera`); ``z/w = 1/Z``."""
    fx, fy, cx, cy = map(float, intrinsics)
    proj = np.array([[fx / width, 0.0, cx / width, 0.0],
                     [0.0, -fy / height, cy / height, 0.0],
                     [0.0, 0.0, 0.0, 1.0],
                     [0.0, 0.0, 1.0, 0.0]])
    return proj @ world_to_camera(c2w_opengl)


def stored(m: np.ndarray) -> np.ndarray:
    """A column-vector matrix as OpenEXR stores it (row-vector convention), float32."""
    return np.ascontiguousarray(np.asarray(m, np.float64).T, dtype=np.float32)


def camera_to_world_from(stored_w2c) -> np.ndarray:
    """Blender/OpenGL camera-to-world ``4 x 4`` (float64) from a stored ``worldToCamera``."""
    return np.linalg.inv(_FLIP_Z @ np.asarray(stored_w2c, np.float64).T)


def _rate(fps: Any) -> Optional[Fraction]:
    try:
        r = Fraction(str(fps)) if fps is not None else None
    except (ValueError, ZeroDivisionError):
        return None
    return r if r is not None and r > 0 else None


def timecode(frame_number: int, fps: Fraction) -> Tuple[int, int, int, int]:
    """``(hours, minutes, seconds, frames)`` of ``frame_number`` counted from 0 at
    00:00:00:00, non-drop-frame at the rounded rate (24000/1001 counts as 24)."""
    base = max(1, int(round(float(fps))))
    n = max(0, int(frame_number))
    return (n // (3600 * base)) % 24, (n // (60 * base)) % 60, (n // base) % 60, n % base


def parse_timecode(text: str, fps: Optional[Fraction] = None) -> int:
    """Frames counted from 00:00:00:00 of a non-drop-frame timecode ``"HH:MM:SS:FF"`` at
    the rounded rate (``fps``; ``None``: only the form is checked, 0 returned).

    Raises:
        ValueError: not ``HH:MM:SS:FF`` (drop-frame ``;`` included), or a field out of range
            (hours < 24, minutes and seconds < 60, frames < the rounded rate).
    """
    import re

    m = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2}):(\d{2})", str(text).strip())
    if not m:
        raise ValueError(f"timecode {text!r}: expected HH:MM:SS:FF (non-drop-frame)")
    h, mi, s, f = (int(g) for g in m.groups())
    base = 60 if fps is None else max(1, int(round(float(fps))))
    if h >= 24 or mi >= 60 or s >= 60 or f >= base:
        raise ValueError(f"timecode {text!r}: a field is out of range (hours < 24, minutes and seconds < 60, "
                         f"frames < {base})")
    return 0 if fps is None else ((h * 60 + mi) * 60 + s) * base + f


def camera_attributes(meta: Dict[str, Any], shape: Tuple[int, int]) -> Dict[str, Any]:
    """``worldToCamera``, ``worldToNDC``, focal length and aperture of a frame whose
    meta carries ``camera.camera_to_world`` and ``intrinsics``; ``{}`` otherwise.

    Args:
        meta: the frame's metadata (see ``docs/gbuffer-contract.md``).
        shape: ``(H, W)`` of the display window in pixels.
    """
    cam, k = meta.get("camera"), meta.get("intrinsics")
    if not isinstance(cam, dict) or cam.get("camera_to_world") is None or not k:
        return {}
    c2w = np.asarray(cam["camera_to_world"], np.float64)
    h, w = int(shape[0]), int(shape[1])
    focal = float(k[0]) * SENSOR_WIDTH_MM / w
    return {"worldToCamera": stored(world_to_camera(c2w)), "worldToNDC": stored(world_to_ndc(c2w, k, w, h)),
            "pinholeFocalLength": focal, "cameraFocalLength": focal, "cameraAperture": SENSOR_WIDTH_MM,
            "cameraApertureVertical": SENSOR_WIDTH_MM * h / w * float(k[0]) / float(k[1])}


def time_attributes(meta: Dict[str, Any]) -> Dict[str, Any]:
    """``framesPerSecond`` and ``timeCode`` from ``meta['fps']`` (``"num/den"``) and
    ``meta['frame_number']``; ``{}`` without a rate. With ``meta['timecode_start']`` (the
    source's first frame's timecode, ``--timecode`` or the movie's tag) and
    ``meta['timecode_frame']`` (that first frame's number), the timecode counts from it;
    else from the frame number (frame 0 = 00:00:00:00)."""
    import OpenEXR

    fps = _rate(meta.get("fps"))
    if fps is None:
        return {}
    out: Dict[str, Any] = {"framesPerSecond": fps}  # a Fraction is written as a rational
    n = meta.get("frame_number")
    if isinstance(n, int):
        start, ref = meta.get("timecode_start"), meta.get("timecode_frame")
        if isinstance(start, str) and isinstance(ref, int):
            n = parse_timecode(start, fps) + n - ref
        out["timeCode"] = OpenEXR.TimeCode(*timecode(n, fps), *([0] * 14))
    return out


def window_attributes(meta: Dict[str, Any], shape: Tuple[int, int]) -> Dict[str, Any]:
    """``dataWindow`` / ``displayWindow`` of an overscan frame (``meta['data_window']``
    and ``meta['display_window']``, ``[x0, y0, x1, y1]`` inclusive); ``{}`` when the meta
    has none or the data window does not match ``shape`` ``(H, W)`` (a resized frame)."""
    data, disp = meta.get("data_window"), meta.get("display_window")
    if not data or not disp:
        return {}
    x0, y0, x1, y1 = map(int, data)
    if (y1 - y0 + 1, x1 - x0 + 1) != tuple(int(v) for v in shape[:2]):
        return {}
    d = list(map(int, disp))
    return {"dataWindow": ((x0, y0), (x1, y1)), "displayWindow": ((d[0], d[1]), (d[2], d[3]))}


#: ``depthUnits`` text per ``depth_kind`` (what a comp artist reads in Nuke's metadata as
#: ``exr/depthUnits``): the depth channel's units and kind
DEPTH_UNITS = {
    "metric": "metres; planar z (distance along the camera axis), not 1/z",
    "up_to_scale": "the camera file's units (metric up to one factor for the whole shot); planar z, not 1/z",
    "relative": "relative, no unit: 1 (near) to 100 (far) per frame, not metric (no camera); planar z, not 1/z",
}


def depth_attributes(meta: Dict[str, Any]) -> Dict[str, Any]:
    """``depthUnits``: a plain-text statement of the depth channel's units and kind from
    ``meta['depth_kind']`` (:data:`DEPTH_UNITS`); ``{}`` for an unknown kind."""
    text = DEPTH_UNITS.get(meta.get("depth_kind"))
    return {"depthUnits": text} if text else {}


def standard_attributes(meta: Dict[str, Any], shape: Tuple[int, int]) -> Dict[str, Any]:
    """Every standard attribute this module derives from a frame's meta (camera, lens,
    rate, timecode, overscan windows). ``shape``: ``(H, W)`` of the pixels written."""
    win = window_attributes(meta, shape)
    disp_shape = shape
    if win:  # the camera projects into the display window: intrinsics moved to its origin
        (a, b), (c, d) = win["displayWindow"]
        (x0, y0), _ = win["dataWindow"]
        disp_shape = (d - b + 1, c - a + 1)
        k = meta.get("intrinsics")
        if k:
            meta = dict(meta, intrinsics=[k[0], k[1], k[2] + x0 - a, k[3] + y0 - b])
    out = camera_attributes(meta, disp_shape)
    out.update(time_attributes(meta))
    out.update(win)
    return out


def camera_from_header(header: Dict[str, Any]) -> Optional[np.ndarray]:
    """The Blender/OpenGL camera-to-world ``4 x 4`` (float64) a header's
    ``worldToCamera`` states, or ``None`` when it has none."""
    m = header.get("worldToCamera")
    return None if m is None else camera_to_world_from(np.asarray(m, np.float64).reshape(4, 4))
