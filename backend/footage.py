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

import collections
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import colour, events
from .errors import InputError
from .imaging import resize

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
    """:data:`MAX_PIXELS`, or ``GBUFFER_MAX_PIXELS`` when set to a positive integer."""
    try:
        v = int(os.environ.get("GBUFFER_MAX_PIXELS", ""))
        return v if v > 0 else MAX_PIXELS
    except ValueError:
        return MAX_PIXELS


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
            f"{path}: {width}x{height} ({px / 1e6:.0f} Mpx) is larger than the {limit / 1e6:.0f} Mpx limit; "
            f"decomposing it at full size would need about {gb:.0f} GB of memory. Downscale the footage "
            f"first (e.g. to 8K or 4K), or raise GBUFFER_MAX_PIXELS if this machine has the memory",
            frame=frame, file=path)


def _header_size(path: str) -> Optional[Tuple[int, int]]:
    """``(width, height)`` from an image file's header, without decoding its pixels."""
    try:
        if Path(path).suffix.lower() == ".exr":
            import OpenEXR

            with OpenEXR.File(path, header_only=True) as f:
                # the decoded frame fills the display window; the data window is read too:
                # the larger of the two is what memory must hold (fresh-eyes trial: a
                # 100000^2 display window around a 16x16 data window got past the limit)
                sizes = []
                for key in ("dataWindow", "displayWindow"):
                    (x0, y0), (x1, y1) = f.header()[key]
                    sizes.append((int(x1 - x0 + 1), int(y1 - y0 + 1)))
                return max(sizes, key=lambda wh: wh[0] * wh[1])
        from PIL import Image

        Image.MAX_IMAGE_PIXELS = None  # our own limit applies, with a message that says what to do
        with Image.open(path) as im:
            return int(im.size[0]), int(im.size[1])
    except Exception:  # unreadable header: decoding reports it
        return None


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


# --------------------------------------------------------------------------- helpers


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


_PATTERN_RE = re.compile(r"%0?\d*d|#+")


def frame_pattern(name: str) -> Optional["re.Match"]:
    """The frame-number placeholder of a sequence pattern's file name: its *last* ``%04d``
    / ``%d`` or run of ``#`` (``take #1_####.png`` -> ``####``), or ``None``."""
    found = None
    for found in _PATTERN_RE.finditer(name):
        pass
    return found


def is_sequence_pattern(path: os.PathLike) -> bool:
    """``path`` is a frame pattern (``shot_####.png``, ``shot_%04d.png``) rather than a file
    or folder: nothing exists at that path and its name holds a placeholder. A file or
    folder whose name merely contains ``#``, ``%`` or ``@`` (``clip #1.mp4``,
    ``100%done.mp4``, ``gb #1``) is taken as itself."""
    p = Path(path)
    return not p.exists() and frame_pattern(p.name) is not None


#: the frame number in a file's stem: its last run of digits, negative when a ``-`` sits
#: right before it at the start of the stem or after a separator (``shot_-0002`` is -2;
#: ``shot-0002`` is 2: there the dash is the separator)
_NUMBER_RE = re.compile(r"((?<![^_.\s])-)?(\d+)(?!.*\d)")


def _natural_number(name: str) -> Optional[int]:
    m = _NUMBER_RE.search(name)
    if not m:
        return None
    return -int(m.group(2)) if m.group(1) else int(m.group(2))


