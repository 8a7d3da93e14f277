"""Progress and warning events: where they go, and the ``warning`` event.

Jobs report what they do as small dicts ("events")::

    {"event": "start", "job": "decompose", "total": N, "out": DIR, "settings_hash": H}
    {"event": "progress", "frame": n, "done": k, "total": N, "fps": x, "eta_s": y, "skipped": bool}
    {"event": "warning", "message": "...", "frame": n or null, "file": "..." or null}
    {"event": "done", "job": ..., "done": k, "written": w, "skipped": s, "total": N, "elapsed_s": t, "out": DIR}

They go to the *reporter* installed with :func:`reporting` (a callable taking the
dict), and nowhere when none is installed: the backend used as a library prints
nothing. The command line installs a reporter that writes one JSON object per line
on its real stdout (:class:`JsonLines`), or draws a progress bar on a terminal.
Warnings are also logged on the ``gbuffer_editor`` logger (a ``NullHandler`` is
attached, so they are silent unless the application configures logging; the CLI
prints them on stderr as ``warning: ...``).

The reporter is process-wide (not per thread): the runner's writer thread reports
through the same one.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from typing import IO, Any, Callable, Dict, Iterator, Optional, Union

#: the backend's logger; warnings of running jobs are logged here
log = logging.getLogger("gbuffer_editor")
log.addHandler(logging.NullHandler())

Reporter = Callable[[Dict[str, Any]], None]
#: what :func:`reporting` accepts: a callable, a text stream (JSON lines), or None
Progress = Union[Reporter, IO[str], None]

_lock = threading.Lock()
_reporter: Optional[Reporter] = None


class JsonLines:
    """Reporter writing each event as one JSON object per line to ``stream``, flushed.

    When the reader of ``stream`` goes away (a pipe closed: ``... | head -2``), the events
    are dropped from then on, with one line on stderr, and the job goes on: its frames and
    manifest are its result, not the event stream (hostile trial: the job failed with
    "frame 2 failed: BrokenPipeError" and a traceback). Any other error writing it (``ENOSPC``
    of ``> /dev/full`` or a full disk, ``EIO``, ``EFBIG``) is handled the same way, with the
    reason in the one line (fourth hostile trial: a traceback, the job did nothing and left
    its lock and a 0-frame manifest)."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.closed = False

    def __call__(self, obj: Dict[str, Any]) -> None:
        if self.closed:
            return
        line = json.dumps(obj) + "\n"
        try:
            self.stream.write(line)
            self.stream.flush()
        except (BrokenPipeError, ConnectionResetError):
            self._reader_gone()
        except OSError as e:  # ENOSPC (> /dev/full, a full disk), EIO, EFBIG ...: the same as a closed pipe
            self._reader_gone(f"cannot be written ({e.strerror or e})")
        except ValueError:  # the stream was closed under us
            self._reader_gone("was closed")

    def _reader_gone(self, why: str = "was closed by its reader") -> None:
        self.closed = True
        try:  # later flushes (at exit too) go nowhere instead of raising again
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self.stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError):
            pass
        try:
            sys.stderr.write(f"warning: the event stream (stdout) {why}: progress events "
                             "are dropped from here on; the job goes on\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def as_reporter(progress: Progress) -> Optional[Reporter]:
    """A callable stays as is; a text stream (anything with ``write``) becomes
    :class:`JsonLines`; ``None`` stays ``None`` (events are dropped).

    Raises:
        TypeError: neither callable nor writable.
    """
    if progress is None or callable(progress) and not hasattr(progress, "write"):
        return progress
    if hasattr(progress, "write"):
        return JsonLines(progress)
    raise TypeError(f"progress must be a callable taking an event dict or a text stream, got {progress!r}")


@contextlib.contextmanager
def reporting(progress: Progress) -> Iterator[Optional[Reporter]]:
    """Send events to ``progress`` (see :func:`as_reporter`) inside the ``with`` block.

    The previous reporter is restored on exit. ``reporting(None)`` inside an outer
    ``reporting(cb)`` keeps ``cb`` (a job called without a reporter from code that
    has one still reports to it).
    """
    global _reporter
    rep = as_reporter(progress)
    with _lock:
        old = _reporter
        if rep is not None:
            _reporter = rep
    try:
        yield _reporter
    finally:
        with _lock:
            _reporter = old


def current() -> Optional[Reporter]:
    """The reporter installed now, or ``None``."""
    return _reporter


def emit(obj: Dict[str, Any], s: Optional[IO[str]] = None) -> None:
    """Report one event: to the stream ``s`` as a JSON line when given, else to the
    current reporter (dropped when there is none)."""
    if s is not None:
        JsonLines(s)(obj)
        return
    rep = _reporter
    if rep is not None:
        rep(obj)


def warning(message: str, *, frame: Optional[int] = None, file: Optional[os.PathLike] = None) -> None:
    """Report that the job goes on but did not do literally what was asked (e.g. a
    ``--frames`` range clipped to the end of the clip): a ``warning`` event and a
    record on the ``gbuffer_editor`` logger."""
    emit({"event": "warning", "message": message, "frame": frame,
          "file": None if file is None else str(file)})
    log.warning(message)


def is_tty(s: Optional[IO[str]]) -> bool:
    """Whether the stream ``s`` is a terminal (``False`` for ``None`` or a closed stream)."""
    try:
        return bool(s is not None and s.isatty())
    except (AttributeError, ValueError, OSError):
        return False
