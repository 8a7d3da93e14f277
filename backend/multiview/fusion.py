"""Fusion of measured (multi-view) depth with a single-image prior depth.

Where multi-view confidence is low (textureless walls, sky, water, moving objects,
occlusions) the depth comes from a single-image estimator instead, made to agree with
the measurement:

1. **Global alignment**: a robust scale and shift of the prior to the measured depth
   on the confident pixels (``backend.geometry``'s trimmed least squares: quantile
   start, then least squares on the 80 % best-fitting pixels), in depth or in inverse
   depth (``prior_space``; affine-invariant estimators such as MiDaS / Marigold
   predict one or the other).
2. **Smooth spatial correction**: the residual ``log(measured / aligned prior)`` on
   confident pixels is spread over the frame by normalized convolution (Knutsson &
   Westin 1993, "Normalized and differential convolution", CVPR): a wide Gaussian of
   the confidence-weighted residual divided by the same Gaussian of the confidence.
   The corrected prior therefore meets the measurement at the border of every hole.
3. **Blend** in log depth with weight ``w = smoothstep(confidence)`` so the seam is
   continuous: ``exp(w log measured + (1 - w) log corrected prior)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..geometry import _robust_scale_shift
from ..imaging import resize


@dataclass
class FusedDepth:
    """Output of :func:`fuse_depth` (all ``H x W``).

    Attributes:
        depth: float32 planar depth > 0 in the measured depth's units, complete.
        confidence: float32 in [0, 1], the multi-view confidence unchanged (the
            ``Confidence`` pass: high = measured, low = filled from the prior).
        measured: bool, pixels whose depth is mainly measured (``confidence >= threshold``).
        scale, shift: the global alignment ``aligned = scale * prior + shift`` (in
            ``prior_space``).
        fit_pixels: confident pixels the alignment used.
    """

    depth: np.ndarray
    confidence: np.ndarray
    measured: np.ndarray
    scale: float
    shift: float
    fit_pixels: int


def _smoothstep(x, lo, hi):
    t = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    return t * t * (3 - 2 * t)


def normalized_convolution(values: np.ndarray, weights: np.ndarray, sigma_frac: float = 0.08,
                           work_width: int = 256) -> np.ndarray:
    """Spread ``values`` from weighted pixels over the frame: ``G*(w v) / G*(w)``.

    Args:
        values, weights: ``H x W`` float arrays (weights >= 0).
        sigma_frac: Gaussian sigma as a fraction of the frame's larger side.
        work_width: the blur runs at this width (area-downsampled) and is upsampled
            bilinearly; the result is smooth anyway.

    Returns:
        ``H x W`` float32; 0 where no weight reaches.
    """
    import cv2

    h, w = values.shape
    ww = min(w, work_width)
    wh = max(1, round(h * ww / w))
    v = resize((values * weights).astype(np.float32), (ww, wh), "area")
    c = resize(weights.astype(np.float32), (ww, wh), "area")
    sigma = sigma_frac * max(ww, wh)
    num = cv2.GaussianBlur(v, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
    den = cv2.GaussianBlur(c, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
    out = np.where(den > 1e-6, num / np.maximum(den, 1e-6), 0.0).astype(np.float32)
    return resize(out, (w, h))


def fuse_depth(measured: np.ndarray, confidence: np.ndarray, prior: np.ndarray, *,
               prior_space: str = "depth", threshold: float = 0.5,
               sigma_frac: float = 0.08, min_fit_pixels: int = 64) -> FusedDepth:
    """Fill low-confidence pixels of measured depth from a prior, seamlessly.

    Args:
        measured: ``H x W`` float32 planar depth (> 0 where defined; units of the solve).
        confidence: ``H x W`` float32 in [0, 1] (e.g. :class:`DepthResult.confidence`).
        prior: ``H x W`` float relative depth from any single-image estimator; in
            ``prior_space = "depth"`` larger is farther (affine in depth), in
            ``"inverse"`` larger is nearer (affine in inverse depth / disparity).
            Resized to ``measured``'s size if needed.
        threshold: confidence above which pixels are "measured" and used for the fit;
            the blend ramps over ``[threshold / 2, threshold]``.
        sigma_frac: reach of the spatial correction (fraction of the frame size).
        min_fit_pixels: fewer confident pixels than this -> no fit possible.

    Returns:
        :class:`FusedDepth`.

    Raises:
        ValueError: shapes differ or ``prior_space`` is unknown, or fewer than
            ``min_fit_pixels`` confident pixels (no measurement to align to: the
            caller uses the single-image path).
    """
    if prior_space not in ("depth", "inverse"):
        raise ValueError(f"prior_space must be 'depth' or 'inverse', got {prior_space!r}")
    measured = np.asarray(measured, np.float32)
    conf = np.clip(np.asarray(confidence, np.float32), 0.0, 1.0)
    if conf.shape != measured.shape:
        raise ValueError(f"confidence {conf.shape} and depth {measured.shape} differ in shape")
    h, w = measured.shape
    prior = resize(np.asarray(prior, np.float32), (w, h))
    ok = (conf >= threshold) & (measured > 0) & np.isfinite(measured) & np.isfinite(prior)
    if ok.sum() < min_fit_pixels:
        raise ValueError(f"only {int(ok.sum())} confident pixels (< {min_fit_pixels}); "
                         "nothing to align the prior to")
    target = measured if prior_space == "depth" else 1.0 / np.maximum(measured, 1e-12)
    s, t = _robust_scale_shift(prior, target, ok)
    aligned = s * prior + t
    if prior_space == "inverse":
        aligned = 1.0 / np.maximum(aligned, 1e-12)
    lo = np.percentile(measured[ok], 0.5) * 0.5
    aligned = np.maximum(aligned, lo).astype(np.float32)  # a bad fit may not go <= 0
    resid = np.where(ok, np.log(np.maximum(measured, 1e-12) / aligned), 0.0).astype(np.float32)
    corr = normalized_convolution(resid, ok * conf, sigma_frac)
    filled = aligned * np.exp(corr)
    wgt = _smoothstep(conf, threshold / 2, threshold) * (measured > 0)
    logd = wgt * np.log(np.maximum(measured, 1e-12)) + (1 - wgt) * np.log(filled)
    return FusedDepth(np.exp(logd).astype(np.float32), conf, conf >= threshold, float(s), float(t),
                      int(ok.sum()))


def _nearest_along_rows(depth: np.ndarray, mask: np.ndarray, reverse: bool) -> np.ndarray:
    """Per pixel, the depth of the nearest ``mask`` pixel to its left (right if
    ``reverse``) on the same row; NaN where there is none."""
    d, m = (depth[:, ::-1], mask[:, ::-1]) if reverse else (depth, mask)
    w = d.shape[1]
    idx = np.where(m, np.arange(w)[None, :], -1)
    idx = np.maximum.accumulate(idx, axis=1)
    out = np.take_along_axis(d, np.maximum(idx, 0), axis=1).astype(np.float32)
    out[idx < 0] = np.nan
    return out[:, ::-1] if reverse else out


def fill_background(depth: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Fill pixels outside ``mask`` with the *farther* of the nearest ``mask`` depths to
    their left and right (then above / below where a row has none).

    Occlusion holes and the halos stereo leaves beside foreground objects belong to the
    background, so the farther neighbour is the right guess (Hirschmüller 2008, Sec.
    on occlusion interpolation: the lower disparity of the left/right valid neighbours).

    Args:
        depth: ``H x W`` float32 planar depth. mask: ``H x W`` bool, trusted pixels.

    Returns:
        ``H x W`` float32 depth, equal to ``depth`` on ``mask``; ``depth`` itself where
        no trusted pixel exists in the row or column.
    """
    depth = np.asarray(depth, np.float32)
    mask = np.asarray(mask, bool)
    with np.errstate(invalid="ignore"):
        lr = np.fmax(_nearest_along_rows(depth, mask, False), _nearest_along_rows(depth, mask, True))
        ud = np.fmax(_nearest_along_rows(depth.T, mask.T, False),
                     _nearest_along_rows(depth.T, mask.T, True)).T
    fill = np.where(np.isnan(lr), ud, lr)
    fill = np.where(np.isnan(fill), depth, fill)
    return np.where(mask, depth, fill).astype(np.float32)
