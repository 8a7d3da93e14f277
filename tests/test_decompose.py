"""Decompose job end to end: contract output, resize, fill-ins, sky, resume, cancel, safety, CLI."""
from __future__ import annotations

import io
import json
import os
import signal

import numpy as np
import pytest

from backend import contract
from backend.estimators.base import register_estimator
from backend.jobs.decompose import decompose, parse_frames
from backend.jobs.runner import JobError, run_job, settings_hash
from cli_util import events, last_event, run_cli, start_cli
from decompose_util import TinyEstimator, register_tiny
from footage_util import gradient_rgb, write_image, write_movie

register_tiny()


def _use(est: TinyEstimator, name="tiny_inst") -> str:
    register_estimator(name, lambda **kw: est)
    return name


def _clip(tmp_path, n=4, h=40, w=56, name="clip.mp4"):
    frames = []
    for t in range(n):
        f = gradient_rgb(h, w, 2 * t)
        f[:6] = 255  # a white "sky" band (TinyEstimator gives it confidence 0)
        frames.append(f)
    return write_movie(tmp_path / name, frames, options={"crf": "1"})


def test_parse_frames():
    assert parse_frames("2-5") == (2, 5)
    assert parse_frames("3-") == (3, None)
    assert parse_frames("4") == (4, 4)
    # source frame numbers (issue 16): a sequence may start at 0 or 1001; "-5" is not "1-5"
    assert parse_frames(None) == (0, None)
    assert parse_frames("0-3") == (0, 3)
    assert parse_frames("1001-1004") == (1001, 1004)
    for bad in ("-5", "-1-3", "5-2", "a-b"):
        with pytest.raises(ValueError):
            parse_frames(bad)


def test_decompose_writes_valid_contract_frames(tmp_path):
    src = _clip(tmp_path)
    est = TinyEstimator()
    out = tmp_path / "out"
    log = io.StringIO()
    res = decompose(src, out, estimator=_use(est), max_size=32, stream=log)
    assert res.written == [1, 2, 3, 4]
    files = contract.list_frames(out)
    assert list(files) == [1, 2, 3, 4]
    assert est.shapes[0] == (23, 32, 3)  # processed at the capped size ...
    fr = contract.read_frame(files[2], validate=True)
    assert fr.shape == (40, 56)  # ... written at full size
    m = fr.meta
    assert m["contract_version"] == contract.CONTRACT_VERSION
    assert m["estimator"] == "tiny_inst" and m["models"] == {"tiny-random": "seed0"}
    assert m["depth_kind"] == "relative"
    assert (m["depth_near"], m["depth_far"]) == (contract.RELATIVE_NEAR, contract.RELATIVE_FAR)
    assert m["frame_index"] == 1 and m["timestamp"] == pytest.approx(0.1)
    assert m["source"] == str(src) and m["source_colorspace"] == "sRGB"
    assert len(m["intrinsics"]) == 4 and m["filled"] == ["normal"]
    assert m["settings_hash"] == res.settings_hash
    # sky band: confidence 0, depth = far, normal (0, 0, 1)
    sky = fr.confidence == 0
    assert sky[:5].all() and not sky[10:].any()
    assert np.all(fr.depth[sky] == contract.RELATIVE_FAR)
    np.testing.assert_array_equal(fr.normal[sky], np.broadcast_to([0, 0, 1], fr.normal[sky].shape))
    assert fr.depth[~sky].min() >= 1.0 and fr.depth[~sky].max() < 100.0
    # Combined is the linear source frame
    assert fr.combined[..., 3].min() == 1.0 and 0.0 <= fr.combined[..., :3].min()
    man = contract.read_manifest(out)
    assert man["complete"] is True and man["job"] == "decompose"
    assert man["source"]["width"] == 56 and man["source"]["n_frames"] == 4
    assert [f["frame"] for f in man["frames"]] == [1, 2, 3, 4]
    assert man["sky"]["normal"] == [0.0, 0.0, 1.0]
    ev = events(log)
    assert ev[0]["event"] == "start" and ev[-1]["event"] == "done"
    prog = [e for e in ev if e["event"] == "progress"]
    assert [e["frame"] for e in prog] == [1, 2, 3, 4] and prog[-1]["done"] == prog[-1]["total"] == 4
    assert all(set(e) >= {"fps", "eta_s"} for e in prog)


