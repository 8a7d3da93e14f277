"""A Ray cluster on this machine's loopback addresses, for tests, CI and benchmarks.

``LoopbackCluster(root, workers=2)`` starts a head and worker nodes with ``ray start``,
each on its own loopback address and with its own temp dir under ``root``, one CPU
each (or ``cpus``), a small object store and no dashboard; :meth:`stop` ends exactly
the processes of these nodes (:func:`backend.farm.nodes.stop_nodes`: found by their temp
dirs, plus their children), never others; :meth:`kill_node` SIGKILLs one node (its
raylet and everything under it) as a node failure would.

Listening addresses: Ray 2.60 binds its gRPC servers (GCS, raylets, object managers, core
workers) to every interface (``*:PORT``) unless the node address is exactly
``127.0.0.1``/``localhost``/``::1`` (``ray._common.network_utils.is_localhost``), and
``ray start`` replaces those by the machine's primary address
(``services.resolve_ip_for_localhost``); no option makes a ``127.0.0.x`` node listen on
loopback only. So with ``isolate`` (default: when possible, i.e. as root with
``unshare``/``nsenter``) every node, and every command run through :meth:`wrap` (the
driver), runs in a network namespace of its own that has only ``lo``: the wildcard
listeners exist there only, no process outside the namespace can reach them, and the
machine's own namespace (``ss -ltn``) shows none of them (tests/test_farm_ray.py checks
both). Without it the cluster listens on ``*:PORT`` like any Ray cluster.

Addresses: the head uses ``127.0.0.4``, not ``127.0.0.1``: Ray replaces a node address
of ``127.0.0.1``/``localhost`` by the machine's primary address (on purpose, see
ray-project/ray#26293 and #1556), which would take the head off loopback. Workers use
``127.0.0.2``, ``127.0.0.3``, ... (Linux routes all of ``127.0.0.0/8`` to ``lo``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

HEAD_IP = "127.0.0.4"
WORKER_IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.5", "127.0.0.6")


def free_port() -> int:
    """A TCP port free on the head's address now."""
    import socket

    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        return s.getsockname()[1]


def _ray_cli() -> List[str]:
    exe = Path(sys.executable).parent / "ray"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


