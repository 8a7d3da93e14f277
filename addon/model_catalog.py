"""The optional models the backend can use: what they are, where they live, whether present.

No ``bpy`` here: the preferences draw this list (:mod:`.preferences`) and the Download
operator (``operators/models.py``) fetches what is missing. Downloaded models live in a
Hugging Face cache folder (``models--<org>--<name>/snapshots/<rev>/``); the embedded
estimator's weights ship with the extension.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

_PIPELINE_FILES = ("*.json", "*.txt", "*.safetensors", "tokenizer/*", "*.model")
_SD_FILES = ("model_index.json", "*/*.json", "*/*.txt", "*/diffusion_pytorch_model.safetensors",
             "*/model.safetensors", "tokenizer/*")


@dataclass(frozen=True)
class ModelSpec:
    """One downloadable (or bundled) model.

    Attributes:
        key: short identifier (operator argument).
        label: name shown in the preferences.
        repo_id: Hugging Face repository, or ``""`` for the bundled embedded model.
        used_by: which estimator / renderer needs it.
        allow: file patterns to download (safetensors only, never pickles).
    """

    key: str
    label: str
    repo_id: str
    used_by: str
    allow: Tuple[str, ...] = _PIPELINE_FILES
    #: a file whose presence in a snapshot means "downloaded" (default: a model_index.json or config.json)
    marker: str = ""
    #: licence of the weights and published download size, shown in the preferences ("" = not shown)
    licence: str = ""
    size: str = ""
    #: GPU memory guidance shown in the preferences ("" = not shown)
    vram: str = ""


def model_specs() -> Tuple[ModelSpec, ...]:
    """The models the backend can use, with the repository ids the backend itself uses."""
    from ..backend.estimators import marigold as mg
    from ..backend.estimators import onnx_depth as od
    from ..backend.renderers import controlnet as cn
    from ..backend.renderers import flux2_klein as fk
    from ..backend.renderers import wan_vace as wan

    depth, normals, iid = mg.DEPTH_MODEL, mg.NORMALS_MODEL, mg.INTRINSICS_MODEL
    sd, cn_depth, cn_normal = cn.DEFAULT_BASE_MODEL, cn.DEFAULT_DEPTH_MODEL, cn.DEFAULT_NORMAL_MODEL
    return (
        ModelSpec("embedded", "Embedded G-buffer net (bundled)", "", "estimator 'embedded'"),
        # the fp32 weights only (_SD_FILES): the estimator never loads the *.fp16.safetensors copies
        ModelSpec("marigold_depth", "Marigold Depth", depth, "estimator 'marigold'", _SD_FILES,
                  licence="OpenRAIL++-M"),
        ModelSpec("marigold_normals", "Marigold Normals", normals, "estimator 'marigold'", _SD_FILES,
                  licence="OpenRAIL++-M"),
        ModelSpec("marigold_iid", "Marigold Appearance (albedo, roughness, metallic)", iid, "estimator 'marigold'",
                  _SD_FILES, licence="OpenRAIL++-M"),
        ModelSpec("sd15", "Stable Diffusion 1.5", sd, "renderer 'controlnet'", _SD_FILES),
        ModelSpec("controlnet_depth", "ControlNet Depth (SD 1.5)", cn_depth, "renderer 'controlnet'"),
        ModelSpec("controlnet_normal", "ControlNet Normal (SD 1.5)", cn_normal, "renderer 'controlnet'"),
        ModelSpec("flux2_klein_4b", "FLUX.2 [klein] 4B (GPU, ~13 GB VRAM; bf16)", fk.DEFAULT_MODEL,
                  "renderer 'flux2-klein'", fk.DOWNLOAD_FILES, licence="Apache-2.0", size="~16 GB"),
        ModelSpec("wan_vace_1_3b", "Wan2.1 VACE 1.3B (video restyle)", wan.DEFAULT_MODEL, "renderer 'wan-vace'",
                  licence="Apache-2.0", size="~20 GB (estimate)", vram="GPU with 8+ GB VRAM at 480p"),
        *(ModelSpec(m.key, f"{m.label} (ONNX)", m.repo_id, f"estimator '{m.key}'",
                    (m.files["fp32"],) + tuple(m.extra_files), marker=m.files["fp32"], licence=m.licence,
                    size=f"{m.sizes_mb['fp32']:.0f} MB") for m in od.MODELS.values()),
    )


def embedded_weights() -> Path:
    """Bundled weights of the embedded estimator (its default model file)."""
    from ..backend.estimators import embedded

    return embedded.DEFAULT_MODEL


def _folder_size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def model_status(spec: ModelSpec, cache: Optional[os.PathLike]) -> Tuple[bool, int]:
    """``(present, size in bytes)`` of a model.

    Bundled: the weights file. Downloaded: a snapshot folder in ``cache`` (or in the zip's
    own ``models/`` folder)
    (``models--<org>--<name>/snapshots/<rev>/``) holding a ``model_index.json`` or
    ``config.json``; the size is that of the repository's folder (blobs).
    """
    if not spec.repo_id:
        p = embedded_weights()
        return (True, p.stat().st_size) if p.exists() else (False, 0)
    markers = (spec.marker,) if spec.marker else ("model_index.json", "config.json")
    # the models folder, then a copy the release zip carries (./dev build --with-models)
    for folder in ([Path(cache)] if cache else []) + [Path(__file__).resolve().parent.parent / "models"]:
        repo = folder / ("models--" + spec.repo_id.replace("/", "--"))
        snaps = repo / "snapshots"
        if snaps.is_dir() and any((s / m).exists() for s in snaps.iterdir() for m in markers):
            return True, _folder_size(repo)
    return False, 0


def human_size(n: int) -> str:
    """``1536 -> '1.5 KB'`` (powers of 1024)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover
