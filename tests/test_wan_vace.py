"""wan-vace renderer end to end on a tiny random-weight Wan2.1 VACE replica, offline.

The pipeline is built from the real classes (tests/wan_vace_util.py), saved as
safetensors into a Hugging Face cache layout under a temp models folder and loaded back
through the renderer with ``local_files_only``. Windows of 5 frames overlapping by 2 over
11 frames: spans (0-4), (3-7), (6-10). Only replicas run here: no real weights, no GPU.
"""
import io
import json
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

import wan_vace_util as wu  # noqa: E402
from backend import catalog, contract, events  # noqa: E402
from backend.jobs.restyle import MP4_NAME, output_path, preview_path, read_rgba_exr, restyle  # noqa: E402
from backend.jobs.runner import JobCancelled  # noqa: E402
from backend.jobs.windows import WindowBlender, window_spans, window_weights  # noqa: E402
from backend.renderers import get_renderer, renderer_class  # noqa: E402
from backend.renderers.wan_vace import (DEFAULT_MODEL, ModelMismatch, ModelNotAvailable,  # noqa: E402
                                        WanVaceRenderer, out_of_memory_error, temporal_length)
from cli_util import cli_env, events as read_events, run_cli  # noqa: E402
from gbuffer_util import sphere_frames, write_sequence  # noqa: E402

PROMPT = "a fog over the sea at night"
N, H, W = 11, 32, 48
WINDOW, OVERLAP = 5, 2


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_vace")
    pipe = wu.build_pipeline(root / "pipe")
    models = root / "models"
    wu.install_in_cache(models, DEFAULT_MODEL, pipe)
    return models


