"""The frame I/O around the restyle renderer: reading and checking the next G-buffer frame
on an I/O thread, and the PNG / MP4 previews written as frames finish. Part of the restyle
job (:mod:`backend.jobs.restyle`).
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from . import flicker as flick
from .. import contract
from ..renderers.shading import preview_8bit
from .restyle_files import MP4_NAME, PREVIEW_DIR, output_path, preview_path
from .restyle_settings import RestyleInputs, out_of_range
from .runner import JobError
from .writers import Mp4Encoder, encode_png, read_rgba_exr, write_bytes_atomic


@dataclass
class _InputFrame:
    """One input frame as read on the I/O pool."""

    frame: contract.GBufferFrame
    bad_pass: Optional[str]  # first pass holding NaN/Inf, None: all finite
    reference: Optional[contract.GBufferFrame]  # the unedited frame, when the renderer uses it
    odd: Dict[str, str] = field(default_factory=dict)  # out-of-range values: what -> how many, range


#: frames above this many pixels are not read ahead (1440p and larger)
PREFETCH_MAX_PIXELS = 2560 * 1440 - 1


class _Reader:
    """Reads input frames on the I/O pool, one frame ahead of rendering."""

    def __init__(self, inputs: RestyleInputs, use_reference: bool, pool: ThreadPoolExecutor):
        self.inputs, self.use_reference, self.pool = inputs, use_reference, pool
        order = list(inputs.files)
        self.following = dict(zip(order, order[1:]))
        self.pending: Dict[int, Future] = {}

    def read(self, n: int) -> _InputFrame:
        """Read frame ``n`` (and its reference frame when used) and scan it for NaN/Inf.

        Raises:
            JobError: a file that is not a contract frame (naming file and frame).
        """
        frame = self._read(n, self.inputs.all_files[n])
        bad = next((name for name, arr in frame.arrays().items() if not contract.all_finite(arr)), None)
        ref = None
        if self.use_reference:
            path = self.inputs.ref_files[n]
            ref = self._read(n, path)
            ref_bad = next((name for name, arr in ref.arrays().items() if not contract.all_finite(arr)), None)
            if ref_bad is not None:  # second fresh-eyes trial: it rendered a black frame, no word
                raise JobError(f"pass {ref_bad} of the reference frame {path} (frame {n}) contains NaN or Inf; "
                               f"fix or re-export that G-buffer frame", frame=n, file=path)
        return _InputFrame(frame, bad, ref, out_of_range(frame) if bad is None else {})

    @staticmethod
    def _read(n: int, path: Path) -> contract.GBufferFrame:
        try:
            return contract.read_frame(path)
        except contract.ContractError as e:
            raise JobError(f"frame {n}: {e}", frame=n, file=path) from e

    def get(self, n: int) -> _InputFrame:
        """Frame ``n`` (prefetched when it was next), and start reading the one after,
        unless frames are larger than :data:`PREFETCH_MAX_PIXELS` (a 4K G-buffer frame is
        445 MB in memory: reading ahead would hold two; issue 37)."""
        fut = self.pending.pop(n, None)
        got = fut.result() if fut is not None else self.read(n)
        h, w = got.frame.shape
        if h * w > PREFETCH_MAX_PIXELS:
            from ..memory import map_large_blocks

            map_large_blocks()  # freed planes leave the process at once (backend.memory)
        nxt = self.following.get(n)
        if nxt is not None and nxt not in self.pending and h * w <= PREFETCH_MAX_PIXELS:
            self.pending[nxt] = self.pool.submit(self.read, nxt)
        return got

    def cancel(self) -> None:
        for fut in self.pending.values():
            fut.cancel()
        self.pending.clear()


class _Previews:
    """PNG previews (encoded on the I/O pool) and the MP4 preview.

    The MP4 is encoded as frames are written; when the folder's frames are not exactly
    the ones this run rendered, in order (a resume skipped some), it is re-encoded from
    the PNG previews at the end instead.
    """

    def __init__(self, out_dir: Path, fps: Fraction, pool: ThreadPoolExecutor, pngs: bool, mp4: bool):
        self.out_dir, self.fps, self.pool = out_dir, fps, pool
        self.pngs, self.mp4 = pngs, mp4
        self.png_jobs: Dict[int, Future] = {}
        self.png_data: Dict[int, bytes] = {}  # encoded, written once the frame is recorded
        self.encoder: Optional[Mp4Encoder] = None
        self.streamed: List[int] = []  # frame numbers in the streamed MP4, in order
        self.broken = False

    def add(self, n: int, rgb: np.ndarray) -> Optional[str]:
        """Preview of frame ``n`` (``H x W x 3`` float32 scene-linear, as stored); on the
        writer thread. Returns the SHA-256 of the PNG preview (``None``: no PNG)."""
        if not (self.pngs or self.mp4):
            return None
        img8 = preview_8bit(rgb)
        sha = None
        if self.pngs:
            data = encode_png(img8)
            sha = hashlib.sha256(data).hexdigest()
            self.png_data[n] = data
        if self.mp4 and not self.broken:
            try:
                if self.encoder is None:
                    self.encoder = Mp4Encoder.temporary(self.out_dir, fps=self.fps)
                self.encoder.add(img8)
                self.streamed.append(n)
            except Exception:  # the end-of-job re-encode reports real problems
                self.broken = True
        return sha

    def frame_recorded(self, n: int) -> None:
        """Frame ``n`` is in place and recorded (with its preview's checksum) in the
        manifest: now write its PNG, so a preview on disk is always a recorded one."""
        data = self.png_data.pop(n, None)
        if data is not None:
            self.png_jobs[n] = self.pool.submit(write_bytes_atomic, preview_path(self.out_dir, n), data)

    def discard(self) -> None:
        """Drop the streamed MP4 (the job failed)."""
        if self.encoder is not None:
            self.encoder.discard()

    def finish(self, done: List[int], record: Callable[[str, str], None]) -> bool:
        """After the run: check the PNG writes, write previews missing for resumed
        frames, and put ``preview.mp4`` in place for the frames ``done`` (all frames in
        the folder, in order). Every file written is first recorded with its checksum
        through ``record(relative path, sha256)`` (which saves the manifest), then put
        in place. Returns whether ``preview.mp4`` was written.

        Raises:
            JobError: a PNG preview could not be written.
        """
        for n, fut in self.png_jobs.items():
            try:
                fut.result()
            except Exception as e:
                path = preview_path(self.out_dir, n)
                raise JobError(f"cannot write preview {path} (frame {n}): {e}", frame=n, file=path) from e
        if self.pngs:
            # previews of resumed frames may be missing (e.g. written by an older run)
            for n in done:
                if not preview_path(self.out_dir, n).exists() and output_path(self.out_dir, n).exists():
                    data = encode_png(preview_8bit(read_rgba_exr(output_path(self.out_dir, n))))
                    record(f"{PREVIEW_DIR}/{preview_path(self.out_dir, n).name}", hashlib.sha256(data).hexdigest())
                    write_bytes_atomic(preview_path(self.out_dir, n), data)
        if self._commit_stream(done, record):
            return True
        return bool(self.mp4 and done) and self._encode_from_pngs(done, record)

    def _commit(self, enc: Mp4Encoder, record: Callable[[str, str], None]) -> None:
        """Close the temporary MP4, record its checksum, then rename it into place."""
        from .fingerprint import file_sha256

        enc.close()
        record(MP4_NAME, file_sha256(enc.path))
        os.chmod(enc.path, contract.default_file_mode())
        os.replace(enc.path, self.out_dir / MP4_NAME)

    def _commit_stream(self, done: List[int], record: Callable[[str, str], None]) -> bool:
        enc = self.encoder
        if enc is None:
            return False
        if self.mp4 and not self.broken and self.streamed == done:
            try:
                self._commit(enc, record)
                return True
            except Exception:
                enc.discard()
                return False
        enc.discard()
        return False

    def _encode_from_pngs(self, done: List[int], record: Callable[[str, str], None]) -> bool:
        import cv2

        pngs = [preview_path(self.out_dir, n) for n in done if preview_path(self.out_dir, n).exists()]
        if not pngs:
            return False
        enc = Mp4Encoder.temporary(self.out_dir, fps=self.fps)
        try:
            for p in pngs:
                enc.add(cv2.imread(str(p), cv2.IMREAD_COLOR)[..., ::-1])
            self._commit(enc, record)
        except BaseException:
            enc.discard()
            raise
        return True


@dataclass
class _Rendered:
    """The latest frame rendered in this run (for temporal renderers)."""

    number: int
    rgb: np.ndarray


@dataclass
class _Measured:
    """The latest frame written in this run, downscaled for the flicker metric."""

    number: int
    sample: flick.Sample
