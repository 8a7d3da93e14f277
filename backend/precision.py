"""The add-on's *Precision* preference, for the diffusion backends (Marigold, ControlNet).

The preference travels in the job's request (:class:`backend.jobs.request.DecomposeRequest`,
:class:`~backend.jobs.request.RestyleRequest`, field ``precision``: ``fp16``, ``fp32`` or
``None``); the job runs inside :func:`preference`. The diffusion backends take a ``dtype``
option (``auto`` = fp16 on the GPU, fp32 on the CPU); :func:`resolve_dtype` turns its
``auto`` into ``float32`` when the preference is ``fp32`` (full precision on the GPU too:
slower, more memory, no fp16 overflow). ``fp16`` (the default) keeps ``auto``: half
precision is a GPU-only speed-up, the CPU stays in fp32. An explicit ``dtype`` option
(``--estimator-option dtype=...``, ``--option dtype=...``) always wins. Without a
preference in the request, the environment variable ``GBUFFER_EDITOR_PRECISION`` (what
add-on versions before the request file set) is read. The embedded estimator and
renderer (onnxruntime / numpy, fp32) do not use it.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

ENV = "GBUFFER_EDITOR_PRECISION"

#: the running job's preference (set by :func:`preference`); ``None``: read :data:`ENV`
_current: Optional[str] = None


@contextlib.contextmanager
def preference(value: Optional[str]) -> Iterator[None]:
    """Within the block, :func:`resolve_dtype` follows ``value`` (``fp16``/``fp32``;
    ``None`` leaves the one in force)."""
    global _current
    old = _current
    if value is not None:
        _current = str(value).strip().lower()
    try:
        yield
    finally:
        _current = old


def resolve_dtype(dtype: str = "auto") -> str:
    """``dtype`` unless it is ``auto`` and the preference says ``fp32`` (then ``float32``)."""
    if str(dtype) != "auto":
        return dtype
    pref = _current if _current is not None else os.environ.get(ENV, "").strip().lower()
    return "float32" if pref in ("fp32", "float32") else "auto"
