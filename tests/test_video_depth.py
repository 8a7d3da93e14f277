"""Video Depth Anything on ONNX Runtime, windowed (issue 15 part 2), on a tiny replica.

The replica (tests/onnx_depth_util.py ``tiny_video_model``) has the published forward's
layout (``frames`` ``[1, T, 3, H, W]`` -> ``depth`` ``[1, T, H, W]``), mixes the window's
frames by attention, and has one content-dependent scale and shift per window (the
ambiguity of a relative-depth network), exported by torch and put into a Hugging Face
cache folder. The clip is 40 real frames (bikes.mp4, a fade to dark near frame 28)
at 168 x 70. Everything after that is the product's path: onnxruntime, the windows
and their alignment, the decompose job and its CLI. The published weights were never run
here (no ONNX export is published, and no network).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from backend import contract
from backend.estimators.onnx_depth import DepthModelError
from backend.estimators.video_depth import (
    VIDEO_MODELS, VideoDepthAnythingEstimator, blend_weights, scale_and_shift,
)

import onnx_depth_util as odu
from cli_util import cli_env, events, run_cli
from footage_util import write_movie

pytest.importorskip("torch")

NAME = "video-depth-anything-small"
SPEC = VIDEO_MODELS[NAME]
FILE = SPEC.files["fp32"]
H, W, N = 70, 168, 40
T, O = 8, 4  # small windows: 4 new frames per window, 2 alignment keyframes, 2 blended frames


@pytest.fixture(scope="module")
def clip(tmp_path_factory, footage):
    """``(cache, clip path, frames)``: the replica in a cache; 40 frames of bikes.mp4 at W x H."""
    from backend.footage import open_footage
    from backend.imaging import resize

    root = tmp_path_factory.mktemp("vda")
    cache = root / "cache"
    odu.install_in_cache(cache, SPEC.repo_id, FILE, odu.export_video_replica(root / "m.onnx", H, W))
    frames = []
    with open_footage(footage("bikes")) as src:
        for sf in src:
            frames.append(resize(sf.rgb, (W, H), "area"))
            if len(frames) == N:
                break
    srgb = [(np.clip(f, 0, 1) ** (1 / 2.2) * 255 + 0.5).astype(np.uint8) for f in frames]
    path = write_movie(root / "bikes40.mp4", srgb, rate=25, options={"crf": "12"})
    return cache, path, frames


def _stream(est, frames):
    """Feed every frame; ``(disparity by number, window by number)``."""
    out, win = {}, {}

    def take(ns):
        for n in ns:
            est.take(n)
            win[n] = est.current_window
            out[n] = est.disparity(frames[n - 1])

    for i, f in enumerate(frames, 1):
        take(est.feed(i, f))
    take(est.finish())
    return out, win


def _steps(out, win):
    """Relative depth step between consecutive frames, ``(inside a window, across a boundary)``."""
    inner, boundary = [], []
    for n in range(1, len(out)):
        a, b = out[n], out[n + 1]
        step = float(np.abs(b - a).mean() / (0.5 * (a.mean() + b.mean())))
        (boundary if win[n] != win[n + 1] else inner).append(step)
    return np.array(inner), np.array(boundary)


def test_scheme_helpers():
    s, t = scale_and_shift(np.array([1.0, 2.0, 3.0]), np.array([5.0, 7.0, 9.0]))
    assert s == pytest.approx(2.0) and t == pytest.approx(3.0)
    assert scale_and_shift(np.ones(4), np.arange(4.0)) == (1.0, 0.0)
    np.testing.assert_allclose(blend_weights(8), np.arange(8) / 7)
    assert SPEC.licence == "Apache-2.0" and SPEC.input_rank == 5 and not SPEC.published


def test_windows_are_aligned_and_memory_is_bounded(clip):
    """The published scheme on 40 frames in windows of 8 (overlap 4): every frame once, in
    order; the depth step across a window boundary is no larger than inside windows; with the
    alignment off the boundaries jump; never more than one window of inputs held."""
    cache, _, frames = clip
    kw = dict(window=T, overlap=O, cache_dir=cache, local_files_only=True, materials="none")
    est = VideoDepthAnythingEstimator(**kw)
    out, win = _stream(est, frames)
    assert sorted(out) == list(range(1, N + 1))
    # 1 + ceil((N - T) / step) windows, + 1 as the clip ends exactly at a window's end (its last
    # overlap - 2 frames are then blended with a padded window, as upstream's padding does;
    # issue 26): upstream's ceil(N / step) = 10 too
    assert est.windows == 1 + -(-(N - T) // (T - O)) + 1 == -(-N // (T - O)) == 10
    assert est.max_inputs_held <= T and est.max_outputs_held <= T + O, est.report()
    inner, boundary = _steps(out, win)
    assert len(boundary) == 9
    assert win[N] == est.windows - 1  # the clip's last frame was blended into the padded last window
    off = VideoDepthAnythingEstimator(align=False, **kw)
    out_off, win_off = _stream(off, frames)
    assert win_off == win and all(f == (1.0, 0.0) for f in off.fits)
    _, boundary_off = _steps(out_off, win_off)
    print(f"aligned: inside max {inner.max():.4f} median {np.median(inner):.4f}; across boundaries max "
          f"{boundary.max():.4f} median {np.median(boundary):.4f}; unaligned across boundaries max "
          f"{boundary_off.max():.4f} median {np.median(boundary_off):.4f}")
    assert boundary.max() <= inner.max()
    assert np.median(boundary) <= 3 * np.median(inner)
    assert np.median(boundary_off) > 10 * np.median(boundary)
    # the first window is the reference: identical with and without the alignment
    for n in range(1, T - O + 1):
        np.testing.assert_array_equal(out[n], out_off[n])


def test_cli_decompose_writes_contract_frames(clip, tmp_path):
    cache, path, _ = clip
    out = tmp_path / "gb"
    proc = run_cli("decompose", path, "--out", out, "--estimator", NAME,
                   "--estimator-option", f"window={T}", "--estimator-option", f"overlap={O}",
                   env=cli_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert events(proc.stdout)[-1]["event"] == "done"
    assert len(list(out.glob("gbuffer_*.exr"))) == N
    man = json.loads((out / "manifest.json").read_text())
    rep = man["depth_windows"]
    assert rep["windows"] == 10 and rep["window"] == T and rep["overlap"] == O and rep["align"]
    assert rep["max_inputs_held"] <= T and rep["max_outputs_held"] <= T + O
    assert man["estimator"]["settings"]["window"] == T
    assert [f["depth_window"] for f in man["frames"]][:10] == [0] * 7 + [1] * 3
    for n in (1, 20, N):
        fr = contract.read_frame(contract.frame_path(out, n), validate=True)
        assert fr.shape == (H, W) and fr.meta["estimator"] == NAME
        assert fr.meta["models"][f"{SPEC.repo_id}/{FILE}"] == odu.COMMIT
        assert fr.depth.std() > 1e-3 * fr.depth.mean()


def test_bad_models_are_one_clear_line(clip, tmp_path):
    cache, path, _ = clip

    def error(cache_dir):
        proc = run_cli("decompose", path, "--out", tmp_path / cache_dir.name, "--estimator", NAME, "--frames", "1-3",
                       env=cli_env(HF_HUB_CACHE=str(cache_dir), HF_HUB_OFFLINE="1"))
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        (err,) = [e for e in events(proc.stdout) if e["event"] == "error"]
        assert "\n" not in err["message"]
        return err["message"]

    # an export with other input/output names (the image model's)
    wrong = tmp_path / "wrong"
    odu.install_in_cache(wrong, SPEC.repo_id, FILE, odu.export_video_replica(
        tmp_path / "w.onnx", H, W, names=("pixel_values", "predicted_depth")))
    msg = error(wrong)
    assert "is not a Video Depth Anything Small export" in msg and "pixel_values [" in msg
    assert "frames [N, T, 3, H, W]" in msg
    # the image model's file (rank-4 input) in its place
    image = tmp_path / "image"
    odu.install_in_cache(image, SPEC.repo_id, FILE, odu.export_replica(tmp_path / "i.onnx", 56, 84,
                                                                       names=("frames", "depth")))
    assert "is not a Video Depth Anything Small export" in error(image)
    # nothing in the models folder: no download is attempted (none is published)
    (tmp_path / "empty").mkdir()
    msg = error(tmp_path / "empty")
    assert "Video Depth Anything Small" in msg and "no ONNX export of it is published" in msg
    assert "docs/models.md" in msg
    with pytest.raises(ValueError, match="overlap"):
        VideoDepthAnythingEstimator(window=8, overlap=8, cache_dir=cache)
    with pytest.raises(DepthModelError):
        VideoDepthAnythingEstimator(cache_dir=tmp_path / "empty", local_files_only=False)


# ---------------------------------------------------------------------------- fixed-shape exports (issue 26)

GT, GH, GW = 4, 56, 98  # the fixed replica's window and size: neither the clip's size nor its aspect


@pytest.fixture(scope="module")
def fixed_cache(tmp_path_factory):
    """A cache holding a replica exported with FIXED shapes (``[1, 4, 3, 56, 98]``), as the
    export in docs/models.md (and upstream's traced graph) answers at one size only."""
    root = tmp_path_factory.mktemp("vda_fixed")
    cache = root / "cache"
    odu.install_in_cache(cache, SPEC.repo_id, FILE,
                         odu.export_video_replica(root / "f.onnx", GH, GW, frames=GT, fixed=True))
    return cache


def test_fixed_shape_export_runs_at_other_sizes_and_alone(clip, fixed_cache):
    """A graph fixed to 4 frames of 56 x 98 streams a 168 x 70 clip (frames fitted into the
    graph, edge-padded, the output cropped back) and runs one frame alone (T = 1, the
    multi-view prior) as a window of copies; the window follows the graph."""
    from backend.estimators.video_depth import fit_box

    _, _, frames = clip
    est = VideoDepthAnythingEstimator(cache_dir=fixed_cache, local_files_only=True, materials="none")
    assert (est.fixed_frames, est.fixed_size) == (GT, (GH, GW))
    assert est.window == GT and est.overlap == 2 and est.settings()["graph_size"] == [GH, GW]
    out, win = _stream(est, frames[:12])
    assert sorted(out) == list(range(1, 13))
    assert all(d.shape == (H, W) and np.isfinite(d).all() and d.std() > 0 for d in out.values())
    alone = est.disparity(frames[0])  # nothing taken: T = 1 path
    assert alone.shape == (H, W) and alone.std() > 0
    # the content box keeps the aspect: 70 x 168 fits 56 x 98 as 42 x 98 (rows 7..49)
    assert fit_box(H, W, GH, GW) == (7, 0, 42, 98)
    assert fit_box(180, 240, GH, GW) == (0, 14, 56, 70)
    with pytest.raises(ValueError, match="windows of 4 frames only"):
        VideoDepthAnythingEstimator(window=8, cache_dir=fixed_cache, local_files_only=True, materials="none")


def test_export_that_baked_its_size_is_one_clear_line(clip, tmp_path):
    """An export that declares dynamic axes but traced its size in (the old recipe with
    upstream's code) fails on another size with one line naming the file and the fix."""
    from backend.estimators.onnx_depth import DepthModelError as Err

    _, _, frames = clip
    cache = tmp_path / "baked"
    odu.install_in_cache(cache, SPEC.repo_id, FILE, odu.export_video_replica(
        tmp_path / "b.onnx", GH, GW, frames=GT, model=odu.baked_video_model(GT, GH, GW)))
    est = VideoDepthAnythingEstimator(cache_dir=cache, local_files_only=True, materials="none")
    assert est.fixed_frames is None  # declared dynamic
    with pytest.raises(Err) as e:
        est.disparity(frames[0])
    assert "\n" not in str(e.value) and "export it again with fixed shapes" in str(e.value)


def test_cli_decompose_cameras_with_fixed_shape_export(fixed_cache, tmp_path):
    """Done-when of issue 26: ``decompose --cameras ... --estimator video-depth-anything-small``
    on a 240 x 180 shot with the replica fixed to 4 x 56 x 98: the prior runs per frame
    (T = 1 path) and the multi-view measurement is fused with it."""
    import cv2
    from backend.multiview.camera_files import save_cameras_json
    from multiview_util import dolly_cameras, render

    cams = dolly_cameras(n=4, dolly=0.1)
    seq = tmp_path / "shot"
    seq.mkdir()
    for i, cam in enumerate(cams, 1):
        grey, _ = render(cam)
        cv2.imwrite(str(seq / f"shot_{i:04d}.png"), (np.dstack([grey] * 3) * 255 + 0.5).astype(np.uint8))
    save_cameras_json(tmp_path / "cams.json", dict(enumerate(cams, 1)), units="metres", depth_range=(3.0, 12.0))
    out = tmp_path / "gb"
    proc = run_cli("decompose", seq, "--out", out, "--cameras", tmp_path / "cams.json", "--estimator", NAME,
                   "--estimator-option", "materials=none",
                   env=cli_env(HF_HUB_CACHE=str(fixed_cache), HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    assert events(proc.stdout)[-1]["event"] == "done"
    man = json.loads((out / "manifest.json").read_text())
    assert man["multiview"]["frames_measured"] >= 3, man["multiview"]
    fr = contract.read_frame(contract.frame_path(out, 2), validate=True)
    assert fr.shape == (180, 240) and fr.meta["prior_estimator"] == NAME
    assert fr.meta["depth_kind"] == "metric"
