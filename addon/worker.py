"""Backend jobs in a separate process, watched without blocking Blender.

The add-on never runs estimators or renderers inside Blender's process: it starts
``python -m backend decompose|restyle ...`` (Blender's own Python, ``sys.executable``,
or the external Python set in the preferences) with the extension's root folder (the one
holding ``backend/``, :data:`ADDON_DIR`) as working directory and on ``PYTHONPATH``.
The worker prints JSON lines on stdout::

    {"event": "progress", "frame": i, "done": n, "total": N, "fps": x, "eta_s": y}
    {"event": "done", ...}
    {"event": "error", "message": "...", "frame": i, "file": "..."}
    {"event": "warning", "message": "...", "frame": i, "file": "..."}   (the job goes on)

A reader thread puts those lines on a queue; :meth:`WorkerJob.poll` drains it on
Blender's main thread (from a modal operator's timer or ``bpy.app.timers``), so the UI
never waits on the pipe. The worker's stderr (and any non-JSON stdout line) goes to a
log file whose path is part of every error message.

Cancelling sends SIGTERM; the backend finishes no partial frame (frames are written
atomically) and exits with code 130.

No ``bpy`` here: :func:`worker_env` finds the extension's wheel folders on ``sys.path``,
so the module runs and is tested in any Python.
"""
from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

#: The extension's root folder (parent of this ``addon`` package, holding ``backend/``):
#: cwd of every worker, first on its ``PYTHONPATH``.
ADDON_DIR = Path(__file__).resolve().parent.parent

#: Exit code the backend uses after a cancel (SIGTERM / Ctrl+C).
EXIT_CANCELLED = 130

RUNNING, DONE, ERROR, CANCELLED = "RUNNING", "DONE", "ERROR", "CANCELLED"

#: prefix of the worker's plain (non-JSON) stdout lines in the log file
STDOUT_TAG = "[stdout] "


