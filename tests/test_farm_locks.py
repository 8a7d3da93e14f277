"""Locks without fcntl (issue 29): on Windows ``_manifest_lock`` and the running-jobs lock
were no-ops. They now use ``filelock`` (``msvcrt.locking`` on Windows) on lock files
(backend.jobs.locks). No Windows machine here: these tests run the
portable path on Linux (filelock's fcntl backend) in separate processes; the msvcrt
backend itself was not run.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from cli_util import REPO, cli_env

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from backend.jobs import locks, runner
    locks.PORTABLE_LOCKS = True
    out, what = Path(sys.argv[1]), sys.argv[2]
    if what == "folder":
        with runner._manifest_lock(out):
            print("held", flush=True)
            time.sleep(60)
    else:
        lock = runner.run_lock(out)
        with runner._manifest_lock(out):
            lock.acquire()
        print("held", flush=True)
        time.sleep(60)
""")

CHECK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from backend.jobs import locks, runner
    locks.PORTABLE_LOCKS = True
    out, what = Path(sys.argv[1]), sys.argv[2]
    t0 = time.monotonic()
    if what == "folder":
        with runner._manifest_lock(out):
            print(round(time.monotonic() - t0, 2))
    else:
        with runner._manifest_lock(out):
            print(runner.run_lock(out).others_running())
""")


def _py(code, *args, **kw):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _holding(out, what):
    p = _py(HOLD, out, what)
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    return p


def test_portable_folder_lock_excludes_another_process(tmp_path):
    holder = _holding(tmp_path, "folder")
    try:
        waiter = _py(CHECK, tmp_path, "folder")
        time.sleep(2.0)
        assert waiter.poll() is None  # blocked by the holder
    finally:
        holder.kill()
        holder.wait()
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert float(out) >= 0.3  # it waited (the 2 s sleep includes its start-up)
    assert (tmp_path / ".gbuffer_folder.lock").exists()  # the lock file stays (hidden)


def test_portable_run_lock_sees_a_running_job_and_forgets_a_killed_one(tmp_path):
    def others():
        p = _py(CHECK, tmp_path, "run")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        return out.strip()

    assert others() == "False"
    holder = _holding(tmp_path, "run")
    try:
        assert others() == "True"
    finally:
        holder.kill()  # a hard kill leaves its lock file, unlocked
        holder.wait()
    assert len(list((tmp_path / ".gbuffer_running").glob("*.lock"))) == 1
    assert others() == "False"
    assert not list((tmp_path / ".gbuffer_running").glob("*.lock"))  # the stale file was removed


def test_a_job_runs_with_portable_locks(footage, tmp_path):
    """A real decompose with the portable locks: it takes and releases them."""
    code = textwrap.dedent(f"""
        from backend.jobs import locks
        locks.PORTABLE_LOCKS = True
        from backend.jobs.decompose import decompose
        r = decompose({str(footage("dolphins"))!r}, {str(tmp_path / "o")!r}, frames="1-2", processing_resolution=32)
        print(r.written)
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[1, 2]"
    assert not (tmp_path / "o" / ".gbuffer_running").exists()  # released: the last job removes it
    assert (tmp_path / "o" / "manifest.json").is_file()
