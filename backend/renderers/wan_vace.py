"""Wan2.1 VACE renderer: whole-clip video restyle conditioned on the G-buffers (diffusers).

Sources: Wan2.1 (Wan team, "Wan: Open and Advanced Large-Scale Video Generative Models",
arXiv:2503.20314) and VACE (Jiang et al., "VACE: All-in-One Video Creation and Editing",
arXiv:2503.07598), through :class:`diffusers.WanVACEPipeline` (``WanVACETransformer3DModel``,
``AutoencoderKLWan``, ``UMT5EncoderModel`` + a T5 tokenizer, a flow-matching scheduler).

Unlike the per-frame renderers this one renders a *window* of frames at once
(:attr:`Renderer.window`); the restyle job cuts the clip into overlapping windows and
blends the overlaps (:mod:`backend.jobs.restyle`). Within a window:

* **Control video** (VACE's ``video``; ``control=``):

  - ``depth`` (default; VACE was trained with depth controls): normalised inverse depth
    per frame, ``(1/d - lo) / (hi - lo)`` with ``lo, hi`` the 2nd/98th percentiles of
    ``1/d`` over surface pixels, near = white, sky = black, as a greyscale RGB image in
    ``[0, 1]`` (:func:`.controlnet.depth_condition`). Normalised per frame, so a clip
    whose depth range changes a lot will see its control brightness breathe.
  - ``normal``: camera-space normals as RGB, ``(n + 1) / 2`` of our OpenGL normal
    (+x right = red, +y up = green, +z towards the camera = blue), sky = (0.5, 0.5, 1)
    (:func:`.controlnet.normal_condition` with ``"opengl"``). VACE was not trained on
    normal maps; this is experimental.

  VACE takes one control video, so depth and normals are not combined in one run.
* **Reference image** (VACE's ``reference_images``; ``reference=``): the window's first
  frame as the source shows it (``source``: the G-buffer's Combined pass), or the
  embedded renderer's relight of it with the looks the prompt names (``embedded``), or
  none (``none``). VACE treats it as an appearance reference, not as an init image.
* **Strength**: ``WanVACEPipeline`` has no image-to-image partial denoising (every
  window starts from pure noise, so there is no SD-style img2img ``strength``). Here
  ``strength`` is VACE's ``conditioning_scale``: the weight of the control/reference
  stream added into the transformer's VACE layers (``0``: the prompt alone; ``1``: as
  trained; up to ``2``: follow the G-buffers harder).
* **Prompt**: encoded here with the pipeline's tokenizer and text encoder exactly as
  the pipeline does (padded to ``max_sequence_length``, embeddings past the prompt
  zeroed), without ``ftfy`` text repair. A prompt longer than the text encoder takes is
  truncated with a ``warning`` event naming the token counts. An empty prompt is
  allowed (the frames then follow the G-buffers and the reference), with a warning.
* **Noise**: each window's generator is seeded with ``seed``, so every window starts
  from the same noise (and a resumed window is bit-identical to the first run's).
* **Sizes**: the frame is padded (edge replication) to the multiple the model needs
  (VAE spatial factor x transformer patch, 16 for Wan2.1) and the window to ``4k + 1``
  frames (the VAE's temporal factor 4) by repeating its last frame; the output is
  cropped back to exactly the input's frames and pixels. Nothing is resized.
* **Scheduler shift** (``flow_shift``): the flow-matching shift of the sigma schedule.
  ``auto`` takes diffusers' Wan example values by the padded frame size: 3.0 up to 480p
  (short side <= 480), 5.0 above (720p); :func:`flow_shift_for`. The model's scheduler
  is rebuilt from its own config with that shift (``from_config(..., flow_shift=)``).

Colour: Wan works on display-referred sRGB; the reference is encoded with the sRGB
transfer (clipped to [0, 1]), the output decoded back to scene-linear Rec.709 in [0, 1].

Models: a diffusers folder (``model_index.json`` with ``_class_name`` ``WanVACEPipeline``)
given as a local folder or a Hugging Face repo id looked up in the models folder (the
Hugging Face cache layout, :func:`backend.catalog.models_folder`). Loaded with
``use_safetensors=True``, never ``trust_remote_code``; a snapshot found in the models
folder is loaded from disk (offline); a missing one is refused in one line when offline
(``HF_HUB_OFFLINE``) or ``local_files_only``. Memory: ``cpu_offload`` (diffusers'
``enable_model_cpu_offload``), ``vae_tiling``, ``vae_slicing``, ``window`` (frames per
window); dtype ``auto`` = bf16 on CUDA when supported (else fp16), fp32 elsewhere; the VAE
stays in fp32 (as the diffusers Wan examples load it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .. import events
from ..contract import GBufferFrame
from ..errors import require_packages
from .base import Renderer, read_prompt
from .controlnet import ModelNotAvailable, depth_condition, normal_condition, torch_device
from .prompt import Look

DEFAULT_MODEL = "Wan-AI/Wan2.1-VACE-1.3B-diffusers"
#: ``model_index.json`` ``_class_name`` of a folder this renderer can load
PIPELINE_CLASS = "WanVACEPipeline"
TRANSFORMER_CLASS = "WanVACETransformer3DModel"
DEFAULT_NEGATIVE = "blurry, low quality, distorted, flicker, static"
CONTROLS = ("depth", "normal")
REFERENCES = ("source", "embedded", "none")
#: Wan's VAE temporal compression: a window is padded to ``4k + 1`` frames
TEMPORAL_FACTOR = 4


class ModelMismatch(ModelNotAvailable):
    """The model folder holds another model's files (e.g. Stable Diffusion, plain Wan T2V)."""


