"""The plane sweep's search range comes from evidence, never a guess (issue 24, item 1):
the solve's points (robust, far outliers and points behind cameras dropped), sparse
features triangulated with the known cameras, else an unverified wide sweep with low
confidence; never confident depth at the first or last plane; absurd ranges and points
are refused or ignored with a one-line warning naming the file."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backend import contract, decompose, events
from backend.multiview import depth_range as dr
from backend.multiview.camera_files import read_cameras, save_cameras_json, save_colmap_text
from backend.multiview.cameras import CameraError
from backend.multiview.planesweep import plane_sweep
from backend.multiview.reproject import world_points

from multiview_util import dolly_cameras, render


@pytest.fixture(scope="module")
def scene():
    cams = dolly_cameras(n=5, dolly=0.12)
    imgs, depths = zip(*(render(c) for c in cams))
    return cams, list(imgs), list(depths)


def _points(cams, depths, n=300, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for c, d in zip(cams, depths):
        ok = np.isfinite(d)
        dd = np.where(ok, d, 0).astype(np.float32)
        X = world_points(dd, c)[ok]
        out.append(X[rng.choice(len(X), n // len(cams), replace=False)])
    return np.concatenate(out)


def test_robust_range_drops_far_outliers_and_points_behind():
    rng = np.random.default_rng(1)
    z = np.concatenate([rng.uniform(3, 12, 500), [4e4, 9e4, 1e5, -5.0, -1.0, np.inf, np.nan]])
    near, far = dr.robust_range(z)
    assert 3.0 <= near < 3.5 and 11.0 < far <= 12.0
    assert dr.robust_range(np.array([5.0] * 5)) is None  # too few: no range
    wall = dr.robust_range(np.full(50, 7.0))
    assert wall[0] == pytest.approx(7.0) and wall[1] > wall[0]


def test_points_give_each_frame_its_range_and_outliers_do_not_widen_it(scene):
    cams, _, depths = scene
    X = _points(cams, depths)
    X = np.concatenate([X, cams[0].center + 5e4 * np.array([[0.0, 0.0, 1.0]] * 4)])  # near infinity
    finder = dr.RangeFinder(dr.check_points(X, cams), None, cams)
    r = finder.from_file(cams[2])
    finite = np.concatenate([d[np.isfinite(d)] for d in depths])
    assert r.source == "points" and r.verified and r.evidence > 100
    assert np.percentile(finite, 1) * 0.9 <= r.near <= np.percentile(finite, 10)
    assert np.percentile(finite, 90) <= r.far <= 1.2 * finite.max()


def test_points_behind_every_camera_or_absurd_are_ignored_with_a_warning(scene):
    cams, _, depths = scene
    X = _points(cams, depths)
    behind = 2 * cams[2].center - X  # mirrored through a camera centre: behind all of them
    got = []
    with events.reporting(got.append):
        assert dr.check_points(behind, cams, file="sparse/points3D.txt") is None
        # a minority of points near a camera centre is an outlier, dropped ...
        few = np.concatenate([X, cams[0].center + np.array([[0, 0, 1e-6]] * 20)])
        assert dr.check_points(few, cams) is not None
        # ... but points spread from 1 mm to 1 km are no scene
        absurd = cams[2].center + np.logspace(-3, 3, 200)[:, None] * np.array([[0.0, 0.0, 1.0]])
        assert dr.check_points(absurd, cams, file="sparse/points3D.txt") is None
        assert dr.check_file_range((0.01, 500.0), file="cams.json") is None
        assert dr.check_file_range((1.0, 50.0), file="cams.json") == (1.0, 50.0)
    msgs = [e["message"] for e in got if e["event"] == "warning"]
    assert len(msgs) == 3 and all("\n" not in m for m in msgs)
    assert "sparse/points3D.txt" in msgs[0] and "behind every camera" in msgs[0]
    assert "absurd" in msgs[1] and "cams.json" in msgs[2] and "far / near" in msgs[2]


def test_features_triangulated_with_the_cameras_bracket_the_scene(scene):
    cams, imgs, depths = scene
    feats = [dr.detect_features(g) for g in imgs]
    r = dr.RangeFinder.from_features(feats[2], cams[2], [(f, c) for i, (f, c) in enumerate(zip(feats, cams))
                                                         if i != 2])
    d = depths[2][np.isfinite(depths[2])]
    print(f"\nfeature range {r.near:.2f}..{r.far:.2f} from {r.evidence} points; truth "
          f"{d.min():.2f}..{d.max():.2f}")
    assert r.source == "features" and r.evidence >= dr.MIN_POINTS
    assert r.near <= np.percentile(d, 2) and r.far >= np.percentile(d, 98)
    assert r.far / r.near < 20  # not a blind wide range


def test_never_confident_at_the_first_or_last_plane(scene):
    """A range that misses the whole scene (everything nearer than its near plane) must
    not give confident depth at the near plane."""
    cams, imgs, depths = scene
    wrong = plane_sweep(imgs[2], cams[2], [imgs[1], imgs[3]], [cams[1], cams[3]], 20.0, 80.0)
    right = plane_sweep(imgs[2], cams[2], [imgs[1], imgs[3]], [cams[1], cams[3]], 2.0, 20.0)
    assert (wrong.confidence > 0.5).mean() < 0.01
    assert (right.confidence > 0.5).mean() > 0.5


def _sequence(tmp_path, cams, imgs):
    import cv2

    seq = tmp_path / "shot"
    seq.mkdir(exist_ok=True)
    for i, g in enumerate(imgs, 1):
        cv2.imwrite(str(seq / f"shot_{i:04d}.png"), (np.clip(g, 0, 1) * 255 + 0.5).astype(np.uint8))
    return seq


def _absrel(out, n, depths):
    fr = contract.read_frame(contract.frame_path(out, n))
    m = fr.confidence > 0.5
    return float((np.abs(fr.depth - depths[n - 1]) / depths[n - 1])[m].mean()), float(m.mean()), fr


def test_colmap_without_points_measures_from_features_and_says_so(scene, tmp_path):
    cams, imgs, depths = scene
    seq = _sequence(tmp_path, cams, imgs)
    save_colmap_text(tmp_path / "sparse", {f"shot_{i:04d}.png": c for i, c in enumerate(cams, 1)})
    assert read_cameras(tmp_path / "sparse").points is None
    decompose(seq, tmp_path / "gb", estimator="embedded", cameras=tmp_path / "sparse", frames="2-4",
              multiview={"processing_width": 240})
    absrel, cov, fr = _absrel(tmp_path / "gb", 3, depths)
    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    src = {f["multiview"]["depth_range"]["source"] for f in man["frames"]}
    assert src == {"features"} and absrel < 0.03 and cov > 0.6, (absrel, cov)


def test_absurd_points_and_ranges_in_files_warn_naming_the_file(scene, tmp_path):
    cams, imgs, depths = scene
    seq = _sequence(tmp_path, cams, imgs)
    sparse = tmp_path / "sparse"
    save_colmap_text(sparse, {f"shot_{i:04d}.png": c for i, c in enumerate(cams, 1)})
    X = 2 * cams[2].center - _points(cams, depths)  # behind every camera
    (sparse / "points3D.txt").write_text("".join(f"{i} {x} {y} {z} 1 1 1 0.5 1 0\n"
                                                 for i, (x, y, z) in enumerate(X, 1)))
    got = []
    decompose(seq, tmp_path / "gb", estimator="embedded", cameras=sparse, frames="3-3", progress=got.append,
              multiview={"processing_width": 160})
    warns = [e["message"] for e in got if e["event"] == "warning"]
    assert any("points3D.txt" in w and "behind every camera" in w for w in warns), warns
    assert _absrel(tmp_path / "gb", 3, depths)[0] < 0.03  # features took over
    js = tmp_path / "absurd.json"
    save_cameras_json(js, dict(enumerate(cams, 1)), units="metres", depth_range=(1e-3, 1e3))
    got = []
    decompose(seq, tmp_path / "gb2", estimator="embedded", cameras=js, frames="3-3", progress=got.append,
              multiview={"processing_width": 160})
    assert any("absurd.json" in e["message"] and "depth_range" in e["message"] for e in got
               if e["event"] == "warning")
    doc = json.loads(js.read_text())
    doc["depth_range"] = [0.0, 10.0]
    js.write_text(json.dumps(doc))
    with pytest.raises(CameraError, match="absurd.json: depth_range needs 0 < near < far"):
        decompose(seq, tmp_path / "gb3", estimator="embedded", cameras=js, frames="3-3")


def test_no_evidence_gives_a_wide_sweep_without_confident_pixels(scene, tmp_path):
    """Frames without any texture: no points, no features. The wide sweep's result is
    never confident; the frame says why."""
    cams, imgs, _ = scene
    flat = [np.full_like(g, 0.5) for g in imgs]
    seq = _sequence(tmp_path, cams, flat)
    got = []
    decompose(seq, tmp_path / "gb", estimator="embedded", cameras=_write(tmp_path, cams), frames="3-3",
              progress=got.append, multiview={"processing_width": 160})
    assert any("too few image features" in e["message"] for e in got if e["event"] == "warning")
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 3))
    assert fr.meta["depth_source"] == "single-image" or (fr.confidence > 0.5).mean() == 0


def _write(tmp_path, cams):
    p = tmp_path / "cams.json"
    save_cameras_json(p, dict(enumerate(cams, 1)), units="metres")
    return p
