"""Input encoding and output decoding of the embedded G-buffer network (numpy only).

Shared by training (``training/``) and inference (:mod:`backend.estimators.embedded`),
so both see exactly the same pixels. No torch, no bpy.

Network input ("auto-exposed sRGB"):

1. scene-linear Rec.709 RGB is scaled so that the 97th percentile of its luminance
   becomes :data:`EXPOSURE_TARGET` (0.9) -- an auto-exposure, which makes the input
   independent of the absolute exposure of renders and footage;
2. clipped to [0, 1] and encoded with the sRGB transfer function
   (:func:`backend.colour.linear_to_srgb`: the way a camera JPEG looks; real footage
   decoded to linear round-trips to roughly its original pixels);
3. normalised per channel: ``(x - INPUT_MEAN) / INPUT_STD``.

Network outputs (all at the input size, ``N x C x H x W`` float32):
``disparity`` (relative inverse depth, >= 0, scale and shift unknown),
``normal`` (unit camera-space OpenGL), ``albedo`` (linear 0..1), ``metallic``,
``roughness`` (0..1), ``sky`` (probability 0..1 that the pixel has no surface).
"""
from __future__ import annotations

import numpy as np

from ..colour import linear_to_srgb

#: luminance percentile that the auto-exposure maps onto EXPOSURE_TARGET
EXPOSURE_PERCENTILE = 97.0
EXPOSURE_TARGET = 0.9
#: gain limits of the auto-exposure (a black frame is not amplified without bound)
EXPOSURE_GAIN_RANGE = (1.0 / 256.0, 256.0)
INPUT_MEAN = 0.45
INPUT_STD = 0.25
LUMA = np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)
#: network stride: input H and W are padded to multiples of this
STRIDE = 32


def auto_exposure_gain(rgb: np.ndarray) -> float:
    """Gain that maps the 97th luminance percentile of ``rgb`` (H x W x 3 linear) to 0.9."""
    rgb = np.asarray(rgb, dtype=np.float32)
    step = max(1, int(np.sqrt(rgb.shape[0] * rgb.shape[1] / 65536.0)))
    lum = np.tensordot(rgb[::step, ::step], LUMA, axes=([-1], [0]))
    lum = lum[np.isfinite(lum)]
    p = float(np.percentile(lum, EXPOSURE_PERCENTILE)) if lum.size else 0.0
    if p <= 1e-8:
        return EXPOSURE_GAIN_RANGE[1]
    lo, hi = EXPOSURE_GAIN_RANGE
    return float(np.clip(EXPOSURE_TARGET / p, lo, hi))


def normalise_encoded(srgb: np.ndarray) -> np.ndarray:
    """sRGB-encoded H x W x 3 in [0, 1] -> network input 1 x 3 x H x W float32."""
    x = (np.asarray(srgb, dtype=np.float32) - INPUT_MEAN) / INPUT_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def encode_input(rgb_linear: np.ndarray) -> np.ndarray:
    """Scene-linear H x W x 3 -> network input ``1 x 3 x H x W`` float32 (see module doc)."""
    rgb = np.nan_to_num(np.asarray(rgb_linear, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    rgb = np.maximum(rgb, 0.0)
    return normalise_encoded(linear_to_srgb(rgb * auto_exposure_gain(rgb)))


def pad_to_stride(h: int, w: int, stride: int = STRIDE) -> tuple:
    """``(pad_bottom, pad_right)`` that make ``h`` and ``w`` multiples of ``stride``."""
    return (-h) % stride, (-w) % stride


def disparity_to_depth(disp: np.ndarray, sky: np.ndarray | None = None, *,
                       max_ratio: float = 200.0, sky_threshold: float = 0.5) -> tuple:
    """Relative disparity -> relative depth (> 0, larger = farther).

    The network's disparity is known up to scale (and, weakly, shift): this takes
    ``depth = 1 / disp`` after normalising by the 95th disparity percentile of
    non-sky pixels (the nearest surfaces get depth ~1) and clamping disparity from
    below at ``1 / max_ratio`` of that, so the depth range spans at most
    ``max_ratio``. Sky pixels (``sky > sky_threshold``) get the far value.

    Args:
        disp: ``H x W`` float32 network disparity (>= 0).
        sky: optional ``H x W`` sky probability.

    Returns:
        ``(depth, confidence)``: ``H x W`` float32 depth > 0, and confidence in
        [0, 1] (``1 - sky``; 0 where sky).
    """
    disp = np.asarray(disp, dtype=np.float32)
    surf = np.ones(disp.shape, bool) if sky is None else (sky <= sky_threshold)
    vals = disp[surf] if surf.any() else disp.ravel()
    ref = float(np.percentile(vals, 95.0)) if vals.size else 1.0
    if not np.isfinite(ref) or ref <= 1e-8:
        ref = float(disp.max()) if disp.size and disp.max() > 1e-8 else 1.0
    d = np.maximum(disp / ref, 1.0 / max_ratio)
    depth = (1.0 / d).astype(np.float32)
    if sky is None:
        conf = np.ones(disp.shape, np.float32)
    else:
        far = float(depth[surf].max()) if surf.any() else max_ratio
        depth = np.where(surf, depth, max(far, 1.0)).astype(np.float32)
        conf = np.where(surf, 1.0 - sky, 0.0).astype(np.float32)
    return depth, conf
