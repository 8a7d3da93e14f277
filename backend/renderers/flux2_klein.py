"""FLUX.2 [klein] renderer: a composition-keeping "photoreal" img2img restyle per frame.

The "photoreal" stage of a sim-to-real pipeline: each frame's init image (the embedded
renderer's relight of the G-buffers, or the source frame) is re-rendered by
FLUX.2 [klein] 4B (``black-forest-labs/FLUX.2-klein-4B``, Apache-2.0, a step-distilled
4B rectified-flow transformer with a Qwen3-4B text encoder; model card:
https://huggingface.co/black-forest-labs/FLUX.2-klein-4B, licence table:
https://github.com/black-forest-labs/flux2) with few steps, so it keeps the layout and
changes the look.

img2img (what is done, precisely)
---------------------------------
diffusers' :class:`~diffusers.Flux2KleinPipeline` (0.42.1,
``diffusers/pipelines/flux2/pipeline_flux2_klein.py``) is text-to-image with optional
reference images; it has no ``strength``. Its documented ``latents=`` and ``sigmas=``
arguments are enough for an honest img2img, following the convention of diffusers' own
``Flux2KleinInpaintPipeline.get_timesteps`` / ``scale_noise`` (SD3 img2img):

1. the init image (sRGB-encoded, padded, in ``[-1, 1]``) is encoded by the pipeline's
   own ``_encode_vae_image`` (VAE mode, 2x2 patchify, the VAE's latent batch-norm
   statistics): ``x0`` of shape ``(1, 4 * latent_channels, H / 16, W / 16)``, the shape
   ``latents=`` takes;
2. the pipeline's schedule for ``steps`` = N is ``sigmas = linspace(1, 1/N, N)``, shifted
   by the scheduler with ``mu = compute_empirical_mu(image_seq_len, N)``; img2img keeps
   its last ``N - t_start`` entries, ``t_start = int(N - N * strength)``,
   ``tail = sigmas[t_start:]`` (passed as ``sigmas=`` with ``num_inference_steps=N`` so
   ``mu`` is the same and the shifted tail equals the tail of the full shifted schedule;
   checked, and refused for scheduler configs where it would not be);
3. ``s0`` = the first *shifted* sigma of the tail (read from the scheduler), and the start
   latent is the flow-matching interpolation ``x_s0 = (1 - s0) * x0 + s0 * noise``
   (``FlowMatchEulerDiscreteScheduler.scale_noise``); ``noise`` is drawn from a
   generator seeded with ``seed`` before every frame: the same noise every frame;
4. the pipeline denoises from ``x_s0`` over the remaining ``N - t_start`` steps and
   decodes. ``strength = 1`` is text-to-image (``s0 = 1``); ``strength = 0`` runs no
   step: the output is the init image itself (clipped to ``[0, 1]``), no model call.

``reference=True`` also hands the init image to the pipeline as a reference image
(``image=``, Klein's editing path: its latents join the sequence with their own position
ids), which ties the result more closely to the init at about twice the cost; frames must
then be at least 64 px on each side (the pipeline's ``check_image_input``).

Prompt: the user's text followed by ``suffix`` (default :data:`DEFAULT_SUFFIX`, an
instruction to keep composition, camera and objects). An empty prompt becomes
:data:`EMPTY_PROMPT` (with a warning event). Text longer than the text encoder's
``max_sequence_length`` (512 Qwen3 tokens including the chat markup the pipeline adds)
is cut at a token boundary, keeping the suffix, with a warning event; the pipeline itself
would cut silently.

Temporal help: as :mod:`.controlnet` does, the previous frame's *result* is warped into
the current frame with optical flow (DIS on the source frames, forward-backward
consistency, :mod:`backend.temporal`) and blended (weight ``temporal``) into the init on
consistent pixels; with the same noise every frame this keeps the look steady. A
flicker metric (mean absolute sRGB warping error on consistent pixels) goes to
:attr:`last_info`. After a resume the first resumed frame starts a new chain (the
previous source is not known).

Size: the frame is padded (reflected) at the bottom and right to the multiple the model
needs (``2 * vae_scale_factor`` = 16 for the real model) and the result cropped back: the
output is the frame's size, never resized.

Models: the Hugging Face cache layout in the models folder (:func:`backend.catalog.models_folder`),
or a local folder; always ``local_files_only=True`` (the renderer never downloads),
``use_safetensors=True``, never ``trust_remote_code``. A folder holding another model
(``model_index.json`` ``_class_name`` is not ``Flux2KleinPipeline``) is refused naming both.

Precision and memory: ``dtype="auto"`` = bfloat16 on CUDA (the model card's dtype),
float32 elsewhere (or float32 when the add-on's Precision preference is fp32);
``cpu_offload`` (CUDA: ``enable_model_cpu_offload``; the init image then goes to the
pipeline's execution device, :func:`init_device`), ``vae_tiling``. A CUDA
out-of-memory error stops the job with one line naming those settings; frames already
written are kept.

Colour: the model works on display-referred sRGB; the init is encoded with the sRGB
transfer (clipped to ``[0, 1]``) and the output decoded back to scene-linear Rec.709
(:mod:`backend.colour`), so the output range is ``[0, 1]``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from .. import events
from ..errors import InputError, JobError, require_packages
from ..contract import GBufferFrame
from ..hub_cache import download_hint
from .base import Renderer, read_prompt
from .controlnet import ModelNotAvailable, torch_device
from .prompt import Look

DEFAULT_MODEL = "black-forest-labs/FLUX.2-klein-4B"
PIPELINE_CLASS = "Flux2KleinPipeline"
#: component folder -> the class the pipeline needs there (checked before loading)
COMPONENT_CLASSES = {"transformer": "Flux2Transformer2DModel", "vae": "AutoencoderKLFlux2"}
#: what Preferences > Models downloads of the repository: the diffusers folders only (safetensors),
#: not the single-file checkpoints at its top level
DOWNLOAD_FILES = ("model_index.json", "*/*.json", "*/*.txt", "*/*.jinja", "*/*.safetensors", "tokenizer/*")
DEFAULT_SUFFIX = ("Keep the exact composition, camera angle, framing, layout and every object in place; "
                  "change only materials, lighting and surface detail to look like a real photograph.")
EMPTY_PROMPT = "A photorealistic photograph of this scene."
INIT_MODES = ("embedded", "source")
DTYPES = ("auto", "float32", "float16", "bfloat16")


class ModelMismatch(InputError):
    """The model folder holds another model's files (exit code 2 on the command line)."""