def sequence_numbers(files: Sequence[str]) -> List[int]:
    """Source frame numbers of an image sequence's files (sorted as :func:`_sequence_files`
    sorts them: by number, then name): the last number in each file's stem
    (``shot_1001.png`` -> 1001, gaps kept) when every file has one, they are distinct and
    none is negative; otherwise ``1..N`` in that order, with a ``warning`` saying so
    (G-buffer frame numbers are >= 0: ``shot_-0002.png ... shot_0001.png`` become 1-4)."""
    nums = [_natural_number(Path(f).stem) for f in files]
    negative = [n for n in nums if n is not None and n < 0]
    if len(files) > 1 and (None in nums or len(set(nums)) != len(nums) or negative):
        if None in nums:
            why = f"{Path(files[nums.index(None)]).name} has no number"
        elif len(set(nums)) != len(nums):
            counts = collections.Counter(nums)
            dup = next(n for n in nums if counts[n] > 1)
            names = [Path(f).name for f, n in zip(files, nums) if n == dup][:2]
            why = f"{' and '.join(names)} both have number {dup}"
        else:
            first = Path(files[nums.index(negative[0])]).name
            why = (f"{len(negative)} of them carry a negative number, e.g. {first}; G-buffer frame numbers "
                   f"are 0 or more")
        order = "by the numbers in their names" + (" (a file without one counts as 0)" if None in nums else "") \
            + (", then by name" if len(set(nums)) != len(nums) else "")
        _warn_once("numbers", f"{Path(files[0]).parent}: frame numbers cannot be taken from the file names "
                   f"({why}); the {len(files)} files are numbered 1-{len(files)} in order {order}: "
                   f"{Path(files[0]).name} is frame 1, {Path(files[-1]).name} is frame {len(files)}",
                   files[0])
        return list(range(1, len(files) + 1))
    if len(files) == 1 and (nums[0] is None or nums[0] < 0):
        return [1]
    return [int(n) for n in nums]


# --------------------------------------------------------------------------- images


_WARNED: set = set()


#: folder -> name of the multi-part EXR part its sequence is read from (the first file's)
_EXR_PART: dict = {}


def _warn_once(key, message: str, path: str) -> None:
    """One ``warning`` event per kind of oddity and folder (not one per sequence file)."""
    k = (key, os.path.dirname(os.path.abspath(path)))
    if k in _WARNED:
        return
    _WARNED.add(k)
    from . import events

    events.warning(message, file=path)


def _window(header, key):
    (x0, y0), (x1, y1) = header[key]
    return int(x0), int(y0), int(x1), int(y1)


def _read_exr(path: str) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    """Read the RGB(A)/Y channels of an OpenEXR file, placed in its display window.

    A multi-part file: the first part holding R, G, B (or Y) is used, with a ``warning``
    naming the parts. A data window that differs from the display window (a crop or
    overscan render) is placed into the display window (zero, alpha 0 outside it), with
    a ``warning``.
    """
    import OpenEXR

    try:
        with OpenEXR.File(path, separate_channels=True) as f:
            if not f.parts:  # OpenEXR gives no parts when the pixel data cannot be read
                raise FootageError(f"{path}: unreadable OpenEXR file (truncated or corrupt pixel data)",
                                   file=path)
            part = f.parts[0]
            if len(f.parts) > 1:
                def has_rgb(p):
                    names = {k.rsplit(".", 1)[-1] for k in p.channels}
                    return {"R", "G", "B"} <= names or "Y" in names
                names = [p.name() or f"#{i}" for i, p in enumerate(f.parts)]
                folder = os.path.dirname(os.path.abspath(path))
                chosen = _EXR_PART.get(folder)  # the part the folder's first file was read from
                if chosen is not None and chosen in names:
                    part = f.parts[names.index(chosen)]
                else:
                    part = next((p for p in f.parts if has_rgb(p)), f.parts[0])
                    if chosen is not None:  # second fresh-eyes trial: another part was read silently
                        raise FootageError(f"{path}: multi-part OpenEXR without the part {chosen!r} read from "
                                           f"the other files of its folder (it has {', '.join(names)})",
                                           file=path)
                    _EXR_PART[folder] = part.name() or names[0]
                _warn_once("multipart", f"{path} is a multi-part OpenEXR file with {len(names)} parts "
                                        f"({', '.join(names)}); only part {part.name()!r} is read "
                                        f"(and likewise in the other files of its folder)", path)
            chans = {k: np.asarray(v.pixels) for k, v in part.channels.items()}
            data_w, disp_w = _window(part.header, "dataWindow"), _window(part.header, "displayWindow")
    except FootageError:
        raise
    except Exception as e:
        raise FootageError(f"{path}: not a readable OpenEXR file ({e})", file=path) from e
    if data_w != disp_w:
        _warn_once("window", f"{path}: data window {data_w} differs from the display window {disp_w}; "
                             f"the pixels are placed in the display window ({disp_w[2] - disp_w[0] + 1}x"
                             f"{disp_w[3] - disp_w[1] + 1}), empty (alpha 0) outside the data", path)
        chans = {k: _to_display(v, data_w, disp_w) for k, v in chans.items()}
        if not any(k.rsplit(".", 1)[-1] == "A" for k in chans):
            chans["A"] = _to_display(np.ones((data_w[3] - data_w[1] + 1, data_w[2] - data_w[0] + 1),
                                             np.float32), data_w, disp_w)

    def find(c):
        if c in chans:
            return chans[c]
        cands = sorted(k for k in chans if k.rsplit(".", 1)[-1] == c)
        return chans[cands[0]] if cands else None

    r, g, b, a, y = (find(c) for c in ("R", "G", "B", "A", "Y"))
    if r is not None and g is not None and b is not None:
        rgb = np.stack([r, g, b], axis=-1)
    elif y is not None:
        rgb = np.repeat(y[..., None], 3, axis=-1)
    elif r is not None:
        rgb = np.repeat(r[..., None], 3, axis=-1)
    else:
        if not chans:  # OpenEXR returns no channels when the pixel data cannot be read
            raise FootageError(f"{path}: unreadable OpenEXR file (truncated or corrupt pixel data)",
                               file=path)
        raise FootageError(f"{path}: EXR has no R/G/B or Y channels (has {sorted(chans)})", file=path)
    dtype = str(rgb.dtype)
    return rgb.astype(np.float32), (None if a is None else a.astype(np.float32)), dtype