class LoopbackCluster:
    """See the module docstring.

    Args:
        root: a fresh folder for the nodes' temp dirs (``root/head``, ``root/w1``...).
        workers: worker nodes besides the head.
        cpus: Ray CPUs of each node (the head included; 0 for a head that runs no chunk).
        port: the head's GCS port; ``None`` (default): a free one (two clusters on one
            machine, e.g. two test runs, must not share it).
        env: extra environment of the nodes (e.g. ``PYTHONPATH``).
    """

    def __init__(self, root: os.PathLike, workers: int = 2, cpus: int = 1, port: Optional[int] = None,
                 head_cpus: Optional[int] = None, env: Optional[Dict[str, str]] = None,
                 object_store_bytes: int = 80 * 1024 * 1024, isolate: Optional[bool] = None):
        self.root = Path(root)
        self.workers, self.cpus = workers, cpus
        self.port = port if port is not None else free_port()
        self.head_cpus = cpus if head_cpus is None else head_cpus
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **(env or {}))
        self.store = int(object_store_bytes)
        self.dirs: Dict[str, Path] = {}
        self.isolate = can_isolate() if isolate is None else bool(isolate)
        self.netns_holder: Optional[subprocess.Popen] = None

    # --------------------------------------------------------------- namespace
    def wrap(self, argv: List[str]) -> List[str]:
        """``argv`` run inside the cluster's network namespace (unchanged without one)."""
        if self.netns_holder is None:
            return list(argv)
        return ["nsenter", f"--net=/proc/{self.netns_holder.pid}/ns/net", "--", *map(str, argv)]

    def _enter_namespace(self, timeout: float) -> None:
        self.netns_holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep 86400"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + min(timeout, 20)
        while time.monotonic() < deadline:
            r = subprocess.run(self.wrap(["ip", "-o", "link", "show", "lo"]), capture_output=True, text=True)
            if r.returncode == 0 and "UP" in r.stdout.split("<", 1)[-1].split(">", 1)[0]:
                return
            if self.netns_holder.poll() is not None:
                break
            time.sleep(0.1)
        err = self.netns_holder.stderr.read() if self.netns_holder.poll() is not None else ""
        self._leave_namespace()
        raise RuntimeError(f"cannot create the cluster's network namespace: {err.strip()[-300:]}")

    def _leave_namespace(self) -> None:
        if self.netns_holder is not None:
            self.netns_holder.kill()
            self.netns_holder.wait()
            self.netns_holder = None

    @property
    def address(self) -> str:
        return f"{HEAD_IP}:{self.port}"

    def _start(self, name: str, args: List[str], timeout: float) -> None:
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        self.dirs[name] = d
        # every fixed-default port a free one, so two clusters on one machine (two test runs) never meet
        ports = [f"--{opt}={free_port()}" for opt in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                     "metrics-export-port", "runtime-env-agent-port")]
        cmd = _ray_cli() + ["start", *args, *ports, "--temp-dir", str(d), "--object-store-memory", str(self.store),
                            "--disable-usage-stats"]
        r = subprocess.run(self.wrap(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed: {r.stderr.strip().splitlines()[-3:]}")

    def start(self, timeout: float = 90.0) -> "LoopbackCluster":
        """Start the head, then the workers; wait until every node is alive.

        Raises:
            RuntimeError: a node did not start or join within ``timeout``.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        if self.isolate and self.netns_holder is None:
            self._enter_namespace(timeout)
        self._start("head", ["--head", f"--node-ip-address={HEAD_IP}", f"--port={self.port}",
                             "--num-cpus", str(self.head_cpus), "--include-dashboard=false"], timeout)
        for i in range(self.workers):
            self._start(f"w{i + 1}", [f"--address={self.address}", f"--node-ip-address={WORKER_IPS[i]}",
                                      "--num-cpus", str(self.cpus)], timeout)
        self.wait_nodes(1 + self.workers, timeout)
        return self

    def wait_nodes(self, n: int, timeout: float) -> None:
        code = ("import ray,sys,time\n"
                f"ray.init(address={self.address!r}, _node_ip_address={HEAD_IP!r}, log_to_driver=False,"
                " logging_level='ERROR')\n"
                f"t=time.time()\nwhile sum(x['Alive'] for x in ray.nodes())<{n} and time.time()-t<{timeout}:"
                " time.sleep(0.5)\n"
                f"sys.exit(0 if sum(x['Alive'] for x in ray.nodes())>={n} else 1)\n")
        r = subprocess.run(self.wrap([sys.executable, "-c", code]), env=self.env, capture_output=True, text=True,
                           timeout=timeout + 30)
        if r.returncode != 0:
            raise RuntimeError(f"the loopback cluster has fewer than {n} alive nodes: {r.stderr[-500:]}")

    def node_ip(self, name: str) -> str:
        return HEAD_IP if name == "head" else WORKER_IPS[int(name[1:]) - 1]

    def pids(self, name: Optional[str] = None) -> List[int]:
        """Processes of one node (or all): those naming its temp dir, and their children."""
        from .nodes import node_pids

        return node_pids([self.dirs[name]] if name else list(self.dirs.values()))

    def kill_node(self, name: str) -> List[int]:
        """SIGKILL every process of node ``name`` (a node failure); returns the pids."""
        pids = self.pids(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return pids

    def stop(self, timeout: float = 20.0) -> None:
        """End every process of the cluster's nodes (SIGTERM, then SIGKILL), then its
        network namespace."""
        from .nodes import stop_nodes

        try:
            if self.dirs:
                stop_nodes(list(self.dirs.values()), timeout=timeout)
        finally:
            self._leave_namespace()


def can_isolate() -> bool:
    """Whether a cluster can get a network namespace of its own here (root, Linux,
    ``unshare``, ``nsenter`` and ``ip`` on PATH, and the kernel allows it)."""
    import shutil

    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    if not all(shutil.which(x) for x in ("unshare", "nsenter", "ip")):
        return False
    try:
        r = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0
