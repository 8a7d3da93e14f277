"""Defects found by a new-user trial of the CLI, pinned down."""
from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from backend import contract
from cli_util import REPO, events, run_cli


def test_text_file_is_not_footage(tmp_path):
    txt = tmp_path / "notes.txt"
    txt.write_text("A text file that FFmpeg's tty demuxer would render as video.\n" * 200)
    r = run_cli("decompose", txt, "--out", tmp_path / "out")
    assert r.returncode == 2
    err = events(r.stdout, strict=False)[-1]
    assert err["event"] == "error" and "not a movie" in err["message"] and "notes.txt" in err["message"]
    assert not list(tmp_path.rglob("*.exr"))  # nothing written


def test_missing_model_is_one_line_not_a_traceback(tmp_path, footage):
    r = run_cli("decompose", footage("boat"), "--out", tmp_path / "out", "--frames", "1-1",
                "--estimator", "marigold", "--estimator-option", f"depth={tmp_path / 'no_such_model'}")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    err = events(r.stdout, strict=False)[-1]
    if importlib.util.find_spec("torch") is None:  # the fast lane: no torch installed
        assert err["event"] == "error" and "marigold estimator needs torch, diffusers" in err["message"]
    else:
        assert err["event"] == "error" and "no_such_model" in err["message"]


def test_outputs_follow_the_umask(tmp_path, footage):
    old = os.umask(0o022)
    try:
        r = run_cli("decompose", footage("boat"), "--out", tmp_path / "gb", "--frames", "1-2",
                    "--max-size", "96")
        assert r.returncode == 0, r.stderr
        r = run_cli("restyle", tmp_path / "gb", "--prompt", "fog", "--out", tmp_path / "rs")
        assert r.returncode == 0, r.stderr
    finally:
        os.umask(old)
    files = [*(tmp_path / "gb").iterdir(), *(tmp_path / "rs").rglob("*.*")]
    assert len(files) >= 7
    for p in files:
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


# --------------------------------------------------------------------------- helpers


def _snapshot(folder: Path):
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def boat_gb(tmp_path_factory, footage):
    """A real decompose of boat.mp4 frames 1-3 at --max-size 64 (restyle input)."""
    root = tmp_path_factory.mktemp("boat_gb")
    r = run_cli("decompose", footage("boat"), "--out", root / "gb", "--frames", "1-3", "--max-size", "64")
    assert r.returncode == 0, r.stderr
    return root / "gb"


# ------------------------------------------------ 1. re-run with other settings / --overwrite


