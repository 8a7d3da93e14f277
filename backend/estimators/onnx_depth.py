"""Pretrained depth on ONNX Runtime (no torch): Depth Anything V2, downloaded on request.

Models
------
:data:`MODELS` is the registry of the pretrained depth networks this estimator family
runs; each :class:`DepthModel` names its model-hub repository, its ONNX files (fp32 and
the published fp16 / int8 variants), licence, download sizes, the input layout
(``pixel_values``: ``N x 3 x H x W`` float32, ImageNet mean/std normalised sRGB in
[0, 1], H and W multiples of 14) and what the output means (``predicted_depth``:
``N x H x W`` *relative disparity*, larger = nearer, scale and shift unknown).

Only permissively licensed models are registered: Depth Anything V2 **Small**
(Apache-2.0, 24.8 M parameters; the ONNX export ``onnx-community/depth-anything-v2-small``).
The Base and Large variants are CC-BY-NC-4.0 (non-commercial) and are not offered.

Loading
-------
The ONNX file resolves through ``huggingface_hub.hf_hub_download`` into the models
folder, a Hugging Face cache (``HF_HUB_CACHE``; inside Blender the worker sets it to
the add-on's models folder, see ``operators/backend_args.py``). Offline
(``HF_HUB_OFFLINE=1``, which the add-on sets when Blender's online access or the
add-on's offline mode forbids downloads, or ``local_files_only=True``) it is looked up
in the cache only and nothing connects to the network. Without ``huggingface_hub``
installed (the extension zip's default path does not ship it), the same cache layout
(``models--<org>--<name>/refs/<revision>`` -> ``snapshots/<commit>/<file>``) is read
directly, offline only. ``hf_hub_download`` writes a download to ``blobs/*.incomplete``
and moves it into place when complete, so an interrupted download never leaves a file
that a later run loads.

Running
-------
onnxruntime with the best execution provider the installed build has: CUDA, CoreML,
DirectML, else CPU (:func:`select_providers`). ``variant="auto"`` takes the fp16 file
on a GPU provider when that file is already in the models folder (a download fetches
fp32 only), else the fp32 file (fp16 is slower on CPUs; ``int8`` and
``uint8`` are the published dynamically quantized files with signed / unsigned 8-bit
weights, smaller and on some CPUs faster).

Per frame (:meth:`DepthAnythingEstimator.predict`): the scene-linear frame is clipped
to [0, 1] and sRGB-encoded (the network was trained on ordinary photos), resized
(bicubic) to the network size, normalised with the ImageNet mean/std and run once.
The network size (``fit``): ``upstream`` (default) as upstream's inference
(``Resize(518, 518, keep_aspect_ratio=True, ensure_multiple_of=14,
resize_method="lower_bound")`` in Depth-Anything-V2 ``depth_anything_v2/dpt.py``
``image2tensor``): the *short* side at least ``input_size`` (518) keeping the aspect,
each side a multiple of 14 (:func:`upstream_size`: 16:9 -> 518 x 924); ``frame``: the
nearest multiples of 14 of the frame ``decompose`` gives (its processing resolution,
then long side 518 by default: 294 x 518 for 16:9, a third of the pixels, about 3x
faster, the documented fast choice). The default processing resolution is 924 (long
side) with ``upstream``, so 16:9 footage reaches the network without upsampling; 518
with ``frame``. The
disparity is resized back (bilinear) and turned into relative depth with
:func:`backend.model.encoding.disparity_to_depth` (``1 / disparity`` after
normalising by its 95th percentile; the range is capped at 200:1).

Composite
---------
With ``materials="embedded"`` (default) albedo, metallic and roughness come from the
embedded network (:class:`.embedded.EmbeddedEstimator`) run on the same frame (at its
192 px; the albedo gets the frame's fine detail back with
:func:`backend.decomposer.albedo_detail_transfer`, as decompose does for the embedded
estimator alone); the
normals are left to ``decompose``, which derives them from this depth with the true or
assumed intrinsics (:func:`backend.geometry.normals_from_depth`).
:attr:`EstimatorOutput.pass_models` / ``provenance`` say which model made which pass.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..colour import linear_to_srgb
from ..errors import JobError
from ..imaging import resize
from ..hub_cache import cached_file, download_hint
from ..model.encoding import disparity_to_depth
from .base import Estimator, EstimatorOutput

#: ImageNet normalisation (the models' ``preprocessor_config.json``)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: execution providers in order of preference (names as onnxruntime spells them)
PROVIDER_PREFERENCE = ("CUDAExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider",
                       "CPUExecutionProvider")
_GPU_PROVIDERS = PROVIDER_PREFERENCE[:3]

#: models a release zip carries (``./dev build --with-models``, tools/build_extension.py): a
#: Hugging Face cache folder at the extension's root, read before the models folder
BUNDLED_MODELS_DIR = Path(__file__).resolve().parents[2] / "models"



def get_it(model: "DepthModel") -> str:
    """Where the user gets ``model``: ``python -m backend models download KEY`` or the
    add-on's Preferences > Models (:func:`backend.hub_cache.download_hint`); for a model
    with no published ONNX file, the export in docs/models.md."""
    if not model.published:
        return "export it again (docs/models.md) into the models folder"
    return download_hint(model.key)


class DepthModelError(JobError):
    """A pretrained depth model cannot be found, downloaded or loaded; ``str(e)`` is one
    line naming the model and what to do."""


@dataclass(frozen=True)
class DepthModel:
    """One pretrained depth network available as ONNX on the model hub.

    Attributes:
        key: estimator name (``depth-anything-v2-small``).
        label: name shown to users.
        repo_id: model-hub repository of the ONNX export.
        files: variant (``fp32``, ``fp16``, ``int8``) -> file path in the repository.
        sizes_mb: variant -> download size in MB (as published).
        licence: SPDX id of the weights' licence.
        commercial_use: whether the licence allows commercial use.
        parameters_m: parameters, millions.
        input_name, output_name: graph input/output names.
        multiple: input height and width must be multiples of this (the ViT patch).
        default_size: long side (pixels) the model was trained at.
        mean, std: per-channel normalisation of sRGB values in [0, 1].
        output_kind: ``relative_disparity``, ``relative_depth`` or ``metric_depth``.
        source: the upstream project.
    """

    key: str
    label: str
    repo_id: str
    files: Dict[str, str]
    sizes_mb: Dict[str, float]
    licence: str
    commercial_use: bool
    parameters_m: float
    input_name: str = "pixel_values"
    output_name: str = "predicted_depth"
    multiple: int = 14
    default_size: int = 518
    mean: Tuple[float, float, float] = IMAGENET_MEAN
    std: Tuple[float, float, float] = IMAGENET_STD
    output_kind: str = "relative_disparity"
    source: str = ""
    #: graph layout: input ``[N, 3, H, W]`` (rank 4) or ``[N, T, 3, H, W]`` (rank 5, video
    #: models); output ``[N, H, W]`` (rank 3) or ``[N, T, H, W]`` (rank 4)
    input_rank: int = 4
    #: whether ``repo_id`` publishes the ONNX file (else it must be exported by hand into
    #: the models folder, see docs/models.md; nothing is downloaded)
    published: bool = True
    extra_files: Tuple[str, ...] = field(default=("config.json", "preprocessor_config.json"))

    def file(self, variant: str) -> str:
        """Repository path of ``variant``.

        Raises:
            ValueError: unknown variant (the message lists the known ones).
        """
        if variant not in self.files:
            raise ValueError(f"{self.key}: unknown variant {variant!r}; one of {', '.join(self.files)}")
        return self.files[variant]


#: the pretrained depth models, by estimator name
MODELS: Dict[str, DepthModel] = {
    "depth-anything-v2-small": DepthModel(
        key="depth-anything-v2-small",
        label="Depth Anything V2 Small",
        repo_id="onnx-community/depth-anything-v2-small",
        # int8: signed 8-bit weights (model_int8.onnx); uint8: the repository's default quantized
        # file (model_quantized.onnx, unsigned 8-bit weights, what transformers.js loads as q8)
        files={"fp32": "onnx/model.onnx", "fp16": "onnx/model_fp16.onnx", "int8": "onnx/model_int8.onnx",
               "uint8": "onnx/model_quantized.onnx"},
        sizes_mb={"fp32": 99.1, "fp16": 49.6, "int8": 27.3, "uint8": 27.3},
        licence="Apache-2.0",
        commercial_use=True,
        parameters_m=24.8,
        source="https://github.com/DepthAnything/Depth-Anything-V2",
    ),
}


def get_model(key: str) -> DepthModel:
    """The registry entry ``key``.

    Raises:
        KeyError: unknown model (the message lists the known ones).
    """
    if key not in MODELS:
        raise KeyError(f"unknown depth model {key!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


# ---------------------------------------------------------------------------- execution


def select_providers(device: Optional[str] = None, available: Optional[Sequence[str]] = None) -> List[str]:
    """onnxruntime execution providers to use, best first, always ending with the CPU.

    Args:
        device: ``None``/``auto`` = the best available; ``cpu``; ``cuda`` / ``coreml`` (``mps``,
            the add-on's Apple setting) / ``directml`` (``dml``) = that one; when the
            installed onnxruntime lacks it (a CPU-only build with Device = CUDA, natural for
            the torch models), the CPU, with one ``warning`` event per process and device.
        available: the providers to choose from (default: ``onnxruntime.get_available_providers()``).

    Returns:
        provider names, e.g. ``["CUDAExecutionProvider", "CPUExecutionProvider"]``.

    Raises:
        ValueError: an unknown device.
    """
    if available is None:
        import onnxruntime as ort

        available = ort.get_available_providers()
    available = list(available)
    dev = (device or "auto").lower()
    if dev == "cpu":
        return ["CPUExecutionProvider"]
    if dev == "auto":
        best = [p for p in _GPU_PROVIDERS if p in available][:1]
        return best + ["CPUExecutionProvider"]
    want = {"cuda": "CUDAExecutionProvider", "coreml": "CoreMLExecutionProvider", "mps": "CoreMLExecutionProvider",
            "directml": "DmlExecutionProvider", "dml": "DmlExecutionProvider"}.get(dev.split(":")[0])
    if want is None:
        raise ValueError(f"device {device!r}: one of auto, cpu, cuda, coreml, directml")
    if want not in available:
        if dev not in _WARNED:
            _WARNED.add(dev)
            from .. import events

            events.warning(f"device {device!r}: this onnxruntime has only {', '.join(available)}; running "
                           "the ONNX depth model on the CPU (install onnxruntime-gpu / onnxruntime-directml "
                           "for a GPU)")
        return ["CPUExecutionProvider"]
    return [want, "CPUExecutionProvider"]


#: devices already warned about (:func:`select_providers` warns once per process and device)
_WARNED: set = set()


def choose_variant(model: DepthModel, variant: str, providers: Sequence[str], present: Sequence[str] = ()) -> str:
    """``auto`` -> ``fp16`` on a GPU provider when the fp16 file is already in the models
    folder (``present``: the variants whose files are there), else ``fp32`` (what the
    download, ``--with-models`` and the readiness checks provide: an offline Mac with
    CoreML runs the fp32 file it has instead of failing on, or silently downloading, the
    fp16 one); other values are checked and returned."""
    if variant in (None, "", "auto"):
        gpu = bool(providers) and providers[0] in _GPU_PROVIDERS
        return "fp16" if gpu and "fp16" in model.files and "fp16" in present else "fp32"
    model.file(variant)
    return variant


def local_variants(model: DepthModel, cache_dir: Optional[os.PathLike] = None,
                   revision: Optional[str] = None) -> List[str]:
    """The variants of ``model`` whose files are in the zip's bundled models or the models
    folder (``cache_dir``, default :func:`default_cache_dir`); no network."""
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    return [v for v, f in model.files.items()
            if cached_file(BUNDLED_MODELS_DIR, model.repo_id, f, revision)
            or cached_file(folder, model.repo_id, f, revision)]


# ---------------------------------------------------------------------------- files


def offline_requested(local_files_only: Optional[bool] = None) -> bool:
    """``local_files_only`` when given, else whether ``HF_HUB_OFFLINE`` (or
    ``TRANSFORMERS_OFFLINE``, which ``huggingface_hub`` honours too) is set (1/true/yes/on)."""
    if local_files_only is not None:
        return bool(local_files_only)
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def default_cache_dir() -> Path:
    """The models folder: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``
    (the places ``huggingface_hub`` uses)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def resolve_file(model: DepthModel, filename: str, *, cache_dir: Optional[os.PathLike] = None,
                 local_files_only: Optional[bool] = None, revision: Optional[str] = None) -> Path:
    """Local path of ``filename`` of ``model``'s repository, downloading it when allowed.

    A copy bundled in the release zip (:data:`BUNDLED_MODELS_DIR`) is used first.
    Uses ``huggingface_hub.hf_hub_download`` (``local_files_only`` when offline, see
    :func:`offline_requested`); without ``huggingface_hub``, reads the cache layout
    (:func:`backend.hub_cache.cached_file`), offline only.

    Raises:
        DepthModelError: not in the models folder while offline; the download failed
            (no network, folder not writable, interrupted); ``huggingface_hub`` missing
            when a download is needed.
    """
    offline = offline_requested(local_files_only)
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    what = f"{model.label} ({model.repo_id}: {filename})"
    bundled = cached_file(BUNDLED_MODELS_DIR, model.repo_id, filename, revision)
    if bundled is not None:  # a release zip's own copy: never downloaded, never stale
        return bundled
    if not model.published:
        hit = cached_file(folder, model.repo_id, filename, revision)
        if hit is not None:
            return hit
        raise DepthModelError(f"{what} is not in the models folder {folder}, and no ONNX export of it is "
                              f"published to download: export it (docs/models.md) into that folder, or pass "
                              f"model_file=PATH (--estimator-option model_file=PATH)")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        hit = cached_file(folder, model.repo_id, filename, revision)
        if hit is not None:
            return hit
        if offline:
            raise DepthModelError(f"{what} is not in the models folder {folder} and downloads are off: "
                                  f"{get_it(model)}") from None
        raise DepthModelError(f"{what} is not in the models folder {folder}, and downloading it needs the "
                              f"huggingface_hub package, which this Python lacks: {get_it(model)}") from None
    try:
        return Path(hf_hub_download(model.repo_id, filename, revision=revision, cache_dir=str(folder),
                                    local_files_only=offline))
    except Exception as e:  # noqa: BLE001 - every failure becomes one line naming the model
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        if offline:
            raise DepthModelError(f"{what} is not in the models folder {folder} and downloads are off "
                                  f"(offline mode, Blender's online access off, or HF_HUB_OFFLINE set): "
                                  f"{get_it(model)}") from e
        if isinstance(e, PermissionError) or "Permission denied" in why or "Read-only" in why:
            raise DepthModelError(f"{what}: cannot write to the models folder {folder} ({why}); choose a "
                                  "writable Model Folder in the add-on preferences (or set HF_HUB_CACHE)") from e
        raise DepthModelError(f"{what}: download into {folder} failed ({why}); nothing was kept from the "
                              f"failed attempt: check the network and retry, or {get_it(model)}") from e


def snapshot_revision(path: Path) -> str:
    """The cache snapshot commit a resolved file lives in (``snapshots/<commit>/...``), or
    ``local-size:<bytes>`` for a file outside a cache."""
    parts = path.parts
    if "snapshots" in parts:
        i = len(parts) - 1 - parts[::-1].index("snapshots")
        if i + 1 < len(parts):
            return parts[i + 1]
    return f"local-size:{path.stat().st_size}"


def open_session(model: DepthModel, path: Path, providers: Sequence[str], threads: Optional[int] = None):
    """An onnxruntime session on ``path``, checked to be ``model``'s architecture.

    Raises:
        DepthModelError: unreadable (truncated/corrupt) file, or inputs/outputs that are
            not ``input_name`` (rank 4, 3 channels) -> ``output_name`` (rank 3, or rank 4
            with one channel).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    what = f"{model.label} ({path})"
    try:
        session = ort.InferenceSession(str(path), so, providers=list(providers))
    except Exception as e:  # noqa: BLE001
        why = " ".join(str(e).split())[:200]
        raise DepthModelError(f"{what} is not a readable ONNX model (truncated or corrupt: {why}); delete "
                              f"it and {get_it(model)}") from e
    ins = {i.name: i for i in session.get_inputs()}
    outs = {o.name: o for o in session.get_outputs()}
    i, o = ins.get(model.input_name), outs.get(model.output_name)
    r = model.input_rank
    ok = (i is not None and len(i.shape) == r and i.shape[r - 3] in (3, "3")
          and o is not None and (len(o.shape) == r - 1 or (r == 4 and len(o.shape) == 4 and o.shape[1] in (1, "1"))))
    if not ok:
        def sig(items):
            return ", ".join(f"{k} {list(v.shape)}" for k, v in items.items())
        lay_in, lay_out = ("[N, 3, H, W]", "[N, H, W]") if r == 4 else ("[N, T, 3, H, W]", "[N, T, H, W]")
        raise DepthModelError(
            f"{what} is not a {model.label} export: it has inputs [{sig(ins)}] and outputs [{sig(outs)}], "
            f"expected {model.input_name} {lay_in} -> {model.output_name} {lay_out}; delete it and {get_it(model)}")
    return session


# ---------------------------------------------------------------------------- estimator


def network_size(h: int, w: int, multiple: int = 14) -> Tuple[int, int]:
    """``(h, w)`` rounded to the nearest multiples of ``multiple`` (at least one multiple)."""
    return (max(multiple, int(round(h / multiple)) * multiple),
            max(multiple, int(round(w / multiple)) * multiple))


def upstream_size(h: int, w: int, input_size: int = 518, multiple: int = 14) -> Tuple[int, int]:
    """Upstream Depth Anything V2's network size for an ``h x w`` image (its ``Resize`` with
    ``keep_aspect_ratio=True``, ``ensure_multiple_of=14``, ``resize_method="lower_bound"``):
    scaled so the short side is at least ``input_size``, each side rounded to the nearest
    multiple of ``multiple``, rounded up instead where that would fall below ``input_size``.

    Returns:
        ``(height, width)``, e.g. ``(518, 924)`` for 1080 x 1920, ``(518, 518)`` for a square.
    """
    scale = max(input_size / h, input_size / w)

    def side(x: float) -> int:
        y = int(round(x / multiple)) * multiple
        return int(np.ceil(x / multiple)) * multiple if y < input_size else y

    return side(scale * h), side(scale * w)


class DepthAnythingEstimator(Estimator):
    """Depth Anything V2 on onnxruntime; materials from the embedded network.

    Args:
        model: registry key (:data:`MODELS`), default ``depth-anything-v2-small``, or a
            :class:`DepthModel`.
        variant: ``auto`` (fp16 on a GPU provider when its file is in the models folder,
            else fp32), ``fp32``, ``fp16``, ``int8``
            (``onnx/model_int8.onnx``), ``uint8`` (``onnx/model_quantized.onnx``).
        model_file: an ONNX file to use instead of the models folder (no download).
        cache_dir: the models folder (a Hugging Face cache); default ``HF_HUB_CACHE``.
        local_files_only: never download (``None``: when ``HF_HUB_OFFLINE`` is set).
        revision: repository branch or commit (default ``main``).
        device: ``auto``/``None``, ``cpu``, ``cuda``, ``coreml``, ``directml``
            (:func:`select_providers`).
        threads: onnxruntime intra-op threads (``None``: onnxruntime's default).
        materials: ``embedded`` (albedo, metallic, roughness from the embedded network)
            or ``none`` (``decompose`` fills them with its defaults).
        fit: ``upstream`` (network short side >= ``input_size``, upstream's inference) or
            ``frame`` (the frame's own size rounded to multiples of 14; faster at the
            default processing resolution, which is then ``input_size`` on the long side).
        input_size: upstream's ``input_size`` (518, the training size).

    Raises:
        DepthModelError: the model is missing / cannot be downloaded / is not loadable
            (one line naming it and what to do). ValueError: a bad option.
    """

    name = "depth-anything-v2-small"
    #: processing resolution (long side): 16:9 footage at upstream's network size (518 x 924)
    #: without upsampling; ``fit="frame"`` makes it ``input_size``
    default_resolution = 924
    max_resolution = None

    def __init__(self, model: str = "depth-anything-v2-small", variant: str = "auto",
                 model_file: Optional[os.PathLike] = None, cache_dir: Optional[os.PathLike] = None,
                 local_files_only: Optional[bool] = None, revision: Optional[str] = None,
                 device: Optional[str] = None, threads: Optional[int] = None, materials: str = "embedded",
                 fit: str = "upstream", input_size: int = 518, **_ignored):
        self.spec = model if isinstance(model, DepthModel) else get_model(model)
        self.name = self.spec.key
        if materials not in ("embedded", "none"):
            raise ValueError(f"materials must be 'embedded' or 'none', got {materials!r}")
        if fit not in ("upstream", "frame"):
            raise ValueError(f"fit must be 'upstream' or 'frame', got {fit!r}")
        self.fit, self.input_size = fit, int(input_size)
        if self.input_size < self.spec.multiple:
            raise ValueError(f"input_size must be >= {self.spec.multiple}, got {input_size}")
        if fit == "frame":
            self.default_resolution = self.input_size
        self.providers = select_providers(device)
        present = () if model_file else local_variants(self.spec, cache_dir, revision)
        self.variant = choose_variant(self.spec, variant, self.providers, present)
        if model_file:
            path = Path(model_file).expanduser()
            if not path.is_file():
                raise DepthModelError(f"{self.spec.label}: model file {path} not found")
            self.revision = f"local-size:{path.stat().st_size}"
        else:
            path = resolve_file(self.spec, self.spec.file(self.variant), cache_dir=cache_dir,
                                local_files_only=local_files_only, revision=revision)
            self.revision = snapshot_revision(path)
        self.model_path = path
        self.threads = int(threads) if threads else None
        self.session = open_session(self.spec, path, self.providers, self.threads)
        self.input_dtype = np.float32
        for i in self.session.get_inputs():
            if i.name == self.spec.input_name:
                self.input_dtype = np.float16 if "float16" in i.type else np.float32
        self.materials = materials
        self._embedded = None
        if materials == "embedded":
            from .embedded import EmbeddedEstimator

            self._embedded = EmbeddedEstimator(threads=self.threads or 2)
        self._mean = np.asarray(self.spec.mean, np.float32)
        self._std = np.asarray(self.spec.std, np.float32)

    @property
    def model_id(self) -> str:
        """``repo_id`` plus the file (``onnx-community/depth-anything-v2-small/onnx/model.onnx``)."""
        return f"{self.spec.repo_id}/{self.spec.file(self.variant)}"

    def settings(self) -> Dict[str, object]:
        return {"name": self.name, "model": self.model_id, "revision": self.revision,
                "materials": self.materials, "fit": self.fit, "input_size": self.input_size,
                "embedded": self._embedded.settings() if self._embedded is not None else None}

    def full_size_albedo(self, rgb: np.ndarray, normal: np.ndarray, confidence: Optional[np.ndarray]):
        """The embedded materials' full-size albedo (:meth:`EmbeddedEstimator.full_size_albedo`),
        so the materials equal the embedded estimator's own; ``None`` without them."""
        if self._embedded is None:
            return None
        return self._embedded.full_size_albedo(rgb, normal, confidence)

    def network_shape(self, h: int, w: int) -> Tuple[int, int]:
        """The network's input ``(height, width)`` for an ``h x w`` frame (``fit``)."""
        if self.fit == "frame":
            return network_size(h, w, self.spec.multiple)
        return upstream_size(h, w, self.input_size, self.spec.multiple)

    def network_input(self, rgb: np.ndarray) -> np.ndarray:
        """One frame as the network takes it: sRGB-encoded, resized (bicubic) to
        :meth:`network_shape`, mean/std normalised.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB (>= 0).

        Returns:
            ``3 x h x w`` array of :attr:`input_dtype` (h, w: :meth:`network_shape`).
        """
        h, w = rgb.shape[:2]
        nh, nw = self.network_shape(h, w)
        srgb = linear_to_srgb(np.clip(np.nan_to_num(rgb, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0))
        x = resize(np.ascontiguousarray(srgb, dtype=np.float32), (nw, nh), "cubic") if (nh, nw) != (h, w) else srgb
        x = np.clip(x, 0.0, 1.0)
        x = ((x - self._mean) / self._std).transpose(2, 0, 1)
        return np.ascontiguousarray(x, dtype=self.input_dtype)

    def disparity(self, rgb: np.ndarray) -> np.ndarray:
        """The network's relative disparity for one frame, at the frame's size.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB (>= 0).

        Returns:
            ``H x W`` float32 relative disparity (larger = nearer; scale/shift unknown).
        """
        h, w = rgb.shape[:2]
        x = self.network_input(rgb)
        (out,) = self.session.run([self.spec.output_name],
                                  {self.spec.input_name: x[None]})
        d = np.asarray(out, dtype=np.float32)
        d = d.reshape(d.shape[-2:])
        if d.shape != (h, w):
            d = resize(np.ascontiguousarray(d), (w, h), "linear")
        return np.nan_to_num(np.maximum(d, 0.0), nan=0.0, posinf=0.0)

    def predict(self, rgb: np.ndarray) -> EstimatorOutput:
        """G-buffers for one frame.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB (>= 0), H, W >= 1.

        Returns:
            :class:`EstimatorOutput` at ``H x W``: relative depth (> 0, larger =
            farther, range at most 200:1); no normals (``decompose`` derives them from
            this depth); with ``materials="embedded"`` albedo, metallic, roughness from
            the embedded network. ``models`` maps ``model_id`` to the cache snapshot
            commit (and the embedded model to its hash); ``pass_models`` and
            ``provenance`` say which produced which pass.

        Raises:
            ValueError: ``rgb`` is not ``H x W x 3``.
        """
        rgb = np.asarray(rgb, dtype=np.float32)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or min(rgb.shape[:2]) < 1:
            raise ValueError(f"expected an H x W x 3 RGB frame, got shape {rgb.shape}")
        disp = self.disparity(rgb)
        depth, _ = disparity_to_depth(disp)
        models = {self.model_id: self.revision}
        pass_models = {"depth": self.model_id, "normal": "derived from depth (backend.geometry)"}
        provenance = {"depth": "estimated", "normal": "derived"}
        albedo = metallic = roughness = None
        if self._embedded is not None:
            emb = self._embedded.predict(rgb)
            albedo, metallic, roughness = emb.albedo, emb.metallic, emb.roughness
            ph, pw = self._embedded.processing_size(*rgb.shape[:2])
            if self._embedded.albedo_method == "network" and (ph, pw) != rgb.shape[:2]:
                # the embedded network ran below this frame's size: restore the frame's fine
                # detail in its albedo here (decompose does so only from this frame's size up)
                from ..decomposer import albedo_detail_transfer

                small = resize(np.ascontiguousarray(rgb), (pw, ph), "area")
                albedo = albedo_detail_transfer(albedo, rgb, small)
            models.update(emb.models)
            for k in ("albedo", "metallic", "roughness"):  # as the embedded estimator says
                pass_models[k] = emb.pass_models.get(k) or next(iter(emb.models))
                provenance[k] = emb.provenance.get(k, "estimated")
        return EstimatorOutput(depth=np.ascontiguousarray(depth, dtype=np.float32), depth_kind="relative",
                               albedo=albedo, metallic=metallic, roughness=roughness, models=models,
                               provenance=provenance, pass_models=pass_models, disparity=disp)
