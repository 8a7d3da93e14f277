"""Depth edges on image edges (issue 33): refine a depth map at full resolution, guided
by the frame.

Depth estimated below full size (the embedded network at 192 px) or measured by plane
sweep (windows of several pixels) has its discontinuities in the wrong place: blurred
into a ramp across a silhouette, or "fattened" so a band of the background beside a
foreground object keeps the object's depth (a halo in the Z Combine), and holes where the
surface in front is textured. :func:`refine_depth` moves each discontinuity onto the
frame's own edge:

1. **Joint weighted median in log depth** (Ma, Li, Wang, Zeng, Liu, "Constant Time
   Weighted Median Filtering for Stereo Matching and Beyond", ICCV 2013): log depth is cut
   into ``bins`` slices; each slice's indicator, times the pixel's weight (confidence),
   is filtered with a colour-guided filter (He, Sun, Tang, "Guided Image Filtering",
   ECCV 2010 / TPAMI 2013); each pixel takes the slice where the cumulative filtered weight
   crosses half. Pixels on either side of an image edge vote only with pixels of their own
   colour, so a halo band takes the depth of the surface it shows. A pixel keeps its own
   depth when that lies within two slices of the median one (slopes are not terraced),
   else it takes the filtered mean of the median slice's depths. Pixels given as
   ``fixed`` (measured depth) vote but never move.
2. **Twice**: the guided filter's kernel is a tent twice the window wide, so one pass
   turns a wrong band only where it holds under about 40 % of the same-coloured
   neighbourhood; a second pass, on the first's result, finishes bands up to a window's
   radius wide (a 6 px halo at 320 px: the issue's phone_office halo).

No smoothing follows: a pixel near its median keeps its value, so depth is not blurred
and edges stay one pixel sharp. What it cannot do: invent a silhouette the depth does not
have, or correct a surface measured at the wrong depth (it then puts that wrong depth on
the right pixels). Measured: benchmarks/results/pot_test.md, docs/benchmarks.md.

Sizes are fractions of the frame's long side, so the result does not depend on the
processing size. numpy + OpenCV box filters only (the extension's wheels have no
``cv2.ximgproc``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import cv2
import numpy as np

#: weighted-median window radius, as a fraction of the long side (13 px at 320 px, 38 at 960)
MEDIAN_RADIUS_FRAC = 0.04
#: guided filter regulariser of the median's weights (guide in sRGB-like [0, 1] units)
MEDIAN_EPS = 1e-4
#: log-depth slices of the weighted median
BINS = 16
#: weighted-median passes
ITERATIONS = 2
#: a pixel this many slices or fewer from its median slice keeps its value (a slope
#: spans slices within a window: on the ray-cast dolly of the tests, 1 terraced the floor)
KEEP_SLICES = 2
#: long side (pixels) of the grid the guided filters' coefficients are computed on
WORK_SIZE = 320


@dataclass(frozen=True)
class EdgeSettings:
    """Parameters of :func:`refine_depth` (see the module doc). Window and eps from
    held-out blocks of boat.mp4 with cameras (benchmarks/depth_edges_tune.py; the window
    kept at 4 %, wider than that sweep's best 1 %, to span a 6 px halo at 320 px);
    reported on phone_office.mp4 and dolphins.mp4, never tuned on them."""

    median_radius_frac: float = MEDIAN_RADIUS_FRAC
    median_eps: float = MEDIAN_EPS
    bins: int = BINS
    iterations: int = ITERATIONS


def edge_settings(settings: Optional[EdgeSettings]) -> Optional[dict]:
    """JSON form of ``settings`` for settings hashes and manifests (``None``: off)."""
    return None if settings is None else dataclasses.asdict(settings)


def _box(x: np.ndarray, r: int) -> np.ndarray:
    return cv2.boxFilter(x, -1, (2 * r + 1, 2 * r + 1), normalize=True, borderType=cv2.BORDER_REFLECT)


class ColourGuide:
    """A colour-guided filter (He et al.) with the guide's statistics computed once, so
    many inputs can be filtered with the same guide. Above ``work_size`` pixels on the
    long side the coefficients are computed on a subsampled grid and applied to the
    full-resolution guide ("fast guided filter", He & Sun 2015, arXiv:1505.00996): the
    output keeps the full-resolution guide's edges.

    Args:
        guide: ``H x W x 3`` float32, display-referred values in about [0, 1].
        radius: window radius in pixels of the full frame (>= 1).
        eps: regulariser (edge threshold: a colour variance well below it is smoothed over).
        work_size: long side of the grid the coefficients are computed on.
    """

    def __init__(self, guide: np.ndarray, radius: int, eps: float, work_size: int = WORK_SIZE):
        g = np.ascontiguousarray(guide, dtype=np.float32)
        self.full = [np.ascontiguousarray(g[..., c]) for c in range(3)]
        h, w = g.shape[:2]
        self.s = max(1.0, max(h, w) / float(work_size))
        self.size = (w, h)
        self.small = (max(1, round(w / self.s)), max(1, round(h / self.s)))
        self.r = int(max(1, round(radius / self.s)))
        self.g = self.full if self.s == 1.0 else [self._down(c) for c in self.full]
        self.mean = [_box(c, self.r) for c in self.g]
        c = {}
        for i in range(3):
            for j in range(i, 3):
                c[i, j] = _box(self.g[i] * self.g[j], self.r) - self.mean[i] * self.mean[j]
                if i == j:
                    c[i, j] += np.float32(eps)
        # closed-form inverse of the symmetric 3x3 covariance (adjugate / determinant)
        a, b, cc, d, e, f = c[0, 0], c[0, 1], c[0, 2], c[1, 1], c[1, 2], c[2, 2]
        i00, i01, i02 = d * f - e * e, cc * e - b * f, b * e - cc * d
        i11, i12, i22 = a * f - cc * cc, b * cc - a * e, a * d - b * b
        det = a * i00 + b * i01 + cc * i02
        det = np.where(np.abs(det) > 1e-20, det, np.float32(1e-20))
        self.inv = [[x / det for x in row] for row in ((i00, i01, i02), (i01, i11, i12), (i02, i12, i22))]

    def _down(self, x: np.ndarray) -> np.ndarray:
        return cv2.resize(x, self.small, interpolation=cv2.INTER_AREA)

    def _up(self, x: np.ndarray) -> np.ndarray:
        return x if self.s == 1.0 else cv2.resize(x, self.size, interpolation=cv2.INTER_LINEAR)

    def __call__(self, p: np.ndarray) -> np.ndarray:
        """``p`` (``H x W`` float32) filtered; same shape."""
        p = np.ascontiguousarray(p, dtype=np.float32)
        if self.s != 1.0:
            p = self._down(p)
        mp = _box(p, self.r)
        cv = [_box(gc * p, self.r) - mc * mp for gc, mc in zip(self.g, self.mean)]
        a = [self.inv[i][0] * cv[0] + self.inv[i][1] * cv[1] + self.inv[i][2] * cv[2] for i in range(3)]
        b = mp - a[0] * self.mean[0] - a[1] * self.mean[1] - a[2] * self.mean[2]
        out = self._up(_box(b, self.r))
        for c in range(3):
            out += self._up(_box(a[c], self.r)) * self.full[c]
        return out


def display_guide(rgb_linear: np.ndarray) -> np.ndarray:
    """Scene-linear RGB -> a display-like guide in [0, 1] (gamma 1/2.2 of the clipped
    values): edges weigh as the eye sees them, dark ones included."""
    return np.power(np.clip(np.asarray(rgb_linear, np.float32)[..., :3], 0.0, 1.0), 1.0 / 2.2)


def refine_depth(depth: np.ndarray, guide_rgb: np.ndarray, weight: Optional[np.ndarray] = None,
                 mask: Optional[np.ndarray] = None,
                 settings: EdgeSettings = EdgeSettings(), fixed: Optional[np.ndarray] = None) -> np.ndarray:
    """Depth with its discontinuities moved onto the frame's edges (module doc).

    Args:
        depth: ``H x W`` depth > 0 (any units; returned in the same units).
        guide_rgb: ``H x W x 3`` float32 guide, display-referred in about [0, 1]
            (:func:`display_guide` of the scene-linear frame).
        weight: optional ``H x W`` vote weight in [0, 1] (e.g. the square of the
            multi-view confidence); pixels with weight 0 take their depth from the
            others. ``None``: all 1.
        mask: optional ``H x W`` bool, pixels to refine and to vote (``False``: sky / no
            surface; returned unchanged and never voting).
        settings: :class:`EdgeSettings`.
        fixed: optional ``H x W`` bool, pixels that vote but keep their value (measured
            depth: a measurement is never replaced by its neighbours' guess).

    Returns:
        ``H x W`` float32 depth > 0.

    Raises:
        ValueError: shapes that do not match, or depth that is not finite and > 0 on the mask.
    """
    depth = np.asarray(depth, np.float32)
    h, w = depth.shape
    if guide_rgb.shape[:2] != (h, w) or any(a is not None and a.shape != (h, w) for a in (weight, mask, fixed)):
        raise ValueError(f"refine_depth: depth {depth.shape}, guide {guide_rgb.shape[:2]}, weight "
                         f"{None if weight is None else weight.shape}, mask {None if mask is None else mask.shape}")
    m = np.ones((h, w), bool) if mask is None else np.asarray(mask, bool)
    if not m.any():
        return depth.copy()
    if not (np.isfinite(depth[m]).all() and depth[m].min() > 0):
        raise ValueError("refine_depth: depth must be finite and > 0")
    ld = np.log(np.where(m, depth, 1.0)).astype(np.float32)
    wt = (np.ones((h, w), np.float32) if weight is None else np.clip(weight, 0, None).astype(np.float32)) * m
    wt = wt + np.float32(1e-3) * m  # a pixel with no vote still gets a median
    long_side = max(h, w)
    s = settings
    gf = ColourGuide(guide_rgb, round(s.median_radius_frac * long_side), s.median_eps)
    out = ld
    for _ in range(max(1, s.iterations)):
        out = _weighted_median(out, wt, gf, m, s.bins)
        if fixed is not None:
            out = np.where(fixed, ld, out)
    return np.where(m, np.exp(out), depth).astype(np.float32)


def _weighted_median(ld: np.ndarray, wt: np.ndarray, gf: ColourGuide, m: np.ndarray, bins: int) -> np.ndarray:
    """Joint weighted median of ``ld`` (log depth) with guide-filtered weights, by slices
    (Ma et al. 2013). A pixel whose own value lies within KEEP_SLICES of its median slice keeps it; another
    takes the filtered mean of the slice's values (the surface it votes with), or the
    slice's nearest end where that mean is undefined."""
    lo, hi = np.percentile(ld[m], [0.5, 99.5])
    if hi - lo < 1e-6:
        return ld
    edges = np.linspace(lo, hi, bins + 1, dtype=np.float32)
    idx = np.clip(np.searchsorted(edges[1:-1], ld, side="right"), 0, bins - 1)
    half = 0.5 * gf(wt)
    cum = np.zeros_like(ld)
    below = np.ones(ld.shape, bool)  # cumulative weight still below half: slice not reached
    mean = np.full(ld.shape, np.nan, np.float32)  # the median slice's filtered mean
    chosen = np.full(ld.shape, bins - 1, np.int32)
    for k in range(bins):
        sel = wt * (idx == k)
        den = np.maximum(gf(sel), 0.0)
        cum += den
        hit = below & ((cum >= half) if k < bins - 1 else True)
        if hit.any():
            num = gf(sel * ld)
            ok = hit & (den > 1e-3 * np.maximum(half, 1e-12))
            mean[ok] = num[ok] / den[ok]
            chosen[hit] = k
            below &= ~hit
        if not below.any():
            break
    lo_k = np.where(chosen == 0, -np.inf, edges[chosen]).astype(np.float32)
    hi_k = np.where(chosen == bins - 1, np.inf, edges[chosen + 1]).astype(np.float32)
    # a pixel within KEEP_SLICES of its median keeps its value: slopes are not terraced
    # into slices, only jumps (a halo, a hole) move
    keep = np.abs(idx - chosen) <= KEEP_SLICES
    moved = np.where(np.isfinite(mean), np.clip(mean, edges[chosen], edges[chosen + 1]), np.clip(ld, lo_k, hi_k))
    return np.where(m & ~keep, moved, ld).astype(np.float32)
