"""Generic frame-job runner: progress, cancel, resume, atomic writes, safety.

Every long job (``decompose``, ``restyle``) is "for each frame: compute, write one
file". :func:`run_job` does everything around the compute step, the same way for all
jobs:

* **Progress** as JSON lines on stdout, one object per line, flushed::

      {"event": "start", "total": N, "out": DIR, "settings_hash": H}
      {"event": "progress", "frame": n, "done": k, "total": N, "fps": x, "eta_s": y, "skipped": bool}
      {"event": "done", "done": k, "written": w, "skipped": s, "total": N, "elapsed_s": t, "out": DIR}

  (``error`` / ``cancelled`` lines are printed by :func:`backend.cli.main`). When
  stdout is a terminal a tqdm bar goes to stderr instead.
* **Cancel**: the first SIGINT/SIGTERM lets the current frame finish and stops; a
  second one abandons the current frame at once. Either way only complete frames
  exist (each is written to a temporary file in the output folder, then renamed);
  :class:`JobCancelled` is raised (the CLI exits 130). Temporaries a hard kill left
  (``.tmp_<stem>_*``) are removed right before their frame is computed again.
* **Resume**: a frame whose file exists and whose stored settings hash equals the
  current one is skipped. The hash is kept per frame in ``manifest.json`` and, when
  the job provides ``read_hash``, in the file itself (EXR header), which wins; the
  manifest is then rewritten at most every ``MANIFEST_INTERVAL_S`` during the run
  (and always at the end, on cancel and on failure).
* **Overlap**: ``work`` may return :class:`Deferred` to finish its file on a writer
  thread while the next frame is computed (one frame in flight, strictly in order).
* **Safety**: the output folder may not be, contain, or lie inside any input.
* **Failure**: any error becomes :class:`JobError` naming the file and frame; the
  temporary file is removed (full disk, unwritable folder, estimator crash...).

Minimal use (this is the whole API a job needs)::

    from backend.jobs.runner import run_job

    def tasks():
        for n, item in enumerate(items, 1):
            def work(tmp_path, settings_hash, item=item):
                write_my_file(tmp_path, compute(item), settings_hash)
                return {"mean": 0.5}          # optional per-frame manifest fields
            yield n, work

    result = run_job(out_dir, tasks(), settings={"prompt": "fog"}, total=len(items),
                     inputs=[src_dir], job="restyle", path_for=lambda n: out_dir / f"x_{n:04d}.exr")
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, IO, Iterable, Optional, Sequence, Tuple

from .. import contract, events
from .outputs import check_previous_outputs

WorkFn = Callable[[Path, str], Optional[Dict[str, Any]]]
#: seconds between manifest rewrites during a run (see :func:`run_job`)
MANIFEST_INTERVAL_S = 2.0


class JobError(RuntimeError):
    """A job failed. ``str(e)`` is a one-line reason naming the file and frame.

    Attributes:
        frame: output frame number, or ``None`` when not frame-specific.
        file: the file concerned (output or input), or ``None``.
    """

    def __init__(self, message: str, frame: Optional[int] = None, file: Optional[os.PathLike] = None):
        super().__init__(message)
        self.frame = frame
        self.file = None if file is None else str(file)


class JobCancelled(Exception):
    """SIGINT/SIGTERM stopped the job; ``written`` frames are complete on disk."""

    def __init__(self, written: int = 0, frame: Optional[int] = None):
        super().__init__(f"cancelled after {written} frame(s)")
        self.written = written
        self.frame = frame


@dataclass
class JobResult:
    """What :func:`run_job` did."""

    out_dir: Path
    written: list = field(default_factory=list)  # frame numbers computed this run
    skipped: list = field(default_factory=list)  # frame numbers resumed (hash matched)
    total: Optional[int] = None
    elapsed_s: float = 0.0
    settings_hash: str = ""
    manifest: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Deferred:
    """Returned by a job's ``work`` to finish its frame on the runner's writer thread.

    ``work`` computes the frame on the main thread and returns ``Deferred(write, info)``;
    ``write()`` (which must write the complete file to the ``tmp_path`` given to
    ``work``, and may return more manifest fields) then runs on a single background
    thread while the next frame is computed. File writers that release the GIL
    (OpenEXR, PNG encoding, numpy copies) thus overlap the next frame's compute on a
    second core. At most one frame is in flight, so memory stays flat; frames are
    renamed into place, recorded and reported strictly in order, and a failure of
    ``write`` is reported naming its frame and file exactly as a failure of ``work``.
    """

    write: Callable[[], Optional[Dict[str, Any]]]
    info: Dict[str, Any] = field(default_factory=dict)


def _reraise(e: BaseException, number: int, final: Path, written: int) -> None:
    """Re-raise an exception raised while producing frame ``number`` as JobError/JobCancelled."""
    err = _frame_error(e, number, final, written)
    if err is e:
        raise e
    raise err from e


def _frame_error(e: BaseException, number: int, final: Path, written: int) -> BaseException:
    """Translate an exception raised while producing frame ``number`` into JobError/JobCancelled."""
    if isinstance(e, (JobError, JobCancelled)):
        return e
    if isinstance(e, KeyboardInterrupt):
        return JobCancelled(written, number)
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                                              errno.EROFS, errno.EACCES, errno.EPERM):
        return JobError(f"cannot write {final} (frame {number}): {_oserror_text(e)}",
                        frame=number, file=final)
    if "no space left on device" in str(e).lower():
        return JobError(f"cannot write {final} (frame {number}): no space left on device",
                        frame=number, file=final)
    fname = getattr(e, "filename", None) or final
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return JobError(f"frame {number} failed ({fname}): {type(e).__name__}: {msg}",
                    frame=number, file=fname)


def settings_hash(settings: Dict[str, Any]) -> str:
    """Stable 16-hex-digit SHA-256 of JSON-serialisable settings (key order irrelevant)."""
    blob = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _real(p: os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.abspath(os.fspath(p))))


def _is_within(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def check_output_safe(out_dir: os.PathLike, inputs: Sequence[os.PathLike]) -> Path:
    """Refuse an output folder that would write into or over an input.

    Refused: ``out_dir`` equal to an input, an input (file or folder) inside
    ``out_dir``, or ``out_dir`` inside an input folder (e.g. an image-sequence folder).
    Symlinks are resolved first.

    Returns:
        The resolved output folder.

    Raises:
        JobError: naming both paths.
    """
    out = _real(out_dir)
    for inp in inputs:
        if inp is None:
            continue
        src = Path(os.fspath(inp))
        if "%" in src.name or "#" in src.name:  # a sequence pattern: guard its folder
            src = src.parent
        src = _real(src)
        if out == src or _is_within(src, out) or _is_within(out, src):
            raise JobError(
                f"refusing to write into or over the input: output folder {out} "
                f"overlaps input {src}; choose another --out", file=out)
    return out


def prepare_output_dir(out_dir: os.PathLike) -> Path:
    """Create ``out_dir`` (and parents) and prove it is writable with a probe file.

    Raises:
        JobError: the folder cannot be created or written (read-only, not a folder,
            full disk), naming it.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise JobError(f"output folder {out} is a file, not a folder; choose another --out", file=out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe_", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise JobError(f"output folder {out} is not writable ({_oserror_text(e)})", file=out) from e
    return out


def _oserror_text(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if e.errno == errno.EFBIG:
        return "file too large for the file system or size limit"
    return e.strerror or str(e)


class _Progress:
    """JSON lines to ``stream`` (not a TTY) or a tqdm bar on stderr (TTY)."""

    def __init__(self, total: Optional[int], stream: Optional[IO[str]], bar: Optional[bool], desc: str):
        self.stream = stream if stream is not None else events.stream()
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.use_bar = tty if bar is None else bar
        self.emit_json = not tty
        self.bar = None
        if self.use_bar:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="frame", file=sys.stderr)
            except ImportError:  # pragma: no cover - tqdm is a dependency
                self.bar = None

    def event(self, **obj) -> None:
        if self.emit_json:
            self.stream.write(json.dumps(obj) + "\n")
            self.stream.flush()

    def step(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _SignalGuard:
    """First SIGINT/SIGTERM sets ``requested``; a second raises KeyboardInterrupt."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._old[s] = signal.signal(s, self._handler)
                except (ValueError, OSError):  # pragma: no cover
                    pass
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _manifest_lock(out: Path):
    """Exclusive advisory lock on the output folder itself (POSIX ``flock`` on its
    descriptor: no lock file is left; a no-op where unavailable), so jobs writing
    disjoint frame ranges into one folder at the same time (farm chunks) merge their
    manifest entries instead of overwriting them."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _write_manifest(out: Path, manifest: Dict[str, Any], frame: Optional[int]) -> None:
    try:
        contract.write_manifest(out, manifest)
    except OSError as e:
        for p in out.glob(".tmp_manifest*"):
            try:
                p.unlink()
            except OSError:
                pass
        raise JobError(f"cannot write {out / 'manifest.json'}: {_oserror_text(e)}",
                       frame=frame, file=out / "manifest.json") from e


def run_job(
    out_dir: os.PathLike,
    tasks: Iterable[Tuple[int, WorkFn]],
    *,
    settings: Dict[str, Any],
    total: Optional[int] = None,
    inputs: Sequence[os.PathLike] = (),
    job: str = "job",
    path_for: Optional[Callable[[int], Path]] = None,
    manifest: Optional[Dict[str, Any]] = None,
    read_hash: Optional[Callable[[Path], Optional[str]]] = None,
    stream: Optional[IO[str]] = None,
    progress_bar: Optional[bool] = None,
    on_frame: Optional[Callable[[int, Dict[str, Any]], None]] = None,
    overwrite: bool = False,
    companions: Optional[Callable[[int], Sequence[Path]]] = None,
    extra_outputs: Sequence[Path] = (),
) -> JobResult:
    """Run a frame job with progress, cancel, resume and atomic output.

    Args:
        out_dir: output folder (created if missing; checked writable).
        tasks: iterable of ``(frame_number, work)``. It is consumed lazily, so it can
            decode input as it goes. ``work(tmp_path, settings_hash)`` must write the
            complete output file to ``tmp_path`` (same folder as the final file, so the
            rename is atomic) and may return a dict of per-frame manifest fields.
            Frames whose output is already valid are skipped *without* calling ``work``.
        settings: everything that affects the output (JSON-serialisable); its
            :func:`settings_hash` decides resume.
        total: number of frames, for progress/ETA (``None`` if unknown).
        inputs: input files/folders; the output may not overlap them.
        job: job name recorded in the manifest (``decompose``, ``restyle``).
        path_for: frame number -> final output path; default
            :func:`backend.contract.frame_path` in ``out_dir``.
        manifest: extra top-level manifest fields (e.g. source metadata). The runner
            adds ``job``, ``settings``, ``settings_hash``, ``frames`` (list of
            ``{"frame", "file", "settings_hash", ...}``) and ``complete``.
        read_hash: optional ``path -> hash or None`` reading the hash stored in an
            output file; used for resume in preference to the manifest.
        stream: where JSON progress goes (default :func:`backend.events.stream`, i.e.
            ``sys.stdout`` unless the CLI set it).
        progress_bar: force the tqdm bar on/off (default: when ``stream`` is a TTY).
        on_frame: called as ``on_frame(frame_number, entry)`` after each written frame.
        overwrite, companions, extra_outputs: frames of this job in ``out_dir`` written
            with other settings are refused unless ``overwrite``, which removes them (and
            their ``companions(n)`` files, the ``extra_outputs`` and the stale manifest)
            first; see :func:`backend.jobs.outputs.check_previous_outputs`.

    Returns:
        :class:`JobResult`.

    Raises:
        JobError: unsafe or unwritable output, or a frame failed (message names file
            and frame; no partial file is left).
        JobCancelled: SIGINT/SIGTERM (complete frames stay on disk).
    """
    t0 = time.monotonic()
    out = check_output_safe(out_dir, inputs)
    out = prepare_output_dir(out)
    path_for = path_for or (lambda n: contract.frame_path(out, n))
    shash = settings_hash(settings)

    old = contract.read_manifest(out) if (out / "manifest.json").exists() else {}
    check_previous_outputs(out, shash, old, job=job, path_for=path_for, read_hash=read_hash,
                           overwrite=overwrite, companions=companions, extra_outputs=extra_outputs)
    old_frames = {int(e["frame"]): e for e in old.get("frames", []) if "frame" in e}
    frames: Dict[int, Dict[str, Any]] = {
        n: e for n, e in old_frames.items() if e.get("settings_hash") == shash
    }
    man = dict(old) if old.get("settings_hash") == shash else {}
    man.update(manifest or {})
    man.update({"job": job, "settings": settings, "settings_hash": shash, "complete": False})

    def frame_list():
        return [frames[k] for k in sorted(frames)]

    def save_manifest(at: Optional[int]) -> None:
        """Write the manifest, first adopting entries another job with the same settings
        wrote meanwhile (a farm chunk of the same shot into the same folder)."""
        with _manifest_lock(out):
            try:
                disk = contract.read_manifest(out)
            except (OSError, ValueError):
                disk = {}
            if disk.get("settings_hash") == shash:
                for e in disk.get("frames", []) or []:
                    try:
                        n = int(e["frame"])
                    except (KeyError, TypeError, ValueError):
                        continue
                    if n not in frames and e.get("settings_hash") == shash and Path(path_for(n)).exists():
                        frames[n] = e
            man["frames"] = frame_list()
            _write_manifest(out, man, at)

    result = JobResult(out_dir=out, total=total, settings_hash=shash, manifest=man)
    prog = _Progress(total, stream, progress_bar, job)
    prog.event(event="start", job=job, total=total, out=str(out), settings_hash=shash)
    counters = {"done": 0, "busy_s": 0.0, "busy_from": None, "manifest_t": time.monotonic(),
                "manifest_dirty": False, "frame_failed": False}
    current = None
    # One frame may be finishing on the writer thread (a Deferred returned by ``work``)
    # while the next one is computed: (number, final, tmp, info, future, t_start, done_at).
    pending: list = []
    writer = None

    def cleanup_tmp(tmp: Path) -> None:
        try:
            tmp.unlink()
        except OSError:
            pass

    def remove_stale_tmp(final: Path) -> None:
        """Temporaries of this frame only, left by a killed run (SIGKILL, power loss):
        ``.tmp_<stem>_*`` and the nested ``.tmp_.tmp_<stem>_*`` of older versions. Per
        frame, so farm chunks writing other frames into the same folder are untouched."""
        for pattern in (f".tmp_{final.stem}_*", f".tmp_.tmp_{final.stem}_*"):
            for p in final.parent.glob(pattern):
                cleanup_tmp(p)

    def finalize(number: int, final: Path, tmp: Path, info: Dict[str, Any], t_start: float,
                 done_at: int) -> None:
        if not tmp.exists() or tmp.stat().st_size == 0:
            raise JobError(f"job wrote nothing for frame {number} ({final})", frame=number, file=final)
        os.replace(tmp, final)
        entry = {"frame": number, "file": final.name, "settings_hash": shash}
        entry.update(info)
        frames[number] = entry
        result.written.append(number)
        # The manifest is rewritten after a frame at most every MANIFEST_INTERVAL_S when
        # the files carry their own settings hash (resume reads it from them), so its
        # cost does not grow with clip length; it is always written at the end, on
        # cancel and on failure.
        now = time.monotonic()
        if read_hash is None or now - counters["manifest_t"] >= MANIFEST_INTERVAL_S:
            save_manifest(number)
            counters["manifest_t"] = now
            counters["manifest_dirty"] = False
        else:
            counters["manifest_dirty"] = True
        if on_frame is not None:
            on_frame(number, entry)
        now = time.monotonic()
        # busy time = wall time during which at least one computed frame was in flight
        # (frames overlap on the writer thread, so per-frame durations are not summed)
        start = t_start if counters["busy_from"] is None else max(t_start, counters["busy_from"])
        counters["busy_s"] += max(0.0, now - start)
        counters["busy_from"] = now
        fps = len(result.written) / counters["busy_s"] if counters["busy_s"] > 0 else None
        eta = None
        if total is not None and fps:
            eta = round(max(0, total - done_at) / fps, 2)
        prog.step()
        prog.event(event="progress", frame=number, done=done_at, total=total,
                   fps=None if fps is None else round(fps, 3), eta_s=eta, skipped=False)

    def drain(keep: int = 0) -> None:
        """Wait for frames on the writer thread (all but the last ``keep``) and finalize
        them in order; a failure names its frame. Frames still in ``pending`` when an
        exception leaves are waited for and removed by the handlers below."""
        while len(pending) > keep:
            number, final, tmp, info, fut, t_start, done_at = pending[0]
            try:
                more = fut.result()
            except KeyboardInterrupt:
                raise  # the handler below waits for the writer and removes the file
            except BaseException as e:
                pending.pop(0)
                cleanup_tmp(tmp)
                counters["frame_failed"] = True  # later frames are not finalized (order)
                _reraise(e, number, final, len(result.written))
            pending.pop(0)
            if isinstance(more, dict):
                info.update(more)
            try:
                finalize(number, final, tmp, info, t_start, done_at)
            except BaseException as e:
                cleanup_tmp(tmp)
                counters["frame_failed"] = True
                _reraise(e, number, final, len(result.written))

    try:
        with _SignalGuard() as guard:
            for number, work in tasks:
                current = number
                if guard.requested:
                    drain()
                    raise JobCancelled(len(result.written), number)
                final = Path(path_for(number))
                stored = None
                if final.exists():
                    if read_hash is not None:
                        try:
                            stored = read_hash(final)
                        except Exception:
                            stored = None
                    if stored is None:
                        stored = old_frames.get(number, {}).get("settings_hash")
                counters["done"] += 1
                if final.exists() and stored == shash:
                    drain()  # report the frame in flight first: events stay in frame order
                    result.skipped.append(number)
                    frames.setdefault(number, {"frame": number, "file": final.name, "settings_hash": shash})
                    prog.step()
                    prog.event(event="progress", frame=number, done=counters["done"], total=total,
                               fps=None, eta_s=None, skipped=True)
                    continue
                t1 = time.monotonic()
                remove_stale_tmp(final)
                fd, tmp = tempfile.mkstemp(prefix=".tmp_" + final.stem + "_", suffix=final.suffix,
                                           dir=final.parent)
                os.close(fd)
                tmp = Path(tmp)
                try:
                    os.chmod(tmp, contract.default_file_mode())
                    info = work(tmp, shash)
                except BaseException as e:
                    cleanup_tmp(tmp)
                    if isinstance(e, KeyboardInterrupt):
                        # second signal: abandon this frame, but keep the one being written
                        try:
                            drain()
                        except (JobError, JobCancelled):
                            pass
                    else:
                        drain()  # an earlier frame's failure is reported first
                    _reraise(e, number, final, len(result.written))
                if isinstance(info, Deferred):
                    if writer is None:
                        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{job}-writer")
                    pending.append((number, final, tmp, dict(info.info), writer.submit(info.write), t1,
                                    counters["done"]))
                    drain(keep=1)  # at most one frame in flight: memory stays flat
                    continue
                try:
                    drain()
                    finalize(number, final, tmp, info if isinstance(info, dict) else {}, t1, counters["done"])
                except BaseException as e:
                    cleanup_tmp(tmp)
                    _reraise(e, number, final, len(result.written))
            drain()
            if guard.requested:
                raise JobCancelled(len(result.written), None)
    except (JobCancelled, KeyboardInterrupt) as e:
        if writer is not None:
            writer.shutdown(wait=True)
        for item in pending:
            cleanup_tmp(item[2])
        try:
            save_manifest(current)
        except JobError:
            pass
        if isinstance(e, KeyboardInterrupt):
            raise JobCancelled(len(result.written), current) from None
        raise
    except BaseException:
        # a failure outside the frame in flight (e.g. decoding the next source frame):
        # that frame is complete work, keep it (not after an earlier frame failed:
        # frames are finalized strictly in order)
        if not counters["frame_failed"]:
            try:
                drain()
            except BaseException:
                pass
        if writer is not None:
            writer.shutdown(wait=True)
        for item in pending:
            cleanup_tmp(item[2])
        if counters["manifest_dirty"]:  # frames finished since the last manifest write
            try:
                save_manifest(current)
            except JobError:
                pass
        raise
    finally:
        if writer is not None:
            writer.shutdown(wait=True)
        prog.close()
    done = counters["done"]
    man["complete"] = True
    result.elapsed_s = time.monotonic() - t0
    save_manifest(None)
    result.manifest = man
    prog.event(event="done", job=job, done=done, written=len(result.written), skipped=len(result.skipped),
               total=total, elapsed_s=round(result.elapsed_s, 3), out=str(out))
    return result