def test_estimator_normals_used_and_metric_depth_kept(tmp_path):
    src = _clip(tmp_path, n=2)
    est = TinyEstimator(with_normals=True, depth_kind="metric")
    out = tmp_path / "o"
    decompose(src, out, estimator=_use(est), max_size=None, frames="2-2", stream=io.StringIO())
    assert list(contract.list_frames(out)) == [2]
    fr = contract.read_frame(contract.frame_path(out, 2), validate=True)
    assert fr.meta["depth_kind"] == "metric" and fr.meta["filled"] == []
    assert 0.0 < fr.meta["normal_depth_angle_deg"] < 180.0  # consistency check recorded
    man = contract.read_manifest(out)
    assert man["frames"][0]["normal_depth_angle_deg"] == fr.meta["normal_depth_angle_deg"]
    surf = fr.confidence > 0
    assert fr.meta["depth_near"] == pytest.approx(fr.depth[surf].min(), rel=1e-6)
    assert fr.meta["depth_far"] == pytest.approx(fr.depth[surf].max(), rel=1e-6)
    assert fr.depth[surf].min() > 3.0  # metric depth untouched (tiny gives >= 3 m)


def test_stabilize_records_flicker_and_lowers_it(tmp_path, footage):
    out = tmp_path / "stab"
    decompose(footage("boat"), out, estimator=_use(TinyEstimator(seed=1)), max_size=64,
              frames="1-4", stabilize=True, strength=0.6, stream=io.StringIO())
    man = contract.read_manifest(out)
    assert man["settings"]["stabilize"] is True
    assert man["flicker"]["stabilized"] < man["flicker"]["raw"]
    assert "flicker" not in man["frames"][0] and "flicker" in man["frames"][1]
    fr = contract.read_frame(contract.frame_path(out, 4), validate=True)
    assert fr.shape == (448, 832)


def test_resume_skips_matching_frames_and_recomputes_changed_settings(tmp_path):
    src = _clip(tmp_path, n=3)
    out = tmp_path / "r"
    decompose(src, out, estimator=_use(TinyEstimator()), max_size=32, stream=io.StringIO())
    mtimes = {n: p.stat().st_mtime_ns for n, p in contract.list_frames(out).items()}
    est2 = TinyEstimator()
    res = decompose(src, out, estimator=_use(est2), max_size=32, stream=io.StringIO())
    assert res.skipped == [1, 2, 3] and res.written == [] and est2.calls == 0
    assert {n: p.stat().st_mtime_ns for n, p in contract.list_frames(out).items()} == mtimes
    # delete one frame: only that one is recomputed
    contract.frame_path(out, 2).unlink()
    est3 = TinyEstimator()
    res = decompose(src, out, estimator=_use(est3), max_size=32, stream=io.StringIO())
    assert res.written == [2] and res.skipped == [1, 3]
    # different settings -> different hash: refused (frames would mix), unless overwrite
    est4 = TinyEstimator(seed=5)
    with pytest.raises(JobError, match="other settings .*--overwrite"):
        decompose(src, out, estimator=_use(est4), max_size=32, stream=io.StringIO())
    assert est4.calls == 0
    res = decompose(src, out, estimator=_use(est4), max_size=32, stream=io.StringIO(), overwrite=True)
    assert res.written == [1, 2, 3] and est4.calls == 3
    h = contract.read_frame(contract.frame_path(out, 1)).meta["settings_hash"]
    assert h == res.settings_hash != ""


def test_refuses_to_write_into_or_over_input(tmp_path):
    seq = tmp_path / "seq"
    seq.mkdir()
    for i in (1, 2):
        write_image(seq / f"f_{i:04d}.png", gradient_rgb(8, 8, i))
    for out in (seq, seq / "sub", tmp_path):
        with pytest.raises(JobError, match="refusing to write into or over the input"):
            decompose(seq, out, estimator="tiny", stream=io.StringIO())
    clip = _clip(tmp_path, n=1, name="c.mp4")
    with pytest.raises(JobError, match="refusing"):
        decompose(clip, clip, estimator="tiny", stream=io.StringIO())
    assert sorted(p.name for p in seq.iterdir()) == ["f_0001.png", "f_0002.png"]


