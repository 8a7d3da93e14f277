"""Test-only: tiny random-weight replicas of Depth Anything V2 exported to ONNX like the
published export, laid out in a Hugging Face cache folder.

:func:`export_replica` builds ``transformers.DepthAnythingForDepthEstimation`` from a tiny
config (a 2-layer DINOv2 backbone with the real patch size 14) with random weights and
exports it with ``torch.onnx.export`` under the published export's names and layout
(``pixel_values`` ``N x 3 x H x W`` -> ``predicted_depth`` ``N x H x W``; H and W dynamic
in the graph's signature). The legacy exporter traces the output's interpolation size as a
constant, so a replica answers at the size it was exported at; the estimator resamples any
output size to the frame, and tests export at their frames' network size.

:func:`install_in_cache` puts a file into ``cache/models--<org>--<name>/`` exactly as
``huggingface_hub`` lays a download out (``blobs/<sha256>``, ``snapshots/<commit>/<path>``
as a relative symlink, ``refs/main``), so the real ``hf_hub_download(local_files_only=True)``
resolves it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_model(seed: int = 0):
    """A tiny random-weight ``DepthAnythingForDepthEstimation`` (eval mode).

    Convolution and linear layers get PyTorch's default (Kaiming-uniform) initialisation
    instead of transformers' N(0, 0.02), so the random network's disparity varies over
    the image instead of collapsing to zero through the final ReLU.
    """
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    backbone = Dinov2Config(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                            image_size=56, patch_size=14, out_indices=[1, 2], reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=16, neck_hidden_sizes=[8, 16],
                                 fusion_hidden_size=8, head_hidden_size=8, patch_size=14,
                                 reassemble_factors=[2, 1])
    torch.manual_seed(seed)
    model = DepthAnythingForDepthEstimation(config).eval()
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d, torch.nn.Linear)):
            m.reset_parameters()
    with torch.no_grad():
        model.head.conv3.bias.fill_(0.5)  # keep the final ReLU mostly open
    return model


def full_size_model(seed: int = 0):
    """Depth Anything V2 Small's real architecture (the configuration of
    ``depth-anything/Depth-Anything-V2-Small-hf``) with random weights; for benchmarks."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    backbone = Dinov2Config(hidden_size=384, num_attention_heads=6, num_hidden_layers=12, image_size=518,
                            patch_size=14, out_indices=[3, 6, 9, 12], reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=384,
                                 neck_hidden_sizes=[48, 96, 192, 384], fusion_hidden_size=64,
                                 head_hidden_size=32, patch_size=14, reassemble_factors=[4, 2, 1, 0.5])
    torch.manual_seed(seed)
    return DepthAnythingForDepthEstimation(config).eval()


def export_replica(path: os.PathLike, height: int, width: int, *, model=None, names=("pixel_values", "predicted_depth"),
                   fp16: bool = False) -> Path:
    """Export ``model`` (default :func:`tiny_model`) to ONNX at ``path``, traced at
    ``height x width`` (multiples of 14), with input/output ``names``; ``fp16``: then
    converted to float16 weights and float16 input/output."""
    import torch

    model = model if model is not None else tiny_model()
    x = torch.rand(1, 3, height, width)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inp, out = names
    torch.onnx.export(model, (x,), str(path), input_names=[inp], output_names=[out],
                      dynamic_axes={inp: {0: "batch_size", 2: "height", 3: "width"},
                                    out: {0: "batch_size", 1: "height", 2: "width"}},
                      opset_version=17, dynamo=False)
    if fp16:  # weights and graph I/O in float16 (onnxruntime's converter)
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(path)), keep_io_types=False), str(path))
    return path


