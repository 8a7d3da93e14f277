"""Optional models: list with status (present / missing, size on disk) and Download buttons.

Downloaded models live in a Hugging Face cache folder: the ``model_dir`` preference
(default: the extension's user folder, ``bpy.utils.extension_path_user``). Workers get
``HF_HUB_CACHE`` set to it (:func:`.backend_args.worker_environment`), so the backend's
``from_pretrained`` / ``snapshot_download(local_files_only=True)`` finds them offline.

Downloads run ``huggingface_hub.snapshot_download`` in a worker process (Blender's Python
with the on-demand packages, or the external Python), reporting bytes on disk as
JSON-lines progress, and only when Blender's online access is on and the add-on's
offline mode is off.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import bpy

from .jobs import JobController, JobFailed, ModalJobMixin, WorkerStep

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


def model_specs() -> Tuple[ModelSpec, ...]:
    """The models the backend can use, with the repository ids the backend itself uses."""
    try:
        from ..backend.estimators import marigold as mg

        depth, normals, iid = mg.DEPTH_MODEL, mg.NORMALS_MODEL, mg.INTRINSICS_MODEL
    except ImportError:
        depth, normals, iid = ("prs-eth/marigold-depth-v1-1", "prs-eth/marigold-normals-v1-1",
                               "prs-eth/marigold-iid-appearance-v1-1")
    try:
        from ..backend.renderers import controlnet as cn

        sd, cn_depth, cn_normal = cn.DEFAULT_BASE_MODEL, cn.DEFAULT_DEPTH_MODEL, cn.DEFAULT_NORMAL_MODEL
    except ImportError:
        sd, cn_depth, cn_normal = ("stable-diffusion-v1-5/stable-diffusion-v1-5",
                                   "lllyasviel/control_v11f1p_sd15_depth", "lllyasviel/control_v11p_sd15_normalbae")
    return (
        ModelSpec("embedded", "Embedded G-buffer net (bundled)", "", "estimator 'embedded'"),
        ModelSpec("marigold_depth", "Marigold Depth", depth, "estimator 'marigold'"),
        ModelSpec("marigold_normals", "Marigold Normals", normals, "estimator 'marigold'"),
        ModelSpec("marigold_iid", "Marigold Appearance (albedo, roughness, metallic)", iid, "estimator 'marigold'"),
        ModelSpec("sd15", "Stable Diffusion 1.5", sd, "renderer 'controlnet'", _SD_FILES),
        ModelSpec("controlnet_depth", "ControlNet Depth (SD 1.5)", cn_depth, "renderer 'controlnet'"),
        ModelSpec("controlnet_normal", "ControlNet Normal (SD 1.5)", cn_normal, "renderer 'controlnet'"),
    )


def embedded_weights() -> Path:
    """Bundled weights of the embedded estimator (``backend/model/weights/embedded.onnx``)."""
    return Path(__file__).resolve().parent.parent / "backend" / "model" / "weights" / "embedded.onnx"


def cache_dir(prefs=None) -> Optional[str]:
    """The models folder (a Hugging Face cache): the preference, else the extension's user
    folder ``models``; ``None`` when neither is available (add-on not installed)."""
    from .. import preferences as prefs_mod

    try:
        return prefs_mod.model_dir(prefs)
    except (ValueError, RuntimeError, TypeError):
        return None


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

    Bundled: the weights file. Downloaded: a snapshot folder in ``cache``
    (``models--<org>--<name>/snapshots/<rev>/``) holding a ``model_index.json`` or
    ``config.json``; the size is that of the repository's folder (blobs).
    """
    if not spec.repo_id:
        p = embedded_weights()
        return (True, p.stat().st_size) if p.exists() else (False, 0)
    if not cache:
        return False, 0
    repo = Path(cache) / ("models--" + spec.repo_id.replace("/", "--"))
    snaps = repo / "snapshots"
    present = snaps.is_dir() and any(
        (s / "model_index.json").exists() or (s / "config.json").exists() for s in snaps.iterdir()
    )
    return present, _folder_size(repo) if repo.is_dir() else 0


