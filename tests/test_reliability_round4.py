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

from reliability_util import tiny_decompose as _dec, write_sequence as _sequence

register_tiny()


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


# ------------------------------------------------------- S2/S3/S4: restyle into the footage


def _refused_into_footage(gb: Path, out: Path, cwd: Path) -> None:
    r = _cli("restyle", gb, "--prompt", "dense fog", "--out", out, cwd=cwd)
    assert r.returncode == 1 and "refusing to write into the footage" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_restyle_into_the_footage_is_refused_without_the_manifest(tmp_path):
    """Trial slip S2: with gb/manifest.json deleted, restyle --out FOOTAGE wrote EXRs,
    previews and a manifest among the source PNGs (the frames' headers still named it)."""
    src = _sequence(tmp_path / "seq", range(1, 3))
    gb = tmp_path / "gb"
    _dec(src, gb)
    (gb / "manifest.json").unlink()
    before = _listing(src)
    for out in (src, src / "sub"):
        _refused_into_footage(gb, out, tmp_path)
    assert _listing(src) == before


def test_restyle_into_the_footage_is_refused_after_its_symlink_was_repointed(tmp_path):
    """Trial slip S3: decomposed through a symlink that later points elsewhere: the
    manifest's source.path (the link) no longer leads to the footage; its real path does."""
    src = _sequence(tmp_path / "seq", range(1, 3))
    link = tmp_path / "link"
    link.symlink_to(src, target_is_directory=True)
    gb = tmp_path / "gb"
    _dec(link, gb)
    assert contract.read_manifest(gb)["source"]["real_path"] == str(src.resolve())
    link.unlink()
    (tmp_path / "elsewhere").mkdir()
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    before = _listing(src)
    _refused_into_footage(gb, src, tmp_path)
    (gb / "manifest.json").unlink()  # and from the headers alone: gbuffer/source_real_path
    _refused_into_footage(gb, src, tmp_path)
    assert _listing(src) == before


@pytest.fixture
def bind_alias(tmp_path):
    """``tmp_path/alias``: a bind mount of ``tmp_path/seq`` (skipped where mounting is not allowed)."""
    import shutil

    alias = tmp_path / "alias"
    alias.mkdir()
    (tmp_path / "seq").mkdir()
    mount = shutil.which("mount")
    if mount is None or subprocess.run([mount, "--bind", str(tmp_path / "seq"), str(alias)],
                                       capture_output=True).returncode != 0:
        pytest.skip("bind mounts need root (mount --bind)")
    yield alias
    subprocess.run(["umount", str(alias)], capture_output=True)


def test_a_bind_mount_alias_of_the_footage_is_the_footage(tmp_path, bind_alias):
    """Trial slip S4: decompose --out ALIAS/out and restyle --out ALIAS wrote into the footage
    folder (the realpath check compares path strings; st_dev/st_ino are the same)."""
    from backend.jobs.output_folder import check_output_safe, overlaps
    from backend.jobs.runner import JobError

    src = _sequence(tmp_path / "seq", range(1, 3))
    assert os.path.realpath(bind_alias) != os.path.realpath(src)
    assert overlaps(bind_alias / "out", src) and overlaps(src / "x", bind_alias)
    assert not overlaps(tmp_path / "other", src)
    with pytest.raises(JobError, match="refusing to write into or over the input"):
        check_output_safe(bind_alias / "out", [src])
    before = _listing(src)
    r = _cli("decompose", src, "--estimator", "tiny", "--max-size", "32", "--out", bind_alias / "out", cwd=tmp_path)
    assert r.returncode == 1 and "refusing to write into or over the input" in r.stderr, r.stderr
    gb = tmp_path / "gb"
    _dec(src, gb)
    _refused_into_footage(gb, bind_alias, tmp_path)
    _refused_into_footage(gb, bind_alias / "sub", tmp_path)
    assert _listing(src) == before


