"""Issue 27: what the third hostile trial still broke (docs/reliability.md).

Each test rebuilds one hostile case of the trial and checks what the product does:
restyle of a G-buffer folder still being written, restyle into the footage folder, a
user's edit of an output frame, a dangling symbolic link frame, negative frame numbers, a
movie that changes size mid-stream, the manifest after a hard kill, SIGHUP, VP9 alpha.
"""
from __future__ import annotations

import io
import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.jobs.decompose import decompose
from backend.jobs.restyle import output_path, restyle
from backend.jobs.runner import RUN_LOCK, JobError
from cli_util import events, run_cli, start_cli
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_image
from gbuffer_util import make_gbuffers

from reliability_util import sha256_of as _sha, tiny_decompose as _dec, write_sequence as _sequence

register_tiny()


def _forget(out: Path, numbers, part: Path = None) -> None:
    """What a SIGKILL between a frame's rename and the next (throttled) manifest write
    leaves: the frames on disk, their entries missing from manifest.json (or the part)."""
    p = part or (out / "manifest.json")
    man = json.loads(p.read_text())
    man["frames"] = [e for e in man["frames"] if e["frame"] not in numbers]
    man["complete"] = False
    p.write_text(json.dumps(man))


# ------------------------------------------------------- (7) the manifest after a hard kill


def test_entries_of_frames_written_before_a_hard_kill_keep_every_field(tmp_path):
    """Trial: after a SIGKILL and a resume the entries of the frames written just before
    the kill had 6 of 17 fields and the shot's flicker figure changed (0.0352 -> 0.0400).
    The entry travels in each frame's header; a resume records it whole."""
    src = _sequence(tmp_path / "seq", range(1, 7))
    ref, out = tmp_path / "ref", tmp_path / "out"
    _dec(src, ref, stabilize=True)
    _dec(src, out, stabilize=True)
    want = contract.read_manifest(ref)
    assert want["flicker"]["stabilized"] > 0 and len(want["frames"][3]) >= 15
    for kills in range(2):  # two kills in a row, as in the trial
        _forget(out, {3, 4, 5})
        res = _dec(src, out, stabilize=True)
        assert res.written == [] and res.skipped == [1, 2, 3, 4, 5, 6]
        got = contract.read_manifest(out)
        assert got["frames"] == want["frames"], kills
        assert got["flicker"] == want["flicker"] and got["complete"] is True
        assert got["provenance"] == want["provenance"]


def test_a_farm_chunk_retried_after_its_node_was_killed_keeps_every_field(tmp_path):
    src = _sequence(tmp_path / "seq", range(1, 7))
    ref, out = tmp_path / "ref", tmp_path / "out"
    for folder in (ref, out):
        for a, b in ((1, 3), (4, 6)):
            _dec(src, folder, stabilize=True, frames=f"{a}-{b}", warmup=1, manifest_part=True)
    part = out / contract.PARTS_DIR / "4-6.json"
    _forget(out, {5, 6}, part=part)
    res = _dec(src, out, stabilize=True, frames="4-6", warmup=1, manifest_part=True)
    assert res.written == [] and res.skipped == [4, 5, 6]
    want = json.loads((ref / contract.PARTS_DIR / "4-6.json").read_text())["frames"]
    assert json.loads(part.read_text())["frames"] == want


def test_restyle_entries_after_a_hard_kill_keep_every_field(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=4, h=24, w=32)
    ref, out = tmp_path / "ref", tmp_path / "out"
    restyle(gb, ref, "fog", progress=io.StringIO(), mp4=False)
    restyle(gb, out, "fog", progress=io.StringIO(), mp4=False)
    _forget(out, {3, 4})
    for n in (3, 4):  # a frame's preview is written only after the frame is recorded
        (out / "preview" / output_path(out, n).with_suffix(".png").name).unlink()
    res = restyle(gb, out, "fog", progress=io.StringIO(), mp4=False)
    assert res.written == [] and res.skipped == [1, 2, 3, 4]
    want, got = contract.read_manifest(ref), contract.read_manifest(out)
    assert got["frames"] == want["frames"] and got["flicker"] == want["flicker"]


