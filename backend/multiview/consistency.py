"""Multi-view consistency of a measured depth map (issue 24, item 3): pixels that the
other views do not confirm (moving objects, water, reflections, false matches) lose
their confidence, so they are filled from the prior instead of measured as static.

**Photometric check** (after COLMAP's fusion and filtering, Schönberger et al. 2016,
"Pixelwise View Selection for Unstructured Multi-View Stereo", ECCV, which keeps a
pixel only when enough views agree with it): every neighbour view is warped onto the
reference *through the measured depth map itself* (each pixel back-projected with its
depth, projected into the neighbour, the neighbour sampled there: ``cv2.remap``), and
the zero-mean NCC over a small window is taken per neighbour. A neighbour *agrees* at a
pixel when the pixel is in its frame, in front of it, and the NCC reaches ``ncc_min``.
The score is the share of the neighbours that see the pixel which agree.

The plane sweep already averages the best half of the neighbours (occlusion-robust),
so a static surface is confirmed by most of the views that see it; an object that
moved between the frames matches only some of them at any one depth (the ones whose
epipolar direction happens to fit its motion) and is not confirmed. One limitation
is physical, not of this check: an object moving at constant velocity exactly along
the camera's own straight path looks like a static object at another depth in every
view (no multi-view method can tell).

**Geometric check** against neighbours' own depth maps (forward-backward reprojection,
:func:`backend.multiview.reproject.geometric_consistency`) is applied where those maps
are given (:func:`backend.multiview.planesweep.multiview_depth` ``nb_depths``).
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from .cameras import Camera
from .reproject import project_points, world_points

#: NCC at the measured depth from which a neighbour agrees
NCC_MIN = 0.3
#: share of the seeing neighbours that must agree: confidence ramps from 0 at LO to 1 at HI
AGREE_LO, AGREE_HI = 0.4, 0.7


def _box(a: np.ndarray, win: int) -> np.ndarray:
    import cv2

    return cv2.boxFilter(a, -1, (win, win), borderType=cv2.BORDER_REFLECT)


def warp_by_depth(img: np.ndarray, cam: Camera, depth: np.ndarray, ref: Camera) -> Tuple[np.ndarray, np.ndarray]:
    """``img`` (seen by ``cam``) resampled onto ``ref``'s pixels through ``ref``'s planar
    ``depth`` (``h x w``, > 0). Returns ``(warped float32 h x w, seen bool h x w)``: seen =
    in front of ``cam`` and inside its frame."""
    import cv2

    u, v, z = project_points(world_points(depth.astype(np.float32), ref), cam)
    h, w = img.shape[:2]
    seen = (z > 0) & (u >= 0) & (u <= w) & (v >= 0) & (v <= h) & (depth > 0)
    warped = cv2.remap(np.ascontiguousarray(img, np.float32), (u - 0.5).astype(np.float32),
                       (v - 0.5).astype(np.float32), cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return warped, seen


def ncc(a: np.ndarray, b: np.ndarray, win: int = 7, eps: float = 1e-4) -> np.ndarray:
    """Zero-mean normalised cross-correlation of two ``h x w`` float32 images over
    ``win x win`` windows (box filters), in [-1, 1]; flat windows give ~0."""
    ma, mb = _box(a, win), _box(b, win)
    va = _box(a * a, win) - ma * ma + eps
    vb = _box(b * b, win) - mb * mb + eps
    cov = _box(a * b, win) - ma * mb
    return (cov / np.sqrt(va * vb)).astype(np.float32)


def photometric_agreement(ref_grey: np.ndarray, ref_cam: Camera, depth: np.ndarray,
                          nb_greys: Sequence[np.ndarray], nb_cams: Sequence[Camera], win: int = 7,
                          ncc_min: float = NCC_MIN) -> Tuple[np.ndarray, np.ndarray]:
    """Per pixel, the share of the neighbours that see it which agree with the measured
    depth (module doc).

    Args:
        ref_grey: ``h x w`` float32 grey reference at the depth map's size; ``ref_cam``
            its camera (pinhole, ``w x h``).
        depth: ``h x w`` planar depth (cameras' units, > 0).
        nb_greys, nb_cams: neighbour grey images (any size) and their cameras (same size
            as their image).

    Returns:
        ``(agree, seen)``: float32 share in [0, 1] (0 where no neighbour sees the pixel),
        and the int count of neighbours seeing it.
    """
    agree = np.zeros(depth.shape, np.float32)
    seen_n = np.zeros(depth.shape, np.int32)
    for g, c in zip(nb_greys, nb_cams):
        warped, seen = warp_by_depth(g, c, depth, ref_cam)
        ok = seen & (ncc(ref_grey.astype(np.float32), warped, win) >= ncc_min)
        agree += ok
        seen_n += seen
    return np.where(seen_n > 0, agree / np.maximum(seen_n, 1), 0.0).astype(np.float32), seen_n


def consistency_confidence(agree: np.ndarray, lo: float = AGREE_LO, hi: float = AGREE_HI) -> np.ndarray:
    """Confidence factor in [0, 1] from :func:`photometric_agreement`'s share: 0 up to
    ``lo``, 1 from ``hi``, linear between."""
    return np.clip((agree - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)
