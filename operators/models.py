"""Download an optional model (``gbuffer.download_model``), from the add-on preferences.

Downloads run ``huggingface_hub.snapshot_download`` in a worker process (Blender's Python
with the on-demand packages, or the external Python), reporting bytes on disk as
JSON-lines progress, and only when Blender's online access is on and the add-on's
offline mode is off (:func:`..addon.preferences.downloads_allowed`). They go into the
models folder, a Hugging Face cache (:func:`..addon.preferences.cache_dir`); workers get
``HF_HUB_CACHE`` set to it (:func:`.backend_args.worker_environment`), so the backend's
``from_pretrained`` / ``snapshot_download(local_files_only=True)`` finds them offline.
The list of models and their status: :mod:`..addon.model_catalog`.
"""
from __future__ import annotations

import os
from pathlib import Path

import bpy

from ..addon import preferences
from ..addon.model_catalog import ModelSpec, model_specs
from . import backend_args
from .jobs import JobController, JobFailed, ModalJobMixin, WorkerStep

#: run as ``python -c DOWNLOAD_SCRIPT REPO_ID CACHE_DIR PATTERN...``
DOWNLOAD_SCRIPT = r'''
import json, os, sys, threading, time
from backend.sitepaths import append_extra_site_paths  # PYTHONPATH starts at the extension root
append_extra_site_paths()  # the on-demand packages (huggingface_hub), after everything else
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


class GBUFFER_OT_download_model(ModalJobMixin, bpy.types.Operator):
    """Download this model (safetensors files) from Hugging Face into the models folder"""

    bl_idname = "gbuffer.download_model"
    bl_label = "Download Model"
    bl_options = {"INTERNAL"}

    model: bpy.props.StringProperty(name="Model", description="Key of the model to download")

    @classmethod
    def poll(cls, context):
        ok, why = preferences.downloads_allowed(backend_args.preferences())
        if not ok:
            cls.poll_message_set(why)
        return ok

    def build_job(self, context) -> JobController:
        spec = next((m for m in model_specs() if m.key == self.model and m.repo_id), None)
        if spec is None:
            raise JobFailed(f"unknown model {self.model!r}")
        cache = preferences.cache_dir()
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


classes = (GBUFFER_OT_download_model,)