def parse_event(line: str) -> Optional[dict]:
    """Decode one stdout line of the worker.

    Returns:
        The event dict when ``line`` is a JSON object with a string ``"event"`` key,
        else ``None`` (plain log text).
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return None
    return obj


def backend_command(subcommand: str, args: List[str], python: Optional[str] = None) -> List[str]:
    """``[python, "-m", "backend", subcommand, *args]``; ``python`` defaults to ``sys.executable``
    (inside Blender that is Blender's bundled Python)."""
    return [python or sys.executable, "-m", "backend", subcommand, *map(str, args)]


def _extension_site_packages() -> List[str]:
    """Folders where Blender installed the extension's wheels (``.../extensions/.local/...``)."""
    out = []
    for p in sys.path:
        if "site-packages" in p and "extensions" in p and os.path.isdir(p):
            out.append(p)
    return out


def worker_env(
    *, external_python: bool = False, extra: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """Environment for a worker process.

    ``PYTHONPATH`` = the extension's root folder, then the extension's wheel folders, then (only
    when the worker is Blender's own Python) every folder on Blender's ``sys.path``, so
    the worker imports exactly what Blender can. An external Python keeps its own
    site-packages. Output is unbuffered so progress arrives line by line.
    """
    env = dict(os.environ)
    paths = [str(ADDON_DIR)] + _extension_site_packages()
    if not external_python:
        paths += [p for p in sys.path if p and os.path.isdir(p) and p not in paths]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    if external_python:
        env.pop("PYTHONHOME", None)
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


class WorkerJob:
    """One backend process and what it has reported so far.

    Attributes (updated by :meth:`poll`):
        state: ``RUNNING``, ``DONE``, ``ERROR`` or ``CANCELLED``.
        done, total: frames finished / frames in the job (``total`` 0 until known).
        fps, eta_s: throughput and estimated seconds left, as reported.
        frame: last frame index reported.
        message: the reason of a failure (backend's message, else the log's last line).
        error_frame, error_file: where the backend failed, when it said so.
        warnings: messages of the backend's ``warning`` events (e.g. a clipped frame range).
        result: the ``done`` event dict.
        returncode: the process exit status once it ended.
        log_path: file holding the worker's stderr and non-JSON stdout.
    """

    def __init__(
        self,
        argv: List[str],
        *,
        log_path: os.PathLike,
        cwd: os.PathLike = ADDON_DIR,
        env: Optional[Dict[str, str]] = None,
        on_event: Optional[Callable[[dict], None]] = None,
    ):
        self.argv = list(argv)
        self.cwd = str(cwd)
        self.env = env if env is not None else worker_env()
        self.log_path = Path(log_path)
        self.on_event = on_event
        self.state = RUNNING
        self.done = 0
        self.total = 0
        self.fps = 0.0
        self.eta_s = None
        self.frame = None
        self.message = ""
        self.error_frame = None
        self.error_file = None
        self.warnings: List[str] = []
        self.result: dict = {}
        self.returncode = None
        self._proc: Optional[subprocess.Popen] = None
        self._queue: "queue.Queue" = queue.Queue()
        self._reader: Optional[threading.Thread] = None
        self._log = None
        self._cancel_requested = False

    # -- lifecycle -------------------------------------------------------
    def start(self) -> "WorkerJob":
        """Start the process (stdout piped to the reader thread, stderr to the log).

        Raises:
            OSError: the Python executable cannot be started (message names it).
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a", encoding="utf-8", buffering=1)
        self._log.write("$ " + shlex.join(self.argv) + "\n")  # copy-pasteable into a shell
        try:
            self._proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
            )
        except OSError as e:
            self._log.close()
            raise OSError(f"cannot start worker {self.argv[0]!r}: {e}") from e
        self._reader = threading.Thread(target=self._read, name="gbuffer-worker-reader", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._queue.put(line)
        self._queue.put(None)  # end of stream

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    @property
    def progress(self) -> float:
        """Fraction of frames done, 0..1 (0 while the total is unknown)."""
        return min(1.0, self.done / self.total) if self.total else 0.0

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def poll(self) -> List[dict]:
        """Handle every line the reader has queued; finish the job once the process ended.

        Never blocks. Returns the events handled in this call.
        """
        events = []
        eof = False
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is None:
                eof = True
                break
            ev = parse_event(line)
            if ev is None:
                if line.strip():
                    self._log.write(STDOUT_TAG + line.rstrip("\n") + "\n")
                continue
            self._apply(ev)
            events.append(ev)
            if self.on_event:
                self.on_event(ev)
        if eof and self.state == RUNNING:
            self._finish()
        return events

    def _apply(self, ev: dict) -> None:
        kind = ev["event"]
        if kind == "progress":
            self.done = int(ev.get("done", self.done) or 0)
            self.total = int(ev.get("total", self.total) or 0)
            self.fps = float(ev.get("fps") or 0.0)
            self.eta_s = ev.get("eta_s")
            self.frame = ev.get("frame", self.frame)
        elif kind == "done":
            self.result = ev
            if ev.get("total"):
                self.total = int(ev["total"])
                self.done = int(ev.get("done", self.total) or self.total)
        elif kind == "warning":
            self.warnings.append(str(ev.get("message") or ""))
        elif kind == "error":
            self.message = str(ev.get("message") or "unknown error")
            self.error_frame = ev.get("frame")
            self.error_file = ev.get("file")

    def _finish(self) -> None:
        assert self._proc is not None
        self.returncode = self._proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        rc = self.returncode
        if self._cancel_requested or rc == EXIT_CANCELLED or rc == -signal.SIGTERM:
            self.state = CANCELLED
            self.message = self.message or "cancelled"
        elif rc == 0 and not self.message:
            self.state = DONE
        else:
            self.state = ERROR
            if not self.message:
                self.message = self._last_log_text() or f"worker exited with code {rc}"
        self._log.write(f"# exit code {rc}: {self.state}\n")
        self._log.close()

    def _last_log_text(self) -> str:
        """Last non-empty line the worker wrote to stderr (a traceback's last line)."""
        try:
            self._log.flush()
            lines = [l.strip() for l in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
        except OSError:
            return ""
        lines = [l for l in lines if l and not l.startswith(("$ ", "# exit code", STDOUT_TAG.strip()))]
        return lines[-1] if lines else ""

    def cancel(self, timeout: float = 15.0, drain_timeout: float = 5.0) -> None:
        """Ask the worker to stop (SIGTERM), wait up to ``timeout`` s, then kill it.

        Returns once the process has exited and the reader thread has queued all of its
        output (end-of-stream; at most ``drain_timeout`` s more, e.g. when a child
        process still holds the pipe), so the next :meth:`poll` finishes the job with
        its ``returncode``. The backend stops between frames; complete frames stay, no
        partial file is left. Safe to call more than once or after the job ended.
        """
        if self._proc is None or self.finished:
            return
        self._cancel_requested = True
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self.returncode = self._proc.returncode
        if self._reader is not None:
            self._reader.join(timeout=drain_timeout)

    def wait(self, poll_interval: float = 0.1, on_poll: Optional[Callable[["WorkerJob"], None]] = None) -> str:
        """Block until the job ends (headless use and tests); returns the final state.

        Uses the same :meth:`poll` as the non-blocking path.
        """
        while not self.finished:
            self.poll()
            if on_poll:
                on_poll(self)
            if not self.finished:
                time.sleep(poll_interval)
        return self.state

    def describe_error(self) -> str:
        """One line for the user: the backend's reason, frame and file, and the log path."""
        where = []
        if self.error_frame is not None:
            where.append(f"frame {self.error_frame}")
        if self.error_file:
            where.append(str(self.error_file))
        loc = f" ({', '.join(where)})" if where else ""
        return f"{self.message}{loc}; log: {self.log_path}"
