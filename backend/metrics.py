"""Realism and colour metrics between two sets of frames (``python -m backend metrics``).

* **CMMD** (Jayasumana et al., "Rethinking FID: Towards a Better Evaluation Metric for
  Image Generation", CVPR 2024): squared MMD with a Gaussian RBF kernel
  ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))``, ``sigma = 10``, scaled by 1000, between
  the L2-normalised CLIP image embeddings of the two sets; the estimator of the paper's
  reference code (means over all pairs, diagonal included, so a set against itself is 0).
  Embeddings come from ``transformers``' ``CLIPVisionModelWithProjection`` +
  ``CLIPImageProcessor`` loaded from a local folder (offline; ``model.safetensors``, else
  ``pytorch_model.bin``, which is all the paper's ``openai/clip-vit-large-patch14-336``
  publishes besides ``tf_model.h5``). Preprocessing as the reference code
  (google-research ``cmmd/io_util.py``): each frame decoded at full resolution, centre-
  cropped to a square, resized to the model's input size (336) with PIL's bicubic filter
  (antialiased), then only normalised. Needs torch + transformers (+ Pillow, which
  transformers' image processors need anyway).
* **Colour** (always available, no weights): the 2-Wasserstein distance between the
  Gaussians fitted to the two sets' colour distributions in ``log2(rgb + 1/256)``
  (:func:`backend.look_match.gaussian_w2`) and the per-channel scene-linear means.

Sets are anything :func:`backend.footage.open_footage` reads: a movie, an image folder
(a restyle or decompose output folder: its top-level EXRs), a pattern or an image.
Frames are streamed at a reduced size; only running sums (colour) and one embedding
per frame (CMMD) are kept.
"""
from __future__ import annotations

import os
from typing import Dict, Iterator, Optional

import numpy as np

from .errors import InputError
from .look_match import _Accumulator, gaussian_w2

SIGMA = 10.0
SCALE = 1000.0


def _frames(path: os.PathLike, max_frames: Optional[int], size: Optional[int]) -> Iterator[np.ndarray]:
    """Scene-linear frames of a set, long side at most ``size`` (``None``: full resolution)."""
    from .footage import FootageError, open_footage
    try:
        with open_footage(path, max_size=size) as foot:
            for i, fr in enumerate(foot):
                if max_frames is not None and i >= max_frames:
                    break
                yield fr.rgb
    except FootageError as e:
        raise InputError(f"metrics set {os.fspath(path)}: {str(e).splitlines()[0]}") from e


def colour_measures(a: os.PathLike, b: os.PathLike, max_frames: Optional[int] = None,
                    size: int = 256) -> Dict[str, object]:
    """Colour distance of set ``a`` to set ``b``.

    Returns:
        ``{"colour_w2": float (log2 units), "mean_rgb_a": [r, g, b], "mean_rgb_b": [...],
        "frames_a": int, "frames_b": int}``; means are scene-linear Rec.709.

    Raises:
        InputError: a set that cannot be read or holds no frames (one line naming it).
    """
    out: Dict[str, object] = {}
    stats = []
    for key, path in (("a", a), ("b", b)):
        acc, s, k = _Accumulator(), np.zeros(3), 0
        for rgb in _frames(path, max_frames, size):
            acc.add(rgb)
            s += rgb.reshape(-1, 3).mean(0)
            k += 1
        if k == 0:
            raise InputError(f"metrics set {os.fspath(path)}: no frames")
        stats.append(acc.stats())
        out[f"mean_rgb_{key}"] = [round(float(v), 5) for v in s / k]
        out[f"frames_{key}"] = k
    out["colour_w2"] = round(gaussian_w2(stats[0], stats[1]), 5)
    return out


