"""Marigold adapter: tiny random-weight diffusers pipelines of the real classes, saved as
safetensors, loaded offline through the real adapter (folder and HF-cache paths)."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from backend import colour, contract  # noqa: E402
from backend.estimators.base import get_estimator  # noqa: E402
from backend.estimators.marigold import MarigoldError, MarigoldEstimator, resolve_model  # noqa: E402

IID_PROPS = {
    "target_names": ["material", "albedo"],  # deliberately not the usual order
    "albedo": {"prediction_space": "srgb", "up_to_scale": False},
    "material": {"prediction_space": "stack", "sub_target_names": [None, "metallicity", "roughness"]},
    "roughness": {"prediction_space": "linear", "up_to_scale": False},
    "metallicity": {"prediction_space": "linear", "up_to_scale": False},
}


def _tokenizer(folder: Path):
    """A CLIP tokenizer from a tiny vocab/merges written here (no download)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "a</w>": 2, "b</w>": 3, "a": 4, "b": 5}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                                      model_max_length=8)


def _build(kind: str, root: Path, n_targets: int = 1, scheduler: str = "ddim") -> Path:
    torch.manual_seed(0)
    latent = 4
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=latent * (1 + n_targets), out_channels=latent * n_targets,
        block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2,
    )
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent, block_out_channels=(8, 16),
        layers_per_block=1, norm_num_groups=4,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
    )
    text = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        vocab_size=6, max_position_embeddings=8, projection_dim=16,
        bos_token_id=0, eos_token_id=1, pad_token_id=1))
    tok = _tokenizer(root / f"_tok_{kind}")
    if scheduler == "lcm":
        sched = diffusers.LCMScheduler(num_train_timesteps=1000, beta_schedule="scaled_linear",
                                       prediction_type="v_prediction", timestep_spacing="trailing")
    else:
        sched = diffusers.DDIMScheduler(num_train_timesteps=1000, beta_schedule="scaled_linear",
                                        prediction_type="v_prediction", timestep_spacing="trailing",
                                        clip_sample=False, set_alpha_to_one=False)
    common = dict(unet=unet, vae=vae, scheduler=sched, text_encoder=text, tokenizer=tok,
                  default_denoising_steps=1, default_processing_resolution=32)
    if kind == "depth":
        pipe = diffusers.MarigoldDepthPipeline(prediction_type="depth", scale_invariant=True,
                                               shift_invariant=True, **common)
    elif kind == "normals":
        pipe = diffusers.MarigoldNormalsPipeline(prediction_type="normals", use_full_z_range=True, **common)
    else:
        pipe = diffusers.MarigoldIntrinsicsPipeline(prediction_type="intrinsics",
                                                    target_properties=IID_PROPS, **common)
    out = root / kind
    pipe.save_pretrained(str(out), safe_serialization=True)
    assert list(out.rglob("*.safetensors")) and not list(out.rglob("*.bin"))
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("marigold")
    return {
        "depth": _build("depth", root),
        "normals": _build("normals", root, scheduler="lcm"),
        "intrinsics": _build("intrinsics", root, n_targets=2),
    }


def _frame(h, w, seed=0):
    return np.random.default_rng(seed).random((h, w, 3)).astype(np.float32)


@pytest.mark.parametrize("h,w", [(20, 30), (13, 1), (37, 50)])
def test_adapter_end_to_end_any_size(tiny_models, h, w):
    est = MarigoldEstimator(**{k: str(v) for k, v in tiny_models.items()}, device="cpu",
                            processing_resolution=16, local_files_only=True)
    out = est.predict(_frame(h, w))
    assert out.depth.shape == (h, w) and out.depth.dtype == np.float32 and out.depth.min() > 0
    assert out.depth_kind == "relative"
    assert out.normal.shape == (h, w, 3)
    np.testing.assert_allclose(np.linalg.norm(out.normal, axis=-1), 1.0, atol=1e-5)
    assert out.albedo.shape == (h, w, 3) and 0 <= out.albedo.min() and out.albedo.max() <= 1
    assert out.metallic.shape == (h, w) and out.roughness.shape == (h, w)
    assert set(out.models) == {str(v) for v in tiny_models.values()}
    assert all(r.startswith("local-sha256:") for r in out.models.values())


def test_intrinsics_targets_follow_model_config(tiny_models):
    """Channel order comes from target_properties; albedo (sRGB) is linearised."""
    est = MarigoldEstimator(depth=None, normals=None, intrinsics=str(tiny_models["intrinsics"]),
                            device="cpu", processing_resolution=16, local_files_only=True)
    img = est._pipes["intrinsics"]
    rgb = _frame(16, 16, 3)
    raw = est._run("intrinsics", colour.linear_to_srgb(rgb)[None])
    assert raw.shape == (2, 16, 16, 3)
    out = est.predict(rgb)
    # target 0 is "material": channel 1 = metallicity, channel 2 = roughness (linear)
    np.testing.assert_allclose(out.metallic, np.clip(raw[0, ..., 1], 0, 1), atol=1e-6)
    np.testing.assert_allclose(out.roughness, np.clip(raw[0, ..., 2], 0, 1), atol=1e-6)
    # target 1 is albedo in sRGB -> linear
    np.testing.assert_allclose(out.albedo, colour.srgb_to_linear(raw[1]), atol=1e-5)
    assert out.depth is not None and out.normal is None  # only the IID model loaded
    assert img.target_properties["target_names"] == ["material", "albedo"]