# ------------------------------------------------------- S5: an event stream that cannot be written


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_event_stream_on_a_full_disk_is_dropped_like_a_closed_pipe(tmp_path):
    """Trial slip S5: ``decompose ... > /dev/full`` gave a traceback, did nothing, and left
    its lock and a 0-frame manifest. Now as for a closed pipe: one line on stderr, the job
    finishes (its frames and manifest are its result, not the events)."""
    src = _sequence(tmp_path / "seq", range(1, 5))
    gb, rs = tmp_path / "gb", tmp_path / "rs"
    for argv, out in ((["decompose", src, "--estimator", "tiny", "--max-size", "32", "--out", gb], gb),
                      (["restyle", gb, "--prompt", "dense fog", "--no-mp4", "--out", rs], rs)):
        with open("/dev/full", "w") as full:
            r = subprocess.run(cli_cmd(*argv, tiny=True), env=cli_env(), cwd=tmp_path, stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines() == [
            "warning: the event stream (stdout) cannot be written (No space left on device): progress events "
            "are dropped from here on; the job goes on"], r.stderr
        man = contract.read_manifest(out)
        assert man["complete"] is True and len(man["frames"]) == 4
        assert not (out / ".gbuffer_running.lock").exists()


# ------------------------------------------------------- S6: --stabilize history across a resume


def test_a_resume_that_recomputes_frames_before_kept_ones_says_their_history_changed(tmp_path):
    """Trial slip S6: ``--frames 3-4`` then the whole shot under --stabilize: frames 3-4 are
    kept with a history that starts at 3, frames 5-6 continue from them; complete: true and no
    word. Now a warning names them and the manifest records temporal_history_stale."""
    from backend.jobs.history import stale_history

    src = _sequence(tmp_path / "seq", range(1, 7))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="3-4", stabilize=True)
    log = io.StringIO()
    res = decompose(src, gb, progress=log, estimator="tiny", max_size=32, stabilize=True)
    assert sorted(res.written) == [1, 2, 5, 6] and sorted(res.skipped) == [3, 4]
    warn = [e for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any("frames 3-4 were kept from an earlier run" in w["message"] and "frames 3-6 are not what one "
               "uninterrupted run gives" in w["message"] for w in warn), warn
    assert contract.read_manifest(gb)["temporal_history_stale"] == "3-6"
    # a plain resume after an interruption (kept frames all before the computed ones) says nothing
    assert stale_history(written=[4, 5, 6], skipped=[1, 2, 3]) == []
    assert stale_history(written=[3], skipped=[1, 2, 4, 5]) == [4, 5]
    assert stale_history(written=[], skipped=[1, 2]) == []
    # without --stabilize nothing is said (no temporal state is carried)
    gb2 = tmp_path / "gb2"
    _dec(src, gb2, frames="3-4")
    log = io.StringIO()
    decompose(src, gb2, progress=log, estimator="tiny", max_size=32)
    assert not [e for e in events(log.getvalue()) if e["event"] == "warning" and "temporal" in e["message"]]


# ------------------------------------------------------- decided: GBUFFER_MAX_PIXELS, half range


@pytest.mark.parametrize("junk", ["abc", "0", "-5", "1e9", "8K", "１００"])
def test_junk_in_gbuffer_max_pixels_is_one_line_naming_the_variable(tmp_path, junk):
    src = _sequence(tmp_path / "seq", range(1, 3))
    r = _cli("decompose", src, "--estimator", "tiny", "--out", tmp_path / "o", cwd=tmp_path,
             env=cli_env(GBUFFER_MAX_PIXELS=junk))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: GBUFFER_MAX_PIXELS={junk!r}: expected a positive whole "
                                             f"number of pixels (e.g. 67108864 for 8192 x 8192); unset it for "
                                             f"the default"], r.stderr
    assert not contract.list_frames(tmp_path / "o") if (tmp_path / "o").exists() else True
    # a small limit is said in pixels, not "0 Mpx is larger than the 0 Mpx limit"
    r = _cli("decompose", src, "--estimator", "tiny", "--out", tmp_path / "o2", cwd=tmp_path,
             env=cli_env(GBUFFER_MAX_PIXELS="100"))
    assert r.returncode == 2 and "32x24 (768 px) is larger than the 100 px limit" in r.stderr, r.stderr


def test_exr_values_above_half_range_warn_once_naming_file_and_frame(tmp_path):
    import numpy as np

    from footage_util import write_exr

    seq = tmp_path / "hdr"
    seq.mkdir()
    for n in range(1, 4):
        rgb = np.full((24, 32, 3), 0.5, np.float32)
        if n >= 2:
            rgb[3, 4] = (1e5, 10.0, 70000.0)  # a sun: above the largest half float
        write_exr(seq / f"shot_{n:04d}.exr", rgb)
    log = io.StringIO()
    decompose(seq, tmp_path / "gb", progress=log, estimator="tiny", max_size=32)
    warn = [e for e in events(log.getvalue()) if e["event"] == "warning" and "65504" in e["message"]]
    assert len(warn) == 1, warn
    assert warn[0]["frame"] == 2 and warn[0]["file"].endswith("shot_0002.exr")
    assert "source values up to 100000 are above 65504" in warn[0]["message"]
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 2))
    assert float(fr.combined[3, 4, 0]) == 65504.0  # clamped, as the warning says


def test_farm_merge_frames_outside_the_shot_are_said_not_clipped_silently(tmp_path):
    """Trial: ``farm merge --frames 25-40`` on a 30-frame shot exited 0, silently clipped."""
    from backend.farm.merge import merge

    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="1-4", warmup=0, manifest_part=True)
    log = io.StringIO()
    from backend import events as ev

    with ev.reporting(log):
        summary = merge(gb, list(range(3, 9)))
    assert summary["missing"] == "" and summary["complete"] is True
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any("frames 5-8 of --frames are not in the shot (frames 1-4)" in w for w in warn), warn


def test_restyle_of_a_decompose_folder_without_its_manifest_says_completeness_is_unknown(tmp_path):
    """Trial: a partial decompose whose manifest.json was deleted restyled as complete, saying nothing."""
    from backend.jobs.restyle import restyle

    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="1-2")
    (gb / "manifest.json").unlink()
    log = io.StringIO()
    restyle(gb, tmp_path / "rs", "fog", progress=log, mp4=False)
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any("has no manifest.json (deleted?)" in w and "cannot be checked" in w for w in warn), warn
    assert contract.read_manifest(tmp_path / "rs")["input"]["complete"] is None
