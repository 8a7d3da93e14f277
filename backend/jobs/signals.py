"""SIGINT / SIGTERM / SIGHUP turned into a clean cancel (:class:`SignalCancel`): the frame in
hand finishes, temporaries are removed, exit 130. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import signal
import threading
from typing import Any, Dict, Optional


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
