"""The plane sweep's depth search range from evidence, never a guess (issue 24, item 1).

Per frame, in this order (:class:`RangeFinder`):

1. **Reconstructed points** (COLMAP's ``points3D.txt``, the ``points`` of our JSON): the
   points in front of the frame's camera and inside its frame; far outliers dropped in
   log depth (beyond median +- :data:`MAD_K` robust standard deviations and beyond
   :data:`KEEP_FACTOR` of the median), then the
   :data:`PERCENTILES`. Fewer than :data:`MIN_POINTS` in this frame: the same over all
   cameras (the shot's range).
2. **The file's** ``depth_range`` (our JSON) for the whole shot.
3. **Sparse features** triangulated with the known cameras: SIFT (OpenCV; ORB where SIFT
   is missing) on the frame and up to :data:`FEATURE_VIEWS` nearby frames, Lowe's ratio
   test, matches kept only within :data:`EPIPOLAR_PX` of their epipolar line, linear
   triangulation (``cv2.triangulatePoints``; Hartley & Zisserman 2004, ch. 12), points in
   front of both cameras, reprojecting within :data:`REPROJ_PX` and seen under a
   triangulation angle of at least :data:`MIN_ANGLE_DEG` (small angles give unreliable
   depth); robust percentiles as above, then widened by :data:`FEATURE_MARGIN`.
4. Otherwise a **wide inverse-depth sweep**, *unverified*: from the depth at which the
   widest-baseline neighbour moves a point by the whole processing width, to
   :data:`WIDE_RATIO` times that. The caller lowers the confidence of its result
   (:data:`UNVERIFIED_CONFIDENCE`).

Whatever the range, :func:`backend.multiview.planesweep.plane_sweep` gives zero
confidence to pixels whose best plane is the first or last plane: a surface outside
the range is never confident depth at the range's edge.

Bad input: a range or points whose far / near exceeds :data:`MAX_RANGE_RATIO`, or points
behind every camera, are ignored with a one-line ``warning`` naming the file (and the
frame where there is one); ``near <= 0`` in a file is refused when it is read
(:func:`backend.multiview.camera_files.read_cameras`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import events
from .cameras import Camera

#: percentiles of the evidence's depths taken as near and far
PERCENTILES = (2.0, 98.0)
#: log-depth outliers beyond this many robust standard deviations (1.4826 MAD) are dropped
MAD_K = 4.0
#: ... but never depths within this factor of the median (a frame mostly filled by one
#: wall keeps the nearer objects its few other points lie on)
KEEP_FACTOR = 8.0
#: fewest points or features that make a range
MIN_POINTS = 12
#: far / near above which a range is absurd (refused or ignored with a warning)
MAX_RANGE_RATIO = 1e4
#: nearby frames whose features are matched against the reference
FEATURE_VIEWS = 6
#: Lowe's ratio, epipolar distance and reprojection error (processing pixels) of a match
RATIO = 0.8
EPIPOLAR_PX = 1.5
REPROJ_PX = 1.5
#: least triangulation angle of a feature point (degrees)
MIN_ANGLE_DEG = 0.75
#: a feature range (sparse, maybe missing the nearest / farthest surfaces) is widened by
#: these factors: near / FEATURE_MARGIN[0], far * FEATURE_MARGIN[1]
FEATURE_MARGIN = (1.5, 2.0)
#: the wide sweep's far / near
WIDE_RATIO = 1000.0
#: confidence scale of a sweep over an unverified (wide) range: keeps it below 0.5
UNVERIFIED_CONFIDENCE = 0.5


@dataclass
class DepthRange:
    """A frame's search range.

    Attributes:
        near, far: planar depth, ``0 < near < far``, cameras' units (before any margin).
        source: ``"points"`` (this frame's reconstructed points), ``"shot points"``,
            ``"file"`` (the camera file's ``depth_range``), ``"features"`` or ``"wide"``.
        verified: false only for ``"wide"`` (nothing confirmed where the scene is).
        evidence: points or features the range came from (0 for ``file`` / ``wide``).
    """

    near: float
    far: float
    source: str
    verified: bool = True
    evidence: int = 0

    @property
    def probe(self) -> float:
        """The typical depth (geometric mean), for parallax tests."""
        return math.sqrt(self.near * self.far)

    def as_dict(self) -> Dict[str, object]:
        return {"near": round(self.near, 6), "far": round(self.far, 6), "source": self.source,
                "verified": self.verified, "evidence": self.evidence}


def robust_range(z: np.ndarray, min_count: int = MIN_POINTS) -> Optional[Tuple[float, float]]:
    """``(near, far)`` of depths ``z`` (any shape; non-finite and ``<= 0`` ignored): far
    outliers dropped in log depth (beyond median +- ``MAD_K`` x 1.4826 MAD, and beyond
    :data:`KEEP_FACTOR` of the median), then :data:`PERCENTILES`.
    ``None`` with fewer than ``min_count`` usable depths."""
    z = np.asarray(z, np.float64).ravel()
    z = z[np.isfinite(z) & (z > 0)]
    if z.size < min_count:
        return None
    lz = np.log(z)
    med = np.median(lz)
    band = max(MAD_K * 1.4826 * float(np.median(np.abs(lz - med))), math.log(KEEP_FACTOR))
    lz = lz[np.abs(lz - med) <= band]
    if lz.size < min_count:
        return None
    lo, hi = np.percentile(lz, PERCENTILES)
    near, far = float(np.exp(lo)), float(np.exp(hi))
    if far <= near:
        far = near * 1.05
    return near, far


def absurd(near: float, far: float) -> Optional[str]:
    """Why ``(near, far)`` cannot be a scene's range, or ``None`` when it can."""
    if not (math.isfinite(near) and math.isfinite(far)) or near <= 0:
        return f"near {near:g} <= 0 or not finite"
    if far <= near:
        return f"far {far:g} <= near {near:g}"
    if far / near > MAX_RANGE_RATIO:
        return f"far / near = {far / near:.3g} > {MAX_RANGE_RATIO:g}"
    return None


def points_in_view(X: np.ndarray, cam: Camera, margin: float = 0.1) -> np.ndarray:
    """Planar depths in ``cam`` of the world points ``X`` (``N x 3``) in front of it whose
    projection falls inside its frame (widened by ``margin`` of its size)."""
    uv, z = cam.project(X)
    mx, my = margin * cam.width, margin * cam.height
    ok = (z > 0) & np.all(np.isfinite(uv), 1)
    ok &= (uv[:, 0] >= -mx) & (uv[:, 0] <= cam.width + mx) & (uv[:, 1] >= -my) & (uv[:, 1] <= cam.height + my)
    return z[ok]


def check_points(X: Optional[np.ndarray], cameras: Sequence[Camera], file=None) -> Optional[np.ndarray]:
    """The usable reconstructed points: finite, in front of at least one camera. Points
    behind every camera (all of them: wrong axes or a broken solve) or a shot range with
    far / near > :data:`MAX_RANGE_RATIO` make the points unusable: ``None`` and a
    one-line ``warning`` naming ``file``. ``None`` too when fewer than :data:`MIN_POINTS`."""
    if X is None or len(X) == 0:
        return None
    X = np.asarray(X, np.float64).reshape(-1, 3)
    X = X[np.all(np.isfinite(X), 1)]
    if len(X) < MIN_POINTS or not cameras:
        return None
    front = np.zeros(len(X), bool)
    zs = []
    for c in cameras:
        z = (X @ c.R.T + c.t)[:, 2]
        front |= z > 0
        zs.append(z)
    where = f"{file}: " if file is not None else ""
    if not front.any():
        events.warning(f"{where}all {len(X)} reconstructed points are behind every camera (wrong axes or "
                       "a broken solve?); ignoring them, the depth range comes from image features",
                       file=file)
        return None
    rng = robust_range(np.concatenate(zs))
    if rng is None:
        return None
    why = absurd(*rng)
    if why:
        events.warning(f"{where}the reconstructed points span an absurd depth range ({why}); ignoring "
                       "them, the depth range comes from image features", file=file)
        return None
    return X[front]


def check_file_range(rng: Optional[Tuple[float, float]], file=None) -> Optional[Tuple[float, float]]:
    """A camera file's ``depth_range``, or ``None`` with a one-line ``warning`` naming the
    file when far / near > :data:`MAX_RANGE_RATIO` (then image features decide)."""
    if rng is None:
        return None
    why = absurd(*rng)
    if why:
        where = f"{file}: " if file is not None else ""
        events.warning(f"{where}depth_range {list(rng)} is absurd ({why}); ignoring it, the depth range "
                       "comes from image features", file=file)
        return None
    return tuple(rng)


# ---------------------------------------------------------------------- features
@dataclass
class Features:
    """Keypoints of one grey view: ``xy`` (``N x 2`` float64, OpenCV pixel indices, centres at
    integers) and descriptors (``N x D``; ``None`` when there are none)."""

    xy: np.ndarray
    desc: Optional[np.ndarray]
    norm: int


def detect_features(grey: np.ndarray, max_features: int = 1500) -> Features:
    """SIFT keypoints (ORB where this OpenCV has no SIFT) of an ``H x W`` float grey image in
    [0, 1] (or uint8)."""
    import cv2

    g = np.asarray(grey)
    if g.dtype != np.uint8:
        g = np.clip(g * 255.0 + 0.5, 0, 255).astype(np.uint8)
    if hasattr(cv2, "SIFT_create"):
        det, norm = cv2.SIFT_create(nfeatures=max_features, contrastThreshold=0.01), cv2.NORM_L2
    else:  # pragma: no cover - every wheel we ship has SIFT
        det, norm = cv2.ORB_create(nfeatures=max_features), cv2.NORM_HAMMING
    kps, desc = det.detectAndCompute(g, None)
    xy = np.array([k.pt for k in kps], np.float64).reshape(-1, 2)
    return Features(xy, desc if len(kps) else None, norm)


def _skew(t):
    return np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])


