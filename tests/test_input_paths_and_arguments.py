"""Issue 36 (reliability round 4 of the hostile trials): hashes read back as numbers
(item 10), files that are not regular files (FIFOs) everywhere a path is read, deep JSON,
non-UTF-8 path bytes, restyle --frames clipping, the Python API's argument checks, the
farm's false "lacks fields" warning, --option and non-ASCII digits, and the decisions
of item 9 (docs/reliability.md, *Decisions (issue 36)*). Every subprocess is bounded
in time.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.jobs import decompose as decompose_mod
from gbuffer_util import random_frame
from reliability_util import tiny_decompose as _dec, write_sequence as _sequence

#: 16-hex digests that JSON reads as numbers: ``inf``, an int, ``0.0`` (item 10)
NUMBERISH = ["75942e4171335134", "1234567890123456", "0e12345678901234"]


# ------------------------------------------------------ item 10: text fields stay text


@pytest.mark.parametrize("text", NUMBERISH + ["11111e1111111111", "true", "null", '"quoted"', "[1]", "1/1"])
def test_header_text_fields_read_back_as_the_same_text(tmp_path, text):
    frame = random_frame()
    frame.meta.update(settings_hash=text, input_hash=text, source=text, note=text, source_file=text)
    p = contract.write_frame(tmp_path / "gbuffer_0001.exr", frame)
    meta = contract.read_meta(p)
    for key in ("settings_hash", "input_hash", "source", "note", "source_file"):
        assert meta[key] == text and isinstance(meta[key], str), (key, meta[key])
    assert decompose_mod.read_settings_hash(p) == text
    assert decompose_mod.read_input_hash(p) == text
    assert contract.read_frame(p).meta["settings_hash"] == text


def test_headers_written_before_the_fix_keep_their_hashes_as_text(tmp_path):
    """Older files stored text raw (``gbuffer/settings_hash = 75942e4171335134``): the
    text fields still read back as text, numbers still as numbers."""
    import OpenEXR

    p = tmp_path / "gbuffer_0001.exr"
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
              "gbuffer/settings_hash": NUMBERISH[0], "gbuffer/input_hash": NUMBERISH[2],
              "gbuffer/source": "1e5", "gbuffer/frame_number": "3", "gbuffer/depth_near": "0.5"}
    with OpenEXR.File(header, {"RGB": np.zeros((2, 2, 3), np.float32)}) as f:
        f.write(str(p))
    meta = contract.read_meta(p)
    assert meta["settings_hash"] == NUMBERISH[0] and meta["input_hash"] == NUMBERISH[2]
    assert meta["source"] == "1e5"
    assert meta["frame_number"] == 3 and meta["depth_near"] == 0.5


def _force_settings_hash(monkeypatch, value):
    from backend.jobs import frame_run, runner

    monkeypatch.setattr(runner, "settings_hash", lambda settings: value)
    monkeypatch.setattr(frame_run, "settings_hash", lambda settings: value)


def test_a_settings_hash_that_looks_like_a_number_resumes_and_never_mixes(tmp_path, monkeypatch):
    """The newcomer's report: settings hash ``75942e4171335134`` read back as ``inf``, so
    the folder was refused on resume; and ``11111e1111111111`` (also ``inf``) was taken
    as the same settings: a silent mix-up."""
    from backend.errors import JobError

    src = _sequence(tmp_path / "seq", range(1, 4))
    out = tmp_path / "gb"
    _force_settings_hash(monkeypatch, NUMBERISH[0])
    _dec(src, out, frames="1-2")
    r = _dec(src, out)  # resume: frames 1-2 kept, 3 computed
    assert r.skipped == [1, 2] and r.written == [3]
    _force_settings_hash(monkeypatch, "11111e1111111111")
    with pytest.raises(JobError, match="other settings"):
        _dec(src, out)


@pytest.mark.parametrize("digest", NUMBERISH)
def test_an_input_fingerprint_that_looks_like_a_number_resumes(tmp_path, monkeypatch, digest):
    from backend.jobs import fingerprint

    monkeypatch.setattr(fingerprint, "file_sha256", lambda path: digest + "0" * 48)
    src = _sequence(tmp_path / "seq", range(1, 3))
    out = tmp_path / "gb"
    _dec(src, out)
    man = json.loads((out / "manifest.json").read_text())
    assert {e["input"] for e in man["frames"]} == {digest}
    (out / "manifest.json").unlink()  # the header is all that is left to compare with
    r = _dec(src, out)
    assert r.skipped == [1, 2] and r.written == []


# ------------------------------------- item 1: a FIFO (or device, folder) wherever a file is read


def _cli(*args, timeout=120):
    """The CLI with the tiny estimators, bounded in time: a read that blocks fails the test."""
    import subprocess

    from cli_util import cli_cmd, cli_env

    return subprocess.run(cli_cmd(*args, tiny=True), env=cli_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _fifo(path: Path) -> Path:
    import os

    if path.exists():
        path.unlink()
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def fifo_base(tmp_path_factory):
    """A sequence and its decompose folder, copied by each FIFO case."""
    base = tmp_path_factory.mktemp("fifo")
    src = _sequence(base / "seq", range(1, 3))
    _dec(src, base / "gb")
    return base


_FIFO_CASES = {
    # name: (file made a FIFO, relative to the case folder; argv)
    "manifest on resume": ("gb/manifest.json", ["decompose", "{seq}", "--estimator", "tiny", "--max-size", "32",
                                                "--out", "{gb}"]),
    "manifest with --overwrite": ("gb/manifest.json", ["decompose", "{seq}", "--estimator", "tiny", "--max-size",
                                                       "32", "--out", "{gb}", "--overwrite"]),
    "manifest of restyle's input": ("gb/manifest.json", ["restyle", "{gb}", "--out", "{case}/rs", "--no-mp4"]),
    "a G-buffer frame of restyle's input": ("gb/gbuffer_0002.exr", ["restyle", "{gb}", "--out", "{case}/rs",
                                                                    "--no-mp4"]),
    "a frame in the output folder": ("gb/gbuffer_0002.exr", ["decompose", "{seq}", "--estimator", "tiny",
                                                             "--max-size", "32", "--out", "{gb}"]),
    "cameras file": ("cams.json", ["decompose", "{seq}", "--estimator", "tiny", "--max-size", "32",
                                   "--out", "{case}/o", "--cameras", "{case}/cams.json"]),
    "depth anchors": ("anchors.npz", ["decompose", "{seq}", "--estimator", "tiny", "--max-size", "32",
                                      "--out", "{case}/o", "--depth-anchors", "{case}/anchors.npz"]),
    "a manifest part": ("gb/.gbuffer_parts/1-2.json", ["farm", "merge", "{gb}"]),
    "lights file": ("lights.json", ["restyle", "{gb}", "--out", "{case}/rs", "--no-mp4", "--lights",
                                    "{case}/lights.json"]),
    "the input image": ("one.png", ["decompose", "{case}/one.png", "--estimator", "tiny", "--out", "{case}/o"]),
}


@pytest.mark.parametrize("case", sorted(_FIFO_CASES))
def test_a_fifo_where_a_file_is_read_is_refused_not_waited_on(tmp_path, fifo_base, case):
    import shutil

    rel, argv = _FIFO_CASES[case]
    shutil.copytree(fifo_base / "seq", tmp_path / "seq")
    shutil.copytree(fifo_base / "gb", tmp_path / "gb")
    fifo = tmp_path / rel
    fifo.parent.mkdir(parents=True, exist_ok=True)
    _fifo(fifo)
    r = _cli(*[a.format(seq=tmp_path / "seq", gb=tmp_path / "gb", case=tmp_path) for a in argv], timeout=90)
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    if case == "a frame in the output folder":  # a file with our name we did not write: the one rule
        assert r.returncode == 1 and "never replaced or removed" in r.stderr and fifo.name in r.stderr, r.stderr
        return
    assert r.returncode == 2, (case, r.returncode, r.stderr[-2000:])
    assert str(fifo) in r.stderr and "FIFO" in r.stderr, r.stderr
    assert fifo.exists()  # never removed


# --------------------------------------------------- item 2: deep JSON nesting names the file

_DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("case", ["manifest on resume", "manifest of restyle's input", "cameras file",
                                  "a manifest part", "lights file"])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path, fifo_base, case):
    import shutil

    rel, argv = _FIFO_CASES[case]
    shutil.copytree(fifo_base / "seq", tmp_path / "seq")
    shutil.copytree(fifo_base / "gb", tmp_path / "gb")
    bad = tmp_path / rel
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(_DEEP if "manifest" not in rel else '{"a": ' + _DEEP + "}")
    r = _cli(*[a.format(seq=tmp_path / "seq", gb=tmp_path / "gb", case=tmp_path) for a in argv], timeout=90)
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().count("\n") == 0 and str(bad) in r.stderr and "nested" in r.stderr, r.stderr[-2000:]
    # a damaged file in the output folder is a run-time failure (1), an input's is a bad argument (2)
    assert r.returncode == (1 if case in ("manifest on resume", "a manifest part") else 2), (r.returncode, r.stderr)


def test_json_nested_past_the_bound_is_refused_and_a_manifest_is_not(tmp_path):
    from backend.input_files import MAX_JSON_DEPTH, InputError, loads_json

    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x.json") is not None
    with pytest.raises(InputError, match=r"x.json: .*nested deeper than"):
        loads_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x.json")


# ------------------------------------------- item 4: restyle --frames clipped at either end warns


@pytest.mark.parametrize("frames, used", [("0-2", "1-2"), ("3-99", "3-4"), ("0-99", "1-4"), ("0-", "1-4")])
def test_restyle_frames_clipped_at_either_end_warn_the_same_way(tmp_path, frames, used):
    import io

    from backend.jobs.restyle import restyle
    from cli_util import events

    src = _sequence(tmp_path / "seq", range(1, 5))
    _dec(src, tmp_path / "gb")
    log = io.StringIO()
    r = restyle(tmp_path / "gb", tmp_path / "rs", "fog", frames=frames, mp4=False, progress=log)
    warn = [e["message"] for e in events(log.getvalue()) if e["event"] == "warning"]
    assert len(warn) == 1 and f"--frames {frames}:" in warn[0] and f"clipped to {used}" in warn[0], warn
    assert "frames 1-4" in warn[0]
    assert r.written == list(range(int(used[0]), int(used[-1]) + 1))


# ------------------------------------------ item 5: the Python API checks every argument


def _rgb(h=24, w=32):
    from footage_util import gradient_rgb

    return gradient_rgb(h, w).astype(np.float32) / 255.0


@pytest.mark.parametrize("bad, words", [
    ("nan_rgb", "frame 3: 1 NaN/Inf value(s) in RGB"), ("inf_rgb", "frame 3: 1 NaN/Inf value(s) in RGB"),
    ("nan_alpha", "frame 3: 1 NaN/Inf value(s) in alpha"), ("complex", "real numbers"),
    ("object", "real numbers"), ("alpha_range", "alpha must be in [0, 1]"), ("shape", "H x W x 3")])
def test_decomposer_frame_refuses_bad_pixels_naming_the_frame(bad, words):
    from backend import Decomposer
    from backend.arguments import ArgumentError

    dec = Decomposer("tiny", processing_resolution=32)
    rgb, alpha = _rgb(), None
    if bad == "nan_rgb":
        rgb[3, 4, 1] = np.nan
    elif bad == "inf_rgb":
        rgb[0, 0, 0] = np.inf
    elif bad == "nan_alpha":
        alpha = np.ones(rgb.shape[:2], np.float32)
        alpha[2, 2] = np.nan
    elif bad == "complex":
        rgb = rgb.astype(np.complex64)
    elif bad == "object":
        rgb = rgb.astype(object)
    elif bad == "alpha_range":
        alpha = np.full(rgb.shape[:2], 1.5, np.float32)
    elif bad == "shape":
        rgb = rgb[..., :2]
    with pytest.raises(ArgumentError, match=re.escape(words)) as e:
        dec.frame(rgb, alpha=alpha, number=3)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TypeError)
    assert dec.frame(_rgb(), number=3).combined.shape == (24, 32, 4)  # nothing left behind


@pytest.mark.parametrize("number", ["x", "3", 2.0, True, -1])
def test_decomposer_frame_number_must_be_a_whole_number_and_leaves_no_state(number):
    from backend import Decomposer
    from backend.arguments import ArgumentError

    dec = Decomposer("tiny", processing_resolution=32)
    with pytest.raises(ArgumentError, match="number must be"):
        dec.frame(_rgb(), number=number)
    f1 = dec.frame(_rgb(), number=1)  # the Decomposer still works
    f2 = dec.frame(_rgb())
    assert f1.meta and f2.combined.shape == (24, 32, 4) and dec.last_number == 2


@pytest.mark.parametrize("kw, name", [
    (dict(processing_resolution="64"), "processing_resolution"), (dict(processing_resolution="６４"),
                                                                   "processing_resolution"),
    (dict(processing_resolution=64.0), "processing_resolution"), (dict(stabilize="yes"), "stabilize"),
    (dict(strength="0.5"), "strength"), (dict(hfov_deg=float("nan")), "hfov_deg"), (dict(sar="1"), "sar"),
    (dict(intrinsics=(1, 2)), "intrinsics"), (dict(estimator_options=[1]), "estimator_options"),
    (dict(estimator=3), "estimator")])
def test_decomposer_arguments_are_checked_by_type(kw, name):
    from backend import Decomposer
    from backend.arguments import ArgumentError

    kw = dict({"estimator": "tiny"}, **kw)
    with pytest.raises(ArgumentError, match=f"^{name}"):
        Decomposer(kw.pop("estimator"), **kw)


@pytest.mark.parametrize("kw, name", [
    (dict(cancel="yes"), "cancel"), (dict(cancel=True), "cancel"), (dict(processing_resolution="64"),
                                                                    "processing_resolution"),
    (dict(frames=5), "frames"), (dict(overwrite="no"), "overwrite"), (dict(warmup="2"), "warmup"),
    (dict(progress=5), "progress"), (dict(estimator_options="x"), "estimator_options"),
    (dict(cameras=5), "cameras"), (dict(stabilize=1), "stabilize")])
def test_decompose_arguments_are_checked_before_anything_is_written(tmp_path, kw, name):
    from backend.arguments import ArgumentError
    from backend.jobs.decompose import decompose

    src = _sequence(tmp_path / "seq", range(1, 3))
    with pytest.raises(ArgumentError, match=f"^{name}"):
        decompose(src, tmp_path / "out", estimator="tiny", **kw)
    with pytest.raises(ArgumentError, match="^out_dir"):
        decompose(src, 123, estimator="tiny")
    assert not (tmp_path / "out").exists()


def test_a_cancel_callable_is_accepted_and_cancels(tmp_path):
    from backend.errors import JobCancelled

    src = _sequence(tmp_path / "seq", range(1, 4))
    r = _dec(src, tmp_path / "a", cancel=lambda: False)
    assert r.written == [1, 2, 3]
    with pytest.raises(JobCancelled):
        _dec(src, tmp_path / "b", cancel=lambda: True)


@pytest.mark.parametrize("pos, kw, name", [
    ((123,), {}, "prompt"), (("fog",), dict(cancel="yes"), "cancel"), (("fog",), dict(frames=2), "frames"),
    (("fog",), dict(mp4="no"), "mp4"), (("fog",), dict(renderer_options=["a"]), "renderer_options"),
    (("fog",), dict(reference_dir=7), "reference_dir")])
def test_restyle_arguments_are_checked_before_anything_is_written(tmp_path, fifo_base, pos, kw, name):
    from backend.arguments import ArgumentError
    from backend.jobs.restyle import restyle

    with pytest.raises(ArgumentError, match=f"^{name}"):
        restyle(fifo_base / "gb", tmp_path / "rs", *pos, **kw)
    assert not (tmp_path / "rs").exists()


# ------------------------------------------------ item 7: an unknown --option is exit 2, one line


@pytest.mark.parametrize("argv, flag", [
    (["restyle", "{gb}", "--out", "{case}/rs", "--no-mp4", "--option", "nonsense_key=1"], "nonsense_key"),
    (["decompose", "{seq}", "--estimator", "tiny", "--out", "{case}/o", "--estimator-option", "bogus=2"], "bogus")])
def test_an_unknown_option_key_is_exit_2_in_one_line(tmp_path, fifo_base, argv, flag):
    r = _cli(*[a.format(seq=fifo_base / "seq", gb=fifo_base / "gb", case=tmp_path) for a in argv], timeout=90)
    assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
    assert r.stderr.strip().count("\n") == 0 and flag in r.stderr and "takes no option" in r.stderr, r.stderr
    assert "TypeError" not in r.stderr


# ------------------------------------------- item 8: ASCII digits for every number option


@pytest.mark.parametrize("argv", [
    ["decompose", "{seq}", "--out", "{case}/o", "--processing-resolution", "６４"],
    ["decompose", "{seq}", "--out", "{case}/o", "--max-size", "٦٤"],
    ["decompose", "{seq}", "--out", "{case}/o", "--warmup", "２", "--manifest-part", "--frames", "1-2"],
    ["decompose", "{seq}", "--out", "{case}/o", "--mv-neighbours", "３"],
    ["decompose", "{seq}", "--out", "{case}/o", "--hfov", "６０"],
    ["decompose", "{seq}", "--out", "{case}/o", "--stabilize-strength", "nan"],
    ["decompose", "{seq}", "--out", "{case}/o", "--processing-resolution", "1_000"],
    ["restyle", "{gb}", "--out", "{case}/rs", "--seed", "７"],
    ["restyle", "{gb}", "--out", "{case}/rs", "--steps", "２"],
    ["farm", "local", "decompose", "{seq}", "--out", "{case}/f", "--chunk", "２"],
    ["farm", "local", "decompose", "{seq}", "--out", "{case}/f", "--chunk", "2", "--overlap", "１"]])
def test_number_options_take_ascii_digits_only(tmp_path, fifo_base, argv):
    r = _cli(*[a.format(seq=fifo_base / "seq", gb=fifo_base / "gb", case=tmp_path) for a in argv], timeout=90)
    assert r.returncode == 2, (argv, r.returncode, r.stderr[-1500:])
    assert "Traceback" not in r.stderr and "ASCII" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


# -------------------------------- item 6: a clean stabilised farm run warns of no missing fields


@pytest.mark.parametrize("overlap", ["chain", "2"])
def test_a_clean_stabilized_farm_run_reports_no_incomplete_entries(tmp_path, overlap):
    from cli_util import events

    src = _sequence(tmp_path / "seq", range(1, 6))
    out = tmp_path / "f"
    r = _cli("farm", "local", "decompose", src, "--estimator", "tiny", "--max-size", "32", "--stabilize",
             "--chunk", "2", "--overlap", overlap, "--out", out, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    warn = [e["message"] for e in events(r.stdout) if e["event"] == "warning"]
    assert not any("lack fields" in w for w in warn), warn
    man = json.loads((out / "manifest.json").read_text())
    assert "frames_incomplete_entries" not in man and man["complete"] is True
    assert "flicker" not in man["frames"][0] and "flicker" in man["frames"][1]  # frame 1 has no previous frame


# ------------------------------------------- item 3: path bytes that are not UTF-8


def _bytes_cli(*args, timeout=180):
    import os
    import subprocess

    from cli_util import cli_cmd, cli_env

    cmd = [os.fsencode(a) for a in cli_cmd(tiny=True)] + [a if isinstance(a, bytes) else os.fsencode(str(a))
                                                           for a in args]
    return subprocess.run(cmd, env=cli_env(), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_non_utf8_bytes_in_footage_out_and_prompt_paths_work_end_to_end(tmp_path, fifo_base, footage):
    import os
    import shutil

    from cli_util import events

    root = os.fsencode(str(tmp_path))
    seq = root + b"/bad\xff\xfe name"
    shutil.copytree(os.fsencode(str(fifo_base / "seq")), seq)
    out, rs = root + b"/out\xff", root + b"/rs\xfe"
    for _ in range(2):  # the second run resumes: headers read back from the non-UTF-8 folder
        r = _bytes_cli(b"decompose", seq, b"--estimator", b"tiny", b"--max-size", b"32", b"--out", out)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-1500:]
    assert events(r.stdout.decode())[-1]["skipped"] == 2
    man = json.loads(open(out + b"/manifest.json", "rb").read())
    assert os.fsencode(man["source"]["path"]) == seq
    assert os.fsencode(contract.read_meta(os.fsdecode(out + b"/gbuffer_0001.exr"))["source"]) == seq
    r = _bytes_cli(b"restyle", out, b"--out", rs, b"--prompt", b"fog \xff")
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-1500:]
    assert {b"manifest.json", b"preview", b"preview.mp4", b"restyle_0001.exr", b"restyle_0002.exr"} <= set(
        os.listdir(rs))
    clip = root + b"/clip\xff dir"
    os.mkdir(clip)
    shutil.copy(os.fsencode(str(footage("boat"))), clip + b"/boat\xfe.mp4")
    r = _bytes_cli(b"decompose", clip + b"/boat\xfe.mp4", b"--estimator", b"tiny", b"--max-size", b"32",
                   b"--frames", b"1-2", b"--out", root + b"/mv\xff")
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-1500:]


# ----------------------------------- item 9: decided (docs/reliability.md, Rules and decisions)


def _exr(path: Path, chans, **header) -> Path:
    import OpenEXR

    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage, **header}
    with OpenEXR.File(hdr, chans) as f:
        f.write(str(path))
    return path


_Z = np.full((4, 6), 0.5, np.float32)


@pytest.mark.parametrize("chans, words", [
    ({"R": _Z}, "has only R of R, G, B"), ({"R": _Z, "G": _Z}, "has only R, G of R, G, B"),
    ({"X": _Z, "Y": _Z, "Z": _Z}, "CIE XYZ"), ({"Y": _Z, "RY": _Z, "BY": _Z}, "luminance/chroma"),
    ({c: np.ones((4, 6), np.uint32) for c in "RGB"}, "UINT")])
def test_exr_channels_that_are_not_a_colour_image_are_refused_naming_them(tmp_path, chans, words):
    from backend.footage import FootageError, open_footage

    p = _exr(tmp_path / "odd.exr", chans)
    with pytest.raises(FootageError, match=re.escape(words)):
        with open_footage(p) as src:
            next(iter(src))


def test_lowercase_rgb_and_greyscale_y_exr_are_read(tmp_path):
    from backend.footage import open_footage

    p = _exr(tmp_path / "lower.exr", {"r": _Z, "g": _Z * 0.5, "b": _Z * 0.2, "a": np.ones_like(_Z)})
    with open_footage(p) as src:
        f = next(iter(src))
    np.testing.assert_allclose(f.rgb[0, 0], [0.5, 0.25, 0.1], rtol=1e-3)
    assert src.info.has_alpha
    with open_footage(_exr(tmp_path / "grey.exr", {"Y": _Z})) as src:
        np.testing.assert_allclose(next(iter(src)).rgb[0, 0], [0.5, 0.5, 0.5], rtol=1e-3)


def test_exr_pixel_aspect_ratio_is_recorded_and_honoured(tmp_path):
    import io

    from backend.jobs.decompose import decompose

    seq = tmp_path / "seq"
    seq.mkdir()
    for n in (1, 2):
        _exr(seq / f"shot_{n:04d}.exr", {"R": _Z, "G": _Z, "B": _Z}, pixelAspectRatio=2.0)
    r = decompose(seq, tmp_path / "o", estimator="tiny", max_size=32, progress=io.StringIO())
    assert r.manifest["source"]["sar"] == "2"
    square = decompose(_sequence(tmp_path / "sq", range(1, 2), h=4, w=6), tmp_path / "o2", estimator="tiny",
                       max_size=32, progress=io.StringIO())
    fx, fy = r.manifest["output"]["intrinsics"][:2]
    sfx, sfy = square.manifest["output"]["intrinsics"][:2]
    assert sfx == pytest.approx(sfy) and fx != pytest.approx(fy)  # non-square pixels change the intrinsics


def test_a_sequence_with_alpha_on_some_frames_records_mixed(tmp_path):
    import io

    from backend.jobs.decompose import decompose
    from cli_util import events
    from footage_util import gradient_rgb, write_image

    seq = tmp_path / "seq"
    seq.mkdir()
    for n in (1, 2, 3):
        img = gradient_rgb(24, 32, n)
        if n == 2:
            img = np.concatenate([img, np.full((24, 32, 1), 200, np.uint8)], -1)
        write_image(seq / f"shot_{n:04d}.png", img)
    log = io.StringIO()
    r = decompose(seq, tmp_path / "o", estimator="tiny", max_size=32, progress=log)
    warn = [e for e in events(log.getvalue()) if e["event"] == "warning"]
    assert len(warn) == 1 and warn[0]["frame"] == 2 and "carries alpha" in warn[0]["message"]
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["source"]["has_alpha"] == "mixed" and man["source"]["alpha_frames"] == "2"
    assert r.written == [1, 2, 3]


def test_a_manifest_entry_records_the_input_its_frame_was_computed_from(tmp_path):
    """A G-buffer frame replaced while restyle runs: the entry of the frame rendered from
    the old file says the old fingerprint, as its header does (it said the new one, or
    none after an error), so a resume sees the change instead of taking the frame as current."""
    import shutil

    from backend.jobs import restyle_files
    from backend.jobs.restyle import restyle

    src = _sequence(tmp_path / "seq", range(1, 5))
    gb = tmp_path / "gb"
    _dec(src, gb)
    swapped = []

    def on_event(e):
        if e.get("event") == "progress" and e.get("frame") == 1 and not swapped:
            swapped.append(1)  # frame 2 is rendered already, its entry not yet recorded
            data = (gb / "gbuffer_0002.exr").read_bytes()
            (gb / "gbuffer_0002.exr").unlink()
            (gb / "gbuffer_0002.exr").write_bytes(data + b"\0")
    r = restyle(gb, tmp_path / "rs", "fog", mp4=False, progress=on_event)
    assert swapped and r.written == [1, 2, 3, 4]
    man = json.loads((tmp_path / "rs" / "manifest.json").read_text())
    for e in man["frames"]:
        assert e.get("input") == restyle_files.read_input_hash(tmp_path / "rs" / e["file"]), e["frame"]


def _read_only_cli(folder: Path, *args, timeout=120):
    """The CLI in a mount namespace where ``folder`` is a read-only bind mount of itself."""
    import shlex
    import shutil
    import subprocess

    from cli_util import cli_cmd, cli_env

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a read-only bind mount")
    f = shlex.quote(str(folder))
    script = (f"mount --bind {f} {f} && mount -o remount,bind,ro {f} && "
              + " ".join(shlex.quote(str(a)) for a in cli_cmd(*args, tiny=True)))
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=cli_env(), capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    if "mount:" in r.stderr and r.returncode != 0 and "Traceback" not in r.stderr:
        pytest.skip(f"no read-only bind mount here: {r.stderr.strip()[:200]}")
    return r


def test_resuming_a_complete_folder_on_a_read_only_mount_reports_complete(tmp_path):
    from cli_util import events

    src = _sequence(tmp_path / "seq", range(1, 4))
    out = tmp_path / "gb"
    _dec(src, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    r = _read_only_cli(out, "decompose", src, "--estimator", "tiny", "--max-size", "32", "--out", out)
    assert r.returncode == 0, r.stderr[-1500:]
    done = events(r.stdout)[-1]
    assert done["event"] == "done" and done["skipped"] == 3 and done["written"] == 0 and done["read_only"]
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    import io

    from backend.jobs.restyle import restyle

    restyle(out, tmp_path / "rs", "fog", progress=io.StringIO())
    before_rs = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "rs").iterdir()}
    r = _read_only_cli(tmp_path / "rs", "restyle", out, "--out", tmp_path / "rs", "--prompt", "fog")
    assert r.returncode == 0 and events(r.stdout)[-1]["read_only"], r.stderr[-1500:]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "rs").iterdir()} == before_rs
    # an incomplete folder there is still refused (something would have to be written)
    (out / "gbuffer_0003.exr").unlink()
    r = _read_only_cli(out, "decompose", src, "--estimator", "tiny", "--max-size", "32", "--out", out)
    assert r.returncode != 0 and "not writable" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


@pytest.mark.parametrize("edit, words", [
    ("translation", "camera position"), ("bottom_row", "bottom row is [0.0, 0.0, 1.0, 1.0]"),
    ("cx", "principal point cx=500"), ("fx", "over 1000 image widths")])
def test_absurd_camera_values_are_refused_naming_the_value(tmp_path, edit, words):
    from backend.multiview.camera_files import read_cameras, save_cameras_json
    from backend.multiview.cameras import Camera, CameraError

    cams = {n: Camera(64, 48, 60.0, 60.0, 32.0, 24.0, t=np.array([-0.1 * n, 0.0, 0.0])) for n in (1, 2)}
    p = tmp_path / "cams.json"
    save_cameras_json(p, cams)
    read_cameras(p)  # the good file reads
    doc = json.loads(p.read_text())
    f = doc["frames"][1]
    if edit == "translation":
        f["camera_to_world"][0][3] = 1e308
    elif edit == "bottom_row":
        f["camera_to_world"][3] = [0, 0, 1, 1]
    elif edit in ("cx", "fx"):
        doc.setdefault("intrinsics", {})
        f["intrinsics"] = dict(doc["intrinsics"], **({"cx": 500.0} if edit == "cx" else {"fx": 1e9}))
    p.write_text(json.dumps(doc))
    with pytest.raises(CameraError, match=re.escape(words)) as e:
        read_cameras(p)
    assert "frame 2" in str(e.value) and str(p) in str(e.value)


# ------------------------------- own hostile pass: every public function with wrong types


@pytest.mark.parametrize("name", ["read_frame", "read_meta", "read_manifest", "list_frames", "sanitize",
                                  "open_footage", "read_prompt", "parse_prompt", "renderer_class",
                                  "resolution_of"])
@pytest.mark.parametrize("value", [None, 1.5, [1], {"a": 1}, object(), True])
def test_public_functions_refuse_wrong_types_in_one_line(name, value):
    """A ValueError (InputError; ArgumentError is also a TypeError), KeyError or a refused
    path, never an AttributeError or an unhashable-type TypeError from inside."""
    import backend
    from backend.errors import InputError

    fn = getattr(backend, name)
    if name in ("read_prompt", "parse_prompt") and value is None:
        return  # None is the empty prompt
    try:
        fn(value)
    except (InputError, KeyError):
        pass
    else:
        if name not in ("resolution_of",):
            pytest.fail(f"{name}({value!r}) accepted")


def test_write_frame_refuses_what_is_not_a_frame(tmp_path):
    from backend.arguments import ArgumentError

    with pytest.raises(ArgumentError, match="frame must be a GBufferFrame"):
        contract.write_frame(tmp_path / "gbuffer_0001.exr", "not a frame")
    with pytest.raises(ArgumentError, match="^path"):
        contract.write_frame(None, random_frame())
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("rel, argv", [
    ("gb/.gbuffer_running.lock", ["decompose", "{seq}", "--estimator", "tiny", "--max-size", "32", "--out", "{gb}"]),
    ("rs/preview.mp4", ["restyle", "{gb}", "--out", "{rs}", "--prompt", "fog"]),
    ("rs/preview/restyle_0001.png", ["restyle", "{gb}", "--out", "{rs}", "--prompt", "fog"])])
def test_a_fifo_with_one_of_our_names_in_the_output_is_never_waited_on_or_replaced(tmp_path, fifo_base, rel, argv):
    """Own hostile pass: a FIFO as the run lock blocked the job forever; a FIFO named
    preview.mp4 was replaced by the resumed restyle's movie (a user's file)."""
    import io
    import shutil

    from backend.jobs.restyle import restyle

    shutil.copytree(fifo_base / "gb", tmp_path / "gb")
    restyle(tmp_path / "gb", tmp_path / "rs", "fog", progress=io.StringIO())
    fifo = _fifo(tmp_path / rel)
    r = _cli(*[a.format(seq=fifo_base / "seq", gb=tmp_path / "gb", rs=tmp_path / "rs") for a in argv], timeout=90)
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert fifo.name in r.stderr
    assert fifo.exists() and not fifo.is_file()  # still the user's FIFO


def test_odd_bytes_in_text_arguments_are_one_line_exit_2(tmp_path, fifo_base):
    """Own hostile pass: --colorspace with bytes that are not UTF-8 gave OpenColorIO's
    TypeError (exit 1); --frames, --estimator and --option with such bytes are refused too."""
    seq = str(fifo_base / "seq").encode()
    out = str(tmp_path).encode() + b"/o\xff"
    for extra in ([b"--colorspace", b"sRGB\xff"], [b"--frames", b"1-\xff"], [b"--estimator", b"ti\xffny"]):
        r = _bytes_cli(b"decompose", seq, b"--max-size", b"32", b"--out", out,
                       *([b"--estimator", b"tiny"] if extra[0] != b"--estimator" else []), *extra)
        err = r.stderr.decode(errors="replace")
        assert r.returncode == 2 and "Traceback" not in err and err.strip().count("\n") == 0, (extra, err)
    r = _bytes_cli(b"restyle", str(fifo_base / "gb").encode(), b"--out", out + b"r", b"--option", b"\xff=1")
    assert r.returncode == 2 and b"takes no option" in r.stderr, r.stderr


def test_an_unknown_multiview_option_is_refused_naming_it(tmp_path):
    from backend.jobs.decompose import decompose

    src = _sequence(tmp_path / "seq", range(1, 3))
    with pytest.raises(ValueError, match="multiview option.s. bogus unknown; known: .*neighbours"):
        decompose(src, tmp_path / "o", estimator="tiny", cameras=tmp_path / "c.json", multiview={"bogus": 1})
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, float("nan")]])
def test_a_non_finite_renderer_option_is_refused_by_the_api_as_by_the_cli(tmp_path, fifo_base, value):
    from backend.jobs.restyle import restyle

    with pytest.raises(ValueError, match="--option exposure=.*finite"):
        restyle(fifo_base / "gb", tmp_path / "rs", "fog", renderer_options={"exposure": value})
    assert not (tmp_path / "rs").exists()


def test_a_non_finite_estimator_option_is_refused_by_the_api_as_by_the_cli(tmp_path):
    from backend.jobs.decompose import decompose

    src = _sequence(tmp_path / "seq", range(1, 2))
    with pytest.raises(ValueError, match="--estimator-option seed=nan.*finite"):
        decompose(src, tmp_path / "o", estimator="tiny", estimator_options={"seed": float("nan")})
