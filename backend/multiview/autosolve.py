"""Camera: Auto -- solve the footage's camera when it has parallax, for ``decompose
--camera auto`` and ``python -m backend solve`` (:mod:`backend.jobs.solve_cli`).

:func:`solve_footage` decodes the frames at a tracking size (long side
:data:`TRACK_SIZE`), tracks them and solves with the focal length unknown
(:func:`backend.multiview.sfm.solve_tracks`); the cameras are scaled back to the footage's
size. :func:`auto_cameras` writes them as our cameras JSON when every check passes, else
reports one line (a ``warning``) and returns ``None`` so the caller keeps the single-image
path.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from .. import events
from ..contract import atomic_path
from ..input_files import load_json
from .camera_files import JSON_FORMAT, save_cameras_json
from .sfm import SolveReport, select_tracks, solve_tracks, to_gray, track_features

#: long side (pixels) of the frames tracked
TRACK_SIZE = 960
#: a clip longer than this is not solved by Camera: Auto (bundle adjustment time)
MAX_FRAMES = 240
#: suffix of the cameras file Camera: Auto writes next to the output folder
AUTO_SUFFIX = "_cameras.json"


def solve_footage(input_path: os.PathLike, *, first: int = 0, last: Optional[int] = None,
                  colorspace: Optional[str] = None, focal_px: Optional[float] = None,
                  refine_k1: bool = False, start_frame: Optional[int] = None) -> SolveReport:
    """Track and solve the frames ``first..last`` (source frame numbers) of a clip.

    Args:
        focal_px: the focal length in pixels at the footage's full size, when known.

    Returns:
        :class:`backend.multiview.sfm.SolveReport` with cameras at the footage's size.

    Raises:
        FootageError: unreadable footage (names the file and frame).
    """
    from ..footage import open_footage

    grays, numbers = [], []
    with open_footage(input_path, colorspace=colorspace, max_size=TRACK_SIZE, start_frame=start_frame) as src:
        full_w, full_h = src.info.width, src.info.height
        for fr in src:
            if fr.number < first:
                continue
            if last is not None and fr.number > last:
                break
            grays.append(to_gray(fr.rgb))
            numbers.append(fr.number)
            if len(numbers) > MAX_FRAMES:
                break
    if len(numbers) > MAX_FRAMES:
        from .sfm import _failed, Tracks
        import numpy as np

        return _failed(Tracks(numbers, np.zeros((len(numbers), 0, 2)), 1, 1),
                       f"more than {MAX_FRAMES} frames: solve the clip in Blender (Track & Solve) or pass --cameras")
    h, w = grays[0].shape
    tracks = track_features(grays, numbers)
    scale = w / full_w
    report = solve_tracks(tracks, focal_px=focal_px * scale if focal_px else None, refine_k1=refine_k1,
                          size_scale=1.0 / scale)
    report.cameras = {k: c.scaled(full_w, full_h) for k, c in report.cameras.items()}
    report.focal_px = report.focal_px / scale
    if report.suggested_focal_px is not None:
        report.suggested_focal_px = report.suggested_focal_px / scale
    return report


def default_auto_path(out_dir: os.PathLike) -> Path:
    """``OUT_cameras.json`` next to the output folder (never inside it: the job refuses an
    output folder that holds one of its inputs)."""
    out = Path(out_dir).absolute()
    return out.parent / f"{out.name}{AUTO_SUFFIX}"


def write_solve(report: SolveReport, path: os.PathLike) -> Path:
    """Write a passed solve as our cameras JSON (atomic), with its depth range and a
    ``"solve"`` block (the report's summary). Refuses to replace a file that is not a
    cameras JSON of ours."""
    path = Path(path)
    if path.exists():
        try:
            fmt = load_json(path).get("format")
        except (OSError, ValueError, AttributeError):
            fmt = None
        if fmt != JSON_FORMAT:
            raise FileExistsError(f"{path}: exists and is not a cameras file of ours; not replaced")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_cameras_json(tmp, report.cameras, convention="opencv", units="solve units",
                          depth_range=report.depth_range)
        doc = json.loads(Path(tmp).read_text(encoding="utf-8"))
        doc["solve"] = report.summary()
        Path(tmp).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def auto_cameras(input_path: os.PathLike, out_dir: os.PathLike, *, first: int = 0, last: Optional[int] = None,
                 colorspace: Optional[str] = None, start_frame: Optional[int] = None) -> Optional[Path]:
    """Camera: Auto. Solve the clip; when the solve passes every check write it next to
    ``out_dir`` (:func:`default_auto_path`) and return the path, else emit one warning
    ``"Camera: Auto: <reason>; single-image depth"`` and return ``None``.

    Also emits ``{"event": "camera_solve", ...}`` with the solve's summary either way."""
    events.emit({"event": "progress", "stage": "camera solve", "done": 0, "total": 1})
    report = solve_footage(input_path, first=first, last=last, colorspace=colorspace, start_frame=start_frame)
    events.emit(dict({"event": "camera_solve"}, **report.summary()))
    if not report.ok:
        events.warning(f"Camera: Auto: {report.reason}; single-image depth", file=input_path)
        return None
    for w in report.warnings:
        events.warning(f"Camera: Auto: {w}", file=input_path)
    path = write_solve(report, default_auto_path(out_dir))
    events.emit({"event": "progress", "stage": "camera solve", "done": 1, "total": 1})
    return path

