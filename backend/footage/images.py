"""Still images and image sequences: OpenEXR (half/float, multi-part, data windows),
PNG / JPEG / TIFF / BMP / WebP through OpenCV with their EXIF orientation, and the
sequence reader. Part of :mod:`backend.footage`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np

from .. import colour, events, exr_colour
from ..imaging import resize
from .frames import (Footage, FootageError, FootageInfo, SEQUENCE_FPS, SourceFrame, _check_finite,
    _unreadable, _warn_once, check_frame_size, fit_long_side)
from .naming import sequence_numbers


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


#: folder -> name of the multi-part EXR part its sequence is read from (the first file's)
_EXR_PART: dict = {}


def _window(header, key):
    (x0, y0), (x1, y1) = header[key]
    return int(x0), int(y0), int(x1), int(y1)


def _read_exr(path: str) -> Tuple[np.ndarray, Optional[np.ndarray], str, tuple, Optional[tuple]]:
    """Read the RGB(A)/Y channels of an OpenEXR file, the colour space its header states
    (``(interop_id, chromaticities)``, :func:`backend.exr_colour.stated_space`) and, for
    overscan, its windows.

    Overscan (a data window that contains the display window and is larger) is kept: the
    pixels of the whole data window are returned with ``(data_window, display_window)``
    (each ``(x0, y0, x1, y1)`` inclusive), which the G-buffers and the restyle keep. Any
    other data window (a crop) is placed into the display window, as before.

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
            stated = exr_colour.stated_space(part.header)
    except FootageError:
        raise
    except Exception as e:
        raise FootageError(f"{path}: not a readable OpenEXR file ({e})", file=path) from e
    overscan = data_w != disp_w and data_w[0] <= disp_w[0] and data_w[1] <= disp_w[1] and \
        data_w[2] >= disp_w[2] and data_w[3] >= disp_w[3]
    if data_w != disp_w and not overscan:
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
    windows = (data_w, disp_w) if overscan else None
    return rgb.astype(np.float32), (None if a is None else a.astype(np.float32)), dtype, stated, windows


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
            rgb, alpha, dtype, stated, windows = _read_exr(path)
        except FootageError as e:
            e.frame = index + 1
            raise
        _check_finite(rgb, alpha, path, index)
        if alpha is not None:  # OpenEXR stores premultiplied colour: un-premultiply
            alpha = np.clip(alpha, 0.0, 1.0)
            rgb = np.where(alpha[..., None] > 1e-6, rgb / np.maximum(alpha[..., None], 1e-6), 0.0)
            rgb = rgb.astype(np.float32)
        rgb, cs_name = colour.from_stated(rgb, colorspace, stated, path)
        if colorspace is None and cs_name != colour.LINEAR:
            _warn_once("stated", f"{path}: the header states {cs_name} (chromaticities / colorInteropID): "
                                 f"converted to scene-linear Rec.709 (no --colorspace needed; one naming "
                                 f"another space is refused)", path)
        bits = 16 if dtype == "float16" else 32
        return rgb, alpha, f"exr-{dtype}", bits, True, cs_name, windows
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
    return rgb, alpha, pix_fmt, bits, linear_file, colour.canonical_name(colorspace, is_linear_file=linear_file), None


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
        rgb, alpha, pix_fmt, bits, linear, cs_name, windows = _read_image(self._files[i0], colorspace, 0)
        h, w = rgb.shape[:2]
        ow, oh = fit_long_side(w, h, max_size)
        self._first = (rgb, alpha)
        ext = Path(self._files[i0]).suffix.lower()
        rot = EXIF_ROTATION[exif_orientation(self._files[i0])] if ext != ".exr" else 0
        self.info = FootageInfo(
            path=path, kind=kind, width=w, height=h, out_width=ow, out_height=oh,
            fps=SEQUENCE_FPS, n_frames=len(self._files), rotation=rot, pix_fmt=pix_fmt, bit_depth=bits,
            codec=Path(self._files[i0]).suffix.lower().lstrip("."),
            colorspace=cs_name, has_alpha=alpha is not None, files=self._files,
            windows=[list(w) for w in windows] if windows and max_size is None else None,
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
