"""flux2-klein renderer end to end on a tiny random-weight FLUX.2 [klein] replica, offline.

The replica (:mod:`flux2_util`) is made of the classes the real
``black-forest-labs/FLUX.2-klein-4B`` uses (Flux2KleinPipeline with
Flux2Transformer2DModel, AutoencoderKLFlux2, Qwen3ForCausalLM, a Qwen2 tokenizer and
FlowMatchEulerDiscreteScheduler), saved as safetensors in the Hugging Face cache layout of
a temp models folder and loaded back by the renderer with ``local_files_only``. Random
weights: these tests check the plumbing and the contracts, not the look.
"""
import io
import json
import shutil
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from backend import contract, events  # noqa: E402
from backend.errors import JobCancelled, JobError  # noqa: E402
from backend.jobs.restyle import output_path, preview_path, read_rgba_exr, restyle  # noqa: E402
from backend.renderers import get_renderer, register_renderer  # noqa: E402
from backend.renderers.controlnet import ModelNotAvailable  # noqa: E402
from backend.renderers.embedded import EmbeddedRenderer  # noqa: E402
from backend.renderers.flux2_klein import (DEFAULT_MODEL, Flux2KleinRenderer, ModelMismatch,  # noqa: E402
                                           img2img_schedule, pad_to_multiple)
from cli_util import cli_env, events as cli_events, run_cli  # noqa: E402
from flux2_util import build_tiny_flux2_klein  # noqa: E402
from gbuffer_util import sphere_frames, write_sequence  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("flux2_models")
    build_tiny_flux2_klein(root)
    return root


def _renderer(models, **kw):
    opts = dict(models_dir=str(models), device="cpu", seed=7, steps=2)
    opts.update(kw)
    return get_renderer("flux2-klein", **opts)


def test_padding_and_schedule_helpers():
    img = np.random.default_rng(0).random((50, 70, 3)).astype(np.float32)
    p, (h, w) = pad_to_multiple(img, 16)
    assert p.shape == (64, 80, 3) and (h, w) == (50, 70)
    assert np.array_equal(p[:50, :70], img)                       # crop back is exact
    assert np.array_equal(p[50:, :70], img[48:34:-1, :])          # reflected, not resized
    tiny, _ = pad_to_multiple(img[:5, :5], 16)                    # smaller than the pad: edge
    assert tiny.shape == (16, 16, 3) and np.array_equal(tiny[15, 15], img[4, 4])
    assert pad_to_multiple(img[:48, :64], 16)[0].shape == (48, 64, 3)
    # diffusers' img2img convention: the last int(N - N*strength) ... entries of linspace(1, 1/N, N)
    tail, t0 = img2img_schedule(4, 0.5)
    np.testing.assert_allclose(tail, [0.5, 0.25])
    assert t0 == 2
    assert len(img2img_schedule(4, 0.0)[0]) == 0 and len(img2img_schedule(4, 1.0)[0]) == 4
    assert len(img2img_schedule(4, 0.1)[0]) == 1                  # any strength > 0 runs a step


def test_bad_options_missing_and_mismatched_models(models, tmp_path):
    for bad in (dict(init="none"), dict(strength=1.5), dict(temporal=1.0), dict(steps=0), dict(dtype="int8")):
        with pytest.raises(ValueError):
            Flux2KleinRenderer(**bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotAvailable, match=r"FLUX\.2-klein-4B.*python -m backend models download flux2-klein.*Preferences > Add-ons > G-Buffer Editor > Models"):
        _renderer(empty).describe("x")
    # another model's files under the FLUX.2 repo's name
    other = tmp_path / "other" / "models--black-forest-labs--FLUX.2-klein-4B" / "snapshots" / "abc"
    other.mkdir(parents=True)
    (other.parents[1] / "refs").mkdir()
    (other.parents[1] / "refs" / "main").write_text("abc")  # the snapshot refs/main names, as a download leaves it
    (other / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(ModelMismatch, match="StableDiffusionPipeline.*not a FLUX.2 \\[klein\\].*Flux2KleinPipeline"):
        _renderer(tmp_path / "other").describe("x")
    # a copy of the replica whose transformer folder holds another model
    snap = next((models / "models--black-forest-labs--FLUX.2-klein-4B" / "snapshots").iterdir())
    mixed = tmp_path / "mixed"
    shutil.copytree(snap, mixed)
    cfg = mixed / "transformer" / "config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "_class_name": "FluxTransformer2DModel"}))
    with pytest.raises(ModelMismatch, match="transformer is a FluxTransformer2DModel.*Flux2Transformer2DModel"):
        _renderer(models, model=str(mixed)).describe("x")
    # a pickle-only component is not loaded (safetensors only)
    nosafe = tmp_path / "nosafe"
    shutil.copytree(snap, nosafe)
    for f in (nosafe / "vae").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ModelNotAvailable, match="safetensors only"):
        _renderer(models, model=str(nosafe)).describe("x")


