"""A complete output folder on a read-only file system: resumed without writing (issue 36).

Re-running a job into a folder it finished is a no-op: every frame is skipped. When the
folder cannot be written (a read-only mount, an archive on a read-only share), that
no-op must not fail on the first write (the probe file, the run lock, the manifest):
:func:`complete_read_only` checks, without writing anything, that the folder is
complete with the current settings and unchanged (every recorded file's checksum and
input, :func:`backend.jobs.outputs.check_previous_outputs`), and reports it done. Any
frame to compute is refused as before ("not writable").
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .. import contract, events
from .job_types import JobResult
from .output_folder import check_output_safe
from .outputs import check_previous_outputs, read_own_manifest


def is_read_only(folder: Path) -> bool:
    """Whether ``folder`` is on a read-only file system (or not writable by this user)."""
    try:
        if os.statvfs(folder).f_flag & getattr(os, "ST_RDONLY", 1):
            return True
    except (OSError, AttributeError):
        pass
    return not os.access(folder, os.W_OK)


def complete_read_only(out_dir: os.PathLike, inputs: Sequence[os.PathLike], *, shash: str, job: str,
                       path_for: Optional[Callable[[int], Any]], expected: Optional[Sequence[int]], total: Optional[int],
                       t0: float, **check: Any) -> Optional[JobResult]:
    """The :class:`JobResult` of a resume that has nothing to compute in a read-only
    folder, with the ``start``, ``progress`` (skipped) and ``done`` events; ``None`` when
    the folder is writable, not complete with these settings, or misses a frame.

    Raises:
        JobError: what :func:`check_previous_outputs` refuses (a changed file or input).
    """
    out = Path(out_dir)
    path_for = path_for or (lambda n: contract.frame_path(out, n))
    if expected is None or not out.is_dir() or not is_read_only(out):
        return None
    check_output_safe(out, inputs)
    old = read_own_manifest(out)
    frames = {e.get("frame") for e in old.get("frames") or () if isinstance(e, dict)}
    numbers = sorted(expected)
    if old.get("complete") is not True or old.get("settings_hash") != shash or not set(numbers) <= frames \
            or not all(Path(path_for(n)).is_file() for n in numbers):
        return None
    check_previous_outputs(out, shash, old, job=job, path_for=path_for, overwrite=False, numbers=numbers, **check)
    events.emit({"event": "start", "job": job, "total": total, "out": str(out), "settings_hash": shash})
    for i, n in enumerate(numbers, 1):
        events.emit({"event": "progress", "frame": n, "done": i, "total": total, "fps": None, "eta_s": None,
                     "skipped": True})
    elapsed = time.monotonic() - t0
    events.emit({"event": "done", "job": job, "done": len(numbers), "written": 0, "skipped": len(numbers),
                 "total": total, "elapsed_s": round(elapsed, 3), "out": str(out), "read_only": True})
    return JobResult(out, written=[], skipped=numbers, total=total, elapsed_s=elapsed, settings_hash=shash,
                     manifest=old)