class OutOfMemory(RuntimeError):
    """The device ran out of memory rendering a window; the message names what to lower."""


def _offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def pad_to_multiple(img: np.ndarray, multiple: int) -> np.ndarray:
    """``H x W x C`` padded at the bottom/right by edge replication so both sides are
    multiples of ``multiple`` (unchanged when they already are)."""
    h, w = img.shape[:2]
    ph, pw = -h % multiple, -w % multiple
    if not (ph or pw):
        return img
    return np.pad(img, ((0, ph), (0, pw)) + ((0, 0),) * (img.ndim - 2), mode="edge")


def temporal_length(n: int, factor: int = TEMPORAL_FACTOR) -> int:
    """The smallest ``factor * k + 1 >= n`` (frames the Wan VAE takes)."""
    return ((max(1, n) - 1 + factor - 1) // factor) * factor + 1


def out_of_memory_error(e: BaseException, what: str) -> Optional[OutOfMemory]:
    """An :class:`OutOfMemory` naming the settings to lower when ``e`` is an
    out-of-memory error (``torch.cuda.OutOfMemoryError``, a RuntimeError saying so, a
    host ``MemoryError``), else ``None``."""
    import torch

    oom = isinstance(e, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e).lower())
    if not oom:
        return None
    return OutOfMemory(f"out of device memory rendering {what}; lower --option window=N (frames per window) "
                       "or set --option cpu_offload=true vae_tiling=true (frames already written are kept)")


def check_model_folder(folder: Path, model: str) -> None:
    """Refuse a folder that holds another model's files.

    Raises:
        ModelMismatch: no ``model_index.json``, or its ``_class_name`` is not
            ``WanVACEPipeline``, or ``transformer/config.json`` names another class;
            the message names what was found and what is needed.
    """
    index = folder / "model_index.json"
    if not index.is_file():
        raise ModelMismatch(f"model {model!r} ({folder}) has no model_index.json: not a diffusers "
                            f"{PIPELINE_CLASS} folder")
    try:
        found = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelMismatch(f"model {model!r}: cannot read {index}: {e}") from e
    if found != PIPELINE_CLASS:
        raise ModelMismatch(f"model {model!r} ({folder}) holds a {found} (model_index.json), not the "
                            f"{PIPELINE_CLASS} the wan-vace renderer needs; download {DEFAULT_MODEL} or "
                            "point --option model= at a Wan VACE folder")
    cfg = folder / "transformer" / "config.json"
    try:
        tclass = json.loads(cfg.read_text()).get("_class_name") if cfg.is_file() else None
    except (OSError, ValueError, AttributeError):
        tclass = None
    if tclass is not None and tclass != TRANSFORMER_CLASS:
        raise ModelMismatch(f"model {model!r} ({folder}): its transformer is a {tclass}, not the "
                            f"{TRANSFORMER_CLASS} a {PIPELINE_CLASS} needs")


