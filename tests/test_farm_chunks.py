"""Farm chunks without a cluster (issue 18): ``--warmup``, ``--manifest-part``,
``farm merge``, the chunk plan's refusals and ``farm local``.

Real decompose/restyle runs of dolphins.mp4 at a tiny processing resolution (64 px);
no mocks. The Ray cluster test is tests/test_farm_ray.py.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from backend import contract
from backend.jobs.decompose import decompose
from backend.jobs.restyle import restyle
from backend.jobs.runner import RUN_LOCK, JobError
from cli_util import events, last_event, run_cli

RES = 64


def _chunk(src, out, frames, warmup=2, **kw):
    kw.setdefault("processing_resolution", RES)
    return decompose(src, out, frames=frames, warmup=warmup, manifest_part=True, **kw)


def _exrs(folder, prefix="gbuffer_"):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).glob(f"{prefix}*.exr"))}


def test_chunks_in_any_order_are_byte_identical_and_write_parts_only(footage, tmp_path):
    src = footage("dolphins")
    a, b = tmp_path / "a", tmp_path / "b"
    for frames in ("1-4", "5-8"):
        _chunk(src, a, frames)
    for frames in ("5-8", "1-4"):  # the other order: the second chunk never seeds from the first's files
        _chunk(src, b, frames)
    assert _exrs(a) == _exrs(b) and len(_exrs(a)) == 8
    for out in (a, b):
        assert not (out / "manifest.json").exists()  # chunks never write it
        assert not (out / RUN_LOCK).exists()  # no flock lock file
        assert sorted(p.name for p in (out / contract.PARTS_DIR).glob("*.json")) == ["1-4.json", "5-8.json"]
        part = json.loads((out / contract.PARTS_DIR / "5-8.json").read_text())
        assert part["part"] == {"first": 5, "last": 8, "frames": 4, "missing": "", "complete": True}
        assert part["settings"]["warmup"] == 2
        assert [e["frame"] for e in part["frames"]] == [5, 6, 7, 8]
    # "on read": the folder's manifest is assembled from the parts
    man = contract.read_manifest(a)
    assert [e["frame"] for e in man["frames"]] == list(range(1, 9)) and man["complete"] is False


def test_warmup_changes_the_first_frame_of_a_chunk_only_by_its_start(footage, tmp_path):
    """Frame 5 of chunk 5-8 with warmup 4 equals frame 5 of chunk 1-8 with warmup 0
    (both start the temporal state at frame 1)."""
    src = footage("dolphins")
    _chunk(src, tmp_path / "w4", "5-8", warmup=4)
    _chunk(src, tmp_path / "w0", "1-8", warmup=0)
    a = contract.read_frame(tmp_path / "w4" / "gbuffer_0005.exr")
    b = contract.read_frame(tmp_path / "w0" / "gbuffer_0005.exr")
    assert (a.depth == b.depth).all()


def test_resume_inside_a_chunk_is_byte_identical(footage, tmp_path):
    src = footage("dolphins")
    _chunk(src, tmp_path / "a", "1-6")
    before = _exrs(tmp_path / "a")
    for n in (4, 5):
        (tmp_path / "a" / f"gbuffer_{n:04d}.exr").unlink()
    r = _chunk(src, tmp_path / "a", "1-6")
    assert r.written == [4, 5] and r.skipped == [1, 2, 3, 6]
    assert _exrs(tmp_path / "a") == before


def test_other_settings_or_other_chunking_in_one_folder_refused(footage, tmp_path):
    src = footage("dolphins")
    out = tmp_path / "o"
    _chunk(src, out, "1-4")
    with pytest.raises(JobError, match="other settings"):
        _chunk(src, out, "5-8", warmup=3)  # another overlap
    with pytest.raises(JobError, match="other settings"):
        decompose(src, out, frames="5-8", processing_resolution=96, warmup=2, manifest_part=True)
    with pytest.raises(JobError, match="overlaps the part 1-4"):
        _chunk(src, out, "3-6")  # another chunking
    with pytest.raises(ValueError, match="--overwrite cannot be combined"):
        _chunk(src, out, "5-8", overwrite=True)


def test_merge_cli_complete_missing_and_on_read(footage, tmp_path):
    src = footage("dolphins")
    out = tmp_path / "o"
    for frames in ("1-3", "4-6"):
        r = run_cli("decompose", src, "--out", out, "--frames", frames, "--warmup", "1", "--manifest-part",
                    "--processing-resolution", RES)
        assert r.returncode == 0, r.stderr
        assert last_event(r.stdout)["event"] == "done"
    r = run_cli("farm", "merge", out, "--frames", "1-6")
    assert r.returncode == 0, r.stderr
    (summary,) = events(r.stdout)
    assert summary["event"] == "merged" and summary["frames"] == 6 and summary["missing"] == ""
    assert summary["complete"] is False  # the clip has 59 frames
    man = json.loads((out / "manifest.json").read_text())
    assert [e["frame"] for e in man["frames"]] == list(range(1, 7))
    assert man["frames_expected"] == 59 and man["frames_missing"] == "7-59" and man["complete"] is False
    (out / "gbuffer_0005.exr").unlink()
    r = run_cli("farm", "merge", out, "--frames", "1-6")
    assert r.returncode == 1 and "frames 5 are missing" in r.stderr
    assert events(r.stdout)[0]["missing"] == "5"
    r = run_cli("farm", "merge", tmp_path / "empty")
    assert r.returncode == 1 and "no manifest parts" in r.stderr


def test_restyle_chunks_make_previews_and_merge_makes_the_mp4(footage, tmp_path):
    src = footage("dolphins")
    gb = tmp_path / "gb"
    _chunk(src, gb, "1-6")
    out = tmp_path / "r"
    for frames in ("4-6", "1-3"):
        restyle(gb, out, "dense fog", frames=frames, warmup=1, manifest_part=True)
    assert not (out / "preview.mp4").exists() and not (out / "manifest.json").exists()
    assert len(list((out / "preview").glob("restyle_*.png"))) == 6
    r = run_cli("farm", "merge", out)
    # the G-buffer folder holds frames 1-6 only: the whole shot is there
    assert r.returncode == 0, r.stderr
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] is True and man["preview_mp4"] == "preview.mp4" and (out / "preview.mp4").stat().st_size
    assert "flicker" in man and man["outputs"]["preview.mp4"]


def test_farm_local_plan_refusals(footage, tmp_path):
    src = footage("dolphins")
    base = ["farm", "local", "decompose", src, "--out", tmp_path / "o", "--processing-resolution", RES]
    r = run_cli(*base, "--chunk", "2", "--overlap", "4")
    assert r.returncode == 2 and "--chunk 2 is below the temporal overlap --overlap 4" in r.stderr
    r = run_cli(*base, "--chunk", "4", "--overlap", "2", "--frames", "70-80")
    assert r.returncode == 2 and "starts past the end: the clip has 59 frame(s)" in r.stderr
    r = run_cli(*base, "--chunk", "4", "--overlap", "2", "--warmup", "3")
    assert r.returncode == 2 and "set by the farm job per chunk" in r.stderr
    r = run_cli(*base, "--chunk", "4", "--overlap", "2", "--overwrite")
    assert r.returncode == 2 and "--overwrite is not supported by farm jobs" in r.stderr
    assert not (tmp_path / "o").exists()  # refused before the folder was touched


def test_farm_local_runs_the_plan_and_merges(footage, tmp_path):
    src = footage("dolphins")
    out = tmp_path / "o"
    args = ["farm", "local", "decompose", src, "--out", out, "--frames", "1-6", "--chunk", "4", "--overlap", "2",
            "--processing-resolution", RES]
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    evs = events(r.stdout)
    assert evs[0]["event"] == "start" and evs[0]["chunks"] == 2
    assert [e["frame"] for e in evs if e["event"] == "progress"] == list(range(1, 7))
    assert evs[-2]["event"] == "merged" and evs[-1]["event"] == "done" and evs[-1]["written"] == 6
    assert sorted(p.name for p in (out / contract.PARTS_DIR).glob("*.json")) == ["1-4.json", "5-6.json"]
    r = run_cli(*args)  # a re-run resumes every frame
    assert r.returncode == 0 and events(r.stdout)[-1]["skipped"] == 6
    r = run_cli(*[a if a != "2" else "3" for a in args])  # another overlap, same folder
    assert r.returncode == 1 and "another farm job with other settings (overlap)" in r.stderr


def test_overlap_chain_is_byte_identical_to_an_unchunked_run(footage, tmp_path):
    src = footage("dolphins")
    plain = decompose(src, tmp_path / "plain", frames="1-7", processing_resolution=RES)
    r = run_cli("farm", "local", "decompose", src, "--out", tmp_path / "chain", "--frames", "1-7", "--chunk", "3",
                "--overlap", "chain", "--processing-resolution", RES)
    assert r.returncode == 0, r.stderr
    assert events(r.stdout)[0]["overlap"] == "chain"
    assert _exrs(tmp_path / "chain") == _exrs(tmp_path / "plain") and len(_exrs(tmp_path / "plain")) == 7
    man = json.loads((tmp_path / "chain" / "manifest.json").read_text())
    assert man["settings_hash"] == plain.settings_hash  # no warmup in the hash: the unchunked run's


def test_ray_missing_is_one_clear_line(footage, tmp_path):
    """Without ray (import blocked, as on a machine without the farm extra)."""
    import subprocess
    import sys

    from cli_util import REPO, cli_env

    code = ("import sys; sys.modules['ray'] = None; from backend.cli import main; "
            f"sys.exit(main(['farm', 'ray', 'decompose', {str(footage('dolphins'))!r}, '--out', "
            f"{str(tmp_path / 'o')!r}, '--chunk', '4', '--overlap', '2', '--address', '127.0.0.9:1']))")
    r = subprocess.run([sys.executable, "-c", code], env=cli_env(), cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == "error: ray is not installed: pip install ray==2.60.0"


def test_farm_local_stops_on_one_signal(footage, tmp_path):
    """Fresh-eyes trial: ``farm local`` ran to the end after a single SIGTERM. Now the first
    signal stops it after the current frame: a ``cancelled`` event, exit 130, complete
    frames kept as parts, and a re-run resumes them."""
    import signal

    from cli_util import start_cli

    src, out = footage("boat"), tmp_path / "o"
    args = ["farm", "local", "decompose", src, "--out", out, "--chunk", "4", "--overlap", "2",
            "--processing-resolution", RES]
    p = start_cli(*args)
    try:
        while True:  # the first finished chunk
            line = p.stdout.readline()
            assert line, p.stderr.read()
            if json.loads(line).get("event") == "progress":
                break
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    evs = events(rest)
    assert evs[-1]["event"] == "cancelled" and not [e for e in evs if e["event"] == "done"], rest
    kept = contract.list_frames(out)
    assert 4 <= len(kept) < 16
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert last_event(r.stdout)["skipped"] >= len(kept) and len(contract.list_frames(out)) == 16


def test_plain_job_and_farm_chunks_with_other_settings_refuse_each_other(footage, tmp_path):
    """Fresh-eyes trial: a ``--manifest-part`` chunk and a plain job with other settings
    (either one first, the first one still writing) both ran into one folder and mixed
    frames; ``farm local`` did too. Each claim is now seen by the other kind."""
    src = footage("dolphins")
    a = tmp_path / "a"
    _chunk(src, a, "1-2")  # a chunk's part claims the folder for its settings
    with pytest.raises(JobError, match="holds farm chunks of a decompose with other settings"):
        decompose(src, a, frames="3-4", processing_resolution=32)
    b = tmp_path / "b"
    decompose(src, b, frames="1-2", processing_resolution=RES)  # a plain job's manifest.json
    with pytest.raises(JobError, match="holds a decompose with other settings"):
        _chunk(src, b, "3-4", processing_resolution=32)
    r = run_cli("farm", "local", "decompose", src, "--out", b, "--frames", "1-4", "--chunk", "2", "--overlap", "0",
                "--processing-resolution", 32)
    assert r.returncode != 0 and "holds a decompose with other settings" in r.stderr, r.stderr
    assert sorted(contract.list_frames(b)) == [1, 2]
    # the same settings still resume and merge
    decompose(src, a, frames="1-2", processing_resolution=RES, warmup=2, manifest_part=True)


def test_restyle_chunks_of_another_gbuffer_folder_are_refused(footage, tmp_path):
    """Second fresh-eyes trial: restyle chunks of two G-buffer folders with the same
    settings went into one --out and ``farm merge`` reported the mix complete (restyle's
    settings hash does not name its input folder). A chunk over other inputs is refused."""
    src = footage("dolphins")
    g1, g2 = tmp_path / "g1", tmp_path / "g2"
    for g in (g1, g2):
        decompose(src, g, frames="1-4", processing_resolution=32)
    out = tmp_path / "rs"
    restyle(g1, out, "fog", frames="1-2", warmup=0, manifest_part=True)
    with pytest.raises(JobError, match="another farm job over other inputs"):
        restyle(g2, out, "fog", frames="3-4", warmup=0, manifest_part=True)
    restyle(g1, out, "fog", frames="3-4", warmup=0, manifest_part=True)  # its own inputs: fine
    assert sorted(contract.list_frames(out, "restyle_")) == [1, 2, 3, 4]


def _drop_entry(out, part_name, frame):
    """The state a worker killed between a frame's rename and the part's next write leaves:
    the frame file is on disk, the part does not record it."""
    p = out / contract.PARTS_DIR / part_name
    d = json.loads(p.read_text())
    d["frames"] = [e for e in d["frames"] if e["frame"] != frame]
    p.write_text(json.dumps(d))


@pytest.mark.parametrize("job", ["decompose", "restyle"])
def test_a_retried_chunk_keeps_every_manifest_field_and_merge_equals_the_uninterrupted_run(footage, tmp_path, job):
    """Issue 29: the frame a retried chunk resumed lost 8 fields in manifest.json. The
    retry (``run_chunk``, what Ray and farm local run) recomputes frames its part does not
    record: same bytes, every field."""
    from backend.farm.chunks import run_chunk
    from backend.farm.merge import merge

    src = footage("dolphins")
    if job == "restyle":
        gb = tmp_path / "gb"
        decompose(src, gb, frames="1-4", processing_resolution=32)
        src, kw, prefix = str(gb), {"prompt": "fog"}, "restyle_"
    else:
        src, kw, prefix = str(src), {"processing_resolution": RES}, "gbuffer_"
    ref, out = tmp_path / "ref", tmp_path / "out"
    for folder in (ref, out):
        for a, b in ((1, 2), (3, 4)):
            run_chunk(job, src, str(folder), kw, a, b, 1)
    before = _exrs(out, prefix)
    _drop_entry(out, "3-4.json", 4)
    res = run_chunk(job, src, str(out), kw, 3, 4, 1)  # the retry
    assert res["written"] == [4] and res["skipped"] == [3]
    assert _exrs(out, prefix) == before
    merge(ref, [1, 2, 3, 4])
    summary = merge(out, [1, 2, 3, 4])
    assert summary["missing"] == "" and summary["frames"] == 4
    a, b = (json.loads((f / "manifest.json").read_text()) for f in (ref, out))
    assert len(b["frames"]) == 4 and a["frames"] == b["frames"] and "frames_incomplete_entries" not in b
    assert all(set(e) == set(b["frames"][0]) for e in b["frames"])  # every entry has every field


def test_merged_manifest_equals_an_unchunked_run_except_documented_fields(footage, tmp_path):
    """Issue 29: output.first_frame was the last chunk's first frame (5 instead of 1); the
    rest equals an unchunked decompose with the same anchors but for the fields
    documented in backend/farm/merge.py."""
    src = footage("dolphins")
    farm, one = tmp_path / "farm", tmp_path / "one"
    r = run_cli("farm", "local", "decompose", src, "--out", farm, "--frames", "1-6", "--chunk", "2", "--overlap", "1",
                "--processing-resolution", RES)
    assert r.returncode == 0, r.stderr
    decompose(src, one, frames="1-6", processing_resolution=RES, depth_anchors=farm / ".gbuffer_depth_anchors.npz")
    a, b = (json.loads((f / "manifest.json").read_text()) for f in (farm, one))
    assert a["output"]["first_frame"] == b["output"]["first_frame"] == 1
    assert a["merged_from_parts"] == 3 and a["settings"].pop("warmup") == 1
    for m in (a, b):
        m.pop("settings_hash")
        m.pop("merged_from_parts", None)
        # each file's size, times and inode (recorded to notice a user's edit): differ between any two folders
        assert set(m.pop("output_stats")) == {f"gbuffer_{n:04d}.exr" for n in range(1, 7)}
        for e in m["frames"]:
            e.pop("settings_hash")
            e.pop("sha256")  # the EXR header names the settings hash
    assert a == b


def test_merge_takes_the_folder_lock(footage, tmp_path):
    """docs/reliability.md: manifest.json is written under the folder's lock; farm merge too."""
    import threading

    from backend.farm.merge import merge
    from backend.jobs.runner import _manifest_lock

    out = tmp_path / "o"
    _chunk(footage("dolphins"), out, "1-2")
    done = threading.Event()
    with _manifest_lock(out):
        t = threading.Thread(target=lambda: (merge(out), done.set()), daemon=True)
        t.start()
        assert not done.wait(1.5)  # waits for the lock
        assert not (out / "manifest.json").exists()
    assert done.wait(60) and (out / "manifest.json").is_file()
