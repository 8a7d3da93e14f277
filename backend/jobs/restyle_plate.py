"""Restyle's plate: where the unedited passes come from, and the shot's lighting (issue 39).

* :func:`recorded_reference`: an edited G-buffer folder written by the add-on records the
  folder it was edited from (``manifest.json`` ``edited_from``); restyle uses it as the
  reference when ``--reference`` is not given. Whenever the unedited passes are unknown
  (that folder is gone; the frames say they were edited and nothing records their
  source; no manifest; a frame whose size is not what decompose / export-scene wrote)
  one ``warning`` says the passes are taken as unedited, so material edits in them have
  no effect, and to pass ``--reference UNEDITED_FOLDER``.
* :func:`shot_lighting`: the plate's lighting (:class:`backend.renderers.differential.
  PlateLighting`), fitted once per shot on up to ``FIT_FRAMES`` frames spread over the
  whole folder (the unedited ones when there is a reference), so every frame and every
  farm chunk of a shot uses the same light. It is written into the output folder as
  ``plate_lighting.json`` (SH coefficients, documented in docs/restyle.md) and
  ``plate_lighting.exr`` (equirectangular radiance in Blender's world axes: the add-on's
  *World from Plate* builds a World from it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from .. import contract, events
from ..errors import JobError
from ..input_files import load_json

JSON_NAME = "plate_lighting.json"
EXR_NAME = "plate_lighting.exr"


def recorded_reference(gbuffer_dir: Path, gb_manifest: Mapping[str, Any], reference_dir: Optional[os.PathLike],
                       renderer, first_frame: Optional[Path] = None,
                       files: Optional[Mapping[int, Path]] = None, later: Optional[list] = None) -> Optional[Path]:
    """The reference folder to use: ``reference_dir`` when given, else the manifest's
    ``edited_from`` when that folder exists (the restyle manifest's ``input.reference_dir``
    says so). Otherwise ``None``, and **one** ``warning`` whenever the unedited passes are
    unknown (:func:`why_unknown`: the folder is not, frame for frame, what a decompose or
    scene export wrote): its passes are taken as unedited, so material edits in them have
    no effect. Renderers that take no reference: ``reference_dir`` as given.

    Args:
        files: the frames to render (``{number: path}``); ``None``: ``first_frame`` only.
        later: when given, the warning's text is appended to it instead of emitted (the
            job emits it after its input checks, so refused input gets one line only).
    """
    if reference_dir is not None or not getattr(renderer, "accepts_reference", False):
        return Path(reference_dir) if reference_dir is not None else None
    src = gb_manifest.get("edited_from")
    if isinstance(src, str) and src and Path(src).is_dir() and Path(src).resolve() != gbuffer_dir.resolve():
        return Path(src)
    why = why_unknown(gb_manifest, files if files is not None else
                      ({0: first_frame} if first_frame is not None else {}))
    if why is None:
        return None  # a decompose / export-scene folder as its job wrote it: these are the unedited passes
    text = (f"G-buffer folder {gbuffer_dir}: its unedited passes are unknown ({why}); no --reference was "
            "given: the passes are taken as unedited, so material edits in them have no effect: they "
            "cannot act locally (the output is the footage plus lights and looks); pass --reference UNEDITED_FOLDER "
            "(the folder decompose or export-scene wrote)")
    if later is not None:
        later.append(text)
    else:
        events.warning(text, file=gbuffer_dir)
    return None


#: jobs whose output folder holds unedited passes as written (manifest ``job``)
UNEDITED_JOBS = ("decompose", "scene_export")


def why_unknown(gb_manifest: Mapping[str, Any], files: Mapping[int, Path]) -> Optional[str]:
    """Why the folder's frames cannot be taken as its unedited passes, ``None`` when they
    can: a manifest of a decompose or scene export lists every frame with the size it
    wrote and the file on disk has that size (a scene export records no size: listed is
    enough), and no frame header says it was edited. A size check (no hash), so it costs
    nothing; an edit that keeps every file's size to the byte is not caught."""
    src = gb_manifest.get("edited_from")
    if isinstance(src, str) and src:
        return f"its recorded source {src} (manifest edited_from) is not a folder any more"
    for n, path in sorted(files.items())[:1]:
        if _frames_say_edited(path):
            return f"{path.name} says it was edited (gbuffer/edited) but nothing records its source"
    if not gb_manifest:
        return "no manifest.json says which job wrote it"
    job = gb_manifest.get("job")
    if job not in UNEDITED_JOBS:
        return f"its manifest.json is from job {job!r}, not decompose or export-scene"
    sizes: dict = {}
    for e in gb_manifest.get("frames") or ():
        try:
            sizes[int(e["frame"])] = int(e["bytes"]) if e.get("bytes") is not None else None
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    for n, path in sorted(files.items()):
        try:
            size = path.stat().st_size
        except OSError:
            continue  # missing: reading the frame reports it
        if n not in sizes:
            return f"manifest.json does not list {path.name}"
        if sizes[n] is not None and sizes[n] != size:
            return f"{path.name} is not the file {job} wrote (manifest.json lists {sizes[n]} bytes, it has {size})"
    return None


