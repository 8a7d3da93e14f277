"""Edge-aligned, slope-preserving densification of measured depth: piecewise-planar
fits along image segments.

Plane sweep measures depth where there is texture; a first-order edge-aware smoother
fills the gaps with fronto-parallel steps (it pulls slanted surfaces flat toward the
camera, measured: held-out normals 36 -> 53 degrees). Here the frame is cut into
superpixels that follow image edges and every surface is described by *planes*:

1. **Superpixels**: SLIC (Achanta et al. 2012, "SLIC superpixels compared to
   state-of-the-art superpixel methods", TPAMI): k-means in CIELAB colour plus image
   position, each pixel compared with the 3 x 3 nearest cluster centres of the grid.
   Own numpy implementation (the wheels of the extension have no ximgproc / scikit-image).
2. **Robust plane per segment** in inverse depth, which is affine in the pixel
   coordinates for any plane (``1/z = a x + b y + c``), fitted by iteratively
   reweighted least squares (Tukey's biweight, scale from the weighted mean absolute
   residual) to the confident measured pixels of the segment. The residual of the fit
   says how planar the segment is.
3. **Merge** of neighbouring planar segments, agglomeratively: in each round a region
   merges with its best adjacent region (both each other's best) when the weighted
   least-squares plane of the two together fits about as well as each alone (relative RMS
   residual <= ``merge_ratio`` x their pooled residual + ``merge_floor``, and <=
   ``merge_cap``), then one robust refit per region: a flat face becomes *one* plane, so
   its normals are identical and its depth exactly planar. The cap stops a curved surface
   from being chained into one plane.
4. **Propagation** into segments with too few measurements (untextured surfaces between
   measured edges): repeatedly, such a segment takes the plane of the adjacent planar
   segment closest in colour (when closer than ``fill_colour``), extrapolated over it.
   Each hop lowers the confidence of the fill (``hop_decay``), which never reaches the
   confidence of a measurement (``fill_confidence``).

The planes are evaluated at every pixel: depth edges lie on segment boundaries (image
edges), slopes are kept, and normals come analytically from the planes
(:func:`backend.multiview.planefit.plane_normals`). Segments that neither measure nor
inherit a plane are left to the caller (``has_plane`` False).

This is in the spirit of segment-based stereo (Tao, Sawhney & Kumar 2001, "A global
matching framework for stereo computation", ICCV; Bleyer & Gelautz 2005) and the
piecewise-planar densification of multi-view stereo (e.g. Gallup, Frahm & Pollefeys
2010, "Piecewise planar and non-planar stereo for urban scene reconstruction", CVPR).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .planefit import plane_normals


@dataclass
class Densified:
    """Output of :func:`densify_planes` (all ``H x W`` of the guide).

    Attributes:
        depth: float32 planar depth (the measurement's units); NaN where ``has_plane`` is False.
        normal: float32 ``H x W x 3`` unit normals, OpenGL camera space (+Z toward the
            camera); ``(0, 0, 1)`` where ``has_plane`` is False.
        confidence: float32 in [0, 1]: how much the pixel's plane rests on measurement
            (its segment's share of confident pixels and fit quality; lowered per hop of
            propagation); 0 where ``has_plane`` is False.
        has_plane: bool.
        own: bool, pixels whose segment's plane was fitted to its own measurements (not
            propagated from a neighbour).
        labels: int32 superpixel label of each pixel (after merging: region label).
        plane: float32 ``H x W x 3``: each pixel's plane ``(a, b, c)`` with inverse depth
            ``a x + b y + c`` at pixel index ``(x, y)`` (zeros where ``has_plane`` is False),
            for :func:`upsample_densified`.
        segments: number of superpixels; regions: number after merging.
    """

    depth: np.ndarray
    normal: np.ndarray
    confidence: np.ndarray
    has_plane: np.ndarray
    own: np.ndarray
    labels: np.ndarray
    plane: np.ndarray
    segments: int
    regions: int


def slic(lab: np.ndarray, step: int, compactness: float = 10.0, iters: int = 5) -> np.ndarray:
    """SLIC superpixels (Achanta et al. 2012) of an ``H x W x 3`` CIELAB image.

    Args:
        lab: float32 CIELAB (L in 0..100), ``H x W x 3``.
        step: grid interval ``S`` in pixels (about the superpixel side), >= 2.
        compactness: ``m``, weight of the spatial distance (colour units per ``S``).
        iters: k-means iterations.

    Returns:
        ``H x W`` int32 labels in ``0 .. (H // S + 1) * (W // S + 1) - 1`` (some may be unused).
    """
    h, w = lab.shape[:2]
    step = max(2, int(step))
    ny, nx = max(1, int(round(h / step))), max(1, int(round(w / step)))
    sy, sx = h / ny, w / nx
    gy, gx = np.meshgrid((np.arange(ny) + 0.5) * sy, (np.arange(nx) + 0.5) * sx, indexing="ij")
    ys, xs = np.mgrid[0:h, 0:w]
    feat = np.concatenate([lab.reshape(-1, 3), xs.reshape(-1, 1), ys.reshape(-1, 1)], 1).astype(np.float32)
    ci = np.clip((ys / sy).astype(np.int64), 0, ny - 1)
    cj = np.clip((xs / sx).astype(np.int64), 0, nx - 1)
    cand = np.stack([np.clip(ci + di, 0, ny - 1) * nx + np.clip(cj + dj, 0, nx - 1)
                     for di in (-1, 0, 1) for dj in (-1, 0, 1)], -1).reshape(-1, 9)
    k = ny * nx
    centres = np.concatenate([np.zeros((k, 3), np.float32), gx.reshape(-1, 1), gy.reshape(-1, 1)], 1)
    centres[:, :3] = lab[np.clip(gy.astype(int), 0, h - 1), np.clip(gx.astype(int), 0, w - 1)].reshape(-1, 3)
    spatial = (compactness / ((sx + sy) / 2)) ** 2
    labels = cand[:, 4]
    for _ in range(iters):
        c = centres[cand]  # N x 9 x 5
        d = (np.square(feat[:, None, :3] - c[..., :3]).sum(-1)
             + spatial * np.square(feat[:, None, 3:] - c[..., 3:]).sum(-1))
        labels = cand[np.arange(len(cand)), np.argmin(d, 1)]
        cnt = np.bincount(labels, minlength=k).astype(np.float32)
        for f in range(5):
            s = np.bincount(labels, feat[:, f], minlength=k).astype(np.float32)
            centres[:, f] = np.where(cnt > 0, s / np.maximum(cnt, 1), centres[:, f])
    return labels.reshape(h, w).astype(np.int32)


def _compact(labels: np.ndarray) -> Tuple[np.ndarray, int]:
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.reshape(labels.shape).astype(np.int32), int(len(uniq))


def _fit_planes(lab_flat, n, xs, ys, q, w, iters: int = 4):
    """IRLS (Tukey) plane ``q ~ a x + b y + c`` per label. Returns ``theta`` (n x 3,
    about each label's weighted centroid ``cen`` n x 2), ``cen``, relative RMS residual
    (n), inlier weight sum (n), the final per-pixel weights."""
    ww = w.astype(np.float64).copy()
    theta = np.zeros((n, 3))
    cen = np.zeros((n, 2))
    resid = np.full(n, np.inf)
    wsum = np.zeros(n)
    for it in range(iters):
        bc = lambda v: np.bincount(lab_flat, v, minlength=n)
        sw = bc(ww)
        ok = sw > 1e-9
        mx, my = bc(ww * xs) / np.maximum(sw, 1e-9), bc(ww * ys) / np.maximum(sw, 1e-9)
        dx, dy = xs - mx[lab_flat], ys - my[lab_flat]
        A = np.empty((n, 3, 3))
        A[:, 0, 0], A[:, 0, 1], A[:, 0, 2] = bc(ww * dx * dx), bc(ww * dx * dy), bc(ww * dx)
        A[:, 1, 1], A[:, 1, 2], A[:, 2, 2] = bc(ww * dy * dy), bc(ww * dy), sw
        A[:, 1, 0], A[:, 2, 0], A[:, 2, 1] = A[:, 0, 1], A[:, 0, 2], A[:, 1, 2]
        A += np.eye(3)[None] * 1e-6 * np.maximum(sw, 1e-9)[:, None, None]
        rhs = np.stack([bc(ww * dx * q), bc(ww * dy * q), bc(ww * q)], -1)
        theta = np.linalg.solve(A, rhs[..., None])[..., 0]
        cen = np.stack([mx, my], -1)
        r = (q - (theta[lab_flat, 0] * dx + theta[lab_flat, 1] * dy + theta[lab_flat, 2])) / np.maximum(q, 1e-12)
        r = np.where(w > 0, r, 0.0)
        wb = bc(w)
        scale = bc(w * np.abs(r)) / np.maximum(wb, 1e-9)
        resid = np.sqrt(bc(ww * r * r) / np.maximum(sw, 1e-9))
        wsum = sw
        if it < iters - 1:
            c = 4.685 * 1.25 * np.maximum(scale, 1e-4)[lab_flat]  # mean |r| ~ 0.8 sigma
            u = np.clip(np.abs(r) / c, 0.0, 1.0)
            ww = w * np.square(1 - u * u)
        resid = np.where(ok, resid, np.inf)
    return theta, cen, resid, wsum, ww


def _stats(lab_flat, n, xs, ys, q, w):
    """Per label weighted moments of (x, y, 1) and q (x, y scaled to ~[-1, 1])."""
    bc = lambda v: np.bincount(lab_flat, v, minlength=n)
    f = [xs, ys, np.ones_like(xs)]
    S = np.empty((n, 3, 3))
    for i in range(3):
        for j in range(i, 3):
            S[:, i, j] = S[:, j, i] = bc(w * f[i] * f[j])
    r = np.stack([bc(w * f[i] * q) for i in range(3)], -1)
    return S, r, bc(w * q * q), bc(w * q)


def _joint_resid(S, r, qq, sq):
    """Relative RMS residual of the weighted LS plane from summed moments."""
    sw = S[..., 2, 2]
    A = S + np.eye(3) * 1e-9 * np.maximum(sw, 1e-9)[..., None, None]
    th = np.linalg.solve(A, r[..., None])[..., 0]
    sse = np.maximum(qq - (th * r).sum(-1), 0.0)
    mq = sq / np.maximum(sw, 1e-12)
    return np.sqrt(sse / np.maximum(sw, 1e-12)) / np.maximum(mq, 1e-12)


def _merge_regions(labels, lf, n, own, xs, ys, q, w, ratio, floor, cap, rounds: int = 12):
    """Agglomerative merging of adjacent planar segments (module doc, step 3): in each
    round every region merges with its best adjacent region when both are each other's
    best and the joint plane's residual passes the test. Returns the region of each label."""
    h, wd = labels.shape
    sx = (xs - wd / 2) / wd
    sy = (ys - h / 2) / wd
    wt = np.where(own[lf], w, 0.0)
    S, r, qq, sq = _stats(lf, n, sx, sy, q, wt)
    res = _joint_resid(S, r, qq, sq)
    region = np.arange(n)
    pairs = _adjacent_pairs(labels)
    for _ in range(rounds):
        p = region[pairs]
        p = p[(p[:, 0] != p[:, 1]) & own[p[:, 0]] & own[p[:, 1]]]
        p = np.unique(np.sort(p, 1), axis=0)
        if not len(p):
            break
        i, j = p[:, 0], p[:, 1]
        joint = _joint_resid(S[i] + S[j], r[i] + r[j], qq[i] + qq[j], sq[i] + sq[j])
        wi, wj = S[i, 2, 2], S[j, 2, 2]
        pooled = np.sqrt((wi * res[i] ** 2 + wj * res[j] ** 2) / np.maximum(wi + wj, 1e-12))
        ok = (joint <= ratio * pooled + floor) & (joint <= cap)
        if not ok.any():
            break
        i, j, cost = i[ok], j[ok], joint[ok] - pooled[ok]
        best = np.full(n, np.inf)
        np.minimum.at(best, i, cost)
        np.minimum.at(best, j, cost)
        mutual = (cost <= best[i]) & (cost <= best[j])
        i, j = i[mutual], j[mutual]
        used = np.zeros(n, bool)
        merged = False
        for a, b in zip(i, j):
            if used[a] or used[b]:
                continue
            used[a] = used[b] = True
            S[a] += S[b]; r[a] += r[b]; qq[a] += qq[b]; sq[a] += sq[b]
            res[a] = _joint_resid(S[a], r[a], qq[a], sq[a])
            region[region == b] = a
            merged = True
        if not merged:
            break
    return region


def _eval(theta, cen, lab_flat, xs, ys):
    return (theta[lab_flat, 0] * (xs - cen[lab_flat, 0]) + theta[lab_flat, 1] * (ys - cen[lab_flat, 1])
            + theta[lab_flat, 2])


def _adjacent_pairs(labels: np.ndarray) -> np.ndarray:
    a = np.concatenate([labels[:, :-1].ravel(), labels[:-1, :].ravel()])
    b = np.concatenate([labels[:, 1:].ravel(), labels[1:, :].ravel()])
    m = a != b
    p = np.stack([np.minimum(a[m], b[m]), np.maximum(a[m], b[m])], 1)
    return np.unique(p, axis=0) if len(p) else p.reshape(0, 2)


def _propagate(allp, own, mean_lab, plane, seg_conf, fill_colour, hop_decay, fill_confidence, max_hops):
    """Step 4 of the module doc, in place on ``plane`` / ``seg_conf``: unmeasured segments
    take the plane of the adjacent planar segment closest in colour. Returns ``has`` (n)."""
    has = own.copy()
    for _ in range(max_hops):
        a, b = allp[:, 0], allp[:, 1]
        src = np.concatenate([a, b])
        dst = np.concatenate([b, a])
        m = has[src] & ~has[dst]
        if not m.any():
            break
        src, dst = src[m], dst[m]
        dcol = np.linalg.norm(mean_lab[src] - mean_lab[dst], axis=-1)
        keep = dcol <= fill_colour
        src, dst, dcol = src[keep], dst[keep], dcol[keep]
        if not len(src):
            break
        order = np.lexsort((dcol, dst))
        src, dst = src[order], dst[order]
        first = np.concatenate([[True], dst[1:] != dst[:-1]])
        src, dst = src[first], dst[first]
        plane[dst] = plane[src]
        seg_conf[dst] = np.minimum(seg_conf[src] * hop_decay, fill_confidence)
        has[dst] = True
    return has


@dataclass(frozen=True)
class DensifyTuning:
    """:func:`densify_planes`'s tuning (its keyword options, documented there)."""

    threshold: float = 0.5
    step: Optional[int] = None
    compactness: float = 10.0
    min_measured: float = 0.25
    max_resid: float = 0.03
    merge_ratio: float = 1.3
    merge_floor: float = 0.002
    merge_cap: float = 0.01
    fill_colour: float = 12.0
    hop_decay: float = 0.8
    max_hops: int = 8
    fill_confidence: float = 0.45


def densify_planes(guide_rgb: np.ndarray, depth: np.ndarray, confidence: np.ndarray,
                   intrinsics: Tuple[float, float, float, float], **tuning) -> Densified:
    """Piecewise-planar densification of measured depth along image segments (module doc).

    Args:
        guide_rgb: ``H x W x 3`` float sRGB-encoded in [0, 1] (display-referred; the
            segmentation's colour space is CIELAB of it).
        depth: ``H x W`` float32 planar depth > 0 (measured; any value where not
            confident). confidence: ``H x W`` float32 in [0, 1].
        intrinsics: ``(fx, fy, cx, cy)`` in pixels of this grid.
        tuning: the fields of :class:`DensifyTuning` (another name is a ``TypeError``):
        threshold: confidence from which a pixel is a measurement.
        step: superpixel side in pixels (default ``max(8, W // 16)``; tuned on one held-in scene).
        min_measured: share of a segment that must be measured for its own plane.
        max_resid: largest relative RMS residual of a segment's own plane.
        merge_ratio, merge_floor: two regions merge when their joint plane's relative RMS
            residual is at most ``merge_ratio`` x their pooled own residual + ``merge_floor``
            and at most ``merge_cap``.
        fill_colour: largest CIELAB distance of a propagation step.
        hop_decay, max_hops: confidence factor per propagation hop, and most hops.
        fill_confidence: the most confidence a propagated plane gets (below the usual
            0.5 threshold: a plane carried over an unmeasured surface is a good guess, not
            a measurement; on an untextured room its confident share measured worse).

    Returns:
        :class:`Densified`.

    Raises:
        ValueError: shapes differ.
    """
    import cv2

    t = DensifyTuning(**tuning)
    h, w = depth.shape
    if guide_rgb.shape[:2] != (h, w) or confidence.shape != (h, w):
        raise ValueError(f"guide {guide_rgb.shape[:2]}, depth {(h, w)} and confidence "
                         f"{confidence.shape} differ in size")
    lab = cv2.cvtColor(np.clip(guide_rgb[..., :3], 0, 1).astype(np.float32), cv2.COLOR_RGB2Lab)
    labels, n = _compact(slic(lab, t.step or max(8, w // 16), t.compactness))
    lf = labels.ravel()
    ys, xs = np.mgrid[0:h, 0:w]
    xs, ys = xs.ravel().astype(np.float64), ys.ravel().astype(np.float64)
    q = 1.0 / np.maximum(depth.astype(np.float64).ravel(), 1e-12)
    conf = np.clip(confidence.astype(np.float64).ravel(), 0, 1)
    meas = (conf >= t.threshold) & np.isfinite(q) & (depth.ravel() > 0)
    wts = np.where(meas, conf, 0.0)
    cnt = np.bincount(lf, minlength=n).astype(np.float64)
    share = np.bincount(lf, meas.astype(np.float64), minlength=n) / np.maximum(cnt, 1)
    theta, cen, resid, _, ww_fit = _fit_planes(lf, n, xs, ys, q, wts)
    own = (share >= t.min_measured) & (resid <= t.max_resid) & (theta[:, 2] > 0)

    # merge neighbouring planar segments whose joint plane fits about as well as each
    region = _merge_regions(labels, lf, n, own, xs, ys, q, ww_fit, t.merge_ratio, t.merge_floor, t.merge_cap)
    reg_lf = region[lf]
    rtheta, rcen, rresid, _, _ = _fit_planes(reg_lf, n, xs, ys, q, wts)
    origin = lambda th, ce: np.stack([th[:, 0], th[:, 1], th[:, 2] - th[:, 0] * ce[:, 0] - th[:, 1] * ce[:, 1]], -1)
    plane = np.where(own[:, None], origin(rtheta[region], rcen[region]), 0.0)
    fit_res = np.where(own, rresid[region], np.inf)
    seg_conf = np.where(own, np.clip(share / 0.6, 0, 1) * np.exp(-np.square(fit_res / t.max_resid)), 0.0)

    # propagate into unmeasured segments by colour
    mean_lab = np.stack([np.bincount(lf, lab.reshape(-1, 3)[:, c], minlength=n) / np.maximum(cnt, 1)
                         for c in range(3)], -1)
    has = _propagate(_adjacent_pairs(labels), own, mean_lab, plane, seg_conf, t.fill_colour, t.hop_decay,
                     t.fill_confidence, t.max_hops)
    # a segment inherits the plane of a region (region labels for output)
    qv = plane[lf, 0] * xs + plane[lf, 1] * ys + plane[lf, 2]
    if meas.any():  # planes extrapolated beyond the measured depths are not evidence
        qlo, qhi = np.percentile(q[meas], [0.5, 99.5])
        ok = has[lf] & (qv >= 0.8 * qlo) & (qv <= 1.25 * qhi)
    else:
        ok = np.zeros_like(has[lf])
    d = np.where(ok, 1.0 / np.maximum(qv, 1e-12), np.nan).reshape(h, w).astype(np.float32)
    a_img = plane[lf, 0].reshape(h, w)
    b_img = plane[lf, 1].reshape(h, w)
    normal = plane_normals(a_img, b_img, np.where(ok, qv, 1.0).reshape(h, w), intrinsics)
    normal[~ok.reshape(h, w)] = (0.0, 0.0, 1.0)
    out_conf = np.where(ok, seg_conf[lf], 0.0).reshape(h, w).astype(np.float32)
    pl = np.where(ok[:, None], plane[lf], 0.0).reshape(h, w, 3).astype(np.float32)
    return Densified(d, normal, out_conf, ok.reshape(h, w), (ok & own[lf]).reshape(h, w), region[lf].reshape(h, w).astype(np.int32), pl,
                     n, int(len(np.unique(region[own]))) if own.any() else 0)


def upsample_densified(dn: Densified, size: Tuple[int, int],
                       intrinsics: Tuple[float, float, float, float]) -> Densified:
    """:class:`Densified` at ``size = (W, H)``: every pixel evaluates the plane of the
    low-resolution pixel it falls in at its own position (exact on planes; edges keep the
    low resolution's steps). ``intrinsics`` are those of the ``size`` grid."""
    h, w = dn.depth.shape
    W, H = size
    if (W, H) == (w, h):
        return dn
    x = (np.arange(W, dtype=np.float64) + 0.5) * (w / W) - 0.5
    y = (np.arange(H, dtype=np.float64) + 0.5) * (h / H) - 0.5
    xi = np.clip(np.round(x).astype(np.int64), 0, w - 1)
    yi = np.clip(np.round(y).astype(np.int64), 0, h - 1)
    pick = lambda a: a[yi[:, None], xi[None, :]]
    pl = pick(dn.plane).astype(np.float64)
    has = pick(dn.has_plane)
    q = pl[..., 0] * x[None, :] + pl[..., 1] * y[:, None] + pl[..., 2]
    has = has & (q > 0)
    sx, sy = w / W, h / H  # the gradient per full-size pixel
    normal = plane_normals(pl[..., 0] * sx, pl[..., 1] * sy, np.where(has, q, 1.0), intrinsics)
    normal[~has] = (0.0, 0.0, 1.0)
    depth = np.where(has, 1.0 / np.maximum(q, 1e-12), np.nan).astype(np.float32)
    return Densified(depth, normal, np.where(has, pick(dn.confidence), 0.0).astype(np.float32), has,
                     has & pick(dn.own), pick(dn.labels), np.zeros((H, W, 3), np.float32), dn.segments, dn.regions)