def triangulate_pair(fa: Features, cam_a: Camera, fb: Features, cam_b: Camera) -> Tuple[np.ndarray, np.ndarray]:
    """Match ``fa`` against ``fb`` and triangulate with the known cameras (sizes matching
    the images the features came from).

    Returns:
        ``(depth_a, angle_deg)``: planar depth in ``cam_a`` and triangulation angle of the
        matches that pass the ratio test, the epipolar check, cheirality and reprojection
        (see module doc); float64 arrays, possibly empty.
    """
    import cv2

    empty = (np.zeros(0), np.zeros(0))
    if fa.desc is None or fb.desc is None or len(fa.xy) < 2 or len(fb.xy) < 2:
        return empty
    knn = cv2.BFMatcher(fa.norm).knnMatch(fa.desc, fb.desc, k=2)
    pairs = [(m.queryIdx, m.trainIdx) for m, *rest in (k for k in knn if len(k) == 2)
             if m.distance < RATIO * rest[0].distance]
    if len(pairs) < 4:
        return empty
    ia, ib = np.array(pairs).T
    pa, pb = fa.xy[ia], fb.xy[ib]
    R = cam_b.R @ cam_a.R.T
    t = cam_b.t - R @ cam_a.t
    if np.linalg.norm(t) < 1e-12:
        return empty
    Ka, Kb = cam_a.K_cv, cam_b.K_cv
    F = np.linalg.inv(Kb).T @ _skew(t) @ R @ np.linalg.inv(Ka)
    ha = np.c_[pa, np.ones(len(pa))]
    hb = np.c_[pb, np.ones(len(pb))]
    lb = ha @ F.T  # epipolar lines in b
    la = hb @ F    # epipolar lines in a
    da = np.abs((ha * la).sum(1)) / np.maximum(np.hypot(la[:, 0], la[:, 1]), 1e-12)
    db = np.abs((hb * lb).sum(1)) / np.maximum(np.hypot(lb[:, 0], lb[:, 1]), 1e-12)
    ok = (da < EPIPOLAR_PX) & (db < EPIPOLAR_PX)
    if ok.sum() < 2:
        return empty
    pa, pb = pa[ok], pb[ok]
    Pa = Ka @ np.c_[cam_a.R, cam_a.t]
    Pb = Kb @ np.c_[cam_b.R, cam_b.t]
    Xh = cv2.triangulatePoints(Pa, Pb, pa.T.astype(np.float64), pb.T.astype(np.float64))
    X = (Xh[:3] / np.where(np.abs(Xh[3]) > 1e-12, Xh[3], 1e-12)).T
    za = X @ cam_a.R[2] + cam_a.t[2]
    zb = X @ cam_b.R[2] + cam_b.t[2]
    ra = np.linalg.norm(_proj(Pa, X) - pa, axis=1)
    rb = np.linalg.norm(_proj(Pb, X) - pb, axis=1)
    va, vb = X - cam_a.center, X - cam_b.center
    cosang = (va * vb).sum(1) / np.maximum(np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1), 1e-12)
    ang = np.degrees(np.arccos(np.clip(cosang, -1, 1)))
    keep = (za > 0) & (zb > 0) & (ra < REPROJ_PX) & (rb < REPROJ_PX) & np.isfinite(za)
    return za[keep], ang[keep]


