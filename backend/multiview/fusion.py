"""Fusion of measured (multi-view) depth with a single-image prior depth.

Where multi-view confidence is low (textureless walls, sky, water, moving objects,
occlusions) the depth comes from a single-image estimator instead, made to agree with
the measurement:

1. **Global alignment**: a robust scale and shift of the prior to the measured depth
   on the confident pixels (``backend.geometry``'s trimmed least squares: quantile
   start, then least squares on the 80 % best-fitting pixels), in depth or in inverse
   depth (``prior_space``; affine-invariant estimators such as MiDaS / Marigold
   predict one or the other).
2. **Trust in the prior**: the prior's shape is used only as far as it orders depth
   like the measurement: Spearman's rank correlation ``rho`` between prior and measured
   depth on the confident pixels sets ``trust = clip((rho - 0.5) / 0.4, 0, 1)``, and the
   aligned prior's log depth is pulled toward the measured median by ``1 - trust``. A
   prior that orders the scene wrongly (measured on real footage: the embedded network
   on an office, ``rho`` about 0.1) then adds no false structure; the holes are filled
   from the measurement alone.
3. **Spatial correction** of the residual ``log(measured / trusted prior)`` on confident
   pixels by normalized convolution (Knutsson & Westin 1993, "Normalized and
   differential convolution", CVPR; a Gaussian of the confidence-weighted residual
   divided by the same Gaussian of the confidence) over a pyramid of scales, coarse to
   fine: the finest scale that has enough measured support nearby wins, so a small hole
   takes its depth from its own rim and a large one from a wider neighbourhood. The
   corrected prior meets the measurement at the border of every hole.
4. **Blend** in log depth with weight ``w = smoothstep(confidence)`` so the seam is
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
        prior_rank_corr: Spearman rank correlation of the prior with the measured depth
            on those pixels (-1..1; 1 = the prior orders depth exactly as measured).
        prior_trust: the weight of the prior's shape in the fill, 0..1 (see module doc).
    """

    depth: np.ndarray
    confidence: np.ndarray
    measured: np.ndarray
    scale: float
    shift: float
    fit_pixels: int
    prior_rank_corr: float = 1.0
    prior_trust: float = 1.0


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


def rank_correlation(a: np.ndarray, b: np.ndarray, max_samples: int = 20000, seed: int = 0) -> float:
    """Spearman's rank correlation of two 1-D samples (a fixed random subsample of at
    most ``max_samples`` pairs; ties broken by order). Returns 0.0 for fewer than 3
    pairs or a constant sample."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.size > max_samples:
        idx = np.random.default_rng(seed).choice(a.size, max_samples, replace=False)
        a, b = a[idx], b[idx]
    if a.size < 3:
        return 0.0
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def multiscale_fill(values: np.ndarray, weights: np.ndarray,
                    sigma_fracs=(0.16, 0.08, 0.04, 0.02, 0.01), support=(0.02, 0.15)) -> np.ndarray:
    """Normalized convolution over a pyramid of scales, coarse to fine.

    Each finer scale replaces the coarser result where its own support (the blurred
    weight, 0..1 for weights in 0..1) rises from ``support[0]`` to ``support[1]``
    (smoothstep), so values come from the nearest well-supported neighbourhood.

    Args:
        values, weights: ``H x W`` float arrays (weights in [0, 1]).
        sigma_fracs: Gaussian sigmas as fractions of the frame's larger side, coarse first.

    Returns:
        ``H x W`` float32 (0 where no weight reaches even the coarsest scale).
    """
    import cv2

    h, w = values.shape
    ww = min(w, 256)
    wh = max(1, round(h * ww / w))
    v = resize((values * weights).astype(np.float32), (ww, wh), "area")
    c = resize(weights.astype(np.float32), (ww, wh), "area")
    out = None
    for frac in sigma_fracs:
        sigma = max(0.5, frac * max(ww, wh))
        num = cv2.GaussianBlur(v, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
        den = cv2.GaussianBlur(c, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
        est = np.where(den > 1e-6, num / np.maximum(den, 1e-6), 0.0).astype(np.float32)
        if out is None:
            out = est
        else:
            a = _smoothstep(den, support[0], support[1])
            out = (a * est + (1 - a) * out).astype(np.float32)
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
        sigma_frac: reach of the spatial correction (fraction of the frame size): its
            scales run from ``2 * sigma_frac`` down to 1 % of the frame.
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
    rho = rank_correlation(prior[ok] if prior_space == "depth" else -prior[ok], measured[ok])
    trust = float(np.clip((rho - 0.5) / 0.4, 0.0, 1.0))
    log_aligned = np.log(aligned)
    if trust < 1.0:
        centre = float(np.median(np.log(np.maximum(measured[ok], 1e-12))))
        log_aligned = (centre + trust * (log_aligned - centre)).astype(np.float32)
    resid = np.where(ok, np.log(np.maximum(measured, 1e-12)) - log_aligned, 0.0).astype(np.float32)
    fracs = tuple(f for f in (0.16, 0.08, 0.04, 0.02, 0.01) if f <= 2 * sigma_frac)
    corr = multiscale_fill(resid, ok * conf, fracs)
    log_filled = log_aligned + corr
    wgt = _smoothstep(conf, threshold / 2, threshold) * (measured > 0)
    logd = wgt * np.log(np.maximum(measured, 1e-12)) + (1 - wgt) * log_filled
    return FusedDepth(np.exp(logd).astype(np.float32), conf, conf >= threshold, float(s), float(t),
                      int(ok.sum()), rho, trust)


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
