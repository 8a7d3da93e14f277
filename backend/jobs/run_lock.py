"""The folder's locks: the manifest lock (exclusive, around every manifest write) and the
running-jobs lock (:class:`_RunLock`: which jobs hold the folder, so another job with other
settings is refused). The primitives are :mod:`backend.jobs.locks`. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

from ..errors import JobError
from . import locks


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
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO: never waited on
        except OSError:
            self._refuse_unopenable()
            return False
        try:
            self._check_regular(fd)
            return not self._try_exclusive(fd)
        finally:
            os.close(fd)

    def _refuse_unopenable(self) -> None:
        """A lock path that cannot be opened (a socket: ``ENXIO``) is refused like a FIFO
        when it is not a regular file, so it never disables the lock (issue 36); an
        unwritable folder still runs unlocked as before."""
        import stat

        try:
            mode = os.stat(self.path).st_mode
        except OSError:
            return
        if not stat.S_ISREG(mode):
            self._refuse(mode)

    def _refuse(self, mode: int) -> None:
        from ..input_files import kind_of

        raise JobError(f"{self.path} is {kind_of(mode)}, not the job's lock file; move it away or choose "
                       f"another --out", file=self.path)

    def _check_regular(self, fd: int) -> None:
        """Refuse a lock path that is not a regular file (a FIFO there blocked the job
        forever; issue 36), naming it; it is never removed."""
        import stat

        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            self._refuse(mode)

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
        except OSError:
            self._refuse_unopenable()
            return
        try:
            self._check_regular(fd)
        except BaseException:
            os.close(fd)
            raise
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
