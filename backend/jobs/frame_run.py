"""The frame loop (:class:`FrameRun`): resume checks per frame, compute, the atomic write on a
writer thread, temporaries tracked until renamed, cancel between frames. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import contract, events
from ..errors import JobCancelled, JobError
from .fingerprint import file_sha256
from .job_types import Deferred, JobResult, RunOptions, WorkFn, settings_hash, _reraise
from .manifest_book import _Clock, _InFlight, _ManifestBook, _ranges
from .outputs import STATS, stat_key, _rel
from .run_lock import _FINISHED, _manifest_lock


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

    def __init__(self, out: Path, opts: RunOptions, *, settings: Dict[str, Any], cancel: Optional[threading.Event],
                 old: Dict[str, Any], t0: float):
        self.out, self.total, self.job, self.path_for = out, opts.total, opts.job, opts.path_for
        self.read_entry = opts.read_entry
        self.input_for, self.read_input = opts.input_for, opts.read_input
        self.before_done: Optional[Callable[[JobResult], None]] = opts.before_done
        self.read_hash, self.on_frame, self.t0 = opts.read_hash, opts.on_frame, t0
        self.cancel = cancel if cancel is not None else threading.Event()
        self.shash = settings_hash(settings)
        self.book = _ManifestBook(out, self.shash, old, opts.manifest, opts.job, settings, opts.path_for,
                                  throttle=(opts.read_hash is not None) if opts.throttle is None else opts.throttle)
        self.book.expected = None if opts.expected is None else sorted(set(int(n) for n in opts.expected))
        stale = self.book.drop_stale()
        if stale:  # they were listed as if still part of the shot
            events.warning(f"{out}: {len(stale)} frame(s) of an earlier run ({_ranges(stale)}, e.g. "
                           f"{Path(opts.path_for(stale[0])).name}) have no input frame any more: they are left "
                           f"on disk but no longer listed in manifest.json; delete them, or they show in "
                           f"an image sequence of this folder", frame=stale[0], file=Path(opts.path_for(stale[0])))
        self.result = JobResult(out_dir=out, total=opts.total, settings_hash=self.shash, manifest=self.book.data)
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
            self.drain(keep=1 if info.overlap else 0)  # at most one frame in flight: memory stays flat
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
