"""Generic frame-job runner: progress, cancel, resume, atomic writes, safety.

Every long job (``decompose``, ``restyle``) is "for each frame: compute, write one
file". :func:`run_job` does everything around the compute step, the same way for all
jobs:

* **Progress** as events (:mod:`backend.events`; the CLI prints them as JSON lines)::

      {"event": "start", "total": N, "out": DIR, "settings_hash": H}
      {"event": "progress", "frame": n, "done": k, "total": N, "fps": x, "eta_s": y, "skipped": bool}
      {"event": "done", "done": k, "written": w, "skipped": s, "total": N, "elapsed_s": t, "out": DIR}

  (``error`` / ``cancelled`` lines are printed by :func:`backend.cli.main`, which also
  draws a progress bar instead when stdout is a terminal).
* **Cancel**: once the ``cancel`` event is set (the CLI sets it on the first
  SIGINT/SIGTERM, :class:`SignalCancel`) the current frame finishes and the job stops;
  a ``KeyboardInterrupt`` (the CLI's second signal) abandons the current frame at once. Either way only complete frames
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
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, IO, Iterable, List, Optional, Sequence, Tuple

from .. import contract, events
from ..errors import JobCancelled, JobError  # noqa: F401  (re-exported: their former home)
from . import locks
from .fingerprint import file_sha256
from .outputs import PRODUCER, STATS, _entries, _rel, check_previous_outputs, read_own_manifest, stat_key

WorkFn = Callable[[Path, str], Optional[Dict[str, Any]]]
#: seconds between manifest rewrites during a run (see :func:`run_job`)
MANIFEST_INTERVAL_S = 2.0


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
    if isinstance(e, MemoryError):
        return JobError(f"frame {number} ({final}): out of memory; try a smaller --processing-resolution, "
                        f"close other programs, or process fewer frames at once", frame=number, file=final)
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
        if not src.exists() and ("%" in src.name or "#" in src.name):  # a sequence pattern: guard its folder
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


#: signals that cancel a job cleanly: SIGINT, SIGTERM and (where it exists) SIGHUP, sent
#: when the terminal or ssh session running the job closes (third hostile trial: SIGHUP
#: killed the process, leaving the folder's lock file and a ``.tmp`` frame behind)
CANCEL_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class SignalCancel:
    """Context manager: SIGINT/SIGTERM/SIGHUP cancel a job cleanly instead of killing it.

    The first signal sets :attr:`event` (pass it as ``run_job(cancel=...)``: the frame
    being computed is finished and the job stops with :class:`JobCancelled`); a second
    one raises ``KeyboardInterrupt`` (the frame in flight is abandoned, its temporary
    file removed). Handlers are installed only on the main thread and restored on
    exit. The command line uses this; the Python API never installs signal handlers
    unless the caller does.
    """

    def __init__(self, event: Optional[threading.Event] = None):
        self.event = event if event is not None else threading.Event()
        self._old: Dict[int, Any] = {}

    def _handler(self, signum, frame):
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    def __enter__(self) -> threading.Event:
        if threading.current_thread() is threading.main_thread():
            for s in CANCEL_SIGNALS:
                try:
                    self._old[s] = signal.signal(s, self._handler)
                except (ValueError, OSError):  # pragma: no cover
                    pass
        return self.event

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()


@contextlib.contextmanager
def _manifest_lock(out: Path):
    """Exclusive advisory lock on the output folder itself (POSIX ``flock`` on its
    descriptor: no lock file is left), so jobs writing
    disjoint frame ranges into one folder at the same time (farm chunks) merge their
    manifest entries instead of overwriting them. Without ``fcntl`` (Windows): a
    ``filelock`` lock file, :func:`backend.jobs.locks.portable_folder_lock`."""
    if locks.PORTABLE_LOCKS:
        with locks.portable_folder_lock(out):
            yield
        return
    import fcntl

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


def run_lock(out: Path):
    """The running-jobs lock of ``out``: :class:`_RunLock` (``flock``), or
    :class:`backend.jobs.locks.PortableRunLock` where ``fcntl`` is unavailable."""
    return locks.PortableRunLock(out) if locks.PORTABLE_LOCKS else _RunLock(out)


_FINISHED = -(1 << 62)  # FrameRun.current once every task is done
#: hidden file every job running in a folder holds a shared ``flock`` on (removed by the last one)
RUN_LOCK = ".gbuffer_running.lock"


class _RunLock:
    """Who is writing into the folder right now, across processes (farm chunks).

    Every running job holds a shared ``flock`` on :data:`RUN_LOCK` for its whole run;
    a job that can take it exclusively (without waiting) is alone. All calls are made
    under :func:`_manifest_lock`, so starting, finishing and checking do not race.
    Where ``fcntl`` is unavailable (Windows) :func:`run_lock` gives a
    :class:`backend.jobs.locks.PortableRunLock` instead.
    """

    def __init__(self, out: Path):
        self.path = out / RUN_LOCK
        self.fd: Optional[int] = None

    def _try_exclusive(self, fd: int) -> bool:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    def others_running(self) -> bool:
        """Another job holds the folder (call under the folder lock)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return False
        if self.fd is not None:  # ours is shared: drop it, probe, take it back
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            alone = self._try_exclusive(self.fd)
            fcntl.flock(self.fd, fcntl.LOCK_SH)
            return not alone
        if not self.path.exists():
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            return not self._try_exclusive(fd)
        finally:
            os.close(fd)

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return
        fcntl.flock(fd, fcntl.LOCK_SH)
        self.fd = fd

    def release(self) -> None:
        """Drop our hold; the last job removes the lock file (call under the folder lock)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_UN)
            if self._try_exclusive(fd):
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
        finally:
            os.close(fd)


def _ranges(numbers: List[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4, 7"`` (``""`` for none)."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


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


@dataclass
class _InFlight:
    """A frame whose file is being finished on the writer thread."""

    number: int
    final: Path
    tmp: Path
    info: Dict[str, Any]
    future: Any  # concurrent.futures.Future of Deferred.write
    t_start: float
    done_at: int


@dataclass
class _Clock:
    """Throughput bookkeeping: busy time = wall time during which at least one computed
    frame was in flight (frames overlap on the writer thread, so per-frame durations
    are not summed)."""

    busy_s: float = 0.0
    busy_from: Optional[float] = None

    def frame_done(self, t_start: float, now: float) -> None:
        start = t_start if self.busy_from is None else max(t_start, self.busy_from)
        self.busy_s += max(0.0, now - start)
        self.busy_from = now


class _ManifestBook:
    """The job's manifest: per-frame entries, merged with other chunks under a lock.

    It is rewritten after a frame at most every :data:`MANIFEST_INTERVAL_S` when the
    files carry their own settings hash (``read_hash``: resume reads it from them), so
    its cost does not grow with clip length; it is always written at the end, on
    cancel and on failure (:meth:`flush`).
    """

    def __init__(self, out: Path, shash: str, old: Dict[str, Any], extra: Optional[Dict[str, Any]],
                 job: str, settings: Dict[str, Any], path_for: Callable[[int], Path], throttle: bool):
        self.out, self.shash, self.path_for, self.throttle = out, shash, path_for, throttle
        self.old_frames = _entries(old)  # malformed entries (a hand-edited manifest) are ignored
        self.frames: Dict[int, Dict[str, Any]] = {
            n: e for n, e in self.old_frames.items()
            if e.get("settings_hash") == shash and Path(path_for(n)).exists()}
        self.data = dict(old) if old.get("settings_hash") == shash else {}
        self.data.update(extra or {})
        self.data.update({"job": job, "settings": settings, "settings_hash": shash, "complete": False,
                          "producer": PRODUCER})
        self.expected: Optional[List[int]] = None  # every frame number of the shot
        self.runlock = run_lock(out)
        self.saved_at = time.monotonic()
        self.dirty = False
        #: farm chunk mode (``run_job(part=...)``): ``(A, B, chunk frame numbers)``; the
        #: book then writes ``.gbuffer_parts/A-B.json`` without any lock, never manifest.json
        self.part: Optional[Tuple[int, int, List[int]]] = None

    finishing = False

    def _complete(self) -> bool:
        """Every frame of the shot is present (with these settings, its file on disk) and
        no other job is still writing into the folder."""
        if self.expected is None:
            missing: List[int] = []
        else:
            missing = [n for n in self.expected
                       if n not in self.frames or not Path(self.path_for(n)).exists()]
        self.data["frames_expected"] = None if self.expected is None else len(self.expected)
        self.data["frames_missing"] = _ranges(missing)
        # a job that read an incomplete folder, or one that changed while it ran, says so
        # (restyle: backend.jobs.restyle_input) and is not complete either
        input_ok = self.data.get("input_complete") is not False
        return not missing and input_ok and not self.runlock.others_running()

    def in_shot(self, number: int) -> bool:
        """Frame ``number`` is one of the shot's (always, when the shot is not known)."""
        return self.expected is None or number in self._expected_set

    def drop_stale(self) -> List[int]:
        """Forget entries of frames that are no longer in the shot (an input frame removed
        since an earlier run); returns their numbers. Their files stay where they are."""
        self._expected_set = set(self.expected or ())
        stale = sorted(n for n in self.frames if not self.in_shot(n))
        for n in stale:
            del self.frames[n]
        return stale

    _expected_set: set = frozenset()

    def stored_hash(self, number: int) -> Optional[str]:
        return self.old_frames.get(number, {}).get("settings_hash")

    def record(self, number: int, entry: Dict[str, Any]) -> None:
        self.frames[number] = entry
        now = time.monotonic()
        if not self.throttle or now - self.saved_at >= MANIFEST_INTERVAL_S:
            self.save(number)
        else:
            self.dirty = True

    def save(self, at: Optional[int]) -> None:
        """Write the manifest, first adopting entries another job with the same settings
        wrote meanwhile (a farm chunk of the same shot into the same folder)."""
        if self.part is not None:
            self.save_part(at)
            return
        with _manifest_lock(self.out):
            self.save_locked(at)
            if self.finishing:
                self.runlock.release()

    def save_locked(self, at: Optional[int]) -> None:
        """:meth:`save`, for a caller holding the folder lock."""
        try:
            disk = contract.read_manifest(self.out)
        except (OSError, ValueError):
            disk = {}
        if disk.get("settings_hash") == self.shash:
            for n, e in _entries(disk).items():
                if (n not in self.frames and e.get("settings_hash") == self.shash
                        and Path(self.path_for(n)).exists() and self.in_shot(n)):
                    self.frames[n] = e
        for key in ("outputs", "inputs", STATS):  # merge other chunks' checksums
            if isinstance(disk.get(key), dict) and isinstance(self.data.get(key), dict) \
                    and disk.get("settings_hash") == self.shash:
                for k, v in disk[key].items():
                    self.data[key].setdefault(k, v)
        self.data["frames"] = [self.frames[k] for k in sorted(self.frames)]
        if self.finishing:
            self.data["complete"] = self._complete()
        else:  # a run in progress: what the manifest lists so far
            self.data["complete"] = False
            self.data["frames_expected"] = None if self.expected is None else len(self.expected)
            self.data["frames_missing"] = _ranges([n for n in self.expected or () if n not in self.frames])
        _write_manifest(self.out, self.data, at)
        self.saved_at = time.monotonic()
        self.dirty = False

    def save_part(self, at: Optional[int]) -> None:
        """Farm chunk mode: write this chunk's manifest part atomically (no lock): the
        chunk's frame entries, ``part`` (range, frames, complete) and ``shot_frames``
        (every frame of the shot, for the merge's completeness check)."""
        from .parts import write_part

        first, last, numbers = self.part
        mine = [n for n in numbers if n in self.frames and Path(self.path_for(n)).exists()]
        missing = [n for n in numbers if n not in mine]
        self.data["frames"] = [self.frames[n] for n in mine]
        self.data["complete"] = False  # only the merged manifest.json says complete
        self.data["part"] = {"first": first, "last": last, "frames": len(numbers),
                             "missing": _ranges(missing), "complete": self.finishing and not missing}
        if self.expected is not None:
            self.data["shot_frames"] = _ranges(self.expected)
        for key in ("frames_expected", "frames_missing"):
            self.data.pop(key, None)
        try:
            write_part(self.out, first, last, self.data)
        except OSError as e:
            raise JobError(f"cannot write the manifest part of frames {first}-{last} in {self.out}: "
                           f"{_oserror_text(e)}", frame=at, file=self.out) from e
        self.saved_at = time.monotonic()
        self.dirty = False

    created = False  # the folder had no manifest: this job's start wrote the first one

    def drop_claim(self) -> None:
        """A failed or cancelled job that wrote no frame leaves no manifest behind when the
        folder had none (call under the folder lock, after releasing the run lock)."""
        if not self.created or self.frames or self.runlock.others_running():
            return
        try:
            disk = contract.read_manifest(self.out)
        except (OSError, ValueError):
            return
        if disk.get("settings_hash") == self.shash and not disk.get("frames"):
            with contextlib.suppress(OSError):
                (self.out / "manifest.json").unlink()

    def flush(self, at: Optional[int], *, only_dirty: bool = False) -> None:
        """Best-effort write on the way out (cancel, failure)."""
        if only_dirty and not self.dirty:
            return
        try:
            self.save(at)
        except JobError:
            pass