def resolve_model(model: str, cache_dir: Optional[os.PathLike], local: bool) -> Optional[Path]:
    """The local folder of ``model``: the folder itself, or the snapshot of repo id
    ``model`` that ``refs/main`` names in the models folder
    (:func:`backend.hub_cache.cached_snapshot`); ``None`` when not there and ``local`` is
    false (it may then be downloaded by ``from_pretrained``).

    Raises:
        ModelNotAvailable: not there and ``local`` (one line naming the model and how to
            download it).
    """
    p = Path(os.path.expanduser(model))
    if p.is_dir():
        return p
    from ..catalog import models_folder
    from ..hub_cache import cached_snapshot, download_hint

    root = models_folder(cache_dir)
    snap = cached_snapshot(root, model) if "/" in model else None
    if snap is not None:
        return snap
    if local:
        raise ModelNotAvailable(f"model {model!r} is not in the models folder ({root}); "
                                f"{download_hint('wan-vace')} (offline: nothing is downloaded)")
    return None


#: diffusers' Wan example (``flow_shift = 5.0  # 5.0 for 720P, 3.0 for 480P``)
FLOW_SHIFT_480P, FLOW_SHIFT_720P = 3.0, 5.0


def flow_shift_for(height: int, width: int) -> float:
    """The scheduler shift for a ``height x width`` (padded) video: 3.0 at 480p and below
    (short side <= 480 px), 5.0 above, as diffusers' Wan examples set it."""
    return FLOW_SHIFT_480P if min(int(height), int(width)) <= 480 else FLOW_SHIFT_720P


