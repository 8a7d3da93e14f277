"""``python -m backend farm ray ...``: a farm job's chunks as Ray tasks.

Ray is optional (the farm extra: ``pip install ray==2.60.0``; never in the extension
zip) and imported only here, when a Ray job starts: ``import backend`` never needs it.

* **Connect**: a TCP probe of ``--address`` first, bounded by ``--connect-timeout``
  (default 10 s): an address that does not answer fails in one line, without hanging;
  then ``ray.init(address=...)`` (also bounded).
* **Visibility**: before the first chunk, one small task on every alive node with CPUs
  reads the token the driver wrote into ``--out``; a node that cannot is named and the
  job stops before anything is computed. Every chunk checks the token again.
* **Chunks**: one Ray task per chunk (``SPREAD`` over the nodes), ``num_cpus`` /
  ``num_gpus`` per chunk from ``--cpus-per-chunk`` / ``--gpus-per-chunk`` (CPU-only
  clusters work: 0 GPUs). Ray reuses its worker processes and each process keeps the
  estimator it loaded (:func:`backend.farm.chunks._cached_estimator`), so a GPU model
  stays loaded across the chunks a worker runs.
* **Retries**: a chunk whose worker or node died is retried by Ray (``--retries``,
  default 3) on any alive node; it resumes its frames already written (byte-identical,
  see :mod:`backend.jobs.parts`). A chunk that fails with an error of the job itself
  (bad input, refused folder) is not retried: the job stops naming the chunk.

The backend must be importable at the same path on every node (the driver passes its
location as ``PYTHONPATH`` to the workers) and ``--out`` (and the input) must be on
storage every node mounts at the same path.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .. import events
from ..errors import JobError

RAY_VERSION = "2.60.0"
RAY_MISSING = f"ray is not installed: pip install ray=={RAY_VERSION}"
#: seconds the per-node visibility probes may take (worker start-up included)
PROBE_TIMEOUT_S = 120.0
#: the repository root holding the ``backend`` package (PYTHONPATH of the workers)
BACKEND_ROOT = str(Path(__file__).resolve().parents[2])


#: tests only: a file path; the first output-folder check that finds the file removes it and
#: kills its own worker process, as Ray's OOM killer would (the check must be retried)
CRASH_ONCE_ENV = "GBUFFER_FARM_TEST_CRASH_ONCE"


def _probe(out: str, token: str, addr: Optional[str]) -> str:
    """The output-folder check task (:func:`backend.farm.chunks.check_visible`)."""
    from .chunks import check_visible

    crash = os.environ.get(CRASH_ONCE_ENV)
    if crash:
        try:
            os.unlink(crash)
        except OSError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    return check_visible(out, token, addr)


def _on_node(e: BaseException) -> str:
    """`` on node ADDR`` for an error a Ray task raised, when Ray says where it ran."""
    ip = getattr(e, "ip", None) or getattr(getattr(e, "cause", None), "ip", None)
    if not ip:
        m = re.search(r"\b(?:IP|ip|node_ip_address)[:=]\s*'?([0-9]{1,3}(?:\.[0-9]{1,3}){3})", str(e))
        ip = m.group(1) if m else None
    return f" on node {ip}" if ip else ""


#: Ray errors meaning a node (or its worker) is gone, not that the task failed
_NODE_GONE = ("TaskUnschedulableError", "NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError",
              "RaySystemError")
#: Ray errors of a task whose worker or node died (Ray retried it ``--retries`` times)
_DIED = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError", "RaySystemError",
         "LocalRayletDiedError", "OutOfMemoryError")


def import_ray():
    """``import ray``, or :class:`JobError` with :data:`RAY_MISSING`."""
    try:
        import ray
    except ImportError:
        raise JobError(RAY_MISSING) from None
    return ray


def parse_address(address: str) -> Tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``.

    Raises:
        ValueError: not ``host:port`` (``ray://`` client addresses are not supported).
    """
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or "//" in host:
        raise ValueError(f"--address {address!r}: expected HOST:PORT of the Ray head (GCS), e.g. 10.0.0.1:6379")
    return host.strip("[]"), int(port)


