"""Temporal flicker of a re-rendered sequence: mean absolute warping error on consistent pixels.

Optical flow is computed on the *source* frames (the Combined pass; DIS 'fast' preset,
downscaled so the long side is at most :data:`FLICKER_MAX_SIDE`), between consecutive
frames only. The previous output is warped into the current one and the two are
compared in sRGB ``[0, 1]`` on flow-consistent pixels (forward-backward check,
:mod:`backend.temporal`). The same error is measured on the source itself: the floor
a steady re-render can reach.

The restyle job measures each pair as it writes the frames (:func:`pair_error` on
:func:`sample`), and :func:`sequence_flicker` completes the measure from the files
on disk for frames it did not render in that run (a resume).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

import numpy as np

from .. import contract

#: long side in pixels at which flicker is measured
FLICKER_MAX_SIDE = 256

METRIC = ("mean absolute warping error of sRGB [0,1] output on flow-consistent pixels "
          "(DIS 'fast' flow on the source frames, consecutive frames); lower is steadier")


@dataclass
class Sample:
    """One frame downscaled for the metric (long side <= :data:`FLICKER_MAX_SIDE`).

    Attributes:
        source: ``h x w x 3`` float32 scene-linear source (Combined RGB).
        output: ``h x w x 3`` float32 sRGB-encoded output in ``[0, 1]``.
    """

    source: np.ndarray
    output: np.ndarray


@dataclass(frozen=True)
class PairError:
    """Warping errors between a frame and its predecessor (sRGB units, ``[0, 1]``).

    Attributes:
        output: mean absolute error of the output.
        source: the same on the source frames.
    """

    output: float
    source: float


def sample(source_rgb: np.ndarray, output_rgb: np.ndarray) -> Sample:
    """Downscale one frame's source (``H x W x 3`` scene-linear) and output (``H x W x 3``
    scene-linear; the output's size decides the scale) for :func:`pair_error`."""
    from ..colour import linear_to_srgb
    from ..imaging import resize

    h, w = output_rgb.shape[:2]
    s = min(1.0, FLICKER_MAX_SIDE / max(h, w))
    size = (max(1, round(w * s)), max(1, round(h * s)))
    src = resize(np.ascontiguousarray(source_rgb, np.float32), size, "area")
    out = linear_to_srgb(resize(np.ascontiguousarray(output_rgb, np.float32), size, "area"))
    return Sample(src, out)


def pair_error(prev: Sample, cur: Sample) -> Optional[PairError]:
    """Warping error of ``cur`` against ``prev`` (consecutive frames), or ``None`` when
    the flow has no consistent pixel."""
    from .. import temporal
    from ..colour import linear_to_srgb

    # DIS 'fast' preset: the metric needs consistent pixels, not the best flow (~5x cheaper)
    pair = temporal.FlowPair.compute(prev.source, cur.source, preset="fast")
    if not pair.mask.any():
        return None
    e_out = np.abs(cur.output - temporal.warp(prev.output, pair.back)).mean(-1)[pair.mask].mean()
    e_src = np.abs(linear_to_srgb(cur.source) - linear_to_srgb(temporal.warp(prev.source, pair.back))).mean(-1)
    return PairError(float(e_out), float(e_src[pair.mask].mean()))


def sequence_flicker(numbers: Iterable[int], source_files: Mapping[int, os.PathLike],
                     read_output: Callable[[int], np.ndarray],
                     known: Optional[Mapping[int, PairError]] = None) -> Optional[Dict[str, Any]]:
    """The flicker summary of a sequence (the restyle manifest's ``flicker`` entry).

    Args:
        numbers: frame numbers of the sequence (any order); only pairs ``(n - 1, n)``
            that are both in it count.
        source_files: frame number -> contract G-buffer frame (its Combined pass is the source).
        read_output: frame number -> ``H x W x 3`` float32 scene-linear output.
        known: frame number -> :class:`PairError` already measured (a run measures the
            frames it renders after their predecessor); the other pairs are measured
            from the files.

    Returns:
        ``{"metric": text, "output": mean, "source": mean, "per_frame": {"n": output error}}``
        (errors in sRGB ``[0, 1]``), or ``None`` when no pair could be measured.

    Raises:
        ContractError: a file that has to be read is not readable.
    """
    known = dict(known or {})
    numbers = sorted(numbers)
    have = set(numbers)

    def load(n: int) -> Sample:
        src = contract.read_frame(source_files[n]).combined[..., :3]
        return sample(src, read_output(n))

    rows: Dict[int, PairError] = {}
    last_n, last = None, None  # the last frame loaded from disk
    for n in numbers:
        if n - 1 not in have:
            continue
        if n in known:
            rows[n] = known[n]
            continue
        if n not in source_files or n - 1 not in source_files:
            continue
        prev = last if last_n == n - 1 else load(n - 1)
        last_n, last = n, load(n)
        err = pair_error(prev, last)
        if err is not None:
            rows[n] = err
    if not rows:
        return None
    return summary(rows)


def summary(rows: Mapping[int, PairError]) -> Dict[str, Any]:
    """The manifest entry for measured pairs (frame number -> :class:`PairError`, non-empty)."""
    values: List[PairError] = list(rows.values())
    return {
        "metric": METRIC,
        "output": float(np.mean([r.output for r in values])),
        "source": float(np.mean([r.source for r in values])),
        "per_frame": {str(n): round(r.output, 6) for n, r in rows.items()},
    }
