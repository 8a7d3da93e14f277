"""Test-only helpers: run the backend's command line in a child process, read its events.

One copy for every non-Blender test that runs ``python -m backend ...``:

* :func:`cli_cmd` / :func:`cli_env`: the argv and environment (``PYTHONPATH`` = the
  repository and ``tests/``, ``HF_HUB_OFFLINE=1`` unless set). ``tiny=True`` starts the
  CLI through a boot line that first registers the tests' tiny random-weight estimators
  (:func:`decompose_util.register_tiny`); otherwise it is the real ``-m backend``.
* :func:`run_cli` (wait, capture text) and :func:`start_cli` (``Popen`` with piped text
  stdout/stderr, to read events while it runs or send it a signal); both run in the
  repository root.
* :func:`events` / :func:`last_event`: the JSON-line events a job wrote (a CLI's stdout,
  or the text stream an in-process job reported to).
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Union

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

_TINY_BOOT = ("import sys; sys.path.insert(0, %r); sys.path.insert(0, %r); "
              "import decompose_util as u; u.register_tiny(); "
              "from backend.cli import main; sys.exit(main(sys.argv[1:]))") % (str(REPO), str(REPO / "tests"))


def cli_cmd(*args, tiny: bool = False) -> list:
    """argv of ``python -m backend ARGS`` (``tiny``: with the tiny test estimators registered)."""
    head = [PY, "-c", _TINY_BOOT] if tiny else [PY, "-m", "backend"]
    return [*head, *map(str, args)]


def cli_env(**extra: str) -> dict:
    """The environment for :func:`cli_cmd`: this one, the repository and ``tests/`` on
    ``PYTHONPATH``, ``HF_HUB_OFFLINE=1`` unless already set, then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(extra)
    return env


def run_cli(*args, tiny: bool = False, timeout: float = 300, env: dict = None,
            **kw) -> subprocess.CompletedProcess:
    """Run the CLI to the end; ``stdout``/``stderr`` captured as text."""
    return subprocess.run(cli_cmd(*args, tiny=tiny), env=cli_env() if env is None else env,
                          capture_output=True, text=True, cwd=REPO, timeout=timeout, **kw)


def start_cli(*args, tiny: bool = False, env: dict = None, **kw) -> subprocess.Popen:
    """Start the CLI; ``stdout``/``stderr`` are text pipes (read events, send signals)."""
    return subprocess.Popen(cli_cmd(*args, tiny=tiny), env=cli_env() if env is None else env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, **kw)


def events(out: Union[str, io.StringIO], strict: bool = True) -> List[dict]:
    """The JSON events in ``out`` (text, or a ``StringIO`` a job reported to), in order.

    ``strict`` (the progress protocol): every line must be one JSON object with a string
    ``"event"``, else the test fails here; ``False``: lines not starting with ``{`` are
    skipped.
    """
    text = out.getvalue() if hasattr(out, "getvalue") else out
    evs = []
    for line in text.splitlines():
        if strict or line.startswith("{"):
            ev = json.loads(line)
            assert isinstance(ev, dict) and isinstance(ev.get("event"), str), line
            evs.append(ev)
    return evs


def last_event(out: Union[str, io.StringIO]) -> dict:
    """The last line of ``out`` as a JSON event (what a job ends with: done, error, cancelled)."""
    text = out.getvalue() if hasattr(out, "getvalue") else out
    return json.loads(text.strip().splitlines()[-1])