def install_in_cache(cache: os.PathLike, repo_id: str, filename: str, src: os.PathLike,
                     commit: str = COMMIT) -> Path:
    """Put ``src`` into the Hugging Face cache ``cache`` as ``repo_id``'s ``filename`` at
    ``commit`` (with ``refs/main`` pointing at it). Returns the snapshot path."""
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    data = Path(src).read_bytes()
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    snap = repo / "snapshots" / commit / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    if snap.exists() or snap.is_symlink():
        snap.unlink()
    os.symlink(os.path.relpath(blob, snap.parent), snap)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def copy_cache(src: os.PathLike, dst: os.PathLike) -> Path:
    """A copy of a cache folder (symlinks kept), for tests that damage it."""
    shutil.copytree(src, dst, symlinks=True)
    return Path(dst)


# ---------------------------------------------------------------------------- video


def tiny_video_model(seed: int = 0, window_gain: float = 12.0):
    """A tiny random-weight stand-in for Video Depth Anything's published forward
    (``[B, T, 3, H, W]`` ImageNet-normalised -> ``[B, T, H, W]`` disparity >= 0): per-frame
    convolutions, attention across the T frames of the window (as the temporal head's motion
    modules mix frames), and one scale and shift for the whole window that depend on the
    window's content (``exp(window_gain * mean(x))``, ``0.2 sigmoid(4 mean(x))``), the per-window ambiguity of a
    relative-depth network that the published scheme's alignment removes."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class TinyVDA(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1 = nn.Conv2d(3, 8, 3, padding=1)
            self.enc2 = nn.Conv2d(8, 8, 3, padding=1)
            self.query = nn.Linear(8, 8)
            self.head = nn.Conv2d(8, 1, 3, padding=1)

        def forward(self, x):
            b, t, c, h, w = x.shape
            f = F.relu(self.enc2(F.relu(self.enc1(x.flatten(0, 1)))))
            f = f.unflatten(0, (b, t))  # B, T, 8, H, W
            q = f.mean(dim=(3, 4))  # B, T, 8
            att = torch.softmax(q @ self.query(q).transpose(1, 2) / 8 ** 0.5, dim=-1)  # B, T, T
            f = f + torch.einsum("bts,bschw->btchw", att, f)
            d = F.softplus(self.head(f.flatten(0, 1))).unflatten(0, (b, t)).squeeze(2)  # B, T, H, W
            g = x.mean(dim=(1, 2, 3, 4)).view(b, 1, 1, 1)
            return F.relu(d * torch.exp(window_gain * g) + 0.2 * torch.sigmoid(4 * g))

    torch.manual_seed(seed)
    return TinyVDA().eval()


def baked_video_model(frames: int, height: int, width: int, seed: int = 0):
    """:func:`tiny_video_model` behind a reshape that bakes ``frames x height x width`` into
    the traced graph (as upstream's ``int(patch_h * 14)`` and positional-embedding scale
    factors do): exported with dynamic axes declared, it answers at that size only."""
    import torch

    inner = tiny_video_model(seed)

    class Baked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x.reshape(1, frames, 3, height, width))

    return Baked().eval()


def export_video_replica(path: os.PathLike, height: int, width: int, frames: int = 4, *, model=None,
                         names=("frames", "depth"), fixed: bool = False) -> Path:
    """Export ``model`` (default :func:`tiny_video_model`) to ONNX at ``path`` with input
    ``names[0]`` ``[1, T, 3, H, W]`` and output ``names[1]`` ``[1, T, H, W]``: T, H and W
    dynamic (the layout :data:`backend.estimators.video_depth.VIDEO_MODELS` expects), or,
    with ``fixed``, fixed at ``frames x height x width`` in the graph's signature (the
    export docs/models.md gives for the published checkpoint)."""
    import torch

    model = model if model is not None else tiny_video_model()
    x = torch.rand(1, frames, 3, height, width)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inp, out = names
    dynamic = None if fixed else {inp: {0: "batch_size", 1: "frames", 3: "height", 4: "width"},
                                  out: {0: "batch_size", 1: "frames", 2: "height", 3: "width"}}
    torch.onnx.export(model, (x,), str(path), input_names=[inp], output_names=[out], dynamic_axes=dynamic,
                      opset_version=17, dynamo=False)
    return path
