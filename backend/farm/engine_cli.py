"""``python -m backend farm local|ray decompose|restyle <usual args> --chunk N --overlap K``.

The driver of a farm job, the same for every engine:

1. plan (:func:`backend.farm.chunks.make_plan`): chunks of N frames; refusals before
   anything runs (chunk below the overlap, a range outside the clip, farm-owned options);
2. claim the folder (``.gbuffer_farm.json``: another farm job with another plan is
   refused) and write the visibility token;
3. a parallel decompose: the shot-wide depth anchors (:mod:`backend.depth_anchors`),
   once, before the chunks (every chunk aligns its depth to them);
4. run the chunks: ``local`` one after another in this process (the single-process
   reference), ``ray`` as Ray tasks on the cluster (:mod:`backend.farm.ray_engine`);
5. merge the manifest parts (:func:`backend.farm.merge.merge`).

Events (JSON lines on stdout, as for every job)::

    {"event": "start", "job", "engine", "total", "chunks", "chunk", "overlap", "out"}
    {"event": "anchors", "file", "frames", "digest", "reused", "elapsed_s", "node"}   (decompose, parallel)
    {"event": "progress", "frame", "done", "total", "fps", "eta_s", "skipped", "chunk", "node"}
    {"event": "warning", ...}                     (a chunk's warnings, a retried chunk)
    {"event": "merged", ...}                      (see backend.farm.merge.merge)
    {"event": "done", "job", "engine", "done", "written", "skipped", "total", "elapsed_s", "out", "nodes"}

Progress lines of a chunk are reported when the chunk finishes (a chunk is the unit a
farm engine reports on). Exit codes as for every command: 0 done, 1 failed (a chunk
failed after its retries, or frames are missing after the merge), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List

from .. import events
from ..arguments import cli_float, cli_int, int_text

DEFAULT_OVERLAP = 8
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def overlap_arg(text: str):
    """argparse type of ``--overlap``: an integer >= 0, or ``chain`` (``None``)."""
    if text.strip().lower() == "chain":
        return None
    try:
        v = int_text(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 in ASCII digits or 'chain', got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 or 'chain', got {v}")
    return v


def add_engines(sub) -> None:
    """Add ``local`` and ``ray`` (each with ``decompose`` and ``restyle``) to ``farm``'s subparsers."""
    from ..jobs import decompose_cli, restyle_cli

    for engine, text in (("local", "run the farm plan's chunks one after another in this process "
                                   "(the single-process reference of a farm job)"),
                         ("ray", "run the farm plan's chunks as tasks on a Ray cluster")):
        e = sub.add_parser(engine, help=text, description=text[0].upper() + text[1:] + ".")
        jobs = e.add_subparsers(dest="farm_job", metavar="JOB")
        jobs.required = True
        for job, mod in (("decompose", decompose_cli), ("restyle", restyle_cli)):
            p = mod.add_parser(jobs)
            g = p.add_argument_group("farm job")
            g.add_argument("--chunk", type=cli_int, required=True, metavar="N", help="frames per chunk (>= --overlap)")
            g.add_argument("--overlap", type=overlap_arg, default=DEFAULT_OVERLAP, metavar="K|chain",
                           help="K: warmup frames computed (and discarded) before each chunk, chunks run in "
                                "parallel; chain: each chunk continues from the previous chunk's last frame "
                                "(a dependency: decompose chunks then run one after another, output "
                                "byte-identical to an unchunked run). Default: %(default)s")
            if job == "decompose":
                g.add_argument("--no-depth-anchors", dest="depth_anchor_pass", action="store_false",
                               help="skip the shot-wide depth anchors (OUT/.gbuffer_depth_anchors.npz, computed "
                                    "before the chunks): parallel chunks then align depth from their own "
                                    "warmup and drift from an unchunked run by several per cent")
            if engine == "ray":
                g.add_argument("--address", required=True, metavar="HOST:PORT",
                               help="the Ray cluster's head (GCS) address, e.g. 10.0.0.1:6379")
                g.add_argument("--connect-timeout", type=cli_float, default=DEFAULT_CONNECT_TIMEOUT_S, metavar="S",
                               help="seconds to wait for the head to answer (default: %(default)s)")
                g.add_argument("--retries", type=cli_int, default=3, metavar="R",
                               help="times a chunk is retried after its worker or node died (default: %(default)s)")
                g.add_argument("--cpus-per-chunk", type=cli_float, default=1.0, metavar="C",
                               help="Ray CPUs a chunk task takes (default: %(default)s)")
                g.add_argument("--gpus-per-chunk", type=cli_float, default=0.0, metavar="G",
                               help="Ray GPUs a chunk task takes (default: %(default)s: CPU-only clusters work)")
            p.set_defaults(func=run_farm, engine=engine, farm_job=job)


