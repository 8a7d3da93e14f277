"""Geometry: intrinsics, normals from depth (analytic planes), scale/shift alignment."""
from __future__ import annotations

import math

import numpy as np
import pytest

from backend import geometry as g


def test_intrinsics_from_fov():
    fx, fy, cx, cy = g.intrinsics_from_fov(640, 480, 90.0)
    assert fx == pytest.approx(320.0) and fy == pytest.approx(320.0)
    assert (cx, cy) == (320.0, 240.0)
    assert g.intrinsics_from_fov(100, 50, sar=2.0)[1] == pytest.approx(2 * g.intrinsics_from_fov(100, 50)[0])
    with pytest.raises(ValueError):
        g.intrinsics_from_fov(0, 10)
    with pytest.raises(ValueError):
        g.intrinsics_from_fov(10, 10, 180.0)


def _plane_depth(n, d, intr, h, w):
    """Planar depth of the plane n . P + d = 0 (camera space, OpenGL) seen through intr."""
    fx, fy, cx, cy = intr
    x = (np.arange(w) + 0.5 - cx) / fx
    y = (np.arange(h) + 0.5 - cy) / fy
    rx, ry = np.meshgrid(x, -y)  # ray direction (rx, ry, -1) per unit depth
    denom = n[0] * rx + n[1] * ry - n[2]
    return (-d / denom).astype(np.float32)


@pytest.mark.parametrize("normal", [(0, 0, 1), (0, 0.4, 1), (0.5, -0.2, 0.8), (-0.6, 0.0, 0.8)])
def test_normals_from_depth_recovers_plane_normal(normal):
    n = np.array(normal, np.float64)
    n /= np.linalg.norm(n)
    h, w = 31, 45
    intr = g.intrinsics_from_fov(w, h, 60.0)
    depth = _plane_depth(n, 5.0 * n[2], intr, h, w)  # plane through (0, 0, -5)
    assert np.all(depth > 0)
    est = g.normals_from_depth(depth, intr)
    assert est.shape == (h, w, 3) and est.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(est, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(est.reshape(-1, 3), np.broadcast_to(n, (h * w, 3)), atol=2e-3)


def test_normals_keep_edges_sharp_and_handle_degenerate_sizes():
    depth = np.full((20, 20), 2.0, np.float32)
    depth[:, 10:] = 8.0  # a depth step: both sides are fronto-parallel planes
    est = g.normals_from_depth(depth)
    np.testing.assert_allclose(est[..., 2], 1.0, atol=1e-5)  # no smeared normals at the edge
    for shape in [(1, 1), (1, 7), (9, 1)]:
        n = g.normals_from_depth(np.full(shape, 3.0, np.float32))
        assert n.shape == shape + (3,)
        np.testing.assert_allclose(n, np.broadcast_to([0, 0, 1], n.shape), atol=1e-6)


def test_align_scale_shift_exact_and_masked():
    rng = np.random.default_rng(0)
    pred = rng.random((10, 12))
    ref = 3.5 * pred - 0.25
    ref_bad = ref.copy()
    mask = np.ones_like(pred, bool)
    mask[:2] = False
    ref_bad[:2] = 1e6  # outliers outside the mask must not matter
    s, t = g.align_scale_shift(pred, ref_bad, mask)
    assert s == pytest.approx(3.5) and t == pytest.approx(-0.25)
    assert g.align_scale_shift(np.ones(5), np.arange(5.0)) == (1.0, pytest.approx(1.0))


def test_temporal_depth_aligner_removes_pumping():
    rng = np.random.default_rng(3)
    base = 1.0 + rng.random((24, 32)).astype(np.float32)
    al = g.TemporalDepthAligner(1.0, 100.0)
    first = al(base)
    assert first.min() == 1.0 and 50.5 <= first.max() < 60  # 1st..99th pct -> 1..50.5, headroom above
    # the same scene predicted with a different (unknown) scale and shift: must not pump
    for s, t in [(2.0, 0.5), (0.3, 4.0), (7.0, -1.0)]:
        out = al(s * base + t)
        np.testing.assert_allclose(out, first, atol=1e-3)
    # without alignment each frame normalises on its own; with clipping it still matches
    assert math.isclose(float(g.normalise_relative_depth(base * 2, 1, 100).max()), 100.0)


def test_temporal_aligner_ignores_a_moving_object():
    rng = np.random.default_rng(4)
    base = 1.0 + rng.random((30, 40)).astype(np.float32)
    al = g.TemporalDepthAligner(1.0, 100.0)
    first = al(base)
    nxt = 2.0 * base + 1.0
    nxt[:10, :10] = 0.2  # an object moved close to the camera in 8 % of the frame
    out = al(nxt)
    np.testing.assert_allclose(out[10:, 10:], first[10:, 10:], rtol=1e-3)
