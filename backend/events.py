"""Where the JSON-lines events go, and the ``warning`` event.

The command line (:func:`backend.cli.main`) keeps the process's real stdout for JSON
events only: it hands a stream on it to :func:`set_stream` and points file descriptor 1
at stderr, so anything else that prints (a C library's warning, a Python package's
``print``) lands on stderr instead of breaking the one-object-per-line protocol.
Code that emits events writes to :func:`stream` (``sys.stdout`` when nothing was set,
e.g. when the backend is used as a library).

A ``warning`` event::

    {"event": "warning", "message": "...", "frame": n or null, "file": "..." or null}

means the job goes on but did something the user did not literally ask for (e.g. a
``--frames`` range clipped to the end of the clip).
"""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Optional

_stream: Optional[IO[str]] = None


def stream() -> IO[str]:
    """The stream JSON events go to: the one set by :func:`set_stream`, else ``sys.stdout``."""
    return _stream if _stream is not None else sys.stdout


def set_stream(s: Optional[IO[str]]) -> Optional[IO[str]]:
    """Send events to ``s`` (``None``: back to ``sys.stdout``); returns the previous setting."""
    global _stream
    old, _stream = _stream, s
    return old


def is_tty(s: Optional[IO[str]] = None) -> bool:
    s = s if s is not None else stream()
    try:
        return bool(s.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def emit(obj: Any, s: Optional[IO[str]] = None) -> None:
    """Write one JSON event line and flush."""
    s = s if s is not None else stream()
    s.write(json.dumps(obj) + "\n")
    s.flush()


def warning(message: str, *, frame: Optional[int] = None, file: Optional[os.PathLike] = None,
            s: Optional[IO[str]] = None) -> None:
    """Report a warning: a JSON ``warning`` event (unless the event stream is a terminal,
    where progress is a bar, not JSON) and always a ``warning: ...`` line on stderr
    (the terminal, or the Blender worker's log)."""
    s = s if s is not None else stream()
    if not is_tty(s):
        emit({"event": "warning", "message": message, "frame": frame,
              "file": None if file is None else str(file)}, s)
    try:
        sys.stderr.write(f"warning: {message}\n")
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
