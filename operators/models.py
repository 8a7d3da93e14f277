"""Download an optional model (``gbuffer.download_model``), from the add-on preferences.

Downloads run ``python -m backend models download KEY`` (``huggingface_hub.snapshot_download``,
:func:`backend.model_store.download`) in a worker process (Blender's Python with the
on-demand packages, or the external Python), reporting MB on disk as JSON-lines
progress, and only when Blender's online access is on and the add-on's offline mode is off (:func:`..addon.preferences.downloads_allowed`). They go into the
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


def download_argv(spec: ModelSpec, cache: str, python: str) -> list:
    """Command line of the download worker for ``spec`` into ``cache``: the backend's own
    ``python -m backend models download KEY`` (:mod:`backend.model_store`, the command every
    "model missing" message names), JSON-line progress in MB."""
    return [python, "-m", "backend", "--json", "models", "download", spec.key, "--models-dir", str(cache)]


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
