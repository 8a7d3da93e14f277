"""A real multi-node Ray farm on loopback (issue 18).

The test starts a Ray head (127.0.0.4, see backend/farm/loopback.py for why not
127.0.0.1) and two worker nodes (127.0.0.2, 127.0.0.3), each with its own temp dir and
one CPU, runs ``farm ray decompose`` of 16 frames of dolphins.mp4 across them, SIGKILLs
one worker node (its raylet and everything under it) right after a chunk landed on it,
and checks the job still completes with EXR frames byte-identical to ``farm local``
(the same plan in one process) and an equal manifest; then a ``farm ray restyle`` of
the result on the surviving nodes, likewise. A node started in its own mount namespace
(where the output folder is hidden by a tmpfs) is named before any chunk runs.
Everything is stopped in a ``finally`` (only this cluster's processes); the whole module
is bounded by DEADLINE_S.

Issue 29: where the machine allows it (root, unshare) the cluster and every driver run in a
network namespace of their own with only ``lo`` (backend/farm/loopback.py says why: Ray 2.60
listens on ``*:PORT`` for any node address but 127.0.0.1); during the multi-node job
``ss -ltn`` of this machine shows no listener of the cluster outside 127.0.0.0/8 and the
cluster's ports do not answer on the machine's other addresses. The output-folder check is
retried after its worker was killed (as Ray's OOM killer does), and names the node when
retries are used up; ``farm stop TEMP_DIR`` ends one node and nothing else.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (farm extra: pip install ray==2.60.0)")

from backend.farm.loopback import LoopbackCluster  # noqa: E402
from backend.farm.ray_engine import CRASH_ONCE_ENV  # noqa: E402
from cli_util import REPO, cli_cmd, cli_env, events, run_cli  # noqa: E402

pytestmark = pytest.mark.slow
DEADLINE_S = 600  # the whole module
RES = "64"
FRAMES = "1-16"
PLAN = ["--frames", FRAMES, "--chunk", "2", "--overlap", "2"]


@pytest.fixture(scope="module")
def cluster():
    # a short root: Ray's socket paths under a node's temp dir must stay below 108 bytes
    root = Path(tempfile.mkdtemp(prefix="gbray_", dir="/tmp" if os.path.isdir("/tmp") else None))
    c = LoopbackCluster(root, workers=2, cpus=1, env={"PYTHONPATH": str(REPO), CRASH_ONCE_ENV: str(root / "crash")})
    c.t0 = time.monotonic()
    try:
        c.start(timeout=120)
        yield c
    finally:
        c.stop()
        left = c.pids()
        shutil.rmtree(root, ignore_errors=True)
        assert left == [], "cluster processes left behind"


def _left(c) -> float:
    left = DEADLINE_S - (time.monotonic() - c.t0)
    if left <= 10:
        pytest.fail(f"the Ray test module ran past its {DEADLINE_S} s deadline")
    return left


def _exrs(folder, prefix):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).glob(f"{prefix}*.exr"))}


def _manifest(folder):
    man = json.loads((Path(folder) / "manifest.json").read_text())
    for key in ("elapsed_s", "output_stats"):  # timing fields (none today); file identities (inode, times)
        man.pop(key, None)
    return man


def _run_in(c, *args, timeout=300):
    """``python -m backend ARGS`` as a driver in the cluster's network (namespace)."""
    return subprocess.run(c.wrap(cli_cmd(*args)), env=cli_env(), capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def _start_in(c, *args):
    return subprocess.Popen(c.wrap(cli_cmd(*args)), env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)


def _listeners(c, pids):
    """``(address, port)`` of the TCP listeners of ``pids`` in this machine's namespace (``ss -ltnp``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        if any(f"pid={p}," in line for p in pids):
            addr, _, port = cols[3].rpartition(":")
            found.append((addr.strip("[]"), int(port)))
    return found


def _check_listeners(c):
    """No listener of the cluster outside 127.0.0.0/8 on this machine, and its ports do not
    answer on this machine's other addresses."""
    pids = c.pids()
    assert pids
    outside = [(a, p) for a, p in _listeners(c, pids)
               if a in ("*", "0.0.0.0", "::") or not ipaddress.ip_address(a).is_loopback]
    assert outside == [], f"cluster listeners outside 127.0.0.0/8: {outside}"
    inside = subprocess.run(c.wrap(["ss", "-ltnH"]), capture_output=True, text=True, timeout=30).stdout
    ports = sorted({int(line.split()[3].rpartition(":")[2]) for line in inside.splitlines() if line.strip()})
    assert c.port in ports  # the head's GCS listens in the cluster's namespace
    addrs = subprocess.run(c.wrap(["ip", "-o", "addr"]), capture_output=True, text=True, timeout=30).stdout
    assert {line.split()[1] for line in addrs.splitlines()} == {"lo"}  # only loopback there
    import psutil

    mine = [a.address for nic in psutil.net_if_addrs().values() for a in nic
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback]
    for ip in mine:
        for port in ports[:8]:
            with socket.socket() as s:
                s.settimeout(1.0)
                assert s.connect_ex((ip, port)) != 0, f"cluster port {port} answers on {ip}"
    return len(pids), ports


def _farm(engine, job, src, out, *extra, address=None):
    args = ["farm", engine, job, src, "--out", out, *extra]
    if address:
        args += ["--address", address]
    return args


def test_decompose_across_nodes_survives_a_killed_node_then_restyle(cluster, footage, tmp_path):
    src = footage("dolphins")
    ref = tmp_path / "ref"
    r = run_cli(*_farm("local", "decompose", src, ref, *PLAN, "--processing-resolution", RES),
                timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "ray"
    t0 = time.monotonic()
    proc = _start_in(cluster, *_farm("ray", "decompose", src, out, *PLAN, "--processing-resolution", RES,
                                     address=cluster.address))
    victim_ip = cluster.node_ip("w2")
    lines, killed_at, first_chunk, checked = [], None, None, None
    try:
        for line in proc.stdout:
            lines.append(line)
            ev = json.loads(line)
            if checked is None and ev.get("event") == "progress":  # the job runs on every node now
                if not cluster.isolate:
                    checked = "no network namespace here (not root): Ray listens on *:PORT (loopback.py)"
                else:
                    checked = _check_listeners(cluster)
            if killed_at is None and ev.get("event") == "progress" and ev.get("node") == victim_ip:
                killed = cluster.kill_node("w2")  # a chunk landed there: the node dies mid-job
                assert killed
                killed_at, first_chunk = len(lines), ev["chunk"]
        rc = proc.wait(timeout=_left(cluster))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.monotonic() - t0
    err = proc.stderr.read()
    assert rc == 0, err
    evs = events("".join(lines))
    assert killed_at is not None, "no chunk ran on the victim node"
    after = [e for e in evs[killed_at:] if e["event"] == "progress" and e["chunk"] != first_chunk]
    assert after, "the job had finished before the node was killed (not mid-job)"
    done = evs[-1]
    assert done["event"] == "done" and done["done"] == 16
    nodes = {e["node"] for e in evs if e["event"] == "progress"}
    assert len(nodes) >= 2 and victim_ip in nodes, nodes
    assert all(e["node"] != victim_ip for e in after)  # every later chunk ran elsewhere
    retried = done["skipped"]  # frames a killed chunk had written, resumed by its retry
    merged = next(e for e in evs if e["event"] == "merged")
    assert merged["missing"] == "" and merged["frames"] == 16
    assert _exrs(out, "gbuffer_") == _exrs(ref, "gbuffer_") and len(_exrs(out, "gbuffer_")) == 16
    assert _manifest(out) == _manifest(ref)
    print(f"\nray decompose 16 frames on {sorted(nodes)}, node {victim_ip} killed mid-job: {wall:.1f} s; "
          f"{len(after)} frames after the kill, {retried} resumed by a retried chunk; listeners: {checked}")
    if not cluster.isolate:
        pytest.xfail(f"the listener check did not run: {checked}")

    # restyle of the shared result on the surviving nodes (head + w1)
    rref, rout = tmp_path / "rref", tmp_path / "rray"
    r = run_cli(*_farm("local", "restyle", out, rref, "--prompt", "dense fog", *PLAN), timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    r = _run_in(cluster, *_farm("ray", "restyle", out, rout, "--prompt", "dense fog", *PLAN,
                                address=cluster.address), timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    evs = events(r.stdout)
    assert len({e["node"] for e in evs if e["event"] == "progress"}) >= 2
    assert _exrs(rout, "restyle_") == _exrs(rref, "restyle_") and len(_exrs(rout, "restyle_")) == 16
    pngs = sorted(p.name for p in (rout / "preview").glob("*.png"))
    assert len(pngs) == 16 and all((rout / "preview" / n).read_bytes() == (rref / "preview" / n).read_bytes()
                                   for n in pngs)
    assert (rout / "preview.mp4").is_file()
    assert _manifest(rout)["frames"] == _manifest(rref)["frames"]


def test_other_settings_into_the_same_folder_refused_before_any_chunk(cluster, footage, tmp_path):
    src = footage("dolphins")
    out = tmp_path / "o"
    r = _run_in(cluster, *_farm("ray", "decompose", src, out, "--frames", "1-4", "--chunk", "2", "--overlap", "2",
                                "--processing-resolution", RES, address=cluster.address), timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    r = _run_in(cluster, *_farm("ray", "decompose", src, out, "--frames", "1-4", "--chunk", "2", "--overlap", "2",
                                "--processing-resolution", "96", address=cluster.address), timeout=_left(cluster))
    assert r.returncode == 1 and "another farm job with other settings (kwargs)" in r.stderr
    assert not any('"progress"' in line for line in r.stdout.splitlines())


def test_output_folder_hidden_from_a_node_is_named_before_the_first_chunk(cluster, footage, tmp_path):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to give a node its own mount namespace")
    hidden = tmp_path / "farm_storage"
    hidden.mkdir()
    d = cluster.root / "w9"
    d.mkdir()
    cluster.dirs["w9"] = d
    ray_cli = str(Path(os.sys.executable).parent / "ray")
    script = (f"mount -t tmpfs none {hidden} && exec {ray_cli} start --address={cluster.address} "
              f"--node-ip-address=127.0.0.9 --num-cpus 1 --temp-dir {d} --object-store-memory 80000000 "
              "--disable-usage-stats")
    r = subprocess.run(cluster.wrap(["unshare", "--mount", "--propagation", "private", "sh", "-c", script]),
                       env=cluster.env, capture_output=True, text=True, timeout=_left(cluster))
    if r.returncode != 0:
        pytest.skip(f"cannot start a node in its own mount namespace here: {r.stderr.strip()[-200:]}")
    try:
        cluster.wait_nodes(3, 60)  # head + w1 (w2 was killed) + this one
        out = hidden / "out"
        t0 = time.monotonic()
        r = _run_in(cluster, *_farm("ray", "decompose", footage("dolphins"), out, "--frames", "1-4", "--chunk", "2",
                                    "--overlap", "2", "--processing-resolution", RES, address=cluster.address),
                    timeout=_left(cluster))
        assert r.returncode == 1
        assert "is not visible from worker node 127.0.0.9" in r.stderr, r.stderr
        assert not list(out.glob("gbuffer_*.exr")) and not any('"start"' in x for x in r.stdout.splitlines())
        print(f"\ninvisible folder named in {time.monotonic() - t0:.1f} s")
    finally:
        cluster.kill_node("w9")


def test_the_output_folder_check_is_retried_and_names_the_node(cluster, footage, tmp_path):
    """Issue 29: Ray's OOM killer took the output-folder check task, which was not retried,
    and the error was Ray's raw text naming no node. The check's worker is killed once
    (SIGKILL, as the OOM killer does): with retries the job completes; without, the
    one-line error names the node."""
    crash = Path(cluster.env[CRASH_ONCE_ENV])
    args = ["--frames", "1-2", "--chunk", "2", "--overlap", "0", "--processing-resolution", RES]
    crash.write_text("")
    r = _run_in(cluster, *_farm("ray", "decompose", footage("dolphins"), tmp_path / "a", *args,
                                address=cluster.address), timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    assert not crash.exists()  # a check was killed, and retried
    crash.write_text("")
    r = _run_in(cluster, *_farm("ray", "decompose", footage("dolphins"), tmp_path / "b", *args, "--retries", "0",
                                address=cluster.address), timeout=_left(cluster))
    crash.unlink(missing_ok=True)
    assert r.returncode == 1
    # Ray's raylet may print its own note about the dead worker first; ours is the last line
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: the output-folder check on worker node 127.0.0."), r.stderr
    assert "failed after 0 retries: WorkerCrashedError" in line, line


def test_farm_stop_ends_exactly_one_node(cluster, footage, tmp_path):
    """``farm stop TEMP_DIR`` (not ``ray stop``, which ends every Ray process on the
    machine): the node of that temp dir is gone, the others run on. (The last test of the
    module: it takes w1 away.)"""
    w1, head = cluster.pids("w1"), cluster.pids("head")
    assert w1 and head
    r = run_cli("farm", "stop", cluster.dirs["w1"], timeout=_left(cluster))
    assert r.returncode == 0, r.stderr
    (ev,) = events(r.stdout)
    assert ev["event"] == "stopped" and set(w1) <= set(ev["pids"]) and ev["left"] == []
    assert cluster.pids("w1") == []
    assert set(head) <= set(cluster.pids("head"))  # untouched
    p = subprocess.run(cluster.wrap([os.sys.executable, "-c", f"import socket; socket.create_connection("
                                     f"({cluster.address.split(':')[0]!r}, {cluster.port}), 5).close()"]),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr  # the head still answers
    r = run_cli("farm", "stop", tmp_path, timeout=60)
    assert r.returncode == 2 and "is not a Ray node's temp dir" in r.stderr


def test_address_that_does_not_answer_one_line_within_the_timeout(footage, tmp_path):
    t0 = time.monotonic()
    r = run_cli(*_farm("ray", "decompose", footage("dolphins"), tmp_path / "o", "--chunk", "4", "--overlap", "2",
                       "--connect-timeout", "3", address="127.0.0.9:1"), timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "does not answer" in r.stderr, r.stderr
    assert took < 3 + 15  # interpreter start + the probe's 3 s at most
    assert not (tmp_path / "o").exists()  # nothing touched


def test_ray_is_imported_lazily():
    r = subprocess.run([os.sys.executable, "-c", "import sys, backend, backend.farm.cli, backend.farm.engine_cli, "
                        "backend.farm.ray_engine; print('ray' in sys.modules)"],
                       env=cli_env(), capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