def test_sighup_cancels_like_sigterm(tmp_path):
    """Trial: SIGHUP (the terminal closed) killed the job: exit -1, the folder's lock file
    and a ``.tmp`` frame left. It now cancels cleanly: exit 130, ``cancelled``, no lock
    file, no temporary, whole frames only."""
    src = _sequence(tmp_path / "seq", range(1, 41), h=48, w=64)
    out = tmp_path / "out"
    p = start_cli("decompose", src, "--out", out, "--estimator", "tiny", "--max-size", "32", tiny=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("gbuffer_*.exr")):
        time.sleep(0.05)
    p.send_signal(signal.SIGHUP)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, stderr)
    assert events(stdout)[-1]["event"] == "cancelled"
    assert not (out / RUN_LOCK).exists()
    assert not [q.name for q in out.iterdir() if q.name.startswith(".tmp")]
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    for f in contract.list_frames(out).values():
        contract.read_frame(f)


# ------------------------------------------------------- (4) (5) (6) footage that is not what it seems


def test_a_dangling_symlink_frame_is_named_and_listed_as_missing(tmp_path):
    """Trial: ``shot_0003.png`` pointing nowhere was dropped: exit 0, no warning, manifest
    ``complete: true``, ``frames_missing ""``."""
    src = _sequence(tmp_path / "seq", [1, 2, 4])
    (src / "shot_0003.png").symlink_to(tmp_path / "gone.png")
    out = tmp_path / "out"
    log = io.StringIO()
    decompose(src, out, estimator="tiny", max_size=32, progress=log)
    warn = [e for e in events(log.getvalue()) if e["event"] == "warning"]
    assert len(warn) == 1 and "shot_0003.png (frame 3) is a symbolic link" in warn[0]["message"]
    assert warn[0]["frame"] == 3
    man = contract.read_manifest(out)
    assert man["complete"] is False and man["frames_missing"] == "3" and man["frames_expected"] == 4
    assert sorted(contract.list_frames(out)) == [1, 2, 4]
    r = run_cli("decompose", src, "--out", tmp_path / "cli", "--estimator", "tiny", "--max-size", "32", tiny=True)
    assert r.returncode == 0 and "shot_0003.png (frame 3) is a symbolic link" in r.stderr
    # the link repaired: a resume computes just that frame and the folder is complete
    (src / "shot_0003.png").unlink()
    write_image(src / "shot_0003.png", gradient_rgb(24, 32, 50))
    res = _dec(src, out)
    assert res.written == [3] and contract.read_manifest(out)["complete"] is True


def test_negative_frame_numbers_are_numbered_in_frame_order_as_the_warning_says(tmp_path):
    """Trial: ``shot_-0002 ... shot_0001`` became gbuffer 1-4 from 0000, -0001, 0001, -0002,
    while the warning said "in name order". G-buffer numbers are >= 0: the files are
    numbered 1-4 in the order of their (signed) numbers, and the warning says exactly that."""
    for spec in ("folder", "shot_####.png"):
        src = tmp_path / f"seq_{spec[:4]}"
        src.mkdir()
        for k, n in enumerate((-2, -1, 0, 1)):
            write_image(src / f"shot_{n:05d}.png" if n < 0 else src / f"shot_{n:04d}.png", gradient_rgb(24, 32, 7 * k))
        assert sorted(q.name for q in src.iterdir())[0] == "shot_-0001.png"  # name order is not frame order
        out = tmp_path / f"out_{spec[:4]}"
        log = io.StringIO()
        decompose(src if spec == "folder" else src / spec, out, estimator="tiny", max_size=32, progress=log)
        warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
        assert len(warn) == 1 and "negative number" in warn[0], warn
        assert "shot_-0002.png is frame 1, shot_0001.png is frame 4" in warn[0]
        got = {n: Path(contract.read_meta(p)["source_file"]).name for n, p in contract.list_frames(out).items()}
        assert got == {1: "shot_-0002.png", 2: "shot_-0001.png", 3: "shot_0000.png", 4: "shot_0001.png"}
    # a dash that separates is not a sign: shot-0002.png is frame 2
    plain = _sequence(tmp_path / "dash", [2, 3], name="shot-{:04d}.png")
    log = io.StringIO()
    decompose(plain, tmp_path / "o_dash", estimator="tiny", max_size=32, progress=log)
    assert sorted(contract.list_frames(tmp_path / "o_dash")) == [2, 3]
    assert not [e for e in events(log.getvalue()) if e["event"] == "warning"]