@pytest.fixture(scope="module")
def gb(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_gb")
    return write_sequence(root / "gb", sphere_frames(H, W, N, x0=-0.6, step=0.12, fps=24))


def _opts(cache, **kw):
    o = dict(cache_dir=str(cache), device="cpu", steps=2, seed=3, local_files_only=True, window=WINDOW,
             overlap=OVERLAP)
    o.update(kw)
    return o


@pytest.fixture(scope="module")
def cli_run(cache, gb, tmp_path_factory):
    """The full CLI path, once: ``python -m backend restyle ... --renderer wan-vace``."""
    out = tmp_path_factory.mktemp("wan_cli") / "out"
    r = run_cli("restyle", gb, "--prompt", PROMPT, "--out", out, "--renderer", "wan-vace", "--device", "cpu",
                "--steps", "2", "--seed", "3", "--option", f"window={WINDOW}", "--option", f"overlap={OVERLAP}",
                env=cli_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r


def test_window_spans_and_weights():
    assert window_spans(11, 5, 2) == [(0, 5), (3, 8), (6, 11)]
    assert window_spans(4, 5, 2) == [(0, 4)]
    assert window_spans(9, 5, 2) == [(0, 5), (3, 8), (4, 9)]    # last moved back to end at the clip's end
    sp = window_spans(11, 5, 2)
    np.testing.assert_allclose(window_weights(sp, 0, 2), [1, 1, 1, 2 / 3, 1 / 3])
    np.testing.assert_allclose(window_weights(sp, 1, 2), [1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    np.testing.assert_allclose(window_weights(sp, 2, 2), [1 / 3, 2 / 3, 1, 1, 1])
    for bad in ((0, 5, 2), (5, 0, 0), (5, 5, 5), (5, 5, -1)):
        with pytest.raises(ValueError):
            window_spans(*bad)
    # every frame of any length is covered, and blends are convex combinations
    for n in range(1, 30):
        spans = window_spans(n, 7, 3)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(b[0] < a[1] for a, b in zip(spans, spans[1:]))  # neighbours overlap
    # the blender renders a window only when asked for one of its frames, and drops old ones
    calls = []
    wb = WindowBlender(list(range(1, 12)), 5, 2, lambda ns: calls.append(ns) or [np.full((1, 1, 3), ns[0], np.float32)
                                                                                   for _ in ns])
    assert wb.frame(1)[0, 0, 0] == 1 and calls == [[1, 2, 3, 4, 5]]
    assert wb.frame(5)[0, 0, 0] == pytest.approx(1 / 3 * 1 + 2 / 3 * 4)
    assert wb.frame(9)[0, 0, 0] == 7 and sorted(wb.rendered) == [2]  # window 1 (frames 4-8) dropped


def test_cli_writes_contract_outputs(cli_run, gb):
    import OpenEXR

    out, r = cli_run
    ev = read_events(r.stdout)
    assert ev[-1]["event"] == "done" and ev[-1]["written"] == N
    assert not [e for e in ev if e["event"] == "warning"]  # no 'names no look' for a free-text renderer
    man = contract.read_manifest(out)
    assert man["renderer"]["name"] == "wan-vace"
    st = man["renderer"]["settings"]
    assert (st["window"], st["overlap"], st["steps"], st["seed"]) == (WINDOW, OVERLAP, 2, 3)
    assert man["look_params"]["device"] == "cpu"
    frames = {e["frame"]: e for e in man["frames"]}
    assert frames[4]["windows"] == [[1, 5], [4, 8]] and frames[6]["windows"] == [[4, 8]]
    assert frames[1]["processing_size"] == [W, H]
    for n in range(1, N + 1):
        with OpenEXR.File(str(output_path(out, n)), separate_channels=True) as f:
            ch = f.channels()
            assert set(ch) == {"R", "G", "B", "A"}
            assert all(c.pixels.dtype == np.float16 for c in ch.values())
            assert ch["R"].pixels.shape == (H, W)
        rgb = read_rgba_exr(output_path(out, n))
        assert rgb.shape == (H, W, 3) and np.all(np.isfinite(rgb)) and 0 <= rgb.min() and rgb.max() <= 1
        assert rgb.std() > 0
        assert preview_path(out, n).stat().st_size > 0
    assert (out / MP4_NAME).stat().st_size > 0 and man["preview_mp4"] == MP4_NAME


def test_overlap_frames_are_the_documented_blend(cli_run, cache, gb):
    """A frame in two windows is (t+1)/(O+1) of the later window's output plus the rest of
    the earlier one's; re-rendering each window here (same seed) reproduces the job."""
    out, _ = cli_run
    r = WanVaceRenderer(**_opts(cache))
    frames = [contract.read_frame(contract.frame_path(gb, n)) for n in range(1, N + 1)]
    spans = window_spans(N, WINDOW, OVERLAP)
    outs = [r.render_window(frames[s:e], PROMPT, frame_indices=list(range(s, e)),
                            times_s=[i / 24 for i in range(s, e)]) for s, e in spans]
    win = {k: dict(zip(range(s, e), outs[k])) for k, (s, e) in enumerate(spans)}
    expected = {
        3: 2 / 3 * win[0][3] + 1 / 3 * win[1][3],   # frame 4: overlap position 0 of windows 0/1
        4: 1 / 3 * win[0][4] + 2 / 3 * win[1][4],   # frame 5
        5: win[1][5],                                # frame 6: window 1 alone
        6: 2 / 3 * win[1][6] + 1 / 3 * win[2][6],   # frame 7
        0: win[0][0],
    }
    for i, exp in expected.items():
        got = read_rgba_exr(output_path(out, i + 1))  # alpha 1: stored = rgb, half float
        np.testing.assert_allclose(got, contract.half_to_float32(contract.to_half(exp)), atol=2e-3)
    # the windows really differ on the overlap, so the blend is not trivially either one
    assert np.abs(win[0][3] - win[1][3]).max() > 1e-3
    assert not np.allclose(read_rgba_exr(output_path(out, 4)), win[0][3], atol=1e-4)


def test_resume_after_cancel_is_byte_identical(cli_run, cache, gb, tmp_path):
    ref_out, _ = cli_run
    out = tmp_path / "out"
    cancel = threading.Event()

    def progress(e):
        if e.get("event") == "progress" and e.get("frame") == 4:
            cancel.set()

    with pytest.raises(JobCancelled):
        restyle(gb, out, PROMPT, renderer="wan-vace", renderer_options=_opts(cache), progress=progress,
                cancel=cancel)
    first = sorted(int(p.stem.split("_")[1]) for p in out.glob("restyle_*.exr"))
    assert first and first == list(range(1, len(first) + 1)) and len(first) < N
    assert first[-1] < 8   # stopped inside window 1 (frames 4-8): it is rendered again on resume
    res = restyle(gb, out, PROMPT, renderer="wan-vace", renderer_options=_opts(cache), progress=io.StringIO())
    assert sorted(res.skipped) == first and sorted(res.written) == list(range(first[-1] + 1, N + 1))
    for n in range(1, N + 1):
        assert output_path(out, n).read_bytes() == output_path(ref_out, n).read_bytes(), n
        assert preview_path(out, n).read_bytes() == preview_path(ref_out, n).read_bytes(), n


def test_frames_range_gives_the_same_frames(cli_run, cache, gb, tmp_path):
    """Windows are laid over the whole clip: rendering --frames 5-6 reads frames outside
    the range for its windows and writes exactly the full run's frames."""
    ref_out, _ = cli_run
    res = restyle(gb, tmp_path / "o", PROMPT, renderer="wan-vace", renderer_options=_opts(cache), frames="5-6",
                  progress=io.StringIO())
    assert sorted(res.written) == [5, 6]
    for n in (5, 6):
        assert output_path(tmp_path / "o", n).read_bytes() == output_path(ref_out, n).read_bytes(), n


def test_offline_refusal_when_model_missing(gb, tmp_path):
    empty = tmp_path / "models"
    empty.mkdir()
    why = catalog.readiness("renderer", "wan-vace", cache_dir=empty)
    assert "Preferences > Add-ons > G-Buffer Editor > Models" in why and DEFAULT_MODEL in why
    r = run_cli("restyle", gb, "--prompt", PROMPT, "--out", tmp_path / "out", "--renderer", "wan-vace",
                env=cli_env(HF_HUB_CACHE=str(empty), HF_HUB_OFFLINE="1"))
    assert r.returncode != 0
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error") or DEFAULT_MODEL in ln]
    assert len(err) == 1 and DEFAULT_MODEL in err[0] and "Preferences > Add-ons > G-Buffer Editor > Models" in err[0]
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("out/restyle_*.exr"))  # refused before any frame


def test_mismatched_model_folder_is_named(tmp_path):
    sd = tmp_path / "sd"
    (sd / "unet").mkdir(parents=True)
    (sd / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(ModelMismatch, match=r"holds a StableDiffusionPipeline .*not the WanVACEPipeline"):
        WanVaceRenderer(model=str(sd), device="cpu").describe("x")
    t2v = tmp_path / "t2v"
    (t2v / "transformer").mkdir(parents=True)
    (t2v / "model_index.json").write_text(json.dumps({"_class_name": "WanVACEPipeline"}))
    (t2v / "transformer" / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel"}))
    with pytest.raises(ModelMismatch, match="transformer is a WanTransformer3DModel, not the WanVACETransformer3DModel"):
        WanVaceRenderer(model=str(t2v), device="cpu").describe("x")
    # the same through the models folder: the Wan repo id holding SD files
    wu.install_in_cache(tmp_path / "models", DEFAULT_MODEL, sd)
    with pytest.raises(ModelMismatch, match="StableDiffusionPipeline"):
        WanVaceRenderer(cache_dir=str(tmp_path / "models"), local_files_only=True, device="cpu").describe("x")


def test_padding_and_temporal_length_crop_back_exactly(cache):
    frames = sphere_frames(30, 44, 3, x0=-0.4, step=0.2)     # neither side a multiple of 16
    r = WanVaceRenderer(**_opts(cache))
    assert r.spatial_multiple() == 16 and temporal_length(3) == 5 and temporal_length(5) == 5
    outs = r.render_window(frames, PROMPT)
    assert len(outs) == 3 and all(o.shape == (30, 44, 3) and o.dtype == np.float32 for o in outs)
    assert all(np.all(np.isfinite(o)) and o.min() >= 0 and o.max() <= 1 for o in outs)
    assert r.last_info == {"processing_size": [48, 32], "window_frames": 5, "flow_shift": 3.0}
    # deterministic for a fixed seed; another seed gives another result
    assert all(np.array_equal(a, b) for a, b in zip(outs, r.render_window(frames, PROMPT)))
    other = WanVaceRenderer(**_opts(cache, seed=4)).render_window(frames, PROMPT)
    assert not np.array_equal(other[0], outs[0])
    # the per-frame entry point is a window of one, same size back
    assert r.render(frames[0], PROMPT).shape == (30, 44, 3)


def test_flow_shift_follows_the_size_as_diffusers_example(cache):
    """Issue 37 item 3: 3.0 at 480p and below, 5.0 above (diffusers' Wan example), on the
    replica: the scheduler the pipeline runs is rebuilt with that shift, which changes
    the frames; an explicit ``flow_shift`` wins."""
    from backend.renderers.wan_vace import flow_shift_for

    assert flow_shift_for(480, 832) == 3.0 and flow_shift_for(720, 1280) == 5.0 and flow_shift_for(496, 496) == 5.0
    big = sphere_frames(496, 496, 1, x0=-0.4, step=0.2)
    r = WanVaceRenderer(**_opts(cache, steps=2))  # one step goes sigma 1 -> 0 whatever the shift
    out5 = r.render_window(big, PROMPT)[0]
    assert r.last_info["flow_shift"] == 5.0 and r._pipe.scheduler.config["flow_shift"] == 5.0
    r.render_window(sphere_frames(32, 48, 1), PROMPT)  # back at a small size: 480p's shift again
    assert r._pipe.scheduler.config["flow_shift"] == 3.0
    r3 = WanVaceRenderer(**_opts(cache, steps=2, flow_shift=3.0))
    assert r3.settings()["flow_shift"] == 3.0 and r.settings()["flow_shift"] == "auto"
    out3 = r3.render_window(big, PROMPT)[0]
    assert r3.last_info["flow_shift"] == 3.0 and not np.array_equal(out3, out5)
    with pytest.raises(ValueError, match="flow_shift"):
        WanVaceRenderer(**_opts(cache, flow_shift="fast"))


def test_prompt_too_long_is_truncated_with_a_warning_and_empty_warns(cache):
    seen = []
    r = WanVaceRenderer(**_opts(cache))
    long_prompt = " ".join(["harbour fog"] * 40)
    with events.reporting(seen.append):
        r.describe(long_prompt)
        r.describe("")
    msgs = [e["message"] for e in seen if e["event"] == "warning"]
    assert any(f"text encoder takes {wu.MAX_TOKENS}: truncated" in m for m in msgs), msgs
    assert any("empty prompt" in m for m in msgs), msgs
    emb = r._prompt_embeds(long_prompt)
    assert emb.shape[1] == wu.MAX_TOKENS and torch.all(emb[0, -1] != 0)  # filled to the limit
    assert r.render_window(sphere_frames(16, 16, 1), long_prompt)[0].shape == (16, 16, 3)


def test_options_capabilities_and_out_of_memory_message(cache):
    assert renderer_class("wan-vace") is WanVaceRenderer and WanVaceRenderer.window > 0
    assert WanVaceRenderer.free_text_prompt and WanVaceRenderer.needs_gpu
    r = get_renderer("wan-vace", window=9, overlap=3)
    assert (r.window, r.window_overlap) == (9, 3)
    for bad in (dict(control="canny"), dict(reference="x"), dict(strength=3.0), dict(steps=0),
                dict(window=4, overlap=4), dict(dtype="int8")):
        with pytest.raises(ValueError):
            WanVaceRenderer(**bad)
    e = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    err = out_of_memory_error(e, "a window of 33 frames at 832x480")
    msg = str(err)
    assert "\n" not in msg and "window=N" in msg and "cpu_offload=true" in msg and "832x480" in msg
    assert out_of_memory_error(RuntimeError("shape mismatch"), "x") is None
    assert "window=N" in str(out_of_memory_error(MemoryError(), "x"))
    with pytest.raises(ModelNotAvailable, match="not in the models folder"):
        WanVaceRenderer(cache_dir=str(cache / "nothing"), local_files_only=True).describe("x")
