"""Footage input: movies, image sequences and single images -> scene-linear frames.

:func:`open_footage` returns a :class:`Footage` reader. It is a context manager and an
iterator of :class:`SourceFrame`; frames are decoded one at a time, so memory does
not grow with the length of the clip.

Supported input
---------------
* **Movies** through PyAV (FFmpeg): any container/codec FFmpeg decodes (mp4, mov,
  mkv, webm, avi; H.264, HEVC, ProRes, MPEG-4, VP9...), 8-bit or higher (decoded to
  ``rgb48`` above 8 bits), 4:2:0 / 4:2:2 / 4:4:4, with or without alpha (VP9 alpha in
  WebM through libvpx, which FFmpeg's own VP9 decoder drops).
  YUV -> RGB uses the stream's matrix and range; when the stream does not say,
  BT.709 for frames >= 720 lines high, else BT.601, limited range (FFmpeg's
  convention).
* **Image sequences**: a folder of images, or a pattern with ``%04d`` or ``####``.
  Files are ordered by the number in their name.
* **Single images**: PNG (8/16-bit), JPEG, TIFF (8/16-bit, float), BMP, WebP via
  OpenCV; OpenEXR (half/float) via the OpenEXR library. RGB, RGBA, grayscale and
  grayscale+alpha.

Metadata honoured
-----------------
* **Rotation** (display-matrix side data, which FFmpeg also fills from the legacy
  ``rotate`` tag; the EXIF orientation tag of JPEG/TIFF/PNG/WebP images, all eight
  values incl. mirroring): frames are turned to display orientation, so a portrait
  phone clip yields portrait frames. :attr:`FootageInfo.width`/``height`` are the
  display (rotated) size.
* **Non-square pixels**: the sample aspect ratio is reported in
  :attr:`FootageInfo.sar` and recorded in the output header; pixels are *not*
  resampled.
* **Variable frame rate**: every frame carries its 0-based decode ``index`` and its
  presentation time ``pts_s`` from the container.

Colour
------
See :mod:`backend.colour`: integer formats are sRGB-encoded by default and
linearised with the sRGB EOTF; EXR and float TIFF are already linear; a named
colour space goes through OpenColorIO.

Errors are :class:`FootageError` (a ``ValueError``) whose message names the file and,
when known, the frame.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional

from .. import arguments, colour
from ..input_files import kind_of
# the submodules' public names stay importable as ``backend.footage.NAME``
from .frames import (BYTES_PER_PIXEL_PEAK, IMAGE_EXTS, MAX_PIXELS, MOVIE_EXTS,  # noqa: F401
                     SEQUENCE_FPS, TEXT_CODECS, Footage, FootageError, FootageInfo, SourceFrame,
                     check_frame_size, fit_long_side, max_pixels)
from .images import EXIF_ROTATION, _ImageFootage, exif_orientation  # noqa: F401
from .movies import _MovieFootage
from .naming import _sequence_files, frame_pattern, is_sequence_pattern, sequence_numbers  # noqa: F401


def open_footage(
    path: os.PathLike, colorspace: Optional[str] = None, max_size: Optional[int] = None,
    start_frame: Optional[int] = None,
) -> Footage:
    """Open a movie, image sequence or single image for streaming.

    Args:
        path: a movie file, an image file, a folder of images, or a sequence pattern
            (``shot_%04d.png`` or ``shot_####.png``). Any characters are allowed.
        colorspace: OpenColorIO name of the source colour space; ``None`` = default
            (sRGB for integer formats and video, linear for EXR/float TIFF).
        max_size: if given, frames are downscaled (area filter, in linear light) so
            their long side is at most this many pixels. ``None`` = full size.
        start_frame: a movie's first frame number (a studio plate starts at 1001);
            ``None``: 1. Sequences keep the numbers in their file names (refused there).

    Returns:
        A :class:`Footage` (context manager, iterable of :class:`SourceFrame`) with
        ``.info`` (:class:`FootageInfo`). The first frame is decoded on open to
        validate the source and read its rotation.

    Raises:
        FootageError: missing/unreadable/corrupt file, no video stream, no frames,
            unsupported codec, NaN/Inf pixels; the message names the file (and frame).
        backend.colour.ColourError: unknown colour space.
    """
    p = str(Path(arguments.path("path", path)).absolute())
    if max_size is not None and int(max_size) < 1:
        raise FootageError(f"max_size must be >= 1, got {max_size}")
    if colorspace is not None:
        colour.canonical_name(colorspace)  # fail early on unknown names
    pp = Path(p)
    if start_frame is not None and int(start_frame) < 0:
        raise FootageError(f"--start-frame {start_frame}: frame numbers are >= 0")
    if start_frame is not None and (pp.is_dir() or is_sequence_pattern(pp) or pp.suffix.lower() in IMAGE_EXTS):
        raise FootageError(f"{p}: --start-frame is for movies; an image sequence keeps the frame numbers in "
                           "its file names (rename the files to renumber it)", file=p)
    if pp.is_dir() or is_sequence_pattern(pp):
        files = _sequence_files(p)
        return _ImageFootage(files, "sequence", p, colorspace, max_size)
    if not pp.exists():
        raise FootageError(f"{p}: no such file or folder", file=p)
    if not pp.is_file():
        raise FootageError(f"{p}: the input is {kind_of(pp.stat().st_mode)}, not a regular file; "
                           f"nothing is read from it", file=p)
    if pp.suffix.lower() in IMAGE_EXTS:
        return _ImageFootage([p], "image", p, colorspace, max_size)
    return _MovieFootage(p, colorspace, max_size, start_frame)


def probe_footage(path: os.PathLike, colorspace: Optional[str] = None) -> FootageInfo:
    """:class:`FootageInfo` of a source (decodes only its first frame).

    Raises:
        FootageError: as :func:`open_footage`.
    """
    with open_footage(path, colorspace=colorspace) as f:
        return f.info


def read_frames(path: os.PathLike, **kw) -> Iterator[SourceFrame]:
    """Convenience generator: open, yield every frame, close."""
    with open_footage(path, **kw) as f:
        yield from f
