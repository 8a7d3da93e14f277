"""Depth edges on image edges (issue 33): :mod:`backend.depth_edges` on constructed
frames whose true edge is known, the hand-drawn pot masks, and the pot test on the real
``phone_office.mp4`` (timings only in benchmarks/pot_test.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from backend.depth_edges import EdgeSettings, display_guide, refine_depth

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import pot_test  # noqa: E402

H, W = 240, 320  # the size of phone_office.mp4
EDGE_X = 140  # the true silhouette: x < EDGE_X is the object in front


def _scene(seed: int = 0):
    """A textured object (left) in front of a textured wall (right): guide, true depth."""
    rng = np.random.default_rng(seed)
    guide = np.empty((H, W, 3), np.float32)
    guide[:, :EDGE_X] = (0.75, 0.45, 0.3)  # terracotta
    guide[:, EDGE_X:] = (0.5, 0.55, 0.6)  # grey-blue wall
    guide += rng.normal(0, 0.04, guide.shape).astype(np.float32)  # texture on both
    depth = np.where(np.arange(W)[None, :] < EDGE_X, 2.0, 3.0).astype(np.float32) * np.ones((H, 1), np.float32)
    return np.clip(guide, 0, 1), depth


def test_a_fattened_silhouette_snaps_to_the_image_edge():
    """Plane-sweep fattening: the object's depth spills 6 px into the wall (a halo).
    After refinement the halo band shows the wall (>= 95 %), the object keeps its depth."""
    guide, true = _scene()
    est = true.copy()
    est[:, EDGE_X:EDGE_X + 6] = 2.0
    out = refine_depth(est, guide)
    band = out[:, EDGE_X:EDGE_X + 6]
    assert np.mean(np.abs(est[:, EDGE_X:EDGE_X + 6] - 3.0) < 0.1) == 0.0
    assert np.mean(np.abs(band - 3.0) < 0.1) >= 0.95
    assert np.mean(np.abs(out[:, :EDGE_X] - 2.0) < 0.1) >= 0.99


def test_a_blurred_low_resolution_depth_gets_a_sharp_edge():
    """Depth upsampled from 1/8 size (a ramp across the silhouette) becomes a step on
    the image edge: pixels 2-8 px from the edge within 10 % of the truth on both sides
    (a pixel within two slices of its median keeps its value: 2 slices = 5 % here)."""
    import cv2
    guide, true = _scene(1)
    small = cv2.resize(true, (W // 8, H // 8), interpolation=cv2.INTER_AREA)
    est = cv2.resize(small, (W, H), interpolation=cv2.INTER_LINEAR)
    out = refine_depth(est, guide)
    near = np.r_[EDGE_X - 8:EDGE_X - 2, EDGE_X + 2:EDGE_X + 8]
    before = np.mean(np.abs(est[:, near] / true[:, near] - 1) < 0.1)
    after = np.mean(np.abs(out[:, near] / true[:, near] - 1) < 0.1)
    assert before < 0.7 and after >= 0.95, (before, after)


def test_holes_in_a_textured_front_surface_are_filled_from_its_own_measurements():
    """Unmeasured blocks (weight 0) inside the textured object were filled with the
    wall's depth (holes a CG object shows through); refinement fills them from the
    object's measured pixels: <= 1 % holes left."""
    guide, true = _scene(2)
    est, wt = true.copy(), np.ones((H, W), np.float32)
    rng = np.random.default_rng(3)
    for _ in range(40):
        y, x = rng.integers(0, H - 10), rng.integers(0, EDGE_X - 10)
        est[y:y + 10, x:x + 10], wt[y:y + 10, x:x + 10] = 3.0, 0.0
    holes_before = np.mean(est[:, :EDGE_X] > 2.5)
    out = refine_depth(est, guide, wt)
    assert holes_before > 0.05
    assert np.mean(out[:, :EDGE_X] > 2.5) <= 0.01


def test_masked_pixels_neither_move_nor_vote():
    """Sky (mask False) keeps its depth exactly, and its far value does not leak."""
    guide, true = _scene(4)
    mask = np.ones((H, W), bool)
    mask[:20] = False
    est = true.copy()
    est[:20] = 1000.0
    out = refine_depth(est, guide, mask=mask)
    assert np.array_equal(out[:20], est[:20])
    assert out[20:].max() < 3.5


def test_bad_input_is_refused_with_one_clear_message():
    guide, true = _scene()
    with pytest.raises(ValueError, match="refine_depth"):
        refine_depth(true[:, :-1], guide)
    bad = true.copy()
    bad[5, 5] = 0.0
    with pytest.raises(ValueError, match="finite and > 0"):
        refine_depth(bad, guide)


def test_settings_change_the_result_and_output_is_float32_positive():
    guide, true = _scene(5)
    est = true.copy()
    est[:, EDGE_X:EDGE_X + 6] = 2.0
    a = refine_depth(est, guide, settings=EdgeSettings(median_radius_frac=0.01))
    b = refine_depth(est, guide)
    assert a.dtype == np.float32 and a.min() > 0 and not np.allclose(a, b)
    assert display_guide(np.full((2, 2, 3), 4.0, np.float32)).max() == 1.0