def _proj(P, X):
    q = np.c_[X, np.ones(len(X))] @ P.T
    return q[:, :2] / np.where(np.abs(q[:, 2:3]) > 1e-12, q[:, 2:3], 1e-12)


def feature_range(ref: Features, ref_cam: Camera, others: Sequence[Tuple[Features, Camera]]) -> Optional[DepthRange]:
    """The reference frame's range from features triangulated against ``others`` (module
    doc, step 3), widened by :data:`FEATURE_MARGIN`; ``None`` with fewer than
    :data:`MIN_POINTS` well-conditioned points or an absurd result."""
    zs = []
    for f, cam in others:
        z, ang = triangulate_pair(ref, ref_cam, f, cam)
        zs.append(z[ang >= MIN_ANGLE_DEG])
    z = np.concatenate(zs) if zs else np.zeros(0)
    rng = robust_range(z)
    if rng is None:
        return None
    near, far = rng[0] / FEATURE_MARGIN[0], rng[1] * FEATURE_MARGIN[1]
    if absurd(near, far):
        return None
    return DepthRange(near, far, "features", True, int(z.size))


def wide_range(ref: Camera, neighbours: Sequence[Camera]) -> DepthRange:
    """The unverified wide inverse-depth sweep (module doc, step 4): ``near`` where the
    widest-baseline neighbour moves a point by ``ref.width`` pixels, ``far`` = :data:`WIDE_RATIO` x near."""
    base = max(float(np.linalg.norm(c.center - ref.center)) for c in neighbours) if neighbours else 0.0
    near = max(ref.fx * base / ref.width, 1e-6)
    return DepthRange(near, near * WIDE_RATIO, "wide", False, 0)


