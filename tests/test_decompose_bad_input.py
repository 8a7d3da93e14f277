"""Bad input: each case gives either a clear error (file + frame) or a correct output."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from backend import colour, contract
from backend.footage import FootageError, open_footage
from backend.jobs.decompose import decompose
from backend.jobs.runner import JobError
from cli_util import cli_cmd, cli_env, last_event, run_cli
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_exr, write_image, write_movie

register_tiny()


def _dec(src, out, **kw):
    kw.setdefault("estimator", "tiny")
    kw.setdefault("max_size", 64)
    return decompose(src, out, stream=io.StringIO(), **kw)


def _one(out, n=1):
    return contract.read_frame(contract.frame_path(out, n), validate=True)


# ------------------------------------------------------------------ clear errors


def test_corrupt_and_truncated_movie(tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(os.urandom(4096))
    p = run_cli("decompose", junk, "--out", tmp_path / "o1", tiny=True)
    assert p.returncode == 2
    assert p.stderr.startswith(f"error: {junk}: cannot open as a movie")
    assert last_event(p.stdout)["event"] == "error"
    good = write_movie(tmp_path / "good.mp4", [gradient_rgb(48, 64, t) for t in range(4)])
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # mp4 index lost
    with pytest.raises(FootageError, match=str(cut)):
        open_footage(cut)
    assert not (tmp_path / "o1").exists() or not list((tmp_path / "o1").glob("*.exr"))


def test_truncated_png_in_sequence_names_file_and_frame(tmp_path):
    seq = tmp_path / "seq"
    seq.mkdir()
    write_image(seq / "a_0001.png", gradient_rgb(8, 8))
    data = write_image(seq / "a_0002.png", gradient_rgb(8, 8, 3)).read_bytes()
    (seq / "a_0002.png").write_bytes(data[:20])
    with pytest.raises(FootageError, match=r"a_0002\.png \(frame 2\): not a readable image"):
        _dec(seq, tmp_path / "o")
    assert list(contract.list_frames(tmp_path / "o")) == [1]  # the good frame is complete


def test_audio_only_and_zero_frame_files(tmp_path):
    import av

    audio = tmp_path / "audio.m4a"
    with av.open(str(audio), "w") as c:
        s = c.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for _ in range(4):
            for pk in s.encode(frame):
                c.mux(pk)
        for pk in s.encode():
            c.mux(pk)
    with pytest.raises(FootageError, match=r"audio\.m4a: no video stream \(streams: audio\)"):
        open_footage(audio)
    empty = tmp_path / "empty.mkv"
    with av.open(str(empty), "w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        c.start_encoding()
    with pytest.raises(FootageError, match=r"empty\.mkv: .*(no decodable video frames|cannot open)"):
        open_footage(empty)


def test_unsupported_codec(tmp_path):
    good = write_movie(tmp_path / "c.mkv", [gradient_rgb(48, 64, t) for t in range(2)])
    data = good.read_bytes()
    assert data.count(b"V_MPEG4/ISO/AVC") == 1
    bad = tmp_path / "alien.mkv"
    bad.write_bytes(data.replace(b"V_MPEG4/ISO/AVC", b"V_QUUX/ISO/ABCD"))
    p = run_cli("decompose", bad, "--out", tmp_path / "o", tiny=True)
    assert p.returncode == 2 and f"{bad}: unsupported video codec" in p.stderr


def test_nan_inf_in_exr_is_rejected_with_file_and_frame(tmp_path):
    seq = tmp_path / "renders"
    seq.mkdir()
    rgb = np.ones((6, 8, 3), np.float32)
    write_exr(seq / "r_0001.exr", rgb)
    bad = rgb.copy()
    bad[2, 3, 1] = np.nan
    bad[0, 0, 0] = np.inf
    write_exr(seq / "r_0002.exr", bad)
    with pytest.raises(FootageError, match=r"r_0002\.exr \(frame 2\): 2 NaN/Inf value\(s\) in RGB"):
        _dec(seq, tmp_path / "o")


# ------------------------------------------------------------------ correct output


def test_rgba_png_alpha_goes_to_combined(tmp_path):
    img = np.zeros((9, 11, 4), np.uint8)
    img[..., :3] = 100
    img[..., 3] = 255
    img[:, :4, 3] = 0
    src = write_image(tmp_path / "rgba.png", img)
    _dec(src, tmp_path / "o")
    fr = _one(tmp_path / "o")
    assert fr.shape == (9, 11)
    np.testing.assert_allclose(fr.combined[:, :4, 3], 0.0)
    np.testing.assert_allclose(fr.combined[:, 4:, 3], 1.0)
    # premultiplied: transparent columns hold 0, opaque ones the linearised colour
    np.testing.assert_array_equal(fr.combined[:, :4, :3], 0.0)
    np.testing.assert_allclose(fr.combined[:, 4:, :3], colour.srgb_to_linear(np.full((9, 7, 3), 100 / 255)),
                               rtol=1e-3)  # half float on disk


@pytest.mark.parametrize("kind", ["png16", "tiff16", "gray8"])
def test_16bit_and_grayscale_images(tmp_path, kind):
    if kind == "png16":
        img = gradient_rgb(10, 12, dtype=np.uint16)
        src, want = write_image(tmp_path / "a.png", img), img / 65535.0
    elif kind == "tiff16":
        import tifffile

        img = gradient_rgb(10, 12, dtype=np.uint16)
        src = tmp_path / "a.tiff"
        tifffile.imwrite(src, img, photometric="rgb")
        want = img / 65535.0
    else:
        img = (np.arange(120).reshape(10, 12) * 2).astype(np.uint8)
        src, want = write_image(tmp_path / "g.png", img), np.repeat(img[..., None] / 255.0, 3, -1)
    _dec(src, tmp_path / "o")
    fr = _one(tmp_path / "o")
    np.testing.assert_allclose(fr.combined[..., :3], colour.srgb_to_linear(want), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("h,w", [(9, 1), (1, 13), (23, 37), (8, 4100)])
def test_degenerate_odd_and_huge_sizes(tmp_path, h, w):
    src = write_image(tmp_path / f"f {h}x{w}.png", gradient_rgb(h, w))
    _dec(src, tmp_path / "o", max_size=64)
    fr = _one(tmp_path / "o")
    assert fr.shape == (h, w)  # full size out, whatever the processing size
    man = contract.read_manifest(tmp_path / "o")
    pw, ph = man["output"]["processing_size"]
    assert max(pw, ph) <= 64 and min(pw, ph) >= 1


def test_odd_size_movie_ffv1(tmp_path):
    frames = [gradient_rgb(23, 37, t) for t in range(2)]
    src = write_movie(tmp_path / "odd.mkv", frames, codec="ffv1", pix_fmt="yuv444p")
    _dec(src, tmp_path / "o")
    assert _one(tmp_path / "o", 2).shape == (23, 37)


def test_portrait_video_with_rotation(tmp_path):
    img = gradient_rgb(48, 64)
    src = write_movie(tmp_path / "phone.mp4", [img, img], rotation=-90)  # the usual phone tag
    _dec(src, tmp_path / "o", frames="1-1")
    fr = _one(tmp_path / "o")
    assert fr.shape == (64, 48)
    man = contract.read_manifest(tmp_path / "o")
    assert man["source"]["rotation"] == 270 and (man["source"]["width"], man["source"]["height"]) == (48, 64)
    assert fr.meta["rotation"] == 270


def test_sar_recorded_in_header(tmp_path):
    src = write_movie(tmp_path / "ana.mkv", [gradient_rgb(48, 64)], sar=Fraction(2, 1))
    _dec(src, tmp_path / "o")
    fr = _one(tmp_path / "o")
    assert fr.meta["sar"] == "2/1" and fr.shape == (48, 64)
    fx, fy = fr.meta["intrinsics"][:2]
    assert fy == pytest.approx(2 * fx)


def test_non_ascii_paths_with_spaces(tmp_path):
    d = tmp_path / "Füßé 素材 folder"
    d.mkdir()
    src = write_movie(d / "clip ü.mp4", [gradient_rgb(48, 64, t) for t in range(2)])
    out = tmp_path / "sortie é 出力"
    p = run_cli("decompose", src, "--out", out, "--estimator", "tiny", "--max-size", "32", tiny=True)
    assert p.returncode == 0, p.stderr
    assert list(contract.list_frames(out)) == [1, 2]
    assert _one(out).meta["source"] == str(src)


# ------------------------------------------------------------------ output problems


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, ro: bool = False):
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if ro else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


def test_output_folder_not_writable(tmp_path):
    src = write_image(tmp_path / "a.png", gradient_rgb(8, 8))
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    p = run_cli("decompose", src, "--out", blocker / "out", "--estimator", "tiny", tiny=True)
    assert p.returncode == 1
    assert p.stderr.startswith(f"error: output folder {blocker / 'out'} is not writable")
    with _tmpfs(tmp_path / "ro", "64k", ro=True) as ro:
        if ro is None:  # no mount permission: the regular-file case above still ran
            return
        with pytest.raises(JobError, match="is not writable .*[Rr]ead-only"):
            _dec(src, ro / "out")


def test_full_disk_leaves_no_partial_files(tmp_path):
    noise = (np.random.default_rng(0).random((96, 128, 3)) * 255).astype(np.uint8)
    src = write_image(tmp_path / "noise.png", noise)
    with _tmpfs(tmp_path / "small", "40k") as small:
        if small is not None:
            out = small / "o"
            with pytest.raises(JobError, match=r"gbuffer_0001\.exr \(frame 1\): no space left on device"):
                _dec(src, out, max_size=None)
            assert [p.name for p in out.iterdir()] == []
            return
    # fallback without mount permission: a file-size limit makes writes fail (EFBIG)
    out = tmp_path / "o"
    p = subprocess.run(["bash", "-c", 'ulimit -f 16; exec "$@"', "x",
                        *cli_cmd("decompose", src, "--out", out, "--estimator", "tiny", tiny=True)],
                       env=cli_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "frame 1" in p.stderr
    assert not [q for q in out.iterdir() if q.suffix == ".exr" or q.name.startswith(".tmp")]
