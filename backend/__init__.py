"""G-Buffer Editor backend: the public Python API.

Never imports ``bpy``: the same code runs inside Blender's worker process, as a plain
command line (``python -m backend``) and as a library. Importing ``backend`` is cheap:
the names below load their modules on first use.

In memory::

    from backend import Decomposer
    dec = Decomposer("embedded")           # any name from list_estimators()
    gb = dec.frame(rgb)                    # H x W x 3 float32 scene-linear -> GBufferFrame
    gb.depth, gb.normal, gb.albedo         # H x W / H x W x 3 float32, see GBufferFrame

Files and folders (these return a result object, raise typed errors, report progress
to a callback and print nothing)::

    from backend import decompose, restyle
    res = decompose("shot.mp4", "gb/", frames="1-48", progress=print)
    res = restyle("gb/", "fog/", "dense fog")

Contract I/O: :func:`read_frame`, :func:`write_frame`, :func:`read_meta` (header only),
:func:`read_manifest`, :func:`list_frames`, :func:`sanitize`. Discovery:
:func:`list_estimators`, :func:`list_renderers`, :func:`list_looks`.

Errors: :class:`InputError` (a ``ValueError``: bad argument or input, the CLI's exit
code 2; :class:`ContractError`, :class:`FootageError`, :class:`PromptError` are kinds
of it), :class:`JobError` (a frame failed at run time; exit code 1),
:class:`JobCancelled` (the ``cancel`` event was set; exit code 130). Each carries
``frame`` and ``file`` where known. Full reference: ``docs/api.md``.
"""
from __future__ import annotations

import importlib
from typing import Dict, List

__version__ = "0.1.0"

#: public name -> (module, attribute); loaded on first access
_EXPORTS = {
    "Decomposer": ("backend.decomposer", "Decomposer"),
    "FrameReport": ("backend.decomposer", "FrameReport"),
    "decompose": ("backend.jobs.decompose", "decompose"),
    "restyle": ("backend.jobs.restyle", "restyle"),
    "JobResult": ("backend.jobs.runner", "JobResult"),
    "JobError": ("backend.errors", "JobError"),
    "JobCancelled": ("backend.errors", "JobCancelled"),
    "SignalCancel": ("backend.jobs.runner", "SignalCancel"),
    "GBufferFrame": ("backend.contract", "GBufferFrame"),
    "ContractError": ("backend.contract", "ContractError"),
    "read_frame": ("backend.contract", "read_frame"),
    "write_frame": ("backend.contract", "write_frame"),
    "read_meta": ("backend.contract", "read_meta"),
    "read_manifest": ("backend.contract", "read_manifest"),
    "list_frames": ("backend.contract", "list_frames"),
    "sanitize": ("backend.contract", "sanitize"),
    "InputError": ("backend.errors", "InputError"),
    "FootageError": ("backend.footage", "FootageError"),
    "open_footage": ("backend.footage", "open_footage"),
    "PromptError": ("backend.renderers.prompt", "PromptError"),
    "parse_prompt": ("backend.renderers.prompt", "parse_prompt"),
    "read_prompt": ("backend.renderers.base", "read_prompt"),
    "renderer_class": ("backend.renderers.base", "renderer_class"),
    "resolution_of": ("backend.estimators.base", "resolution_of"),
}

__all__ = sorted(list(_EXPORTS) + ["list_estimators", "list_renderers", "list_looks", "__version__"])


def __getattr__(name: str):
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'backend' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # next access is a plain attribute
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))


def list_estimators() -> List[str]:
    """Names of the registered estimators (frame -> G-buffers), e.g. ``["embedded", "marigold"]``.

    ``embedded`` runs offline on the CPU with no torch; the others may need packages
    and model weights (see docs/decompose.md).
    """
    from .estimators.base import available_estimators

    return available_estimators()


def list_renderers() -> List[str]:
    """Names of the registered renderers (G-buffers + prompt -> frames), e.g.
    ``["controlnet", "embedded"]``."""
    from .renderers.base import available_renderers

    return available_renderers()


def list_looks() -> Dict[str, List[str]]:
    """The embedded renderer's looks and the words that name each one.

    Returns:
        ``{look: [words...]}`` in the order looks are applied, e.g.
        ``{"fog": ["fog", "foggy", "haze", "mist", ...], ...}``. Strength words
        (``light``, ``dense`` ...) are in ``backend.renderers.prompt.INTENSITY``.
    """
    from .renderers.prompt import LOOK_ORDER, SYNONYMS

    return {look: sorted(w for w, target in SYNONYMS.items() if target == look) for look in LOOK_ORDER}
