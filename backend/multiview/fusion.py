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
               sigma_frac: float = 0.08, min_fit_pixels: int = 64,
               guide: Optional[np.ndarray] = None, smooth_width: Optional[int] = None,
               smooth_lambda: Optional[float] = None, prior_weight: float = 0.02) -> FusedDepth:
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
        guide: the frame (``H x W [x C]``, about [0, 1]); given, the blended depth is
            then smoothed edge-aware in inverse depth (:func:`edge_aware_smooth`),
            each pixel weighted by ``confidence^2`` and the filled (prior) pixels by
            ``prior_weight``: low-confidence measurements give way to their confident
            neighbours on the same surface (frame edges stop the smoothing) and,
            away from any, to the aligned prior, instead of showing their noise.
        smooth_width: the smoothing runs at this width (``None``: full size) and is
            upsampled bilinearly. smooth_lambda: its smoothness (``None``: reach of
            about 1/30 of the width).

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
    depth = np.exp(logd).astype(np.float32)
    if guide is not None:
        depth = _smooth_fused(depth, conf, wgt, guide, smooth_width, smooth_lambda, prior_weight)
    return FusedDepth(depth, conf, conf >= threshold, float(s), float(t), int(ok.sum()))


def _smooth_fused(depth, conf, wgt, guide, width, lam, prior_weight) -> np.ndarray:
    """Edge-aware, confidence-weighted smoothing of the fused depth in inverse depth
    (see :func:`fuse_depth`'s ``guide``)."""
    h, w = depth.shape
    sw = w if width is None else min(int(width), w)
    sh = max(1, round(h * sw / w))
    small = (lambda a, mode="area": a if (sw, sh) == (w, h) else resize(a, (sw, sh), mode))
    g = np.asarray(guide, np.float32)
    if g.shape[:2] != (h, w):
        g = resize(g, (w, h))
    inv = small(1.0 / np.maximum(depth, 1e-12))
    c = small(conf)
    wt = c * c * small(wgt) + prior_weight * (1.0 - small(wgt))
    lam = (sw / 30.0) ** 2 if lam is None else lam
    out = edge_aware_smooth(inv, wt, small(g), lam=lam)
    if (sw, sh) != (w, h):
        out = resize(out, (w, h), "linear")
    return (1.0 / np.maximum(out, 1e-12)).astype(np.float32)


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


def _edge_weights(guide: np.ndarray, axis: int, sigma: float) -> np.ndarray:
    """``exp(-|g_i - g_{i+1}| / sigma)`` between neighbours along ``axis`` of an
    ``H x W [x C]`` guide (largest channel difference), shape ``H x W`` with 0 on the
    last row/column (no neighbour)."""
    g = guide if guide.ndim == 3 else guide[..., None]
    diff = np.abs(np.diff(g, axis=axis)).max(axis=-1)
    pad = [(0, 0), (0, 0)]
    pad[axis] = (0, 1)
    return np.pad(np.exp(-diff / sigma), pad).astype(np.float32)


def _tridiagonal_pass(f: np.ndarray, w: np.ndarray, lam: float) -> np.ndarray:
    """Solve ``(I + lam L_w) u = f`` along axis 0 of ``f`` (``n x m [x k]``), one
    independent system per column, where ``L_w`` is the 1-D graph Laplacian with edge
    weights ``w[i]`` between ``i`` and ``i + 1`` (Thomas algorithm, vectorised over
    the columns)."""
    n = f.shape[0]
    c = -lam * w  # super-diagonal (c[n-1] = 0)
    a = np.concatenate([np.zeros_like(c[:1]), c[:-1]])  # sub-diagonal
    b = 1.0 - a - c
    cp = np.empty_like(c)
    inv_m = np.empty_like(c)
    inv_m[0] = 1.0 / b[0]
    cp[0] = c[0] * inv_m[0]
    tmp = np.empty_like(c[0])
    for i in range(1, n):
        np.multiply(a[i], cp[i - 1], out=tmp)
        np.subtract(b[i], tmp, out=tmp)
        np.divide(1.0, tmp, out=inv_m[i])
        np.multiply(c[i], inv_m[i], out=cp[i])
    e = a * inv_m
    if f.ndim == 3:
        e, cp, inv_m = e[..., None], cp[..., None], inv_m[..., None]
    d = f * inv_m
    t2 = np.empty_like(d[0])
    for i in range(1, n):
        np.multiply(e[i], d[i - 1], out=t2)
        np.subtract(d[i], t2, out=d[i])
    for i in range(n - 2, -1, -1):
        np.multiply(cp[i], d[i + 1], out=t2)
        np.subtract(d[i], t2, out=d[i])
    return d


def edge_aware_smooth(values: np.ndarray, weights: np.ndarray, guide: np.ndarray, *,
                      lam: float = 100.0, sigma: float = 0.06, iterations: int = 3) -> np.ndarray:
    """Confidence-weighted, edge-aware smoothing and interpolation of ``values``: the
    fast global smoother (Min et al. 2014, "Fast global image smoothing based on
    weighted least squares", TIP), alternating 1-D weighted-least-squares solves along
    rows and columns with ``lam`` shrinking by 4x per iteration, applied as a
    normalized convolution ``FGS(w v) / FGS(w)`` (their sparse-data form) so that
    reliable pixels dominate and unreliable ones take their edge-aware neighbours'.

    Args:
        values, weights: ``H x W`` float (weights >= 0).
        guide: ``H x W [x C]`` image in about [0, 1] whose edges stop the smoothing.
        lam: smoothness (the reach is about ``sqrt(lam)`` pixels).
        sigma: guide difference at which an edge weakens the coupling by ``1/e``.

    Returns:
        ``H x W`` float32 (``values`` where no weight reaches).
    """
    guide = np.asarray(guide, np.float32)
    wx = _edge_weights(guide, 1, sigma).T.copy()  # W x H: rows solved as columns
    wy = _edge_weights(guide, 0, sigma)
    f = np.stack([np.asarray(values, np.float32) * weights, np.asarray(weights, np.float32)], -1)
    for t in range(iterations):
        lt = 1.5 * lam * 4.0 ** (iterations - 1 - t) / (4.0 ** iterations - 1)
        f = _tridiagonal_pass(f.transpose(1, 0, 2), wx, lt).transpose(1, 0, 2)
        f = _tridiagonal_pass(f, wy, lt)
    num, den = f[..., 0], f[..., 1]
    return np.where(den > 1e-6, num / np.maximum(den, 1e-6), values).astype(np.float32)