def test_a_movie_that_changes_resolution_mid_stream_is_refused_naming_the_frame(tmp_path):
    """Trial: a TS going from 64x48 to 96x48 after frame 3 was squeezed to 64x48, exit 0."""
    from footage_util import write_movie

    a = write_movie(tmp_path / "a.ts", [gradient_rgb(48, 64, 4 * i) for i in range(3)], rate=24)
    b = write_movie(tmp_path / "b.ts", [gradient_rgb(48, 96, 4 * i) for i in range(3)], rate=24)
    clip = tmp_path / "clip.ts"
    clip.write_bytes(a.read_bytes() + b.read_bytes())
    out = tmp_path / "out"
    r = run_cli("decompose", clip, "--out", out, "--estimator", "tiny", "--max-size", "32", tiny=True)
    assert r.returncode == 2, r.stderr
    assert "clip.ts (frame 4): the movie changes resolution mid-stream, to 96x48 from the 64x48" in r.stderr
    assert sorted(contract.list_frames(out)) == [1, 2, 3]
    assert contract.read_manifest(out)["complete"] is False


# ------------------------------------------------------- (1) (2) restyle's input


def test_restyle_refuses_a_gbuffer_folder_another_job_is_writing(tmp_path):
    """Trial: ``decompose seq --out gb --stabilize &`` then ``restyle gb`` once 3 frames
    existed: exit 0, ``complete: true``, ``frames_expected 11``; the folder ended with 16
    frames. Restyle now refuses while a job holds the folder's run lock (held here exactly
    as a running decompose holds it, so the test does not race a real one)."""
    from backend.jobs.runner import _RunLock

    src = _sequence(tmp_path / "seq", range(1, 4))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="1-2")
    lock = _RunLock(gb)
    lock.acquire()  # a decompose job writing frame 3 right now
    try:
        r = run_cli("restyle", gb, "--prompt", "dense fog", "--out", tmp_path / "fog")
    finally:
        lock.release()
    assert r.returncode == 1, r.stderr
    assert f"G-buffer folder {gb} is being written by another job right now" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "fog").exists() or not list((tmp_path / "fog").glob("restyle_*.exr"))
    # the job finished: restyle runs
    _dec(src, gb)
    assert run_cli("restyle", gb, "--prompt", "dense fog", "--out", tmp_path / "fog").returncode == 0
    assert contract.read_manifest(tmp_path / "fog")["complete"] is True


def test_restyle_notices_its_input_changing_while_it_runs(tmp_path):
    """A decompose started after restyle's check (or frames added or removed meanwhile):
    the end-of-run check marks the restyle incomplete, with a warning."""
    from backend.jobs.restyle_input import input_changed
    from backend.jobs.runner import _RunLock

    src = _sequence(tmp_path / "seq", range(1, 4))
    gb = tmp_path / "gb"
    _dec(src, gb)
    files = contract.list_frames(gb)
    assert input_changed(gb, files) is None
    assert "frames 4..4 (1) went away" in input_changed(gb, {**files, 4: gb / "gbuffer_0004.exr"})
    fewer = {n: p for n, p in files.items() if n != 3}
    assert "frames 3..3 (1) appeared" in input_changed(gb, fewer)
    lock = _RunLock(gb)
    lock.acquire()
    try:
        assert "a job started writing into" in input_changed(gb, files)
    finally:
        lock.release()


def test_restyle_of_an_incomplete_gbuffer_folder_is_marked_incomplete(tmp_path):
    """The killed decompose above leaves ``complete: false``: restyle renders what is there,
    warns naming the folder and its missing frames, and is ``complete: false`` too."""
    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="1-2")
    assert contract.read_manifest(gb)["complete"] is False
    log = io.StringIO()
    res = restyle(gb, tmp_path / "fog", "fog", progress=log, mp4=False)
    assert res.written == [1, 2]
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any(f"G-buffer folder {gb} is not complete (frames 3-4 missing)" in w for w in warn), warn
    man = contract.read_manifest(tmp_path / "fog")
    assert man["complete"] is False and man["input_complete"] is False
    assert man["input"]["complete"] is False and man["input"]["frames_missing"] == "3-4"
    # the decompose finished: a resume renders the new frames and is complete
    _dec(src, gb)
    res = restyle(gb, tmp_path / "fog", "fog", progress=io.StringIO(), mp4=False)
    assert res.written == [3, 4] and contract.read_manifest(tmp_path / "fog")["complete"] is True


