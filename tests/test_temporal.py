"""Temporal stabilisation: DIS flow, forward-backward occlusion check, blending, flicker."""
from __future__ import annotations

import numpy as np

from backend import temporal
from footage_util import gradient_rgb


def _scene(t, h=48, w=64):
    """Textured frame shifted right by ``t`` pixels, linear float."""
    return (gradient_rgb(h, w + 20, 0).astype(np.float32) / 255.0)[:, 10 - t: 10 - t + w]


def test_flow_recovers_shift_and_warp_aligns():
    prev, cur = _scene(0), _scene(3)  # content moves 3 px to the right
    pair = temporal.FlowPair.compute(prev, cur)
    inner = pair.mask[8:-8, 8:-8]
    assert inner.mean() > 0.9
    # cur(x) = prev(x - 3)  ->  flow cur->prev is (-3, 0)
    np.testing.assert_allclose(np.median(pair.back[8:-8, 8:-8, 0]), -3.0, atol=0.3)
    np.testing.assert_allclose(np.median(pair.back[8:-8, 8:-8, 1]), 0.0, atol=0.3)
    warped = temporal.warp(prev, pair.back)
    err_w = np.abs(warped - cur)[8:-8, 8:-8].mean()
    err_0 = np.abs(prev - cur)[8:-8, 8:-8].mean()
    assert err_w < 0.3 * err_0


def test_consistency_mask_flags_inconsistent_flow():
    h, w = 20, 30
    back = np.zeros((h, w, 2), np.float32)
    fwd = np.zeros((h, w, 2), np.float32)
    back[5:10, 5:10, 0] = 4.0  # backward says "moved", forward disagrees there
    m = temporal.consistency_mask(back, fwd)
    assert not m[5:10, 5:10].any()
    assert m[12:, 12:].all()
    back_out = np.zeros((h, w, 2), np.float32)
    back_out[:, :2, 0] = -5.0  # points outside the frame
    assert not temporal.consistency_mask(back_out, fwd)[:, :2].any()


def test_stabilize_reduces_flicker_on_static_scene():
    rng = np.random.default_rng(0)
    img = _scene(0)
    depth = np.full((48, 64), 5.0, np.float32)
    pair = temporal.FlowPair.compute(img, img)
    prev = {"depth": depth, "albedo": np.full((48, 64, 3), 0.5, np.float32)}
    noisy = {"depth": depth + rng.normal(0, 0.5, depth.shape).astype(np.float32),
             "albedo": np.clip(0.5 + rng.normal(0, 0.1, (48, 64, 3)), 0, 1).astype(np.float32)}
    warped = temporal.warp_passes(prev, pair)
    raw = temporal.flicker(noisy, warped, pair.mask, depth_range=10.0)
    out = temporal.stabilize(noisy, prev, pair, strength=0.8, depth_range=(1.0, 100.0))
    stab = temporal.flicker(out, warped, pair.mask, depth_range=10.0)
    assert set(raw) == {"depth", "albedo", "mean"}
    assert stab["mean"] < 0.25 * raw["mean"]
    np.testing.assert_allclose(stab["depth"], 0.2 * raw["depth"], rtol=1e-3)


def test_stabilize_keeps_normals_unit_and_tiny_frames_work():
    img = np.random.default_rng(1).random((3, 1, 3)).astype(np.float32)
    pair = temporal.FlowPair.compute(img, img)
    assert pair.back.shape == (3, 1, 2) and pair.mask.all()
    n_prev = np.tile(np.array([0, 1, 0], np.float32), (3, 1, 1))
    n_cur = np.tile(np.array([0, 0, 1], np.float32), (3, 1, 1))
    out = temporal.stabilize({"normal": n_cur}, {"normal": n_prev}, pair, 0.5)
    np.testing.assert_allclose(np.linalg.norm(out["normal"], axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out["normal"][0, 0], [0, 2 ** -0.5, 2 ** -0.5], atol=1e-6)