def _to_display(a: np.ndarray, data_w, disp_w) -> np.ndarray:
    """A channel of the data window ``data_w`` placed into the display window ``disp_w``
    (both ``(x0, y0, x1, y1)`` inclusive); zero outside the data."""
    X0, Y0, X1, Y1 = disp_w
    x0, y0, x1, y1 = data_w
    out = np.zeros((Y1 - Y0 + 1, X1 - X0 + 1), a.dtype)
    ox0, oy0, ox1, oy1 = max(x0, X0), max(y0, Y0), min(x1, X1), min(y1, Y1)
    if ox0 <= ox1 and oy0 <= oy1:
        out[oy0 - Y0:oy1 - Y0 + 1, ox0 - X0:ox1 - X0 + 1] = a[oy0 - y0:oy1 - y0 + 1, ox0 - x0:ox1 - x0 + 1]
    return out


#: EXIF orientation -> transform to display orientation (matches PIL.ImageOps.exif_transpose)
_EXIF_TRANSFORMS = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: np.swapaxes(a, 0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.swapaxes(np.rot90(a, 2), 0, 1),
    8: lambda a: np.rot90(a, 1),
}
#: counter-clockwise degrees of the rotation part of each orientation (for FootageInfo)
EXIF_ROTATION = {1: 0, 2: 0, 3: 180, 4: 0, 5: 270, 6: 270, 7: 90, 8: 90}