def _snapshot(repo_id: str, models_dir: Optional[Path]) -> Optional[Path]:
    """The snapshot folder of ``repo_id`` that ``refs/main`` names in the models folder
    (:func:`backend.hub_cache.cached_snapshot`), or ``None``."""
    from ..hub_cache import cached_snapshot

    return cached_snapshot(models_dir, repo_id)


def check_model_folder(folder: Path, model: str) -> None:
    """Refuse a folder that holds another model's files.

    Raises:
        ModelMismatch: ``model_index.json`` names another pipeline class, is missing (a
            single-model folder's ``config.json`` class is named), or a component's
            ``config.json`` names another class than :data:`COMPONENT_CLASSES`.
    """
    index = folder / "model_index.json"
    if not index.is_file():
        cls = "no model_index.json"
        try:
            cls = "a " + json.loads((folder / "config.json").read_text())["_class_name"] + " (config.json)"
        except (OSError, ValueError, KeyError, TypeError):
            pass
        raise ModelMismatch(f"model folder {folder} for {model!r} holds {cls}, not a FLUX.2 [klein] "
                            f"pipeline ({PIPELINE_CLASS})", file=folder)
    try:
        cls = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelMismatch(f"{index}: unreadable model_index.json ({e})", file=index) from e
    if cls != PIPELINE_CLASS:
        raise ModelMismatch(f"model folder {folder} for {model!r} holds a {cls} (model_index.json), "
                            f"not a FLUX.2 [klein] pipeline ({PIPELINE_CLASS})", file=index)
    for sub, want in COMPONENT_CLASSES.items():
        cfg = folder / sub / "config.json"
        try:
            got = json.loads(cfg.read_text()).get("_class_name")
        except (OSError, ValueError, AttributeError):
            continue  # a missing component is reported by the loader, naming it
        if got != want:
            raise ModelMismatch(f"{cfg}: the {sub} is a {got}, but {PIPELINE_CLASS} needs a {want} "
                                "(files of another model in this folder?)", file=cfg)