def _is_local(host: str) -> bool:
    try:
        return ipaddress_is_loopback(socket.gethostbyname(host))
    except OSError:
        return False


def ipaddress_is_loopback(ip: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def _cause(e: BaseException) -> str:
    """One line for an exception a Ray task raised (its original cause when Ray kept it)."""
    cause = getattr(e, "cause", None)
    err = cause if isinstance(cause, BaseException) else e
    text = str(err).strip().splitlines()
    line = next((t for t in reversed(text) if t.strip()), type(err).__name__) if text else type(err).__name__
    return line if isinstance(err, JobError) else f"{type(err).__name__}: {line}"


class RayEngine:
    """The Ray engine of :mod:`backend.farm.engine_cli`.

    Args:
        address: ``HOST:PORT`` of the head (the GCS port ``ray start --head`` prints).
        connect_timeout_s: seconds to wait for the head (TCP, then ``ray.init``).
        retries: Ray retries of a chunk whose worker or node died.
        cpus, gpus: Ray resources per chunk task.
    """

    def __init__(self, address: str, *, connect_timeout_s: float = 10.0, retries: int = 3,
                 cpus: float = 1.0, gpus: float = 0.0):
        self.address = address
        self.host, self.port = parse_address(address)
        if connect_timeout_s <= 0:
            raise ValueError(f"--connect-timeout {connect_timeout_s}: expected seconds > 0")
        if retries < 0:
            raise ValueError(f"--retries {retries}: expected an integer >= 0")
        self.timeout, self.retries, self.cpus, self.gpus = float(connect_timeout_s), int(retries), cpus, gpus
        self.ray = None

    # --------------------------------------------------------------------- connect
    def connect(self) -> None:
        """Probe the head, then ``ray.init``; one :class:`JobError` line on failure.

        Raises:
            JobError: ray missing; the address does not answer within the timeout.
        """
        ray = import_ray()
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout):
                pass
        except OSError as e:
            why = "no answer" if isinstance(e, socket.timeout) else (e.strerror or str(e))
            raise JobError(f"Ray cluster at {self.address} does not answer ({why}; waited at most "
                           f"{self.timeout:g} s): start the head there with 'ray start --head' or fix --address"
                           ) from None
        kw: Dict[str, Any] = dict(address=self.address, log_to_driver=False, logging_level="ERROR",
                                  configure_logging=True, include_dashboard=False,
                                  runtime_env={"env_vars": {"PYTHONPATH": BACKEND_ROOT}})
        if _is_local(self.host):  # a driver on a loopback cluster joins it on the head's address
            kw["_node_ip_address"] = socket.gethostbyname(self.host)
        err: Dict[str, BaseException] = {}

        def init():
            try:
                ray.init(**kw)
            except BaseException as e:  # noqa: BLE001 - reported below
                err["e"] = e

        t = threading.Thread(target=init, daemon=True, name="ray-init")
        t.start()
        t.join(self.timeout + 20.0)  # ray.init itself takes a few seconds on a busy machine
        if t.is_alive():
            raise JobError(f"Ray cluster at {self.address} answers but ray.init did not finish within "
                           f"{self.timeout + 20:g} s: is it a Ray head (GCS) port?")
        if "e" in err:
            raise JobError(f"cannot join the Ray cluster at {self.address}: {_cause(err['e'])}") from None
        self.ray = ray

    def close(self) -> None:
        if self.ray is not None and self.ray.is_initialized():
            self.ray.shutdown()

    # ------------------------------------------------------------------ visibility
    def nodes(self):
        """Alive nodes that can run chunks (``[(node id, address)]``)."""
        return [(n["NodeID"], n.get("NodeManagerAddress")) for n in self.ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]

    def check_visible(self, plan) -> None:
        """One probe task per node reads the token in ``--out``.

        Raises:
            JobError: naming the first node that cannot see the folder (or did not answer).
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        # an infrastructure task: retried like a chunk when its worker dies (Ray's OOM
        # killer took it under memory pressure; issue 29)
        probe = ray.remote(num_cpus=0, max_retries=self.retries, retry_exceptions=False)(_probe)
        refs = {}
        for node_id, addr in self.nodes():
            refs[probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(
                plan.out, plan.token, addr)] = addr
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
        alive = {addr for _, addr in self.nodes()}
        for r in pending:
            if refs[r] in alive:
                raise JobError(f"worker node {refs[r]} did not answer the output-folder check within "
                               f"{PROBE_TIMEOUT_S:g} s", file=plan.out)
        for r in ready:
            try:
                ray.get(r)
            except Exception as e:  # noqa: BLE001 - the probe's JobError names the node
                gone = type(e).__name__ in ("TaskUnschedulableError", "NodeDiedError", "LocalRayletDiedError")
                if gone or refs[r] not in {a for _, a in self.nodes()}:
                    # the node left the cluster (Ray had not marked it dead yet): it runs no chunk
                    events.warning(f"worker node {refs[r]} left the cluster during the output-folder check; "
                                   f"its chunks run on the other nodes")
                    continue
                if isinstance(getattr(e, "cause", None), JobError):  # the check's own error names the node
                    raise JobError(_cause(e), file=plan.out) from None
                extra = f" after {self.retries} retries" if type(e).__name__ in _DIED else ""
                raise JobError(f"the output-folder check on worker node {refs[r]} failed{extra}: {_cause(e)}",
                               file=plan.out) from None

    # -------------------------------------------------------------------- anchors
    def anchors(self, plan) -> Dict[str, Any]:
        """The shot-wide depth anchors, as one task with a chunk's resources (the estimator
        runs where chunks run), retried like a chunk when its worker or node dies.

        Raises:
            JobError: naming the task and the node it ran on.
        """
        from .chunks import anchor_frames, run_anchors

        task = self.ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=self.retries,
                               retry_exceptions=False)(run_anchors)
        ref = task.remote(plan.src, plan.out, plan.kwargs, anchor_frames(plan), plan.token)
        try:
            return self.ray.get(ref)
        except Exception as e:  # noqa: BLE001 - one line naming the node
            extra = f" after {self.retries} retries" if type(e).__name__ in _DIED else ""
            raise JobError(f"the depth-anchor pass failed{extra}{_on_node(e)}: {_cause(e)}", file=plan.out) from None

    # ------------------------------------------------------------------------ run
    def run(self, plan, report) -> None:
        """Submit every chunk, report each as it finishes; stop at the first failed chunk.

        Raises:
            JobError: naming the chunk (and why: its own error, or its retries used up).
        """
        from .chunks import run_chunk

        ray = self.ray
        task = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=self.retries,
                          retry_exceptions=False)(run_chunk)
        refs, prev = {}, None
        for c in plan.chunks:
            # "chain" (overlap None): a chunk depends on the previous chunk's result (Ray starts it
            # when that one is done); else chunks are independent
            ref = task.options(scheduling_strategy="SPREAD").remote(
                plan.job, plan.src, plan.out, plan.kwargs, c.first, c.last, plan.overlap, plan.token,
                prev if plan.overlap is None else None)
            refs[ref] = c
            prev = ref
        pending = list(refs)
        cancel = getattr(self, "cancel", None)
        try:
            while pending:
                if cancel is not None and cancel.is_set():
                    from ..errors import JobCancelled

                    raise JobCancelled(report.written)  # the chunks still running are cancelled below
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                if not ready:
                    continue
                for r in ready:
                    try:
                        res = ray.get(r)
                    except Exception as e:  # noqa: BLE001 - one line naming the chunk
                        c = refs[r]
                        died = type(e).__name__ in _DIED
                        extra = f" after {self.retries} retries" if died else ""
                        raise JobError(f"chunk {c.name} (frames {c.first}-{c.last}) failed{extra}{_on_node(e)}: "
                                       f"{_cause(e)}", frame=c.first, file=plan.out) from None
                    report.chunk_done(res)
        except BaseException:
            for r in pending:
                try:
                    ray.cancel(r, force=True)
                except Exception:  # noqa: BLE001 - best effort
                    pass
            raise

