"""Image resampling shared by the whole backend (one copy; OpenCV underneath).

Sizes are always given as ``(width, height)`` in pixels, like OpenCV's ``dsize``.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

#: interpolation names accepted by :func:`resize`
INTERPOLATIONS = ("linear", "nearest", "area", "cubic")


def resize(arr: np.ndarray, size: Tuple[int, int], interp: str = "linear") -> np.ndarray:
    """Resample an image to ``size = (width, height)``.

    Args:
        arr: ``H x W`` or ``H x W x C`` array (any float or uint8 dtype OpenCV takes;
            float64 is computed as float32).
        size: target ``(width, height)`` in pixels, both >= 1.
        interp: ``"linear"`` (bilinear, default), ``"nearest"`` (masks, labels),
            ``"area"`` (pixel-area average: the right filter for downscaling) or
            ``"cubic"``.

    Returns:
        The array at the new size with the input's dtype (float64 becomes float32) and
        channel layout (an ``H x W x 1`` input stays ``h x w x 1``). When the size is
        unchanged the input is returned as is (float64 input as float32).

    Raises:
        ValueError: a size below 1 pixel or an unknown ``interp``.
    """
    import cv2

    w, h = int(size[0]), int(size[1])
    if w < 1 or h < 1:
        raise ValueError(f"resize: target size {size!r} must be at least 1 x 1 pixel")
    flags = {"linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST,
             "area": cv2.INTER_AREA, "cubic": cv2.INTER_CUBIC}
    if interp not in flags:
        raise ValueError(f"resize: unknown interpolation {interp!r}; one of {INTERPOLATIONS}")
    a = np.asarray(arr)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.shape[0] == h and a.shape[1] == w:
        return a
    out = cv2.resize(np.ascontiguousarray(a), (w, h), interpolation=flags[interp])
    if a.ndim == 3 and out.ndim == 2:
        out = out[..., None]
    return out