def test_runner_generic_api(tmp_path):
    """The runner as the restyle job uses it: arbitrary files, custom names, per-frame info."""
    out = tmp_path / "gen"
    calls = []

    def tasks():
        for n in (1, 2, 3):
            def work(tmp, shash, n=n):
                calls.append(n)
                tmp.write_text(f"{n} {shash}")
                return {"value": n * 10}
            yield n, work

    log = io.StringIO()
    res = run_job(out, tasks(), settings={"prompt": "fog"}, total=3, job="restyle",
                  path_for=lambda n: out / f"img_{n:03d}.txt", stream=log)
    h = settings_hash({"prompt": "fog"})
    assert res.written == [1, 2, 3] and res.settings_hash == h
    assert (out / "img_002.txt").read_text() == f"2 {h}"
    man = json.loads((out / "manifest.json").read_text())
    import hashlib
    data = (out / "img_002.txt").read_bytes()
    assert man["frames"][1] == {"frame": 2, "file": "img_002.txt", "settings_hash": h, "value": 20,
                                "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    calls.clear()
    res = run_job(out, tasks(), settings={"prompt": "fog"}, total=3, job="restyle",
                  path_for=lambda n: out / f"img_{n:03d}.txt", stream=io.StringIO())
    assert calls == [] and res.skipped == [1, 2, 3]
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]


# ------------------------------------------------------------------ CLI (subprocess)


def test_cli_decompose_boat_json_progress(tmp_path, footage):
    out = tmp_path / "boat out"
    p = run_cli("decompose", footage("boat"), "--out", out, "--estimator", "tiny", "--max-size", "96",
                "--frames", "1-3", tiny=True)
    assert p.returncode == 0, p.stderr
    lines = events(p.stdout)
    assert [e["event"] for e in lines] == ["start", "progress", "progress", "progress", "done"]
    assert lines[-1]["written"] == 3
    assert list(contract.list_frames(out)) == [1, 2, 3]
    assert contract.read_frame(contract.frame_path(out, 3), validate=True).shape == (448, 832)


def test_cli_failure_names_file_and_frame(tmp_path):
    src = _clip(tmp_path, n=3)
    out = tmp_path / "f"
    p = run_cli("decompose", src, "--out", out, "--estimator", "tiny_fail2", "--max-size", "32", tiny=True)
    assert p.returncode == 1
    err = last_event(p.stdout)
    assert err["event"] == "error" and err["frame"] == 2 and err["file"] == str(src)
    assert "frame 2" in err["message"] and str(src) in err["message"]
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: ")
    assert sorted(x.name for x in out.iterdir()) == ["gbuffer_0001.exr", "manifest.json"]
    p = run_cli("decompose", src, "--out", out, "--estimator", "nope", tiny=True)
    assert p.returncode == 2 and "unknown estimator 'nope'" in p.stderr


