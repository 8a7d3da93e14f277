"""The add-on's *Precision* preference, for the diffusion backends (Marigold, ControlNet).

The Blender add-on passes its preference to every worker as ``GBUFFER_EDITOR_PRECISION``
(``fp16`` or ``fp32``; ``operators/backend_args.py``). The diffusion backends take a
``dtype`` option (``auto`` = fp16 on the GPU, fp32 on the CPU); :func:`resolve_dtype`
turns its ``auto`` into ``float32`` when the preference is ``fp32`` (full precision on
the GPU too: slower, more memory, no fp16 overflow). ``fp16`` (the default) keeps
``auto``: half precision is a GPU-only speed-up, the CPU stays in fp32. An explicit
``dtype`` option (``--estimator-option dtype=...``, ``--option dtype=...``) always wins.
The embedded estimator and renderer (onnxruntime / numpy, fp32) do not use it.
"""
from __future__ import annotations

import os

ENV = "GBUFFER_EDITOR_PRECISION"


def resolve_dtype(dtype: str = "auto") -> str:
    """``dtype`` unless it is ``auto`` and the preference says ``fp32`` (then ``float32``)."""
    if str(dtype) != "auto":
        return dtype
    pref = os.environ.get(ENV, "").strip().lower()
    return "float32" if pref in ("fp32", "float32") else "auto"
