"""A restyle output folder's names and what its frames' headers say: file paths, the frame
range argument, header values, the flicker measure of the rendered frames. Part of the
restyle job (:mod:`backend.jobs.restyle`).
"""
from __future__ import annotations

import hashlib
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import flicker as flick
from .. import contract, events
from ..input_files import native_path, refuse_special
from .flicker import PairError
from .writers import DEFAULT_FPS, read_rgba_exr
from .outputs import _ranges  # noqa: F401  (restyle's modules take it from here)


OUT_PREFIX = "restyle_"


PREVIEW_DIR = "preview"


MP4_NAME = "preview.mp4"


#: the look-matching transform of the shot (``--match-look``)
LOOK_MATCH_NAME = "look_match.json"


HEADER = "restyle/"


def output_path(out_dir: os.PathLike, number: int) -> Path:
    """``DIR/restyle_NNNN.exr`` for input frame ``number``."""
    return contract.frame_path(out_dir, number, prefix=OUT_PREFIX)


def preview_path(out_dir: os.PathLike, number: int) -> Path:
    """``DIR/preview/restyle_NNNN.png``."""
    return Path(out_dir) / PREVIEW_DIR / f"{OUT_PREFIX}{number:0{contract.FRAME_DIGITS}d}.png"


def parse_frames(spec: Optional[str]) -> Tuple[int, Optional[int]]:
    """``"A-B"`` -> ``(A, B or None)`` (same syntax as ``decompose --frames``).

    Raises:
        ValueError: malformed or empty range.
    """
    from .decompose import parse_frames as _pf

    return _pf(spec)


def read_settings_hash(path: Path) -> Optional[str]:
    """Settings hash stored in a restyle EXR header, or None."""
    return _header_value(path, "settings_hash")


def read_input_hash(path: Path) -> Optional[str]:
    """Fingerprint of the G-buffer frame(s) a restyle EXR was rendered from (header
    ``restyle/input_hash``), or None."""
    return _header_value(path, "input_hash")


def read_manifest_entry(path: Path) -> Optional[Dict[str, Any]]:
    """The frame's manifest entry as stored in its header (``restyle/manifest_entry``), or None."""
    v = _header_value(path, "manifest_entry")
    try:
        v = json.loads(v) if isinstance(v, str) else None
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _header_value(path: Path, key: str) -> Optional[str]:
    import OpenEXR

    refuse_special(path, "the restyle frame")
    with OpenEXR.File(native_path(path), header_only=True) as f:
        v = f.header().get(HEADER + key)
    return v.decode() if isinstance(v, bytes) else v


def flicker_metric(out_dir: Path, numbers: List[int], gbuffer_files: Mapping[int, Path],
                   known: Optional[Mapping[int, Any]] = None) -> Optional[Dict[str, Any]]:
    """The manifest's ``flicker`` entry for the restyle frames ``numbers`` in ``out_dir``
    (:func:`backend.jobs.flicker.sequence_flicker` on ``restyle_NNNN.exr``).

    Args:
        gbuffer_files: frame number -> the G-buffer frame it was rendered from.
        known: frame number -> :class:`~backend.jobs.flicker.PairError` (or an
            ``(output, source)`` pair) already measured; the rest is read from disk.
    """
    known = {n: v if isinstance(v, PairError) else PairError(*v) for n, v in (known or {}).items()}
    return flick.sequence_flicker(numbers, gbuffer_files,
                                  lambda n: read_rgba_exr(output_path(out_dir, n)), known=known)


def _mean_rgb(rgb: np.ndarray) -> List[float]:
    """Per-channel mean of an ``H x W x 3`` float32 image (OpenCV, float64 accumulation)."""
    import cv2

    m = cv2.mean(np.ascontiguousarray(rgb, dtype=np.float32))
    return [round(float(x), 6) for x in m[:3]]


def _inputs_digest(files: List[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def _source_fps(gb_manifest: Dict[str, Any], where: Optional[Path] = None) -> Fraction:
    """The source's frame rate from a G-buffer manifest; :data:`DEFAULT_FPS` (with a
    ``warning`` naming the manifest) when it is missing, malformed or not in (0, 1000]."""
    src = gb_manifest.get("source") if isinstance(gb_manifest.get("source"), dict) else {}
    raw = src.get("fps")
    if not raw:
        return DEFAULT_FPS
    try:
        fps = Fraction(str(raw))
    except (ValueError, ZeroDivisionError):
        fps = None
    if fps is None or not 0 < fps <= 1000:
        events.warning(f"{where or 'manifest.json'}: source fps {raw!r} is not a frame rate; the previews "
                       f"use {DEFAULT_FPS} fps", file=where)
        return DEFAULT_FPS
    return fps
