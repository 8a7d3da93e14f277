"""Camera solve from the footage alone, with the focal length unknown (structure from
motion on 2D feature tracks).

Used by ``decompose --camera auto`` (the backend never imports bpy) and by the add-on's
Track & Solve, which feeds it Blender's own tracks to find the focal length before
libmv solves with it (:func:`solve_tracks`).

Method (the textbook pipeline; Hartley & Zisserman, *Multiple View Geometry*, 2nd ed.,
ch. 9-10 and 18; Triggs et al., "Bundle Adjustment - A Modern Synthesis", 1999):

1. **Tracks**: Shi-Tomasi corners tracked frame to frame with pyramidal Lucas-Kanade
   (OpenCV ``goodFeaturesToTrack`` / ``calcOpticalFlowPyrLK``), kept when the backward
   track returns within :data:`FB_MAX_PX`; new corners fill the frame when tracks die.
2. **Solve at a focal length**: the initial pair is the one with the most parallax
   (median flow after removing the best homography), relative pose from OpenCV's
   ``findEssentialMat`` / ``recoverPose``, points from ``triangulatePoints``, further
   frames by ``solvePnPRansac`` outward from the pair, then a sparse bundle adjustment
   (``scipy.optimize.least_squares`` with a Jacobian sparsity pattern).
3. **Focal length**: the solve is repeated from :data:`FOCAL_CANDIDATES` with the focal
   length (and optionally ``k1``) free in the bundle adjustment; the lowest cost wins.
   Reprojection error alone cannot say whether the focal length is *determined* (a short
   shot fits any lens about equally well), so the **profile** decides: the bundle is
   re-solved with the focal length fixed at ``f (1 +- PROFILE_STEP)`` and the rise of the
   squared error, in units of the residual variance, gives the focal length's standard
   deviation (a chi-square profile, one degree of freedom). A focal length known to
   worse than :data:`MAX_FOCAL_SIGMA` is refused with "set the focal length of the clip
   and solve again".
4. **Checks** beyond the reprojection error: frames registered, the parallax actually
   available (median largest ray angle per point; a pure rotation or a static camera
   has none), the spread of point depths after dropping points triangulated under
   :data:`MIN_POINT_ANGLE_DEG` (near infinity), and the focal-length profile.

Pixel convention as :class:`backend.multiview.cameras.Camera`: pixel ``(x, y)`` centred
at ``(x + 0.5, y + 0.5)``, y down; the principal point is the frame centre.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .cameras import Camera

#: starting focal lengths, as multiples of the frame width (horizontal FOV 79, 53, 33, 20 deg)
FOCAL_CANDIDATES = (1.0, 0.6, 1.7, 2.8)
#: tracks kept for the solve: the longest ones, up to this many seen in each frame ...
POINTS_PER_FRAME = 60
#: ... and at most this many in all (bundle adjustment time grows with them)
MAX_POINTS = 300
#: relative step of the focal-length profile
PROFILE_STEP = 0.08
#: a focal length whose standard deviation (profile) is above this fraction is refused
MAX_FOCAL_SIGMA = 0.02
#: median largest ray angle (degrees) per point below which the clip has no usable parallax
MIN_PARALLAX_DEG = 0.5
#: ... and median motion (pixels) left after the best homography between the two frames
#: with the most of it (a rotating or static camera, or a plane, leaves none)
MIN_PARALLAX_PX = 2.0
#: points triangulated under this ray angle (degrees) are near infinity: not in the depth range
MIN_POINT_ANGLE_DEG = 1.0
#: a solve whose RMS reprojection error is above this (pixels) is refused
MAX_ERROR_PX = 1.5
#: forward-backward tracking error (pixels) above which a track ends
FB_MAX_PX = 0.7
#: minimum frames registered (or the whole clip when shorter), and fraction of the clip
MIN_FRAMES = 8
MIN_FRACTION = 0.5
SET_FOCAL = "set the focal length of the clip and solve again"


class SolveError(ValueError):
    """The clip cannot be solved, or its solve fails a check; the message is one line."""


# ---- tracks -------------------------------------------------------------------------------


@dataclass
class Tracks:
    """2D feature tracks of a clip.

    Attributes:
        numbers: source frame number of each row (``F``).
        uv: ``F x N x 2`` float64 pixel positions (pixel-centre convention, y down);
            NaN where track ``n`` is not seen in frame ``f``.
        width, height: frame size in pixels.
    """

    numbers: List[int]
    uv: np.ndarray
    width: int
    height: int

    @property
    def seen(self) -> np.ndarray:
        """``F x N`` bool: track ``n`` is seen in frame ``f``."""
        return np.isfinite(self.uv[..., 0])


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """``H x W x 3`` float32 scene-linear RGB -> ``H x W`` uint8 display-referred grey
    (gamma 1/2.2) for tracking."""
    y = np.clip(rgb[..., 0] * 0.2126 + rgb[..., 1] * 0.7152 + rgb[..., 2] * 0.0722, 0.0, 1.0)
    return (np.power(y, 1 / 2.2) * 255.0 + 0.5).astype(np.uint8)


def track_features(images: Sequence[np.ndarray], numbers: Sequence[int], *, max_features: int = 600,
                   min_distance: Optional[int] = None) -> Tracks:
    """KLT tracks through ``images`` (``H x W`` uint8 grey, in frame order).

    Corners (Shi-Tomasi) are detected on the first frame and wherever tracks have thinned
    out; a point ends when its backward track misses by more than :data:`FB_MAX_PX`.
    """
    import cv2

    h, w = images[0].shape[:2]
    md = min_distance or max(6, int(min(w, h) / 40))
    lk = dict(winSize=(21, 21), maxLevel=3, criteria=(cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 0.01))
    cols: List[Dict[int, Tuple[float, float]]] = []
    active: List[int] = []  # column of each active point
    pts = np.zeros((0, 1, 2), np.float32)

    def detect(img, existing):
        mask = np.full((h, w), 255, np.uint8)
        for x, y in existing.reshape(-1, 2):
            cv2.circle(mask, (int(x), int(y)), md, 0, -1)
        want = max_features - len(existing)
        if want < max_features // 4:
            return np.zeros((0, 1, 2), np.float32)
        c = cv2.goodFeaturesToTrack(img, want, 0.003, md, mask=mask, blockSize=7)
        return np.zeros((0, 1, 2), np.float32) if c is None else c.astype(np.float32)

    for fi, img in enumerate(images):
        if fi > 0 and len(pts):
            nxt, st, _ = cv2.calcOpticalFlowPyrLK(images[fi - 1], img, pts, None, **lk)
            back, st2, _ = cv2.calcOpticalFlowPyrLK(img, images[fi - 1], nxt, None, **lk)
            fb = np.linalg.norm((back - pts).reshape(-1, 2), axis=1)
            p = nxt.reshape(-1, 2)
            ok = (st.ravel() == 1) & (st2.ravel() == 1) & (fb < FB_MAX_PX)
            ok &= (p[:, 0] >= 0) & (p[:, 0] <= w - 1) & (p[:, 1] >= 0) & (p[:, 1] <= h - 1)
            pts = nxt[ok]
            active = [a for a, k in zip(active, ok) if k]
        new = detect(img, pts)
        for _ in range(len(new)):
            cols.append({})
            active.append(len(cols) - 1)
        pts = np.concatenate([pts, new]) if len(new) else pts
        for a, (x, y) in zip(active, pts.reshape(-1, 2)):
            cols[a][fi] = (float(x) + 0.5, float(y) + 0.5)
    uv = np.full((len(images), len(cols), 2), np.nan)
    for n, c in enumerate(cols):
        for fi, p in c.items():
            uv[fi, n] = p
    keep = np.isfinite(uv[..., 0]).sum(0) >= 3
    return Tracks(list(int(n) for n in numbers), uv[:, keep], int(w), int(h))


def subsample_frames(tracks: Tracks, max_frames: int) -> Tracks:
    """At most ``max_frames`` rows of ``tracks``, evenly spaced, first and last kept (the
    focal length needs the clip's spread of views, not every frame)."""
    F = len(tracks.numbers)
    if F <= max_frames:
        return tracks
    rows = np.unique(np.round(np.linspace(0, F - 1, max_frames)).astype(int))
    return Tracks([tracks.numbers[r] for r in rows], tracks.uv[rows], tracks.width, tracks.height)


def select_tracks(tracks: Tracks, per_frame: int = POINTS_PER_FRAME, max_total: int = MAX_POINTS) -> Tracks:
    """The longest tracks, up to ``per_frame`` seen in each frame and ``max_total`` in all
    (spread in image space: each frame's picks come from a 4 x 4 grid of cells in turn)."""
    seen = tracks.seen
    length = seen.sum(0)
    order = np.argsort(-length, kind="stable")
    chosen: List[int] = []
    taken = np.zeros(seen.shape[1], bool)
    for f in range(seen.shape[0]):
        have = int((seen[f] & taken).sum())
        if have >= per_frame:
            continue
        cells: Dict[Tuple[int, int], List[int]] = {}
        for n in order:
            if seen[f, n] and not taken[n]:
                u, v = tracks.uv[f, n]
                cells.setdefault((int(4 * u / tracks.width), int(4 * v / tracks.height)), []).append(int(n))
        queues = list(cells.values())
        while have < per_frame and any(queues):
            for q in queues:
                if q and have < per_frame:
                    n = q.pop(0)
                    taken[n] = True
                    chosen.append(n)
                    have += 1
    chosen = sorted(chosen, key=lambda n: -length[n])[:max_total]
    keep = np.sort(np.array(chosen, int))
    return Tracks(tracks.numbers, tracks.uv[:, keep], tracks.width, tracks.height)


# ---- geometry helpers ---------------------------------------------------------------------


def _rodrigues(rv: np.ndarray) -> np.ndarray:
    """``M x 3`` rotation vectors -> ``M x 3 x 3`` matrices."""
    th = np.linalg.norm(rv, axis=1)[:, None, None]
    k = rv / np.where(th[:, 0] > 1e-12, th[:, 0], 1.0)
    K = np.zeros((len(rv), 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -k[:, 2], k[:, 1], -k[:, 0]
    K[:, 1, 0], K[:, 2, 0], K[:, 2, 1] = k[:, 2], -k[:, 1], k[:, 0]
    return np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * (K @ K)


def _rvec(R: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.Rodrigues(np.asarray(R, np.float64))[0].ravel()


@dataclass
class _Recon:
    """A reconstruction at one focal length (``R``/``t`` world-to-camera per frame row)."""

    f: float
    k1: float
    R: Dict[int, np.ndarray] = field(default_factory=dict)
    t: Dict[int, np.ndarray] = field(default_factory=dict)
    X: Dict[int, np.ndarray] = field(default_factory=dict)
    cost: float = float("inf")  # sum of squared residuals (px^2) of the last bundle
    n_res: int = 0
    n_par: int = 0

    @property
    def rms(self) -> float:
        return math.sqrt(self.cost / max(1, self.n_res)) if self.n_res else float("inf")


class _Solver:
    def __init__(self, tracks: Tracks):
        self.tr = tracks
        self.c = np.array([tracks.width / 2.0, tracks.height / 2.0])
        self.seen = tracks.seen
        self.bad = np.zeros_like(self.seen)  # observations rejected as outliers
        self.parallax_px = 0.0

    def K(self, f: float) -> np.ndarray:
        return np.array([[f, 0, self.c[0]], [0, f, self.c[1]], [0, 0, 1.0]])

    # -- initial pair ----------------------------------------------------------------------
    def init_pair(self) -> Tuple[int, int]:
        """The pair of frames (rows) with the most parallax left after the best homography;
        ``self.parallax_px`` gets that pair's median residual (px) after the homography."""
        import cv2

        F = len(self.tr.numbers)
        best, pair = -1.0, (0, F - 1)
        step = max(1, F // 12)
        rows = sorted(set(list(range(0, F, step)) + [F - 1]))
        for i in rows:
            for j in rows:
                if j <= i:
                    continue
                both = self.seen[i] & self.seen[j]
                if both.sum() < 30:
                    continue
                a, b = self.tr.uv[i, both], self.tr.uv[j, both]
                H, _ = cv2.findHomography(a, b, cv2.RANSAC, 2.0)
                if H is None:
                    continue
                ah = cv2.perspectiveTransform(a[:, None].astype(np.float64), H)[:, 0]
                score = float(np.percentile(np.linalg.norm(ah - b, axis=1), 80)) * math.sqrt(both.sum())
                if score > best:
                    best, pair = score, (i, j)
                    self.parallax_px = score / math.sqrt(both.sum())
        return pair

    # -- building the reconstruction -------------------------------------------------------
    def triangulate(self, rec: _Recon, cols: np.ndarray) -> None:
        import cv2

        K = self.K(rec.f)
        regs = sorted(rec.R)
        for n in cols:
            obs = [r for r in regs if self.seen[r, n] and not self.bad[r, n]]
            if len(obs) < 2:
                continue
            # the two registered views of the track farthest apart in the clip
            a, b = obs[0], obs[-1]
            Pa = K @ np.hstack([rec.R[a], rec.t[a][:, None]])
            Pb = K @ np.hstack([rec.R[b], rec.t[b][:, None]])
            Xh = cv2.triangulatePoints(Pa, Pb, self._undist(rec, a, n)[:, None], self._undist(rec, b, n)[:, None])
            if abs(Xh[3, 0]) < 1e-12:
                continue
            X = Xh[:3, 0] / Xh[3, 0]
            za, zb = (rec.R[a] @ X + rec.t[a])[2], (rec.R[b] @ X + rec.t[b])[2]
            if za > 0 and zb > 0:
                rec.X[int(n)] = X

    def _undist(self, rec: _Recon, r: int, n: int) -> np.ndarray:
        uv = self.tr.uv[r, n]
        if rec.k1 == 0.0:
            return uv
        x = (uv - self.c) / rec.f
        for _ in range(5):  # x_d = x (1 + k1 |x|^2), fixed point
            x = (uv - self.c) / rec.f / (1 + rec.k1 * (x @ x))
        return x * rec.f + self.c

    def register(self, rec: _Recon, r: int) -> bool:
        import cv2

        cols = [n for n in rec.X if self.seen[r, n] and not self.bad[r, n]]
        if len(cols) < 12:
            return False
        X = np.array([rec.X[n] for n in cols])
        uv = np.array([self._undist(rec, r, n) for n in cols])
        ok, rv, tv, inl = cv2.solvePnPRansac(X, uv, self.K(rec.f), None, reprojectionError=3.0,
                                             iterationsCount=200, flags=cv2.SOLVEPNP_EPNP)
        if not ok or inl is None or len(inl) < 10:
            return False
        rv, tv = cv2.solvePnPRefineLM(X[inl[:, 0]], uv[inl[:, 0]], self.K(rec.f), None, rv, tv)
        rec.R[r], rec.t[r] = cv2.Rodrigues(rv)[0], tv.ravel()
        return True

    def build(self, f: float, pair: Tuple[int, int], k1: float = 0.0) -> Optional[_Recon]:
        """Incremental reconstruction at focal ``f`` (bundle-adjusted with ``f`` fixed)."""
        import cv2

        rec = _Recon(f=float(f), k1=k1)
        i, j = pair
        both = np.nonzero(self.seen[i] & self.seen[j])[0]
        a, b = self.tr.uv[i, both], self.tr.uv[j, both]
        K = self.K(f)
        E, mask = cv2.findEssentialMat(a, b, K, cv2.RANSAC, 0.999, 1.0)
        if E is None or E.shape != (3, 3):
            return None
        _, R, t, mask = cv2.recoverPose(E, a, b, K, mask=mask)
        rec.R[i], rec.t[i] = np.eye(3), np.zeros(3)
        rec.R[j], rec.t[j] = R, t.ravel()
        self.triangulate(rec, both[mask.ravel() > 0])
        if len(rec.X) < 12:
            return None
        self.bundle(rec, free_focal=False)
        F = len(self.tr.numbers)
        todo = sorted(set(range(F)) - {i, j}, key=lambda r: min(abs(r - i), abs(r - j)))
        since = 0
        while todo:
            progress = False
            for r in list(todo):
                if self.register(rec, r):
                    todo.remove(r)
                    self.triangulate(rec, np.nonzero(self.seen[r])[0][[n not in rec.X for n in
                                                                        np.nonzero(self.seen[r])[0]]])
                    progress, since = True, since + 1
                    if since >= max(3, len(rec.R) // 3):  # geometric: few bundles on long clips
                        self.bundle(rec, free_focal=False, max_nfev=25)
                        since = 0
                    break
            if not progress:
                break
        self.bundle(rec, free_focal=False)
        self.reject(rec)
        self.bundle(rec, free_focal=False)
        return rec

    # -- bundle adjustment -----------------------------------------------------------------
    def _observations(self, rec: _Recon):
        regs = sorted(rec.R)
        pts = sorted(rec.X)
        ci = {r: k for k, r in enumerate(regs)}
        pi = {n: k for k, n in enumerate(pts)}
        sub = self.seen[np.ix_(regs, pts)] & ~self.bad[np.ix_(regs, pts)]
        cam_idx, pt_idx = np.nonzero(sub)
        uv = self.tr.uv[np.array(regs)[cam_idx], np.array(pts)[pt_idx]]
        return regs, pts, ci, pi, cam_idx, pt_idx, uv

    def residuals(self, rec: _Recon) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-observation reprojection error (px) with its registered-row and track column."""
        regs, pts, _, _, cam_idx, pt_idx, uv = self._observations(rec)
        R = np.array([rec.R[r] for r in regs])
        t = np.array([rec.t[r] for r in regs])
        X = np.array([rec.X[n] for n in pts])
        pr = self._project(R[cam_idx], t[cam_idx], X[pt_idx], rec.f, rec.k1)
        return np.linalg.norm(pr - uv, axis=1), np.array(regs)[cam_idx], np.array(pts)[pt_idx]

    def _project(self, R, t, X, f, k1):
        Xc = np.einsum("nij,nj->ni", R, X) + t
        z = np.where(np.abs(Xc[:, 2]) > 1e-9, Xc[:, 2], 1e-9)
        x = Xc[:, :2] / z[:, None]
        if k1:
            x = x * (1 + k1 * (x * x).sum(1))[:, None]
        return f * x + self.c

    def bundle(self, rec: _Recon, *, free_focal: bool, free_k1: bool = False, robust: bool = True,
               max_nfev: int = 60) -> None:
        """Bundle adjustment in place (Levenberg-Marquardt-like trust region, sparse Jacobian)."""
        from scipy.optimize import least_squares
        from scipy.sparse import lil_matrix

        regs, pts, _, _, cam_idx, pt_idx, uv = self._observations(rec)
        nc, npt, no = len(regs), len(pts), len(cam_idx)
        if no < 20:
            return
        x0 = [np.concatenate([np.concatenate([_rvec(rec.R[r]), rec.t[r]]) for r in regs]),
              np.concatenate([rec.X[n] for n in pts])]
        extra = []
        if free_focal:
            extra.append(math.log(rec.f))
        if free_k1:
            extra.append(rec.k1)
        x0 = np.concatenate(x0 + [np.array(extra)])
        ne = len(extra)

        def unpack(x):
            cams = x[:6 * nc].reshape(nc, 6)
            X = x[6 * nc:6 * nc + 3 * npt].reshape(npt, 3)
            k = 6 * nc + 3 * npt
            f = math.exp(x[k]) if free_focal else rec.f
            k1 = x[k + int(free_focal)] if free_k1 else rec.k1
            return cams, X, f, k1

        def fun(x):
            cams, X, f, k1 = unpack(x)
            R = _rodrigues(cams[:, :3])
            pr = self._project(R[cam_idx], cams[cam_idx, 3:], X[pt_idx], f, k1)
            return (pr - uv).ravel()

        A = lil_matrix((2 * no, len(x0)), dtype=np.int8)
        rows = np.arange(no)
        for s in range(6):
            A[2 * rows, 6 * cam_idx + s] = 1
            A[2 * rows + 1, 6 * cam_idx + s] = 1
        for s in range(3):
            A[2 * rows, 6 * nc + 3 * pt_idx + s] = 1
            A[2 * rows + 1, 6 * nc + 3 * pt_idx + s] = 1
        for e in range(ne):
            A[:, 6 * nc + 3 * npt + e] = 1
        res = least_squares(fun, x0, jac_sparsity=A, method="trf", x_scale="jac", max_nfev=max_nfev,
                            loss="soft_l1" if robust else "linear", f_scale=1.0, xtol=1e-10, ftol=1e-8)
        cams, X, f, k1 = unpack(res.x)
        R = _rodrigues(cams[:, :3])
        for k, r in enumerate(regs):
            rec.R[r], rec.t[r] = R[k], cams[k, 3:].copy()
        for k, n in enumerate(pts):
            rec.X[n] = X[k].copy()
        rec.f, rec.k1 = float(f), float(k1)
        r = fun(res.x)
        rec.cost, rec.n_res, rec.n_par = float(r @ r), len(r), len(x0) - 7

    def reject(self, rec: _Recon, *, thresh: Optional[float] = None) -> None:
        """Mark observations with error over ``max(2 px, 3 x median)`` as outliers; drop
        points left with fewer than 2 observations or behind a camera."""
        err, rows, cols = self.residuals(rec)
        if not len(err):
            return
        th = thresh or max(2.0, 3.0 * float(np.median(err)))
        self.bad[rows[err > th], cols[err > th]] = True
        for n in list(rec.X):
            obs = [r for r in rec.R if self.seen[r, n] and not self.bad[r, n]]
            z = [(rec.R[r] @ rec.X[n] + rec.t[r])[2] for r in obs]
            if len(obs) < 2 or min(z) <= 0:
                del rec.X[n]


# ---- the solve ---------------------------------------------------------------------------


@dataclass
class SolveReport:
    """A solve and its checks (see the module docstring).

    Attributes:
        ok: every check passed; else ``reason`` says (one line) which failed.
        cameras: ``{source frame number: Camera}`` (OpenCV axes inside; solve units).
        focal_px: the focal length (pixels, at the tracks' frame size); ``focal_sigma``
            its relative standard deviation from the profile (``None``: the focal was given).
        k1: radial distortion on focal-normalised coordinates (OpenCV's ``k1``).
        error_px: RMS reprojection error over inlier observations.
        parallax_deg: median over points of the largest angle between their rays.
        depth_range: ``(near, far)`` over points with ray angle >= ``MIN_POINT_ANGLE_DEG``
            (2nd / 98th percentile of their depths in every camera), or ``None``.
        profile: ``{focal: rms}`` of the solves at fixed focal lengths around the optimum.
        suggested_focal_px: when the lens was not determined, a focal length (same pixels
            as ``focal_px``) with which the solve passed every check, or ``None``.
    """

    ok: bool
    reason: str
    cameras: Dict[int, Camera]
    focal_px: float
    focal_sigma: Optional[float]
    k1: float
    error_px: float
    frames: int
    total_frames: int
    points: int
    parallax_deg: float
    parallax_px: float
    depth_range: Optional[Tuple[float, float]]
    far_points_dropped: int = 0
    profile: Dict[float, float] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    suggested_focal_px: Optional[float] = None

    def summary(self) -> dict:
        """JSON-ready summary (no cameras)."""
        return {"ok": self.ok, "reason": self.reason, "focal_px": round(self.focal_px, 3),
                "focal_sigma": None if self.focal_sigma is None else round(self.focal_sigma, 4),
                "k1": round(self.k1, 5), "error_px": round(self.error_px, 4), "frames": self.frames,
                "total_frames": self.total_frames, "points": self.points,
                "parallax_deg": round(self.parallax_deg, 3), "parallax_px": round(self.parallax_px, 3),
                "depth_range": None if self.depth_range is None else [float(v) for v in self.depth_range],
                "far_points_dropped": self.far_points_dropped,
                **({} if self.suggested_focal_px is None else
                   {"suggested_focal_px": round(self.suggested_focal_px, 1)}),
                "profile": {f"{k:.2f}": round(v, 4) for k, v in self.profile.items()}}

    def line(self) -> str:
        sig = "given" if self.focal_sigma is None else f"+-{100 * self.focal_sigma:.1f} %"
        return (f"{self.frames}/{self.total_frames} frames, error {self.error_px:.2f} px, focal "
                f"{self.focal_px:.1f} px ({sig}), parallax {self.parallax_deg:.1f} deg / {self.parallax_px:.1f} px, "
                f"{self.points} points")


def _point_angles(rec: _Recon, seen: np.ndarray, bad: np.ndarray) -> Dict[int, float]:
    """Largest angle (degrees) between the rays of each point's inlier observations."""
    C = {r: -rec.R[r].T @ rec.t[r] for r in rec.R}
    out = {}
    for n, X in rec.X.items():
        obs = [r for r in rec.R if seen[r, n] and not bad[r, n]]
        d = np.array([X - C[r] for r in obs])
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        cos = np.clip(d @ d.T, -1, 1)
        out[n] = float(np.degrees(np.arccos(cos.min())))
    return out


def _depth_range(rec: _Recon, angles: Dict[int, float]) -> Tuple[Optional[Tuple[float, float]], int]:
    good = [n for n, a in angles.items() if a >= MIN_POINT_ANGLE_DEG]
    dropped = len(angles) - len(good)
    if len(good) < 8:
        return None, dropped
    X = np.array([rec.X[n] for n in good])
    z = np.concatenate([(X @ rec.R[r].T + rec.t[r])[:, 2] for r in rec.R])
    z = z[np.isfinite(z) & (z > 0)]
    if z.size < 8:
        return None, dropped
    near, far = float(np.percentile(z, 2)), float(np.percentile(z, 98))
    return ((near, far) if 0 < near < far else None), dropped


def _profile(solver: _Solver, best: _Recon, step: float) -> Tuple[float, Dict[float, float]]:
    """Relative standard deviation of the focal length from the fixed-focal re-solves at
    ``f (1 +- step)``: ``sigma = step / sqrt(mean chi2 rise)``."""
    import copy

    sigma2 = best.cost / max(1, best.n_res - best.n_par - 1)
    prof = {best.f: best.rms}
    rises = []
    for s in (1 - step, 1 + step):
        rec = copy.deepcopy(best)
        scale = s
        rec.f = best.f * scale
        solver.bundle(rec, free_focal=False, robust=False, max_nfev=100)
        prof[rec.f] = rec.rms
        rises.append(max(0.0, rec.cost - best.cost) / max(sigma2, 1e-12))
    rise = float(np.mean(rises))
    # a track's errors are correlated along it (tracking drift, one surface patch): count
    # each track once, i.e. inflate the deviation by sqrt(mean observations per track)
    obs = [sum(1 for r in best.R if solver.seen[r, n] and not solver.bad[r, n]) for n in best.X]
    inflate = math.sqrt(max(1.0, float(np.mean(obs)))) if obs else 1.0
    return (inflate * step / math.sqrt(rise) if rise > 0 else float("inf")), dict(sorted(prof.items()))


def solve_tracks(tracks: Tracks, *, focal_px: Optional[float] = None, refine_k1: bool = False,
                 max_error: float = MAX_ERROR_PX, max_focal_sigma: float = MAX_FOCAL_SIGMA,
                 size_scale: float = 1.0) -> SolveReport:
    """Solve the cameras of ``tracks`` (see the module docstring).

    Args:
        focal_px: the focal length when known (then kept fixed); ``None``: searched.
        refine_k1: also solve the radial distortion ``k1``.
        size_scale: the clip's width over the tracks' width: focal lengths in messages are
            given at the clip's size (what ``--focal`` takes).

    Returns:
        A :class:`SolveReport`; ``ok`` is False (with a one-line ``reason``) when a check
        fails. Never raises for a clip that merely cannot be solved.
    """
    F = len(tracks.numbers)
    need = min(F, max(MIN_FRAMES, int(math.ceil(MIN_FRACTION * F))))
    solver = _Solver(tracks)
    if F < 2 or tracks.uv.shape[1] < 12:
        return _failed(tracks, f"too few tracks ({tracks.uv.shape[1]}) over {F} frames to solve the camera")
    tracks = select_tracks(tracks)
    solver = _Solver(tracks)
    pair = solver.init_pair()
    starts = [focal_px] if focal_px else [m * tracks.width for m in FOCAL_CANDIDATES]
    best = None
    for f0 in starts:
        solver.bad[:] = False
        rec = solver.build(f0, pair)
        if rec is None:
            continue
        if not focal_px:
            solver.bundle(rec, free_focal=True, free_k1=refine_k1, max_nfev=200)
            solver.reject(rec)
            solver.bundle(rec, free_focal=True, free_k1=refine_k1, robust=False, max_nfev=200)
        else:
            solver.bundle(rec, free_focal=False, free_k1=refine_k1, robust=False, max_nfev=200)
        key = (-len(rec.R), rec.rms)
        _log(f"start {f0:.0f}: focal {rec.f:.1f}, k1 {rec.k1:.4f}, {len(rec.R)} frames, rms {rec.rms:.3f}")
        same = best is not None and -best[0][0] == len(rec.R) and abs(best[1].f / rec.f - 1) < 0.02
        if best is None or key < best[0]:
            best = (key, rec, solver.bad.copy())
        if same:
            break  # two starts reached the same focal length: that basin is the solve
    if best is None:
        return _failed(tracks, "no two frames give a relative pose (too little motion or too few tracks)")
    rec = best[1]
    solver.bad = best[2]
    angles = _point_angles(rec, solver.seen, solver.bad)
    parallax = float(np.median(list(angles.values()))) if angles else 0.0
    sigma, prof = (None, {}) if focal_px else _profile(solver, rec, PROFILE_STEP)
    rng, dropped = _depth_range(rec, angles)
    cams = {tracks.numbers[r]: Camera(tracks.width, tracks.height, rec.f, rec.f, solver.c[0], solver.c[1],
                                      R=rec.R[r].copy(), t=rec.t[r].copy(),
                                      distortion_model="opencv" if rec.k1 else "none",
                                      distortion=(rec.k1, 0.0, 0.0, 0.0, 0.0) if rec.k1 else (),
                                      name=str(tracks.numbers[r]))
            for r in sorted(rec.R)}
    report = SolveReport(True, "", cams, rec.f, sigma, rec.k1, rec.rms, len(rec.R), F, len(rec.X), parallax,
                         solver.parallax_px, rng,
                         dropped, prof)
    report.reason = _check(report, need, max_error, max_focal_sigma, size_scale)
    report.ok = not report.reason
    if not report.ok and not focal_px and report.focal_sigma is not None and report.focal_sigma > max_focal_sigma:
        suggestion = _suggest_focal(tracks, rec.f, refine_k1, max_error, max_focal_sigma)
        report.reason = lens_reason(rec.f * size_scale, report.focal_sigma, suggestion, size_scale)
        report.suggested_focal_px = None if suggestion is None else float(suggestion[0])
    if rng is not None and rng[1] / rng[0] > 1e3:
        report.warnings.append(f"the points' depths span {rng[1] / rng[0]:.0f}x (near {rng[0]:.3g}, far {rng[1]:.3g})")
    return report


#: relative steps from the estimated focal length tried for a suggestion that solves
SUGGEST_STEPS = (0.0, -0.04, 0.04, -0.08, 0.08)


def _suggest_focal(tracks: Tracks, f: float, refine_k1: bool, max_error: float,
                   max_sigma: float) -> Optional[Tuple[float, "SolveReport"]]:
    """A focal length (tracks' pixels) near ``f`` with which the solve passes every check,
    tried in the order of :data:`SUGGEST_STEPS`, with its report; ``None`` when none does
    (a refusal then suggests no number it has not verified)."""
    for step in SUGGEST_STEPS:
        cand = f * (1.0 + step)
        r = solve_tracks(tracks, focal_px=cand, refine_k1=refine_k1, max_error=max_error, max_focal_sigma=max_sigma)
        _log(f"suggestion {cand:.1f}: ok {r.ok} {r.reason}")
        if r.ok:
            return cand, r
    return None


def lens_reason(focal_px: float, sigma: float, suggestion=None, size_scale: float = 1.0) -> str:
    """The one-line refusal when the clip does not determine the lens, with focal lengths at
    the clip's size (``size_scale`` = clip width / tracking width); ``suggestion``
    (``(focal in tracking pixels, its SolveReport)``) is a focal length verified to solve."""
    msg = (f"the lens cannot be determined from the clip (focal {focal_px:.0f} px at the clip's size, "
           f"uncertainty +-{100 * min(sigma, 9.99):.0f} %): {SET_FOCAL}")
    if suggestion is not None:
        f, r = suggestion
        msg += (f"; --focal {f * size_scale:.0f} solves {r.frames}/{r.total_frames} frames at "
                f"{r.error_px:.2f} px")
    else:
        msg += "; no focal length within 8 % of that solves: measure the lens"
    return msg


def _check(r: SolveReport, need: int, max_error: float, max_sigma: float, size_scale: float = 1.0) -> str:
    """The first failed check as one line, or ``""``."""
    no_parallax = (f"no usable parallax ({r.parallax_px:.1f} px off a homography, median ray angle "
                   f"{r.parallax_deg:.2f} deg): the camera only rotates, hardly moves, or sees a single plane")
    if r.parallax_px < MIN_PARALLAX_PX:
        return no_parallax
    if r.frames < need:
        return f"only {r.frames}/{r.total_frames} frames solved (needs {need})"
    if not math.isfinite(r.error_px) or r.error_px > max_error:
        return f"reprojection error {r.error_px:.2f} px > {max_error:g} px"
    if r.focal_sigma is not None and not r.focal_sigma <= max_sigma:
        return lens_reason(r.focal_px * size_scale, r.focal_sigma, None, size_scale)
    if r.parallax_deg < MIN_PARALLAX_DEG:  # after the lens: a wrong focal shrinks the ray angles
        return no_parallax
    if r.depth_range is None:
        return f"too few points with parallax (>= {MIN_POINT_ANGLE_DEG:g} deg) to bound the depth"
    return ""


def _log(msg: str) -> None:
    import logging

    logging.getLogger(__name__).debug(msg)


def _failed(tracks: Tracks, reason: str) -> SolveReport:
    return SolveReport(False, reason, {}, float("nan"), None, 0.0, float("nan"), 0, len(tracks.numbers),
                       0, 0.0, 0.0, None)
