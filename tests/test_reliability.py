"""Issue 16: no silent mix-ups, frame numbers kept, nothing of the user's touched.

Each test builds the hostile case itself (a crafted manifest with decoys, a user's
preview files, a replaced or touched input, a truncated movie, concurrent chunks with
other settings, a 1001-numbered sequence with a gap, odd names...) and checks what the
product does with it. See docs/reliability.md for the guarantees they pin down.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.errors import InputError
from backend.footage import FootageError, open_footage
from backend.jobs.decompose import decompose
from backend.jobs.restyle import MP4_NAME, output_path, preview_path, restyle
from backend.jobs.runner import JobError
from cli_util import events, run_cli, start_cli
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_image
from gbuffer_util import make_gbuffers

register_tiny()


def _sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _dec(src, out, **kw):
    kw.setdefault("estimator", "tiny")
    kw.setdefault("max_size", 32)
    return decompose(src, out, progress=io.StringIO(), **kw)


def _sequence(folder: Path, numbers, h=24, w=32, name="shot_{:04d}.png") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(numbers):
        write_image(folder / name.format(n), gradient_rgb(h, w, 3 * i))
    return folder


# --------------------------------------------------------------- (5) the user's own files


def test_crafted_manifest_makes_overwrite_delete_none_of_the_decoys(tmp_path):
    """A manifest listing a user's notes, an EXR and a clip backup as stale frames: with
    --overwrite the product removes its own stale frames and none of the decoys; a plain
    EXR (no settings stamp) carrying one of our frame names is refused, never removed."""
    src = _sequence(tmp_path / "seq", [1, 2])
    out = tmp_path / "out"
    _dec(src, out, hfov_deg=50.0)
    decoys = {"notes.txt": b"my notes", "render_0003.exr": b"not ours", "clip_backup.mp4": b"\0" * 64,
              "gbuffer_0003.txt": b"x"}
    for name, data in decoys.items():
        (out / name).write_bytes(data)
    man = json.loads((out / "manifest.json").read_text())
    for i, name in enumerate(decoys, 3):
        man["frames"].append({"frame": i, "file": name, "settings_hash": "0" * 16})
    man["frames"].append({"frame": 9, "file": "../seq/shot_0001.png", "settings_hash": "0" * 16})
    (out / "manifest.json").write_text(json.dumps(man))
    res = _dec(src, out, hfov_deg=70.0, overwrite=True)  # other settings: our 2 frames are stale
    assert sorted(res.written) == [1, 2]
    for name, data in decoys.items():
        assert (out / name).read_bytes() == data, name
    assert (src / "shot_0001.png").exists()
    # a plain EXR with one of our names (no settings stamp, no recorded checksum): never replaced
    from footage_util import write_exr

    write_exr(out / "gbuffer_0002.exr", np.zeros((4, 4, 3), np.float32))
    before = _sha(out / "gbuffer_0002.exr")
    for overwrite in (False, True):
        with pytest.raises(JobError, match=r"gbuffer_0002\.exr.*never replaced or removed, even with --overwrite"):
            _dec(src, out, hfov_deg=60.0, overwrite=overwrite)
    assert _sha(out / "gbuffer_0002.exr") == before


def test_users_previews_and_foreign_manifest_are_never_overwritten(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=2, h=24, w=32)
    out = tmp_path / "rs"
    out.mkdir()
    (out / MP4_NAME).write_bytes(b"the user's own cut")
    for overwrite in (False, True):
        with pytest.raises(JobError, match=r"preview\.mp4.*never replaced or removed"):
            restyle(gb, out, "fog", progress=io.StringIO(), overwrite=overwrite)
    assert (out / MP4_NAME).read_bytes() == b"the user's own cut"
    (out / MP4_NAME).unlink()
    (out / "preview").mkdir()
    preview_path(out, 2).write_bytes(b"user png")
    with pytest.raises(JobError, match=r"preview/restyle_0002\.png"):
        restyle(gb, out, "fog", progress=io.StringIO(), overwrite=True)
    assert preview_path(out, 2).read_bytes() == b"user png"
    preview_path(out, 2).unlink()
    for text in ('{"name": "my-package", "version": "1.0"}', "not json at all"):
        (out / "manifest.json").write_text(text)
        with pytest.raises(JobError, match=r"manifest\.json this product did not write"):
            restyle(gb, out, "fog", progress=io.StringIO(), overwrite=True)
        assert (out / "manifest.json").read_text() == text
    (out / "manifest.json").unlink()
    # our own outputs are recorded with checksums, and a changed prompt replaces them
    res = restyle(gb, out, "fog", progress=io.StringIO())
    man = contract.read_manifest(out)
    assert man["producer"] == "gbuffer-editor"
    assert man["outputs"][MP4_NAME] == _sha(out / MP4_NAME)
    assert {e["frame"]: e["sha256"] for e in man["frames"]} == {n: _sha(output_path(out, n)) for n in (1, 2)}
    assert man["frames"][0]["companions"] == {"preview/restyle_0001.png": _sha(preview_path(out, 1))}
    # the user edits our preview.mp4: it is theirs now
    (out / MP4_NAME).write_bytes(b"edited by the user")
    with pytest.raises(JobError, match=r"preview\.mp4"):
        restyle(gb, out, "snow", progress=io.StringIO(), overwrite=True)
    (out / MP4_NAME).unlink()
    res = restyle(gb, out, "snow", progress=io.StringIO(), overwrite=True)
    assert sorted(res.written) == [1, 2] and (out / MP4_NAME).exists()


# ------------------------------------------------------- (1) inputs that change under a resume


def test_replaced_sequence_frame_is_refused_precisely_and_overwrite_recomputes_only_it(tmp_path):
    src = _sequence(tmp_path / "seq", [1, 2, 3])
    out = tmp_path / "out"
    _dec(src, out)
    mt = {n: contract.frame_path(out, n).stat().st_mtime_ns for n in (1, 2, 3)}
    # touching every input (same bytes) changes nothing: a plain resume
    for p in src.iterdir():
        os.utime(p, (time.time() + 5, time.time() + 5))
    res = _dec(src, out)
    assert res.written == [] and res.skipped == [1, 2, 3]
    # the user replaces frame 2 at the same path
    write_image(src / "shot_0002.png", 255 - gradient_rgb(24, 32, 99))
    with pytest.raises(JobError, match=r"input of 1 decompose frame.*frames 2;.*gbuffer_0002\.exr.*"
                                       r"--overwrite to recompute exactly those 1 frame.*2 frame\(s\) whose "
                                       r"input is unchanged are kept"):
        _dec(src, out)
    res = _dec(src, out, overwrite=True)
    assert res.written == [2] and res.skipped == [1, 3]
    assert {n: contract.frame_path(out, n).stat().st_mtime_ns for n in (1, 3)} == {1: mt[1], 3: mt[3]}
    assert contract.read_meta(contract.frame_path(out, 2))["input_hash"] == _sha(src / "shot_0002.png")[:16]


def test_replaced_movie_at_the_same_path_is_not_resumed(tmp_path):
    from footage_util import write_movie

    clip = tmp_path / "clip.mp4"
    write_movie(clip, [gradient_rgb(24, 32, t) for t in range(3)])
    out = tmp_path / "out"
    _dec(clip, out, frames="1-2")
    stat = clip.stat()
    write_movie(clip, [255 - gradient_rgb(24, 32, t) for t in range(3)])
    os.utime(clip, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime restored
    with pytest.raises(JobError, match=r"input of 2 decompose frame"):
        _dec(clip, out)


def test_touched_gbuffers_resume_a_restyle(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=3, h=24, w=32)
    out = tmp_path / "rs"
    restyle(gb, out, "fog", progress=io.StringIO())
    for p in gb.glob("gbuffer_*.exr"):
        os.utime(p, (time.time() + 5, time.time() + 5))
    res = restyle(gb, out, "fog", progress=io.StringIO())
    assert res.written == [] and sorted(res.skipped) == [1, 2, 3]
