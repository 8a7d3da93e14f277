"""Training augmentations: geometric (crop, scale, flip) and camera-like photometric ones.

A sample is a dict of numpy float32 arrays at one size, H x W (x C):
``combined`` (scene-linear RGB), ``disparity`` (1/depth, 0 for sky), ``normal``
(unit camera-space OpenGL), ``albedo``, ``metallic``, ``roughness``, ``mask``
(1 = surface, 0 = sky/background).

:func:`augment` returns the network input (3 x h x w, encoded exactly as
:func:`backend.model.encoding.encode_input` does, then degraded like real footage)
and the matching targets (C x h x w).

Photometric chain, in order (each step random): auto-exposure (same as inference)
x exposure gain (log-normal, sigma 0.35) -> white balance (per-channel gain
+-15 %) -> saturation -> clip + sRGB encode -> tone curve (gamma/contrast) ->
Gaussian blur or motion blur (line kernel, random angle) -> down/up-sampling ->
signal-dependent noise -> JPEG re-encode (quality 25..95, OpenCV). Horizontal flip
negates the X of the normals.

Optional sim-to-real step (``style_pool``): Fourier domain adaptation (Yang & Soatto,
"FDA: Fourier Domain Adaptation for Semantic Segmentation", CVPR 2020) swaps the
low-frequency amplitude spectrum of the sRGB-encoded render for that of a real
photograph (global colour cast, illumination gradients, contrast), keeping the
render's phase (its structure), right after the tone curve.
"""
from __future__ import annotations

import cv2
import numpy as np

from backend.colour import linear_to_srgb
from backend.imaging import resize
from backend.model.encoding import INPUT_MEAN, INPUT_STD, auto_exposure_gain

TARGET_KEYS = ("disparity", "normal", "albedo", "metallic", "roughness", "mask")


def random_crop_resize(s: dict, out_hw: tuple, rng: np.random.Generator,
                       min_scale: float = 0.55) -> dict:
    """Crop a random window (area fraction ``min_scale..1``, aspect of ``out_hw``
    jittered) and resize it to ``out_hw``. Mask uses nearest + erosion of mixed pixels."""
    H, W = s["mask"].shape[:2]
    oh, ow = out_hw
    aspect = ow / oh * float(np.exp(rng.uniform(-0.1, 0.1)))
    area = rng.uniform(min_scale, 1.0) * H * W
    cw = int(round(np.sqrt(area * aspect)))
    ch = int(round(np.sqrt(area / aspect)))
    cw, ch = max(8, min(cw, W)), max(8, min(ch, H))
    y0 = int(rng.integers(0, H - ch + 1))
    x0 = int(rng.integers(0, W - cw + 1))
    out = {}
    for k, v in s.items():
        c = v[y0:y0 + ch, x0:x0 + cw]
        if k == "mask":
            m_lin = resize(c.astype(np.float32), (ow, oh))
            out[k] = (m_lin > 0.999).astype(np.float32)
        elif k == "combined":
            out[k] = resize(c, (ow, oh), "area" if ch > oh else "linear")
        else:
            out[k] = resize(c, (ow, oh))
    n = out["normal"]
    out["normal"] = n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-6)
    return out


def resize_sample(s: dict, out_hw: tuple) -> dict:
    """Resize a whole sample to ``out_hw`` (no crop); mask: mixed pixels become invalid."""
    if s["mask"].shape[:2] == tuple(out_hw):
        return dict(s)
    oh, ow = out_hw
    out = {}
    for k, v in s.items():
        if k == "mask":
            out[k] = (resize(v.astype(np.float32), (ow, oh)) > 0.999).astype(np.float32)
        else:
            out[k] = resize(v, (ow, oh), "area" if v.shape[0] > oh else "linear")
    n = out["normal"]
    out["normal"] = n / np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-6)
    return out


def flip_h(s: dict) -> dict:
    """Mirror left-right; camera-space normal X changes sign."""
    out = {k: np.ascontiguousarray(v[:, ::-1]) for k, v in s.items()}
    out["normal"] = out["normal"] * np.array([-1.0, 1.0, 1.0], np.float32)
    return out


def _motion_kernel(length: int, angle: float) -> np.ndarray:
    k = np.zeros((length, length), np.float32)
    c = (length - 1) / 2.0
    dx, dy = np.cos(angle), np.sin(angle)
    for t in np.linspace(-c, c, 4 * length):
        x, y = int(round(c + t * dx)), int(round(c + t * dy))
        k[y, x] = 1.0
    return k / k.sum()


