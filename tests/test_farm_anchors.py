"""Shot-wide depth anchors (issue 29): parallel farm chunks agree with an unchunked run.

Real decompose runs of dolphins.mp4 at 64 px (no mocks). The anchor pass
(``farm anchors`` / :func:`backend.jobs.anchors.compute_anchors`) stores every frame's
aligned depth; chunks and an unchunked decompose given the file align each frame to its
anchor alone, so they are byte-identical, and equal a plain (chained) unchunked run up to
the fit's precision. The four-clip measurement is benchmarks/farm.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.depth_anchors import ANCHOR_FILE, DepthAnchors
from backend.jobs.anchors import compute_anchors
from backend.jobs.decompose import decompose
from backend.jobs.runner import JobError
from cli_util import events, run_cli

RES = 64


def _depth(folder, n):
    f = contract.read_frame(contract.frame_path(folder, n))
    return f.depth.astype(np.float64), contract.surface_mask(f)


def _rel(a, b) -> float:
    (da, ma), (db, mb) = a, b
    m = ma & mb
    return float(np.median(np.abs(da[m] - db[m]) / db[m]))


def _exrs(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).glob("gbuffer_*.exr"))}


def _passes(folder):
    """Every pass of every frame (the headers differ: a chunk's settings hash names its warmup)."""
    out = {}
    for p in sorted(Path(folder).glob("gbuffer_*.exr")):
        f = contract.read_frame(p)
        out[p.name] = [a.tobytes() for a in (f.depth, f.normal, f.albedo, f.metallic, f.roughness, f.confidence)]
    return out


def test_parallel_chunks_with_anchors_equal_an_unchunked_run(footage, tmp_path):
    src = footage("dolphins")
    frames, n = "1-9", 9
    plain = tmp_path / "plain"
    decompose(src, plain, frames=frames, processing_resolution=RES)
    anch = compute_anchors(src, tmp_path / "anch_out", frames=frames, processing_resolution=RES)
    assert anch["frames"] == n and not anch["reused"]
    path = anch["file"]
    # unchunked with the anchors
    one = tmp_path / "one"
    decompose(src, one, frames=frames, processing_resolution=RES, depth_anchors=path)
    # chunks of 3 frames, overlap 0, computed in reverse order
    par = tmp_path / "par"
    for rng in ("7-9", "4-6", "1-3"):
        decompose(src, par, frames=rng, processing_resolution=RES, warmup=0, manifest_part=True, depth_anchors=path)
    assert _passes(par) == _passes(one) and len(_passes(one)) == n  # by construction
    # the same chunks without anchors: each chunk starts its own chain
    drift = tmp_path / "drift"
    for rng in ("1-3", "4-6", "7-9"):
        decompose(src, drift, frames=rng, processing_resolution=RES, warmup=0, manifest_part=True)
    anchored = [_rel(_depth(par, i), _depth(plain, i)) for i in range(1, n + 1)]
    chained = [_rel(_depth(drift, i), _depth(plain, i)) for i in range(4, n + 1)]
    print(f"\nvs plain unchunked: anchored chunks median {100 * np.median(anchored):.4f} % (max "
          f"{100 * max(anchored):.4f} %), chunks without anchors median {100 * np.median(chained):.3f} %")
    assert max(anchored) < 0.001  # the anchor is the plain run's own aligned depth
    assert np.median(chained) > 10 * max(max(anchored), 1e-5)


def test_anchors_are_deterministic_reused_and_refused_when_they_do_not_fit(footage, tmp_path):
    src = footage("dolphins")
    a = compute_anchors(src, tmp_path / "a", frames="1-4", processing_resolution=RES)
    b = compute_anchors(src, tmp_path / "b", frames="1-4", processing_resolution=RES)
    assert a["digest"] == b["digest"] and (tmp_path / "a" / ANCHOR_FILE).is_file()
    again = compute_anchors(src, tmp_path / "a", frames="1-4", processing_resolution=RES)
    assert again["reused"] and again["digest"] == a["digest"]
    anchors = DepthAnchors.load(a["file"])
    assert list(anchors.numbers) == [1, 2, 3, 4] and anchors.depth.shape[1:] == anchors.mask.shape[1:]
    assert max(anchors.depth.shape[1:]) <= 96 and anchors.mask.any()
    near, far = contract.RELATIVE_NEAR, contract.RELATIVE_FAR
    assert near <= anchors.depth.min() and anchors.depth.max() <= far
    with pytest.raises(JobError, match="computed from another processing size"):
        decompose(src, tmp_path / "o1", frames="1-4", processing_resolution=96, depth_anchors=a["file"])
    with pytest.raises(JobError, match="have no frame 5 .they cover 1-4"):
        decompose(src, tmp_path / "o2", frames="3-6", processing_resolution=RES, depth_anchors=a["file"])
    with pytest.raises(JobError, match="do not exist"):
        decompose(src, tmp_path / "o3", frames="1-2", processing_resolution=RES,
                  depth_anchors=tmp_path / "none.npz")
    assert not list((tmp_path / "o1").glob("*.exr"))
    # the digest is in the settings hash: frames of other anchors are not resumed as ours
    r1 = decompose(src, tmp_path / "o4", frames="1-2", processing_resolution=RES, depth_anchors=a["file"])
    r2 = decompose(src, tmp_path / "o5", frames="1-2", processing_resolution=RES)
    assert r1.settings_hash != r2.settings_hash


def test_farm_local_computes_anchors_before_the_chunks(footage, tmp_path):
    src = footage("dolphins")
    out = tmp_path / "o"
    base = ["farm", "local", "decompose", src, "--frames", "1-6", "--chunk", "2", "--overlap", "0",
            "--processing-resolution", RES]
    r = run_cli(*base, "--out", out)
    assert r.returncode == 0, r.stderr
    evs = events(r.stdout)
    assert [e["event"] for e in evs[:2]] == ["start", "anchors"] and evs[1]["frames"] == 6
    part = json.loads((out / contract.PARTS_DIR / "3-4.json").read_text())
    assert part["settings"]["depth_anchors"] == evs[1]["digest"]
    # the same frames from an unchunked decompose with the farm's anchors file
    one = tmp_path / "one"
    r = run_cli("decompose", src, "--out", one, "--frames", "1-6", "--processing-resolution", RES,
                "--depth-anchors", out / ANCHOR_FILE)
    assert r.returncode == 0, r.stderr
    assert _passes(one) == _passes(out)
    r = run_cli(*base, "--out", out)  # a resume reuses the anchors
    assert r.returncode == 0 and events(r.stdout)[1]["reused"] is True
    old = tmp_path / "old"
    r = run_cli(*base, "--out", old, "--no-depth-anchors")
    assert r.returncode == 0, r.stderr
    assert not (old / ANCHOR_FILE).exists() and "anchors" not in [e["event"] for e in events(r.stdout)]
    assert _passes(old) != _passes(out)


def test_farm_anchors_cli_one_json_line(footage, tmp_path):
    r = run_cli("farm", "anchors", footage("dolphins"), "--out", tmp_path / "o", "--frames", "2-3",
                "--processing-resolution", RES, "--stabilize")  # options that do not matter are accepted
    assert r.returncode == 0, r.stderr
    (ev,) = events(r.stdout)
    assert ev["event"] == "anchors" and ev["frames"] == 2 and Path(ev["file"]).name == ANCHOR_FILE
    r = run_cli("farm", "anchors", footage("dolphins"), "--out", tmp_path / "o", "--frames", "70-80")
    assert r.returncode == 2 and "starts past the end" in r.stderr


def test_the_anchor_pass_refuses_a_windowed_estimator(footage, tmp_path):
    """Its depth comes from windows over the shot, not frame by frame: one clear line
    (the farm job can run with --no-depth-anchors or --overlap chain)."""
    from backend.estimators.base import Estimator, EstimatorOutput

    class Windowed(Estimator):
        name = "windowed-test"
        windowed = True

        def predict(self, rgb):  # never reached
            return EstimatorOutput(depth=np.ones(rgb.shape[:2], np.float32), depth_kind="relative")

    with pytest.raises(ValueError, match="computes depth in windows over the shot.*--no-depth-anchors"):
        compute_anchors(footage("dolphins"), tmp_path / "o", frames="1-2", estimator=Windowed())
    assert not (tmp_path / "o" / ANCHOR_FILE).exists()
