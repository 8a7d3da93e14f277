"""Footage metadata for Import Footage: size, frame rate, frame count, pixel aspect, colour.

:func:`probe` uses the backend's own probing for movies (``backend.footage.open_footage``,
the same code the Decompose worker decodes with) and falls back to PyAV directly when
that is not importable. Image sequences are found from one file of the sequence.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Dict, Optional

MOVIE_EXTS = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mxf", ".mpg", ".mpeg", ".ogv")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".exr", ".tif", ".tiff", ".dpx", ".bmp", ".webp")
FILTER_GLOB = ";".join("*" + e for e in MOVIE_EXTS + IMAGE_EXTS)

# ffmpeg AVColorTransferCharacteristic -> Blender colour space (first that exists is used)
_TRC_TO_COLORSPACE = {
    16: ("Rec.2100-PQ",),  # SMPTE ST 2084
    18: ("Rec.2100-HLG",),  # ARIB STD-B67
    8: ("Linear Rec.709",),  # linear
}


@dataclass
class FootageInfo:
    """What Import Footage needs to know about a movie or image sequence.

    Attributes:
        path: the movie, or the first file of the sequence.
        kind: ``"MOVIE"`` or ``"SEQUENCE"``.
        width, height: stored pixel size of a frame.
        fps: exact frame rate (e.g. ``Fraction(30000, 1001)``); ``None`` for image sequences.
        frame_count: number of frames.
        pixel_aspect: sample aspect ratio (pixel width / pixel height), 1 for square pixels.
        colorspace: Blender input colour space name the frames are encoded in.
        first_number: number of the first sequence file (1 for movies).
        last_number: number of the last sequence file (gaps between them kept;
            ``first_number + frame_count - 1`` for movies).
    """

    path: Path
    kind: str
    width: int
    height: int
    fps: Optional[Fraction]
    frame_count: int
    pixel_aspect: Fraction
    colorspace: str
    first_number: int = 1
    last_number: Optional[int] = None


_NUM_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<ext>\.[^.]+)$")


def sequence_files(path: os.PathLike) -> Dict[int, Path]:
    """Frame number -> file for the numbered sequence that ``path`` belongs to.

    Raises:
        ValueError: the file name carries no frame number (names the file).
    """
    path = Path(path)
    m = _NUM_RE.match(path.name)
    if not m:
        raise ValueError(f"{path}: an image sequence file name must end in a frame number")
    prefix, ext = m.group("prefix"), m.group("ext").lower()
    out = {}
    for p in path.parent.iterdir():
        mm = _NUM_RE.match(p.name)
        if mm and mm.group("prefix") == prefix and mm.group("ext").lower() == ext:
            out[int(mm.group("num"))] = p
    return dict(sorted(out.items()))


def number_range(info: FootageInfo) -> tuple:
    """``(first, last)`` source frame numbers of the footage: a sequence's file numbers
    (``shot_1001.png`` .. ``shot_1100.png`` -> ``(1001, 1100)``), a movie's ``(1, N)``."""
    first = int(info.first_number or 1) if info.kind == "SEQUENCE" else 1
    if info.kind == "SEQUENCE" and info.last_number is not None:
        return first, int(info.last_number)
    return first, first + max(1, int(info.frame_count or 1)) - 1


def first_source_number(path: os.PathLike) -> int:
    """Source number of the first frame of the footage at ``path`` (the lowest file number
    of an image sequence, 1 for a movie or a still)."""
    path = Path(path)
    if path.suffix.lower() in IMAGE_EXTS and _NUM_RE.match(path.name):
        try:
            return next(iter(sequence_files(path)))
        except (OSError, ValueError, StopIteration):
            return 1
    return 1


def backend_input(path: os.PathLike) -> str:
    """What to pass to ``python -m backend decompose`` for footage imported from ``path``.

    A movie is passed as is; one file of an image sequence becomes the sequence pattern
    (``shot_0001.png`` -> ``shot_####.png``), which the backend reads in number order.
    """
    path = Path(path)
    if path.suffix.lower() not in IMAGE_EXTS:
        return str(path)
    m = _NUM_RE.match(path.name)
    if not m:
        return str(path)  # a single still image
    return str(path.parent / f"{m.group('prefix')}{'#' * len(m.group('num'))}{m.group('ext')}")


