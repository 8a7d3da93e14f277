"""Defects found by a new-user trial of the CLI, pinned down."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(*args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "backend", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)


def test_text_file_is_not_footage(tmp_path):
    txt = tmp_path / "notes.txt"
    txt.write_text("A text file that FFmpeg's tty demuxer would render as video.\n" * 200)
    r = _run("decompose", txt, "--out", tmp_path / "out", tmp_path=tmp_path)
    assert r.returncode == 2
    err = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")][-1]
    assert err["event"] == "error" and "not a movie" in err["message"] and "notes.txt" in err["message"]
    assert not list(tmp_path.rglob("*.exr"))  # nothing written


def test_missing_model_is_one_line_not_a_traceback(tmp_path, footage):
    r = _run("decompose", footage("boat"), "--out", tmp_path / "out", "--frames", "1-1",
             "--estimator", "marigold", "--estimator-option", f"depth={tmp_path / 'no_such_model'}",
             tmp_path=tmp_path)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    err = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")][-1]
    assert err["event"] == "error" and "no_such_model" in err["message"]


def test_outputs_follow_the_umask(tmp_path, footage):
    old = os.umask(0o022)
    try:
        r = _run("decompose", footage("boat"), "--out", tmp_path / "gb", "--frames", "1-2", "--max-size", "96",
                 tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        r = _run("restyle", tmp_path / "gb", "--prompt", "fog", "--out", tmp_path / "rs", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
    finally:
        os.umask(old)
    files = [*(tmp_path / "gb").iterdir(), *(tmp_path / "rs").rglob("*.*")]
    assert len(files) >= 7
    for p in files:
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o644, p
