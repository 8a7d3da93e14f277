"""The published models' real architectures at FULL size with random weights (issue 26):
built from the published configurations (values in each test, from the model cards' config
files), checked against the published file sizes (tests/fixtures/hub_files.json) and run
through the product's loaders on the CPU. Random weights: shapes, names, dtypes, sizes and
the execution path are real; the outputs' values are not. Heavy (hundreds of MB to GB of
memory, a minute or more each on a shared CPU): marked slow.

Not covered here: Video Depth Anything's temporal head (upstream's code is not an
installed library; its checkpoint's 116 MB is consistent with the 28.4 M parameters the
paper gives: 28.4 M x 4 B = 113.6 MB plus pickle overhead), FLUX.2 [klein] 4B and Wan2.1
VACE 1.3B (published configs not available offline; see docs/models.md)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import hub_cache_util as hub
import onnx_depth_util as odu
from cli_util import cli_env, events, run_cli

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow
PUB = hub.published()


def listed_bytes(size: str) -> float:
    """``"99.1 MB"`` -> 99.1e6 (the hub's decimal units)."""
    value, unit = re.fullmatch(r"([\d.]+) (B|kB|MB|GB)", size).groups()
    return float(value) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_depth_anything_v2_small_full_size(tmp_path, footage):
    """Depth-Anything-V2-Small-hf's configuration (transformers' DepthAnythingForDepthEstimation,
    the class the ONNX file was exported from): 24.8 M parameters; exported to ONNX it is the
    size of the published onnx/model.onnx; the CLI runs it on real footage at upstream's
    network size (518 x 924 for 16:9)."""
    from backend.estimators.onnx_depth import DepthAnythingEstimator

    model = odu.full_size_model()
    assert abs(n_params(model) / 1e6 - 24.8) < 0.05, n_params(model)
    onnx_file = odu.export_replica(tmp_path / "model.onnx", 518, 924, model=model)
    size = onnx_file.stat().st_size
    published = listed_bytes(PUB["onnx-community/depth-anything-v2-small"]["files"]["onnx/model.onnx"])
    print(f"\nfull-size export {size / 1e6:.1f} MB, published {published / 1e6:.1f} MB; "
          f"{n_params(model) / 1e6:.2f} M parameters")
    assert abs(size - published) / published < 0.08
    est = DepthAnythingEstimator(model_file=onnx_file, materials="none", threads=2)
    x = est.network_input(np.zeros((520, 924, 3), np.float32))
    assert x.shape == (3, 518, 924) and x.dtype == np.float32
    out = tmp_path / "gb"
    proc = run_cli("decompose", footage("boat"), "--out", out, "--frames", "1-2", "--estimator",
                   "depth-anything-v2-small", "--estimator-option", f"model_file={onnx_file}",
                   "--estimator-option", "materials=none", env=cli_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert events(proc.stdout)[-1]["event"] == "done"
    man = json.loads((out / "manifest.json").read_text())
    assert man["estimator"]["settings"]["fit"] == "upstream"


#: openai/clip-vit-large-patch14-336 config.json (the values that set the shapes)
CLIP_TEXT = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 vocab_size=49408, max_position_embeddings=77, projection_dim=768)
CLIP_VISION = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                   image_size=336, patch_size=14, projection_dim=768)


def test_clip_vit_large_patch14_336_full_size(tmp_path, footage):
    """The whole CLIPModel of the published config (on the meta device: no memory) has the
    size of the published pytorch_model.bin; its vision tower at full size with random
    weights, saved under the published key names as a .bin beside a ``model_type: clip``
    config, loads through the CMMD loader and embeds a real frame (768-d, unit length)."""
    from accelerate import init_empty_weights
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPVisionModelWithProjection

    from backend.metrics import ClipEmbedder
    from backend.footage import open_footage

    cfg = CLIPConfig(text_config=CLIP_TEXT, vision_config=CLIP_VISION, projection_dim=768)
    with init_empty_weights():
        full = CLIPModel(cfg)
    n = n_params(full)
    published = listed_bytes(PUB["openai/clip-vit-large-patch14-336"]["files"]["pytorch_model.bin"])
    print(f"\nCLIP ViT-L/14-336: {n / 1e6:.1f} M parameters = {4 * n / 1e9:.3f} GB fp32; published .bin "
          f"{published / 1e9:.2f} GB")
    assert abs(4 * n - published) / published < 0.01
    full_keys = {k: tuple(v.shape) for k, v in full.state_dict().items()}
    torch.manual_seed(0)
    vision = CLIPVisionModelWithProjection(cfg.vision_config).eval()
    sd = vision.state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()}.items() <= full_keys.items()  # the published names
    folder = tmp_path / "clip"
    folder.mkdir()
    cfg.save_pretrained(folder)
    torch.save(sd, folder / "pytorch_model.bin")
    del vision, sd
    CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                       image_mean=[0.48145466, 0.4578275, 0.40821073],
                       image_std=[0.26862954, 0.26130258, 0.27577711]).save_pretrained(folder)
    emb = ClipEmbedder(folder)
    assert emb.size == 336
    with open_footage(footage("boat")) as fo:
        frame = next(iter(fo)).rgb
    e = emb.embed(iter([frame]))
    assert e.shape == (1, 768) and e.dtype == np.float32 and abs(float(np.linalg.norm(e)) - 1) < 1e-5


#: prs-eth Marigold's unet/config.json (Stable Diffusion 2's UNet; depth: 8 input channels)
MARIGOLD_UNET = dict(sample_size=96, in_channels=8, out_channels=4, block_out_channels=(320, 640, 1280, 1280),
                     attention_head_dim=(5, 10, 20, 20), cross_attention_dim=1024, use_linear_projection=True,
                     layers_per_block=2, down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                     up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)


def test_marigold_unet_full_size():
    """Marigold's UNet from its published config: 865.9 M parameters = the 3.46 GB of the
    published fp32 unet weights; built with random weights at full size and run once at a
    small latent in the pipeline's layout (image latent + depth latent in, 4 channels out,
    77 x 1024 text embeddings)."""
    from diffusers import UNet2DConditionModel

    published = listed_bytes(PUB["prs-eth/marigold-depth-v1-1"]["files"]["unet/diffusion_pytorch_model.safetensors"])
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**MARIGOLD_UNET).eval()
    n = n_params(unet)
    print(f"\nMarigold UNet: {n / 1e6:.1f} M parameters = {4 * n / 1e9:.3f} GB fp32; published {published / 1e9:.2f} GB")
    assert abs(4 * n - published) / published < 0.005
    with torch.no_grad():
        y = unet(torch.randn(1, 8, 16, 16), 999, encoder_hidden_states=torch.randn(1, 77, 1024)).sample
    assert y.shape == (1, 4, 16, 16) and torch.isfinite(y).all()
