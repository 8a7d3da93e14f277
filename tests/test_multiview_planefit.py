"""Local plane fits of depth (backend.multiview.planefit): exact on planes, do not bend
across depth edges, and upsample planes exactly."""
import numpy as np

from backend import geometry
from backend.multiview.planefit import fit_local_planes
from backend.multiview.planesweep import edge_confidence, upsample_planes

INTR = (100.0, 100.0, 40.0, 30.0)


def _plane_depth(n_cv, e, w=80, h=60, intr=INTR):
    """Planar depth of the plane n . X = e (OpenCV camera axes)."""
    fx, fy, cx, cy = intr
    x = (np.arange(w) + 0.5 - cx) / fx
    y = (np.arange(h) + 0.5 - cy) / fy
    return (e / (n_cv[0] * x[None, :] + n_cv[1] * y[:, None] + n_cv[2])).astype(np.float32)


def _angle(a, b):
    return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1, 1)))


def test_slanted_plane_is_fitted_exactly():
    n = np.array([0.0, -0.8, -0.6])  # a floor seen at a grazing angle
    depth = _plane_depth(n / np.linalg.norm(n), -1.5)
    assert (depth > 0).all()
    fit = fit_local_planes(depth, np.ones_like(depth), INTR, 9)
    np.testing.assert_allclose(1.0 / fit.inv_depth, depth, rtol=1e-4)
    assert _angle(fit.normal, geometry.normals_from_depth(depth, INTR)).max() < 1.0
    assert fit.residual.max() < 1e-4
    # piecewise-planar upsampling: exact at twice the size
    big = _plane_depth(n / np.linalg.norm(n), -1.5, 160, 120, (200.0, 200.0, 80.0, 60.0))
    np.testing.assert_allclose(1.0 / upsample_planes(fit, (160, 120)), big, rtol=1e-3)


def test_depth_edge_is_not_bent_and_is_flagged():
    depth = np.full((60, 80), 8.0, np.float32)
    depth[:, 40:] = 4.0  # a fronto-parallel box in front of a wall
    fit = fit_local_planes(depth, np.ones_like(depth), INTR, 9)
    np.testing.assert_allclose(1.0 / fit.inv_depth, depth, rtol=1e-4)  # every pixel has a window on its side
    assert _angle(fit.normal, np.array([0.0, 0.0, 1.0])).max() < 1.0
    # noise at the edge (a fattened band) fits no plane: low confidence there only
    noisy = depth.copy()
    noisy[:, 38:40] = np.where(np.arange(60)[:, None] % 2, 4.0, 8.0)
    fit = fit_local_planes(noisy, np.ones_like(noisy), INTR, 9)
    conf = edge_confidence(fit.residual)
    assert conf[:, 38:40].mean() < 0.5 and conf[:, :30].min() > 0.99 and conf[:, 50:].min() > 0.99


def test_low_weight_pixels_do_not_pull_the_fit():
    depth = np.full((60, 80), 5.0, np.float32)
    wts = np.ones_like(depth)
    depth[20:40, 30:50] = 2.0  # an outlier patch nobody trusts
    wts[20:40, 30:50] = 0.0
    fit = fit_local_planes(depth, wts, INTR, 9)
    ok = np.ones_like(wts, bool)
    ok[16:44, 26:54] = False  # away from the patch, all windows see only the plane
    np.testing.assert_allclose(1.0 / fit.inv_depth[ok], 5.0, rtol=1e-4)