def _job_args(args) -> tuple:
    """``(src, out, kwargs)`` of the job from its parsed arguments."""
    from ..jobs import decompose_cli, restyle_cli

    if args.warmup is not None or args.manifest_part:
        raise ValueError("--warmup and --manifest-part are set by the farm job per chunk; use --overlap")
    if args.farm_job == "decompose":
        return args.input, args.out, decompose_cli.kwargs(args)
    kw = restyle_cli.kwargs(args)
    kw["prompt"] = args.prompt
    return args.gbuffer_dir, args.out, kw


def run_farm(args) -> int:
    """Run a parsed ``farm local|ray JOB ...`` command; returns the exit code."""
    from .chunks import claim_folder, make_plan
    from .merge import merge

    src, out, kwargs = _job_args(args)
    if kwargs.get("overwrite"):
        raise ValueError("--overwrite is not supported by farm jobs: empty the folder or choose another --out")
    frames = kwargs.pop("frames", None)
    kwargs.pop("overwrite", None)
    plan = make_plan(args.farm_job, src, out, kwargs, frames=frames, chunk=args.chunk, overlap=args.overlap,
                     anchors=getattr(args, "depth_anchor_pass", True))
    t0 = time.monotonic()
    if args.engine == "ray":
        from . import ray_engine

        engine = ray_engine.RayEngine(args.address, connect_timeout_s=args.connect_timeout, retries=args.retries,
                                      cpus=args.cpus_per_chunk, gpus=args.gpus_per_chunk)
        engine.connect()  # an address that does not answer: one line, before the folder is touched
    else:
        engine = LocalEngine()
    engine.cancel = getattr(args, "cancel", None)  # the CLI's first SIGINT/SIGTERM sets it
    try:
        claim_folder(plan)
        engine.check_visible(plan)  # every worker sees the folder, before the first chunk
        events.emit({"event": "start", "job": plan.job, "engine": args.engine, "total": len(plan.wanted),
                     "chunks": len(plan.chunks), "chunk": plan.chunk,
                     "overlap": "chain" if plan.overlap is None else plan.overlap, "out": str(out)})
        report = _Report(len(plan.wanted), t0)
        if plan.anchor_pass:
            events.emit(engine.anchors(plan))  # once, before the chunks: every chunk aligns to them
        engine.run(plan, report)
    finally:
        engine.close()
    summary = merge(out, plan.wanted)
    events.emit(summary)
    events.emit({"event": "done", "job": plan.job, "engine": args.engine, "done": report.done,
                 "written": report.written, "skipped": report.skipped, "total": len(plan.wanted),
                 "elapsed_s": round(time.monotonic() - t0, 3), "out": str(out), "nodes": sorted(report.nodes)})
    if summary["missing"]:
        from ..errors import JobError

        raise JobError(f"{out}: frames {summary['missing']} are missing after the merge; re-run the job "
                       f"(finished chunks resume)", file=out)
    return 0


class _Report:
    """Turns finished chunks into progress events with job-wide counts."""

    def __init__(self, total: int, t0: float):
        self.total, self.t0 = total, t0
        self.done = self.written = self.skipped = 0
        self.nodes: set = set()
        self.by_chunk: Dict[str, Dict[str, Any]] = {}

    def chunk_done(self, res: Dict[str, Any]) -> None:
        self.nodes.add(res["node"])
        self.by_chunk[res["chunk"]] = res
        elapsed = time.monotonic() - self.t0
        for ev in res.get("events", []):
            if ev.get("event") == "warning":
                events.emit(ev)
                continue
            self.done += 1
            if ev.get("skipped"):
                self.skipped += 1
            else:
                self.written += 1
            fps = self.written / elapsed if elapsed > 0 and self.written else None
            eta = round((self.total - self.done) / fps, 2) if fps else None
            events.emit({"event": "progress", "frame": ev.get("frame"), "done": self.done, "total": self.total,
                         "fps": None if fps is None else round(fps, 3), "eta_s": eta,
                         "skipped": bool(ev.get("skipped")), "chunk": res["chunk"], "node": res["node"]})


class LocalEngine:
    """``farm local``: the chunks one after another in this process."""

    def connect(self) -> None:
        pass

    def check_visible(self, plan) -> None:
        from .chunks import check_visible

        check_visible(plan.out, plan.token)

    cancel = None  # threading.Event: stop after the current frame (set by run_farm)

    def anchors(self, plan) -> Dict[str, Any]:
        from .chunks import anchor_frames, run_anchors

        return run_anchors(plan.src, plan.out, plan.kwargs, anchor_frames(plan), plan.token)

    def run(self, plan, report: _Report) -> None:
        from ..errors import JobCancelled
        from .chunks import run_chunk

        for c in plan.chunks:  # in order: "chain" has its dependency
            if self.cancel is not None and self.cancel.is_set():
                raise JobCancelled(report.written, c.first)
            report.chunk_done(run_chunk(plan.job, plan.src, plan.out, plan.kwargs, c.first, c.last, plan.overlap,
                                        plan.token, cancel=self.cancel))

    def close(self) -> None:
        pass


def chunk_names(plan) -> List[str]:
    """The plan's chunk names (``A-B``), in order."""
    return [c.name for c in plan.chunks]
