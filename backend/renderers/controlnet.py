"""ControlNet renderer: Stable Diffusion + MultiControlNet (depth + normal) via diffusers.

For free-form prompts ("a cyberpunk street at night"); needs a GPU for real use. The
G-buffer supplies the structure, the prompt the appearance:

* **Conditions** (one per ControlNet, :class:`diffusers.MultiControlNetModel`):

  - depth -> *normalised inverse depth* (disparity), ``(1/d - 1/d_max) / (1/d_min -
    1/d_max)`` over surface pixels (2nd/98th percentiles), near = white, sky = black;
    3 channels in ``[0, 1]``. This is the MiDaS convention that ``control_v11f1p_sd15_depth``
    was trained on.
  - normal -> the NormalBae convention of ``control_v11p_sd15_normalbae``: camera-space
    normal mapped ``rgb = (n' + 1) / 2`` with ``n' = (-x, y, z)`` of our OpenGL normal
    (red flipped: surfaces facing left are red); sky = (0.5, 0.5, 1). Option
    ``normal_convention="opengl"`` keeps ``+x`` for models trained that way.

* **img2img** (:class:`diffusers.StableDiffusionControlNetImg2ImgPipeline`) from an
  init image (``init="embedded"``: the embedded renderer's relight, using the prompt if
  it parses as looks, else the footage itself; ``"source"``: the source frame; ``"none"``:
  text-to-image with :class:`diffusers.StableDiffusionControlNetPipeline`) at
  ``strength``.
* **Temporal consistency** for per-frame diffusion:

  1. the same noise for every frame: the generator is re-seeded with ``seed`` before
     each frame (img2img noise and txt2img initial latents are identical frame to
     frame);
  2. the previous frame's *result* is warped into the current frame with optical flow
     (DIS on the source frames, forward-backward consistency,
     :mod:`backend.temporal`) and blended (weight ``temporal``) into the init image on
     consistent pixels; the pipeline VAE-encodes it, so the latent init carries the
     previous result;
  3. a flicker metric: mean absolute warping error (sRGB) between the result and the
     warped previous result on consistent pixels, in :attr:`last_info` (the job writes
     it per frame into the manifest).

Models load through ``from_pretrained`` with ``use_safetensors=True``, never
``trust_remote_code``, and ``local_files_only`` when offline (``HF_HUB_OFFLINE=1``) or
asked. Device ``auto`` = CUDA > MPS > CPU; fp16 on CUDA, fp32 elsewhere.

Output colour: SD works on display-referred sRGB; inputs are encoded with the sRGB
transfer (clipped to [0, 1]) and outputs decoded back to scene-linear Rec.709, so the
output range is [0, 1].
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

from ..errors import require_packages
from ..contract import GBufferFrame, surface_mask
from ..imaging import resize
from ..hub_cache import COMMAND, download_hint
from .base import Renderer, read_prompt
from .prompt import Look

DEFAULT_BASE_MODEL = "stable-diffusion-v1-5/stable-diffusion-v1-5"
DEFAULT_DEPTH_MODEL = "lllyasviel/control_v11f1p_sd15_depth"
DEFAULT_NORMAL_MODEL = "lllyasviel/control_v11p_sd15_normalbae"
DEFAULT_NEGATIVE = "blurry, low quality, distorted, deformed"
INIT_MODES = ("embedded", "source", "none")


def torch_device(name: Optional[str]):
    """``torch.device`` for a renderer's ``device`` option: ``None``/``auto`` (any case)
    picks cuda, mps or cpu, whichever exists
    (:func:`backend.estimators.marigold.auto_device`)."""
    import torch

    from ..estimators.marigold import auto_device

    return torch.device(auto_device((name or "auto").lower()))


class ModelNotAvailable(OSError):
    """A model could not be loaded (not in the local cache while offline, bad path...)."""


def _not_available(what: str, model: str, local: bool, e: Exception) -> ModelNotAvailable:
    """The error for a failed ``from_pretrained`` of ``what`` (e.g. "base model")."""
    if local and not Path(os.path.expanduser(model)).is_dir():
        return ModelNotAvailable(
            f"{what} {model!r} is not in the models folder (the Hugging Face cache); "
            f"{download_hint('controlnet')}, or pass a local folder")
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ModelNotAvailable(
        f"cannot load {what} {model!r} (local_files_only={local}): {reason}. Download it first "
        f"(`{COMMAND} controlnet`) or pass a local folder.")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def depth_condition(frame: GBufferFrame) -> np.ndarray:
    """Normalised inverse depth, ``H x W x 3`` float32 in ``[0, 1]`` (near = 1, sky = 0)."""
    d = np.maximum(frame.depth.astype(np.float32), 1e-6)
    surf = surface_mask(frame)
    inv = 1.0 / d
    if surf.any():
        lo, hi = np.percentile(inv[surf], [2.0, 98.0])
    else:
        lo, hi = float(inv.min()), float(inv.max())
    if hi - lo < 1e-12:
        hi = lo + 1e-12
    x = np.clip((inv - lo) / (hi - lo), 0.0, 1.0)
    x = np.where(surf, x, 0.0).astype(np.float32)
    return np.repeat(x[..., None], 3, axis=-1)


def normal_condition(frame: GBufferFrame, convention: str = "bae") -> np.ndarray:
    """Normal map image ``H x W x 3`` float32 in ``[0, 1]`` (see module docstring).

    Raises:
        ValueError: unknown ``convention`` (``bae`` or ``opengl``).
    """
    n = frame.normal.astype(np.float32)
    if convention == "bae":
        n = n * np.array([-1.0, 1.0, 1.0], np.float32)
    elif convention != "opengl":
        raise ValueError(f"normal_convention must be 'bae' or 'opengl', got {convention!r}")
    img = np.clip((n + 1.0) * 0.5, 0.0, 1.0)
    img[~surface_mask(frame)] = (0.5, 0.5, 1.0)
    return img.astype(np.float32)


def _round_to(x: float, m: int) -> int:
    return max(m, int(round(x / m)) * m)


class ControlNetRenderer(Renderer):
    """Stable Diffusion 1.5 + MultiControlNet (depth, normal), per frame, temporally chained.

    Args:
        base_model, depth_model, normal_model: model ids or local folders (diffusers
            layout, safetensors weights).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
        seed: noise seed (same noise every frame).
        steps: denoising steps; guidance_scale: classifier-free guidance.
        strength: img2img strength in (0, 1] (ignored for ``init="none"`` on frame 1).
        init: ``embedded`` | ``source`` | ``none`` (see module docstring).
        temporal: weight in [0, 1) of the warped previous result in the init image.
        conditioning_scale: ControlNet weights ``(depth, normal)``.
        negative_prompt: text to steer away from.
        max_size: long side of the processing resolution in pixels (rounded to what
            the UNet accepts); the result is resized back to the frame size.
        normal_convention: ``bae`` (default) or ``opengl``.
        local_files_only: ``None`` = only when ``HF_HUB_OFFLINE`` is set.
        dtype: ``auto`` (fp16 on CUDA; fp32 when the add-on's *Precision* preference is
            ``fp32``, :mod:`backend.precision`) | ``float32`` | ``float16``.

    Raises:
        ValueError: bad option values.
    """

    name = "controlnet"
    free_text_prompt = True
    uses_previous_output = True
    needs_gpu = True

    def __init__(self, *, base_model: str = DEFAULT_BASE_MODEL, depth_model: str = DEFAULT_DEPTH_MODEL,
                 normal_model: str = DEFAULT_NORMAL_MODEL, device: str = "auto", seed: int = 0,
                 steps: int = 20, guidance_scale: float = 7.5, strength: float = 0.75,
                 init: str = "embedded", temporal: float = 0.5,
                 conditioning_scale: Sequence[float] = (1.0, 0.8),
                 negative_prompt: str = DEFAULT_NEGATIVE, max_size: int = 768,
                 normal_convention: str = "bae", local_files_only: Optional[bool] = None,
                 dtype: str = "auto"):
        if init not in INIT_MODES:
            raise ValueError(f"init must be one of {INIT_MODES}, got {init!r}")
        if not 0.0 < float(strength) <= 1.0:
            raise ValueError(f"strength must be in (0, 1], got {strength}")
        if not 0.0 <= float(temporal) < 1.0:
            raise ValueError(f"temporal must be in [0, 1), got {temporal}")
        if int(steps) < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if len(tuple(conditioning_scale)) != 2:
            raise ValueError("conditioning_scale needs two values (depth, normal)")
        if normal_convention not in ("bae", "opengl"):
            raise ValueError(f"normal_convention must be 'bae' or 'opengl', got {normal_convention!r}")
        require_packages("the controlnet renderer", "torch", "diffusers")
        self.base_model, self.depth_model, self.normal_model = base_model, depth_model, normal_model
        self.device_name = device
        self.seed, self.steps = int(seed), int(steps)
        self.guidance_scale, self.strength = float(guidance_scale), float(strength)
        self.init, self.temporal = init, float(temporal)
        self.conditioning_scale = [float(x) for x in conditioning_scale]
        self.negative_prompt = negative_prompt
        self.max_size = int(max_size)
        self.normal_convention = normal_convention
        self.local_files_only = local_files_only
        from ..precision import resolve_dtype

        self.dtype_name = resolve_dtype(dtype)  # "auto" follows the add-on's Precision preference
        self._img2img = None
        self._txt2img = None
        self._device = None
        self._prev_src: Optional[np.ndarray] = None
        self._prev_index: Optional[int] = None
        self.last_info: Dict[str, Any] = {}

    # -- settings / metadata ---------------------------------------------------------------
    def settings(self) -> Dict[str, object]:
        return {"name": self.name, "version": 1, "base_model": self.base_model,
                "depth_model": self.depth_model, "normal_model": self.normal_model,
                "seed": self.seed, "steps": self.steps, "guidance_scale": self.guidance_scale,
                "strength": self.strength, "init": self.init, "temporal": self.temporal,
                "conditioning_scale": self.conditioning_scale,
                "negative_prompt": self.negative_prompt, "max_size": self.max_size,
                "normal_convention": self.normal_convention, "dtype": self.dtype_name}

    def describe(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> Dict[str, object]:
        """Loads the models (so missing ones fail before any output) and returns metadata
        (``looks`` is not used: the whole text is the diffusion prompt).

        Raises:
            ModelNotAvailable: a model cannot be loaded.
        """
        self._load()
        return {"prompt": prompt, "looks": [], "params": {"device": str(self._device),
                                                         **self.settings()}}

    # -- loading -------------------------------------------------------------------------------
    def _load(self):
        if self._img2img is not None:
            return
        import torch
        from diffusers import (ControlNetModel, StableDiffusionControlNetImg2ImgPipeline,
                               StableDiffusionControlNetPipeline)

        device = torch_device(self.device_name)
        if self.dtype_name == "auto":
            dtype = torch.float16 if device.type == "cuda" else torch.float32
        else:
            dtype = {"float32": torch.float32, "float16": torch.float16}[self.dtype_name]
        local = _offline() if self.local_files_only is None else bool(self.local_files_only)
        kw = dict(dtype=dtype, use_safetensors=True, local_files_only=local)
        nets = []
        for mid in (self.depth_model, self.normal_model):
            try:
                nets.append(ControlNetModel.from_pretrained(mid, **kw))
            except (OSError, ValueError) as e:
                raise _not_available("ControlNet", mid, local, e) from e
        try:
            pipe = StableDiffusionControlNetImg2ImgPipeline.from_pretrained(
                self.base_model, controlnet=nets, safety_checker=None, feature_extractor=None,
                requires_safety_checker=False, **kw)
        except (OSError, ValueError) as e:
            raise _not_available("base model", self.base_model, local, e) from e
        pipe = pipe.to(device)
        pipe.set_progress_bar_config(disable=True)
        self._img2img = pipe
        self._txt2img = StableDiffusionControlNetPipeline(**pipe.components).to(device)
        self._txt2img.set_progress_bar_config(disable=True)
        self._device = device
        self._dtype = dtype

    def _multiple(self) -> int:
        pipe = self._img2img
        vae_f = getattr(pipe, "vae_scale_factor", 8)
        return int(vae_f * 2 ** (len(pipe.unet.config.down_block_types) - 1))

    def processing_size(self, h: int, w: int) -> tuple:
        """``(ph, pw)``: the frame scaled so the long side is at most ``max_size``, rounded
        to the multiple the VAE and UNet need (64 for SD 1.5)."""
        self._load()
        m = self._multiple()
        s = min(1.0, self.max_size / max(h, w))
        return _round_to(h * s, m), _round_to(w * s, m)

    # -- rendering --------------------------------------------------------------------------------
    def _generator(self):
        import torch

        gen_device = "cpu" if self._device.type == "mps" else self._device
        return torch.Generator(device=gen_device).manual_seed(self.seed)

    def _init_image(self, frame: GBufferFrame, src: np.ndarray, prompt: str, looks: Optional[Sequence[Look]],
                    frame_index: int, time_s: float) -> Optional[np.ndarray]:
        """The img2img init (``H x W x 3`` float32 scene-linear) of the ``init`` mode, or
        ``None`` for text-to-image."""
        if self.init == "embedded":
            from .embedded import EmbeddedRenderer

            looks = read_prompt(prompt, self) if looks is None else looks
            return EmbeddedRenderer().render(frame, prompt, looks=looks, frame_index=frame_index, time_s=time_s)
        return src if self.init == "source" else None

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0,
               time_s: float = 0.0, prev: Optional[np.ndarray] = None,
               looks: Optional[Sequence[Look]] = None) -> np.ndarray:
        """Render one frame (see module docstring).

        Args:
            looks: the looks the prompt names (:func:`.base.read_prompt`; ``None``:
                parsed here), for the embedded init; ``()``: the footage (the embedded
                renderer with no look returns the plate, issue 39).
            prev: the previous frame's output (``H x W x 3`` scene-linear) for the
                temporal init; used when this renderer also saw the previous frame's
                source (otherwise, e.g. after a resume, the flow is unknown and it is
                ignored).

        Returns:
            ``H x W x 3`` float32 scene-linear Rec.709 in ``[0, 1]``.
        """
        import torch

        from .. import temporal as tmp
        from ..colour import linear_to_srgb, srgb_to_linear

        self._load()
        h, w = frame.shape
        ph, pw = self.processing_size(h, w)

        def to_proc(img):
            return resize(np.ascontiguousarray(img, np.float32), (pw, ph), "area" if pw < w else "linear")

        src = np.clip(frame.combined[..., :3].astype(np.float32), 0.0, None)
        conds = [to_proc(depth_condition(frame)), to_proc(normal_condition(frame, self.normal_convention))]
        conds_t = [torch.from_numpy(c).permute(2, 0, 1)[None].to(self._device, self._dtype) for c in conds]

        init = self._init_image(frame, src, prompt, looks, frame_index, time_s)
        info: Dict[str, Any] = {}
        warped = mask = None
        chained = (prev is not None and self._prev_src is not None and self._prev_index == frame_index - 1
                   and prev.shape == src.shape)
        if chained:
            pair = tmp.FlowPair.compute(self._prev_src, src)
            warped = tmp.warp(prev, pair.back)
            mask = pair.mask
            base = init if init is not None else warped
            if self.temporal > 0:
                blend = (1.0 - self.temporal) * base + self.temporal * warped
                init = np.where(mask[..., None], blend, base).astype(np.float32)
            else:
                init = base

        with torch.no_grad():
            common = dict(prompt=prompt, negative_prompt=self.negative_prompt,
                          num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                          controlnet_conditioning_scale=self.conditioning_scale,
                          generator=self._generator(), output_type="np", height=ph, width=pw)
            if init is None:
                lat_shape = (1, self._txt2img.unet.config.in_channels,
                             ph // self._txt2img.vae_scale_factor, pw // self._txt2img.vae_scale_factor)
                latents = torch.randn(lat_shape, generator=self._generator(),
                                      device=self._generator().device, dtype=torch.float32)
                latents = latents.to(self._device, self._dtype)
                out = self._txt2img(image=conds_t, latents=latents, **common).images[0]
            else:
                init_srgb = to_proc(np.clip(linear_to_srgb(np.clip(init, 0.0, 1.0)), 0.0, 1.0))
                init_t = torch.from_numpy(init_srgb).permute(2, 0, 1)[None].to(self._device, self._dtype)
                out = self._img2img(image=init_t, control_image=conds_t, strength=self.strength,
                                    **common).images[0]
        out = np.nan_to_num(np.asarray(out, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
        out = resize(np.clip(out, 0.0, 1.0), (w, h))
        rgb = np.clip(srgb_to_linear(out), 0.0, 1.0).astype(np.float32)

        if chained and mask is not None and mask.any():
            err = np.abs(linear_to_srgb(rgb) - linear_to_srgb(np.clip(warped, 0, 1))).mean(-1)[mask]
            info["flicker"] = round(float(err.mean()), 6)
            info["temporal_pixels"] = round(float(mask.mean()), 4)
        info["processing_size"] = [pw, ph]
        self.last_info = info
        self._prev_src = src
        self._prev_index = frame_index
        return rgb