def test_render_shapes_seed_strength_and_padding(models):
    frames = sphere_frames(50, 70, 2, x0=-0.4, step=0.4)      # 50x70: not a multiple of 16
    r = _renderer(models)
    a = r.render(frames[0], "a foggy harbour", frame_index=0)
    assert a.shape == (50, 70, 3) and a.dtype == np.float32
    assert np.all(np.isfinite(a)) and a.min() >= 0 and a.max() <= 1
    assert r.last_info["processing_size"] == [80, 64] and r.last_info["steps_run"] == 1
    assert 0.5 < r.last_info["sigma_start"] < 1.0              # the shifted sigma of linspace(1, .5)[1]
    b = _renderer(models).render(frames[0], "a foggy harbour", frame_index=0)
    assert np.array_equal(a, b)                                # same seed -> identical
    c = _renderer(models, seed=8).render(frames[0], "a foggy harbour", frame_index=0)
    assert not np.array_equal(a, c)                            # another seed -> another image
    # strength 0: no step, the init itself (the embedded relight, clipped to [0, 1])
    z = _renderer(models, strength=0.0).render(frames[0], "a foggy harbour")
    init = EmbeddedRenderer().render(frames[0], "a foggy harbour", looks=())
    assert np.array_equal(z, np.clip(init, 0, 1))
    src = _renderer(models, strength=0.0, init="source").render(frames[0], "x")
    assert np.array_equal(src, np.clip(frames[0].combined[..., :3], 0, 1))
    # temporal chain: frame 2 starts from the warped frame-1 result
    r.render(frames[1], "a foggy harbour", frame_index=1, prev=a)
    assert r.last_info["flicker"] >= 0 and 0 < r.last_info["temporal_pixels"] <= 1
    # the editing path: the init also as a reference image
    f64 = sphere_frames(64, 80, 1)[0]
    ref = _renderer(models, reference=True).render(f64, "a foggy harbour")
    plain = _renderer(models).render(f64, "a foggy harbour")
    assert ref.shape == (64, 80, 3) and not np.array_equal(ref, plain)
    with pytest.raises(ValueError, match="64 px"):
        _renderer(models, reference=True).render(sphere_frames(32, 48, 1)[0], "x")


def test_prompt_empty_and_too_long(models):
    got = []
    r = _renderer(models)
    with events.reporting(got.append):
        long_prompt = "a quiet harbour in dense fog " * 40               # ~1100 byte tokens
        text = r.text_for(long_prompt)
        empty = r.text_for("")
    warns = [e["message"] for e in got if e["event"] == "warning"]
    assert any("over the text encoder's 512" in m for m in warns), warns
    assert any(m.startswith("empty prompt") for m in warns), warns
    assert r._count(text) <= 512 and text.endswith(r.suffix) and text.startswith("a quiet harbour")
    assert empty.startswith("A photorealistic photograph") and empty.endswith(r.suffix)
    assert r.text_for("snow") == "snow. " + r.suffix
    assert _renderer(models, suffix="").text_for("snow") == "snow"
    img = r.render(sphere_frames(32, 32, 1)[0], long_prompt)          # runs with the cut text
    assert img.shape == (32, 32, 3) and np.all(np.isfinite(img))


