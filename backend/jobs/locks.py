"""Folder locks where ``fcntl`` is unavailable (Windows), through ``filelock``.

On POSIX the runner locks an output folder with ``flock`` on the folder's own descriptor
(:func:`backend.jobs.runner._manifest_lock`) and counts running jobs with shared
``flock`` holds on ``.gbuffer_running.lock`` (:class:`backend.jobs.runner._RunLock`).
Windows has neither a lockable folder descriptor nor shared locks, and both used to be
no-ops there. With :data:`PORTABLE_LOCKS`:

* the folder lock is an exclusive ``filelock.FileLock`` (``msvcrt.locking`` on Windows,
  ``fcntl`` elsewhere) on ``OUT/.gbuffer_folder.lock`` (the file stays; hidden);
* each running job holds an exclusive lock on its own file
  ``OUT/.gbuffer_running/<pid>-<random>.lock`` (:class:`PortableRunLock`); another job
  is running when some other file there is locked; a file nobody holds (a killed job's)
  is removed when seen; the last job removes the folder.

``filelock`` is in the extension's wheels (requirements-wheels.txt) and a dependency of
the CLI's (torch, ray). Tests set :data:`PORTABLE_LOCKS` on Linux to run this path
(tests/test_farm_locks.py); it was not run on Windows.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _has_fcntl() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:  # Windows
        return False
    return True


#: no ``fcntl``: use the lock files of this module (tests set it on POSIX)
PORTABLE_LOCKS = not _has_fcntl()
#: the folder lock's file
FOLDER_LOCK = ".gbuffer_folder.lock"
#: one lock file per running job in it
RUN_LOCK_DIR = ".gbuffer_running"


@contextlib.contextmanager
def portable_folder_lock(out: os.PathLike):
    """Exclusive lock on ``OUT/.gbuffer_folder.lock`` for the ``with`` block (blocks until
    free); a folder that does not exist (yet) is not locked."""
    if not Path(out).is_dir():
        yield
        return
    import filelock

    with filelock.FileLock(str(Path(out) / FOLDER_LOCK), is_singleton=False):
        yield


class PortableRunLock:
    """:class:`backend.jobs.runner._RunLock` without shared locks (module docstring).
    Calls are made under the folder lock."""

    def __init__(self, out: os.PathLike):
        self.dir = Path(out) / RUN_LOCK_DIR
        self.lock = None

    def others_running(self) -> bool:
        """Another job holds the folder."""
        import filelock

        if not self.dir.is_dir():
            return False
        mine = None if self.lock is None else Path(self.lock.lock_file).name
        running = False
        for f in sorted(self.dir.glob("*.lock")):
            if f.name == mine:
                continue
            probe = filelock.FileLock(str(f), is_singleton=False)
            try:
                probe.acquire(timeout=0)
            except filelock.Timeout:
                running = True
                continue
            probe.release()
            with contextlib.suppress(OSError):  # stale: its job is gone
                f.unlink()
        return running

    def acquire(self) -> None:
        """Hold this job's own lock file."""
        import filelock

        try:
            self.dir.mkdir(exist_ok=True)
        except OSError:
            return
        lock = filelock.FileLock(str(self.dir / f"{os.getpid()}-{os.urandom(4).hex()}.lock"), is_singleton=False)
        lock.acquire(timeout=10)
        self.lock = lock

    def release(self) -> None:
        """Drop it; the last job removes the folder."""
        if self.lock is None:
            return
        lock, self.lock = self.lock, None
        lock.release()
        with contextlib.suppress(OSError):
            Path(lock.lock_file).unlink()
        with contextlib.suppress(OSError):
            self.dir.rmdir()
