"""Restyle job: a G-buffer contract sequence + a prompt -> re-rendered frames and previews.

Output folder layout (``--out DIR``; it may not be, contain or lie inside the input)::

    DIR/restyle_NNNN.exr      scene-linear Rec.709 RGBA, single part, half float, PIZ;
                              NNNN = the input frame number (gbuffer_NNNN.exr). A is the
                              source Combined alpha; RGB is premultiplied by it. Header: restyle/prompt,
                              restyle/looks (JSON), restyle/renderer (JSON settings),
                              restyle/settings_hash, restyle/source_frame,
                              gbuffer/contract_version.
    DIR/preview/restyle_NNNN.png   sRGB 8-bit preview (soft highlight shoulder,
                              :func:`backend.renderers.shading.preview_8bit`).
    DIR/preview.mp4           H.264 yuv420p preview of all frames in the folder (odd
                              sizes padded by edge replication to even).
    DIR/manifest.json         job, settings (+ hash), prompt, looks, renderer parameters,
                              per-frame entries, the preview paths and a flicker metric.

Progress (JSON lines), cancel (SIGINT/SIGTERM keeps only complete frames) and resume
(frames whose EXR carries the current settings hash are skipped) come from the shared
runner :func:`backend.jobs.runner.run_job`, exactly as for ``decompose``. The settings
hash covers the prompt, the renderer settings and a digest of the input files (name,
size, mtime), so re-running after editing the G-buffers re-renders: into the same folder
that needs ``--overwrite``, which first removes the earlier frames, their previews, the
MP4 and the manifest (without it, a folder holding frames written with other settings
is refused; :mod:`backend.jobs.outputs`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from .. import contract, events
from ..errors import InputError
from ..renderers.base import get_renderer
from ..renderers.shading import preview_8bit
from .runner import Deferred, JobError, check_output_safe, run_job

DEFAULT_RENDERER = "embedded"
OUT_PREFIX = "restyle_"
PREVIEW_DIR = "preview"
MP4_NAME = "preview.mp4"
HEADER = "restyle/"
DEFAULT_FPS = Fraction(24)
FLICKER_MAX_SIDE = 256


def output_path(out_dir: os.PathLike, number: int) -> Path:
    """``DIR/restyle_NNNN.exr`` for input frame ``number``."""
    return contract.frame_path(out_dir, number, prefix=OUT_PREFIX)


def preview_path(out_dir: os.PathLike, number: int) -> Path:
    """``DIR/preview/restyle_NNNN.png``."""
    return Path(out_dir) / PREVIEW_DIR / f"{OUT_PREFIX}{number:0{contract.FRAME_DIGITS}d}.png"


def parse_frames(spec: Optional[str]):
    """``"A-B"`` -> ``(A, B or None)`` (same syntax as ``decompose --frames``)."""
    from .decompose import parse_frames as _pf

    return _pf(spec)


def read_settings_hash(path: Path) -> Optional[str]:
    """Settings hash stored in a restyle EXR header, or None."""
    import OpenEXR

    with OpenEXR.File(str(path), header_only=True) as f:
        v = f.header().get(HEADER + "settings_hash")
    return v.decode() if isinstance(v, bytes) else v


def write_rgba_exr(path: os.PathLike, rgb: np.ndarray, alpha: Optional[np.ndarray] = None,
                   header: Optional[Dict[str, Any]] = None) -> Path:
    """Write scene-linear RGB(A) as a single-part half-float EXR (R, G, B, A channels).

    RGB is stored premultiplied by alpha (the EXR / Blender convention, as the
    contract's Combined pass).

    Args:
        path: destination (written directly; callers pass a temporary path).
        rgb: ``H x W x 3`` float32 scene-linear Rec.709.
        alpha: ``H x W`` in [0, 1] (default 1).
        header: extra attributes; non-strings are stored as JSON text.
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
    for k, v in (header or {}).items():
        hdr[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    with OpenEXR.File(hdr, chans) as f:
        f.write(str(path))
    return Path(path)


def read_rgba_exr(path: os.PathLike) -> np.ndarray:
    """Read a restyle EXR back as ``H x W x 3`` float32 RGB."""
    chans, _ = contract.read_channels(path)
    return np.stack([chans[c].astype(np.float32) for c in "RGB"], axis=-1)


def _atomic_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contract.atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_png(path: os.PathLike, rgb_linear: Optional[np.ndarray], srgb8: Optional[np.ndarray] = None) -> Path:
    """sRGB 8-bit PNG preview of a scene-linear frame (or of ``srgb8``, an already
    computed :func:`backend.renderers.shading.preview_8bit` image), written atomically."""
    import cv2

    from ..renderers.shading import preview_8bit

    img = srgb8 if srgb8 is not None else preview_8bit(rgb_linear)
    # zlib level 1 with run-length matching: the fastest setting that stays small (~280 KB at 960x540)
    ok, buf = cv2.imencode(".png", img[..., ::-1], [cv2.IMWRITE_PNG_COMPRESSION, 1,
                                                   cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE])
    if not ok:
        raise OSError(f"PNG encoding failed for {path}")
    _atomic_bytes(Path(path), buf.tobytes())
    return Path(path)


class Mp4Encoder:
    """Streaming H.264 yuv420p MP4 writer (PyAV) for sRGB uint8 ``H x W x 3`` frames.

    Writes to ``path`` directly (callers pass a temporary path and rename it). Odd
    widths/heights are padded by one replicated row/column (yuv420p needs even sizes).
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

    def add(self, img: np.ndarray) -> None:
        """Encode one frame. Raises ValueError when the size changes."""
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
    sizes). Raises ValueError when ``frames`` is empty.
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


def _exr_size(path: Path) -> tuple:
    """``(H, W)`` of an EXR's data window (first part), from its header only."""
    import OpenEXR

    with OpenEXR.File(str(path), header_only=True) as f:
        (x0, y0), (x1, y1) = f.header()["dataWindow"]
    return int(y1 - y0 + 1), int(x1 - x0 + 1)


def _ranges(numbers: List[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4, 7"``."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def _mean_rgb(rgb: np.ndarray) -> List[float]:
    """Per-channel mean of an ``H x W x 3`` float32 image (OpenCV, float64 accumulation)."""
    import cv2

    m = cv2.mean(np.ascontiguousarray(rgb, dtype=np.float32))
    return [round(float(x), 6) for x in m[:3]]


def _inputs_digest(files: List[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def _source_fps(gb_manifest: Dict[str, Any]) -> Fraction:
    src = gb_manifest.get("source") or {}
    try:
        return Fraction(str(src.get("fps"))) if src.get("fps") else DEFAULT_FPS
    except (ValueError, ZeroDivisionError):
        return DEFAULT_FPS


def _small(src: np.ndarray, out: np.ndarray):
    """Downscaled (long side <= FLICKER_MAX_SIDE) source (linear) and output (sRGB) for flicker."""
    import cv2

    from ..renderers.shading import linear_to_srgb

    h, w = out.shape[:2]
    s = min(1.0, FLICKER_MAX_SIDE / max(h, w))
    size = (max(1, round(w * s)), max(1, round(h * s)))
    src = cv2.resize(np.ascontiguousarray(src, np.float32), size, interpolation=cv2.INTER_AREA)
    out = linear_to_srgb(cv2.resize(np.ascontiguousarray(out, np.float32), size, interpolation=cv2.INTER_AREA))
    return src, out


def _pair_error(prev, cur) -> Optional[tuple]:
    """``(output error, source error)`` between consecutive ``_small`` frames, or None."""
    from .. import temporal
    from ..renderers.shading import linear_to_srgb

    # DIS 'fast' preset: the metric needs consistent pixels, not the best flow (~5x cheaper)
    pair = temporal.FlowPair.compute(prev[0], cur[0], preset="fast")
    if not pair.mask.any():
        return None
    e_out = np.abs(cur[1] - temporal.warp(prev[1], pair.back)).mean(-1)[pair.mask].mean()
    e_src = np.abs(linear_to_srgb(cur[0]) - linear_to_srgb(temporal.warp(prev[0], pair.back))).mean(-1)
    return float(e_out), float(e_src[pair.mask].mean())


def flicker_metric(out_dir: Path, numbers: List[int], gbuffer_files: Dict[int, Path],
                   known: Optional[Dict[int, tuple]] = None) -> Optional[Dict[str, Any]]:
    """Temporal flicker of the result: mean absolute warping error on consistent pixels.

    Flow is computed on the *source* frames (Combined pass, DIS 'fast' preset, downscaled so the long
    side is at most ``FLICKER_MAX_SIDE``), consecutive frames only; the previous output
    is warped into the current one and compared on flow-consistent pixels
    (forward-backward check, :mod:`backend.temporal`). Reported for the output and
    for the source itself (the floor a steady re-render can reach).

    Args:
        known: frame number -> ``(output error, source error)`` already measured during
            the run (frames rendered after their predecessor); the others (resumed
            frames) are measured from the files on disk.
    """
    known = dict(known or {})
    numbers = sorted(numbers)
    have = set(numbers)

    def load(n):
        src = contract.read_frame(gbuffer_files[n]).combined[..., :3]
        return _small(src, read_rgba_exr(output_path(out_dir, n)))

    rows = []
    last = None  # (frame number, small frames) of the last frame loaded from disk
    for n in numbers:
        if n - 1 not in have:
            continue
        if n in known:
            rows.append((n,) + tuple(known[n]))
            continue
        if n not in gbuffer_files or n - 1 not in gbuffer_files:
            continue
        prev = last[1] if last is not None and last[0] == n - 1 else load(n - 1)
        cur = load(n)
        last = (n, cur)
        r = _pair_error(prev, cur)
        if r is not None:
            rows.append((n,) + r)
    if not rows:
        return None
    return {
        "metric": "mean absolute warping error of sRGB [0,1] output on flow-consistent pixels "
                  "(DIS 'fast' flow on the source frames, consecutive frames); lower is steadier",
        "output": float(np.mean([r[1] for r in rows])),
        "source": float(np.mean([r[2] for r in rows])),
        "per_frame": {str(r[0]): round(r[1], 6) for r in rows},
    }


def restyle(*args, progress=None, stream=None, **kwargs):
    """Re-render a G-buffer sequence with a prompt: :func:`_restyle` with its events sent
    to ``progress`` (a callable or a text stream; ``stream`` is the old name)."""
    with events.reporting(progress if progress is not None else stream):
        return _restyle(*args, **kwargs)


def _restyle(
    gbuffer_dir: os.PathLike,
    out_dir: os.PathLike,
    prompt: str = "",
    *,
    renderer: str = DEFAULT_RENDERER,
    renderer_options: Optional[Dict[str, Any]] = None,
    frames: Optional[str] = None,
    previews: bool = True,
    mp4: bool = True,
    flicker: bool = True,
    reference_dir: Optional[os.PathLike] = None,
    stream=None,
    progress_bar: Optional[bool] = None,
    overwrite: bool = False,
    cancel=None,
):
    """Re-render a G-buffer sequence with a prompt (see module docstring for outputs).

    Args:
        gbuffer_dir: folder of ``gbuffer_NNNN.exr`` contract frames (possibly edited).
        out_dir: output folder; refused if it overlaps ``gbuffer_dir``.
        prompt: the look (embedded renderer: see :mod:`backend.renderers.prompt`).
        renderer: registry name (``embedded``, ``controlnet``).
        renderer_options: keyword options for the renderer factory.
        frames: ``"A-B"`` input frame numbers (inclusive), default all.
        previews, mp4, flicker: write PNG previews / the MP4 / the flicker metric.
        reference_dir: the *unedited* G-buffer folder ``gbuffer_dir`` was edited from
            (same frame numbers). Renderers that accept it (embedded) recover the
            source shading against the original albedo, so albedo edits act fully.
        overwrite: replace the output of an earlier run with other settings in
            ``out_dir`` (refused otherwise).

    Returns:
        :class:`backend.jobs.runner.JobResult`.

    Raises:
        JobError: unsafe output, unreadable input (naming file and frame), write failure.
        JobCancelled: SIGINT/SIGTERM.
        ValueError: no frames in range, bad ``--frames``, or a prompt the renderer does
            not understand (:class:`backend.renderers.prompt.PromptError`). A range
            that only ends past the last frame is clipped, with a ``warning`` event.
    """
    gbuffer_dir = Path(gbuffer_dir)
    out_dir = Path(out_dir)
    if not gbuffer_dir.is_dir():
        raise JobError(f"G-buffer folder {gbuffer_dir} does not exist or is not a folder", file=gbuffer_dir)
    inputs = [gbuffer_dir]
    ref_files: Dict[int, Path] = {}
    if reference_dir is not None:
        reference_dir = Path(reference_dir)
        if not reference_dir.is_dir():
            raise JobError(f"reference G-buffer folder {reference_dir} does not exist", file=reference_dir)
        inputs.append(reference_dir)
        ref_files = contract.list_frames(reference_dir)
    check_output_safe(out_dir, inputs)
    first, last = parse_frames(frames)
    all_files = contract.list_frames(gbuffer_dir)
    if not all_files:
        raise JobError(f"no G-buffer frames ({contract.FILE_PREFIX}NNNN.exr) in {gbuffer_dir}",
                       file=gbuffer_dir)
    files = {n: p for n, p in all_files.items() if n >= first and (last is None or n <= last)}
    lo, hi = min(all_files), max(all_files)
    if first > hi:
        raise InputError(f"--frames {frames} starts past the end: {gbuffer_dir} has frames {lo}-{hi}",
                         frame=first, file=gbuffer_dir)
    if not files:
        raise InputError(f"--frames {frames}: no frames in range; {gbuffer_dir} has {lo}-{hi}",
                         file=gbuffer_dir)
    if last is not None and last > hi:
        events.warning(f"--frames {frames}: {gbuffer_dir} ends at frame {hi}; clipped to "
                       f"{max(first, lo)}-{hi}", file=gbuffer_dir)
    gaps = [n for n in range(min(files), max(files) + 1) if n not in files]
    if gaps:
        events.warning(f"{gbuffer_dir} has no G-buffer frame {_ranges(gaps)} between {min(files)} and "
                       f"{max(files)}: {'that frame is' if len(gaps) == 1 else 'those frames are'} "
                       f"not rendered", frame=gaps[0], file=gbuffer_dir)
    first_n = min(files)
    try:
        size0 = _exr_size(files[first_n])
    except Exception:  # unreadable: reading the frame reports it, naming file and frame
        size0 = None

    options = dict(renderer_options or {})
    rend = get_renderer(renderer, **options)
    describe = getattr(rend, "describe", None)
    look_info = describe(prompt) if describe else {"prompt": prompt}  # validates the prompt early
    gb_manifest = contract.read_manifest(gbuffer_dir)
    fps = _source_fps(gb_manifest)

    settings = {
        "prompt": prompt,
        "renderer": rend.settings(),
        "inputs": _inputs_digest([all_files[n] for n in sorted(all_files)]),
        "output_format": "rgba-half-v1",
        "look": look_info.get("params"),  # every shader number (embedded): changes re-render
    }
    if reference_dir is not None:
        missing = [n for n in files if n not in ref_files]
        if missing:
            raise JobError(f"reference folder {reference_dir} has no frame {missing[0]} "
                           f"({contract.frame_path(reference_dir, missing[0]).name})",
                           frame=missing[0], file=contract.frame_path(reference_dir, missing[0]))
        settings["reference"] = _inputs_digest([ref_files[n] for n in sorted(files)])
    use_reference = bool(ref_files) and getattr(rend, "accepts_reference", False)
    state: Dict[str, Any] = {"prev": None, "prev_n": None}
    flick: Dict[int, tuple] = {}  # frame -> (output, source) warping errors measured in the run

    # I/O overlaps rendering: the next input frame is read and PNG previews are written
    # on worker threads (EXR reading/writing, PNG encoding and numpy release the GIL).
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="restyle-io")
    prefetch: Dict[int, Future] = {}
    png_jobs: List[tuple] = []
    order = list(files)
    following = dict(zip(order, order[1:]))
    # The MP4 preview is encoded as frames are written; when the folder's frames are
    # not exactly the ones this run rendered, in order (a resume skipped some), it is
    # re-encoded from the PNG previews at the end instead.
    video: Dict[str, Any] = {"enc": None, "frames": [], "broken": False}

    def _stream_mp4(n: int, img8: np.ndarray) -> None:
        if video["broken"]:
            return
        try:
            if video["enc"] is None:
                fd, tmp = tempfile.mkstemp(prefix=".tmp_preview_", suffix=".mp4", dir=out_dir)
                os.close(fd)
                video["enc"] = Mp4Encoder(tmp, fps=fps)
            video["enc"].add(img8)
            video["frames"].append(n)
        except Exception:  # the end-of-job re-encode reports real problems
            video["broken"] = True

    def read_scanned(n: int):
        """Read frame ``n`` (and its reference frame when used), and name its first pass
        holding NaN/Inf (None: all finite); runs on the I/O pool, overlapping rendering.
        Returns ``(frame, bad pass, reference frame or None)``."""
        path = files[n]
        try:
            frame = contract.read_frame(path)
        except contract.ContractError as e:
            raise JobError(f"frame {n}: {e}", frame=n, file=path) from e
        bad = next((name for name, arr in frame.arrays().items() if not contract.all_finite(arr)), None)
        ref = None
        if use_reference:
            try:
                ref = contract.read_frame(ref_files[n])
            except contract.ContractError as e:
                raise JobError(f"frame {n}: {e}", frame=n, file=ref_files[n]) from e
        return frame, bad, ref

    def get_frame(n: int):
        fut = prefetch.pop(n, None)
        nxt = following.get(n)
        if nxt is not None and nxt not in prefetch:
            prefetch[nxt] = pool.submit(read_scanned, nxt)
        return fut.result() if fut is not None else read_scanned(n)

    def check_input(n: int, path: Path, frame: contract.GBufferFrame, bad: Optional[str]) -> None:
        """Same size as the first frame; finite passes (an edited EXR may hold NaN/Inf)."""
        if size0 is not None and frame.shape != size0:
            (h, w), (h0, w0) = frame.shape, size0
            raise JobError(f"G-buffer frame {n} ({path}) is {w}x{h} but frame {first_n} "
                           f"({files[first_n]}) is {w0}x{h0}: every frame of a sequence must have "
                           f"the same size", frame=n, file=path)
        if bad is not None:
            raise JobError(f"pass {bad} of {path} (frame {n}) contains NaN or Inf; fix or "
                           f"re-export that G-buffer frame", frame=n, file=path)

    def tasks():
        for n, path in files.items():
            def work(tmp_path: Path, shash: str, n=n, path=path):
                frame, bad, ref = get_frame(n)
                check_input(n, path, frame, bad)
                # previous output, for temporal renderers (only when rendered in this run:
                # they also need the previous source, which a resume does not have)
                prev = state["prev"] if state["prev_n"] == n - 1 else None
                t = frame.meta.get("timestamp")
                time_s = float(t) if isinstance(t, (int, float)) and (t or n == 1) else (n - 1) / float(fps)
                kw = {"reference": ref} if ref is not None else {}
                try:
                    rgb = rend.render(frame, prompt, frame_index=n - 1, time_s=time_s, prev=prev, **kw)
                except contract.ContractError as e:
                    raise JobError(f"frame {n} ({path}): {e}", frame=n, file=path) from e
                if rgb.shape != frame.shape + (3,) or not contract.all_finite(rgb):
                    raise JobError(f"renderer {renderer!r} returned shape {rgb.shape} or non-finite "
                                   f"values for frame {n} ({path})", frame=n, file=path)
                header = {
                    HEADER + "prompt": prompt,
                    HEADER + "looks": look_info.get("looks", []),
                    HEADER + "renderer": rend.settings(),
                    HEADER + "settings_hash": shash,
                    HEADER + "source_frame": str(path.name),
                    contract.HEADER_PREFIX + "contract_version": contract.CONTRACT_VERSION,
                }
                alpha = frame.combined[..., 3] if frame.combined.shape[2] == 4 else None
                state["prev"], state["prev_n"] = rgb, n
                entry = {"source": path.name, "mean_rgb": _mean_rgb(rgb)}
                extra = getattr(rend, "last_info", None)
                if extra:
                    entry.update(extra)

                def write(rgb=rgb, alpha=alpha, header=header, src=frame.combined, n=n):
                    # on the runner's writer thread, in frame order, while the next
                    # frame renders: EXR, 8-bit preview (PNG on the I/O pool, MP4
                    # stream), flicker against the previous frame
                    write_rgba_exr(tmp_path, rgb, alpha, header)
                    if previews or mp4:
                        img8 = preview_8bit(rgb)
                        if previews:
                            png_jobs.append((n, pool.submit(write_png, preview_path(out_dir, n), None, img8)))
                        if mp4:
                            _stream_mp4(n, img8)
                    if flicker:
                        cur = _small(src[..., :3], rgb)
                        if state.get("small_n") == n - 1:
                            r = _pair_error(state["small"], cur)
                            if r is not None:
                                flick[n] = r
                        state["small"], state["small_n"] = cur, n
                    return None

                return Deferred(write, entry)

            yield n, work

    manifest = {
        "input": {"gbuffer_dir": str(gbuffer_dir.resolve()), "frames": [min(files), max(files)],
                  "reference_dir": str(Path(reference_dir).resolve()) if reference_dir else None,
                  "source": gb_manifest.get("source")},
        "prompt": prompt,
        "looks": look_info.get("looks"),
        "look_params": look_info.get("params"),
        "renderer": {"name": renderer, "settings": rend.settings()},
        "output": {"exr": f"{OUT_PREFIX}NNNN.exr: single-part RGBA half float, scene-linear Rec.709",
                   "preview_png": f"{PREVIEW_DIR}/{OUT_PREFIX}NNNN.png (sRGB)" if previews else None,
                   "fps": str(fps)},
    }
    try:
        result = run_job(out_dir, tasks(), settings=settings, total=len(files), inputs=inputs,
                         job="restyle", path_for=lambda n: output_path(out_dir, n), manifest=manifest,
                         read_hash=read_settings_hash, cancel=cancel,
                         overwrite=overwrite, companions=lambda n: [preview_path(out_dir, n)],
                         extra_outputs=[out_dir / MP4_NAME])
    except BaseException:
        if video["enc"] is not None:
            video["enc"].discard()
        raise
    finally:
        for fut in prefetch.values():
            fut.cancel()
        pool.shutdown(wait=True)  # previews are atomic; never leave a half-written one
    for n, fut in png_jobs:
        try:
            fut.result()
        except Exception as e:
            raise JobError(f"cannot write preview {preview_path(out_dir, n)} (frame {n}): {e}",
                           frame=n, file=preview_path(out_dir, n)) from e
    man = result.manifest
    done = sorted(int(e["frame"]) for e in man.get("frames", []))
    if previews:
        # previews of resumed frames may be missing (e.g. written by an older run)
        for n in done:
            if not preview_path(out_dir, n).exists() and output_path(out_dir, n).exists():
                write_png(preview_path(out_dir, n), read_rgba_exr(output_path(out_dir, n)))
    enc = video["enc"]
    if enc is not None:
        if mp4 and not video["broken"] and video["frames"] == done:
            try:
                enc.close()
                os.chmod(enc.path, contract.default_file_mode())
                os.replace(enc.path, out_dir / MP4_NAME)
                man["preview_mp4"] = MP4_NAME
                mp4 = False  # streamed: nothing to re-encode
            except Exception:
                enc.discard()
        else:
            enc.discard()
    if mp4 and done:
        import cv2

        pngs = [preview_path(out_dir, n) for n in done if preview_path(out_dir, n).exists()]

        def frames_iter():
            for p in pngs:
                yield cv2.imread(str(p), cv2.IMREAD_COLOR)[..., ::-1]

        if pngs:
            write_mp4(out_dir / MP4_NAME, frames_iter(), fps=fps)
            man["preview_mp4"] = MP4_NAME
    if flicker and len(done) > 1:
        fl = flicker_metric(out_dir, done, all_files, known=flick)
        if fl:
            man["flicker"] = fl
    contract.write_manifest(out_dir, man)
    result.manifest = man
    return result


# --------------------------------------------------------------------------- CLI


def _parse_option(text: str):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option {text!r}: expected KEY=VALUE")
    k, v = text.split("=", 1)
    try:
        val = json.loads(v)
    except ValueError:
        val = v
    return k.strip().replace("-", "_"), val


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``restyle`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "restyle", help="G-buffer EXR sequence + prompt -> re-rendered frames",
        description="Re-render a G-buffer contract sequence with a prompt. The embedded "
                    "renderer understands looks such as 'dense fog', 'murky underwater at "
                    "night', 'heavy rain', 'golden hour', 'snow', 'overcast'; use "
                    "--renderer controlnet for free-form prompts.")
    p.add_argument("gbuffer_dir", help="folder of gbuffer_NNNN.exr (possibly edited)")
    p.add_argument("--prompt", default="", help="look to render (default: neutral relight)")
    p.add_argument("--out", required=True, help="output folder (must not overlap the input)")
    p.add_argument("--renderer", default=DEFAULT_RENDERER, help="renderer name (default: %(default)s)")
    p.add_argument("--frames", help="1-based inclusive input frame numbers A-B (also A- or A)")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (diffusion renderers; default auto)")
    p.add_argument("--seed", type=int, default=None, help="seed (diffusion renderers)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps (diffusion renderers)")
    p.add_argument("--strength", type=float, default=None,
                   help="img2img strength in (0, 1] (diffusion renderers)")
    p.add_argument("--option", action="append", type=_parse_option, default=[], metavar="KEY=VALUE",
                   help="renderer option (JSON value), repeatable, e.g. --option source_light=0")
    p.add_argument("--reference", default=None, metavar="DIR",
                   help="the unedited G-buffer folder GBUFFER_DIR was edited from: source "
                        "shading is recovered against its albedo, so albedo edits act fully")
    p.add_argument("--no-mp4", action="store_true", help="skip the MP4 preview")
    p.add_argument("--overwrite", action="store_true",
                   help="when --out holds frames of an earlier restyle with other settings (prompt, "
                        "renderer, edited G-buffers), remove them, their previews and manifest first; "
                        "without it that is refused. Frames with the same settings are kept (resume)")
    p.set_defaults(func=_run_cli)
    return p


def _run_cli(args) -> int:
    import sys

    opts = dict(args.option)
    for key in ("device", "seed", "steps", "strength"):
        v = getattr(args, key)
        if v is None:
            continue
        if args.renderer == DEFAULT_RENDERER:  # CPU, deterministic: nothing to set
            sys.stderr.write(f"note: --{key} is ignored by the {args.renderer} renderer\n")
            continue
        opts[key] = v
    restyle(args.gbuffer_dir, args.out, args.prompt, renderer=args.renderer,
            renderer_options=opts, frames=args.frames, mp4=not args.no_mp4,
            reference_dir=args.reference, overwrite=args.overwrite, cancel=getattr(args, "cancel", None))
    return 0