def shot_lighting(renderer, all_files: Mapping[int, Path], ref_files: Mapping[int, Path]):
    """Fit the shot's :class:`~backend.renderers.differential.PlateLighting` and give it to
    ``renderer`` (its ``plate_lighting``); ``None`` for renderers without one."""
    if not hasattr(renderer, "plate_lighting"):
        return None
    from ..renderers.differential import FIT_FRAMES, estimate_plate_lighting

    nums = sorted(all_files)
    pick = sorted({nums[int(round(i))] for i in np.linspace(0, len(nums) - 1, min(FIT_FRAMES, len(nums)))})
    frames, used = [], []
    for n in pick:
        path = ref_files.get(n, all_files[n])
        try:
            frames.append(_fit_grid(contract.read_frame(path)))
            used.append(n)
        except Exception:  # noqa: BLE001 - unreadable: rendering that frame reports it
            continue
    lighting = estimate_plate_lighting(frames, used)
    renderer.plate_lighting = lighting
    return lighting


def _fit_grid(frame: contract.GBufferFrame) -> contract.GBufferFrame:
    """``frame`` on the regular grid the lighting fit samples (every ``step``-th pixel,
    ``step`` as :func:`~backend.renderers.differential.estimate_plate_lighting` takes it
    at full size), so the fit frames are not all held at full size (issue 37: five 4K
    frames are 2.2 GB); the fit then samples every pixel of it, the same pixels."""
    import dataclasses
    import math

    from ..renderers.differential import FIT_SAMPLES

    h, w = frame.shape
    step = max(1, int(math.sqrt(h * w / FIT_SAMPLES)))
    if step == 1:
        return frame
    arrays = {f.name: np.ascontiguousarray(getattr(frame, f.name)[::step, ::step])
              for f in dataclasses.fields(frame) if isinstance(getattr(frame, f.name), np.ndarray)}
    return dataclasses.replace(frame, **arrays)


def write_lighting(out_dir: Path, lighting) -> dict:
    """Write ``plate_lighting.json`` / ``.exr`` into ``out_dir`` (refusing to replace a
    file of that name restyle did not write); returns the manifest's ``plate_lighting``."""
    js = out_dir / JSON_NAME
    if js.is_symlink() or (js.exists() and not _ours(js)) or (out_dir / EXR_NAME).is_symlink():
        raise JobError(f"{js}: a file with this name that restyle did not write is in the output folder; "
                       "move it or choose another --out", file=js)
    lighting.write(out_dir)
    return {"json": JSON_NAME, "exr": EXR_NAME, "frames": list(lighting.frames), "rms": round(lighting.rms, 6),
            "format": "SH order 2 of the plate's shading, camera space; equirect radiance, Blender world axes"}


def _ours(path: Path) -> bool:
    try:
        return load_json(path).get("format") == "gbuffer-plate-lighting-1"  # a FIFO: not ours
    except (OSError, ValueError, AttributeError):
        return False


def _frames_say_edited(path: Optional[Path]) -> bool:
    """The frame's header says the add-on's edit bake wrote it (``gbuffer/edited``)."""
    if path is None:
        return False
    try:
        return contract.read_meta(path).get("edited") is True
    except Exception:  # noqa: BLE001 - unreadable: reading the frame reports it
        return False