def exif_orientation(path: str) -> int:
    """EXIF orientation tag (1..8) of an image file, 1 when absent or unreadable."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            o = int(im.getexif().get(0x0112, 1) or 1)
        return o if 1 <= o <= 8 else 1
    except Exception:
        return 1


def _read_image(path: str, colorspace: Optional[str], index: int):
    """Decode one image file -> (linear rgb float32, alpha or None, pix_fmt, bits, linear?)."""
    ext = Path(path).suffix.lower()
    size = _header_size(path)
    if size is not None:
        check_frame_size(size[0], size[1], path, index + 1)
    if ext == ".exr":
        try:
            rgb, alpha, dtype = _read_exr(path)
        except FootageError as e:
            e.frame = index + 1
            raise
        _check_finite(rgb, alpha, path, index)
        if alpha is not None:  # OpenEXR stores premultiplied colour: un-premultiply
            alpha = np.clip(alpha, 0.0, 1.0)
            rgb = np.where(alpha[..., None] > 1e-6, rgb / np.maximum(alpha[..., None], 1e-6), 0.0)
            rgb = rgb.astype(np.float32)
        rgb = colour.to_scene_linear(rgb, colorspace, is_linear_file=True)
        bits = 16 if dtype == "float16" else 32
        return rgb, alpha, f"exr-{dtype}", bits, True
    import cv2

    try:
        data = np.fromfile(path, dtype=np.uint8)  # works with any (non-ASCII) path
    except OSError as e:
        raise FootageError(f"{path} (frame {index + 1}): cannot read ({e.strerror})",
                           frame=index + 1, file=path) from e
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if img is None:
        raise FootageError(f"{path} (frame {index + 1}): not a readable image (corrupt or truncated?)",
                           frame=index + 1, file=path)
    if img.ndim == 2:
        img = img[..., None]
    if Path(path).suffix.lower() in (".jpg", ".jpeg", ".tif", ".tiff", ".png", ".webp"):
        o = exif_orientation(path)
        if o != 1:
            img = np.ascontiguousarray(_EXIF_TRANSFORMS[o](img))
    chans = img.shape[2]
    if chans == 1:
        rgb_raw, a_raw = np.repeat(img, 3, axis=2), None
    elif chans == 2:  # gray + alpha
        rgb_raw, a_raw = np.repeat(img[..., :1], 3, axis=2), img[..., 1]
    elif chans == 3:
        rgb_raw, a_raw = img[..., ::-1], None
    else:
        rgb_raw, a_raw = img[..., 2::-1], img[..., 3]
    dt = img.dtype
    if dt == np.uint8:
        scale, bits, linear_file = 255.0, 8, False
    elif dt == np.uint16:
        scale, bits, linear_file = 65535.0, 16, False
    elif dt in (np.float32, np.float16, np.float64):
        scale, bits, linear_file = 1.0, 8 * dt.itemsize, True
    else:
        raise FootageError(f"{path} (frame {index + 1}): unsupported pixel type {dt}",
                           frame=index + 1, file=path)
    rgb = rgb_raw.astype(np.float32) / scale
    alpha = None if a_raw is None else np.clip(a_raw.astype(np.float32) / scale, 0, 1)
    _check_finite(rgb, alpha, path, index)
    rgb = colour.to_scene_linear(rgb, colorspace, is_linear_file=linear_file)
    pix_fmt = f"{dt.name}x{chans}"
    return rgb, alpha, pix_fmt, bits, linear_file


def _sequence_files(path: str) -> List[str]:
    """Files of an image sequence given as a folder or a ``%04d`` / ``####`` pattern."""
    p = Path(path)
    if p.is_dir():
        # entries that are not readable files (a dangling symbolic link...) are kept: the
        # reader skips them with a warning, and the job lists them as missing frames
        files = [str(q) for q in p.iterdir() if q.suffix.lower() in IMAGE_EXTS and not q.name.startswith(".")]
        if not files:
            raise FootageError(f"{path}: folder contains no images ({', '.join(sorted(IMAGE_EXTS))})",
                               file=path)
        exts = {Path(f).suffix.lower() for f in files}
        if len(exts) > 1:
            raise FootageError(f"{path}: folder mixes image types {sorted(exts)}; use a pattern "
                               "like name_####.png to pick one sequence", file=path)
    else:
        name = p.name
        m = frame_pattern(name)
        if not m:
            raise FootageError(f"{path}: not a folder or a frame pattern", file=path)
        rx = re.compile("^" + re.escape(name[: m.start()]) + r"(-?\d+)" + re.escape(name[m.end():]) + "$")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise FootageError(f"{path}: folder {parent} does not exist", file=path)
        files = [str(parent / q) for q in os.listdir(parent) if rx.match(q)]
        if not files:
            raise FootageError(f"{path}: no files match the pattern", file=path)
    return sorted(files, key=lambda f: (_natural_number(Path(f).stem) or 0, f))


