"""Restyle's plate: where the unedited passes come from, and the shot's lighting (issue 39).

* :func:`recorded_reference`: an edited G-buffer folder written by the add-on records the
  folder it was edited from (``manifest.json`` ``edited_from``); restyle uses it as the
  reference when ``--reference`` is not given. When that folder is gone, or the frames
  say they were edited (header ``gbuffer/edited``) and nothing records their source,
  edits cannot be told from the estimate: a ``warning`` says so (the output is then the
  footage plus lights and looks: nothing can act locally).
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
                       renderer, first_frame: Optional[Path] = None) -> Optional[Path]:
    """The reference folder to use: ``reference_dir`` when given, else the manifest's
    ``edited_from`` when that folder exists (the restyle manifest's ``input.reference_dir`` says so); ``None`` with a
    ``warning`` when the folder is not a plain decompose output and nothing says where its
    unedited passes are. Renderers that take no reference: ``reference_dir`` as given."""
    if reference_dir is not None or not getattr(renderer, "accepts_reference", False):
        return Path(reference_dir) if reference_dir is not None else None
    src = gb_manifest.get("edited_from")
    if isinstance(src, str) and src and Path(src).is_dir() and Path(src).resolve() != gbuffer_dir.resolve():
        return Path(src)
    if not src:
        if not _frames_say_edited(first_frame):
            # a decompose / export-scene folder as written, or one with no manifest: nothing
            # says it was edited (other tools' edits cannot be detected; docs/restyle.md)
            return None
        why = "its frames say they were edited (gbuffer/edited) but it records no source (manifest edited_from)"
    else:
        why = f"its recorded source {src} (manifest edited_from) is not a folder any more"
    events.warning(f"G-buffer folder {gbuffer_dir} has no --reference and {why}: material edits in it cannot "
                   "be told from the estimated passes, so they cannot act locally and are not applied (the output "
                   "is the footage plus lights and looks); pass --reference the unedited G-buffer folder",
                   file=gbuffer_dir)
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
