"""Test-only writers for small footage fixtures (PyAV movies, PNG/TIFF/JPEG/EXR images)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Optional, Sequence

import numpy as np


def write_movie(path, frames: Sequence[np.ndarray], *, codec="libx264", pix_fmt="yuv420p",
                rate=10, rotation: Optional[int] = None, sar: Optional[Fraction] = None,
                pts_ms: Optional[Sequence[int]] = None, options=None) -> Path:
    """Encode ``frames`` (``H x W x 3`` uint8 rgb24 or uint16 rgb48) with PyAV."""
    import av

    path = Path(path)
    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=rate, options=options or {})
        s.width, s.height, s.pix_fmt = w, h, pix_fmt
        if pts_ms is not None:
            s.time_base = Fraction(1, 1000)
            s.codec_context.time_base = Fraction(1, 1000)
        if sar is not None:
            s.codec_context.sample_aspect_ratio = sar
        if rotation is not None:
            s.set_display_rotation(rotation)
        for i, img in enumerate(frames):
            fmt = "rgb48le" if img.dtype == np.uint16 else "rgb24"
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format=fmt)
            if pts_ms is not None:
                f.pts = int(pts_ms[i])
                f.time_base = Fraction(1, 1000)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def gradient_rgb(h: int, w: int, t: int = 0, dtype=np.uint8) -> np.ndarray:
    """A smooth colour gradient frame, shifted by ``t`` pixels (for motion)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = (x + t) / max(w - 1, 1)
    g = y / max(h - 1, 1)
    b = 0.5 + 0.4 * np.sin((x + t) / 5.0) * np.cos(y / 4.0)
    img = np.clip(np.stack([r, g, b], -1), 0, 1)
    hi = 255 if dtype == np.uint8 else 65535
    return (img * hi + 0.5).astype(dtype)


def write_image(path, img: np.ndarray) -> Path:
    """Write RGB(A)/gray uint8/uint16 with OpenCV (RGB order in, handles non-ASCII paths)."""
    import cv2

    path = Path(path)
    arr = img
    if arr.ndim == 3 and arr.shape[2] >= 3:
        arr = np.concatenate([arr[..., 2::-1], arr[..., 3:]], axis=-1)
    ok, buf = cv2.imencode(path.suffix, arr)
    assert ok, path
    buf.tofile(str(path))
    return path


def write_exr(path, rgb: np.ndarray, alpha: Optional[np.ndarray] = None, dtype=np.float32) -> Path:
    """Plain RGB(A) OpenEXR (not the contract layout), ``dtype`` float16 or float32."""
    import OpenEXR

    chans = {c: np.ascontiguousarray(rgb[..., i], dtype=dtype) for i, c in enumerate("RGB")}
    if alpha is not None:
        chans["A"] = np.ascontiguousarray(alpha, dtype=dtype)
    with OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                      chans) as f:
        f.write(str(path))
    return Path(path)
