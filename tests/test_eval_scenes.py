"""The held-out evaluation scenes and their scores (issue 24; tests/eval_scenes.py).

* Scores: the truth scores perfectly, a wrong depth and the baselines do not.
* A tiny render (3 frames, 64x48, a moving sphere): the exact depth of one frame,
  reprojected with the exact cameras, lands on the next frame's depth (the cameras and
  depth of every file variant agree), the moving sphere's mask is found, and each camera
  file reads back with the range / points it should have.
"""
from __future__ import annotations

import numpy as np
import pytest

import eval_scenes as es


def _plane(h=48, w=64):
    yy = np.arange(h, dtype=np.float32)[:, None].repeat(w, 1)
    depth = 2.0 + 0.05 * yy + 0.01 * np.arange(w, dtype=np.float32)[None, :]
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 1], normal[..., 2] = 0.6, 0.8
    return depth, normal


def test_the_truth_scores_perfectly_and_the_baselines_do_not():
    depth, normal = _plane()
    valid = np.ones(depth.shape, bool)
    valid[:4] = False  # sky rows are not scored
    conf = np.ones_like(depth)
    s = es.score_frame(depth, normal, conf, depth, normal, valid)
    assert s["conf_pred_absrel"] == 0 and s["conf_pred_delta1"] == 1 and s["coverage"] == 1
    assert s["conf_pred_spearman"] > 0.999 and s["normal_deg"] < 0.1
    assert s["conf_constant_absrel"] > 0.05 and s["conf_constant_spearman"] == 0
    assert 0 < s["conf_vertical_absrel"] < s["conf_constant_absrel"]
    assert s["facing_normal_deg"] == pytest.approx(np.degrees(np.arccos(0.8)), abs=0.01)
    conf[: depth.shape[0] // 2] = 0.2
    wrong = es.score_frame(2 * depth, normal, conf, depth, normal, valid)
    assert wrong["conf_pred_absrel"] == pytest.approx(1.0) and wrong["conf_pred_delta1"] == 0
    assert wrong["coverage"] == pytest.approx((48 // 2 - 0) / 44, abs=1e-6)


def test_splits_do_not_share_seeds():
    tune = {s.seed for s in es.TUNE + es.MOVING_TUNE}
    held = {s.seed for s in es.HELDOUT + es.MOVING_HELDOUT}
    assert not tune & held
    assert {s.move for s in es.HELDOUT} == set(es.MOVES)
    assert {s.kind.split("_")[0] for s in es.HELDOUT} == set(es.SCALES)
    assert {s.kind.split("_")[2] for s in es.HELDOUT} == set(es.TEXTURES)


@pytest.mark.blender
@pytest.mark.slow
def test_a_tiny_render_has_consistent_cameras_depth_and_files(tmp_path):
    pytest.importorskip("bpy")
    from backend.multiview.camera_files import read_cameras
    from backend.multiview.cameras import Camera
    from backend.multiview.reproject import forward_backward_error

    spec = es.SceneSpec("room_mixed_textured", "orbit", 7, moving=True, n_frames=3, size=(64, 48), samples=2)
    folder = es.render_scene(spec, root=tmp_path)
    truth = es.load_truth(folder)
    assert truth["depth"].shape == (3, 48, 64) and truth["valid"].mean() > 0.8
    assert all(m.sum() > 5 for m in truth["moving"])  # the sphere is seen in every frame
    sets = {v: read_cameras(folder / rel) for v, (rel, _) in es.CAMERA_VARIANTS.items()}
    assert sets["json"].depth_range is None and sets["colmap"].depth_range is None
    lo, hi = truth["depth"][truth["valid"]].min(), truth["depth"][truth["valid"]].max()
    for v in ("json_range", "colmap_points"):
        near, far = sets[v].depth_range
        assert 0.5 * lo < near < far < 2 * hi, (v, near, far, lo, hi)
    cams = [sets["json"].cameras[n] for n in truth["frames"]]
    by_name = sets["colmap"].cameras
    for n, cam in zip(truth["frames"], cams):
        assert np.allclose(by_name[f"shot_{n:04d}.png"].R, cam.R, atol=1e-6)
    static = truth["valid"][0] & ~truth["moving"][0]
    err, _, ok = forward_backward_error(np.where(truth["valid"][0], truth["depth"][0], 0), cams[0],
                                        np.where(truth["valid"][1], truth["depth"][1], 0), cams[1])
    assert isinstance(cams[0], Camera) and (ok & static).mean() > 0.5
    assert np.median(err[ok & static]) < 0.5  # exact cameras + exact depth: sub-pixel round trip