def test_cli_sigterm_keeps_only_complete_frames_then_resumes(tmp_path):
    src = _clip(tmp_path, n=8)
    out = tmp_path / "c"
    proc = start_cli("decompose", src, "--out", out, "--estimator", "tiny_slow", "--max-size", "32",
                     tiny=True)
    seen = []
    for line in proc.stdout:
        seen.append(json.loads(line))
        if seen[-1]["event"] == "progress":
            proc.send_signal(signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = last_event(rest)
    assert last["event"] == "cancelled"
    done = contract.list_frames(out)
    assert 1 <= len(done) < 8
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files
    for p in done.values():
        contract.read_frame(p, validate=True)  # every file complete
    p = run_cli("decompose", src, "--out", out, "--estimator", "tiny", "--max-size", "32", tiny=True)
    assert p.returncode == 0, p.stderr
    prog = events(p.stdout)
    skipped = [e["frame"] for e in prog if e["event"] == "progress" and e["skipped"]]
    assert skipped == sorted(done)
    assert list(contract.list_frames(out)) == list(range(1, 9))


def test_runner_sigint_finishes_current_frame_then_cancels(tmp_path):
    from backend.jobs.runner import JobCancelled, SignalCancel

    out = tmp_path / "sig"

    def tasks():
        for n in range(1, 6):
            def work(tmp, shash, n=n):
                if n == 2:
                    os.kill(os.getpid(), signal.SIGINT)  # arrives while frame 2 is computed
                tmp.write_text(str(n))
            yield n, work

    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under nohup / `&`
    with pytest.raises(JobCancelled) as ei, SignalCancel() as cancel:
        run_job(out, tasks(), settings={}, total=5, path_for=lambda n: out / f"f{n}.txt",
                progress=io.StringIO(), cancel=cancel)
    assert ei.value.written == 2  # frame 2 was finished, frame 3 never started
    assert sorted(p.name for p in out.iterdir()) == ["f1.txt", "f2.txt", "manifest.json"]
    assert json.loads((out / "manifest.json").read_text())["complete"] is False
    assert signal.getsignal(signal.SIGINT) is before  # handler restored


def test_runner_installs_no_signal_handler_and_prints_nothing(tmp_path, capsys):
    """Called from Python, a job leaves signals alone and writes nothing to stdout/stderr."""
    out = tmp_path / "quiet"
    seen = []

    def tasks():
        for n in (1, 2):
            def work(tmp, h, n=n):
                seen.append(signal.getsignal(signal.SIGINT))
                tmp.write_text("x")
            yield n, work

    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under nohup / `&`
    run_job(out, tasks(), settings={}, total=2, path_for=lambda n: out / f"{n}.txt")
    assert seen == [before] * 2 and before is not None
    assert capsys.readouterr() == ("", "")


def test_cli_terminal_gets_a_bar_not_json(tmp_path, capsys):
    from backend.cli import _reporter_for
    from backend.events import reporting

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = tmp_path / "tty"
    tty = Tty()
    tasks = ((n, lambda tmp, h, n=n: tmp.write_text("x")) for n in (1, 2))
    with reporting(_reporter_for(tty)):
        run_job(out, tasks, settings={}, total=2, path_for=lambda n: out / f"{n}.txt")
    assert tty.getvalue() == ""
    assert "2/2" in capsys.readouterr().err


def test_frames_beyond_source_is_a_clear_error(tmp_path):
    from backend.footage import FootageError

    src = _clip(tmp_path, n=2)
    with pytest.raises(FootageError, match=r"--frames 5-6 starts past the end: the clip has 2 frame"):
        decompose(src, tmp_path / "o", estimator="tiny", frames="5-6", stream=io.StringIO())


def test_cli_default_estimator_on_boat(tmp_path, footage):
    out = tmp_path / "default"
    p = run_cli("decompose", footage("boat"), "--out", out, "--frames", "1-2", tiny=True, timeout=600)
    assert p.returncode == 0, p.stderr
    fr = contract.read_frame(contract.frame_path(out, 2), validate=True)
    assert fr.shape == (448, 832) and fr.meta["estimator"] == "embedded"
    assert contract.read_manifest(out)["estimator"]["name"] == "embedded"
    # Blender 5.0 and 4.5 load the sequence with the passes as sockets
    from bpy_util import run_bpy, venv_python
    from test_contract import EXPECTED_SOCKETS, SOCKETS_SNIPPET

    for venv in (".venv", ".venv45"):
        if venv_python(venv).exists():
            res = run_bpy(SOCKETS_SNIPPET.format(first=str(contract.frame_path(out, 1)), n=2),
                          python=venv_python(venv), timeout=300)
            assert all([tuple(x) for x in socks] == EXPECTED_SOCKETS for socks in res["sockets"])


def test_named_colorspace_goes_through_opencolorio(tmp_path):
    from backend import colour

    img = np.zeros((6, 8, 3), np.uint8)
    img[..., 0] = 200
    src = write_image(tmp_path / "red.png", img)
    p = run_cli("decompose", src, "--out", tmp_path / "o", "--estimator", "tiny",
                "--colorspace", "sRGB Encoded AP1", tiny=True)
    assert p.returncode == 0, p.stderr
    fr = contract.read_frame(contract.frame_path(tmp_path / "o", 1), validate=True)
    assert fr.meta["source_colorspace"] == "sRGB Encoded AP1"
    want = colour.to_scene_linear(img.astype(np.float32) / 255, "sRGB Encoded AP1")
    np.testing.assert_allclose(fr.combined[..., :3], np.clip(want, 0, None), rtol=2e-3, atol=1e-4)
    assert want[0, 0, 0] > colour.srgb_to_linear(np.float32(200 / 255)) * 1.05  # AP1 red is wider
    p = run_cli("decompose", src, "--out", tmp_path / "o2", "--estimator", "tiny", "--colorspace", "Nope",
                tiny=True)
    assert p.returncode == 2 and "unknown colour space 'Nope'" in p.stderr


def test_cli_stabilize_flag_anywhere(tmp_path):
    src = _clip(tmp_path, n=3)
    out = tmp_path / "s"
    p = run_cli("decompose", "--stabilize", src, "--out", out, "--estimator", "tiny", "--max-size", "32",
                "--stabilize-strength", "0.3", tiny=True)
    assert p.returncode == 0, p.stderr
    man = contract.read_manifest(out)
    assert man["settings"]["stabilize"] is True and man["settings"]["strength"] == 0.3
    assert man["flicker"]["stabilized"] < man["flicker"]["raw"]


class _PlaneEstimator(TinyEstimator):
    """Metric depth of a tilted plane plus its exact normal (consistent geometry)."""

    name = "plane"
    N = np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])

    def predict(self, rgb):
        from backend import geometry

        h, w = rgb.shape[:2]
        fx, fy, cx, cy = geometry.intrinsics_from_fov(w, h, 60.0)
        x = (np.arange(w) + 0.5 - cx) / fx
        y = (np.arange(h) + 0.5 - cy) / fy
        rx, ry = np.meshgrid(x, -y)
        n = self.N
        depth = (-(4.0 * n[2]) / (n[0] * rx + n[1] * ry - n[2])).astype(np.float32)
        from backend.estimators.base import EstimatorOutput

        return EstimatorOutput(depth=depth, depth_kind="metric",
                               normal=np.broadcast_to(n, (h, w, 3)).astype(np.float32))


