"""What every footage reader shares: the frame and clip records (:class:`SourceFrame`,
:class:`FootageInfo`), the reader base class (:class:`Footage`), the size limit, the
error type and once-per-folder warnings. Part of :mod:`backend.footage`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import colour
from ..errors import InputError


MOVIE_EXTS = {".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".mxf", ".mpg", ".mpeg", ".ts",
              ".m2ts", ".gif", ".y4m", ".ogv", ".wmv", ".flv"}


IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".exr", ".bmp", ".webp"}


#: frame rate assumed for image sequences and single images (pts = index / fps)
SEQUENCE_FPS = Fraction(24)


#: largest frame accepted, in pixels (8192 x 8192; 8K UHD is 33 Mpx); the environment
#: variable ``GBUFFER_MAX_PIXELS`` changes it. Larger frames are refused before decoding.
MAX_PIXELS = 8192 * 8192


#: measured peak memory of a decompose per source pixel at full size (12000 x 8000:
#: 11.5 GB), for the refusal message
BYTES_PER_PIXEL_PEAK = 120


def max_pixels() -> int:
    """:data:`MAX_PIXELS`, or ``GBUFFER_MAX_PIXELS`` when set (unset or empty: the default).

    Raises:
        FootageError: ``GBUFFER_MAX_PIXELS`` is set to anything but a positive whole number
            in ASCII digits (``abc``, ``0``, ``-5``, ``1e9``, ``8K``), naming the variable
            (junk was ignored silently before: docs/reliability.md, "Decisions").
    """
    raw = os.environ.get("GBUFFER_MAX_PIXELS", "")
    text = raw.strip()
    if not text:
        return MAX_PIXELS
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise FootageError(f"GBUFFER_MAX_PIXELS={raw!r}: expected a positive whole number of pixels (e.g. "
                           f"{MAX_PIXELS} for 8192 x 8192); unset it for the default")
    return int(text)


def _pixels(n: float) -> str:
    """``12.3 Mpx`` (or ``4096 px`` below a megapixel: "0 Mpx is larger than 0 Mpx" said nothing)."""
    return f"{n / 1e6:.0f} Mpx" if n >= 1e6 else f"{int(n)} px"


def check_frame_size(width: int, height: int, path, frame: Optional[int] = None) -> None:
    """Refuse a frame larger than :func:`max_pixels` before it is decoded.

    Raises:
        FootageError: naming the file, its size and the memory a full-size run would need.
    """
    px = int(width) * int(height)
    limit = max_pixels()
    if px > limit:
        gb = px * BYTES_PER_PIXEL_PEAK / 1e9
        raise FootageError(
            f"{path}: {width}x{height} ({_pixels(px)}) is larger than the {_pixels(limit)} limit; "
            f"decomposing it at full size would need about {gb:.0f} GB of memory. Downscale the footage "
            f"first (e.g. to 8K or 4K), or raise GBUFFER_MAX_PIXELS if this machine has the memory",
            frame=frame, file=path)


#: FFmpeg "video" codecs that are really text renderers (a .txt file opens as 'ansi' video)
TEXT_CODECS = frozenset({"ansi", "bintext", "xbin", "idf", "tty"})


class FootageError(InputError):
    """Footage cannot be opened or decoded; the message names the file and frame
    (``frame``: 1-based source frame number = output number, ``file``: the file)."""


@dataclass
class SourceFrame:
    """One decoded frame.

    Attributes:
        index: 0-based index in the source (decode order of the video stream, or
            position in the sorted image sequence).
        pts_s: presentation time in seconds (container PTS for movies, so variable
            frame rate is kept; ``index / fps`` for images).
        rgb: ``H x W x 3`` ``float32`` scene-linear Rec.709, display orientation,
            straight (not premultiplied) colour. Linear input (EXR) may exceed 1;
            never NaN/Inf.
        alpha: ``H x W`` ``float32`` in [0, 1], or ``None`` when the source has none.
            Premultiplied EXR input is un-premultiplied on read (colour / alpha where
            alpha > 0, else 0).
        path: file the frame came from (the movie, or the sequence's image file).
        number: the source frame number: the number in the image file's name for a
            sequence (``shot_1001.png`` -> 1001; gaps kept), ``index + 1`` for a movie
            or a single image. Output files and manifests use it.
    """

    index: int
    pts_s: float
    rgb: np.ndarray
    alpha: Optional[np.ndarray]
    path: str
    number: Optional[int] = None

    def __post_init__(self):
        if self.number is None:
            self.number = self.index + 1


@dataclass
class FootageInfo:
    """What is known about a source before decoding all of it.

    Attributes:
        path: the path given to :func:`open_footage` (absolute).
        kind: ``movie``, ``sequence`` or ``image``.
        width, height: display size in pixels after rotation, before ``max_size``.
        out_width, out_height: size of the frames the reader yields.
        fps: ``Fraction`` average frame rate (``SEQUENCE_FPS`` for images).
        n_frames: number of frames if known (container count or file count), else ``None``.
        sar: sample (pixel) aspect ratio, ``Fraction(1)`` for square pixels.
        rotation: counter-clockwise display rotation in degrees applied to frames (0/90/180/270).
        pix_fmt: decoder pixel format (``yuv420p10le``...) or numpy dtype/channels for images.
        bit_depth: bits per component of the source.
        codec: codec name (movies) or image format.
        colorspace: canonical name of the source colour space (see :mod:`backend.colour`).
        has_alpha: the source carries an alpha channel.
        files: the image files of a sequence (empty for movies).
        numbers: the source frame number of each file of a sequence (from the file
            names: ``shot_1001.png`` -> 1001, gaps kept; ``1..N`` when the names carry no
            distinct numbers); ``[1]`` for a single image; empty for movies (``1..n_frames``).
    """

    path: str
    kind: str
    width: int
    height: int
    out_width: int
    out_height: int
    fps: Fraction
    n_frames: Optional[int]
    sar: Fraction = Fraction(1)
    rotation: int = 0
    pix_fmt: str = ""
    bit_depth: int = 8
    codec: str = ""
    colorspace: str = colour.SRGB
    has_alpha: bool = False
    files: List[str] = field(default_factory=list)
    numbers: List[int] = field(default_factory=list)
    #: overscan EXR input: ``[data_window, display_window]``, each ``[x0, y0, x1, y1]``
    #: inclusive (frames hold the data window); ``None``: the frame is the display window
    windows: Optional[List[List[int]]] = None
    #: the source's timecode of its first frame (``"HH:MM:SS:FF"``, a movie's stream or
    #: container ``timecode`` tag), or ``--timecode``; ``None``: not stated
    timecode: Optional[str] = None

    def frame_numbers(self) -> Optional[List[int]]:
        """Every source frame number of the footage, in order (``None``: a movie whose
        length is unknown)."""
        if self.numbers:
            return list(self.numbers)
        return None if self.n_frames is None else list(range(1, self.n_frames + 1))

    def to_dict(self) -> dict:
        """JSON-serialisable form (for the manifest)."""
        return {
            "path": self.path,
            "kind": self.kind,
            "width": self.width,
            "height": self.height,
            "fps": str(self.fps),
            "fps_float": float(self.fps),
            "n_frames": self.n_frames,
            "sar": str(self.sar),
            "rotation": self.rotation,
            "pix_fmt": self.pix_fmt,
            "bit_depth": self.bit_depth,
            "codec": self.codec,
            "colorspace": self.colorspace,
            "has_alpha": self.has_alpha,
            "first_number": self.numbers[0] if self.numbers else 1,
            "last_number": self.numbers[-1] if self.numbers else self.n_frames,
        }


def fit_long_side(width: int, height: int, max_size: Optional[int]) -> Tuple[int, int]:
    """``(w, h)`` scaled so the long side is at most ``max_size`` (never upscaled, >= 1 px)."""
    if not max_size or max(width, height) <= max_size:
        return width, height
    s = max_size / max(width, height)
    return max(1, int(round(width * s))), max(1, int(round(height * s)))


def _check_finite(rgb: np.ndarray, alpha: Optional[np.ndarray], path: str, index: int) -> None:
    for name, arr in (("RGB", rgb), ("alpha", alpha)):
        if arr is not None and not np.all(np.isfinite(arr)):
            bad = int(np.count_nonzero(~np.isfinite(arr)))
            raise FootageError(
                f"{path} (frame {index + 1}): {bad} NaN/Inf value(s) in {name}; "
                "fix the source render (NaN/Inf input is rejected, not guessed)",
                frame=index + 1, file=path)


_WARNED: set = set()


def _warn_once(key, message: str, path: str) -> None:
    """One ``warning`` event per kind of oddity and folder (not one per sequence file)."""
    k = (key, os.path.dirname(os.path.abspath(path)))
    if k in _WARNED:
        return
    _WARNED.add(k)
    from .. import events

    events.warning(message, file=path)


class Footage:
    """Streaming reader; use :func:`open_footage`.

    Iterating yields :class:`SourceFrame` in source order, decoded one by one. A
    reader can be iterated once. Use as a context manager (or call :meth:`close`).
    """

    info: FootageInfo

    def __enter__(self) -> "Footage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the decoder / file handles."""

    def __iter__(self) -> Iterator[SourceFrame]:
        raise NotImplementedError


def _unreadable(files: Sequence[str]) -> dict:
    """Index -> reason for each sequence entry that is not a readable file: a symbolic link
    to nothing (third hostile trial: dropped without a word), or not a regular file."""
    out = {}
    for i, f in enumerate(files):
        if os.path.islink(f) and not os.path.exists(f):
            out[i] = f"a symbolic link to {os.readlink(f)}, which does not exist"
        elif not os.path.isfile(f):
            out[i] = "not a regular file"
    return out
