"""Temporal stabilisation of per-frame G-buffers with optical flow.

Method
------
1. **Flow**: OpenCV DIS optical flow (``cv2.DISOpticalFlow``, MEDIUM preset) on 8-bit
   luma of the sRGB-encoded frames, both directions: ``b = flow(cur -> prev)`` and
   ``f = flow(prev -> cur)``. Frames smaller than 16 px on a side use zero flow.
2. **Warp**: the previous frame's result is pulled into the current frame with
   ``cv2.remap`` at ``x + b(x)`` (bilinear, border replicate).
3. **Occlusion / consistency** (forward-backward check, Sundaram et al. 2010): a pixel
   ``x`` is consistent when ``x + b(x)`` lies inside the frame and
   ``|b(x) + f(x + b(x))|^2 <= 0.01 (|b(x)|^2 + |f(x + b(x))|^2) + 0.5``.
4. **Blend**: on consistent pixels ``out = w * cur + (1 - w) * warped_prev`` with
   ``w = 1 - strength``; inconsistent (occluded / disoccluded) pixels keep the current
   estimate. Normals are re-normalised; values are re-clipped to their ranges.
5. **Flicker metric**: mean absolute warping error ``|out - warped_prev_out|`` over
   consistent pixels, per pass (depth divided by the depth range so it is unitless),
   plus their mean. Lower is steadier. It is reported for the raw and the stabilised
   result so the effect is visible in ``manifest.json``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Tuple

import numpy as np

from .colour import linear_to_srgb

MIN_FLOW_SIZE = 16
#: passes blended by :func:`stabilize`, with their value range (None = unbounded/other)
BLEND_PASSES = ("depth", "normal", "albedo", "metallic", "roughness")


def _luma8(rgb_linear: np.ndarray) -> np.ndarray:
    s = linear_to_srgb(rgb_linear)
    y = 0.2126 * s[..., 0] + 0.7152 * s[..., 1] + 0.0722 * s[..., 2]
    return np.ascontiguousarray(np.clip(y * 255.0 + 0.5, 0, 255).astype(np.uint8))


_DIS: Dict[str, object] = {}
FLOW_PRESETS = ("medium", "fast", "ultrafast")


def _dis(preset: str = "medium"):
    if preset not in _DIS:
        import cv2

        if preset not in FLOW_PRESETS:
            raise ValueError(f"flow preset must be one of {FLOW_PRESETS}, got {preset!r}")
        _DIS[preset] = cv2.DISOpticalFlow_create(
            getattr(cv2, f"DISOPTICAL_FLOW_PRESET_{preset.upper()}"))
    return _DIS[preset]


def optical_flow(src_rgb: np.ndarray, dst_rgb: np.ndarray, preset: str = "medium") -> np.ndarray:
    """Dense flow ``H x W x 2`` (float32, pixels, (dx, dy)) mapping ``src`` pixels into ``dst``.

    ``src_rgb``/``dst_rgb`` are ``H x W x 3`` scene-linear. Tiny frames give zero flow.
    ``preset``: OpenCV DIS preset (Kroeger et al. 2016), ``medium`` (stabilisation) or
    the ~5x cheaper ``fast``/``ultrafast`` (metrics). Raises ValueError for others.
    """
    h, w = src_rgb.shape[:2]
    if min(h, w) < MIN_FLOW_SIZE:
        return np.zeros((h, w, 2), np.float32)
    return _dis(preset).calc(_luma8(src_rgb), _luma8(dst_rgb), None).astype(np.float32)


@lru_cache(maxsize=4)
def _grid(h: int, w: int):
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    gx.flags.writeable = False
    gy.flags.writeable = False
    return gx, gy


def warp(img: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """Sample ``img`` (``H x W`` or ``H x W x C``) at ``x + flow(x)`` (bilinear, replicate border)."""
    import cv2

    h, w = flow.shape[:2]
    gx, gy = _grid(h, w)
    mx = gx + flow[..., 0]
    my = gy + flow[..., 1]
    src = np.ascontiguousarray(img, dtype=np.float32)
    if src.ndim == 3 and src.shape[2] > 4:
        return np.stack([warp(src[..., i], flow) for i in range(src.shape[2])], axis=-1)
    out = cv2.remap(src, mx, my, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    if src.ndim == 3 and out.ndim == 2:
        out = out[..., None]
    return out


def consistency_mask(back: np.ndarray, fwd: np.ndarray, a: float = 0.01, b: float = 0.5) -> np.ndarray:
    """Forward-backward check; ``back = flow(cur -> prev)``, ``fwd = flow(prev -> cur)``.

    Returns:
        ``H x W`` bool, True where the flow is consistent (not occluded) and stays in frame.
    """
    h, w = back.shape[:2]
    gx, gy = _grid(h, w)
    tx, ty = gx + back[..., 0], gy + back[..., 1]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    fw = warp(fwd, back)
    s = back + fw
    lhs = np.sum(s * s, axis=-1)
    rhs = a * (np.sum(back * back, axis=-1) + np.sum(fw * fw, axis=-1)) + b
    return inside & (lhs <= rhs)


@dataclass
class FlowPair:
    """Flow between the previous and the current frame plus its consistency mask."""

    back: np.ndarray  # H x W x 2, cur -> prev
    mask: np.ndarray  # H x W bool

    @classmethod
    def compute(cls, prev_rgb: np.ndarray, cur_rgb: np.ndarray, preset: str = "medium") -> "FlowPair":
        back = optical_flow(cur_rgb, prev_rgb, preset)
        fwd = optical_flow(prev_rgb, cur_rgb, preset)
        return cls(back, consistency_mask(back, fwd))


def warp_passes(prev: Dict[str, np.ndarray], pair: FlowPair) -> Dict[str, np.ndarray]:
    """Warp every array of ``prev`` (pass name -> array) into the current frame."""
    return {k: warp(v, pair.back).reshape(v.shape) for k, v in prev.items() if v is not None}


def flicker(
    cur: Dict[str, np.ndarray], warped_prev: Dict[str, np.ndarray], mask: np.ndarray,
    depth_range: float = 1.0,
) -> Dict[str, float]:
    """Mean absolute warping error per pass over ``mask`` (+ ``"mean"`` of the passes).

    Depth errors are divided by ``depth_range``. Returns ``{}`` when no pixel is consistent.
    """
    if not mask.any():
        return {}
    out = {}
    for k in BLEND_PASSES:
        if k not in cur or k not in warped_prev:
            continue
        d = np.abs(cur[k] - warped_prev[k])
        if d.ndim == 3:
            d = d.mean(axis=-1)
        if k == "depth":
            d = d / max(depth_range, 1e-12)
        out[k] = float(d[mask].mean())
    if out:
        out["mean"] = float(np.mean(list(out.values())))
    return out


def stabilize(
    cur: Dict[str, np.ndarray], prev_out: Dict[str, np.ndarray], pair: FlowPair,
    strength: float = 0.5, depth_range: Tuple[float, float] = (0.0, np.inf),
) -> Dict[str, np.ndarray]:
    """Blend the current passes with the previous stabilised passes, warped.

    Args:
        cur: pass name -> current estimate (``depth`` ``H x W``, ``normal`` ``H x W x 3``
            unit, ``albedo`` ``H x W x 3``, ``metallic``/``roughness`` ``H x W``).
        prev_out: the previous frame's stabilised passes (same names and sizes).
        pair: flow from :meth:`FlowPair.compute` (previous -> current).
        strength: weight of the history in [0, 1); 0 = off.
        depth_range: ``(near, far)`` to clip blended depth to.

    Returns:
        New dict with the blended passes (other keys of ``cur`` copied unchanged).
    """
    if not 0.0 <= strength < 1.0:
        raise ValueError(f"strength must be in [0, 1), got {strength}")
    warped = warp_passes({k: prev_out.get(k) for k in BLEND_PASSES if k in cur}, pair)
    m = pair.mask
    out = dict(cur)
    for k, wv in warped.items():
        c = cur[k]
        if c is None or wv.shape != c.shape:
            continue
        mk = m[..., None] if c.ndim == 3 else m
        blended = np.where(mk, (1.0 - strength) * c + strength * wv, c).astype(np.float32)
        if k == "normal":
            n = np.linalg.norm(blended, axis=-1, keepdims=True)
            blended = np.where(n > 1e-6, blended / np.maximum(n, 1e-6), c).astype(np.float32)
        elif k == "depth":
            blended = np.clip(blended, depth_range[0], depth_range[1]).astype(np.float32)
        else:
            blended = np.clip(blended, 0.0, 1.0).astype(np.float32)
        out[k] = blended
    return out
