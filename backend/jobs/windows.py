"""Overlapping windows for whole-clip renderers (``Renderer.window > 0``), blended per frame.

The frames to render (positions ``0..N-1`` of the job's frame list) are cut into windows
of ``size`` frames whose starts step by ``size - overlap``; the last window is moved
back to end at frame ``N - 1`` (so it may overlap its neighbour by more than ``overlap``,
and, for some lengths, a frame may lie in three windows). A clip of at most ``size``
frames is one window. :func:`window_spans` gives them.

Each window's output for a frame gets a tent weight (:func:`window_weights`): ``1``
inside, ramping linearly over the first ``overlap`` frames (unless it is the first
window) and the last ``overlap`` frames (unless it is the last), ``(j + 1) / (overlap +
1)`` at local frame ``j``. A frame's result is ``sum_k w_k * x_k / sum_k w_k`` over the
windows holding it, in scene-linear light. For two windows overlapping by exactly
``overlap`` frames this is the linear cross-fade: at overlap position ``t`` (0-based) the
later window weighs ``(t + 1) / (overlap + 1)`` and the earlier one the rest.

:class:`WindowBlender` hands out frames in order and renders a window only when a frame
it holds is asked for, so a resume whose frames of a window are all on disk never renders
that window, a partly done one is rendered again (deterministic renderers give the same
values), and at most the windows holding the current frame are kept in memory.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np


def window_spans(n: int, size: int, overlap: int) -> List[Tuple[int, int]]:
    """``[(start, end), ...]`` (end exclusive) of the windows over ``n`` frames.

    Raises:
        ValueError: ``n < 1``, ``size < 1`` or not ``0 <= overlap < size``.
    """
    if n < 1 or size < 1 or not 0 <= overlap < size:
        raise ValueError(f"need n >= 1, size >= 1, 0 <= overlap < size; got n={n}, size={size}, "
                         f"overlap={overlap}")
    if n <= size:
        return [(0, n)]
    starts = [0]
    while starts[-1] + size < n:
        starts.append(min(starts[-1] + size - overlap, n - size))
    return [(s, s + size) for s in starts]


def window_weights(spans: Sequence[Tuple[int, int]], k: int, overlap: int) -> np.ndarray:
    """Blend weights (float64, one per frame of window ``k``; see the module docstring)."""
    s, e = spans[k]
    j = np.arange(e - s, dtype=np.float64)
    w = np.ones(e - s)
    if overlap > 0:
        if k > 0:
            w = np.minimum(w, (j + 1) / (overlap + 1))
        if k < len(spans) - 1:
            w = np.minimum(w, (e - s - j) / (overlap + 1))
    return w


class WindowBlender:
    """Frames of a windowed render, in order, each blended from the windows holding it.

    Args:
        numbers: the frame numbers to render, in order (window positions index it).
        size, overlap: window length and overlap in frames.
        render: ``render(numbers of one window) -> list of H x W x 3 float32`` (the
            renderer's output for those frames).
    """

    def __init__(self, numbers: Sequence[int], size: int, overlap: int,
                 render: Callable[[List[int]], List[np.ndarray]]):
        self.numbers = list(numbers)
        self.position = {n: i for i, n in enumerate(self.numbers)}
        self.spans = window_spans(len(self.numbers), size, overlap)
        self.overlap = overlap
        self.render = render
        self.rendered: Dict[int, List[np.ndarray]] = {}  # window index -> its frames

    def windows_of(self, n: int) -> List[int]:
        """Indices of the windows holding frame number ``n``."""
        i = self.position[n]
        return [k for k, (s, e) in enumerate(self.spans) if s <= i < e]

    def frame(self, n: int) -> np.ndarray:
        """The blended ``H x W x 3`` float32 result of frame number ``n``; frames must be
        asked for in increasing order (windows ending before ``n`` are dropped)."""
        i = self.position[n]
        for k in [k for k in self.rendered if self.spans[k][1] <= i]:
            del self.rendered[k]
        acc, total = None, 0.0
        for k in self.windows_of(n):
            s, e = self.spans[k]
            if k not in self.rendered:
                self.rendered[k] = self.render(self.numbers[s:e])
            w = float(window_weights(self.spans, k, self.overlap)[i - s])
            x = self.rendered[k][i - s].astype(np.float64)
            acc = w * x if acc is None else acc + w * x
            total += w
        return (acc / total).astype(np.float32)
