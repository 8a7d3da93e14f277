"""Surface changes of the looks: where fresh snow settles, wet surfaces (issue 28).

Split out of :mod:`.embedded` (which re-exports these names). Arrays are float32,
channel-first ``3 x H x W`` colour and ``H x W`` scalars, as in :mod:`.shading`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..contract import GBufferFrame
from ..imaging import resize
from . import shading as sh
from .looks import LookParams

F32 = np.float32
#: linear albedo of fresh snow (slightly blue, high; Warren 1982 ~0.9 in the visible)
SNOW_ALBEDO = (0.9, 0.91, 0.93)


def snow_cover(p: LookParams, albedo, rough, metal, ny, ny_depth=None, guide=None) -> np.ndarray:
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
      With ``guide`` (H x W, the footage's linear luminance) the cue is re-fitted to the
      frame's edges (:func:`guided_mask`): on the albedo alone its edges were 8-10 px
      stair steps (the cut-outs behind the boat's stern).
    """
    up_y = ny if ny_depth is None else np.maximum(ny, ny_depth)
    dry = sh.smoothstep(0.12, 0.3, rough) * (F32(1.0) - metal)
    blue = (albedo[2] - albedo[0]) / np.maximum(albedo.mean(0), F32(0.02))
    not_water = F32(1.0) - sh.smoothstep(0.2, 0.45, blue)
    if guide is not None:
        not_water = guided_mask(not_water, guide)
    return np.clip(F32(p.snow) * sh.smoothstep(0.2, 0.9, up_y) * dry * not_water, 0.0, 1.0)


def snow_cover_of(frame: GBufferFrame, p: LookParams, fov_y_deg: float = sh.DEFAULT_FOV_Y_DEG) -> np.ndarray:
    """:func:`snow_cover` of a contract frame under look parameters ``p`` (H x W, [0, 1])."""
    h, w = frame.shape
    intr = sh.intrinsics_for(h, w, (frame.meta or {}).get("intrinsics"), fov_y_deg)
    guide = sh.luminance(sh.chw(frame.combined[..., :3]))
    return snow_cover(p, np.clip(sh.chw(frame.albedo), 0.0, 1.0), np.clip(frame.roughness, 0.0, 1.0),
                      np.clip(frame.metallic, 0.0, 1.0), sh.chw(frame.normal)[1],
                      _depth_up(np.asarray(frame.depth, dtype=F32), intr, guide), guide)


def _surface_edits(p: LookParams, albedo, rough, metal, ny, ny_depth=None, guide=None):
    """Snow cover (:func:`snow_cover`); wet surfaces (darker, smoother, puddles).

    Returns ``(albedo, roughness, metallic, snow cover or None)``."""
    one = F32(1.0)
    cover = None
    if p.snow > 0:
        cover = snow_cover(p, albedo, rough, metal, ny, ny_depth, guide)
        albedo = albedo + (sh.col(SNOW_ALBEDO) - albedo) * cover
        rough = rough + (F32(0.55) - rough) * cover
        metal = metal * (one - cover)
    if p.wetness > 0:
        wet = F32(p.wetness)
        puddle = sh.smoothstep(0.6, 0.9, ny) * wet
        albedo = albedo * (one - F32(0.45) * wet)
        rough = rough * (one - F32(0.6) * wet) * (one - F32(0.9) * puddle)
    return albedo, rough, metal, cover


#: guided upsampling of the depth normals' n_y: radius (low-res cells) and epsilon (on the
#: guide's square-root luminance, 0..1)
GUIDE_RADIUS = 2
GUIDE_EPS = 2e-3


def _guided_upsample(low: np.ndarray, guide: np.ndarray, r: int = GUIDE_RADIUS,
                     eps: float = GUIDE_EPS) -> np.ndarray:
    """Upsample ``low`` (h x w float32) to the guide's size (H x W float32, 0..1) so its
    edges follow the guide's: the fast guided filter (He & Sun 2015, arXiv:1505.00996):
    the local linear model ``q = a I + b`` is fitted on the low-res grid, its
    coefficients are box-smoothed and upsampled bilinearly, and applied to the full-size
    guide. Bilinear alone left the low-res grid's 6-8 px stair steps on every edge."""
    import cv2

    hl, wl = low.shape
    h, w = guide.shape
    g = resize(np.ascontiguousarray(guide, dtype=F32), (wl, hl), "area")
    k = (2 * r + 1, 2 * r + 1)

    def box(a):
        return cv2.boxFilter(a, -1, k, borderType=cv2.BORDER_REPLICATE)

    mi, mp = box(g), box(low)
    var = np.maximum(box(g * g) - mi * mi, F32(0.0))
    a = (box(g * low) - mi * mp) / (var + F32(eps))
    b = mp - a * mi
    a, b = sh.upsample(np.stack([box(a), box(b)]), h, w)
    return a * guide + b


def guided_mask(mask: np.ndarray, guide: np.ndarray, factor: int = 4) -> np.ndarray:
    """``mask`` (H x W float32, 0..1) with its edges re-fitted to ``guide``'s (H x W, linear
    luminance >= 0): area-downsampled by ``factor`` and guided-upsampled
    (:func:`_guided_upsample`), clipped to [0, 1]."""
    h, w = mask.shape
    low = resize(np.ascontiguousarray(mask, dtype=F32), (max(2, w // factor), max(2, h // factor)), "area")
    out = _guided_upsample(low, np.sqrt(np.clip(np.asarray(guide, dtype=F32), 0.0, 1.0)))
    return np.clip(out, 0.0, 1.0)


def _depth_up(depth: np.ndarray, intr, guide: Optional[np.ndarray] = None) -> np.ndarray:
    """``n_y`` of the normals of the depth buffer (smoothed on a ~160 px grid), H x W;
    upsampled along the edges of ``guide`` (H x W, e.g. the footage's luminance, linear
    >= 0) when given (:func:`_guided_upsample`), else bilinearly."""
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
    if guide is None:
        return sh.upsample(ny, h, w)
    return _guided_upsample(ny, np.sqrt(np.clip(np.asarray(guide, dtype=F32), 0.0, 1.0)))
