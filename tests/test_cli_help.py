"""Help and progress (issue 17): ``--help`` lists estimators, renderers (what they need,
their state) and prompt words; the CLI runs from any folder; a progress bar on a
terminal, JSON lines otherwise or with ``--json``."""
import json
import os
import pty
import subprocess
import sys

import pytest

from backend.catalog import describe_estimators, describe_renderers, readiness
from cli_util import REPO
from gbuffer_util import make_gbuffers

PY = sys.executable


def _env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # nothing points at the repository: it must find itself
    env["HF_HUB_OFFLINE"] = "1"
    return env


def test_cli_runs_from_any_folder_and_help_lists_everything(tmp_path):
    """``python path/to/backend ...`` from another folder, without PYTHONPATH."""
    run = lambda *a: subprocess.run([PY, str(REPO / "backend"), *a], cwd=tmp_path, env=_env(),
                                    capture_output=True, text=True, timeout=120)
    top = run("--help")
    assert top.returncode == 0 and "decompose" in top.stdout and "--json" in top.stdout
    dec = run("decompose", "--help")
    assert dec.returncode == 0
    assert "estimators:" in dec.stdout and "  embedded: bundled" in dec.stdout
    assert "  marigold: " in dec.stdout and "Needs: a GPU" in dec.stdout
    res = run("restyle", "--help")
    assert res.returncode == 0
    assert "  controlnet: " in res.stdout and "State: " in res.stdout
    assert "prompt words of the embedded renderer" in res.stdout
    assert "  fog: foggy, haze" in res.stdout and "heavy rain at night" in res.stdout
    # and a real job from that folder
    gb = make_gbuffers(tmp_path / "gb", n=2, h=12, w=16)
    job = run("restyle", str(gb), "--prompt", "fog", "--out", str(tmp_path / "out"), "--no-mp4")
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout.splitlines()[-1])["event"] == "done"


def _run_on_pty(args, tmp_path):
    """Run the CLI with stdout on a pseudo-terminal; returns (stdout text, stderr text)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([PY, "-m", "backend", *args], cwd=REPO, env=dict(_env(), PYTHONPATH=str(REPO)),
                         stdout=slave, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    err = p.stderr.read()
    p.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace"), err, p.returncode


def test_progress_bar_on_a_terminal_json_lines_when_asked(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=3, h=12, w=16)
    out, err, rc = _run_on_pty(["restyle", str(gb), "--prompt", "fog", "--out", str(tmp_path / "a"),
                                "--no-mp4"], tmp_path)
    assert rc == 0, err
    assert "{" not in out                       # no JSON on the terminal
    assert "restyle" in err and "3/3" in err and "frame" in err  # tqdm's bar: "restyle: 100%|...| 3/3"
    out, err, rc = _run_on_pty(["--json", "restyle", str(gb), "--prompt", "fog", "--out", str(tmp_path / "b"),
                                "--no-mp4"], tmp_path)
    assert rc == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "done"
    assert "3/3" not in err


def test_terminal_ends_with_what_was_written_and_json_after_the_subcommand(tmp_path):
    """Issue 28: on a terminal the last line says what was written and skipped and where
    (a resume no longer looks like a full run); --json also works after the subcommand."""
    gb = make_gbuffers(tmp_path / "gb", n=3, h=12, w=16)
    args = ["restyle", str(gb), "--prompt", "fog", "--out", str(tmp_path / "a"), "--no-mp4"]
    out, err, rc = _run_on_pty(args, tmp_path)
    assert rc == 0, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("restyle: wrote 3, skipped 0 of 3 frames") and str(tmp_path / "a") in last, last
    out, err, rc = _run_on_pty(args, tmp_path)  # resume: everything skipped
    assert err.strip().splitlines()[-1].startswith("restyle: wrote 0, skipped 3 of 3 frames"), err
    out, err, rc = _run_on_pty(args[:5] + [str(tmp_path / "b"), "--no-mp4", "--json"], tmp_path)
    assert rc == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert events[-1]["event"] == "done" and events[-1]["written"] == 3


def test_catalog_states_what_each_name_needs():
    est = {d["name"]: d for d in describe_estimators()}
    assert est["embedded"]["ready"] and est["embedded"]["state"] == "ready"
    assert est["marigold"]["gpu"] and "packages torch" in est["marigold"]["needs"]
    ren = {d["name"]: d for d in describe_renderers()}
    assert ren["embedded"]["ready"]
    assert readiness("estimator", "embedded") is None


def test_missing_model_is_named_with_where_to_get_it(tmp_path):
    """An empty models folder: marigold and controlnet are not ready, and the reason
    names the models and Preferences > Models."""
    pytest.importorskip("diffusers")  # without the packages, the reason is the packages
    msg = readiness("estimator", "marigold", cache_dir=tmp_path)
    first, names = msg.splitlines()
    assert first.startswith("estimator 'marigold' cannot run: ")
    assert first.endswith("3 models missing: download in Preferences > Add-ons > G-Buffer Editor > Models "
                          "or `python -m backend models download marigold`")
    assert len(first) < 160
    assert "prs-eth/marigold-depth-v1-1" in names
    # a snapshot with a config counts as present once refs/main names it (as huggingface_hub resolves it)
    snap = tmp_path / "models--prs-eth--marigold-depth-v1-1" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "model_index.json").write_text("{}")
    assert "marigold-depth-v1-1" in readiness("estimator", "marigold", cache_dir=tmp_path)
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc")
    assert "marigold-depth-v1-1" not in (readiness("estimator", "marigold", cache_dir=tmp_path) or "")
    assert readiness("renderer", "controlnet", cache_dir=tmp_path).startswith("renderer 'controlnet' cannot run")
    with pytest.raises(ValueError):
        readiness("thing", "x")


def test_processing_resolution_0_says_what_the_estimator_really_does(tmp_path):
    """Issue 28: '--processing-resolution 0' (full size) silently ran the embedded
    estimator at 192 px; now a warning event says so (the passes are still full size)."""
    import cv2
    import numpy as np

    from cli_util import run_cli

    src = tmp_path / "shot"
    src.mkdir()
    for i in (1, 2):
        cv2.imwrite(str(src / f"shot_{i:04d}.png"), np.full((240, 320, 3), 50 * i, np.uint8))
    r = run_cli("--json", "decompose", str(src / "shot_####.png"), "--out", str(tmp_path / "gb"),
                "--processing-resolution", "0")
    assert r.returncode == 0, r.stderr
    warns = [json.loads(x)["message"] for x in r.stdout.splitlines() if '"warning"' in x]
    assert any("--processing-resolution 0 (full size): the embedded estimator computes at 192 px at most"
               in w and "320x240" in w for w in warns), warns
    # a size it can reach: no warning
    r = run_cli("--json", "decompose", str(src / "shot_####.png"), "--out", str(tmp_path / "gb2"),
                "--processing-resolution", "128")
    assert r.returncode == 0 and '"warning"' not in r.stdout, r.stdout