def init_device(pipe, device):
    """Where the init image goes before ``vae.encode``: the pipeline's execution device
    (``DiffusionPipeline._execution_device``, as diffusers' own pipelines do), which under
    ``enable_model_cpu_offload`` is the accelerator the VAE's hook moves it to, not the
    CPU its parameters wait on between calls (``vae.encode`` moves the module, never its
    argument). ``device`` when the pipeline has no hooks."""
    try:
        return pipe._execution_device
    except Exception:  # noqa: BLE001 - a pipeline without the property: where it was moved
        return device


def pad_to_multiple(img: np.ndarray, m: int) -> Tuple[np.ndarray, Tuple[int, int]]:
    """Pad ``img`` (``H x W x C``) at the bottom and right to multiples of ``m`` (reflected;
    edge-replicated where the frame is smaller than the pad). Returns ``(padded, (H, W))``;
    ``padded[:H, :W]`` is ``img`` exactly."""
    h, w = img.shape[:2]
    ph, pw = (-h) % m, (-w) % m
    if not ph and not pw:
        return img, (h, w)
    mode = "reflect" if ph < h and pw < w else "edge"
    return np.pad(img, ((0, ph), (0, pw), (0, 0)), mode=mode), (h, w)


def img2img_schedule(steps: int, strength: float) -> Tuple[np.ndarray, int]:
    """``(tail, t_start)``: the unshifted sigmas ``linspace(1, 1/steps, steps)[t_start:]``
    that img2img at ``strength`` runs (``t_start = int(steps - steps * strength)``; the
    diffusers img2img convention, ``Flux2KleinInpaintPipeline.get_timesteps``)."""
    base = np.linspace(1.0, 1.0 / steps, steps)
    t_start = int(max(steps - min(steps * strength, steps), 0))
    return base[t_start:], t_start