def test_hand_drawn_masks_are_plausible():
    """The polygons rasterise to a pot of a few thousand pixels on each frame, the desk
    below it and the background region to its right, disjoint where they should be."""
    masks = pot_test.load_masks()
    assert sorted(masks) == [6, 18, 30]
    for n, m in masks.items():
        assert 3000 < m["pot"].sum() < 5000, n
        assert (m["pot"] & m["desk"]).sum() < 20
        ys, xs = np.nonzero(m["pot"])
        yd, _ = np.nonzero(m["desk"])
        _, xb = np.nonzero(m["behind"] & ~m["pot"])
        assert yd.mean() > ys.mean() and xb.mean() > xs.mean()


def test_pot_metrics_on_constructed_depths():
    """The measurement itself: perfect depth passes every bar; a 6 px fattened pot has a
    6 px halo; a desk drawn behind the pot is all holes."""
    m = pot_test.load_masks()[18]
    perfect = np.full(m["pot"].shape, 4.0, np.float32)
    perfect[m["pot"]] = 2.0
    perfect[m["desk"]] = 1.5
    r = pot_test.pot_metrics(perfect, m)
    assert r["pot_ok"] == 1.0 and r["halo_px"] == 0 and r["desk_holes"] == 0.0 and r["order_ok"]
    import cv2
    fat = cv2.distanceTransform((~m["pot"]).astype(np.uint8), cv2.DIST_L2, 5) <= 6.0
    halo = perfect.copy()
    halo[fat & ~m["desk"]] = 2.0
    assert pot_test.pot_metrics(halo, m)["halo_px"] == 6
    holes = perfect.copy()
    holes[m["desk"] & ~m["pot"]] = 5.0
    assert pot_test.pot_metrics(holes, m)["desk_holes"] == 1.0


def test_row_share_of_a_ramp_and_of_objects():
    ramp = np.exp(np.linspace(0, 1, 50))[:, None] * np.ones((1, 60))
    assert pot_test.row_variance_share(ramp) > 0.999
    blocks = np.ones((50, 60))
    blocks[:, 30:] = 3.0
    assert pot_test.row_variance_share(blocks) < 0.01


@pytest.fixture(scope="module")
def pot_runs(footage, tmp_path_factory):
    """phone_office frames 4-20 decomposed with its cameras (``--focal 300`` solve),
    without and with the edge refinement; the pot metrics of frames 6 and 18."""
    from backend import decompose
    from backend.contract import read_frame
    from backend.multiview.autosolve import solve_footage, write_solve

    clip = footage("phone_office")
    tmp = tmp_path_factory.mktemp("pot")
    cams = write_solve(solve_footage(clip, focal_px=pot_test.FOCAL), tmp / "cams.json")
    masks = pot_test.load_masks()
    out = {}
    for edges in (False, True):
        folder = tmp / f"edges_{int(edges)}"
        decompose(clip, folder, frames="4-20", cameras=cams, depth_edges=edges, progress=lambda e: None)
        out[edges] = [pot_test.pot_metrics(read_frame(folder / f"gbuffer_{n:04d}.exr").depth, masks[n])
                      for n in (6, 18)]
    return out


def test_pot_halo_shrinks_with_the_refinement(pot_runs):
    """The refinement's job on real footage with cameras: the band of background beside
    the pot that hides a CG object behind the pot (the halo) shrinks, and the desk in
    front has fewer holes."""
    before, after = pot_runs[False], pot_runs[True]
    print("pot test without / with edges:", before, after)
    ring = [np.mean([r["ring6"] for r in rs]) for rs in (before, after)]
    desk = [np.mean([r["desk_holes"] for r in rs]) for rs in (before, after)]
    # measured with frames 4-20: ring 0.56 -> 0.52, halo 10 -> 1 px, desk 9.7 % -> 0.5 %
    # (the halo count is a threshold on bands that hover near half: 0.52-0.56 before)
    assert ring[1] < ring[0], ring
    assert max(r["halo_px"] for r in after) <= 2 < max(r["halo_px"] for r in before)
    assert desk[1] < desk[0], desk


@pytest.mark.xfail(strict=True, reason="issue 33 bar not met: with cameras the grey column behind the pot is "
                   "measured nearer than the pot (4 px of parallax over the clip); pot 66-81 %, desk holes 0-18 %")
def test_pot_bar_of_issue_33(pot_runs):
    """The issue's bar: >= 97 % of the pot occludes, halo <= 2 px, desk holes <= 1 %."""
    after = pot_runs[True]
    assert all(r["pot_ok"] >= 0.97 and r["halo_px"] <= 2 and r["desk_holes"] <= 0.01 for r in after)


def test_fixed_pixels_vote_but_keep_their_measurement():
    """Measured depth (``fixed``) is never replaced, even inside a halo band; the
    unmeasured pixels of the band still move."""
    guide, true = _scene(6)
    est = true.copy()
    est[:, EDGE_X:EDGE_X + 6] = 2.0
    fixed = np.zeros((H, W), bool)
    fixed[::7, EDGE_X + 2] = True
    out = refine_depth(est, guide, fixed=fixed)
    assert np.array_equal(out[fixed], est[fixed])
    band = ~fixed[:, EDGE_X:EDGE_X + 6]
    assert np.mean(np.abs(out[:, EDGE_X:EDGE_X + 6][band] - 3.0) < 0.1) >= 0.95