def _write_and_checksum(write: Callable[[], Optional[Dict[str, Any]]], tmp: Path) -> Optional[Dict[str, Any]]:
    """A :class:`Deferred` write, then the file's SHA-256 (on the writer thread)."""
    more = write()
    out = dict(more) if isinstance(more, dict) else {}
    if tmp.exists():
        out["sha256"] = file_sha256(tmp)
    return out


def _cleanup_tmp(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass


def _remove_stale_tmp(final: Path) -> None:
    """Temporaries of this frame only, left by a killed run (SIGKILL, power loss):
    ``.tmp_<stem>_*`` and the nested ``.tmp_.tmp_<stem>_*`` of older versions. Per
    frame, so farm chunks writing other frames into the same folder are untouched."""
    for pattern in (f".tmp_{final.stem}_*", f".tmp_.tmp_{final.stem}_*"):
        for p in final.parent.glob(pattern):
            _cleanup_tmp(p)


class FrameRun:
    """One run of a frame job (see :func:`run_job`, which is the way to use it).

    State is named: :attr:`book` (manifest), :attr:`pending` (frames on the writer
    thread, :class:`_InFlight`), :attr:`clock` (throughput), :attr:`result`.
    """

    def __init__(self, out: Path, *, settings: Dict[str, Any], total: Optional[int], job: str,
                 path_for: Callable[[int], Path], manifest: Optional[Dict[str, Any]],
                 read_hash: Optional[Callable[[Path], Optional[str]]],
                 on_frame: Optional[Callable[[int, Dict[str, Any]], None]],
                 cancel: Optional[threading.Event], old: Dict[str, Any], t0: float,
                 input_for: Optional[Callable[[int], Optional[str]]] = None,
                 read_input: Optional[Callable[[Path], Optional[str]]] = None,
                 expected: Optional[Sequence[int]] = None, throttle: Optional[bool] = None,
                 read_entry: Optional[Callable[[Path], Optional[Dict[str, Any]]]] = None):
        self.out, self.total, self.job, self.path_for = out, total, job, path_for
        self.read_entry = read_entry
        self.input_for, self.read_input = input_for, read_input
        self.before_done: Optional[Callable[[JobResult], None]] = None
        self.read_hash, self.on_frame, self.t0 = read_hash, on_frame, t0
        self.cancel = cancel if cancel is not None else threading.Event()
        self.shash = settings_hash(settings)
        self.book = _ManifestBook(out, self.shash, old, manifest, job, settings, path_for,
                                  throttle=(read_hash is not None) if throttle is None else throttle)
        self.book.expected = None if expected is None else sorted(set(int(n) for n in expected))
        stale = self.book.drop_stale()
        if stale:  # fresh-eyes trial (issue 16): they were listed as if still part of the shot
            events.warning(f"{out}: {len(stale)} frame(s) of an earlier run ({_ranges(stale)}, e.g. "
                           f"{Path(path_for(stale[0])).name}) have no input frame any more: they are left "
                           f"on disk but no longer listed in manifest.json; delete them, or they show in "
                           f"an image sequence of this folder", frame=stale[0], file=Path(path_for(stale[0])))
        self.result = JobResult(out_dir=out, total=total, settings_hash=self.shash, manifest=self.book.data)
        self.pending: List[_InFlight] = []
        self.clock = _Clock()
        self.done = 0  # frames handled (computed or skipped), in order
        self.current: Optional[int] = None
        self.frame_failed = False  # later frames are not finalized (order)
        self.writer: Optional[ThreadPoolExecutor] = None
        #: temporaries this run created and has not renamed yet: removed on the way out, so a
        #: second signal landing between two steps of a frame leaves none (third hostile trial)
        self._tmps: set = set()

    # ----------------------------------------------------------------- per frame
    def _is_current(self, number: int, final: Path) -> bool:
        """The file exists and was written with these settings (resume)."""
        if not final.exists():
            return False
        stored = None
        if self.read_hash is not None:
            try:
                stored = self.read_hash(final)
            except Exception:  # noqa: BLE001 - an unreadable file is recomputed
                stored = None
        if stored is None:
            stored = self.book.stored_hash(number)
        if stored != self.shash:
            return False
        recorded = self.book.old_frames.get(number, {}).get("bytes")
        if isinstance(recorded, int):
            try:
                size = final.stat().st_size
            except OSError:
                return False
            if size != recorded:  # changed since the start's check (which refuses such files)
                raise JobError(f"{final} (frame {number}) is {size} bytes but was {recorded} when written: "
                               f"it changed while this job ran; it is never replaced (an edited output is "
                               f"the user's): move it away (it is then computed again) and run again",
                               frame=number, file=final)
        return self._input_matches(number, final)

    def _input_matches(self, number: int, final: Path) -> bool:
        """The frame was computed from the input it would be computed from now (unknown
        on either side: yes; :func:`check_previous_outputs` warned about such frames)."""
        if self.input_for is None:
            return True
        stored = None
        if self.read_input is not None:
            try:
                stored = self.read_input(final)
            except Exception:  # noqa: BLE001
                stored = None
        if stored is None:
            stored = self.book.old_frames.get(number, {}).get("input")
        now = self.input_for(number)
        return stored is None or now is None or stored == now

    def _entry(self, number: int, final: Path, sha: Optional[str]) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"frame": number, "file": final.name, "settings_hash": self.shash}
        if sha is not None:
            entry["sha256"] = sha
        try:
            entry["bytes"] = final.stat().st_size  # a resume notices a file cut since
            if sha is not None:  # verified now: a resume re-hashes it only once its identity changes
                self.book.data.setdefault(STATS, {})[_rel(self.out, final)] = stat_key(final)
        except OSError:
            pass
        if self.input_for is not None:
            fp = self.input_for(number)
            if fp is not None:
                entry["input"] = fp
        return entry

    def _skip(self, number: int, final: Path) -> None:
        self.drain()  # report the frame in flight first: events stay in frame order
        self.result.skipped.append(number)
        old = self.book.frames.get(number)
        if old is None or "sha256" not in old:  # not recorded yet (a hard kill's last frame): record it
            try:
                sha = file_sha256(final)
            except OSError:
                sha = None
            # every field the job recorded for the frame, from the frame's own header (third
            # hostile trial: after a SIGKILL these entries kept 6 of 17 fields, and the shot's
            # flicker figure, a mean over the entries, changed)
            entry = {**self._header_entry(final), **(old or {}), **self._entry(number, final, sha)}
            self.book.frames[number] = entry
            self.book.dirty = True
        events.emit({"event": "progress", "frame": number, "done": self.done, "total": self.total,
                     "fps": None, "eta_s": None, "skipped": True})

    def _header_entry(self, final: Path) -> Dict[str, Any]:
        """The job's per-frame manifest fields as stored in the frame file (``read_entry``),
        ``{}`` when the file holds none (an older version's) or cannot be read."""
        if self.read_entry is None:
            return {}
        try:
            got = self.read_entry(final)
        except Exception:  # noqa: BLE001 - unreadable: the runner's own fields only
            return {}
        if not isinstance(got, dict):
            return {}
        # the runner's own fields come from the file and the folder, never from a header
        return {k: v for k, v in got.items() if k not in ("frame", "file", "settings_hash", "sha256", "bytes")}

    def _compute(self, number: int, final: Path, work: WorkFn) -> None:
        t1 = time.monotonic()
        if self.book.part is not None or not self.book.runlock.others_running():
            # not while another job writes the folder: it may be computing this very frame
            # (hostile trial: two identical decomposes at once, one failed "wrote nothing")
            _remove_stale_tmp(final)
        fd, name = tempfile.mkstemp(prefix=".tmp_" + final.stem + "_", suffix=final.suffix, dir=final.parent)
        tmp = Path(name)
        self._tmps.add(tmp)
        os.close(fd)
        try:
            os.chmod(tmp, contract.default_file_mode())
            info = work(tmp, self.shash)
        except BaseException as e:
            _cleanup_tmp(tmp)
            if isinstance(e, KeyboardInterrupt):
                # second signal: abandon this frame, but keep the one being written
                try:
                    self.drain()
                except (JobError, JobCancelled):
                    pass
            else:
                self.drain()  # an earlier frame's failure is reported first
            _reraise(e, number, final, len(self.result.written))
        if isinstance(info, Deferred):
            if self.writer is None:
                self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.job}-writer")
            self.pending.append(_InFlight(number, final, tmp, dict(info.info),
                                          self.writer.submit(_write_and_checksum, info.write, tmp),
                                          t1, self.done))
            self.drain(keep=1)  # at most one frame in flight: memory stays flat
            return
        try:
            self.drain()
            self.finalize(_InFlight(number, final, tmp, info if isinstance(info, dict) else {}, None,
                                    t1, self.done))
        except BaseException as e:
            _cleanup_tmp(tmp)
            _reraise(e, number, final, len(self.result.written))

    def finalize(self, f: _InFlight) -> None:
        """Rename the finished file into place, record it and report progress."""
        if not f.tmp.exists() or f.tmp.stat().st_size == 0:
            raise JobError(f"job wrote nothing for frame {f.number} ({f.final})", frame=f.number, file=f.final)
        sha = f.info.pop("sha256", None) or file_sha256(f.tmp)
        os.replace(f.tmp, f.final)
        self._tmps.discard(f.tmp)
        entry = self._entry(f.number, f.final, sha)
        entry.update(f.info)
        self.result.written.append(f.number)
        self.book.record(f.number, entry)
        if self.on_frame is not None:
            self.on_frame(f.number, entry)
        self.clock.frame_done(f.t_start, time.monotonic())
        fps = len(self.result.written) / self.clock.busy_s if self.clock.busy_s > 0 else None
        eta = round(max(0, self.total - f.done_at) / fps, 2) if self.total is not None and fps else None
        events.emit({"event": "progress", "frame": f.number, "done": f.done_at, "total": self.total,
                     "fps": None if fps is None else round(fps, 3), "eta_s": eta, "skipped": False})

    def drain(self, keep: int = 0) -> None:
        """Wait for frames on the writer thread (all but the last ``keep``) and finalize
        them in order; a failure names its frame. Frames still pending when an
        exception leaves are waited for and removed by :meth:`_abort`."""
        while len(self.pending) > keep:
            f = self.pending[0]
            try:
                more = f.future.result()
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                self.pending.pop(0)
                _cleanup_tmp(f.tmp)
                self.frame_failed = True
                _reraise(e, f.number, f.final, len(self.result.written))
            self.pending.pop(0)
            if isinstance(more, dict):
                f.info.update(more)
            try:
                self.finalize(f)
            except BaseException as e:
                _cleanup_tmp(f.tmp)
                self.frame_failed = True
                _reraise(e, f.number, f.final, len(self.result.written))

    # ----------------------------------------------------------------- whole run
    def run(self, tasks: Iterable[Tuple[int, WorkFn]]) -> JobResult:
        events.emit({"event": "start", "job": self.job, "total": self.total, "out": str(self.out),
                     "settings_hash": self.shash})
        try:
            for number, work in tasks:
                self.current = number
                if self.cancel.is_set():
                    self.drain()
                    raise JobCancelled(len(self.result.written), number)
                final = Path(self.path_for(number))
                self.done += 1
                if self._is_current(number, final):
                    self._skip(number, final)
                else:
                    self._compute(number, final, work)
            self.drain()
            if self.cancel.is_set():
                raise JobCancelled(len(self.result.written), None)
            if self.before_done is not None:
                # the job's own finishing work (previews...) is part of the run: a cancel or a
                # failure in it leaves complete: false and no "done"; a re-run resumes it
                self.book.save(None)
                self.result.manifest = self.book.data
                self.before_done(self.result)
                if self.cancel.is_set():
                    raise JobCancelled(len(self.result.written), None)
            self.current = _FINISHED
        except (JobCancelled, KeyboardInterrupt) as e:
            self._abort()
            self.book.flush(self.current)
            if isinstance(e, KeyboardInterrupt):
                raise JobCancelled(len(self.result.written), self.current) from None
            raise
        except BaseException as e:
            # a failure outside the frame in flight (e.g. decoding the next source frame):
            # that frame is complete work, keep it (not after an earlier frame failed:
            # frames are finalized strictly in order)
            if not self.frame_failed:
                try:
                    self.drain()
                except BaseException:  # noqa: BLE001 - the first failure is the one reported
                    pass
            self._abort()
            self.book.flush(self.current, only_dirty=True)
            if isinstance(e, MemoryError):
                where = "before the first frame" if self.current is None else f"after frame {self.current}"
                raise JobError(f"out of memory {where} (reading the next input frame) in {self.out}; try a "
                               f"smaller --processing-resolution or close other programs",
                               frame=self.current, file=self.out) from e
            raise
        finally:
            if self.writer is not None:
                self.writer.shutdown(wait=True)
            if self.current is not _FINISHED and self.book.part is None:
                with _manifest_lock(self.out):
                    self.book.runlock.release()
                    self.book.drop_claim()
        return self._finish()

    def _abort(self) -> None:
        if self.writer is not None:
            self.writer.shutdown(wait=True)
        for f in self.pending:
            _cleanup_tmp(f.tmp)
        for tmp in list(self._tmps):
            _cleanup_tmp(tmp)

    def _finish(self) -> JobResult:
        self.result.elapsed_s = time.monotonic() - self.t0
        self.book.finishing = True
        self.book.save(None)
        self.result.manifest = self.book.data
        events.emit({"event": "done", "job": self.job, "done": self.done, "written": len(self.result.written),
                     "skipped": len(self.result.skipped), "total": self.total,
                     "elapsed_s": round(self.result.elapsed_s, 3), "out": str(self.out)})
        return self.result


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
    progress: "events.Progress" = None,
    cancel: Optional[threading.Event] = None,
    on_frame: Optional[Callable[[int, Dict[str, Any]], None]] = None,
    overwrite: bool = False,
    companions: Optional[Callable[[int], Sequence[Path]]] = None,
    extra_outputs: Sequence[Path] = (),
    stream: Optional[IO[str]] = None,
    progress_bar: Optional[bool] = None,
    input_for: Optional[Callable[[int], Optional[str]]] = None,
    read_input: Optional[Callable[[Path], Optional[str]]] = None,
    expected: Optional[Sequence[int]] = None,
    throttle: Optional[bool] = None,
    numbers: Optional[Sequence[int]] = None,
    before_done: Optional[Callable[[JobResult], None]] = None,
    leftovers: Sequence[str] = (),
    part: Optional[Tuple[int, int]] = None,
    read_entry: Optional[Callable[[Path], Optional[Dict[str, Any]]]] = None,
) -> JobResult:
    """Run a frame job with progress, cancel, resume and atomic output.

    Args:
        out_dir: output folder (created if missing; checked writable).
        tasks: iterable of ``(frame_number, work)``. It is consumed lazily, so it can
            decode input as it goes. ``work(tmp_path, settings_hash)`` must write the
            complete output file to ``tmp_path`` (same folder as the final file, so the
            rename is atomic) and may return a dict of per-frame manifest fields, or a
            :class:`Deferred`. Frames whose output is already valid are skipped
            *without* calling ``work``.
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
        progress: where events go (:func:`backend.events.reporting`: a callable taking
            an event dict, or a text stream for JSON lines); ``None``: the reporter
            already installed, if any (nothing is printed by default).
        cancel: a ``threading.Event``; once set, the frame being computed is finished
            and :class:`JobCancelled` is raised (see :class:`SignalCancel`).
        on_frame: called as ``on_frame(frame_number, entry)`` after each written frame.
        overwrite, companions, extra_outputs: frames of this job in ``out_dir`` written
            with other settings are refused unless ``overwrite``, which removes them (and
            their ``companions(n)`` files, the ``extra_outputs`` and the stale manifest)
            first; see :func:`backend.jobs.outputs.check_previous_outputs`.
        stream, progress_bar: deprecated: ``stream`` is the old name of ``progress``;
            ``progress_bar`` is ignored (the command line draws the bar).
        input_for: frame number -> fingerprint of the input that frame is computed from
            (:mod:`backend.jobs.fingerprint`; ``None``: unknown). Recorded per frame
            (``input``); a frame whose stored fingerprint differs is stale: refused unless
            ``overwrite`` (which recomputes exactly those frames).
        read_input: reads the input fingerprint stored in an output file's header.
        expected: every frame number of the shot; the manifest says ``complete: true``
            only when all of them are present and no other job is writing the folder.
        throttle: rewrite the manifest at most every :data:`MANIFEST_INTERVAL_S`
            (default: when ``read_hash`` is given).
        numbers: the frame numbers this run writes (default ``expected``): their
            ``companions`` may not be files we did not write.
        before_done: the job's finishing work after the last frame (previews, summary
            metrics in ``result.manifest``), run before the manifest says complete and
            before the ``done`` event: a cancel or failure in it leaves ``complete: false``.
        leftovers: glob patterns (relative to ``out_dir``) of the job's own hidden
            temporaries a hard kill can leave (``.tmp_preview_*.mp4``); removed at start
            when no other job is writing into the folder (``.tmp_manifest*`` always are).
        part: ``(A, B)``: farm chunk mode (``--manifest-part``, see
            :mod:`backend.jobs.parts`). No ``flock`` anywhere: instead of
            ``manifest.json`` the run writes ``OUT/.gbuffer_parts/A-B.json`` atomically
            (temporary file + rename) with the entries of its frames ``numbers``; one
            merge step (:func:`backend.jobs.parts.merge`) assembles ``manifest.json``.
            Refused (:class:`JobError`): a part of the folder written with other settings,
            or a part whose range overlaps ``A-B`` without being it (another chunking);
            ``overwrite`` is refused (``ValueError``). ``leftovers`` are not removed
            (other chunks may be writing).
        read_entry: reads the job's per-frame manifest fields stored in an output file's
            header (the dict ``work`` returned, e.g. decompose's ``gbuffer/manifest_entry``).
            A frame found on disk but not in the manifest (written in the last moments
            before a hard kill) is recorded with them, so its entry is the one an
            uninterrupted run writes.

    Returns:
        :class:`JobResult`.

    Raises:
        JobError: unsafe or unwritable output, or a frame failed (message names file
            and frame; no partial file is left).
        JobCancelled: ``cancel`` was set, or ``KeyboardInterrupt`` (complete frames
            stay on disk).
    """
    t0 = time.monotonic()
    out = prepare_output_dir(check_output_safe(out_dir, inputs))
    path_for = path_for or (lambda n: contract.frame_path(out, n))
    shash = settings_hash(settings)
    with events.reporting(progress if progress is not None else stream):
        if part is not None:
            return _run_part(out, tasks, part, settings=settings, shash=shash, total=total, job=job,
                             path_for=path_for, manifest=manifest, read_hash=read_hash, cancel=cancel,
                             on_frame=on_frame, overwrite=overwrite, companions=companions,
                             extra_outputs=extra_outputs, input_for=input_for, read_input=read_input,
                             expected=expected, throttle=throttle, t0=t0,
                             numbers=numbers if numbers is not None else expected, before_done=before_done,
                             read_entry=read_entry)
        with _manifest_lock(out):
            # under the folder lock: no other job starts, finishes or checks meanwhile
            old = read_own_manifest(out)
            lock = run_lock(out)
            from .parts import check_no_foreign_parts

            check_no_foreign_parts(out, shash, job)  # farm chunks take no lock: their parts say it
            if old.get("settings_hash") not in (None, shash) and lock.others_running():
                raise JobError(
                    f"another {old.get('job') or job} job with other settings (settings hash "
                    f"{old.get('settings_hash')}) is writing into {out} right now; one folder holds one "
                    f"set of settings: wait for it to finish, or choose another --out", file=out)
            check_previous_outputs(out, shash, old, job=job, path_for=path_for, read_hash=read_hash,
                                   overwrite=overwrite, companions=companions, extra_outputs=extra_outputs,
                                   read_input=read_input, input_for=input_for,
                                   numbers=numbers if numbers is not None else expected)
            if overwrite:
                old = read_own_manifest(out)
            run = FrameRun(out, settings=settings, total=total, job=job, path_for=path_for, manifest=manifest,
                           read_hash=read_hash, on_frame=on_frame, cancel=cancel, old=old, t0=t0,
                           input_for=input_for, read_input=read_input, expected=expected,
                           throttle=throttle, read_entry=read_entry)
            run.book.runlock = lock
            run.book.created = not old
            run.before_done = before_done
            if not lock.others_running():  # a hard kill's temporaries (a live chunk's are kept)
                for pattern in (".tmp_manifest*", *leftovers):
                    for p in out.glob(pattern):
                        _cleanup_tmp(p)
            lock.acquire()
            try:  # claim the folder for these settings before the first frame
                run.book.save_locked(None)
            except BaseException:
                lock.release()
                raise
        return run.run(tasks)


