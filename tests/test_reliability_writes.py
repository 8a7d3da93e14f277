"""Issue 36, a later hostile pass: public writers never replace what is not a regular
file (a FIFO, socket, folder or symbolic link; real device nodes are never touched
here), a socket as the run lock is refused, huge integers in options and requests are
one line, and the Python API takes numpy scalars. Nothing here runs a subprocess.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.arguments import ArgumentError
from backend.errors import InputError
from gbuffer_util import random_frame
from reliability_util import tiny_decompose as _dec, write_sequence as _sequence


def _socket(path: Path, monkeypatch) -> socket.socket:
    """A listening UNIX socket at ``path`` (bound by a relative name: tmp paths can pass
    the 108-byte limit)."""
    monkeypatch.chdir(path.parent)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path.name)
    return s


def _special(kind: str, path: Path, monkeypatch):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "symlink":
        (path.parent / "target.exr").write_bytes(b"users file")
        path.symlink_to(path.parent / "target.exr")
    else:
        return _socket(path, monkeypatch)
    return None


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink", "socket"])
def test_write_frame_never_replaces_what_is_not_a_regular_file(tmp_path, monkeypatch, kind):
    p = tmp_path / "gbuffer_0001.exr"
    keep = _special(kind, p, monkeypatch)
    try:
        before = os.lstat(p)
        with pytest.raises(ArgumentError) as e:
            contract.write_frame(p, random_frame())
        assert str(p) in str(e.value) and "\n" not in str(e.value)
        after = os.lstat(p)
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
        if kind == "symlink":
            assert (tmp_path / "target.exr").read_bytes() == b"users file"
        assert not list(tmp_path.glob(".tmp_*"))
    finally:
        if keep is not None:
            keep.close()


def test_write_frame_into_a_missing_folder_is_one_line(tmp_path):
    p = tmp_path / "nope" / "gbuffer_0001.exr"
    with pytest.raises(ArgumentError, match="does not exist") as e:
        contract.write_frame(p, random_frame())
    assert str(p) in str(e.value)
    assert not (tmp_path / "nope").exists()


def test_other_writers_share_the_check(tmp_path):
    from backend.jobs.writers import write_bytes_atomic

    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(InputError, match="manifest.json"):
        contract.write_manifest(tmp_path, {"frames": []})
    assert not (tmp_path / "manifest.json").is_file()
    (tmp_path / "real").write_text("mine")
    (tmp_path / "link.png").symlink_to(tmp_path / "real")
    with pytest.raises(InputError, match="symbolic link"):
        write_bytes_atomic(tmp_path / "link.png", b"x")
    assert (tmp_path / "real").read_text() == "mine"


def test_a_socket_as_the_run_lock_is_refused(tmp_path, monkeypatch):
    from backend.errors import JobError

    src = _sequence(tmp_path / "seq", range(1, 3))
    out = tmp_path / "gb"
    out.mkdir()
    s = _socket(out / ".gbuffer_running.lock", monkeypatch)
    try:
        with pytest.raises(JobError, match="socket, not the job's lock file"):
            _dec(src, out)
    finally:
        s.close()
    assert not list(out.glob("gbuffer_*.exr"))


HUGE = "9" * 700


def test_huge_integers_in_options_are_one_line():
    from backend.jobs.options import key_value

    for flag in ("--option", "--estimator-option"):
        with pytest.raises(ValueError, match="exposure must be a finite number") as e:
            key_value(f"exposure={HUGE}", flag)
        assert len(str(e.value)) < 200 and flag in str(e.value)
    assert key_value("max_size=64", "--estimator-option") == ("max_size", 64)


def test_huge_numbers_in_requests_are_one_line(tmp_path):
    import json

    from backend.jobs.request import read_request

    src = _sequence(tmp_path / "seq", range(1, 2))
    for extra, words in (({"strength": 10 ** 500, "stabilize": True}, "strength must be finite"),
                         ({"processing_resolution": 10 ** 500}, "processing_resolution"),
                         ({"estimator_options": {"max_size": 10 ** 500}}, "max_size must be a finite")):
        p = tmp_path / "req.json"
        p.write_text(json.dumps(dict({"job": "decompose", "input": str(src), "out": str(tmp_path / "o")},
                                     **extra)))
        with pytest.raises(ValueError, match=words) as e:
            read_request(p)
        assert len(str(e.value)) < 300 and "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()


def test_numpy_scalars_are_taken_by_the_api(tmp_path):
    import io

    from backend.jobs.request import DecomposeRequest, RestyleRequest
    from backend.jobs.restyle import restyle

    src = _sequence(tmp_path / "seq", range(1, 3))
    req = DecomposeRequest(input=str(src), out=str(tmp_path / "o"), processing_resolution=np.int64(64),
                           handles=np.int64(0), estimator_options={"max_size": np.int32(32)})
    assert req.processing_resolution == 64 and type(req.processing_resolution) is int
    assert type(req.estimator_options["max_size"]) is int
    req.write(tmp_path / "req.json")  # was "int64 is not JSON serializable"
    r = _dec(src, tmp_path / "gb", processing_resolution=np.int64(64))
    assert r.written == [1, 2]
    rr = RestyleRequest(gbuffer_dir=str(tmp_path / "gb"), out=str(tmp_path / "rs"), prompt="fog",
                        renderer_options={"exposure": np.float32(1)})
    assert type(rr.renderer_options["exposure"]) is float
    rr.write(tmp_path / "rreq.json")
    assert restyle(tmp_path / "gb", tmp_path / "rs", "fog", renderer_options={"exposure": np.float32(1)},
                   progress=io.StringIO()).written == [1, 2]


@pytest.mark.parametrize("value", ["64", True, -3, float("nan"), 1.5])
def test_resolution_of_refuses_what_is_not_a_resolution(value):
    import backend

    with pytest.raises(ArgumentError, match="requested"):
        backend.resolution_of("embedded", value)
    assert backend.resolution_of("embedded", np.int64(1024)) == 192


def test_read_prompt_refuses_a_renderer_that_is_not_one():
    import backend

    with pytest.raises(ArgumentError, match="renderer must be"):
        backend.read_prompt("fog", 5)


def test_a_refused_argument_leaves_no_output_folder(tmp_path):
    src = _sequence(tmp_path / "seq", range(1, 2))
    for kw in ({"processing_resolution": "64"}, {"strength": 10 ** 500, "stabilize": True},
               {"handles": -1}, {"estimator_options": {"max_size": 10 ** 500}}):
        with pytest.raises(ValueError):
            _dec(src, tmp_path / "o", **kw)
        assert not (tmp_path / "o").exists(), kw


def test_a_huge_estimator_option_on_the_command_line_is_exit_2(tmp_path):
    import subprocess

    from cli_util import cli_cmd, cli_env

    src = _sequence(tmp_path / "seq", range(1, 2))
    r = subprocess.run(cli_cmd("decompose", str(src), "--estimator", "tiny", "--out", str(tmp_path / "o"),
                               "--estimator-option", "max_size=" + HUGE, tiny=True),
                       env=cli_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "max_size must be a finite number" in r.stderr and len(r.stderr) < 300
    assert not (tmp_path / "o").exists()


def test_the_mesh_writer_keeps_a_dangling_symlink(tmp_path):
    from backend.multiview.tsdf import write_ply

    p = tmp_path / "mesh.ply"
    p.symlink_to(tmp_path / "elsewhere.ply")
    with pytest.raises(FileExistsError):
        write_ply(p, np.zeros((3, 3), np.float32), np.array([[0, 1, 2]]))
    assert p.is_symlink() and not (tmp_path / "elsewhere.ply").exists()