def mmd(x: np.ndarray, y: np.ndarray, sigma: float = SIGMA, scale: float = SCALE) -> float:
    """CMMD's MMD: ``x`` ``N x D``, ``y`` ``M x D`` embeddings (float) -> ``scale * MMD^2``."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    gamma = 1.0 / (2.0 * sigma ** 2)

    def k(p, q):
        d2 = (p * p).sum(1)[:, None] + (q * q).sum(1)[None, :] - 2.0 * p @ q.T
        return float(np.exp(-gamma * np.maximum(d2, 0.0)).mean())

    return scale * (k(x, x) + k(y, y) - 2.0 * k(x, y))


def centre_crop_resize(srgb8: np.ndarray, size: int) -> np.ndarray:
    """The CMMD reference's preprocessing of one image (``cmmd/io_util.py``
    ``_center_crop_and_resize``): the centred square of side ``min(H, W)``, resized to
    ``size x size`` with PIL's bicubic filter (which antialiases when shrinking).

    Args:
        srgb8: ``H x W x 3`` uint8 sRGB.

    Returns:
        ``size x size x 3`` uint8.
    """
    from PIL import Image

    h, w = srgb8.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    sq = np.ascontiguousarray(srgb8[top:top + side, left:left + side])
    return np.asarray(Image.fromarray(sq).resize((size, size), resample=Image.BICUBIC))


class ClipEmbedder:
    """CLIP image embeddings from a local ``transformers`` folder (``config.json``,
    ``model.safetensors`` or ``pytorch_model.bin``, ``preprocessor_config.json``); offline.

    Raises:
        InputError: the folder is missing or holds no CLIP vision model.
    """

    def __init__(self, folder: os.PathLike, device: str = "cpu", batch: int = 16):
        from pathlib import Path

        from .errors import require_packages

        p = Path(folder)
        if not (p / "config.json").is_file():
            raise InputError(f"CLIP model {p}: no config.json (a local folder of a CLIP model is needed)")
        require_packages("CMMD (CLIP embeddings)", "torch", "transformers")
        import torch
        from transformers import CLIPImageProcessor, CLIPVisionModelWithProjection
        try:
            self.model = CLIPVisionModelWithProjection.from_pretrained(
                p, local_files_only=True).to(device).eval()  # safetensors when present, else the .bin
            self.proc = CLIPImageProcessor.from_pretrained(p, local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as e:  # RuntimeError: weights of other shapes
            raise InputError(f"CLIP model {p}: {str(e).splitlines()[0]}") from e
        crop = getattr(self.proc, "crop_size", None) or {}
        self.size = int(crop.get("height") or self.model.config.image_size)
        self.torch, self.device, self.batch = torch, device, batch

    def embed(self, frames: Iterator[np.ndarray]) -> np.ndarray:
        """Scene-linear frames (full resolution) -> ``N x D`` float32 L2-normalised
        embeddings: sRGB 8-bit, :func:`centre_crop_resize` to the model's input size, then
        the processor's rescale and normalisation only."""
        from .colour import linear_to_srgb

        out, buf = [], []

        def flush():
            inp = self.proc(images=buf, do_resize=False, do_center_crop=False,
                            return_tensors="pt").to(self.device)
            with self.torch.no_grad():
                e = self.model(**inp).image_embeds
            out.append(self.torch.nn.functional.normalize(e, dim=-1).float().cpu().numpy())
            buf.clear()

        for rgb in frames:
            srgb8 = (np.clip(linear_to_srgb(rgb), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
            buf.append(centre_crop_resize(srgb8, self.size))
            if len(buf) >= self.batch:
                flush()
        if buf:
            flush()
        return np.concatenate(out) if out else np.zeros((0, 1), np.float32)


def cmmd(a: os.PathLike, b: os.PathLike, clip: os.PathLike, max_frames: Optional[int] = None,
         device: str = "cpu") -> float:
    """CMMD between sets ``a`` and ``b`` with the CLIP model in folder ``clip``.

    Raises:
        InputError: unreadable or empty set, missing CLIP model.
    """
    emb = ClipEmbedder(clip, device=device)
    ea = emb.embed(_frames(a, max_frames, None))  # full resolution: cropped, then resized once
    eb = emb.embed(_frames(b, max_frames, None))
    for path, e in ((a, ea), (b, eb)):
        if len(e) == 0:
            raise InputError(f"metrics set {os.fspath(path)}: no frames")
    return mmd(ea, eb)