def test_restyle_of_a_folder_whose_listed_frames_were_deleted_is_incomplete(tmp_path):
    """Own hostile variant: the last frame of a complete G-buffer folder deleted; restyle
    rendered the rest and said complete (no gap inside the range to warn about)."""
    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb)
    contract.frame_path(gb, 4).unlink()
    log = io.StringIO()
    res = restyle(gb, tmp_path / "rs", "fog", progress=log, mp4=False)
    assert res.written == [1, 2, 3]
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any("1 frame(s) its manifest lists are not in the folder any more (4, e.g. gbuffer_0004.exr)" in w
               for w in warn), warn
    man = contract.read_manifest(tmp_path / "rs")
    assert man["complete"] is False and man["input"]["frames_missing"] == "4"


def test_restyle_checks_each_frame_header_against_its_name_and_the_folder(tmp_path):
    """Trial: files swapped by name rendered as named although each header's
    ``frame_number`` contradicts it; a frame of another decompose run was mixed in."""
    src = _sequence(tmp_path / "seq", range(1, 4))
    gb, other = tmp_path / "gb", tmp_path / "other"
    _dec(src, gb)
    _dec(src, other, hfov_deg=40.0)
    f2, f3 = contract.frame_path(gb, 2), contract.frame_path(gb, 3)
    b2, b3 = f2.read_bytes(), f3.read_bytes()
    f2.write_bytes(b3)
    f3.write_bytes(b2)
    with pytest.raises(JobError, match=r"gbuffer_0002\.exr \(G-buffer frame 2\): its header says it is frame 3"):
        restyle(gb, tmp_path / "rs", "fog", progress=io.StringIO())
    f2.write_bytes(b2)
    f3.write_bytes(contract.frame_path(other, 3).read_bytes())
    with pytest.raises(JobError, match=r"gbuffer_0003\.exr \(G-buffer frame 3\) was written with other decompose "
                                       r"settings"):
        restyle(gb, tmp_path / "rs", "fog", progress=io.StringIO())
    assert not list((tmp_path / "rs").glob("restyle_*.exr")) if (tmp_path / "rs").exists() else True
    f3.write_bytes(b3)
    assert restyle(gb, tmp_path / "rs", "fog", progress=io.StringIO()).written == [1, 2, 3]


def test_restyle_never_writes_into_the_footage_folder(tmp_path):
    """Trial: ``decompose seq --out gb && restyle gb --out seq`` left EXRs, previews and a
    manifest among the user's source frames."""
    src = _sequence(tmp_path / "seq", range(1, 3))
    gb = tmp_path / "gb"
    _dec(src, gb)
    before = sorted(q.name for q in src.iterdir())
    for out in (src, src / "sub"):
        r = run_cli("restyle", gb, "--prompt", "dense fog", "--out", out)
        assert r.returncode == 1 and "refusing to write into the footage" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(q.name for q in src.iterdir()) == before


# ------------------------------------------------------- (3) one rule for user files and edits


def _edit_albedo(path: Path) -> None:
    """The trial's edit: the frame read, albedo x0.5, written back in place, header kept."""
    f = contract.read_frame(path)
    f.albedo = f.albedo * 0.5
    contract.write_frame(path, f)


def test_a_users_edit_of_an_output_frame_is_never_replaced(tmp_path):
    """Trial: ``gbuffer_0002.exr`` edited in place (header kept, albedo x0.5), then a plain
    re-run said "changed since: computing it again" and the edit was gone. An output whose
    bytes changed since it was written is the user's: refused by name, with or without
    --overwrite, and kept; once moved away, just that frame is computed again."""
    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb)
    f2 = contract.frame_path(gb, 2)
    original = f2.read_bytes()
    _edit_albedo(f2)
    edited = _sha(f2)
    for overwrite, settings in ((False, {}), (True, {}), (True, {"hfov_deg": 40.0})):
        with pytest.raises(JobError, match=r"gbuffer_0002\.exr\): they are never replaced or removed, even with "
                                           r"--overwrite; move them away \(a frame moved away or deleted is "
                                           r"computed again\)"):
            _dec(src, gb, overwrite=overwrite, **settings)
        assert _sha(f2) == edited
    r = run_cli("decompose", src, "--out", gb, "--estimator", "tiny", "--max-size", "32", tiny=True)
    assert r.returncode == 1 and "gbuffer_0002.exr" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    f2.rename(tmp_path / "my_edit.exr")
    res = _dec(src, gb)
    assert res.written == [2] and f2.read_bytes() == original
    # touched (same bytes, new times) is still ours: a plain resume
    import os

    os.utime(f2, (time.time() + 9, time.time() + 9))
    assert _dec(src, gb).skipped == [1, 2, 3, 4]
    # a frame cut short (fresh-eyes trial of issue 16 recomputed it) falls under the same rule
    with open(f2, "r+b") as fh:
        fh.truncate(3000)
    with pytest.raises(JobError, match=r"gbuffer_0002\.exr"):
        _dec(src, gb)
    assert f2.stat().st_size == 3000