class RangeFinder:
    """Per-frame ranges of a shot (module doc).

    Args:
        points: the reconstructed points ``N x 3`` (world, cameras' units), already
            checked (:func:`check_points`), or ``None``.
        file_range: the file's checked ``(near, far)`` or ``None``.
        shot_cameras: every camera of the shot (for the shot-level points range).
        file: the camera file, for messages.
    """

    def __init__(self, points: Optional[np.ndarray], file_range: Optional[Tuple[float, float]],
                 shot_cameras: Sequence[Camera] = (), file=None):
        self.points, self.file_range, self.file = points, file_range, file
        self.shot_points_range: Optional[Tuple[float, float]] = None
        if points is not None and len(shot_cameras):
            z = np.concatenate([points_in_view(points, c) for c in shot_cameras])
            self.shot_points_range = robust_range(z)

    def from_file(self, cam: Camera) -> Optional[DepthRange]:
        """Steps 1-2 for the frame of ``cam`` (no images needed)."""
        if self.points is not None:
            z = points_in_view(self.points, cam)
            rng = robust_range(z)
            if rng is not None:
                return DepthRange(*rng, "points", True, int(z.size))
            if self.shot_points_range is not None:
                return DepthRange(*self.shot_points_range, "shot points", True, 0)
        if self.file_range is not None:
            return DepthRange(*self.file_range, "file", True, 0)
        return None

    @staticmethod
    def from_features(ref: Features, ref_cam: Camera,
                      others: List[Tuple[Features, Camera]]) -> Optional[DepthRange]:
        """Step 3."""
        return feature_range(ref, ref_cam, others[:FEATURE_VIEWS])