def test_normals_consistent_with_depth_give_small_angle(tmp_path):
    src = write_image(tmp_path / "img.png", gradient_rgb(30, 40))
    out = tmp_path / "plane"
    decompose(src, out, estimator=_use(_PlaneEstimator(), "plane"), max_size=None, stream=io.StringIO())
    fr = contract.read_frame(contract.frame_path(out, 1), validate=True)
    assert fr.meta["normal_depth_angle_deg"] < 0.5
    np.testing.assert_allclose(fr.normal[15, 20], _PlaneEstimator.N, atol=1e-3)  # stored as half
    assert fr.depth[15, 20] == pytest.approx(4.0, rel=0.02)  # plane through (0, 0, -4)


def test_cli_estimator_options(tmp_path):
    from backend.jobs.decompose import parse_options

    assert parse_options(["a=3", "b=null", "c=/x/y", "d=[1,2]"]) == {"a": 3, "b": None, "c": "/x/y", "d": [1, 2]}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options(["novalue"])
    src = _clip(tmp_path, n=1)
    p = run_cli("decompose", src, "--out", tmp_path / "o", "--estimator", "tiny", "--max-size", "32",
                "--estimator-option", "seed=7", "--estimator-option", "depth_kind=metric", tiny=True)
    assert p.returncode == 0, p.stderr
    man = contract.read_manifest(tmp_path / "o")
    assert man["estimator"]["settings"]["seed"] == 7
    assert contract.read_frame(contract.frame_path(tmp_path / "o", 1)).meta["depth_kind"] == "metric"


def test_albedo_detail_restores_source_texture_when_upsampling(tmp_path):
    """The estimator runs at 32 px on a 128 x 96 textured frame: its upsampled albedo is
    blurred; the detail transfer puts the source's fine texture back (and stays in [0, 1])."""
    import cv2

    rng = np.random.default_rng(3)
    img = (np.kron(rng.random((24, 32, 3)), np.ones((4, 4, 1))) * 200 + 30).astype(np.uint8)
    src = write_image(tmp_path / "tex.png", img)

    def highpass(a):
        a = a.astype(np.float32)
        return a - cv2.GaussianBlur(a, (0, 0), 2.0)

    runs = {}
    for flag in (True, False):
        out = tmp_path / f"d{flag}"
        res = decompose(src, out, estimator="tiny", max_size=32, albedo_detail=flag, stream=io.StringIO())
        assert res.manifest["settings"]["albedo_detail"] is flag
        fr = contract.read_frame(contract.frame_path(out, 1), validate=True)
        assert fr.albedo.shape == (96, 128, 3) and fr.albedo.min() >= 0 and fr.albedo.max() <= 1
        runs[flag] = fr
    src_lin = runs[True].combined[..., :3]
    hp_src = highpass(src_lin).ravel()
    corr = {f: float(np.corrcoef(hp_src, highpass(runs[f].albedo).ravel())[0, 1]) for f in runs}
    energy = {f: float(np.abs(highpass(runs[f].albedo)).mean()) for f in runs}
    assert corr[True] > 0.5 > corr[False] + 0.2, corr
    assert energy[True] > 3 * energy[False], energy
    # at full processing size there is nothing to restore: the setting is recorded off
    res = decompose(src, tmp_path / "full", estimator="tiny", max_size=None, stream=io.StringIO())
    assert res.manifest["settings"]["albedo_detail"] is False