def fda_swap(src: np.ndarray, target: np.ndarray, beta: float) -> np.ndarray:
    """Fourier domain adaptation (Yang & Soatto, CVPR 2020) of one image.

    Args:
        src: ``H x W x 3`` float32 sRGB-encoded image in [0, 1] (the render).
        target: ``h x w x 3`` float32 sRGB-encoded image in [0, 1] (a real photograph),
            resized to ``H x W``.
        beta: half-width of the swapped low-frequency square as a fraction of
            ``min(H, W)`` (the paper's L; 0.01-0.09), at least one frequency bin.

    Returns:
        ``H x W x 3`` float32 in [0, 1]: ``src``'s phase with ``target``'s amplitude at
        frequencies within the centred ``(2b+1)^2`` square (DC included), ``src``'s
        amplitude elsewhere.

    Raises:
        ValueError: images that are not ``H x W x 3``, or ``beta`` outside (0, 0.5).
    """
    if src.ndim != 3 or src.shape[2] != 3 or target.ndim != 3 or target.shape[2] != 3:
        raise ValueError(f"fda_swap needs two H x W x 3 images, got {src.shape} and {target.shape}")
    if not 0.0 < beta < 0.5:
        raise ValueError(f"beta must be in (0, 0.5), got {beta}")
    h, w = src.shape[:2]
    if target.shape[:2] != (h, w):
        target = resize(target, (w, h), "area")
    fs = np.fft.fftshift(np.fft.fft2(src, axes=(0, 1)), axes=(0, 1))
    ft = np.fft.fftshift(np.fft.fft2(target, axes=(0, 1)), axes=(0, 1))
    amp = np.abs(fs)
    b = max(1, int(np.floor(min(h, w) * beta)))
    cy, cx = h // 2, w // 2
    win = (slice(max(0, cy - b), cy + b + 1), slice(max(0, cx - b), cx + b + 1))
    amp[win] = np.abs(ft[win])
    out = np.fft.ifft2(np.fft.ifftshift(amp * np.exp(1j * np.angle(fs)), axes=(0, 1)), axes=(0, 1)).real
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def photometric(rgb_linear: np.ndarray, rng: np.random.Generator, strength: float = 1.0,
                style: np.ndarray = None, style_beta: float = 0.03) -> np.ndarray:
    """Scene-linear H x W x 3 -> degraded sRGB-encoded H x W x 3 in [0, 1] (see module doc).
    ``style``: a real sRGB photograph for :func:`fda_swap` after the tone curve (None: off)."""
    x = rgb_linear * auto_exposure_gain(rgb_linear)
    x = x * float(np.exp(rng.normal(0.0, 0.35 * strength)))
    x = x * np.exp(rng.uniform(-0.15, 0.15, 3) * strength).astype(np.float32)
    if rng.random() < 0.5:
        lum = x.mean(-1, keepdims=True)
        x = np.maximum(lum + (x - lum) * rng.uniform(0.6, 1.3), 0.0)
    e = linear_to_srgb(x)
    if rng.random() < 0.5:
        e = np.power(e, float(np.exp(rng.normal(0.0, 0.15 * strength))))
        c = rng.uniform(-0.25, 0.25) * strength
        e = np.clip(e + c * (e - 0.5) * (1 - np.abs(2 * e - 1)), 0, 1)  # mild S-curve
    if style is not None:
        e = fda_swap(e, style, style_beta)
    h, w = e.shape[:2]
    r = rng.random()
    if r < 0.25:
        e = cv2.GaussianBlur(e, (0, 0), float(rng.uniform(0.3, 1.3)))
    elif r < 0.4:
        k = _motion_kernel(int(rng.integers(3, 10)), float(rng.uniform(0, np.pi)))
        e = cv2.filter2D(e, -1, k, borderType=cv2.BORDER_REFLECT)
    if rng.random() < 0.2 and min(h, w) >= 16:
        f = rng.uniform(0.4, 0.8)
        small = resize(e, (max(4, int(w * f)), max(4, int(h * f))), "area")
        e = resize(small, (w, h))
    if rng.random() < 0.7:
        sig_read = rng.uniform(0.002, 0.03) * strength
        sig_shot = rng.uniform(0.0, 0.04) * strength
        std = np.sqrt(sig_read ** 2 + sig_shot ** 2 * e)
        noise = rng.normal(0.0, 1.0, e.shape).astype(np.float32)
        if rng.random() < 0.3:  # chroma-correlated (luma) noise
            noise = np.repeat(noise[..., :1], 3, axis=-1)
        e = e + std * noise
    e = np.clip(e, 0.0, 1.0)
    if rng.random() < 0.6:
        q = int(rng.integers(25, 96))
        u8 = (e * 255.0 + 0.5).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", u8[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, q])
        if ok:
            e = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1].astype(np.float32) / 255.0
    return np.ascontiguousarray(e, dtype=np.float32)


def augment(sample: dict, out_hw: tuple, rng: np.random.Generator, *,
            photometric_strength: float = 1.0, geometric: bool = True,
            style_pool=None, style_p: float = 0.0) -> tuple:
    """One training example.

    Args:
        sample: dict described in the module doc (full frame).
        out_hw: ``(h, w)`` of the training crop.
        rng: numpy Generator.
        photometric_strength: 0 disables photometric degradations (validation).
        geometric: random crop/flip; False resizes the full frame (validation).
        style_pool: sequence of real ``h x w x 3`` sRGB float32 photographs; with
            probability ``style_p`` one of them restyles the input (:func:`fda_swap`,
            beta drawn from 0.008-0.02: 1-2 bins at training sizes; larger windows
            paint colour blotches). Targets are unchanged.

    Returns:
        ``(x, targets)``: ``3 x h x w`` float32 network input and dict of
        ``C x h x w`` float32 targets (:data:`TARGET_KEYS`).
    """
    if geometric:
        s = random_crop_resize(sample, out_hw, rng)
        if rng.random() < 0.5:
            s = flip_h(s)
    else:
        s = resize_sample(sample, out_hw)
    if photometric_strength > 0:
        style, beta = None, 0.03
        if style_pool is not None and len(style_pool) and rng.random() < style_p:
            style = style_pool[int(rng.integers(len(style_pool)))]
            beta = float(rng.uniform(0.008, 0.02))  # 1-2 frequency bins at 120-160 px
        e = photometric(s["combined"], rng, photometric_strength, style=style, style_beta=beta)
    else:
        rgb = np.maximum(s["combined"], 0)
        e = linear_to_srgb(rgb * auto_exposure_gain(rgb))
    x = ((e - INPUT_MEAN) / INPUT_STD).transpose(2, 0, 1)
    t = {}
    for k in TARGET_KEYS:
        v = s[k]
        if v.ndim == 2:
            v = v[..., None]
        t[k] = np.ascontiguousarray(v.transpose(2, 0, 1), dtype=np.float32)
    t["disparity"] = t["disparity"] * t["mask"]
    return np.ascontiguousarray(x, dtype=np.float32), t