def human_size(n: int) -> str:
    """``1536 -> '1.5 KB'`` (powers of 1024)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover


#: run as ``python -c DOWNLOAD_SCRIPT REPO_ID CACHE_DIR PATTERN...``
DOWNLOAD_SCRIPT = r'''
import json, os, sys, threading, time
sys.path += [p for p in os.environ.get("GBUFFER_EXTRA_SITE", "").split(os.pathsep) if p and p not in sys.path]
repo, cache, allow = sys.argv[1], sys.argv[2], sys.argv[3:]
def emit(**kw):
    print(json.dumps(kw), flush=True)
try:
    from huggingface_hub import HfApi, snapshot_download
    from fnmatch import fnmatch
    info = HfApi().model_info(repo, files_metadata=True)
    total = sum((s.size or 0) for s in info.siblings if any(fnmatch(s.rfilename, a) for a in allow))
except Exception as e:
    emit(event="error", message=f"{repo}: {type(e).__name__}: {e}", frame=None, file=None)
    sys.exit(1)
folder = os.path.join(cache, "models--" + repo.replace("/", "--"))
result = {}
def run():
    try:
        result["path"] = snapshot_download(repo, cache_dir=cache, allow_patterns=allow)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
t = threading.Thread(target=run, daemon=True)
t.start()
start = time.time()
while t.is_alive():
    t.join(0.5)
    done = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs) if os.path.isdir(folder) else 0
    mb, tot = done // 2**20, max(1, total // 2**20)
    rate = done / 2**20 / max(1e-3, time.time() - start)
    emit(event="progress", frame=None, done=min(mb, tot), total=tot, fps=rate, eta_s=(tot - mb) / rate if rate else None)
if "error" in result:
    emit(event="error", message=f"{repo}: {result['error']}", frame=None, file=None)
    sys.exit(1)
emit(event="done", path=result["path"])
'''


def download_argv(spec: ModelSpec, cache: str, python: str) -> list:
    """Command line of the download worker for ``spec`` into ``cache``."""
    return [python, "-c", DOWNLOAD_SCRIPT, spec.repo_id, str(cache), *spec.allow]


def downloads_allowed(prefs=None) -> Tuple[bool, str]:
    """``(allowed, reason)``: Blender's online access must be on and offline mode off."""
    if not bpy.app.online_access:
        return False, "Online access is off (Preferences > System > Network)"
    if prefs is not None and getattr(prefs, "offline_mode", False):
        return False, "Offline mode is on in the G-Buffer Editor preferences"
    return True, ""


class GBUFFER_OT_download_model(ModalJobMixin, bpy.types.Operator):
    """Download this model (safetensors files) from Hugging Face into the models folder"""

    bl_idname = "gbuffer.download_model"
    bl_label = "Download Model"
    bl_options = {"INTERNAL"}

    model: bpy.props.StringProperty(name="Model", description="Key of the model to download")

    @classmethod
    def poll(cls, context):
        from . import backend_args

        ok, why = downloads_allowed(backend_args.preferences())
        if not ok:
            cls.poll_message_set(why)
        return ok

    def build_job(self, context) -> JobController:
        from . import backend_args

        spec = next((m for m in model_specs() if m.key == self.model and m.repo_id), None)
        if spec is None:
            raise JobFailed(f"unknown model {self.model!r}")
        cache = cache_dir()
        if not cache:
            raise JobFailed("no models folder: set one in the preferences")
        os.makedirs(cache, exist_ok=True)
        prefs = backend_args.preferences()
        python, _ = backend_args.worker_python(prefs)
        env = backend_args.worker_environment(prefs)
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            env.pop(k, None)
        log = Path(cache) / f"download_{spec.key}.log"
        step = WorkerStep(f"Downloading {spec.label} (MB)", download_argv(spec, cache, python), log, env=env)
        return JobController(context.scene, "Download", [step])


def draw_model_list(layout, prefs) -> None:
    """Model rows for the add-on preferences: status, size, Download (preferences.py calls this)."""
    cache = cache_dir(prefs)
    allowed, why = downloads_allowed(prefs)
    box = layout.box()
    box.label(text="Models", icon="FILE_3D")
    if cache:
        box.label(text=str(cache), icon="FILE_FOLDER")
    for spec in model_specs():
        present, size = model_status(spec, cache)
        row = box.row()
        row.label(text=spec.label, icon="CHECKMARK" if present else "X")
        row.label(text=(human_size(size) if present else "missing") + f"  ({spec.used_by})")
        if spec.repo_id and not present:
            sub = row.row()
            sub.enabled = allowed
            op = sub.operator("gbuffer.download_model", text="Download", icon="IMPORT")
            op.model = spec.key
    if not allowed:
        box.label(text=why, icon="INFO")


classes = (GBUFFER_OT_download_model,)
