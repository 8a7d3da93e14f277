"""What every job shares: :class:`JobResult`, :class:`Deferred` (a frame's write handed to the
writer thread), the per-frame error wrapper and the settings hash. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import errno
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ..errors import JobCancelled, JobError
from .output_folder import _oserror_text


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


@dataclass(frozen=True)
class RunOptions:
    """How :func:`backend.jobs.runner.run_job` treats one job's frames: everything but the
    folder, the tasks, the settings, the progress and the cancel event. The fields are
    :func:`~backend.jobs.runner.run_job`'s keyword arguments, documented there; an unknown
    one is a ``TypeError``."""

    total: Optional[int] = None
    inputs: Sequence[Any] = ()
    job: str = "job"
    path_for: Optional[Callable[[int], Path]] = None
    manifest: Optional[Dict[str, Any]] = None
    read_hash: Optional[Callable[[Path], Optional[str]]] = None
    on_frame: Optional[Callable[[int, Dict[str, Any]], None]] = None
    overwrite: bool = False
    companions: Optional[Callable[[int], Sequence[Path]]] = None
    extra_outputs: Sequence[Path] = ()
    input_for: Optional[Callable[[int], Optional[str]]] = None
    read_input: Optional[Callable[[Path], Optional[str]]] = None
    expected: Optional[Sequence[int]] = None
    throttle: Optional[bool] = None
    numbers: Optional[Sequence[int]] = None
    before_done: Optional[Callable[["JobResult"], None]] = None
    leftovers: Sequence[str] = ()
    part: Optional[Tuple[int, int]] = None
    read_entry: Optional[Callable[[Path], Optional[Dict[str, Any]]]] = None

    @property
    def written_numbers(self) -> Optional[Sequence[int]]:
        """The frame numbers this run writes: ``numbers``, else ``expected``."""
        return self.numbers if self.numbers is not None else self.expected


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
    #: ``False``: write this frame before the next one is computed (large frames, whose
    #: write buffers would otherwise add to the next frame's peak memory; issue 37)
    overlap: bool = True


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