def test_decompose_rerun_with_other_settings_is_refused_then_overwrite_replaces_only_ours(tmp_path, footage):
    src = Path(footage("boat"))
    src_stat = src.stat()
    out = tmp_path / "gb"
    r = run_cli("decompose", src, "--out", out, "--frames", "1-3", "--max-size", "64")
    assert r.returncode == 0, r.stderr
    (out / "notes.txt").write_text("mine")  # the user's own files are never touched
    (out / "gbuffer_sketch.png").write_bytes(b"not ours")
    (out / "decompose.log").write_text("log of the earlier run\n")
    before = _snapshot(out)

    # other settings (max size), overlapping frame range: refused, nothing written or removed
    r = run_cli("decompose", src, "--out", out, "--frames", "2-4", "--max-size", "96")
    assert r.returncode == 1
    err = events(r.stdout)[-1]
    assert err["event"] == "error" and err["file"] == str(out)
    assert str(out) in err["message"] and "--overwrite" in err["message"] and "other settings" in err["message"]
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")
    assert _snapshot(out) == before

    # --overwrite: the earlier frames and manifest go, everything else stays
    r = run_cli("decompose", src, "--out", out, "--frames", "2-4", "--max-size", "96", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "decompose.log", "gbuffer_0002.exr", "gbuffer_0003.exr", "gbuffer_0004.exr", "gbuffer_sketch.png",
        "manifest.json", "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "gbuffer_sketch.png").read_bytes() == b"not ours"
    man = contract.read_manifest(out)
    assert [f["frame"] for f in man["frames"]] == [2, 3, 4] and man["settings"]["max_size"] == 96
    for n in (2, 3, 4):
        assert contract.read_frame(contract.frame_path(out, n)).meta["settings_hash"] == man["settings_hash"]
    assert src.stat().st_size == src_stat.st_size and src.stat().st_mtime_ns == src_stat.st_mtime_ns

    # same settings: resumes as before (with or without --overwrite), nothing recomputed
    mtimes = _snapshot(out)
    for extra in ([], ["--overwrite"]):
        r = run_cli("decompose", src, "--out", out, "--frames", "2-4", "--max-size", "96", *extra)
        assert r.returncode == 0, r.stderr
        prog = [e for e in events(r.stdout) if e["event"] == "progress"]
        assert [e["skipped"] for e in prog] == [True, True, True]
        assert {k: v for k, v in _snapshot(out).items() if k.endswith(".exr")} == \
            {k: v for k, v in mtimes.items() if k.endswith(".exr")}


def test_restyle_rerun_with_other_prompt_is_refused_then_overwrite_clears_previews(tmp_path, boat_gb):
    out = tmp_path / "rs"
    r = run_cli("restyle", boat_gb, "--prompt", "fog", "--out", out)
    assert r.returncode == 0, r.stderr
    (out / "keep.txt").write_text("x")
    before = _snapshot(out)
    r = run_cli("restyle", boat_gb, "--prompt", "snow", "--out", out, "--frames", "2-3")
    assert r.returncode == 1
    err = events(r.stdout)[-1]
    assert err["event"] == "error" and "--overwrite" in err["message"] and str(out) in err["message"]
    assert _snapshot(out) == before
    r = run_cli("restyle", boat_gb, "--prompt", "snow", "--out", out, "--frames", "2-3", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "keep.txt", "manifest.json", "plate_lighting.exr", "plate_lighting.json", "preview.mp4",
        "preview/restyle_0002.png", "preview/restyle_0003.png", "restyle_0002.exr", "restyle_0003.exr"]
    assert contract.read_manifest(out)["prompt"] == "snow"
    assert sorted(p.name for p in boat_gb.iterdir()) == [
        "gbuffer_0001.exr", "gbuffer_0002.exr", "gbuffer_0003.exr", "manifest.json"]  # input untouched


# ------------------------------------------------ 2. corrupt EXR: JSON-only stdout, clear error


def test_truncated_gbuffer_exr_keeps_stdout_json_and_says_corrupt(tmp_path, boat_gb):
    import shutil

    gb = tmp_path / "gb"
    shutil.copytree(boat_gb, gb)
    bad = gb / "gbuffer_0002.exr"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    r = run_cli("restyle", gb, "--prompt", "fog", "--out", tmp_path / "rs")
    assert r.returncode == 1
    evs = events(r.stdout)  # the OpenEXR library's warning did not reach stdout
    err = evs[-1]
    assert err["event"] == "error" and err["frame"] == 2 and err["file"] == str(bad)
    assert "missing pass" not in err["message"]
    assert "unreadable" in err["message"] and "corrupt" in err["message"]
    assert "gbuffer_0002.exr" in err["message"] and "frame 2" in err["message"]
    assert "Warning" in r.stderr  # the library's own chatter went to stderr (the worker's log)
    assert [e["frame"] for e in evs if e["event"] == "progress"] == [1]


def test_library_stdout_goes_to_stderr_and_tty_detection_is_kept(tmp_path):
    """fd 1 points at stderr while a subcommand runs; events go to the real stdout."""
    script = (
        "import os, sys\n"
        "sys.path.insert(0, %r)\n"
        "from backend import cli, events\n"
        "with cli.json_stdout() as ev:\n"
        "    os.write(1, b'C LIBRARY CHATTER\\n')\n"
        "    print('python chatter')\n"
        "    events.emit({'event': 'x', 'tty': ev.isatty()})\n"
        "print('after')\n" % str(REPO))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ['{"event": "x", "tty": false}', "after"]
    assert "C LIBRARY CHATTER" in r.stderr and "python chatter" in r.stderr


# ------------------------------------------------ 3. error events carry frame and file


def test_error_events_carry_frame_and_file(tmp_path, boat_gb):
    import cv2
    import numpy as np

    seq = tmp_path / "seq"
    seq.mkdir()
    for i in (1, 2, 3):
        cv2.imwrite(str(seq / f"s_{i:04d}.png"), np.full((24, 32, 3), 40 * i, np.uint8))
    data = (seq / "s_0002.png").read_bytes()
    (seq / "s_0002.png").write_bytes(data[:30])
    r = run_cli("decompose", seq, "--out", tmp_path / "o", "--max-size", "16")
    assert r.returncode == 2
    err = events(r.stdout)[-1]
    assert err["event"] == "error" and err["frame"] == 2 and err["file"] == str(seq / "s_0002.png")
    assert "s_0002.png (frame 2)" in err["message"]

    r = run_cli("decompose", tmp_path / "nope.mp4", "--out", tmp_path / "o2")
    err = events(r.stdout)[-1]
    assert r.returncode == 2 and err["file"] == str(tmp_path / "nope.mp4") and "nope.mp4" in err["message"]

    r = run_cli("restyle", boat_gb, "--prompt", "fog", "--out", tmp_path / "rs",
                "--frames", "9-9")  # frames 1-3 only
    err = events(r.stdout)[-1]
    assert r.returncode == 2 and err["frame"] == 9 and err["file"] == str(boat_gb)
    assert "has frames 1-3" in err["message"]


# ------------------------------------------------ 4. --frames past the end


def test_frames_past_the_end(tmp_path, footage):
    src = footage("boat")  # 16 frames
    r = run_cli("decompose", src, "--out", tmp_path / "a", "--frames", "40-50", "--max-size", "32")
    assert r.returncode == 2
    err = events(r.stdout)[-1]
    assert err["event"] == "error" and "clip has 16 frame" in err["message"]
    assert err["frame"] == 40 and err["file"] == str(Path(src).absolute())
    assert not (tmp_path / "a").exists() or not list((tmp_path / "a").iterdir())

    r = run_cli("decompose", src, "--out", tmp_path / "b", "--frames", "15-40", "--max-size", "32")
    assert r.returncode == 0, r.stderr
    evs = events(r.stdout)
    warn = [e for e in evs if e["event"] == "warning"]
    assert len(warn) == 1 and "16 frame" in warn[0]["message"] and "clipped to 15-16" in warn[0]["message"]
    assert evs[-1]["event"] == "done" and evs[-1]["written"] == 2 and evs[-1]["total"] == 2
    assert "warning: " in r.stderr
    assert list(contract.list_frames(tmp_path / "b")) == [15, 16]

    r = run_cli("restyle", tmp_path / "b", "--prompt", "fog", "--out", tmp_path / "rs", "--frames", "16-30",
                "--no-mp4")
    assert r.returncode == 0, r.stderr
    warn = [e["message"] for e in events(r.stdout) if e["event"] == "warning"]
    # b holds frames 15-16 of 16: restyle carries its complete: false through (issue 27)
    assert len(warn) == 2 and "clipped to 16-16" in warn[0] and "is not complete (frames 1-14 missing)" in warn[1]
    assert warn[1].startswith("restyled all 1 frame(s) asked for; ")  # issue 37: those are all there


# ------------------------------------------------ 5. --max-size


@pytest.mark.parametrize("value", ["1", "2", "15", "-1", "-64"])
def test_absurd_max_size_is_rejected(tmp_path, footage, value):
    r = run_cli("decompose", footage("boat"), "--out", tmp_path / "o", f"--max-size={value}")
    assert r.returncode == 2
    assert "--max-size" in r.stderr and "at least 16" in r.stderr and "0 (full size)" in r.stderr
    assert not (tmp_path / "o").exists()


def test_max_size_zero_and_sixteen_are_accepted():
    from backend.cli import build_parser

    for value, want in (("0", 0), ("16", 16), ("768", 768)):
        args = build_parser().parse_args(["decompose", "x.mp4", "--out", "o", "--max-size", value])
        assert args.processing_resolution == want


# ------------------------------------------------ precision preference -> diffusion dtype


def test_precision_preference_reaches_the_diffusion_backends(monkeypatch):
    pytest.importorskip("torch")
    import torch

    from backend.estimators.marigold import MarigoldEstimator
    from backend.precision import ENV, resolve_dtype
    from backend.renderers.controlnet import ControlNetRenderer

    monkeypatch.setattr(MarigoldEstimator, "_load", lambda self, task, model, **kw: object())
    for pref, want_auto, want_torch in (("fp32", "float32", torch.float32), ("fp16", "auto", torch.float16),
                                        (None, "auto", torch.float16)):
        if pref is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, pref)
        assert resolve_dtype("auto") == want_auto
        assert resolve_dtype("float16") == "float16"  # an explicit option wins
        est = MarigoldEstimator(depth="x", normals=None, intrinsics=None, device="cuda")
        assert est.dtype == want_torch and est.settings()["dtype"] == str(want_torch).split(".")[1]
        assert MarigoldEstimator(depth="x", normals=None, intrinsics=None, device="cpu").dtype == torch.float32
        rend = ControlNetRenderer(device="cuda")
        assert rend.dtype_name == want_auto and rend.settings()["dtype"] == want_auto


