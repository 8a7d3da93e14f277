"""Issue 36 (reliability round 4 of the hostile trials): hashes read back as numbers
(item 10), files that are not regular files (FIFOs) everywhere a path is read, deep JSON,
non-UTF-8 path bytes, restyle --frames clipping, the Python API's argument checks, the
farm's false "lacks fields" warning, --option and non-ASCII digits, and the decisions
of item 9 (docs/reliability.md, *Decisions (issue 36)*). Every subprocess is bounded
in time.
"""
from __future__ import annotations

import json
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
