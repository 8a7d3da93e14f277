"""Output writers of the restyle job: the RGBA EXR frame, the PNG preview, the MP4 preview.

Every writer either writes a path it is given as is (callers pass a temporary path and
rename it, as :func:`backend.jobs.runner.run_job` does for frames) or writes
atomically itself (a temporary file in the same folder renamed onto the target:
readers never see a half-written file). Images are ``H x W x 3``: scene-linear
float32 for EXR, sRGB ``uint8`` for PNG and MP4.
"""
from __future__ import annotations

import json
import os
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple

import numpy as np

from .. import contract, exr_colour
from ..input_files import native_path

#: frame rate of the MP4 preview when the source's is unknown
DEFAULT_FPS = Fraction(24)


def write_rgba_exr(path: os.PathLike, rgb: np.ndarray, alpha: Optional[np.ndarray] = None,
                   header: Optional[Dict[str, Any]] = None, attributes: Optional[Dict[str, Any]] = None) -> Path:
    """Write scene-linear RGB(A) as a single-part half-float EXR (R, G, B, A channels, PIZ).

    RGB is stored premultiplied by alpha (the EXR / Blender convention, as the
    contract's Combined pass) and clipped to ``[0, 65000]`` (half float's range).

    Args:
        path: destination (written directly; callers pass a temporary path).
        rgb: ``H x W x 3`` float32 scene-linear Rec.709, straight (not premultiplied).
        alpha: ``H x W`` in [0, 1] (clipped; default 1).
        header: extra attributes; non-strings are stored as JSON text.
        attributes: OpenEXR attributes stored with their own types (``worldToCamera``,
            ``framesPerSecond`` ... of :mod:`backend.exr_attrs`).

    The file states its colour space: ``colorInteropID`` ``lin_rec709_scene`` and the
    Rec.709 ``chromaticities`` (:func:`backend.exr_colour.colour_attributes`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError / RuntimeError (OpenEXR): the file cannot be written.
    """
    import OpenEXR

    h, w = rgb.shape[:2]
    a = np.ones((h, w), np.float32) if alpha is None else np.clip(alpha, 0.0, 1.0)
    rgb16 = contract.to_half(np.clip(rgb * a[..., None], 0.0, 65000.0))  # premultiplied
    planar = np.ascontiguousarray(np.moveaxis(rgb16, -1, 0))
    chans = {c: planar[i] for i, c in enumerate("RGB")}
    chans["A"] = contract.to_half(np.clip(a, 0.0, 1.0))
    # PIZ: lossless, ~40 % faster to write and smaller than ZIP on filmed content
    hdr = {"compression": OpenEXR.PIZ_COMPRESSION, "type": OpenEXR.scanlineimage}
    hdr.update(exr_colour.colour_attributes())
    hdr.update(attributes or {})
    for k, v in (header or {}).items():
        # text is stored raw (restyle's readers read it raw), unless it holds bytes that
        # are not UTF-8 (a prompt from a non-UTF-8 argv): then JSON-escaped
        hdr[k] = v if isinstance(v, str) and contract.utf8(v) else json.dumps(v, sort_keys=True)
    with OpenEXR.File(hdr, chans) as f:
        f.write(native_path(path))
    return Path(path)


def read_rgba_exr(path: os.PathLike) -> np.ndarray:
    """Read an EXR written by :func:`write_rgba_exr` back as ``H x W x 3`` float32 RGB
    (as stored: premultiplied by alpha), scene-linear Rec.709 (converted from the space
    its header states, e.g. ACEScg).

    Raises:
        ContractError: not a readable OpenEXR file.
    """
    chans, header = contract.read_channels(path)
    rgb = np.stack([chans[c].astype(np.float32) for c in "RGB"], axis=-1)
    iid, _ = exr_colour.stated_space(header)  # written in another working space: back to Rec.709
    return exr_colour.convert_rgb(rgb, iid, "lin_rec709_scene") if iid in exr_colour.PRIMARIES else rgb


def exr_size(path: os.PathLike) -> Tuple[int, int]:
    """``(H, W)`` in pixels of an EXR's data window (first part), from its header only
    (:func:`backend.contract.frame_size`, which gives ``(W, H)``).

    Raises:
        ContractError: not a readable OpenEXR file.
    """
    w, h = contract.frame_size(path)
    return h, w


