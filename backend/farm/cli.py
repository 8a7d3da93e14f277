"""``python -m backend farm ...``: farm commands.

* ``farm anchors INPUT --out OUT [decompose options]``: the shot-wide depth anchors
  (:mod:`backend.jobs.anchors`) every decompose chunk aligns to; once, before the chunks.
* ``farm stop TEMP_DIR...``: end exactly the Ray nodes started with these ``--temp-dir``
  folders (:mod:`backend.farm.nodes`; ``ray stop`` ends every Ray process on the machine).
* ``farm merge OUT [--frames A-B]``: assemble ``manifest.json`` from the chunks'
  manifest parts; prints one JSON line (``{"event": "merged", ...}``); exit 0 when every
  wanted frame is present, 1 naming the missing frames otherwise.
* ``farm local decompose|restyle <usual args> --chunk N --overlap K``: the farm plan,
  chunks run one after another in this process (the single-process reference).
* ``farm ray decompose|restyle <usual args> --chunk N --overlap K --address ADDR
  [--connect-timeout S]``: the same plan on a Ray cluster (:mod:`backend.farm.ray_engine`).
"""
from __future__ import annotations

import argparse
import sys

from .. import events
from ..arguments import cli_float


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``farm`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser("farm", help="farm jobs: Ray, a local reference run, merging manifest parts",
                              description="Run a shot as chunks on a farm engine (see docs/farm_ray.md).")
    sub = p.add_subparsers(dest="farm_command", metavar="FARM_COMMAND")
    sub.required = True
    m = sub.add_parser("merge", help="assemble manifest.json from the chunks' manifest parts",
                       description="Assemble OUT/manifest.json from OUT/.gbuffer_parts/*.json (atomic). "
                                   "Exit 0 when every wanted frame is present, 1 naming the missing ones.")
    m.add_argument("out", help="the farm job's output folder")
    m.add_argument("--frames", help="the frames the job was asked for, A-B (default: the whole shot)")
    m.set_defaults(func=run_merge)
    from ..jobs import decompose_cli

    a = decompose_cli.add_parser(
        sub, "anchors", help="the shot-wide depth anchors every decompose chunk aligns to (before the chunks)",
        description="Compute a shot's depth anchors into OUT/.gbuffer_depth_anchors.npz (the estimator and the "
                    "frame-to-frame alignment over every frame of --frames; docs/farm_ray.md). Takes "
                    "decompose's options; those that do not change the anchors are ignored. Chunks then run "
                    "with --depth-anchors OUT/.gbuffer_depth_anchors.npz. Kept when it exists for the same "
                    "inputs.")
    a.set_defaults(func=run_anchors)
    st = sub.add_parser("stop", help="stop exactly the Ray nodes started with these --temp-dir folders",
                        description="End the processes of the Ray nodes started with 'ray start ... --temp-dir "
                                    "DIR' (their command lines name DIR; children included): SIGTERM, then "
                                    "SIGKILL. Unlike 'ray stop', other Ray clusters on the machine are left "
                                    "alone. One JSON line; exit 1 when a process survived.")
    st.add_argument("temp_dirs", nargs="+", metavar="TEMP_DIR", help="a node's --temp-dir")
    st.add_argument("--timeout", type=cli_float, default=20.0, metavar="S", help="seconds in all (default: %(default)s)")
    st.set_defaults(func=run_stop)
    import importlib.util

    if importlib.util.find_spec(__package__ + ".engine_cli") is not None:  # the engines (optional module)
        from . import engine_cli

        engine_cli.add_engines(sub)
    return p


def run_anchors(args) -> int:
    """``farm anchors``: one JSON line ``{"event": "anchors", ...}``."""
    from ..jobs import decompose_cli
    from ..jobs.anchors import compute_anchors

    kw = decompose_cli.kwargs(args)
    if kw.get("cameras") or kw.get("depth_anchors") or kw.get("warmup") is not None or kw.get("manifest_part"):
        raise ValueError("farm anchors: --cameras, --depth-anchors, --warmup and --manifest-part do not apply")
    events.emit(compute_anchors(args.input, args.out, **kw))
    return 0


def run_stop(args) -> int:
    """``farm stop``: one JSON line ``{"event": "stopped", ...}``; exit 1 when processes are left."""
    from .nodes import check_temp_dir, stop_nodes

    dirs = [check_temp_dir(d) for d in args.temp_dirs]
    res = stop_nodes(dirs, timeout=args.timeout)
    events.emit(res)
    if res["left"]:
        sys.stderr.write(f"error: processes {res['left']} of {', '.join(map(str, dirs))} are still running\n")
        return 1
    return 0


def run_merge(args) -> int:
    """``farm merge``: one JSON summary line; exit 1 when wanted frames are missing."""
    from ..jobs.decompose import parse_frames
    from .merge import merge

    wanted = None
    if args.frames is not None:  # '' is refused, not the whole shot
        first, last = parse_frames(args.frames)
        if last is None:
            raise ValueError("farm merge --frames: expected A-B")
        wanted = list(range(first, last + 1))
    summary = merge(args.out, wanted)
    events.emit(summary)
    if summary["missing"]:
        sys.stderr.write(f"error: {args.out}: frames {summary['missing']} are missing; re-run their chunks "
                         f"(a re-run resumes), then merge again\n")
        return 1
    return 0