def test_edited_restyle_outputs_and_farm_chunk_frames_follow_the_same_rule(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=3, h=24, w=32)
    out = tmp_path / "rs"
    restyle(gb, out, "fog", progress=io.StringIO(), mp4=False)
    png = out / "preview" / "restyle_0002.png"
    png.write_bytes(png.read_bytes() + b"\0")  # the user's retouch of our preview
    with pytest.raises(JobError, match=r"preview/restyle_0002\.png"):
        restyle(gb, out, "fog", progress=io.StringIO(), mp4=False)
    png.unlink()
    exr = output_path(out, 3)
    from backend.jobs.writers import read_rgba_exr, write_rgba_exr
    from backend.jobs.restyle import _header_value

    keep = {k: _header_value(exr, k) for k in ("settings_hash", "input_hash", "source_frame")}
    write_rgba_exr(exr, read_rgba_exr(exr) * 0.5, header={f"restyle/{k}": v for k, v in keep.items()})
    edited = _sha(exr)
    for overwrite in (False, True):
        with pytest.raises(JobError, match=r"restyle_0003\.exr"):
            restyle(gb, out, "fog", progress=io.StringIO(), mp4=False, overwrite=overwrite)
    assert _sha(exr) == edited
    # a farm chunk re-run over an edited frame of its range
    src = _sequence(tmp_path / "seq", range(1, 5))
    farm = tmp_path / "farm"
    for a, b in ((1, 2), (3, 4)):
        _dec(src, farm, frames=f"{a}-{b}", warmup=1, manifest_part=True)
    _edit_albedo(contract.frame_path(farm, 4))
    with pytest.raises(JobError, match=r"gbuffer_0004\.exr"):
        _dec(src, farm, frames="3-4", warmup=1, manifest_part=True)


# ------------------------------------------------------- (8) odd codecs


def _vp9_alpha_webm(path: Path, n: int = 4, h: int = 48, w: int = 64) -> Path:
    """A WebM of libvpx VP9 ``yuva420p`` (``alpha_mode=1``): opaque box on transparency."""
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libvpx-vp9", rate=24)
        s.width, s.height, s.pix_fmt = w, h, "yuva420p"
        for i in range(n):
            img = np.zeros((h, w, 4), np.uint8)
            img[..., :3] = gradient_rgb(h, w, 4 * i)
            img[10:30, 10:40, 3] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgba")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_vp9_alpha_in_webm_is_decoded(tmp_path):
    """Trial: VP9 with alpha in WebM (libvpx ``yuva420p``, ``alpha_mode=1``) read as
    ``has_alpha: false``, alpha 1.0 everywhere, no warning: FFmpeg's native VP9 decoder
    drops alpha. It is decoded with libvpx."""
    import av

    from backend.footage import open_footage

    clip = _vp9_alpha_webm(tmp_path / "alpha.webm")
    with av.open(str(clip)) as c:  # what the trial saw: the native decoder, no alpha
        assert c.streams.video[0].metadata.get("alpha_mode") == "1"
        assert next(c.decode(video=0)).format.name == "yuv420p"
    with open_footage(clip) as f:
        assert f.info.has_alpha and f.info.pix_fmt == "yuva420p"
        frames = list(f)
    assert len(frames) == 4
    for sf in frames:
        assert sf.alpha is not None and sf.alpha.shape == (48, 64)
        assert sf.alpha[20, 20] > 0.99 and sf.alpha[2, 2] < 0.01 and sf.alpha[40, 60] < 0.01
    assert [round(sf.pts_s, 3) for sf in frames] == [0.0, 0.042, 0.083, 0.125]
    out = tmp_path / "gb"
    _dec(clip, out)
    man = contract.read_manifest(out)
    assert man["source"]["has_alpha"] is True and man["complete"] is True
    a = contract.read_frame(contract.frame_path(out, 2)).combined[..., 3]
    assert a[20, 20] > 0.99 and a[2, 2] < 0.01


