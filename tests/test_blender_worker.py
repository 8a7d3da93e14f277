"""The worker process wrapper (addon/worker.py): JSON-lines parsing, progress, errors, cancel.

Plain Python (addon/worker.py does not import bpy); real child processes speak the protocol.
"""
import sys
import time

import pytest

from blender_workflow_util import checkout_module, write_fake_worker

worker = checkout_module("addon.worker")


def _job(tmp_path, n, mode):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    script = write_fake_worker(tmp_path)
    argv = [sys.executable, str(script), str(out), str(n), mode]
    return worker.WorkerJob(argv, log_path=out / "job.log", cwd=tmp_path, env=worker.worker_env()), out


def _wait_for(cond, job, limit_s=60):
    deadline = time.monotonic() + limit_s
    while not cond():
        job.poll()
        assert time.monotonic() < deadline, "worker did not get there in time"
        time.sleep(0.02)


def test_parse_event():
    assert worker.parse_event('{"event": "progress", "done": 2, "total": 5}\n') == {
        "event": "progress", "done": 2, "total": 5}
    assert worker.parse_event("loading model...\n") is None
    assert worker.parse_event('{"no_event": 1}') is None
    assert worker.parse_event('{"event": 3}') is None
    assert worker.parse_event("{broken json") is None
    assert worker.parse_event("[1, 2]") is None


def test_backend_command_and_env():
    argv = worker.backend_command("decompose", ["in.mp4", "--out", "o", "--max-size", 64])
    assert argv == [sys.executable, "-m", "backend", "decompose", "in.mp4", "--out", "o", "--max-size", "64"]
    env = worker.worker_env(extra={"HF_HUB_OFFLINE": "1"})
    assert env["PYTHONPATH"].split(":")[0] == str(worker.ADDON_DIR)
    # the extension's root (``python -m backend`` runs from there), not the addon/ package
    assert (worker.ADDON_DIR / "backend" / "__main__.py").is_file()
    assert env["PYTHONUNBUFFERED"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    ext = worker.worker_env(external_python=True)
    # an external Python keeps its own site-packages: only the add-on (and wheel) folders
    assert not any("site-packages" in p and "extensions" not in p for p in ext["PYTHONPATH"].split(":"))


def test_warning_event_is_kept_and_does_not_end_the_job(tmp_path):
    job = worker.WorkerJob(["python"], log_path=tmp_path / "job.log")
    line = '{"event": "warning", "message": "--frames 15-40: the clip has 16 frame(s); clipped to 15-16", ' \
           '"frame": null, "file": "/f/boat.mp4"}\n'
    job._apply(worker.parse_event(line))
    assert job.warnings == ["--frames 15-40: the clip has 16 frame(s); clipped to 15-16"]
    assert job.state == worker.RUNNING and job.message == ""


def test_progress_then_done(tmp_path):
    job, out = _job(tmp_path, 4, "ok")
    seen = []
    job.on_event = seen.append
    assert job.start().state == worker.RUNNING
    assert job.wait(poll_interval=0.02) == worker.DONE
    assert job.returncode == 0
    assert [e["done"] for e in seen if e["event"] == "progress"] == [1, 2, 3, 4]
    assert seen[-1]["event"] == "done"
    assert (job.done, job.total, job.progress, job.fps) == (4, 4, 1.0, 5.0)
    assert sorted(p.name for p in out.glob("f*.txt")) == [f"f{i:04d}.txt" for i in range(1, 5)]
    log = (out / "job.log").read_text()
    assert "stderr: loading model" in log and "worker starting" in log  # stderr + plain stdout
    assert '"event"' not in log  # protocol lines are not logged


def test_error_event_gives_reason_frame_file_and_log(tmp_path):
    job, out = _job(tmp_path, 4, "fail")
    assert job.start().wait(poll_interval=0.02) == worker.ERROR
    assert job.returncode == 1
    assert job.message == "estimator exploded"
    msg = job.describe_error()
    assert msg == f"estimator exploded (frame 2, /footage/shot_0002.png); log: {out / 'job.log'}"


def test_crash_without_event_reports_last_stderr_line(tmp_path):
    job, out = _job(tmp_path, 4, "crash")
    assert job.start().wait(poll_interval=0.02) == worker.ERROR
    assert job.message == "ZeroDivisionError: division by zero"
    assert str(out / "job.log") in job.describe_error()


def test_cancel_sends_sigterm_and_keeps_complete_frames(tmp_path):
    job, out = _job(tmp_path, 6, "hang")
    job.start()
    _wait_for(lambda: job.done >= 2, job)
    assert not job.finished
    job.cancel()
    job.wait(poll_interval=0.02)
    assert job.state == worker.CANCELLED and job.returncode == 130
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(("f", ".tmp"))) == ["f0001.txt", "f0002.txt"]
    job.cancel()  # idempotent after the end


def test_cancel_waits_for_the_reader_to_drain(tmp_path):
    """cancel() returns once the process has exited *and* its output is read: the next
    poll() finishes the job (the Blender controller reports CANCELLED with exit 130 right
    after cancel, also when the reader thread sees end-of-stream late under load)."""
    job, out = _job(tmp_path, 6, "hang_late_eof")
    job.start()
    _wait_for(lambda: job.done >= 2, job)
    job.cancel()
    job.poll()
    assert job.finished and job.state == worker.CANCELLED and job.returncode == 130


def test_log_records_a_copy_pasteable_command(tmp_path):
    import shlex

    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-c", "import sys; print(sys.argv[1:])", "--prompt", "dense fog", "--out", "a b/c"]
    job = worker.WorkerJob(argv, log_path=out / "job.log", cwd=tmp_path, env=worker.worker_env()).start()
    job.wait(poll_interval=0.02)
    first = (out / "job.log").read_text().splitlines()[0]
    assert first == "$ " + shlex.join(argv)
    assert "--prompt 'dense fog' --out 'a b/c'" in first and shlex.split(first[2:]) == argv


def test_missing_python_raises_oserror_naming_it(tmp_path):
    job = worker.WorkerJob(["/nonexistent/python3", "-m", "backend"], log_path=tmp_path / "x.log")
    with pytest.raises(OSError, match="/nonexistent/python3"):
        job.start()


def test_real_backend_bad_arguments_exit_2(tmp_path):
    """The real backend CLI through the worker: a missing input is an error with a reason."""
    argv = worker.backend_command("decompose", [str(tmp_path / "missing.mp4"), "--out", str(tmp_path / "o")])
    job = worker.WorkerJob(argv, log_path=tmp_path / "o.log", env=worker.worker_env())
    assert job.start().wait(poll_interval=0.05) == worker.ERROR
    assert job.returncode == 2
    assert "missing.mp4" in job.message