def write_bytes_atomic(path: os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, creating its folder.

    Raises:
        OSError: the folder or file cannot be written (nothing is left behind).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contract.atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_png(path: os.PathLike, rgb_linear: Optional[np.ndarray], srgb8: Optional[np.ndarray] = None) -> Path:
    """Write an sRGB 8-bit PNG preview atomically (creating its folder).

    Args:
        path: destination ``.png``.
        rgb_linear: ``H x W x 3`` float32 scene-linear frame, tone-mapped with
            :func:`backend.renderers.shading.preview_8bit`; ignored when ``srgb8`` is given.
        srgb8: an already computed ``H x W x 3`` uint8 sRGB preview.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: encoding or writing failed.
    """
    from ..renderers.shading import preview_8bit

    img = srgb8 if srgb8 is not None else preview_8bit(rgb_linear)
    write_bytes_atomic(Path(path), encode_png(img, path))
    return Path(path)


def encode_png(srgb8: np.ndarray, path: Optional[os.PathLike] = None) -> bytes:
    """PNG bytes of an ``H x W x 3`` uint8 sRGB image (deterministic for given pixels).

    Raises:
        OSError: encoding failed (naming ``path`` when given).
    """
    import cv2

    # zlib level 1 with run-length matching: the fastest setting that stays small (~280 KB at 960x540)
    ok, buf = cv2.imencode(".png", srgb8[..., ::-1], [cv2.IMWRITE_PNG_COMPRESSION, 1,
                                                     cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE])
    if not ok:
        raise OSError(f"PNG encoding failed{' for ' + str(path) if path else ''}")
    return buf.tobytes()


class Mp4Encoder:
    """Streaming H.264 yuv420p MP4 writer (PyAV) for sRGB uint8 ``H x W x 3`` frames.

    Writes to ``path`` directly (callers pass a temporary path and rename it, see
    :meth:`temporary`). Odd widths/heights are padded by one replicated row/column
    (yuv420p needs even sizes).

    Args:
        path: the ``.mp4`` to write.
        fps: frame rate (any value :class:`fractions.Fraction` takes; limited to a
            denominator of 1001).
        crf: x264 constant rate factor (0 lossless .. 51; 18 looks lossless).
    """

    def __init__(self, path: os.PathLike, fps=DEFAULT_FPS, crf: int = 18):
        import av

        self.path = Path(path)
        self.box = av.open(str(self.path), mode="w", format="mp4")
        self.fps = Fraction(fps).limit_denominator(1001)
        self.crf = crf
        self.stream = None
        self.size = None
        self.count = 0

    @classmethod
    def temporary(cls, folder: os.PathLike, fps=DEFAULT_FPS, crf: int = 18) -> "Mp4Encoder":
        """An encoder writing a new hidden temporary file (``.tmp_preview_*.mp4``) in
        ``folder``; move it into place with :meth:`commit`."""
        fd, tmp = tempfile.mkstemp(prefix=".tmp_preview_", suffix=".mp4", dir=folder)
        os.close(fd)
        return cls(tmp, fps=fps, crf=crf)

    def add(self, img: np.ndarray) -> None:
        """Encode one ``H x W x 3`` uint8 sRGB frame. Raises ValueError when the size changes."""
        import av

        h, w = img.shape[:2]
        ph, pw = h % 2, w % 2
        if ph or pw:
            img = np.pad(img, ((0, ph), (0, pw), (0, 0)), mode="edge")
        if self.stream is None:
            self.stream = self.box.add_stream("libx264", rate=self.fps)
            self.stream.width, self.stream.height = img.shape[1], img.shape[0]
            self.stream.pix_fmt = "yuv420p"
            # ultrafast: ~4x less CPU than veryfast (5 vs 17 ms per 960x540 frame) for a
            # ~2x larger preview; one thread (the job already keeps both cores busy)
            self.stream.options = {"crf": str(self.crf), "preset": "ultrafast", "threads": "1"}
            self.size = img.shape[:2]
        elif img.shape[:2] != self.size:
            raise ValueError(f"preview frames change size: {img.shape[:2]} vs {self.size}")
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
        for pkt in self.stream.encode(frame):
            self.box.mux(pkt)
        self.count += 1

    def close(self) -> None:
        """Flush and close. Raises ValueError when no frame was added."""
        try:
            if self.stream is None:
                raise ValueError("no frames to encode")
            for pkt in self.stream.encode():
                self.box.mux(pkt)
        finally:
            self.box.close()

    def commit(self, path: os.PathLike) -> Path:
        """:meth:`close`, then rename the file onto ``path`` with the project's file mode.

        Raises:
            ValueError: no frame was added, or no regular file at ``path`` (a FIFO,
                socket, folder or symbolic link: kept; issue 36); OSError: the rename failed.
        """
        from ..input_files import check_write_target

        self.close()
        check_write_target(path, "the movie")
        os.chmod(self.path, contract.default_file_mode())
        os.replace(self.path, path)
        self.path = Path(path)
        return self.path

    def discard(self) -> None:
        """Close without caring about errors and delete the file."""
        try:
            self.box.close()
        except Exception:
            pass
        try:
            self.path.unlink()
        except OSError:
            pass


def write_mp4(path: os.PathLike, frames: Iterable[np.ndarray], fps=DEFAULT_FPS, crf: int = 18) -> Path:
    """Encode sRGB uint8 ``H x W x 3`` frames to H.264 yuv420p MP4 (PyAV), atomically.

    Odd widths/heights are padded by one replicated row/column (yuv420p needs even
    sizes).

    Raises:
        ValueError: ``frames`` is empty or the frames change size.
    """
    path = Path(path)
    with contract.atomic_path(path, prefix=".tmp_preview") as tmp:
        enc = Mp4Encoder(tmp, fps=fps, crf=crf)
        try:
            for img in frames:
                enc.add(img)
        except BaseException:
            enc.discard()
            raise
        enc.close()
    return path
