"""Per-pass provenance of a G-buffer folder, for the sidebar (no ``bpy`` needed).

Where each pass of the loaded G-buffers came from -- ``measured`` (parallax between
frames), ``estimated`` (a model's per-pixel prediction), ``derived`` (computed from
other passes, e.g. normals from depth) or ``default`` (a constant, or a model output
that is constant in practice) -- read from the folder's ``manifest.json`` (written by
Decompose, :func:`backend.jobs.decompose.provenance_summary`) or, for folders without
one, from the first frame's header. Cached per folder and manifest modification time,
since panels redraw often.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

#: sidebar icon per provenance kind (icons present in Blender 4.2 .. 5.x)
ICONS = {"measured": "CHECKMARK", "estimated": "INFO", "derived": "DOT", "default": "ERROR"}
#: what each kind means, one short line (tooltips / the panel)
MEANING = {
    "measured": "measured from the footage (parallax)",
    "estimated": "estimated per pixel by a model",
    "derived": "computed from other passes",
    "default": "not estimated: a constant",
}
#: pass names as the compositor shows them
LABELS = {"depth": "Depth", "normal": "Normal", "albedo": "Albedo", "metallic": "Metallic",
          "roughness": "Roughness", "confidence": "Confidence"}

_CACHE: Dict[Tuple[str, float], Optional[dict]] = {}


def _read(folder: str) -> Optional[dict]:
    from ..backend import contract

    try:
        man = contract.read_manifest(folder)
    except Exception:  # noqa: BLE001 - no or unreadable manifest: try a header
        man = {}
    if isinstance(man, dict) and man.get("provenance"):
        return {"provenance": man["provenance"], "pass_models": man.get("pass_models", {})}
    try:
        frames = contract.list_frames(folder)
        if frames:
            meta = contract.read_meta(frames[min(frames)])
            if meta.get("provenance"):
                return {"provenance": meta["provenance"], "pass_models": meta.get("pass_models", {})}
    except Exception:  # noqa: BLE001 - a folder being written; the panel shows nothing
        return None
    return None


def folder_provenance(folder: str) -> Optional[dict]:
    """``{"provenance": {pass: kind or {kind: frames}}, "pass_models": {pass: method}}``
    of a G-buffer folder, or ``None`` when it records none (older folders)."""
    if not folder or not os.path.isdir(folder):
        return None
    man = os.path.join(folder, "manifest.json")
    try:
        stamp = os.path.getmtime(man)
    except OSError:
        stamp = -1.0
    key = (os.path.abspath(folder), stamp)
    if key not in _CACHE:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = _read(folder)
    return _CACHE[key]


def lines(info: Optional[dict]) -> List[Tuple[str, str, str]]:
    """``(text, icon, kind)`` per pass, in pass order, for the panel; ``[]`` for ``None``.

    A kind that varies over frames reads ``"Metallic: estimated (3 frames), default (9)"``
    with the icon of the least trustworthy kind.
    """
    if not info:
        return []
    out = []
    order = list(ICONS)
    for name, label in LABELS.items():
        kind = info["provenance"].get(name)
        if kind is None:
            continue
        if isinstance(kind, dict):
            kinds = sorted(kind, key=order.index if all(k in order for k in kind) else str)
            text = ", ".join(f"{k} ({kind[k]} frames)" for k in kinds)
            worst = kinds[-1]
        else:
            text, worst = str(kind), str(kind)
        out.append((f"{label}: {text}", ICONS.get(worst, "QUESTION"), worst))
    return out
