"""The runner's writer thread (``Deferred``): order, overlap, failures, cancel, no leftovers."""
from __future__ import annotations

import io
import json
import os
import signal
import threading
import time

import pytest

from backend.jobs.runner import Deferred, JobCancelled, JobError, SignalCancel, run_job
from cli_util import events


def _deferred_tasks(n_frames, log, fail_at=None, slow=0.0, sigint_at=None):
    def tasks():
        for n in range(1, n_frames + 1):
            def work(tmp, shash, n=n):
                log.append(("compute", n, threading.current_thread().name))
                if sigint_at == n:
                    os.kill(os.getpid(), signal.SIGINT)

                def write():
                    log.append(("write", n, threading.current_thread().name))
                    time.sleep(slow)
                    if fail_at == n:
                        raise RuntimeError("encoder exploded")
                    tmp.write_text(f"frame {n}")
                    return {"bytes": 7}
                return Deferred(write, {"n": n})
            yield n, work
    return tasks()


def test_deferred_writes_run_on_a_writer_thread_in_order(tmp_path):
    out = tmp_path / "o"
    log = []
    stream = io.StringIO()
    res = run_job(out, _deferred_tasks(5, log, slow=0.02), settings={"a": 1}, total=5,
                  path_for=lambda n: out / f"f{n}.txt", stream=stream)
    assert res.written == [1, 2, 3, 4, 5]
    assert all(t == "MainThread" for kind, _, t in log if kind == "compute")
    assert all(t != "MainThread" for kind, _, t in log if kind == "write")
    # frame n+1 is computed before frame n's write has been collected: they overlap,
    # but never more than one frame ahead
    order = [(k, n) for k, n, _ in log]
    assert order.index(("compute", 2)) < order.index(("write", 2))
    for n in range(2, 6):
        assert order.index(("write", n - 1)) < order.index(("compute", n + 1)) if n < 5 else True
    assert [e["frame"] for e in events(stream) if e["event"] == "progress"] == [1, 2, 3, 4, 5]
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] is True
    import hashlib
    assert man["frames"][2] == {"frame": 3, "file": "f3.txt", "settings_hash": res.settings_hash,
                                "n": 3, "bytes": 7,  # + the checksum of what was written (issue 16)
                                "sha256": hashlib.sha256((out / "f3.txt").read_bytes()).hexdigest()}
    assert (out / "f4.txt").read_text() == "frame 4"
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]


def test_deferred_write_failure_names_frame_and_leaves_no_partial_file(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(JobError) as ei:
        run_job(out, _deferred_tasks(5, [], fail_at=3), settings={}, total=5,
                path_for=lambda n: out / f"f{n}.txt", stream=io.StringIO())
    assert ei.value.frame == 3 and "frame 3" in str(ei.value) and "encoder exploded" in str(ei.value)
    assert ei.value.file == str(out / "f3.txt")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["f1.txt", "f2.txt", "manifest.json"]  # no f3, no temporary files
    man = json.loads((out / "manifest.json").read_text())
    assert [f["frame"] for f in man["frames"]] == [1, 2] and man["complete"] is False


def test_sigint_with_a_frame_in_flight_finishes_it_and_cancels(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(JobCancelled) as ei:
        with SignalCancel() as cancel:
            run_job(out, _deferred_tasks(6, [], slow=0.05, sigint_at=3), settings={}, total=6,
                    path_for=lambda n: out / f"f{n}.txt", progress=io.StringIO(), cancel=cancel)
    # frame 3 was being computed when the signal came: it is finished (written by the
    # writer thread), frame 4 never starts
    assert ei.value.written == 3
    assert sorted(p.name for p in out.iterdir()) == ["f1.txt", "f2.txt", "f3.txt", "manifest.json"]
    # resume completes the rest without recomputing
    log = []
    res = run_job(out, _deferred_tasks(6, log), settings={}, total=6,
                  path_for=lambda n: out / f"f{n}.txt", stream=io.StringIO())
    assert res.skipped == [1, 2, 3] and res.written == [4, 5, 6]
    assert [n for k, n, _ in log if k == "compute"] == [4, 5, 6]


def test_failure_outside_work_keeps_the_frame_in_flight(tmp_path):
    """Decoding the next source frame fails (the task iterator raises) while frame 2 is
    on the writer thread: frame 2 is complete work and is kept; no temporary files."""
    out = tmp_path / "o"

    def tasks():
        it = _deferred_tasks(2, [], slow=0.05)
        yield from it
        raise RuntimeError("truncated source frame 3")

    with pytest.raises(RuntimeError, match="truncated source frame 3"):
        run_job(out, tasks(), settings={}, total=3, path_for=lambda n: out / f"f{n}.txt",
                stream=io.StringIO())
    assert sorted(p.name for p in out.iterdir()) == ["f1.txt", "f2.txt", "manifest.json"]
    assert [f["frame"] for f in json.loads((out / "manifest.json").read_text())["frames"]] == [1, 2]


def test_progress_done_counts_match_frames(tmp_path):
    out = tmp_path / "o"
    stream = io.StringIO()
    run_job(out, _deferred_tasks(3, []), settings={}, total=3, path_for=lambda n: out / f"f{n}.txt",
            stream=stream)
    prog = [(e["frame"], e["done"]) for e in events(stream) if e["event"] == "progress"]
    assert prog == [(1, 1), (2, 2), (3, 3)]


def test_resume_with_a_gap_reports_frames_in_order(tmp_path):
    out = tmp_path / "o"
    run_job(out, _deferred_tasks(4, []), settings={}, total=4, path_for=lambda n: out / f"f{n}.txt",
            stream=io.StringIO())
    (out / "f2.txt").unlink()
    stream = io.StringIO()
    res = run_job(out, _deferred_tasks(4, [], slow=0.05), settings={}, total=4,
                  path_for=lambda n: out / f"f{n}.txt", stream=stream)
    assert res.written == [2] and res.skipped == [1, 3, 4]
    prog = [(e["frame"], e["skipped"]) for e in events(stream) if e["event"] == "progress"]
    assert prog == [(1, True), (2, False), (3, True), (4, True)]
