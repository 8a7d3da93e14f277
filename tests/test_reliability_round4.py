"""Issue 27, round 4: what the hostile trial of the round-3 fixes still broke
(docs/reliability.md): empty ``--out`` / ``--frames`` (item 9), restyle into the footage
without a manifest, through a repointed symlink or a bind-mount alias, an event stream on
a full disk, temporal history changed under a resumed ``--stabilize`` run, and the
"decide and document" list (``GBUFFER_MAX_PIXELS``, EXR values above half's range,
non-ASCII ``--frames`` digits).
"""
from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from backend import contract
from backend.jobs.decompose import decompose
from cli_util import cli_cmd, cli_env, events
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_image

register_tiny()


def _dec(src, out, **kw):
    kw.setdefault("estimator", "tiny")
    kw.setdefault("max_size", 32)
    return decompose(src, out, progress=io.StringIO(), **kw)


def _sequence(folder: Path, numbers, h=24, w=32, name="shot_{:04d}.png") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(numbers):
        write_image(folder / name.format(n), gradient_rgb(h, w, 3 * i))
    return folder


def _cli(*args, cwd, timeout=300, env=None, **kw):
    """The CLI (tiny estimators registered) run in ``cwd``: an empty ``--out`` would write there."""
    return subprocess.run(cli_cmd(*args, tiny=True), env=env or cli_env(), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, **kw)


def _listing(folder: Path):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


# ------------------------------------------------------- S1 (item 9): empty --out / --frames


@pytest.mark.parametrize("out", ["", " ", "\t"])
def test_an_empty_out_is_refused_for_every_command(tmp_path, out):
    src = _sequence(tmp_path / "seq", range(1, 3))
    gb = tmp_path / "gb"
    _dec(src, gb)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for argv in (["decompose", src, "--estimator", "tiny", "--max-size", "32", "--out", out],
                 ["decompose", src, "--estimator", "tiny", "--max-size", "32", f"--out={out}"],
                 ["restyle", gb, "--prompt", "fog", "--no-mp4", "--out", out],
                 ["farm", "local", "decompose", src, "--estimator", "tiny", "--chunk", "1", "--out", out],
                 ["farm", "anchors", src, "--estimator", "tiny", "--out", out],
                 ["farm", "merge", out]):
        r = _cli(*argv, cwd=cwd)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "an empty path" in r.stderr, (argv, r.stderr)
        assert events(r.stdout)[-1]["event"] == "error"
        assert _listing(cwd) == [], argv


@pytest.mark.parametrize("frames", ["", " "])
def test_an_empty_frames_is_refused_not_the_whole_shot(tmp_path, frames):
    src = _sequence(tmp_path / "seq", range(1, 4))
    gb = tmp_path / "gb"
    _dec(src, gb)
    for argv in (["decompose", src, "--estimator", "tiny", "--out", tmp_path / "o1", "--frames", frames],
                 ["decompose", src, "--estimator", "tiny", "--out", tmp_path / "o2", f"--frames={frames}",
                  "--manifest-part", "--warmup", "1"],
                 ["restyle", gb, "--out", tmp_path / "o3", "--no-mp4", "--frames", frames],
                 ["restyle", gb, "--out", tmp_path / "o4", "--no-mp4", f"--frames={frames}", "--manifest-part"],
                 ["farm", "merge", gb, "--frames", frames]):
        r = _cli(*argv, cwd=tmp_path)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "--frames" in r.stderr and "empty" in r.stderr, r.stderr
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 5))


@pytest.mark.parametrize("frames", ["１-３", "١-٣", "1_002", "+1002", "1-+3", "1-3_0"])
def test_frames_take_ascii_digits_only(tmp_path, frames):
    from backend.jobs.decompose import parse_frames

    with pytest.raises(ValueError, match="ASCII digits"):
        parse_frames(frames)
    assert parse_frames(" 2 - 3 ") == (2, 3) and parse_frames("1001-") == (1001, None)
    assert parse_frames(None) == (0, None)
