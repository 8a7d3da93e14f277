"""Camera geometry: intrinsics, normals from depth, depth alignment.

Conventions (same as the G-buffer contract):

* Image pixel ``(x, y)``: ``x`` to the right, ``y`` down, pixel centres at ``x + 0.5``.
* Camera space, OpenGL: +X right, +Y up, +Z toward the viewer; the camera looks
  down -Z. Planar depth ``z > 0`` is the distance along the camera axis, so a point
  at depth ``z`` has camera coordinate ``Z = -z``.
* Intrinsics ``(fx, fy, cx, cy)`` in pixels of the frame they describe.

Normals from depth (as in the seed paper, which recomputes camera-space normals from
the depth map): back-project every pixel

    P(x, y) = ( (x + 0.5 - cx) * z / fx,  -(y + 0.5 - cy) * z / fy,  -z )

take the tangents ``dP/dx`` and ``dP/dy`` by finite differences and set
``n = normalize(dP/dy x dP/dx)``, which points toward the camera (+Z) for a
surface facing it. At each pixel the one-sided difference (forward or backward)
with the smaller depth change is used, so depth edges do not smear normals across
objects. A frame 1 pixel wide (or high) is treated as flat along that axis; where
the cross product degenerates the normal is ``(0, 0, 1)``.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

#: horizontal field of view assumed when the intrinsics are unknown (degrees);
#: a typical phone / 35 mm-equivalent ~31 mm lens.
DEFAULT_HFOV_DEG = 60.0


def intrinsics_from_fov(
    width: int, height: int, hfov_deg: float = DEFAULT_HFOV_DEG, sar: float = 1.0
) -> Tuple[float, float, float, float]:
    """Pinhole intrinsics from a horizontal field of view.

    ``fx = (W / 2) / tan(hfov / 2)``, ``fy = fx * sar`` (a pixel ``sar`` times wider
    than tall covers ``sar`` times more angle per column), principal point at the
    image centre ``(W / 2, H / 2)``.

    Args:
        width, height: frame size in pixels (>= 1).
        hfov_deg: horizontal field of view in degrees, in (0, 180).
        sar: sample aspect ratio (pixel width / pixel height).

    Returns:
        ``(fx, fy, cx, cy)`` in pixels.

    Raises:
        ValueError: non-positive size or a field of view outside (0, 180).
    """
    if width < 1 or height < 1:
        raise ValueError(f"frame size must be >= 1x1, got {width}x{height}")
    if not 0.0 < hfov_deg < 180.0:
        raise ValueError(f"hfov_deg must be in (0, 180), got {hfov_deg}")
    fx = (width / 2.0) / math.tan(math.radians(hfov_deg) / 2.0)
    return fx, fx * float(sar), width / 2.0, height / 2.0


def intrinsics_from_fov_windows(
    data_window: Sequence[int], display_window: Sequence[int], hfov_deg: float = DEFAULT_HFOV_DEG,
    sar: float = 1.0,
) -> Tuple[float, float, float, float]:
    """Pinhole intrinsics of an overscan frame (an OpenEXR data window larger than its
    display window): the field of view spans the *display* window and the principal
    point is its centre, both in pixels of the *data* window (the pixels written, origin
    at the data window's upper-left corner), so ``cx = (dispX0 - dataX0) + dispW / 2``.

    Args:
        data_window, display_window: ``[x0, y0, x1, y1]`` inclusive, in OpenEXR pixel
            coordinates.
        hfov_deg, sar: as :func:`intrinsics_from_fov`.

    Returns:
        ``(fx, fy, cx, cy)`` in pixels.

    Raises:
        ValueError: an empty window or a field of view outside (0, 180).
    """
    dx0, dy0 = int(data_window[0]), int(data_window[1])
    x0, y0, x1, y1 = (int(v) for v in display_window)
    fx, fy, cx, cy = intrinsics_from_fov(x1 - x0 + 1, y1 - y0 + 1, hfov_deg, sar)
    return fx, fy, cx + (x0 - dx0), cy + (y0 - dy0)


def scale_intrinsics(intr, from_wh: Tuple[int, int], to_wh: Tuple[int, int]):
    """Intrinsics of a resized frame: ``fx, cx`` scale with width, ``fy, cy`` with height."""
    fx, fy, cx, cy = intr
    sx = to_wh[0] / from_wh[0]
    sy = to_wh[1] / from_wh[1]
    return fx * sx, fy * sy, cx * sx, cy * sy


def backproject(depth: np.ndarray, intrinsics) -> np.ndarray:
    """Camera-space points ``H x W x 3`` (float32, OpenGL) from planar depth ``H x W``."""
    fx, fy, cx, cy = map(float, intrinsics)
    h, w = depth.shape
    x = (np.arange(w, dtype=np.float32) + 0.5 - cx) / fx
    y = (np.arange(h, dtype=np.float32) + 0.5 - cy) / fy
    z = depth.astype(np.float32)
    return np.stack([x[None, :] * z, -y[:, None] * z, -z], axis=-1)


def _tangent(p: np.ndarray, z: np.ndarray, axis: int) -> np.ndarray:
    """Finite-difference tangent along ``axis``, picking the smoother one-sided difference."""
    n = p.shape[axis]
    if n < 2:
        return np.zeros_like(p)
    fwd = np.diff(p, axis=axis)  # n-1 differences
    dz = np.abs(np.diff(z, axis=axis))
    pad = [(0, 0)] * p.ndim
    pad_z = [(0, 0)] * z.ndim
    # forward difference at i is P[i+1]-P[i]; backward is P[i]-P[i-1]
    pad[axis] = (0, 1)
    pad_z[axis] = (0, 1)
    f = np.pad(fwd, pad, mode="edge")
    fz = np.pad(dz, pad_z, mode="constant", constant_values=np.inf)
    pad[axis] = (1, 0)
    pad_z[axis] = (1, 0)
    b = np.pad(fwd, pad, mode="edge")
    bz = np.pad(dz, pad_z, mode="constant", constant_values=np.inf)
    use_f = (fz <= bz)[..., None]
    return np.where(use_f, f, b)


def normals_from_depth(
    depth: np.ndarray,
    intrinsics: Optional[Tuple[float, float, float, float]] = None,
    *,
    hfov_deg: float = DEFAULT_HFOV_DEG,
) -> np.ndarray:
    """Camera-space unit normals from planar depth (see module docstring for the maths).

    Args:
        depth: ``H x W`` float, planar depth > 0 (any units; normals are scale-invariant).
        intrinsics: ``(fx, fy, cx, cy)`` in pixels; ``None`` -> :func:`intrinsics_from_fov`
            with ``hfov_deg``.

    Returns:
        ``H x W x 3`` ``float32`` unit normals, OpenGL camera space (+Z toward camera).

    Raises:
        ValueError: ``depth`` is not 2-D.
    """
    depth = np.asarray(depth, dtype=np.float32)
    if depth.ndim != 2:
        raise ValueError(f"depth must be H x W, got shape {depth.shape}")
    h, w = depth.shape
    if intrinsics is None:
        intrinsics = intrinsics_from_fov(w, h, hfov_deg)
    p = backproject(depth, intrinsics)
    tx = _tangent(p, depth, axis=1)
    ty = _tangent(p, depth, axis=0)
    if w < 2:  # no horizontal neighbours: assume the surface is flat across x
        tx = np.zeros_like(p)
        tx[..., 0] = 1.0
    if h < 2:
        ty = np.zeros_like(p)
        ty[..., 1] = -1.0
    return unit_or_facing(np.cross(ty, tx), 1e-12)


def unit_or_facing(n: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Normalise ``H x W x 3`` vectors; those shorter than ``eps`` become (0, 0, 1),
    the camera-facing normal. Returns float32 (divided in float64 for float64 input).

    Channel by channel over strided views: the same sums and divisions as
    ``np.linalg.norm`` over the last axis and ``n / length``, without their slow
    length-3 inner loops."""
    a = np.asarray(n)
    if a.dtype != np.float64 and a.dtype != np.float32:
        a = a.astype(np.float64 if a.dtype.kind in "iub" else np.float32)
    length = np.multiply(a[..., 0], a[..., 0], out=np.empty(a.shape[:-1], a.dtype))
    sq = np.empty_like(length)
    for c in (1, 2):
        length += np.multiply(a[..., c], a[..., c], out=sq)
    np.sqrt(length, out=length)
    ok = length > eps
    out = np.empty(a.shape, np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        for c in range(3):
            np.divide(a[..., c], length, out=out[..., c], casting="unsafe")
    if not ok.all():
        out[~ok] = (0.0, 0.0, 1.0)
    return out


def normal_consistency(a: np.ndarray, b: np.ndarray, mask: Optional[np.ndarray] = None) -> float:
    """Mean angle in degrees between two ``H x W x 3`` unit normal maps (over ``mask``)."""
    dot = np.clip(np.sum(a * b, axis=-1), -1.0, 1.0)
    ang = np.degrees(np.arccos(dot))
    if mask is not None:
        ang = ang[mask]
    return float(ang.mean()) if ang.size else 0.0


def align_scale_shift(
    pred: np.ndarray, ref: np.ndarray, mask: Optional[np.ndarray] = None
) -> Tuple[float, float]:
    """Least-squares ``(s, t)`` minimising ``sum((s * pred + t - ref)^2)`` over ``mask``.

    Args:
        pred, ref: arrays of the same shape.
        mask: boolean array of that shape (``None`` = all finite pixels).

    Returns:
        ``(scale, shift)`` as floats. With fewer than 2 valid pixels or constant
        ``pred`` the scale is 1 and the shift matches the means.
    """
    pred = np.asarray(pred, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    m = np.isfinite(pred) & np.isfinite(ref)
    if mask is not None:
        m &= mask.astype(bool)
    p, r = pred[m], ref[m]
    if p.size < 2:
        return 1.0, float(r.mean() - p.mean()) if p.size else 0.0
    pm, rm = p.mean(), r.mean()
    var = np.mean((p - pm) ** 2)
    if var < 1e-20:
        return 1.0, float(rm - pm)
    s = np.mean((p - pm) * (r - rm)) / var
    return float(s), float(rm - s * pm)


def normalise_relative_depth(
    depth: np.ndarray, near: float, far: float, mask: Optional[np.ndarray] = None,
    lo_pct: float = 1.0, hi_pct: float = 99.0, clip_max: Optional[float] = None,
) -> np.ndarray:
    """Map relative depth affinely onto ``[near, far]`` using robust percentiles.

    The ``lo_pct`` / ``hi_pct`` percentiles of the (masked) depth map to ``near`` /
    ``far``; the result is clipped to ``[near, clip_max or far]``. Larger input = farther.
    """
    d = np.asarray(depth, dtype=np.float32)
    vals = d[mask] if mask is not None and mask.any() else d.ravel()
    lo, hi = np.percentile(vals, [lo_pct, hi_pct]) if vals.size else (0.0, 1.0)
    if not hi > lo:
        return np.full_like(d, (near + far) / 2.0)
    out = near + (d - lo) * (far - near) / (hi - lo)
    return np.clip(out, near, far if clip_max is None else clip_max).astype(np.float32)


def _robust_scale_shift(pred: np.ndarray, ref: np.ndarray, mask: np.ndarray, iters: int = 3):
    """Scale/shift robust to outliers: a quantile-based start, then least squares on the
    80 % of pixels with the smallest residuals, ``iters`` times."""
    p, r = pred[mask].astype(np.float64), ref[mask].astype(np.float64)
    pq = np.percentile(p, [25, 50, 75])
    rq = np.percentile(r, [25, 50, 75])
    s = (rq[2] - rq[0]) / (pq[2] - pq[0]) if pq[2] > pq[0] else 1.0
    t = rq[1] - s * pq[1]
    for _ in range(iters):
        res = np.abs(s * p + t - r)
        keep = res <= np.percentile(res, 80)
        if keep.sum() < 4:
            break
        s, t = align_scale_shift(p[keep], r[keep])
    return s, t


class TemporalDepthAligner:
    """Keeps relative depth from pumping: each frame is scale/shift-aligned to the previous.

    The first frame is mapped onto ``[near, near + surface_fraction * (far - near)]`` by
    :func:`normalise_relative_depth` (the rest of the range is headroom, so surfaces
    that recede later are not clipped into the sky value ``far``).
    Every later frame's raw prediction gets the ``(s, t)`` from :func:`align_scale_shift`
    against the previous *aligned* frame (over pixels that have a surface in both and
    were not clipped), fitted robustly (quantile start, then least squares on the 80 %
    best-fitting pixels, three rounds) so moving objects and occlusions do not skew it,
    then is clipped to ``[near, far]``. If the fit is degenerate (``s <= 0``) or covers too few
    pixels, the frame falls back to per-frame normalisation.

    Args:
        near, far: target range (the contract's relative range).
        surface_fraction: part of the range the first frame's surfaces span.
    """

    def __init__(self, near: float, far: float, surface_fraction: float = 0.5):
        self.near, self.far = float(near), float(far)
        self.first_far = self.near + float(surface_fraction) * (self.far - self.near)
        self.prev: Optional[np.ndarray] = None
        self.prev_mask: Optional[np.ndarray] = None

    def reset(self, prev: Optional[np.ndarray] = None, mask: Optional[np.ndarray] = None) -> None:
        """Forget the history, or seed it with an already aligned frame (e.g. on resume)."""
        self.prev = None if prev is None else np.asarray(prev, np.float32)
        self.prev_mask = mask

    def __call__(self, depth: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Align one ``H x W`` relative depth map; ``mask`` marks pixels with a surface.

        Returns:
            ``H x W`` ``float32`` in ``[near, far]``.
        """
        d = np.asarray(depth, dtype=np.float32)
        out = None
        if self.prev is not None and self.prev.shape == d.shape:
            both = np.ones(d.shape, bool)
            if mask is not None:
                both &= mask
            if self.prev_mask is not None:
                both &= self.prev_mask
            # pixels clipped to near/far in the previous frame carry no scale information
            both &= (self.prev > self.near) & (self.prev < self.far)
            if both.sum() >= max(4, 0.05 * d.size):
                s, t = _robust_scale_shift(d, self.prev, both)
                if s > 0:
                    out = np.clip(s * d + t, self.near, self.far).astype(np.float32)
        if out is None:
            out = normalise_relative_depth(d, self.near, self.first_far, mask, clip_max=self.far)
        self.prev, self.prev_mask = out, mask
        return out
