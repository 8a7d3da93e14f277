"""ControlNet renderer end to end on tiny random-weight models, offline.

The models are the exact diffusers/transformers classes the real ones use
(UNet2DConditionModel, ControlNetModel x2, AutoencoderKL, CLIPTextModel, CLIPTokenizer,
a scheduler), built from tiny configs, saved as safetensors into a temp folder and
loaded back through the real adapter with ``local_files_only``.
"""
import io
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from backend import contract  # noqa: E402
from backend.jobs.restyle import output_path, read_rgba_exr, restyle  # noqa: E402
from backend.renderers import get_renderer  # noqa: E402
from backend.renderers.controlnet import (ControlNetRenderer, ModelNotAvailable,  # noqa: E402
                                          depth_condition, normal_condition)
from backend.renderers.synthetic import sphere_scene  # noqa: E402
from gbuffer_util import sphere_frames, write_sequence  # noqa: E402
from tokenizer_util import bytes_to_unicode  # noqa: E402


def _tiny_tokenizer(folder):
    """A CLIPTokenizer from a tiny vocab.json / merges.txt written here (byte-level BPE)."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in sorted(set(bytes_to_unicode().values())):
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    merges = ["f o", "fo g</w>", "d e", "de n", "den s", "dens e</w>"]
    for m in merges:
        vocab.setdefault("".join(m.split()), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    tok = CLIPTokenizer.from_pretrained(str(folder), model_max_length=77, local_files_only=True)
    ids = tok("dense fog").input_ids
    assert ids[0] == 0 and ids[-1] == 1 and vocab["dense</w>"] in ids and vocab["fog</w>"] in ids
    return tok


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    return build_tiny_sd(tmp_path_factory.mktemp("tiny_sd"))


def build_tiny_sd(root):
    """A random-weight SD 1.5 pipeline (``root/base``) and ControlNets (``root/depth``,
    ``root/normal``) of the real architectures, tiny; returns ``root``."""
    from diffusers import (AutoencoderKL, ControlNetModel, DDIMScheduler, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    tok_dir = root / "tok"
    tok_dir.mkdir()
    tokenizer = _tiny_tokenizer(tok_dir)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32, norm_num_groups=4,
        attention_head_dim=4)
    vae = AutoencoderKL(
        block_out_channels=[8, 16], in_channels=3, out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"], latent_channels=4, norm_num_groups=4)
    text = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer.get_vocab()), hidden_size=32, intermediate_size=37,
        num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=77,
        bos_token_id=0, eos_token_id=1, pad_token_id=1, projection_dim=32))
    sched = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                          clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    base = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet,
                                   scheduler=sched, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    base.save_pretrained(root / "base", safe_serialization=True)
    for name in ("depth", "normal"):
        cn = ControlNetModel(
            block_out_channels=(8, 16), layers_per_block=1, in_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), cross_attention_dim=32,
            conditioning_embedding_out_channels=(8, 16), norm_num_groups=4, attention_head_dim=4)
        cn.save_pretrained(root / name, safe_serialization=True)
    assert list((root / "base" / "unet").glob("*.safetensors"))
    assert list((root / "depth").glob("*.safetensors"))
    return root


def _renderer(models, **kw):
    opts = dict(base_model=str(models / "base"), depth_model=str(models / "depth"),
                normal_model=str(models / "normal"), device="cpu", steps=2, max_size=64,
                local_files_only=True, seed=7)
    opts.update(kw)
    return get_renderer("controlnet", **opts)


def test_conditions_follow_documented_conventions():
    f = sphere_scene(48, 64)
    d = depth_condition(f)
    assert d.shape == (48, 64, 3) and d.dtype == np.float32
    surf = f.confidence > 0
    assert np.all(d[~surf] == 0) and d[surf].max() == pytest.approx(1.0)
    near = np.unravel_index(np.argmin(np.where(surf, f.depth, np.inf)), f.shape)
    far = np.unravel_index(np.argmax(np.where(surf, f.depth, -np.inf)), f.shape)
    assert d[near][0] > d[far][0]                        # near = bright (inverse depth)
    n = normal_condition(f)
    up = (f.normal[..., 1] > 0.99) & surf                 # ground plane: n = (0, 1, 0)
    np.testing.assert_allclose(n[up].mean(0), (0.5, 1.0, 0.5), atol=1e-3)
    left = (f.normal[..., 0] < -0.5) & surf               # facing left -> red (BAE flips x)
    assert n[left][:, 0].min() > 0.7
    assert np.allclose(normal_condition(f, "opengl")[left][:, 0], (f.normal[left][:, 0] + 1) / 2)
    np.testing.assert_allclose(n[~surf], np.tile((0.5, 0.5, 1.0), ((~surf).sum(), 1)))
    with pytest.raises(ValueError):
        normal_condition(f, "directx")


def test_bad_options_and_missing_models(tmp_path):
    with pytest.raises(ValueError, match="init"):
        ControlNetRenderer(init="bogus")
    with pytest.raises(ValueError, match="strength"):
        ControlNetRenderer(strength=0.0)
    r = ControlNetRenderer(base_model=str(tmp_path / "nope"), depth_model=str(tmp_path / "nope_d"),
                           local_files_only=True, device="cpu")
    with pytest.raises(ModelNotAvailable, match="nope_d"):
        r.render(sphere_scene(16, 16), "x")


@pytest.mark.parametrize("size", [(64, 64), (50, 70)])
def test_end_to_end_shapes_finite_deterministic(tiny_models, size):
    h, w = size
    frames = sphere_frames(h, w, x0=-0.4, step=0.4)
    outs = []
    for run in range(2):
        r = _renderer(tiny_models)
        prev = None
        seq = []
        for i, f in enumerate(frames):
            prev = r.render(f, "a dense fog over the sea", frame_index=i, time_s=i / 24, prev=prev)
            assert prev.shape == (h, w, 3) and prev.dtype == np.float32
            assert np.all(np.isfinite(prev)) and prev.min() >= 0 and prev.max() <= 1
            seq.append(prev)
        assert "flicker" in r.last_info and r.last_info["flicker"] >= 0  # frame 2 was chained
        ph, pw = r.processing_size(h, w)
        assert ph % 4 == 0 and pw % 4 == 0
        outs.append(seq)
    for a, b in zip(*outs):
        assert np.array_equal(a, b)                      # fixed seed -> identical
    assert not np.array_equal(outs[0][0], outs[0][1])    # frames differ (content moved)
    # another seed gives another image
    other = _renderer(tiny_models, seed=8).render(frames[0], "a dense fog over the sea")
    assert not np.array_equal(other, outs[0][0])


def test_same_noise_every_frame_and_init_modes(tiny_models):
    f = sphere_frames(32, 32, 1, x0=-0.4, step=0.4)[0]
    r = _renderer(tiny_models, init="none")
    a = r.render(f, "snow", frame_index=0)
    b = r.render(f, "snow", frame_index=0)                # not chained (same index)
    assert np.array_equal(a, b)
    src = _renderer(tiny_models, init="source", strength=0.5).render(f, "snow")
    emb = _renderer(tiny_models, init="embedded", strength=0.5).render(f, "snow")
    assert not np.array_equal(src, emb)
    # text-to-image chain: frame 2 starts from the warped frame-1 result (img2img)
    f2 = sphere_frames(32, 32, 2, x0=-0.4, step=0.4)[1]
    c = r.render(f2, "snow", frame_index=1, prev=b)
    assert c.shape == (32, 32, 3) and np.all(np.isfinite(c))
    assert "flicker" in r.last_info
    fresh = _renderer(tiny_models, init="none").render(f2, "snow", frame_index=1)  # no history
    assert not np.array_equal(c, fresh)


def test_restyle_job_with_controlnet_reports_flicker(tiny_models, tmp_path):
    gb = write_sequence(tmp_path / "gb", sphere_frames(64, 64, x0=-0.4, step=0.4))
    out = tmp_path / "out"
    opts = dict(base_model=str(tiny_models / "base"), depth_model=str(tiny_models / "depth"),
                normal_model=str(tiny_models / "normal"), device="cpu", steps=2, max_size=64,
                local_files_only=True)
    res = restyle(gb, out, "cyberpunk harbour at dusk", renderer="controlnet", renderer_options=opts,
                  stream=io.StringIO())
    assert sorted(res.written) == [1, 2]
    man = contract.read_manifest(out)
    assert man["renderer"]["name"] == "controlnet"
    assert man["renderer"]["settings"]["seed"] == 0 and man["renderer"]["settings"]["steps"] == 2
    frames = {e["frame"]: e for e in man["frames"]}
    assert "flicker" in frames[2] and "flicker" not in frames[1]
    assert man["flicker"]["output"] >= 0
    assert read_rgba_exr(output_path(out, 2)).shape == (64, 64, 3)
    assert (out / "preview.mp4").stat().st_size > 0