def _image_size(path: Path) -> tuple:
    if path.suffix.lower() == ".exr":
        import OpenEXR

        with OpenEXR.File(str(path), header_only=True) as f:
            (x0, y0), (x1, y1) = f.header()["dataWindow"]
            return int(x1 - x0 + 1), int(y1 - y0 + 1)
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f"{path}: cannot read image")
    return img.shape[1], img.shape[0]


def _probe_movie_pyav(path: Path) -> FootageInfo:
    import av

    try:
        container = av.open(str(path))
    except Exception as e:  # av raises many error types (InvalidDataError, FileNotFoundError...)
        raise ValueError(f"{path}: cannot open as a movie ({e})") from e
    with container:
        if not container.streams.video:
            raise ValueError(f"{path}: no video stream")
        s = container.streams.video[0]
        rate = s.average_rate or s.guessed_rate or s.base_rate
        if not rate:
            raise ValueError(f"{path}: unknown frame rate")
        rate = Fraction(rate)
        count = int(s.frames or 0)
        if count <= 0 and s.duration and s.time_base:
            count = int(round(float(s.duration * s.time_base * rate)))
        if count <= 0 and container.duration:
            count = int(round(container.duration / 1_000_000 * float(rate)))
        cc = s.codec_context
        sar = s.sample_aspect_ratio or cc.sample_aspect_ratio
        sar = Fraction(sar) if sar else Fraction(1)
        colorspace = _TRC_TO_COLORSPACE.get(int(cc.color_trc or 2), ("sRGB",))[0]
        return FootageInfo(path, "MOVIE", cc.width, cc.height, rate, count, sar, colorspace, 1)


def probe(path: os.PathLike) -> FootageInfo:
    """Metadata of a movie file or of the image sequence containing ``path``.

    Colour: 8/10-bit video and PNG/JPEG/TIFF are treated as sRGB-encoded (Blender's
    convention for Rec.709 video, and what the backend decodes with); PQ/HLG video
    maps to the Rec.2100 spaces; EXR and DPX are scene-linear Rec.709.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unreadable or unsupported file (the message names it).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    ext = path.suffix.lower()
    if ext in IMAGE_EXTS:
        files = sequence_files(path)
        first = next(iter(files))
        w, h = _image_size(files[first])
        cs = "Linear Rec.709" if ext in (".exr", ".dpx") else "sRGB"
        return FootageInfo(files[first], "SEQUENCE", w, h, None, len(files), Fraction(1), cs, first,
                           next(reversed(files)))
    if ext not in MOVIE_EXTS:
        raise ValueError(f"{path}: unsupported footage type {ext!r}")
    try:
        from ..backend.footage import FootageError, open_footage
    except ImportError:  # backend dependencies missing: probe with PyAV directly
        return _probe_movie_pyav(path)
    try:
        with open_footage(path) as f:
            meta = f.info
    except FootageError as e:
        raise ValueError(str(e)) from e
    return FootageInfo(
        path=path,
        kind="MOVIE",
        width=meta.width,
        height=meta.height,
        fps=Fraction(meta.fps),
        frame_count=int(meta.n_frames or 0) or _probe_movie_pyav(path).frame_count,
        pixel_aspect=Fraction(meta.sar or 1),
        colorspace=blender_colorspace(meta.colorspace),
        first_number=1,
    )


def blender_colorspace(name: str) -> str:
    """Blender input colour space for a ``backend.colour`` canonical name (sRGB fallback)."""
    low = (name or "").lower()
    if low.startswith("linear rec.709") or low in ("linear", "scene_linear"):
        return "Linear Rec.709"
    if "pq" in low or "2084" in low:
        return "Rec.2100-PQ"
    if "hlg" in low:
        return "Rec.2100-HLG"
    return "sRGB"


def scene_fps(rate: Fraction) -> tuple:
    """Blender's ``(fps, fps_base)`` for an exact rate: ``fps / fps_base == rate``.

    ``fps`` is the nearest integer rate, as Blender's presets do
    (30000/1001 -> ``(30, 1.001)``; 45000/1499 -> ``(30, 0.99933...)``).
    """
    rate = Fraction(rate)
    if rate <= 0:
        raise ValueError(f"frame rate must be > 0, got {rate}")
    fps = max(1, round(rate))
    return int(fps), float(Fraction(fps) / rate)


def pixel_aspect(sar: Fraction) -> tuple:
    """Blender's ``(pixel_aspect_x, pixel_aspect_y)`` for a sample aspect ratio (both >= 1)."""
    sar = Fraction(sar) if sar else Fraction(1)
    if sar >= 1:
        return float(sar), 1.0
    return 1.0, float(1 / sar)