def _run_part(out: Path, tasks, part: Tuple[int, int], *, settings, shash, total, job, path_for, manifest,
              read_hash, cancel, on_frame, overwrite, companions, extra_outputs, input_for, read_input,
              expected, throttle, t0, numbers, before_done, read_entry=None) -> JobResult:
    """:func:`run_job` in farm chunk mode (``part``): no lock, the manifest part only."""
    from .parts import clean_part_temporaries, folder_view

    first, last = int(part[0]), int(part[1])
    if overwrite:
        raise ValueError("--overwrite cannot be combined with --manifest-part: farm chunks never remove "
                         "other chunks' files; empty the folder (or choose another --out) first")
    from .parts import input_identity

    # JobError: other settings / other chunking / other inputs
    old = folder_view(out, shash, job, (first, last), identity=input_identity(manifest or {}))
    chunk = [n for n in (numbers if numbers is not None else range(first, last + 1)) if first <= n <= last]
    check_previous_outputs(out, shash, old, job=job, path_for=path_for, read_hash=read_hash,
                           overwrite=False, companions=companions, extra_outputs=extra_outputs,
                           read_input=read_input, input_for=input_for, numbers=chunk)
    run = FrameRun(out, settings=settings, total=total, job=job, path_for=path_for, manifest=manifest,
                   read_hash=read_hash, on_frame=on_frame, cancel=cancel, old=old, t0=t0,
                   input_for=input_for, read_input=read_input, expected=expected, throttle=throttle,
                   read_entry=read_entry)
    run.book.part = (first, last, chunk)
    run.before_done = before_done
    clean_part_temporaries(out, first, last)
    run.book.save_part(None)  # claim: the part names these settings before the first frame
    return run.run(tasks)
