"""GBufNet: the compact encoder-decoder behind the embedded estimator (torch).

Only training, ONNX export and tests import this module; the shipped estimator
runs the ONNX export with onnxruntime and never imports torch.

Architecture (see ``docs/model-card.md``):

* input ``N x 3 x H x W`` float32, auto-exposed sRGB normalised as in
  :mod:`backend.model.encoding`; two coordinate channels (x, y in [-1, 1] over the
  frame) are appended inside the network (CoordConv), so the net can learn
  frame-position priors such as "the top of the frame tends to be farther";
* a residual U-Net encoder with 5 stride-2 stages (stride 32) and a global-context
  branch (global average pool -> 1x1 conv, broadcast-added at stride 32);
* a shared decoder with skip connections back to stride 2, then per-task heads,
  upsampled bilinearly to the input size.

Any input size works: :meth:`GBufNet.forward` pads to a multiple of
:data:`~backend.model.encoding.STRIDE` (replicate padding) and crops back.

Outputs (dict, all ``N x C x H x W`` float32):

* ``disparity`` (1): relative inverse depth >= 0 (softplus), scale/shift unknown;
* ``normal`` (3): unit camera-space normals, OpenGL (+X right, +Y up, +Z to camera);
* ``albedo`` (3): linear base colour, sigmoid, 0..1;
* ``metallic`` (1), ``roughness`` (1): sigmoid, 0..1;
* ``sky`` (1): probability that the pixel shows no surface (sky/background).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from .encoding import STRIDE

OUTPUT_NAMES = ("disparity", "normal", "albedo", "metallic", "roughness", "sky")


@dataclass
class NetConfig:
    """Hyper-parameters of :class:`GBufNet` (stored in ``embedded.json``)."""

    widths: List[int] = field(default_factory=lambda: [16, 32, 48, 96, 144])
    blocks: List[int] = field(default_factory=lambda: [1, 1, 1, 2, 2])
    dec_widths: List[int] = field(default_factory=lambda: [96, 48, 32, 24])
    head_width: int = 24
    head_kernel: int = 1
    coord_channels: bool = True

    def to_dict(self) -> Dict:
        return asdict(self)


def _conv_bn(cin: int, cout: int, stride: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class ResBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity shortcut."""

    def __init__(self, ch: int):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.b1 = nn.BatchNorm2d(ch)
        self.c2 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)), inplace=True)
        y = self.b2(self.c2(y))
        return F.relu(x + y, inplace=True)


class Up(nn.Module):
    """Bilinear x2 upsample, concatenate the skip, two 3x3 conv-BN-ReLU."""

    def __init__(self, cin: int, cskip: int, cout: int):
        super().__init__()
        self.conv = nn.Sequential(_conv_bn(cin + cskip, cout), _conv_bn(cout, cout))

    def forward(self, x, skip):
        x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.conv(torch.cat([x, skip], dim=1))


class Head(nn.Module):
    def __init__(self, cin: int, width: int, cout: int, k: int = 1):
        super().__init__()
        self.body = _conv_bn(cin, width, k=k)
        self.out = nn.Conv2d(width, cout, 1)

    def forward(self, x):
        return self.out(self.body(x))


def _coords(x: torch.Tensor) -> torch.Tensor:
    """x and y coordinate planes in [-1, 1] (y = +1 at the top row), N x 2 x H x W.

    Built with cumsum so the ONNX graph stays shape-dynamic.
    """
    ones = torch.ones_like(x[:, :1])
    cy = torch.cumsum(ones, dim=2)
    cx = torch.cumsum(ones, dim=3)
    h = cy[:, :, -1:, :]
    w = cx[:, :, :, -1:]
    y = 1.0 - 2.0 * (cy - 0.5) / h
    xx = 2.0 * (cx - 0.5) / w - 1.0
    return torch.cat([xx, y], dim=1)


class GBufNet(nn.Module):
    """Compact U-Net estimating disparity, normals, albedo, metallic, roughness, sky."""

    def __init__(self, config: NetConfig | None = None):
        super().__init__()
        self.config = cfg = config or NetConfig()
        w = cfg.widths
        cin = 3 + (2 if cfg.coord_channels else 0)
        self.stem = nn.Sequential(_conv_bn(cin, w[0], 2), _conv_bn(w[0], w[0]))
        stages = []
        for i in range(1, len(w)):
            layers = [_conv_bn(w[i - 1], w[i], 2)] + [ResBlock(w[i]) for _ in range(cfg.blocks[i])]
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.context = nn.Sequential(nn.Conv2d(w[-1], w[-1], 1), nn.ReLU(inplace=True))
        ups = []
        c = w[-1]
        skips = list(reversed(w[:-1]))
        for cs, co in zip(skips, cfg.dec_widths):
            ups.append(Up(c, cs, co))
            c = co
        self.ups = nn.ModuleList(ups)
        hw = cfg.head_width
        k = cfg.head_kernel
        self.head_depth = Head(c, hw, 2, k)  # disparity + sky logit
        self.head_normal = Head(c, hw, 3, k)
        self.head_albedo = Head(c, hw, 3, k)
        self.head_mat = Head(c, hw, 2, k)  # metallic, roughness

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        h, w = x.shape[-2], x.shape[-1]
        ph = (STRIDE - h % STRIDE) % STRIDE
        pw = (STRIDE - w % STRIDE) % STRIDE
        if self.config.coord_channels:
            x = torch.cat([x, _coords(x)], dim=1)
        x = F.pad(x, (0, pw, 0, ph), mode="replicate")  # always (keeps the traced graph dynamic)
        feats = [self.stem(x)]
        for st in self.stages:
            feats.append(st(feats[-1]))
        y = feats[-1]
        g = self.context(y.mean(dim=(2, 3), keepdim=True))
        y = y + g
        for up, skip in zip(self.ups, reversed(feats[:-1])):
            y = up(y, skip)
        size = (x.shape[-2], x.shape[-1])

        def full(t):
            t = F.interpolate(t, size=size, mode="bilinear", align_corners=False)
            return t[:, :, :h, :w]

        d = full(self.head_depth(y))
        n = full(self.head_normal(y))
        a = full(self.head_albedo(y))
        m = full(self.head_mat(y))
        n = n / torch.sqrt((n * n).sum(dim=1, keepdim=True) + 1e-8)
        return {
            "disparity": F.softplus(d[:, :1]),
            "normal": n,
            "albedo": torch.sigmoid(a),
            "metallic": torch.sigmoid(m[:, :1]),
            "roughness": torch.sigmoid(m[:, 1:2]),
            "sky": torch.sigmoid(d[:, 1:2]),
            # raw sky logit for the loss (not exported)
            "_sky_logit": d[:, 1:2],
        }


class ExportWrapper(nn.Module):
    """Returns the outputs as a tuple in :data:`OUTPUT_NAMES` order (for ONNX)."""

    def __init__(self, net: GBufNet):
        super().__init__()
        self.net = net

    def forward(self, x):
        o = self.net(x)
        return tuple(o[k] for k in OUTPUT_NAMES)


def count_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())
