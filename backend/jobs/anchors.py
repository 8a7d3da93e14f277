"""The anchor pass of a shot: ``python -m backend farm anchors INPUT --out OUT [decompose options]``.

:func:`compute_anchors` runs the estimator and the frame-to-frame depth alignment (no
normals, albedo, EXR) over every frame of the range, in order, and stores each frame's
aligned depth as a shot-wide anchor (:mod:`backend.depth_anchors`) in
``OUT/.gbuffer_depth_anchors.npz``. Every chunk of a farm decompose, and an unchunked
decompose given the same file (``--depth-anchors``), aligns each frame to its anchor, so
they agree by construction. Deterministic: the same footage, range and estimator settings
give the same anchors (and digest); an existing file computed from the same inputs is kept
(a resumed farm job does not recompute it).

Cost: the estimator on every frame of the range, in one process, before the chunks (the
embedded estimator at 192 px: about 20 ms a frame plus decoding, a few per cent of a
decompose; a diffusion estimator: most of its decompose, see docs/farm_ray.md).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from .. import events
from ..decomposer import Decomposer
from ..depth_anchors import ANCHOR_FILE, DepthAnchors, anchor_meta, anchor_size, compatible, downscale
from ..errors import JobError
from ..footage import open_footage

def anchors_path(out: os.PathLike) -> Path:
    """``OUT/.gbuffer_depth_anchors.npz``."""
    return Path(out) / ANCHOR_FILE


def compute_anchors(input_path: os.PathLike, out: os.PathLike, *, frames: Optional[str] = None,
                    estimator: Any = "embedded", estimator_options: Optional[Dict[str, Any]] = None,
                    processing_resolution: Optional[int] = None, device: Optional[str] = None,
                    colorspace: Optional[str] = None, path: Optional[os.PathLike] = None,
                    start_frame: Optional[int] = None, **_ignored) -> Dict[str, Any]:
    """Compute (or keep) a shot's depth anchors.

    Args:
        input_path: the footage (as for :func:`backend.jobs.decompose.decompose`).
        out: the decompose's output folder (created); the file goes to
            ``OUT/.gbuffer_depth_anchors.npz`` unless ``path`` is given.
        frames: ``"A-B"`` source frame numbers (default: the whole clip): the range the
            decompose (or the farm job) writes.
        estimator: a registry name or an :class:`~backend.estimators.base.Estimator`
            (a farm worker's cached one); the other arguments as for decompose.
        **_ignored: decompose options that do not change the anchors (``stabilize``, ...).

    Returns:
        ``{"event": "anchors", "file", "frames", "digest", "reused", "elapsed_s"}``
        (``frames``: anchors written; 0 with ``"kind": "metric"`` when the estimator gives
        metric depth, which is not aligned: the file then holds no frame).

    Raises:
        FootageError, ValueError (bad arguments; a windowed estimator such as
        ``video-depth-anything-small``, not supported yet), JobError (the estimator failed
        on a frame, naming it).
    """
    from .decompose import clip_frame_range, parse_frames

    t0 = time.monotonic()
    first, last = parse_frames(frames)
    target = Path(path) if path is not None else anchors_path(out)
    with open_footage(input_path, colorspace=colorspace, start_frame=start_frame) as src:
        info = src.info
        clip_frame_range(first, last, info.numbers or info.n_frames, info.path, frames)
        dec = Decomposer(estimator, processing_resolution=processing_resolution, estimator_options=estimator_options,
                         device=device, sar=float(info.sar))
        if dec.estimator.windowed:
            # its depth comes from windows over the shot (feed/take), not frame by frame
            raise ValueError(f"depth anchors: estimator {dec.estimator_name!r} computes depth in windows over "
                             f"the shot; the anchor pass does not support it yet: use --no-depth-anchors or "
                             f"--overlap chain")
        if target.exists():
            try:
                old = DepthAnchors.load(target)
            except ValueError:
                old = None
            if old is not None and compatible(old, dec, info) is None and old.meta.get("frames_spec") == frames:
                return {"event": "anchors", "file": str(target), "frames": len(old.numbers), "digest": old.digest,
                        "reused": True, "elapsed_s": round(time.monotonic() - t0, 3)}
        numbers, depths, masks, kind = [], [], [], "relative"
        for sf in src:
            if sf.number < first:
                continue
            if last is not None and sf.number > last:
                break
            try:
                got = dec.depth_anchor(sf.rgb, sf.number)
            except Exception as e:  # noqa: BLE001 - one line naming the frame
                raise JobError(f"depth anchors: estimator {dec.estimator_name!r} failed on {sf.path} (frame "
                               f"{sf.number}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                               frame=sf.number, file=sf.path) from e
            if got is None:
                kind = "metric"
                break
            d, m = downscale(got[0], got[1], anchor_size(got[0].shape[1], got[0].shape[0]))
            numbers.append(sf.number)
            depths.append(d)
            masks.append(m)
        meta = anchor_meta(dec, info, numbers)
        meta.update(kind=kind, frames_spec=frames)
        if kind == "metric":
            numbers, depths, masks = [], [], []
        shape = depths[0].shape if depths else (0, 0)
        anchors = DepthAnchors(np.asarray(numbers, np.int64), np.stack(depths) if depths else np.zeros((0, *shape)),
                               np.stack(masks) if masks else np.zeros((0, *shape), bool), meta)
    target.parent.mkdir(parents=True, exist_ok=True)
    anchors.save(target)
    res = {"event": "anchors", "file": str(target), "frames": len(numbers), "digest": anchors.digest,
           "reused": False, "elapsed_s": round(time.monotonic() - t0, 3)}
    if kind == "metric":
        res["kind"] = "metric"
        events.warning(f"estimator {dec.estimator_name!r} gives metric depth: no depth anchors are needed "
                       f"(metric depth is not aligned frame to frame)", file=str(target))
    return res