# ------------------------------------------------------- found by our own hostile variants


def test_a_job_leaves_the_temporary_of_another_job_writing_the_same_frame(tmp_path):
    """Two identical decomposes into one folder at once: one failed "job wrote nothing for
    frame 4", the other having removed its temporary as a hard kill's leftover. Leftovers
    are removed only when no other job holds the folder."""
    from backend.jobs.runner import _RunLock

    src = _sequence(tmp_path / "seq", range(1, 4))
    out = tmp_path / "out"
    _dec(src, out, frames="1-1")
    other = _RunLock(out)
    other.acquire()  # the other job, writing frame 2 right now
    theirs = out / ".tmp_gbuffer_0002_inflight.exr"
    theirs.write_bytes(b"half of their frame")
    try:
        res = _dec(src, out)
    finally:
        other.release()
    assert res.written == [2, 3] and theirs.exists()
    theirs.unlink()
    # alone in the folder, a hard kill's leftover of a frame computed again is removed
    contract.frame_path(out, 3).unlink()
    leftover = out / ".tmp_gbuffer_0003_killed.exr"
    leftover.write_bytes(b"x")
    assert _dec(src, out).written == [3] and not leftover.exists()


def test_a_second_signal_between_two_steps_of_a_frame_leaves_no_temporary(tmp_path, monkeypatch):
    """SIGTERM then SIGHUP at once: a ``.tmp_gbuffer_0004_*`` was left once in 30 tries (the
    second signal landed after the frame's write was handed to the writer thread and before
    it was tracked). The run now tracks every temporary it creates until it is renamed."""
    from concurrent.futures import ThreadPoolExecutor

    import backend.jobs.frame_run as runner
    from backend.errors import JobCancelled

    class SignalAfterSubmit(ThreadPoolExecutor):
        calls = 0

        def submit(self, fn, *a, **k):
            fut = super().submit(fn, *a, **k)
            SignalAfterSubmit.calls += 1
            if SignalAfterSubmit.calls == 2:
                fut.result()
                raise KeyboardInterrupt  # the second signal, right here
            return fut

    monkeypatch.setattr(runner, "ThreadPoolExecutor", SignalAfterSubmit)
    src = _sequence(tmp_path / "seq", range(1, 5))
    out = tmp_path / "out"
    with pytest.raises(JobCancelled):
        _dec(src, out)
    assert not [q.name for q in out.iterdir() if q.name.startswith(".tmp")]
    assert set(contract.list_frames(out)) <= {1}  # whole frames only


def test_a_closed_event_pipe_does_not_fail_the_job(tmp_path):
    """Own hostile variant: ``python -m backend decompose ... | head -2`` failed the job at
    its next event ("frame 2 failed: BrokenPipeError", then a traceback). The events are
    dropped with one line on stderr and the job finishes."""
    import shlex
    import subprocess

    from cli_util import REPO, cli_cmd, cli_env

    src = _sequence(tmp_path / "seq", range(1, 13))
    out = tmp_path / "out"
    cmd = shlex.join(map(str, cli_cmd("decompose", src, "--out", out, "--estimator", "tiny", "--max-size", "32",
                                      tiny=True)))
    r = subprocess.run(["bash", "-c", f"{cmd} | head -1; exit ${{PIPESTATUS[0]}}"], env=cli_env(), cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "the event stream (stdout) was closed by its reader" in r.stderr
    assert json.loads(r.stdout.splitlines()[0])["event"] == "start"
    assert contract.read_manifest(out)["complete"] is True


def test_restyle_of_farm_chunks_not_merged_names_the_missing_frames(tmp_path):
    src = _sequence(tmp_path / "seq", range(1, 7))
    gb = tmp_path / "gb"
    _dec(src, gb, frames="1-3", warmup=1, manifest_part=True)  # the chunk 4-6 has not run (or died)
    log = io.StringIO()
    assert restyle(gb, tmp_path / "rs", "fog", progress=log, mp4=False).written == [1, 2, 3]
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert any(f"G-buffer folder {gb} is not complete (frames 4-6 missing)" in w for w in warn), warn
    assert contract.read_manifest(tmp_path / "rs")["complete"] is False
