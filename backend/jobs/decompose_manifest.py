"""What a decompose records about itself: its settings (the resume hash), its manifest's
source and output fields, and the shot-level provenance and flicker summaries. Part of
the decompose job (:mod:`backend.jobs.decompose`).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

import numpy as np

from .. import contract
from ..decomposer import Decomposer
from .runner import JobResult


#: multi-view options added after the first release, left out of the settings while at their defaults
#: (so the hash of a run without them is unchanged and earlier outputs still resume)
_NEW_OPTION_DEFAULTS = {"densify": False, "surface": False, "plane_agreement": 0.02}


def _option_settings(mv_options) -> Dict[str, Any]:
    return {k: v for k, v in mv_options.__dict__.items()
            if not (k in _NEW_OPTION_DEFAULTS and v == _NEW_OPTION_DEFAULTS[k])}


def _job_manifest(dec: Decomposer, plan, info, requested: Optional[int], first: int) -> Dict[str, Any]:
    """The top-level fields of the folder's ``manifest.json`` (the runner adds the rest)."""
    return {
        "source": {**info.to_dict(), "real_path": os.path.realpath(info.path)},
        "estimator": {"name": dec.estimator_name, "settings": dec.estimator.settings()},
        "output": {"width": info.width, "height": info.height,
                   "processing_size": [plan.proc_width, plan.proc_height],
                   "processing_resolution_requested": requested,
                   "processing_resolution": dec.resolution,
                   "intrinsics": list(plan.intrinsics), "intrinsics_assumed": plan.intrinsics_assumed,
                   "hfov_deg": dec.hfov_deg, "first_frame": first},
        "passes": list(contract.PASSES),
        "sky": {"depth": "depth_far", "normal": list(contract.SKY_NORMAL), "confidence": 0.0},
    }


def provenance_summary(frames) -> Dict[str, Any]:
    """Per pass, over the manifest's frame entries: the provenance kind when every frame
    agrees (``"default"``), else ``{kind: frame count}``; plus ``pass_models`` with the
    method of the most frames. ``{}`` when no frame records provenance."""
    from collections import Counter

    kinds: Dict[str, Counter] = {}
    methods: Dict[str, Counter] = {}
    for f in frames:
        for k, v in (f.get("provenance") or {}).items():
            kinds.setdefault(k, Counter())[v] += 1
        for k, v in (f.get("pass_models") or {}).items():
            methods.setdefault(k, Counter())[v] += 1
    if not kinds:
        return {}
    prov = {k: (next(iter(c)) if len(c) == 1 else dict(c)) for k, c in kinds.items()}
    return {"provenance": prov, "pass_models": {k: c.most_common(1)[0][0] for k, c in methods.items()}}


def flicker_summary(frames) -> Dict[str, Any]:
    """``{"flicker": {...}}``: the stabilisation's flicker over the manifest entries
    ``frames`` that carry it (raw and stabilised means), ``{}`` when none does."""
    rows = [f for f in frames if f.get("flicker")]
    if not rows:
        return {}
    return {"flicker": {
        "metric": "mean absolute warping error on flow-consistent pixels "
                  "(depth / (far - near)); lower is steadier",
        "raw": float(np.mean([r["flicker_raw"]["mean"] for r in rows])),
        "stabilized": float(np.mean([r["flicker"]["mean"] for r in rows])),
    }}


def record_summary(result: JobResult, summarise) -> None:
    """Add ``summarise(manifest frames)`` (:func:`provenance_summary`, :func:`flicker_summary`)
    to the job's ``manifest.json`` when it says anything."""
    man = result.manifest
    summary = summarise(man.get("frames", []))
    if summary:
        man.update(summary)
        contract.write_manifest(result.out_dir, man)
