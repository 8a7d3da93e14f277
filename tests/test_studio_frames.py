"""Frames (issue 38): a movie's start-frame offset (1001) with handles, and the frame
rate and timecode in the header of the G-buffers and the restyle."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backend import contract, decompose, restyle
from backend.footage import FootageError

from cli_util import run_cli
from footage_util import gradient_rgb, write_movie


def _header(path):
    import OpenEXR

    with OpenEXR.File(str(path), header_only=True) as f:
        return dict(f.parts[0].header)


def _tc(t):
    return t.hours, t.minutes, t.seconds, t.frame


def test_movie_starts_at_1001_with_handles_and_timecode(tmp_path):
    clip = write_movie(tmp_path / "plate.mp4", [gradient_rgb(48, 64, i) for i in range(6)], rate=24)
    decompose(clip, tmp_path / "gb", estimator="embedded", start_frame=1001, handles=1)
    assert sorted(contract.list_frames(tmp_path / "gb")) == list(range(1001, 1007))
    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    assert man["cut"] == [1002, 1005] and man["source"]["first_number"] == 1001
    for n in range(1001, 1007):
        p = contract.frame_path(tmp_path / "gb", n)
        hdr = _header(p)
        assert hdr["framesPerSecond"] == 24
        assert _tc(hdr["timeCode"]) == (0, 0, n // 24, n % 24)  # 1001 -> 00:00:41:17
        meta = contract.read_meta(p)
        assert meta["frame_number"] == n and meta["frame_index"] == n - 1001
        assert meta["handle"] is (n in (1001, 1006))
    # --frames counts in the offset numbers; restyle keeps numbers, rate and timecode
    restyle(tmp_path / "gb", tmp_path / "fog", prompt="dense fog", frames="1002-1003")
    out = sorted((tmp_path / "fog").rglob("restyle_*.exr"))
    assert [p.name for p in out] == ["restyle_1002.exr", "restyle_1003.exr"]
    hdr = _header(out[0])
    assert hdr["framesPerSecond"] == 24 and _tc(hdr["timeCode"]) == (0, 0, 41, 18)


def test_start_frame_is_for_movies_and_handles_must_leave_a_cut(tmp_path):
    import cv2

    seq = tmp_path / "seq"
    seq.mkdir()
    for n in (1, 2, 3):
        cv2.imwrite(str(seq / f"s_{n:04d}.png"), gradient_rgb(16, 16, n))
    with pytest.raises(FootageError, match="--start-frame is for movies"):
        decompose(seq, tmp_path / "gb", estimator="embedded", start_frame=1001)
    with pytest.raises(ValueError, match="nothing is left between"):
        decompose(seq, tmp_path / "gb2", estimator="embedded", handles=2)


def test_overscan_is_kept_through_decompose_and_restyle(tmp_path):
    """A plate rendered with overscan (data window 80x60 around a 64x48 display window):
    the G-buffers and the restyle keep both windows and every overscan pixel."""
    import OpenEXR

    plate = tmp_path / "plate"
    plate.mkdir()
    rng = np.random.default_rng(3)
    vals = []
    for n in (1, 2):
        rgb = (0.2 + 0.6 * rng.random((60, 80, 3))).astype(np.float32)
        vals.append(rgb)
        hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
               "dataWindow": ((-8, -6), (71, 53)), "displayWindow": ((0, 0), (63, 47))}
        with OpenEXR.File(hdr, {c: np.ascontiguousarray(rgb[..., i]) for i, c in enumerate("RGB")}) as f:
            f.write(str(plate / f"plate.{n:04d}.exr"))
    events = []
    decompose(plate, tmp_path / "gb", estimator="embedded", progress=events.append)
    assert not [e for e in events if e["event"] == "warning" and "window" in e["message"]]
    for n in (1, 2):
        p = contract.frame_path(tmp_path / "gb", n)
        hdr = _header(p)
        assert [list(map(int, c)) for c in hdr["dataWindow"]] == [[-8, -6], [71, 53]]
        assert [list(map(int, c)) for c in hdr["displayWindow"]] == [[0, 0], [63, 47]]
        fr = contract.read_frame(p, validate=True)
        assert fr.shape == (60, 80)
        np.testing.assert_allclose(fr.combined[..., :3], vals[n - 1], rtol=1e-3)
    restyle(tmp_path / "gb", tmp_path / "fog", prompt="dense fog")
    out = sorted((tmp_path / "fog").rglob("restyle_*.exr"))
    hdr = _header(out[0])
    assert [list(map(int, c)) for c in hdr["dataWindow"]] == [[-8, -6], [71, 53]]
    assert [list(map(int, c)) for c in hdr["displayWindow"]] == [[0, 0], [63, 47]]


def test_overscan_field_of_view_spans_the_display_window(tmp_path):
    """A 256x144 display window with 16 px overscan on every side (data 288x176): the
    assumed 60 deg field of view spans the display width (fx = 128 / tan 30 deg = 221.7,
    not 249.4 over the data width) and the principal point is the display centre in
    data-window pixels (16 + 128, 16 + 72)."""
    import math

    import OpenEXR

    plate = tmp_path / "plate"
    plate.mkdir()
    rgb = (0.2 + 0.6 * np.random.default_rng(4).random((176, 288, 3))).astype(np.float32)
    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
           "dataWindow": ((-16, -16), (271, 159)), "displayWindow": ((0, 0), (255, 143))}
    with OpenEXR.File(hdr, {c: np.ascontiguousarray(rgb[..., i]) for i, c in enumerate("RGB")}) as f:
        f.write(str(plate / "plate.0001.exr"))
    decompose(plate, tmp_path / "gb", estimator="embedded")
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 1))
    fx = 128 / math.tan(math.radians(30))
    print("intrinsics", fr.meta["intrinsics"])
    np.testing.assert_allclose(fr.meta["intrinsics"], [fx, fx, 144, 88], rtol=1e-6)


def _movie_with_timecode(path, tc, n=3):
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=24)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.metadata["timecode"] = tc  # FFmpeg's MOV muxer writes a tmcd track from it
        for i in range(n):
            for p in s.encode(av.VideoFrame.from_ndarray(gradient_rgb(48, 64, i), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_timecode_from_the_source_or_timecode_option(tmp_path):
    """A MOV whose timecode track says 01:00:10:05 at its first frame: frame 1001 (the first,
    --start-frame 1001) gets 01:00:10:05 and 1003 01:00:10:07, not the frame-number count
    (00:00:41:17); restyle keeps it. --timecode overrides the source's; a malformed one is
    refused with one line (exit 2)."""
    clip = _movie_with_timecode(tmp_path / "plate.mov", "01:00:10:05")
    decompose(clip, tmp_path / "gb", estimator="embedded", start_frame=1001)
    got = {n: _tc(_header(contract.frame_path(tmp_path / "gb", n))["timeCode"]) for n in (1001, 1003)}
    assert got == {1001: (1, 0, 10, 5), 1003: (1, 0, 10, 7)}
    restyle(tmp_path / "gb", tmp_path / "fog", prompt="dense fog", frames="1003-1003")
    out = sorted((tmp_path / "fog").rglob("restyle_1003.exr"))[0]
    assert _tc(_header(out)["timeCode"]) == (1, 0, 10, 7)
    decompose(clip, tmp_path / "gb2", estimator="embedded", timecode="10:00:00:23", frames="2-2")
    assert _tc(_header(contract.frame_path(tmp_path / "gb2", 2))["timeCode"]) == (10, 0, 1, 0)
    r = run_cli("decompose", clip, "--out", tmp_path / "gb3", "--timecode", "10:00:00;23")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "HH:MM:SS:FF" in r.stderr, r.stderr