def test_out_pointing_at_a_file_says_it_is_a_file(tmp_path, footage):
    target = tmp_path / "taken.txt"
    target.write_text("not a folder")
    r = run_cli("decompose", footage("boat"), "--out", target, "--frames", "1-1")
    assert r.returncode == 1
    err = events(r.stdout)[-1]
    assert err["event"] == "error" and err["file"] == str(target)
    assert err["message"] == f"output folder {target} is a file, not a folder; choose another --out"
    assert target.read_text() == "not a folder"


def test_frames_starting_before_the_clip_warn(tmp_path, footage):
    """Fresh-eyes trial: ``--frames 0-3`` on a movie (frames 1..N) became 1-3 silently."""
    r = run_cli("decompose", footage("boat"), "--out", tmp_path / "a", "--frames", "0-2", "--max-size", "32")
    assert r.returncode == 0, r.stderr
    evs = events(r.stdout)
    warn = [e for e in evs if e["event"] == "warning"]
    assert len(warn) == 1 and "starting at frame 1; clipped to 1-2" in warn[0]["message"], warn
    assert list(contract.list_frames(tmp_path / "a")) == [1, 2]


def test_estimator_option_typos_and_bad_values_are_named(tmp_path, footage):
    """Fresh-eyes trial: ``--estimator-option source_chrome=0.2`` (a typo) was ignored
    silently, and ``source_chroma=abc`` failed without naming the option."""
    src = footage("boat")
    r = run_cli("decompose", src, "--out", tmp_path / "a", "--frames", "1", "--max-size", "32",
                "--estimator-option", "source_chrome=0.2")
    assert r.returncode != 0 and not (tmp_path / "a").exists()
    assert "estimator 'embedded' has no option 'source_chrome'" in r.stderr and "source_chroma" in r.stderr
    r = run_cli("decompose", src, "--out", tmp_path / "b", "--frames", "1", "--max-size", "32",
                "--estimator-option", "source_chroma=abc")
    assert r.returncode != 0 and "source_chroma='abc'" in r.stderr and "could not convert" in r.stderr
    r = run_cli("decompose", src, "--out", tmp_path / "c", "--frames", "1", "--max-size", "32",
                "--estimator-option", "source_chroma=0.3")
    assert r.returncode == 0, r.stderr


def test_non_finite_option_values_are_refused(tmp_path, footage):
    """Second fresh-eyes trial: ``restyle --option exposure=NaN`` ran (every pixel 0, a bare
    NaN in manifest.json). Non-finite numbers are refused for every KEY=VALUE option."""
    from backend.jobs.options import key_value

    assert key_value("exposure=1.5") == ("exposure", 1.5)
    for bad in ("exposure=NaN", "exposure=Infinity", "exposure=-Infinity"):
        with pytest.raises(ValueError, match="exposure must be a finite number"):
            key_value(bad)
    gb = tmp_path / "gb"
    assert run_cli("decompose", footage("boat"), "--out", gb, "--frames", "1-2", "--max-size", "32").returncode == 0
    r = run_cli("restyle", gb, "--prompt", "fog", "--out", tmp_path / "rs", "--option", "exposure=NaN")
    assert r.returncode == 2 and "exposure must be a finite number" in r.stderr, r.stderr
    assert not (tmp_path / "rs").exists()
