"""``manifest.json`` bookkeeping during a run (:class:`_ManifestBook`): the entries of frames
written and resumed, periodic atomic rewrites under the manifest lock, completeness. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import contract
from ..errors import JobError
from .job_types import MANIFEST_INTERVAL_S
from .output_folder import _oserror_text
from .outputs import PRODUCER, STATS, _entries, _ranges
from .run_lock import run_lock, _manifest_lock


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
