"""Surface changes of the looks: where fresh snow settles, wet surfaces (issue 28).

Split out of :mod:`.embedded` (which re-exports these names). Arrays are float32,
channel-first ``3 x H x W`` colour and ``H x W`` scalars, as in :mod:`.shading`.
"""
from __future__ import annotations

import numpy as np

from ..contract import GBufferFrame
from ..imaging import resize
from . import shading as sh
from .looks import LookParams

F32 = np.float32
#: linear albedo of fresh snow (slightly blue, high; Warren 1982 ~0.9 in the visible)
SNOW_ALBEDO = (0.9, 0.91, 0.93)


def snow_cover(p: LookParams, albedo, rough, metal, ny, ny_depth=None) -> np.ndarray:
    """Where fresh snow settles, ``H x W`` float32 in [0, 1].

    Physically based accumulation (after Fearing 2000, "Computer modelling of fallen
    snow", SIGGRAPH: snow rests on surfaces by their slope and what they are):
    ``snow x up x dry x not_water``, where

    * ``up = smoothstep(0.25, 0.7, n_y)``: up-facing surfaces; ``n_y`` is the larger of
      the estimated normal's and the depth buffer's (``ny_depth``: estimated normals on
      far ground seen at a grazing angle often face the camera, the depth says ground);
    * ``dry = smoothstep(0.12, 0.3, roughness) x (1 - metallic)``: no snow on specular
      surfaces (liquid water, ice, polished tops, metal): lowering a surface's roughness
      in the compositor keeps it open;
    * ``not_water = 1 - smoothstep(0.2, 0.45, (B - R) / mean(albedo))``: snow melts in
      open water; in a daylight plate water is the blue-dominant surface (sand, rock,
      soil, vegetation and snow itself are not), so a blue excess of the albedo is the
      water cue (on boat.mp4: water 0.58-0.90, land -0.39-0.35, 10th-90th percentile).
    """
    up_y = ny if ny_depth is None else np.maximum(ny, ny_depth)
    dry = sh.smoothstep(0.12, 0.3, rough) * (F32(1.0) - metal)
    blue = (albedo[2] - albedo[0]) / np.maximum(albedo.mean(0), F32(0.02))
    not_water = F32(1.0) - sh.smoothstep(0.2, 0.45, blue)
    return np.clip(F32(p.snow) * sh.smoothstep(0.2, 0.9, up_y) * dry * not_water, 0.0, 1.0)


def snow_cover_of(frame: GBufferFrame, p: LookParams, fov_y_deg: float = sh.DEFAULT_FOV_Y_DEG) -> np.ndarray:
    """:func:`snow_cover` of a contract frame under look parameters ``p`` (H x W, [0, 1])."""
    h, w = frame.shape
    intr = sh.intrinsics_for(h, w, (frame.meta or {}).get("intrinsics"), fov_y_deg)
    return snow_cover(p, np.clip(sh.chw(frame.albedo), 0.0, 1.0), np.clip(frame.roughness, 0.0, 1.0),
                      np.clip(frame.metallic, 0.0, 1.0), sh.chw(frame.normal)[1],
                      _depth_up(np.asarray(frame.depth, dtype=F32), intr))


def _surface_edits(p: LookParams, albedo, rough, metal, ny, ny_depth=None):
    """Snow cover (:func:`snow_cover`); wet surfaces (darker, smoother, puddles).

    Returns ``(albedo, roughness, metallic, snow cover or None)``."""
    one = F32(1.0)
    cover = None
    if p.snow > 0:
        cover = snow_cover(p, albedo, rough, metal, ny, ny_depth)
        albedo = albedo + (sh.col(SNOW_ALBEDO) - albedo) * cover
        rough = rough + (F32(0.55) - rough) * cover
        metal = metal * (one - cover)
    if p.wetness > 0:
        wet = F32(p.wetness)
        puddle = sh.smoothstep(0.6, 0.9, ny) * wet
        albedo = albedo * (one - F32(0.45) * wet)
        rough = rough * (one - F32(0.6) * wet) * (one - F32(0.9) * puddle)
    return albedo, rough, metal, cover


def _depth_up(depth: np.ndarray, intr) -> np.ndarray:
    """``n_y`` of the normals of the depth buffer (smoothed on a ~160 px grid), H x W."""
    import cv2

    from ..geometry import normals_from_depth

    h, w = depth.shape
    k = max(1, int(round(max(h, w) / 160)))
    hl, wl = max(2, h // k), max(2, w // k)
    d = resize(np.ascontiguousarray(depth, dtype=F32), (wl, hl), "area")
    d = cv2.GaussianBlur(d, (0, 0), 1.5, borderType=cv2.BORDER_REPLICATE)
    fx, fy, cx, cy = intr
    n = normals_from_depth(d, (fx * wl / w, fy * hl / h, cx * wl / w, cy * hl / h))
    ny = np.ascontiguousarray(n[..., 1], dtype=F32)
    if min(hl, wl) > 4:  # one-sided differences at the border: take the inner neighbours'
        ny[0], ny[-1], ny[:, 0], ny[:, -1] = ny[1], ny[-2], ny[:, 1], ny[:, -2]
    return sh.upsample(ny, h, w)