# --------------------------------------------------------------------------- readers


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


class _ImageFootage(Footage):
    def __init__(self, files: Sequence[str], kind: str, path: str, colorspace, max_size):
        self._files = list(files)
        self._cs = colorspace
        self._max = max_size
        self._skip = _unreadable(self._files) if kind == "sequence" else {}
        readable = [i for i in range(len(self._files)) if i not in self._skip]
        if not readable:
            raise FootageError(f"{path}: no readable image in the sequence ({Path(self._files[0]).name} is "
                               f"{self._skip[0]})", file=self._files[0])
        i0 = readable[0]
        _EXR_PART.pop(os.path.dirname(os.path.abspath(self._files[i0])), None)  # its first file decides
        rgb, alpha, pix_fmt, bits, linear = _read_image(self._files[i0], colorspace, 0)
        h, w = rgb.shape[:2]
        ow, oh = fit_long_side(w, h, max_size)
        self._first = (rgb, alpha)
        ext = Path(self._files[i0]).suffix.lower()
        rot = EXIF_ROTATION[exif_orientation(self._files[i0])] if ext != ".exr" else 0
        self.info = FootageInfo(
            path=path, kind=kind, width=w, height=h, out_width=ow, out_height=oh,
            fps=SEQUENCE_FPS, n_frames=len(self._files), rotation=rot, pix_fmt=pix_fmt, bit_depth=bits,
            codec=Path(self._files[i0]).suffix.lower().lstrip("."),
            colorspace=colour.canonical_name(colorspace, is_linear_file=linear),
            has_alpha=alpha is not None, files=self._files,
            numbers=sequence_numbers(self._files) if kind == "sequence" else [1],
        )
        if self._skip:
            shown = [f"{Path(self._files[i]).name} (frame {self.info.numbers[i]}) is {why}"
                     for i, why in list(self._skip.items())[:3]]
            more = f" and {len(self._skip) - 3} more" if len(self._skip) > 3 else ""
            events.warning(f"{path}: {'; '.join(shown)}{more}: skipped, so the output misses "
                           f"{'that frame' if len(self._skip) == 1 else 'those frames'} (listed in "
                           f"frames_missing; the job is not complete)", file=self._files[min(self._skip)],
                           frame=self.info.numbers[min(self._skip)])
        self._i0 = i0

    def __iter__(self) -> Iterator[SourceFrame]:
        info = self.info
        for i, f in enumerate(self._files):
            if i in self._skip:
                continue
            if i == self._i0 and self._first is not None:
                rgb, alpha = self._first
                self._first = None
            else:
                # messages name the source frame number (the one in the file name)
                try:
                    rgb, alpha, *_ = _read_image(f, self._cs, info.numbers[i] - 1)
                except MemoryError as e:  # fresh-eyes trial: the job named only its output folder
                    num = info.numbers[i]
                    raise FootageError(f"{f} (frame {num}): out of memory decoding this image (the "
                                       f"sequence's first frame is {info.width}x{info.height}); close other "
                                       f"programs, or convert the sequence to a smaller size",
                                       frame=num, file=f) from e
            if rgb.shape[:2] != (info.height, info.width):
                num = info.numbers[i]
                raise FootageError(
                    f"{f} (frame {num}): size {rgb.shape[1]}x{rgb.shape[0]} differs from the "
                    f"sequence's {info.width}x{info.height}", frame=num, file=f)
            rgb = resize(rgb, (info.out_width, info.out_height), "area")
            if alpha is not None:
                alpha = resize(alpha, (info.out_width, info.out_height), "area")
            yield SourceFrame(i, float(i / info.fps), rgb, alpha, f, info.numbers[i])


