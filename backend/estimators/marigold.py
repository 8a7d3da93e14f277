"""Marigold estimator (diffusers): depth, normals and appearance intrinsics.

Three diffusers pipelines, each optional:

* depth: :class:`diffusers.MarigoldDepthPipeline`, default ``prs-eth/marigold-depth-v1-1``.
  Output is affine-invariant depth in [0, 1] (``prediction_type`` from the model config:
  ``depth`` = larger is farther, ``disparity`` = inverted here). Reported as
  ``depth_kind = "relative"``.
* normals: :class:`diffusers.MarigoldNormalsPipeline`, default
  ``prs-eth/marigold-normals-v1-1``. Camera-space unit normals, X right, Y up, Z toward
  the viewer (diffusers' documented frame) = the contract's OpenGL convention.
* intrinsics: :class:`diffusers.MarigoldIntrinsicsPipeline`, default
  ``prs-eth/marigold-iid-appearance-v1-1``. Targets and their channel order are read
  from the model's own ``target_properties`` (``target_names``; ``stack`` targets list
  ``sub_target_names`` per channel; each target's ``prediction_space``). Albedo is
  predicted in sRGB (``prediction_space == "srgb"``) and is linearised with the sRGB
  EOTF; ``roughness`` and ``metallicity`` are linear. Nothing is assumed: a model whose
  properties lack a target simply does not provide that pass.

Loading
-------
Each model is a local folder or a Hugging Face repo id. Repo ids resolve through
``huggingface_hub.snapshot_download`` (the HF cache); offline mode
(``HF_HUB_OFFLINE=1`` or ``local_files_only=True``) never touches the network.
Pipelines load with ``use_safetensors=True``; ``trust_remote_code`` is never set, and
no custom pipeline code from a repository runs. Only the fp32 weight files are
downloaded (:data:`_IGNORE`: the published ``*.fp16.safetensors`` copies are never
loaded). A folder's ``model_index.json`` ``_class_name`` may be diffusers' class or
upstream's (``MarigoldIIDPipeline``); one naming another task's pipeline is refused
(:data:`TASK_CLASS_NAMES`).

Running
-------
* Device: ``auto`` = CUDA, else MPS, else CPU.
* Precision: fp16 on CUDA/MPS, fp32 on CPU (``dtype=`` overrides; the add-on's
  *Precision* preference ``fp32`` makes ``auto`` fp32, :mod:`backend.precision`). A frame whose fp16
  output contains NaN/Inf is re-run in fp32 (the pipeline is cast to fp32 for that
  frame and back); ``fp32_reruns`` counts them.
* The input frame (scene-linear) is sRGB-encoded for the network (Marigold was trained
  on ordinary sRGB photos). ``processing_resolution`` caps the long side inside the
  pipeline (model default when ``None``); results are resampled to the input size
  (``match_input_resolution``), so any frame size works.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from ..colour import linear_to_srgb, srgb_to_linear
from ..errors import require_packages
from ..hub_cache import download_hint
from .base import Estimator, EstimatorOutput

log = logging.getLogger(__name__)

DEPTH_MODEL = "prs-eth/marigold-depth-v1-1"
NORMALS_MODEL = "prs-eth/marigold-normals-v1-1"
INTRINSICS_MODEL = "prs-eth/marigold-iid-appearance-v1-1"

_ALLOW = ["*.json", "*.txt", "*.safetensors", "tokenizer/*", "*.model"]
#: the published repositories hold every weight file twice (``*.safetensors`` fp32 and
#: ``*.fp16.safetensors``); the fp32 files are the ones loaded (cast to fp16 on a GPU), so
#: the fp16 copies are not downloaded
_IGNORE = ["*.fp16.safetensors", "*.bin", "*.ckpt"]

#: ``model_index.json`` ``_class_name`` values known per task: diffusers' classes and the
#: names upstream's own code writes (github.com/prs-eth/Marigold: ``MarigoldIIDPipeline``,
#: ``MarigoldPipeline`` for depth v1.0). diffusers ignores the field when a class loads a
#: folder; the adapter refuses only a folder that declares another task's pipeline.
TASK_CLASS_NAMES = {
    "depth": ("MarigoldDepthPipeline", "MarigoldPipeline"),
    "normals": ("MarigoldNormalsPipeline",),
    "intrinsics": ("MarigoldIntrinsicsPipeline", "MarigoldIIDPipeline"),
}


class MarigoldError(RuntimeError):
    """A Marigold model cannot be found/loaded, or its config is not understood."""


def _offline(local_files_only: Optional[bool]) -> bool:
    if local_files_only is not None:
        return bool(local_files_only)
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover
        return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")


def resolve_model(model: str, *, revision: Optional[str] = None, local_files_only: Optional[bool] = None,
                  cache_dir: Optional[str] = None) -> tuple:
    """Local folder for ``model`` (a folder path or a HF repo id) and its revision string.

    Returns:
        ``(folder, revision)``; revision is the HF snapshot commit, or
        ``local-sha256:<16 hex>`` of the folder's JSON configs for a plain folder.

    Raises:
        MarigoldError: not a folder and not in the cache (offline) / not downloadable.
    """
    p = Path(os.path.expanduser(model))
    if p.is_dir():
        folder = p.resolve()
    else:
        from huggingface_hub import snapshot_download

        offline = _offline(local_files_only)
        try:
            folder = Path(snapshot_download(model, revision=revision, cache_dir=cache_dir,
                                            local_files_only=offline, allow_patterns=_ALLOW,
                                            ignore_patterns=_IGNORE))
        except Exception as e:
            if offline:
                raise MarigoldError(
                    f"model {model!r} is not in the models folder (the Hugging Face cache); "
                    f"{download_hint('marigold')}, or pass a local folder") from e
            why = " ".join(str(e).split())  # one line: the CLI reports only a message's first line
            raise MarigoldError(f"Marigold model {model!r} not available (download failed: {type(e).__name__}: "
                                f"{why}). Pass a local folder.") from e
    if folder.parent.name == "snapshots":
        return folder, folder.name
    h = hashlib.sha256()
    for cfg in sorted(folder.rglob("*.json")):
        h.update(cfg.relative_to(folder).as_posix().encode())
        h.update(cfg.read_bytes())
    return folder, "local-sha256:" + h.hexdigest()[:16]


def auto_device(device: Optional[str] = None) -> str:
    """``device`` if given (not ``auto``), else ``cuda`` / ``mps`` / ``cpu``, whichever exists."""
    if device and device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


class MarigoldEstimator(Estimator):
    """Marigold depth / normals / appearance through diffusers (see module docstring).

    Args:
        depth, normals, intrinsics: model folder or HF repo id for each task; ``None``
            skips that task (the decompose job then fills the pass).
        device: ``auto``/``None``, ``cpu``, ``cuda``, ``cuda:1``, ``mps``.
        dtype: ``auto`` (fp16 on GPU, fp32 on CPU), ``float16`` or ``float32``.
        processing_resolution: long side inside the pipelines (``None`` = the one
            ``decompose`` chose, :meth:`use_resolution`; else the model default; 0 = the
            input's size).
        num_inference_steps: denoising steps (``None`` = model default).
        ensemble_size: predictions averaged per frame.
        seed: generator seed (same frame -> same output).
        local_files_only: force offline (``None`` = follow ``HF_HUB_OFFLINE``).
        revision, cache_dir: passed to ``huggingface_hub.snapshot_download`` for repo ids.

    Raises:
        MarigoldError: when a model is missing or its pipeline class/config is unexpected.
    """

    name = "marigold"
    #: Marigold's recommended processing resolution (diffusers' pipeline default)
    default_resolution = 768

    def __init__(
        self,
        depth: Optional[str] = DEPTH_MODEL,
        normals: Optional[str] = NORMALS_MODEL,
        intrinsics: Optional[str] = INTRINSICS_MODEL,
        *,
        device: Optional[str] = None,
        dtype: str = "auto",
        processing_resolution: Optional[int] = None,
        num_inference_steps: Optional[int] = None,
        ensemble_size: int = 1,
        seed: int = 0,
        local_files_only: Optional[bool] = None,
        revision: Optional[str] = None,
        cache_dir: Optional[str] = None,
    ):
        require_packages("the marigold estimator", "torch", "diffusers")
        import torch

        from ..precision import resolve_dtype

        self.device = auto_device(device)
        dtype = resolve_dtype(dtype)  # the add-on's Precision preference
        if dtype == "auto":
            self.dtype = torch.float32 if self.device == "cpu" else torch.float16
        else:
            self.dtype = {"float16": torch.float16, "fp16": torch.float16,
                          "float32": torch.float32, "fp32": torch.float32}[str(dtype)]
        self.processing_resolution = processing_resolution
        self._explicit_resolution = processing_resolution is not None
        self.num_inference_steps = num_inference_steps
        self.ensemble_size = int(ensemble_size)
        self.seed = int(seed)
        self.fp32_reruns = 0
        self.models: Dict[str, str] = {}
        self.task_models: Dict[str, str] = {}  # task -> model id (per-pass provenance)
        self._ids: Dict[str, Optional[str]] = {"depth": depth, "normals": normals, "intrinsics": intrinsics}
        self._pipes: Dict[str, Any] = {}
        kw = dict(revision=revision, local_files_only=local_files_only, cache_dir=cache_dir)
        if not any(self._ids.values()):
            raise MarigoldError("MarigoldEstimator needs at least one of depth, normals, intrinsics")
        for task, model in self._ids.items():
            if model:
                self._pipes[task] = self._load(task, model, **kw)

    # ------------------------------------------------------------------ loading

    def _load(self, task: str, model: str, **kw):
        import diffusers

        cls = {"depth": diffusers.MarigoldDepthPipeline, "normals": diffusers.MarigoldNormalsPipeline,
               "intrinsics": diffusers.MarigoldIntrinsicsPipeline}[task]
        folder, rev = resolve_model(model, **kw)
        index = folder / "model_index.json"
        if not index.is_file():
            raise MarigoldError(f"{folder}: no model_index.json (not a diffusers pipeline folder)")
        declared = json.loads(index.read_text()).get("_class_name")
        other = [t for t, names in TASK_CLASS_NAMES.items() if t != task and declared in names]
        if other:
            raise MarigoldError(f"{model}: model_index.json declares {declared!r}, a Marigold {other[0]} "
                                f"pipeline; expected {cls.__name__} for the {task} task")
        try:
            pipe = cls.from_pretrained(str(folder), use_safetensors=True, local_files_only=True,
                                       dtype=self.dtype)
        except Exception as e:
            raise MarigoldError(f"cannot load {cls.__name__} from {folder}: {type(e).__name__}: {e}") from e
        pipe = pipe.to(self.device)
        pipe.set_progress_bar_config(disable=True)
        if task == "intrinsics":
            props = pipe.target_properties or {}
            if not props.get("target_names"):
                raise MarigoldError(f"{model}: config has no target_properties.target_names")
        self.models[model] = rev
        self.task_models[task] = model
        return pipe

    def settings(self) -> Dict[str, object]:
        return {
            "name": self.name,
            "models": dict(sorted(self.models.items())),
            "tasks": {k: v for k, v in self._ids.items()},
            "processing_resolution": self.processing_resolution,
            "num_inference_steps": self.num_inference_steps,
            "ensemble_size": self.ensemble_size,
            "seed": self.seed,
            "dtype": str(self.dtype).replace("torch.", ""),
        }

    def use_resolution(self, resolution: Optional[int]) -> None:
        """The pipelines run at the processing resolution decompose feeds them (0 =
        the input's size), unless ``processing_resolution`` was given explicitly."""
        if not self._explicit_resolution:
            self.processing_resolution = 0 if resolution is None else int(resolution)

    # ------------------------------------------------------------------ running

    def _run(self, task: str, image: np.ndarray) -> np.ndarray:
        """Run one pipeline; fp16 NaN/Inf -> re-run in fp32. Returns the numpy prediction."""
        import torch

        pipe = self._pipes[task]

        def call():
            gen = torch.Generator(device="cpu").manual_seed(self.seed)
            with torch.inference_mode():
                out = pipe(image, num_inference_steps=self.num_inference_steps,
                           ensemble_size=self.ensemble_size,
                           processing_resolution=self.processing_resolution,
                           match_input_resolution=True, generator=gen, output_type="np")
            return np.asarray(out.prediction, dtype=np.float32)

        pred = call()
        if not np.all(np.isfinite(pred)) and self.dtype != torch.float32:
            log.warning("marigold %s: NaN/Inf in %s output, re-running frame in fp32", task, self.dtype)
            self.fp32_reruns += 1
            pipe.to(dtype=torch.float32)
            try:
                pred = call()
            finally:
                pipe.to(dtype=self.dtype)
        if not np.all(np.isfinite(pred)):
            raise MarigoldError(f"marigold {task}: NaN/Inf in the output even in fp32")
        return pred

    def _intrinsics(self, image: np.ndarray) -> Dict[str, np.ndarray]:
        """Split the IID prediction into named maps using the model's target_properties."""
        pipe = self._pipes["intrinsics"]
        props = pipe.target_properties
        names = list(props["target_names"])
        pred = self._run("intrinsics", image)  # (n_targets, H, W, 3) for one image
        if pred.shape[0] != len(names):
            raise MarigoldError(f"marigold intrinsics: {pred.shape[0]} predictions for targets {names}")
        out: Dict[str, np.ndarray] = {}

        def convert(arr, space):
            if space == "srgb":
                return srgb_to_linear(arr)
            if space == "linear":
                return np.clip(arr, 0.0, None).astype(np.float32)
            raise MarigoldError(f"marigold intrinsics: unknown prediction_space {space!r}")

        for i, name in enumerate(names):
            tp = props.get(name, {}) or {}
            space = tp.get("prediction_space", "srgb")
            if space == "stack":
                subs = tp.get("sub_target_names") or []
                for c, sub in enumerate(subs):
                    if sub is None:
                        continue
                    sub_space = (props.get(sub, {}) or {}).get("prediction_space", "srgb")
                    out[sub] = convert(pred[i][..., c], sub_space)
            else:
                arr = convert(pred[i], space)
                out[name] = arr if arr.ndim == 3 else arr[..., 0]
        return out

    def predict(self, rgb: np.ndarray) -> EstimatorOutput:
        """Estimate passes for one frame.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709, any H, W >= 1.

        Returns:
            :class:`EstimatorOutput` at ``H x W``: relative depth (> 0, larger = farther),
            unit OpenGL normals, linear albedo, metallic, roughness (those the loaded
            models provide; others ``None``), ``models`` = id -> revision.
        """
        rgb = np.asarray(rgb, dtype=np.float32)
        if rgb.ndim != 3 or rgb.shape[2] != 3:
            raise ValueError(f"rgb must be H x W x 3, got {rgb.shape}")
        h, w = rgb.shape[:2]
        image = linear_to_srgb(rgb)[None]  # 1 x H x W x 3 in [0, 1], what Marigold was trained on
        depth = normal = albedo = metallic = roughness = None
        if "depth" in self._pipes:
            d = self._run("depth", image)[0, ..., 0]
            if getattr(self._pipes["depth"].config, "prediction_type", "depth") == "disparity":
                d = 1.0 / (np.clip(d, 0, 1) + 0.01)
            depth = (np.clip(d, 0.0, None) + 0.01).astype(np.float32)
        if "normals" in self._pipes:
            n = self._run("normals", image)[0]
            norm = np.linalg.norm(n, axis=-1, keepdims=True)
            n = np.where(norm > 1e-6, n / np.maximum(norm, 1e-6), np.array([0, 0, 1], np.float32))
            normal = n.astype(np.float32)
        if "intrinsics" in self._pipes:
            maps = self._intrinsics(image)
            if "albedo" in maps:
                albedo = np.clip(maps["albedo"], 0, 1).astype(np.float32)
            if "metallicity" in maps:
                metallic = np.clip(maps["metallicity"], 0, 1).astype(np.float32)
            if "roughness" in maps:
                roughness = np.clip(maps["roughness"], 0, 1).astype(np.float32)
        if depth is None:
            # no depth model: a flat plane at the middle of the range keeps the contract valid
            depth = np.ones((h, w), np.float32)
        for name, arr in (("depth", depth), ("normal", normal), ("albedo", albedo)):
            if arr is not None and arr.shape[:2] != (h, w):
                raise MarigoldError(f"marigold {name}: got {arr.shape[:2]}, expected {(h, w)}")
        provenance, pass_models = {}, {}
        for name, arr, pipe in (("depth", depth if "depth" in self._pipes else None, "depth"),
                                ("normal", normal, "normals"), ("albedo", albedo, "intrinsics"),
                                ("metallic", metallic, "intrinsics"), ("roughness", roughness, "intrinsics")):
            if arr is not None:
                provenance[name] = "estimated"
                pass_models[name] = self.task_models.get(pipe, f"marigold {pipe}")
        if "depth" not in provenance:
            provenance["depth"], pass_models["depth"] = "default", "flat plane (no depth model)"
        return EstimatorOutput(depth=depth, depth_kind="relative", normal=normal, albedo=albedo,
                               metallic=metallic, roughness=roughness, confidence=None,
                               models=dict(self.models), provenance=provenance, pass_models=pass_models)