def test_cli_end_to_end_contract_outputs(models, tmp_path):
    gb = write_sequence(tmp_path / "gb", sphere_frames(40, 56, 4, x0=-0.5, step=0.25, fps=24))
    out = tmp_path / "out"
    r = run_cli("restyle", gb, "--prompt", "a photo of a harbour", "--out", out, "--renderer", "flux2-klein",
                "--device", "cpu", "--steps", "2", "--seed", "3",
                env=cli_env(GBUFFER_EDITOR_MODEL_DIR=str(models)))
    assert r.returncode == 0, r.stderr[-2000:]
    for n in range(1, 5):
        img = read_rgba_exr(output_path(out, n))
        assert img.shape == (40, 56, 3) and np.all(np.isfinite(img)) and img.min() >= 0 and img.max() <= 1
        assert preview_path(out, n).stat().st_size > 0
    assert (out / "preview.mp4").stat().st_size > 0
    man = contract.read_manifest(out)
    assert man["renderer"]["name"] == "flux2-klein"
    assert man["renderer"]["settings"]["steps"] == 2 and man["renderer"]["settings"]["seed"] == 3
    per = {e["frame"]: e for e in man["frames"]}
    assert "flicker" in per[2] and "flicker" not in per[1] and per[1]["processing_size"] == [64, 48]


def test_cli_refuses_a_missing_model_offline(tmp_path):
    gb = write_sequence(tmp_path / "gb", sphere_frames(32, 32, 2))
    empty = tmp_path / "models"
    empty.mkdir()
    out = tmp_path / "out"
    r = run_cli("restyle", gb, "--prompt", "x", "--out", out, "--renderer", "flux2-klein", "--device", "cpu",
                env=cli_env(GBUFFER_EDITOR_MODEL_DIR=str(empty), HF_HUB_OFFLINE="1"))
    assert r.returncode == 1
    err = [e for e in cli_events(r.stdout) if e["event"] == "error"][0]["message"]
    assert DEFAULT_MODEL in err and "Preferences > Add-ons > G-Buffer Editor > Models" in err
    assert not list(out.glob("restyle_*.exr")) if out.exists() else True


def test_resume_after_cancel_is_byte_identical(models, tmp_path):
    gb = write_sequence(tmp_path / "gb", sphere_frames(32, 48, 5, x0=-0.5, step=0.2))
    opts = dict(models_dir=str(models), device="cpu", steps=2, temporal=0.0)
    full = tmp_path / "full"
    restyle(gb, full, "a harbour", renderer="flux2-klein", renderer_options=opts, stream=io.StringIO(), mp4=False)
    out = tmp_path / "out"
    cancel = threading.Event()

    def on_event(e):
        if e.get("event") == "progress" and e.get("done", 0) >= 2:
            cancel.set()

    with pytest.raises(JobCancelled):
        restyle(gb, out, "a harbour", renderer="flux2-klein", renderer_options=opts, progress=on_event,
                cancel=cancel, mp4=False)
    kept = {p.name: p.read_bytes() for p in out.glob("restyle_*.exr")}
    assert 2 <= len(kept) < 5
    res = restyle(gb, out, "a harbour", renderer="flux2-klein", renderer_options=opts, stream=io.StringIO(),
                  mp4=False)
    assert len(res.skipped) == len(kept) and len(res.written) == 5 - len(kept)
    for name, data in kept.items():
        assert (out / name).read_bytes() == data                  # complete frames untouched
    for n in range(1, 6):                                          # and equal to an uninterrupted run
        assert np.array_equal(read_rgba_exr(output_path(out, n)), read_rgba_exr(output_path(full, n)))


class _OOMRenderer(Flux2KleinRenderer):
    """The real renderer whose transformer runs out of CUDA memory from the 3rd frame on
    (a CPU-only machine cannot run out of CUDA memory for real: the error is raised by a
    forward hook on the real transformer, as torch raises it)."""

    def _load(self):
        first = self._pipe is None
        super()._load()
        if first:
            calls = {"n": 0}

            def hook(module, args):
                calls["n"] += 1
                if calls["n"] > 2:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            self._pipe.transformer.register_forward_pre_hook(hook)