def _vp9_alpha_decoder(path: str, stream):
    """libvpx's VP9 decoder for a stream that carries alpha (WebM ``alpha_mode=1``), else
    ``None``.

    FFmpeg's native VP9 decoder ignores the alpha plane WebM keeps in each block's
    BlockAdditional; libvpx (``libvpx-vp9``) decodes it, giving ``yuva420p`` frames (third
    hostile trial: ``has_alpha: false``, alpha 1.0 everywhere). Where this FFmpeg build has
    no libvpx decoder, a ``warning`` says the alpha is dropped.
    """
    import av

    meta = {str(k).lower(): v for k, v in (stream.metadata or {}).items()}
    if stream.codec_context.name != "vp9" or str(meta.get("alpha_mode", "")).strip() != "1":
        return None
    try:
        ctx = av.CodecContext.create("libvpx-vp9", "r")
    except (av.error.FFmpegError, ValueError, KeyError) as e:
        events.warning(f"{path}: the VP9 stream carries alpha (alpha_mode=1) but this FFmpeg build has no "
                       f"libvpx VP9 decoder ({e}): the alpha is dropped, the frames are opaque", file=path)
        return None
    ctx.extradata = stream.codec_context.extradata
    ctx.thread_type = "AUTO"
    return ctx


# YUV matrix names for swscale, by AVColorSpace value
_SWS_CS = {1: "ITU709", 4: "FCC", 5: "ITU601", 6: "ITU601", 7: "SMPTE240M", 9: "BT2020", 10: "BT2020"}