def test_hard_kill_leftovers_of_a_frame_are_removed_before_it_is_recomputed(tmp_path):
    """A SIGKILL leaves ``.tmp_<stem>_*`` (and, from older versions, ``.tmp_.tmp_<stem>_*``)
    next to the frame it was writing: the next run removes those of each frame it computes,
    and only those (a farm chunk writing other frames into the same folder keeps its own)."""
    src = _clip(tmp_path, n=3)
    out = tmp_path / "k"
    out.mkdir()
    stale = [out / ".tmp_gbuffer_0002_x1y2.exr", out / ".tmp_.tmp_gbuffer_0002_abcd_q9.exr"]
    other_chunk = [out / ".tmp_gbuffer_0009_live.exr", out / ".tmp_gbuffer_00021_zz.exr"]
    for p in stale + other_chunk:
        p.write_bytes(b"partial")
    res = decompose(src, out, estimator=_use(TinyEstimator()), max_size=32, stream=io.StringIO())
    assert res.written == [1, 2, 3]
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in other_chunk)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == sorted(p.name for p in other_chunk)


def test_decompose_writes_no_nested_temporary(tmp_path, monkeypatch):
    """The runner already writes to a temporary and renames it: the EXR writer must not
    wrap that path in a second temporary (``.tmp_.tmp_gbuffer_*``, left by a hard kill)."""
    import tempfile

    prefixes = []
    real_mkstemp = tempfile.mkstemp

    def recording_mkstemp(*a, **kw):  # records, then runs the real mkstemp
        prefixes.append(kw.get("prefix"))
        return real_mkstemp(*a, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", recording_mkstemp)
    src = _clip(tmp_path, n=2)
    decompose(src, tmp_path / "n", estimator=_use(TinyEstimator()), max_size=32, stream=io.StringIO())
    frame_tmps = [p for p in prefixes if p and "gbuffer_" in p]
    assert frame_tmps == [".tmp_gbuffer_0001_", ".tmp_gbuffer_0002_"], prefixes


def test_write_frame_atomic_false_writes_the_path_itself(tmp_path):
    fr = contract.read_frame(contract.list_frames(_tiny_out(tmp_path))[1])
    dest = tmp_path / "direct" / ".tmp_gbuffer_0001_abc.exr"
    dest.parent.mkdir()
    contract.write_frame(dest, fr, atomic=False)
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]
    contract.read_frame(dest, validate=True)


def _tiny_out(tmp_path):
    out = tmp_path / "t"
    decompose(_clip(tmp_path, n=1), out, estimator=_use(TinyEstimator()), max_size=32, stream=io.StringIO())
    return out


def test_max_size_above_the_embedded_native_size_resumes(tmp_path):
    """The embedded estimator computes at 192 px whatever --max-size says: the settings
    hash holds the cap actually used, so 320 and 1024 resume each other (no --overwrite)."""
    src = _clip(tmp_path, n=2, h=120, w=320)
    out = tmp_path / "e"
    first = decompose(src, out, estimator="embedded", max_size=320, stream=io.StringIO())
    assert first.written == [1, 2]
    again = decompose(src, out, estimator="embedded", max_size=1024, stream=io.StringIO())
    assert again.skipped == [1, 2] and again.written == []
    man = json.loads((out / "manifest.json").read_text())
    assert man["settings"]["max_size"] == 192  # the hash's key, kept so old folders resume
    assert man["output"]["processing_resolution_requested"] == 1024 and "max_size_requested" not in man["output"]
    # a cap below the native size changes the output: refused without --overwrite
    with pytest.raises(JobError, match="other settings .*--overwrite"):
        decompose(src, out, estimator="embedded", max_size=64, stream=io.StringIO())


def test_farm_chunks_into_one_folder_merge_their_manifest(tmp_path):
    """Two chunks of one shot (--frames 1-4 and 5-8) run at the same time into the same
    folder: every frame is written once and the manifest lists all eight."""
    src = _clip(tmp_path, n=8)
    out = tmp_path / "farm"
    procs = [start_cli("decompose", src, "--out", out, "--estimator", "tiny_slow", "--max-size", "32",
                       "--frames", rng, tiny=True)
             for rng in ("1-4", "5-8")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert list(contract.list_frames(out)) == list(range(1, 9))
    man = contract.read_manifest(out)
    assert [f["frame"] for f in man["frames"]] == list(range(1, 9))
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
