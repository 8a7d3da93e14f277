"""Stop exactly the Ray nodes you started: ``python -m backend farm stop TEMP_DIR [...]``.

``ray stop`` ends every Ray process on the machine (every user's, every cluster's). A node
started with ``ray start ... --temp-dir TEMP_DIR`` (one folder per node) is identified by
that folder instead: :func:`node_pids` finds the processes whose command line names it
(``raylet --temp_dir=...``, ``gcs_server --log_dir=TEMP_DIR/session_.../logs``, the
workers, agents...) and all their children; :func:`stop_nodes` sends them SIGTERM, then
SIGKILL to what is left after half the timeout. Nothing else is touched.

The folder must be a Ray node's temp dir (it holds ``session_latest``): a typo such as
``/tmp`` is refused instead of matching unrelated processes.

psutil: the installed one, else the copy Ray ships in ``ray/thirdparty_files``.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List

from ..errors import JobError


def _psutil():
    try:
        import psutil
    except ImportError:
        spec = importlib.util.find_spec("ray")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            third = Path(loc) / "thirdparty_files"
            if (third / "psutil").is_dir() and str(third) not in sys.path:
                sys.path.append(str(third))
        try:
            import psutil
        except ImportError:
            raise JobError("farm stop needs psutil (pip install psutil; Ray ships a copy)") from None
    return psutil


def check_temp_dir(path: os.PathLike) -> Path:
    """``path`` as an absolute folder that a Ray node used as ``--temp-dir``.

    Raises:
        ValueError: not a folder, or no ``session_latest`` in it (not a Ray temp dir).
    """
    p = Path(os.path.abspath(path))
    if not p.is_dir():
        raise ValueError(f"{p} is not a folder: give the --temp-dir the node was started with")
    if not (p / "session_latest").exists():
        raise ValueError(f"{p} is not a Ray node's temp dir (no session_latest in it): give the --temp-dir "
                         f"the node was started with ('ray start ... --temp-dir DIR')")
    return p


def node_pids(temp_dirs: Iterable[os.PathLike]) -> List[int]:
    """Processes of the nodes started with these temp dirs (command line names the folder)
    and their children; never this process."""
    psutil = _psutil()
    dirs = [str(Path(os.path.abspath(d))) for d in temp_dirs]
    roots = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or ())
        except (psutil.Error, TypeError):
            continue
        if any(d + "/" in cmd or cmd.endswith(d) or f"={d} " in cmd + " " or f" {d} " in cmd + " " for d in dirs):
            roots.append(p)
    found = set()
    for p in roots:
        found.add(p.pid)
        try:
            found.update(c.pid for c in p.children(recursive=True))
        except psutil.Error:
            pass
    found.discard(os.getpid())
    return sorted(found)


def stop_nodes(temp_dirs: Iterable[os.PathLike], timeout: float = 20.0) -> Dict[str, Any]:
    """SIGTERM the nodes' processes, SIGKILL what is left after ``timeout / 2``, then
    whatever their killed parents leave behind, until ``timeout``.

    Returns:
        ``{"event": "stopped", "temp_dirs": [...], "pids": [...], "killed": n, "left": [...]}``
        (``killed``: processes that needed SIGKILL; ``left``: still running at the end).
    """
    psutil = _psutil()
    dirs = [str(d) for d in temp_dirs]
    pids = node_pids(dirs)
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.terminate()
            procs.append(p)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout / 2)
    killed = 0
    for p in alive:
        try:
            p.kill()
            killed += 1
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout / 4)
    deadline = time.monotonic() + timeout / 4
    left = node_pids(dirs)
    while left and time.monotonic() < deadline:  # late children of killed parents
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.2)
        left = node_pids(dirs)
    return {"event": "stopped", "temp_dirs": dirs, "pids": pids, "killed": killed, "left": left}