class _MovieFootage(Footage):
    def __init__(self, path: str, colorspace, max_size):
        import av

        self._path = path
        self._cs = colorspace
        self._container = None
        try:
            self._container = av.open(path)
        except (av.error.FFmpegError, OSError) as e:
            raise FootageError(f"{path}: cannot open as a movie ({e})", file=path) from e
        try:
            vs = self._container.streams.video
            if not vs:
                kinds = sorted({s.type for s in self._container.streams}) or ["none"]
                raise FootageError(f"{path}: no video stream (streams: {', '.join(kinds)})", file=path)
            self._stream = stream = vs[0]
            cc = stream.codec_context
            fmt = getattr(stream, "format", None) if cc is not None else None
            if cc is None or fmt is None or not cc.name:
                tag = getattr(getattr(stream, "codec_tag", None), "strip", lambda: "")() or "unknown"
                raise FootageError(
                    f"{path}: unsupported video codec ({tag}); FFmpeg in this build cannot decode it "
                    "- convert the clip to H.264/ProRes/PNG frames first", file=path)
            if cc.name in TEXT_CODECS:  # FFmpeg renders text files as video ("tty" demuxer)
                raise FootageError(f"{path}: not a movie (FFmpeg reads it as text, codec {cc.name})",
                                   file=path)
            if cc.width and cc.height:
                check_frame_size(cc.width, cc.height, path)
            stream.thread_type = "AUTO"
            self._bits = max((c.bits for c in fmt.components), default=8)
            self._alpha = any(getattr(c, "is_alpha", False) for c in fmt.components) or \
                fmt.name.startswith(("yuva", "rgba", "bgra", "argb", "abgr", "gbrap", "ya"))
            self._vpx = _vp9_alpha_decoder(path, stream)
            pix_fmt = fmt.name
            if self._vpx is not None:
                self._alpha, pix_fmt = True, "yuva420p"
            self._decoder = self._decode()
            try:
                first = next(self._decoder)
            except StopIteration:
                raise FootageError(f"{path}: contains no decodable video frames", file=path) from None
            self._first = first
            rotation = int(round(getattr(first, "rotation", 0) or 0)) % 360
            if rotation == 0 and "rotate" in stream.metadata:
                try:
                    rotation = (-int(float(stream.metadata["rotate"]))) % 360
                except ValueError:
                    rotation = 0
            self._k = (rotation // 90) % 4 if rotation % 90 == 0 else 0
            w, h = first.width, first.height
            if self._k % 2:
                w, h = h, w
            ow, oh = fit_long_side(w, h, max_size)
            sar = stream.sample_aspect_ratio or Fraction(1)
            if sar <= 0:
                sar = Fraction(1)
            fps = stream.average_rate or stream.guessed_rate or stream.base_rate or Fraction(24)
            self.info = FootageInfo(
                path=path, kind="movie", width=w, height=h, out_width=ow, out_height=oh,
                fps=Fraction(fps), n_frames=(stream.frames or None), sar=Fraction(sar),
                rotation=self._k * 90, pix_fmt=pix_fmt, bit_depth=self._bits, codec=cc.name,
                colorspace=colour.canonical_name(colorspace), has_alpha=self._alpha,
            )
        except BaseException:
            self.close()
            raise

    def _decode(self):
        import av

        n = 0
        try:
            if self._vpx is None:
                for frame in self._container.decode(self._stream):
                    n += 1
                    yield frame
                return
            for packet in self._container.demux(self._stream):  # the last, empty packet flushes
                for frame in self._vpx.decode(packet):
                    n += 1
                    yield frame
        except av.error.FFmpegError as e:
            raise FootageError(f"{self._path} (frame {n + 1}): decode failed ({e})",
                               frame=n + 1, file=self._path) from e

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None

    def _to_rgb(self, frame, index: int):
        fmt_name = frame.format.name
        hi = self._bits > 8
        target = ("rgba64le" if hi else "rgba") if self._alpha else ("rgb48le" if hi else "rgb24")
        kw = {}
        is_rgb = getattr(frame.format, "is_rgb", False) or fmt_name.startswith(("rgb", "bgr", "gbr"))
        if not is_rgb and not fmt_name.startswith(("gray", "ya")):
            cs = _SWS_CS.get(int(frame.colorspace or 2))
            if cs is None:
                cs = "ITU709" if frame.height >= 720 else "ITU601"
            kw["src_colorspace"] = cs
            rng = int(frame.color_range or 0)
            kw["src_color_range"] = rng if rng in (1, 2) else (2 if fmt_name.startswith("yuvj") else 1)
        try:
            arr = frame.reformat(format=target, **kw).to_ndarray()
        except Exception as e:
            raise FootageError(f"{self._path} (frame {index + 1}): cannot convert {fmt_name} to RGB ({e})",
                               frame=index + 1, file=self._path) from e
        arr = arr.astype(np.float32) / (65535.0 if hi else 255.0)
        if self._k:
            arr = np.rot90(arr, k=self._k)
        arr = np.ascontiguousarray(arr)
        rgb = colour.to_scene_linear(arr[..., :3], self._cs)
        alpha = np.ascontiguousarray(arr[..., 3]) if self._alpha else None
        return rgb, alpha

    def __iter__(self) -> Iterator[SourceFrame]:
        info = self.info
        tb = self._stream.time_base
        index = 0
        pending = [self._first] if self._first is not None else []
        self._first = None

        def frames():
            yield from pending
            yield from self._decoder

        for frame in frames():
            if frame.pts is not None and tb is not None:
                pts_s = float(frame.pts * tb)
            else:
                pts_s = index / float(info.fps)
            rgb, alpha = self._to_rgb(frame, index)
            if rgb.shape[:2] != (info.height, info.width):
                # refused like a sequence of mixed sizes (third hostile trial: a TS changing
                # from 64x48 to 96x48 was squeezed to 64x48 without a word)
                raise FootageError(
                    f"{self._path} (frame {index + 1}): the movie changes resolution mid-stream, to "
                    f"{rgb.shape[1]}x{rgb.shape[0]} from the {info.width}x{info.height} of frames 1-{index}; "
                    f"cut it into parts of one size (or scale it to one size) first",
                    frame=index + 1, file=self._path)
            rgb = resize(rgb, (info.out_width, info.out_height), "area")
            if alpha is not None:
                alpha = resize(alpha, (info.out_width, info.out_height), "area")
            yield SourceFrame(index, pts_s, rgb, alpha, self._path)
            index += 1
        if info.n_frames is not None and index < info.n_frames:
            # a cut or damaged file: FFmpeg's threaded decoding just stops early
            raise FootageError(
                f"{self._path}: the movie ends after frame {index} but declares {info.n_frames} frames "
                f"(truncated or corrupt file); frames 1-{index} decoded, the rest is missing",
                frame=index + 1, file=self._path)
        est = self._estimated_frames()
        if info.n_frames is None and est is not None and index < 0.9 * est - 2:
            # no frame count in the container (Matroska, WebM): its stated duration says how long it is
            raise FootageError(
                f"{self._path}: the movie ends after frame {index} but its stated duration implies about {est} "
                f"frames (truncated or corrupt file); frames 1-{index} decoded, the rest is missing",
                frame=index + 1, file=self._path)
        if info.n_frames is None and est is not None and index < est - 2:
            # within 10 %: a stated duration can be rounded or padded, so only a warning
            events.warning(f"{self._path}: the movie ends after frame {index} but its stated duration "
                           f"implies about {est} frames; the file may be cut (the last frames missing)",
                           file=self._path)

    def _estimated_frames(self) -> Optional[int]:
        """Frame count implied by the video stream's stated duration and the frame rate (for
        containers that do not state a count), or ``None``: the stream's own duration
        (or its Matroska ``DURATION`` tag), else the container's when it holds nothing but
        this stream (an audio track may be longer than the video)."""
        c, st = self._container, self._stream
        if c is None:
            return None
        seconds = None
        if st.duration and st.time_base:
            seconds = float(st.duration * st.time_base)
        else:
            tag = (st.metadata or {}).get("DURATION") or (st.metadata or {}).get("duration")
            m = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", str(tag or "").strip())
            if m:
                seconds = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
            elif len(c.streams) == 1 and c.duration and c.duration > 0:
                seconds = c.duration / 1_000_000
        if not seconds or seconds <= 0:
            return None
        return int(round(seconds * float(self.info.fps)))


def open_footage(
    path: os.PathLike, colorspace: Optional[str] = None, max_size: Optional[int] = None
) -> Footage:
    """Open a movie, image sequence or single image for streaming.

    Args:
        path: a movie file, an image file, a folder of images, or a sequence pattern
            (``shot_%04d.png`` or ``shot_####.png``). Any characters are allowed.
        colorspace: OpenColorIO name of the source colour space; ``None`` = default
            (sRGB for integer formats and video, linear for EXR/float TIFF).
        max_size: if given, frames are downscaled (area filter, in linear light) so
            their long side is at most this many pixels. ``None`` = full size.

    Returns:
        A :class:`Footage` (context manager, iterable of :class:`SourceFrame`) with
        ``.info`` (:class:`FootageInfo`). The first frame is decoded on open to
        validate the source and read its rotation.

    Raises:
        FootageError: missing/unreadable/corrupt file, no video stream, no frames,
            unsupported codec, NaN/Inf pixels; the message names the file (and frame).
        backend.colour.ColourError: unknown colour space.
    """
    p = str(Path(path).absolute())
    if max_size is not None and int(max_size) < 1:
        raise FootageError(f"max_size must be >= 1, got {max_size}")
    if colorspace is not None:
        colour.canonical_name(colorspace)  # fail early on unknown names
    pp = Path(p)
    if pp.is_dir() or is_sequence_pattern(pp):
        files = _sequence_files(p)
        return _ImageFootage(files, "sequence", p, colorspace, max_size)
    if not pp.exists():
        raise FootageError(f"{p}: no such file or folder", file=p)
    if not pp.is_file():
        raise FootageError(f"{p}: not a regular file", file=p)
    if pp.suffix.lower() in IMAGE_EXTS:
        return _ImageFootage([p], "image", p, colorspace, max_size)
    return _MovieFootage(p, colorspace, max_size)


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
