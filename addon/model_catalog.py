"""The optional models the backend can use: what they are, where they live, whether present.

No ``bpy`` here: the preferences draw this list (:mod:`.preferences`) and the Download
operator (``operators/models.py``) fetches what is missing. The list, the status and the
download are the backend's own (:mod:`backend.model_store`, also ``python -m backend
models``); this module names them for the add-on. Downloaded models live in a Hugging Face
cache folder (``models--<org>--<name>/snapshots/<rev>/``); the embedded estimator's
weights ship with the extension.
"""
from __future__ import annotations

from pathlib import Path

from ..backend.model_store import ModelSpec, human_size, model_specs, model_status  # noqa: F401

__all__ = ["ModelSpec", "human_size", "model_specs", "model_status", "embedded_weights"]


def embedded_weights() -> Path:
    """Bundled weights of the embedded estimator (its default model file)."""
    from ..backend.estimators import embedded

    return embedded.DEFAULT_MODEL