class Flux2KleinRenderer(Renderer):
    """FLUX.2 [klein] img2img per frame, temporally chained (see the module docstring).

    Args:
        model: hub repo id (looked up in the models folder) or a local pipeline folder.
        models_dir: the models folder (Hugging Face cache layout); default
            :func:`backend.catalog.models_folder`.
        device: ``auto`` (CUDA > MPS > CPU), ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
        seed: noise seed (the same noise every frame).
        steps: schedule length N (the distilled model is made for 4).
        strength: in ``[0, 1]``; the fraction of the N-step schedule run from the noised
            init (0: the init unchanged, 1: text-to-image).
        init: ``embedded`` (the embedded renderer's relight, using the prompt's looks if
            it names any) or ``source`` (the source frame, ``combined``).
        temporal: weight in ``[0, 1)`` of the flow-warped previous result in the init.
        guidance_scale: classifier-free guidance; ignored by the distilled model (1.0).
        reference: also pass the init as a reference image (Klein's editing path).
        suffix: text appended to the prompt ("" for none).
        max_sequence_length: text encoder tokens (the pipeline's 512).
        dtype: ``auto`` | ``float32`` | ``float16`` | ``bfloat16``.
        cpu_offload: move each model to the GPU only while it runs (CUDA; on the CPU the same
            offload hooks run with the CPU as execution device, which gains nothing: the
            tests' stand-in for a GPU).
        vae_tiling: decode/encode the VAE in tiles (less memory for large frames).

    Raises:
        ValueError: bad option values.
        MissingPackagesError: torch or diffusers missing.
    """

    name = "flux2-klein"
    free_text_prompt = True
    uses_previous_output = True
    needs_gpu = True

    def __init__(self, *, model: str = DEFAULT_MODEL, models_dir: Optional[str] = None, device: str = "auto",
                 seed: int = 0, steps: int = 4, strength: float = 0.5, init: str = "embedded",
                 temporal: float = 0.5, guidance_scale: float = 1.0, reference: bool = False,
                 suffix: str = DEFAULT_SUFFIX, max_sequence_length: int = 512, dtype: str = "auto",
                 cpu_offload: bool = False, vae_tiling: bool = False):
        if init not in INIT_MODES:
            raise ValueError(f"init must be one of {INIT_MODES}, got {init!r}")
        if not 0.0 <= float(strength) <= 1.0:
            raise ValueError(f"strength must be in [0, 1], got {strength}")
        if not 0.0 <= float(temporal) < 1.0:
            raise ValueError(f"temporal must be in [0, 1), got {temporal}")
        if int(steps) < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if int(max_sequence_length) < 16:
            raise ValueError(f"max_sequence_length must be >= 16, got {max_sequence_length}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        require_packages("the flux2-klein renderer", "torch", "diffusers", "transformers")
        from ..catalog import models_folder
        from ..precision import resolve_dtype

        self.model = str(model)
        self.models_dir = Path(models_dir) if models_dir else models_folder()
        self.device_name = device
        self.seed, self.steps, self.strength = int(seed), int(steps), float(strength)
        self.init, self.temporal = init, float(temporal)
        self.guidance_scale, self.reference = float(guidance_scale), bool(reference)
        self.suffix = str(suffix or "")
        self.max_sequence_length = int(max_sequence_length)
        self.dtype_name = resolve_dtype(dtype)
        self.cpu_offload, self.vae_tiling = bool(cpu_offload), bool(vae_tiling)
        self._pipe = None
        self._device = None
        self._texts: Dict[str, str] = {}
        self._prev_src: Optional[np.ndarray] = None
        self._prev_index: Optional[int] = None
        self.last_info: Dict[str, Any] = {}

    # -- settings / metadata ---------------------------------------------------------------
    def settings(self) -> Dict[str, object]:
        return {"name": self.name, "version": 1, "model": self.model, "seed": self.seed, "steps": self.steps,
                "strength": self.strength, "init": self.init, "temporal": self.temporal,
                "guidance_scale": self.guidance_scale, "reference": self.reference, "suffix": self.suffix,
                "max_sequence_length": self.max_sequence_length, "dtype": self.dtype_name,
                "vae_tiling": self.vae_tiling}

    def describe(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> Dict[str, object]:
        """Loads the model (a missing or mismatched one fails before any output) and
        prepares the text (warning once if it is empty or too long).

        Raises:
            ModelNotAvailable: the model is not in the models folder.
            ModelMismatch: the folder holds another model.
        """
        self._load()
        text = self.text_for(prompt)
        return {"prompt": prompt, "looks": [], "params": {"device": str(self._device), "text": text,
                                                         "model_folder": str(self._folder), **self.settings()}}

    # -- loading -------------------------------------------------------------------------------
    def model_folder(self) -> Path:
        """The pipeline folder to load: ``model`` itself when it is a folder, else its
        snapshot in the models folder.

        Raises:
            ModelNotAvailable: not downloaded (one line naming the model and where to get it).
        """
        p = Path(self.model).expanduser()
        if p.is_dir():
            return p
        snap = _snapshot(self.model, self.models_dir)
        if snap is None:
            raise ModelNotAvailable(
                f"FLUX.2 [klein] model {self.model!r} is not in the models folder ({self.models_dir}); "
                f"{download_hint('flux2-klein')}, or pass a local folder with --option model=DIR")
        return snap

    def _load(self):
        if self._pipe is not None:
            return
        folder = self.model_folder()  # refusals first, before the slow torch/diffusers import
        check_model_folder(folder, self.model)
        import torch
        from diffusers import Flux2KleinPipeline

        device = torch_device(self.device_name)
        if self.dtype_name == "auto":
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        else:
            dtype = getattr(torch, self.dtype_name)
        try:
            pipe = Flux2KleinPipeline.from_pretrained(str(folder), dtype=dtype, use_safetensors=True,
                                                      local_files_only=True)
        except (OSError, ValueError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelNotAvailable(f"cannot load FLUX.2 [klein] from {folder} (safetensors only, offline): "
                                    f"{reason}; download it again in Preferences > Models") from e
        try:
            if self.cpu_offload and device.type in ("cuda", "cpu"):  # on the CPU: the same hooks, no gain
                pipe.enable_model_cpu_offload(device=device)
            else:
                pipe = pipe.to(device)
        except torch.OutOfMemoryError as e:
            raise JobError(f"CUDA out of memory loading FLUX.2 [klein] onto {device} in {dtype}: set --option "
                           "cpu_offload=true (Blender: a GPU with more memory, or close other GPU programs)") from e
        if self.vae_tiling:
            pipe.vae.enable_tiling()
        pipe.set_progress_bar_config(disable=True)
        sc = pipe.scheduler.config
        if getattr(sc, "use_flow_sigmas", False) or sc.get("use_karras_sigmas") or \
                sc.get("use_exponential_sigmas") or sc.get("use_beta_sigmas"):
            raise ModelMismatch(f"{folder}: scheduler config {dict(sc)} replaces the sigma schedule; img2img "
                                "needs the pipeline's own (linspace, shifted) schedule", file=folder)
        self._pipe, self._device, self._dtype, self._folder = pipe, device, dtype, folder

    def multiple(self) -> int:
        """The pixel multiple the model needs: ``2 * vae_scale_factor`` (16 for the real model)."""
        self._load()
        return int(self._pipe.vae_scale_factor * 2)

    # -- text ----------------------------------------------------------------------------------
    def _count(self, text: str) -> int:
        tok = self._pipe.tokenizer
        t = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                    add_generation_prompt=True, enable_thinking=False)
        return len(tok(t, add_special_tokens=False)["input_ids"])

    def text_for(self, prompt: str) -> str:
        """The text the model gets for ``prompt``: the prompt (or :data:`EMPTY_PROMPT`)
        followed by ``suffix``, cut at a token boundary so that it fits
        ``max_sequence_length`` with the chat markup (warning events for an empty prompt
        and for a cut, once per prompt)."""
        if prompt in self._texts:
            return self._texts[prompt]
        self._load()
        user = (prompt or "").strip()
        if not user:
            events.warning(f"empty prompt: flux2-klein renders {EMPTY_PROMPT!r} (plus the composition suffix)")
            user = EMPTY_PROMPT
        join = (lambda u: f"{u.rstrip('. ')}. {self.suffix}") if self.suffix else (lambda u: u)
        text = join(user)
        n = self._count(text)
        if n > self.max_sequence_length:
            tok = self._pipe.tokenizer
            ids = tok(user, add_special_tokens=False)["input_ids"]
            keep = max(0, len(ids) - (n - self.max_sequence_length))
            while True:
                cut = tok.decode(ids[:keep], skip_special_tokens=True)
                text = join(cut) if cut.strip() else (self.suffix or cut)
                if self._count(text) <= self.max_sequence_length or keep == 0:
                    break
                keep -= 1
            events.warning(f"prompt is {n} tokens with the composition suffix and chat markup, over the text "
                           f"encoder's {self.max_sequence_length}: cut to {len(ids[:keep])} of its "
                           f"{len(ids)} tokens ({cut[-40:]!r} is where it ends)")
        self._texts[prompt] = text
        return text

    # -- rendering --------------------------------------------------------------------------------
    def _generator(self):
        import torch

        gen_device = "cpu" if self._device.type == "mps" else self._device
        return torch.Generator(device=gen_device).manual_seed(self.seed)

    def _init_image(self, frame: GBufferFrame, src: np.ndarray, prompt: str, looks: Optional[Sequence[Look]],
                    frame_index: int, time_s: float) -> np.ndarray:
        if self.init == "embedded":
            from .embedded import EmbeddedRenderer

            looks = read_prompt(prompt, self) if looks is None else looks
            return EmbeddedRenderer().render(frame, prompt, looks=looks, frame_index=frame_index, time_s=time_s)
        return src

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0,
               time_s: float = 0.0, prev: Optional[np.ndarray] = None,
               looks: Optional[Sequence[Look]] = None) -> np.ndarray:
        """Render one frame (see the module docstring).

        Args:
            looks: the looks the prompt names (for the embedded init; ``None``: parsed here).
            prev: the previous frame's output (``H x W x 3`` scene-linear), used when this
                renderer also rendered the previous frame (``frame_index - 1``).

        Returns:
            ``H x W x 3`` float32 scene-linear Rec.709 in ``[0, 1]``, the frame's size.

        Raises:
            InputError: ``reference=True`` and a side under 64 px.
            JobError: CUDA out of memory (one line naming the settings to change).
        """
        import torch

        from .. import temporal as tmp
        from ..colour import linear_to_srgb, srgb_to_linear

        self._load()
        h, w = frame.shape
        src = np.clip(frame.combined[..., :3].astype(np.float32), 0.0, None)
        init = self._init_image(frame, src, prompt, looks, frame_index, time_s)
        info: Dict[str, Any] = {}
        warped = mask = None
        chained = (prev is not None and self._prev_src is not None and self._prev_index == frame_index - 1
                   and prev.shape == src.shape)
        if chained:
            pair = tmp.FlowPair.compute(self._prev_src, src)
            warped, mask = tmp.warp(prev, pair.back), pair.mask
            if self.temporal > 0:
                blend = (1.0 - self.temporal) * init + self.temporal * warped
                init = np.where(mask[..., None], blend, init).astype(np.float32)
        init = np.clip(init, 0.0, 1.0).astype(np.float32)

        tail, t_start = img2img_schedule(self.steps, self.strength)
        if len(tail) == 0:  # strength 0: no denoising step at all
            rgb = init
            info["sigma_start"] = 0.0
        else:
            srgb = np.clip(linear_to_srgb(init), 0.0, 1.0)
            padded, _ = pad_to_multiple(srgb, self.multiple())
            ph, pw = padded.shape[:2]
            if self.reference and min(h, w) < 64:
                raise InputError(f"flux2-klein with reference=true needs frames of at least 64 px a side, "
                                 f"got {w}x{h}", frame=frame_index + 1)
            try:
                out, s0 = self._denoise(padded, prompt, tail)
            except torch.OutOfMemoryError as e:
                if self._device.type == "cuda":
                    torch.cuda.empty_cache()
                raise JobError(f"CUDA out of memory in flux2-klein at {pw}x{ph} (frame {frame_index + 1}): set "
                               "--option cpu_offload=true and/or vae_tiling=true, or restyle G-buffers of a lower "
                               "resolution; the frames already written are kept", frame=frame_index + 1) from e
            out = np.nan_to_num(np.asarray(out, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
            rgb = np.clip(srgb_to_linear(out[:h, :w]), 0.0, 1.0).astype(np.float32)
            info["sigma_start"] = round(s0, 6)
            info["processing_size"] = [pw, ph]
        info["steps_run"] = int(len(tail))
        if chained and mask is not None and mask.any():
            err = np.abs(linear_to_srgb(rgb) - linear_to_srgb(np.clip(warped, 0, 1))).mean(-1)[mask]
            info["flicker"] = round(float(err.mean()), 6)
            info["temporal_pixels"] = round(float(mask.mean()), 4)
        self.last_info = info
        self._prev_src = src
        self._prev_index = frame_index
        return rgb

    def _denoise(self, srgb: np.ndarray, prompt: str, tail: np.ndarray) -> Tuple[np.ndarray, float]:
        """Steps 1-4 of the module docstring on a padded sRGB image (``Hp x Wp x 3`` in
        ``[0, 1]``). Returns ``(sRGB output Hp x Wp x 3, start sigma)``."""
        import torch
        from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

        pipe = self._pipe
        ph, pw = srgb.shape[:2]
        text = self.text_for(prompt)
        vae_device = init_device(pipe, self._device)
        x = torch.from_numpy(np.ascontiguousarray(srgb)).permute(2, 0, 1)[None] * 2.0 - 1.0
        with torch.no_grad():
            x0 = pipe._encode_vae_image(x.to(vae_device, pipe.vae.dtype), generator=None).float()
        m = self.multiple()
        seq_len = (ph // m) * (pw // m)
        mu = compute_empirical_mu(image_seq_len=seq_len, num_steps=self.steps)
        sched = pipe.scheduler
        full = np.linspace(1.0, 1.0 / self.steps, self.steps)
        sched.set_timesteps(sigmas=full, mu=mu)
        full_shifted = sched.sigmas[:-1].cpu().numpy()
        sched.set_timesteps(sigmas=tail, mu=mu)
        tail_shifted = sched.sigmas[:-1].cpu().numpy()
        if not np.allclose(tail_shifted, full_shifted[self.steps - len(tail):], atol=1e-6):
            raise ModelMismatch(f"{self._folder}: the scheduler does not shift sigmas element-wise; img2img "
                                "by a truncated schedule is not possible with it", file=self._folder)
        s0 = float(tail_shifted[0])
        gen = self._generator()
        noise = torch.randn(x0.shape, generator=gen, device=gen.device, dtype=torch.float32)
        latents = ((1.0 - s0) * x0.to(noise.device) + s0 * noise).to(self._device, self._dtype)
        kw: Dict[str, Any] = {}
        if self.reference:
            from PIL import Image

            kw["image"] = [Image.fromarray(np.round(srgb * 255.0).astype(np.uint8))]
        out = pipe(prompt=text, height=ph, width=pw, num_inference_steps=self.steps, sigmas=list(tail),
                   guidance_scale=self.guidance_scale, generator=self._generator(), latents=latents,
                   output_type="np", max_sequence_length=self.max_sequence_length, **kw).images[0]
        return out, s0