class WanVaceRenderer(Renderer):
    """Wan2.1 VACE video restyle of whole windows of frames (see the module docstring).

    Args:
        model: repo id (looked up in the models folder) or local diffusers folder.
        device: ``auto`` (CUDA > MPS > CPU), ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
        seed: noise seed (the same noise for every window).
        steps: denoising steps (>= 1); guidance_scale: classifier-free guidance (> 1
            runs the negative prompt too; <= 1: off).
        strength: VACE ``conditioning_scale`` in ``[0, 2]`` (see the module docstring).
        control: ``depth`` | ``normal``; reference: ``source`` | ``embedded`` | ``none``.
        window: frames per window (>= 1); the job blends ``overlap`` frames (``0 <=
            overlap < window``) between neighbouring windows.
        negative_prompt: text to steer away from (with guidance).
        max_sequence_length: text tokens (capped to the tokenizer's ``model_max_length``).
        cpu_offload, vae_tiling, vae_slicing: diffusers memory options.
        dtype: ``auto`` | ``float32`` | ``float16`` | ``bfloat16`` (transformer and text
            encoder; the VAE stays fp32).
        local_files_only: ``None`` = when ``HF_HUB_OFFLINE`` is set.
        cache_dir: the models folder (default :func:`backend.catalog.models_folder`).

    Raises:
        ValueError: bad option values.
    """

    name = "wan-vace"
    free_text_prompt = True
    needs_gpu = True
    window = 33
    window_overlap = 8

    def __init__(self, *, model: str = DEFAULT_MODEL, device: str = "auto", seed: int = 0, steps: int = 30,
                 guidance_scale: float = 5.0, strength: float = 1.0, control: str = "depth",
                 reference: str = "source", window: int = 33, overlap: int = 8,
                 negative_prompt: str = DEFAULT_NEGATIVE, max_sequence_length: int = 512,
                 cpu_offload: bool = False, vae_tiling: bool = False, vae_slicing: bool = False,
                 dtype: str = "auto", local_files_only: Optional[bool] = None,
                 cache_dir: Optional[str] = None, flow_shift: Any = "auto"):
        if control not in CONTROLS:
            raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
        if not 0.0 <= float(strength) <= 2.0:
            raise ValueError(f"strength (VACE conditioning scale) must be in [0, 2], got {strength}")
        if int(steps) < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if int(window) < 1 or not 0 <= int(overlap) < int(window):
            raise ValueError(f"window must be >= 1 and 0 <= overlap < window, got window={window}, "
                             f"overlap={overlap}")
        if int(max_sequence_length) < 1:
            raise ValueError(f"max_sequence_length must be >= 1, got {max_sequence_length}")
        if dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32, float16 or bfloat16, got {dtype!r}")
        if flow_shift not in ("auto", None, ""):
            try:
                flow_shift = float(flow_shift)
            except (TypeError, ValueError):
                raise ValueError(f"flow_shift must be auto or a number > 0, got {flow_shift!r}") from None
            if not flow_shift > 0:
                raise ValueError(f"flow_shift must be auto or a number > 0, got {flow_shift!r}")
        self.flow_shift = "auto" if flow_shift in ("auto", None, "") else flow_shift
        require_packages("the wan-vace renderer", "torch", "diffusers", "transformers")
        from ..precision import resolve_dtype

        self.model, self.device_name = model, device
        self.seed, self.steps = int(seed), int(steps)
        self.guidance_scale, self.strength = float(guidance_scale), float(strength)
        self.control, self.reference = control, reference
        self.window, self.window_overlap = int(window), int(overlap)
        self.negative_prompt = negative_prompt
        self.max_sequence_length = int(max_sequence_length)
        self.cpu_offload, self.vae_tiling, self.vae_slicing = bool(cpu_offload), bool(vae_tiling), bool(vae_slicing)
        self.dtype_name = resolve_dtype(dtype)
        self.local_files_only, self.cache_dir = local_files_only, cache_dir
        self._pipe = None
        self._device = None
        self._folder: Optional[Path] = None
        self._embeds: Dict[str, Any] = {}
        self.last_info: Dict[str, Any] = {}

    # -- settings / metadata ---------------------------------------------------------------
    def settings(self) -> Dict[str, object]:
        return {"name": self.name, "version": 1, "model": self.model, "seed": self.seed, "steps": self.steps,
                "guidance_scale": self.guidance_scale, "strength": self.strength, "control": self.control,
                "reference": self.reference, "window": self.window, "overlap": self.window_overlap,
                "negative_prompt": self.negative_prompt, "max_sequence_length": self.max_sequence_length,
                "dtype": self.dtype_name, "flow_shift": self.flow_shift}

    def describe(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> Dict[str, object]:
        """Loads the model (a missing or mismatched one fails before any output) and
        encodes the prompt once (warning when it is empty or truncated).

        Raises:
            ModelNotAvailable, ModelMismatch: see the module docstring.
        """
        self._load()
        self._prompt_embeds(prompt)
        return {"prompt": prompt, "looks": [], "params": {"device": str(self._device), **self.settings()}}

    # -- loading -------------------------------------------------------------------------------
    def _torch_dtype(self, device):
        import torch

        if self.dtype_name == "auto":
            if device.type == "cuda":
                return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.float32
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[self.dtype_name]

    def _load(self):
        if self._pipe is not None:
            return
        import torch
        from diffusers import AutoencoderKLWan, WanVACEPipeline

        local = _offline() if self.local_files_only is None else bool(self.local_files_only)
        folder = resolve_model(self.model, self.cache_dir, local)
        if folder is not None:
            check_model_folder(folder, self.model)
        device = torch_device(self.device_name)
        dtype = self._torch_dtype(device)
        src = str(folder) if folder is not None else self.model
        kw = dict(use_safetensors=True, local_files_only=folder is not None or local)
        if folder is None:
            from ..catalog import models_folder

            kw["cache_dir"] = str(models_folder(self.cache_dir))
        try:
            vae = AutoencoderKLWan.from_pretrained(src, subfolder="vae", dtype=torch.float32, **kw)
            pipe = WanVACEPipeline.from_pretrained(src, vae=vae, dtype=dtype, **kw)
        except (OSError, ValueError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelNotAvailable(f"cannot load model {self.model!r} ({src}): {reason}") from e
        if folder is None:  # downloaded just now: check what came
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(self.model, cache_dir=kw["cache_dir"], local_files_only=True))
            check_model_folder(folder, self.model)
        if self.cpu_offload and device.type != "cpu":
            pipe.enable_model_cpu_offload(device=device)
        else:
            pipe = pipe.to(device)
        if self.vae_tiling:
            pipe.vae.enable_tiling()
        if self.vae_slicing:
            pipe.vae.enable_slicing()
        pipe.set_progress_bar_config(disable=True)
        self._pipe, self._device, self._dtype, self._folder = pipe, device, dtype, folder

    def _set_flow_shift(self, height: int, width: int) -> Optional[float]:
        """Rebuild the pipeline's scheduler from its config with the shift for this size
        (:func:`flow_shift_for`, or the ``flow_shift`` option); returns the shift in use
        (``None`` for a scheduler without one)."""
        sched = self._pipe.scheduler
        if "flow_shift" not in sched.config:
            return None
        shift = flow_shift_for(height, width) if self.flow_shift == "auto" else float(self.flow_shift)
        if float(sched.config["flow_shift"]) != shift:
            self._pipe.scheduler = type(sched).from_config(sched.config, flow_shift=shift)
        return shift

    def spatial_multiple(self) -> int:
        """Pixels both frame sides are padded to a multiple of (VAE spatial factor x patch)."""
        self._load()
        p = self._pipe
        return int(p.vae_scale_factor_spatial * p.transformer.config.patch_size[1])

    # -- prompt ----------------------------------------------------------------------------------
    def _seq_len(self) -> int:
        tok_max = getattr(self._pipe.tokenizer, "model_max_length", None) or self.max_sequence_length
        return int(min(self.max_sequence_length, tok_max if tok_max < 10 ** 6 else self.max_sequence_length))

    def _prompt_embeds(self, text: str, warn: bool = True):
        """``(1, L, D)`` text embeddings of ``text`` as the pipeline computes them (cached);
        with ``warn``, a ``warning`` event when ``text`` is empty or longer than ``L``
        tokens (then truncated to the first ``L``)."""
        if text in self._embeds:
            return self._embeds[text]
        import re

        import torch

        pipe = self._pipe
        length = self._seq_len()
        clean = re.sub(r"\s+", " ", text or "").strip()
        n_tokens = len(pipe.tokenizer(clean, add_special_tokens=True, verbose=False).input_ids)
        if warn and not clean:
            events.warning("empty prompt: the wan-vace frames follow the G-buffers and the reference only")
        elif warn and n_tokens > length:
            events.warning(f"prompt is {n_tokens} tokens; the wan-vace text encoder takes {length}: truncated "
                           f"to the first {length} tokens")
        ti = pipe.tokenizer([clean], padding="max_length", max_length=length, truncation=True,
                            add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        te = pipe.text_encoder
        dev = next(te.parameters()).device
        with torch.no_grad():
            emb = te(ti.input_ids.to(dev), ti.attention_mask.to(dev)).last_hidden_state
        n = int(ti.attention_mask.sum())
        emb = emb.clone()
        emb[:, n:] = 0  # as the pipeline: embeddings past the prompt are zero
        self._embeds[text] = emb.to(self._dtype)
        return self._embeds[text]

    # -- rendering --------------------------------------------------------------------------------
    def _control_image(self, frame: GBufferFrame) -> np.ndarray:
        if self.control == "depth":
            return depth_condition(frame)
        return normal_condition(frame, "opengl")

    def _reference_image(self, frame: GBufferFrame, prompt: str, looks, index: int, time_s: float):
        if self.reference == "none":
            return None
        if self.reference == "embedded":
            from .embedded import EmbeddedRenderer

            looks = read_prompt(prompt, self) if looks is None else looks
            return EmbeddedRenderer().render(frame, prompt, looks=looks, frame_index=index, time_s=time_s)
        return np.clip(frame.combined[..., :3].astype(np.float32), 0.0, None)

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0, time_s: float = 0.0,
               prev: Optional[np.ndarray] = None, looks: Optional[Sequence[Look]] = None) -> np.ndarray:
        """One frame as a window of one (a still); the job uses :meth:`render_window`."""
        return self.render_window([frame], prompt, frame_indices=[frame_index], times_s=[time_s], looks=looks)[0]

    def render_window(self, frames: Sequence[GBufferFrame], prompt: str, *,
                      frame_indices: Optional[Sequence[int]] = None, times_s: Optional[Sequence[float]] = None,
                      looks: Optional[Sequence[Look]] = None) -> List[np.ndarray]:
        """Render a window of frames as one video.

        Args:
            frames: ``T >= 1`` contract frames of the same ``H x W``, in clip order.
            prompt: free text (see the module docstring for truncation).
            frame_indices, times_s: 0-based clip indices and times of the frames (the
                embedded reference uses them).

        Returns:
            ``T`` arrays ``H x W x 3`` float32 scene-linear Rec.709 in ``[0, 1]``.

        Raises:
            ValueError: no frames, or frames of different sizes.
            OutOfMemory: the device ran out of memory (one line naming what to lower).
        """
        import torch
        from PIL import Image

        from ..colour import linear_to_srgb, srgb_to_linear

        if not frames:
            raise ValueError("render_window needs at least one frame")
        h, w = frames[0].shape
        if any(f.shape != (h, w) for f in frames):
            raise ValueError("all frames of a window must have the same size")
        idx = list(frame_indices) if frame_indices is not None else list(range(len(frames)))
        times = list(times_s) if times_s is not None else [0.0] * len(frames)
        self._load()
        m = self.spatial_multiple()

        def to_pil(img01: np.ndarray) -> "Image.Image":
            img = pad_to_multiple(np.clip(img01, 0.0, 1.0), m)
            return Image.fromarray(np.round(img * 255.0).astype(np.uint8), "RGB")

        video = [to_pil(self._control_image(f)) for f in frames]
        n_real = len(video)
        n_frames = temporal_length(n_real)
        video += [video[-1]] * (n_frames - n_real)
        ref = self._reference_image(frames[0], prompt, looks, idx[0], times[0])
        refs = [to_pil(linear_to_srgb(np.clip(ref, 0.0, 1.0)))] if ref is not None else None
        ph, pw = video[0].height, video[0].width
        gen_device = "cpu" if self._device.type == "mps" else self._device
        generator = torch.Generator(device=gen_device).manual_seed(self.seed)
        emb = self._prompt_embeds(prompt)
        neg = self._prompt_embeds(self.negative_prompt, warn=False) if self.guidance_scale > 1.0 else None
        shift = self._set_flow_shift(ph, pw)
        what = f"a window of {n_real} frames at {w}x{h} (padded to {n_frames} frames at {pw}x{ph})"
        try:
            with torch.no_grad():
                out = self._pipe(prompt_embeds=emb, negative_prompt_embeds=neg, video=video,
                                 reference_images=refs, conditioning_scale=self.strength, height=ph, width=pw,
                                 num_frames=n_frames, num_inference_steps=self.steps,
                                 guidance_scale=self.guidance_scale, generator=generator, output_type="np",
                                 max_sequence_length=emb.shape[1]).frames[0]
        except (RuntimeError, MemoryError) as e:
            err = out_of_memory_error(e, what)
            if err is None:
                raise
            if self._device.type == "cuda":
                torch.cuda.empty_cache()
            raise err from e
        out = np.asarray(out, dtype=np.float32)[:n_real, :h, :w]
        out = np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=0.0)
        rgb = np.clip(srgb_to_linear(np.clip(out, 0.0, 1.0)), 0.0, 1.0).astype(np.float32)
        self.last_info = {"processing_size": [pw, ph], "window_frames": n_frames, "flow_shift": shift}
        return [np.ascontiguousarray(f) for f in rgb]