def test_cuda_out_of_memory_is_one_line_and_keeps_written_frames(models, tmp_path):
    register_renderer("flux2-klein-oom-test", _OOMRenderer)
    gb = write_sequence(tmp_path / "gb", sphere_frames(32, 32, 4))
    out = tmp_path / "out"
    opts = dict(models_dir=str(models), device="cpu", steps=2, strength=0.5)  # 1 step: 1 forward a frame
    with pytest.raises(JobError) as ei:
        restyle(gb, out, "x", renderer="flux2-klein-oom-test", renderer_options=opts, stream=io.StringIO(),
                mp4=False)
    msg = str(ei.value)
    assert "\n" not in msg and "out of memory" in msg and "cpu_offload=true" in msg and "frame 3" in msg
    assert sorted(p.name for p in out.glob("restyle_*.exr")) == ["restyle_0001.exr", "restyle_0002.exr"]


def test_img2img_start_latent_and_schedule_are_the_documented_ones(models):
    """The transformer's first input is the packed ``(1 - s0) * x0 + s0 * noise`` of the
    VAE-encoded padded init, and the pipeline ran the tail of its own shifted schedule."""
    import math

    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    from backend.colour import linear_to_srgb

    f = sphere_frames(40, 56, 1)[0]                             # padded to 48x64: 3x4 latent tokens
    r = _renderer(models, steps=4, strength=0.5, init="source", seed=11)
    seen = []
    r._load()
    handle = r._pipe.transformer.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs["hidden_states"].detach().clone()), with_kwargs=True)
    try:
        r.render(f, "a harbour")
    finally:
        handle.remove()
    assert len(seen) == 2                      # strength 0.5 of 4 steps: 2 steps
    mu = compute_empirical_mu(image_seq_len=3 * 4, num_steps=4)
    shifted = [math.exp(mu) / (math.exp(mu) + (1 / t - 1)) for t in (0.5, 0.25)]  # exponential time shift
    np.testing.assert_allclose(r._pipe.scheduler.sigmas.numpy(), shifted + [0.0], rtol=1e-5)
    s0 = shifted[0]
    assert r.last_info["sigma_start"] == pytest.approx(s0, abs=1e-6)
    srgb, _ = pad_to_multiple(np.clip(linear_to_srgb(np.clip(f.combined[..., :3], 0, 1)), 0, 1), 16)
    x = torch.from_numpy(np.ascontiguousarray(srgb)).permute(2, 0, 1)[None] * 2 - 1
    with torch.no_grad():
        x0 = r._pipe._encode_vae_image(x, generator=None)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(11))
    start = (1 - s0) * x0 + s0 * noise                          # (1, C, 3, 4)
    packed = start.reshape(1, start.shape[1], -1).permute(0, 2, 1)
    torch.testing.assert_close(seen[0], packed, rtol=1e-5, atol=1e-5)


def test_cpu_offload_sends_the_init_to_the_execution_device(models):
    """Issue 26: under ``enable_model_cpu_offload`` the VAE's parameters wait on the CPU and
    its hook runs it on the execution device; the init image must go to that execution
    device (diffusers' ``_execution_device``), not to where the parameters are. The CPU is
    the stand-in for the GPU here: the hooks report ``cpu:0`` as execution device while the
    parameters are on ``cpu``; the render is the same as without offload."""
    from backend.renderers.flux2_klein import init_device

    frame = sphere_frames(64, 80, 1)[0]
    off = _renderer(models, cpu_offload=True)
    a = off.render(frame, "a foggy harbour")
    pipe = off._pipe
    assert hasattr(pipe.vae, "_hf_hook"), "the offload hooks were not installed"
    exe = pipe._execution_device
    assert exe == torch.device("cpu:0") and next(pipe.vae.parameters()).device == torch.device("cpu")
    assert init_device(pipe, off._device) == exe
    b = _renderer(models).render(frame, "a foggy harbour")
    assert np.allclose(a, b, atol=1e-5)