def test_loads_from_hf_cache_offline(tiny_models, tmp_path, monkeypatch):
    """A repo id resolves through huggingface_hub's cache layout with no network."""
    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--prs-eth--marigold-depth-v1-1"
    shutil.copytree(tiny_models["depth"], repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder, rev = resolve_model("prs-eth/marigold-depth-v1-1", cache_dir=str(cache), local_files_only=True)
    assert rev == commit and folder == repo / "snapshots" / commit
    est = MarigoldEstimator(depth="prs-eth/marigold-depth-v1-1", normals=None, intrinsics=None,
                            device="cpu", cache_dir=str(cache), local_files_only=True)
    assert est.models == {"prs-eth/marigold-depth-v1-1": commit}
    assert est.predict(_frame(9, 11)).depth.shape == (9, 11)
    with pytest.raises(MarigoldError, match="is not in the models folder .*`python -m backend models download marigold`"):
        MarigoldEstimator(depth="prs-eth/not-there", normals=None, intrinsics=None, device="cpu",
                          cache_dir=str(cache), local_files_only=True)


def test_wrong_pipeline_class_is_refused(tiny_models):
    with pytest.raises(MarigoldError, match="declares 'MarigoldNormalsPipeline'"):
        MarigoldEstimator(depth=str(tiny_models["normals"]), normals=None, intrinsics=None, device="cpu")


def test_upstream_class_name_is_accepted(tiny_models, tmp_path):
    """Issue 26: upstream's IID folder declares ``MarigoldIIDPipeline`` (diffusers ignores the
    field when a class loads a folder): it loads as the intrinsics pipeline."""
    folder = tmp_path / "iid"
    shutil.copytree(tiny_models["intrinsics"], folder)
    index = json.loads((folder / "model_index.json").read_text())
    index["_class_name"] = "MarigoldIIDPipeline"
    (folder / "model_index.json").write_text(json.dumps(index))
    est = MarigoldEstimator(depth=None, normals=None, intrinsics=str(folder), device="cpu")
    out = est.predict(_frame(16, 20))
    assert out.albedo.shape == (16, 20, 3) and out.roughness.shape == (16, 20)


def test_fp16_weight_copies_are_not_downloaded():
    """Issue 26: the published repositories hold fp32 and fp16 copies of every weight file;
    only the fp32 ones are loaded, so only they are fetched."""
    import fnmatch

    from backend.estimators.marigold import _ALLOW, _IGNORE

    def fetched(path):
        return (any(fnmatch.fnmatch(path, p) for p in _ALLOW) and not any(fnmatch.fnmatch(path, p) for p in _IGNORE))

    assert fetched("unet/diffusion_pytorch_model.safetensors") and fetched("model_index.json")
    assert not fetched("unet/diffusion_pytorch_model.fp16.safetensors")
    assert not fetched("text_encoder/model.fp16.safetensors")


def test_fp16_overflow_is_rerun_in_fp32(tiny_models, tmp_path):
    """Large UNet output weights (still representable in fp16) make fp16 activations overflow
    to inf/NaN but not fp32: the frame is re-run in fp32."""
    src = tiny_models["depth"]
    hot = tmp_path / "hot"
    pipe = diffusers.MarigoldDepthPipeline.from_pretrained(str(src), use_safetensors=True, local_files_only=True)
    with torch.no_grad():
        pipe.unet.conv_out.weight.mul_(1e3)
        pipe.unet.conv_out.bias.fill_(6e4)  # < 65504: the weights survive the fp16 cast
    pipe.save_pretrained(str(hot), safe_serialization=True)
    # processing_resolution=0: native size, so no (CPU-unsupported) fp16 resampling happens
    est = MarigoldEstimator(depth=str(hot), normals=None, intrinsics=None, device="cpu", dtype="float16",
                            processing_resolution=0, local_files_only=True)
    out = est.predict(_frame(16, 16))
    assert est.fp32_reruns == 1
    assert np.all(np.isfinite(out.depth))
    assert est._pipes["depth"].unet.dtype == torch.float16  # back to fp16 for the next frame


def test_registry_and_decompose_with_marigold(tiny_models, tmp_path, footage):
    opts = dict(depth=str(tiny_models["depth"]), normals=str(tiny_models["normals"]),
                intrinsics=str(tiny_models["intrinsics"]), processing_resolution=16)
    assert isinstance(get_estimator("marigold", device="cpu", **opts), MarigoldEstimator)
    from backend.jobs.decompose import decompose

    out = tmp_path / "mg"
    decompose(footage("boat"), out, estimator="marigold", estimator_options=opts, device="cpu",
              max_size=48, frames="1-1", stream=io.StringIO())
    fr = contract.read_frame(contract.frame_path(out, 1), validate=True)
    assert fr.shape == (448, 832) and fr.meta["estimator"] == "marigold"
    assert fr.meta["filled"] == []  # all passes came from the models
    assert set(fr.meta["models"]) == set(opts[k] for k in ("depth", "normals", "intrinsics"))


def test_model_not_available_message_is_one_line(tmp_path):
    """huggingface_hub's errors span lines; the CLI reports a message's first line only, so
    the reason must be one line (it used to end in an unclosed parenthesis)."""
    import os
    import subprocess
    import sys

    code = ("from backend.estimators.marigold import resolve_model\n"
            "try:\n"
            f"    resolve_model('prs-eth/marigold-depth-v1-1', cache_dir={str(tmp_path)!r}, local_files_only=False)\n"
            "except Exception as e:\n"
            "    print(str(e))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    # an endpoint that refuses connections: the download fails at once, never reaches the Hub
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env, cwd=str(Path(__file__).resolve().parent.parent))
    msg = r.stdout.strip()
    assert "not available (download failed" in msg, r.stdout + r.stderr
    assert "\n" not in msg and msg.count("(") == msg.count(")")
    assert msg.endswith("). Pass a local folder.")  # the Python API can still download; the CLI never does
