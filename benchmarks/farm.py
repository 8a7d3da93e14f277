"""Farm benchmark (issues 18, 29): parallel chunks against an unchunked run, the anchor
pass's cost, and 1 node vs a 3-node Ray cluster.

Usage::

    .venv/bin/python benchmarks/farm.py [--out benchmarks/results] [--quick]
        [--clips bikes,boat,dolphins,phone_office] [--skip-throughput]

Prints markdown tables and writes ``farm.json`` into ``--out``.

1. **Chunk boundary** (each clip: frames 1-48 or the whole clip when shorter; embedded
   estimator, default processing resolution): a plain unchunked decompose against
   ``farm local`` in chunks of 12 with overlap 0 and 4 with depth anchors (the default),
   overlap 0 and 8 without (``--no-depth-anchors``), and ``--overlap chain``. Per frame,
   the median over surface pixels of ``|depth_chunked - depth_unchunked| /
   depth_unchunked``; reported as the median over the chunk-boundary frames (13, 25, 37:
   the first frame of every chunk but the first, with the worst of them) and over the
   interior frames of chunks 2-4, and the worst frame. Also the frame-to-frame step (the
   same measure from frame n-1 to n) at the boundaries and inside chunks.
2. **Anchor cost**: ``farm anchors`` alone against a plain decompose of the same 48 frames
   of bikes.mp4 (whole commands).
3. **Throughput** (bikes.mp4 frames 1-96, 640x272): a plain single-process decompose;
   ``farm local`` (chunk 12 / overlap 8, in one process); Ray on a 1-node loopback cluster
   (2 CPUs); Ray on a 3-node loopback cluster (1 CPU each). **All nodes share this
   machine's cores**: the 3-node row measures the farm's overhead and correctness, not a
   speed-up. ``--skip-throughput`` keeps the rows of the existing farm.json.

Timings on the shared 2-core development machine are noisy (other jobs run on it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = Path(os.environ.get("GBUFFER_SHARED_DIR") or os.environ.get("GBUFFER_SHARED") or ROOT.parent / "shared")
FOOTAGE = SHARED / "footage"


def _cli(*args, timeout=1800, wrap=None) -> float:
    """Run ``python -m backend ARGS`` (through ``wrap``: a loopback cluster's network
    namespace); its wall time in seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "backend", *map(str, args)]
    r = subprocess.run(wrap(argv) if wrap else argv, env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=timeout)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:3]))} failed: {r.stderr.strip()[-1500:]}")
    return wall


def _depths(folder: Path, n: int):
    from backend import contract

    out = {}
    for i in range(1, n + 1):
        f = contract.read_frame(contract.frame_path(folder, i))
        d = np.asarray(f.depth, np.float64)
        out[i] = (d, contract.surface_mask(f) & np.isfinite(d) & (d > 0))
    return out


def _rel(a, b) -> float:
    (da, ma), (db, mb) = a, b
    m = ma & mb
    return float(np.median(np.abs(da[m] - db[m]) / db[m])) if m.any() else float("nan")


def boundary(tmp: Path, clip: str = "dolphins", frames: int = 48, chunk: int = 12,
             runs=((0, True), (4, True), (0, False), (8, False), ("chain", False))) -> dict:
    """One clip: an unchunked decompose against ``farm local`` runs ``(overlap, anchors)``."""
    from backend.footage import probe_footage

    src = FOOTAGE / f"{clip}.mp4"
    frames = min(frames, len(probe_footage(src).frame_numbers()))  # boat: 16, phone_office: 36
    ref = tmp / f"{clip}_unchunked"
    wall_plain = _cli("decompose", src, "--out", ref, "--frames", f"1-{frames}")
    base = _depths(ref, frames)
    bounds = list(range(chunk + 1, frames + 1, chunk))
    interior = [n for n in range(chunk + 1, frames + 1) if n not in bounds]
    step = lambda d, ns: float(np.median([_rel(d[n], d[n - 1]) for n in ns]))  # noqa: E731
    rows = {"unchunked": {"step_at_boundaries": step(base, bounds), "step_interior": step(base, interior),
                          "wall_s": round(wall_plain, 2)}}
    for k, anchors in runs:
        name = f"overlap {k}" + (" + anchors" if anchors else ("" if k == "chain" else ", no anchors"))
        out = tmp / f"{clip}_{k}_{int(anchors)}"
        args = ["farm", "local", "decompose", src, "--out", out, "--frames", f"1-{frames}", "--chunk", chunk,
                "--overlap", k] + ([] if anchors or k == "chain" else ["--no-depth-anchors"])
        wall = _cli(*args)
        d = _depths(out, frames)
        vb = [_rel(d[n], base[n]) for n in bounds]
        vi = [_rel(d[n], base[n]) for n in interior]
        rows[name] = {
            "vs_unchunked_boundary": float(np.median(vb)), "vs_unchunked_boundary_max": float(np.max(vb)),
            "vs_unchunked_interior": float(np.median(vi)), "vs_unchunked_max": float(np.max(vb + vi)),
            "step_at_boundaries": step(d, bounds), "step_interior": step(d, interior), "wall_s": round(wall, 2),
        }
        if anchors:
            import json as _json

            from backend.depth_anchors import ANCHOR_FILE, DepthAnchors

            a = DepthAnchors.load(out / ANCHOR_FILE)
            rows[name]["anchor_frames"] = len(a.numbers)
            rows[name]["anchor_file_bytes"] = (out / ANCHOR_FILE).stat().st_size
            man = _json.loads((out / "manifest.json").read_text())
            rows[name]["settings_hash"] = man.get("settings_hash")
    for r in rows.values():  # the chunked run's extra step at the boundaries (the clip's own step removed)
        if "vs_unchunked_boundary" in r:
            r["step_excess_at_boundaries"] = r["step_at_boundaries"] - rows["unchunked"]["step_at_boundaries"]
    return {"clip": f"{clip}.mp4", "frames": frames, "chunk": chunk, "boundary_frames": bounds,
            "metric": "median over surface pixels of |depth - depth_ref| / depth_ref, then the median over frames "
                      "(max: the worst frame)",
            "reference": "a plain unchunked decompose (no anchors, aligned frame to frame from frame 1)",
            "rows": rows}


def anchor_cost(tmp: Path, clip: str = "bikes", frames: int = 48) -> dict:
    """Wall time of the anchor pass alone against a plain decompose of the same frames."""
    src = FOOTAGE / f"{clip}.mp4"
    a = _cli("farm", "anchors", src, "--out", tmp / "anchors_only", "--frames", f"1-{frames}")
    d = _cli("decompose", src, "--out", tmp / "decompose_only", "--frames", f"1-{frames}")
    return {"clip": f"{clip}.mp4", "frames": frames, "anchor_pass_s": round(a, 2), "decompose_s": round(d, 2),
            "ratio": round(a / d, 3),
            "note": "whole commands (interpreter start-up and model load included) on a shared 2-core machine"}


def throughput(tmp: Path, frames: int = 96, chunk: int = 12, overlap: int = 8) -> dict:
    from backend.farm.loopback import LoopbackCluster

    src = FOOTAGE / "bikes.mp4"
    rng = f"1-{frames}"
    plan = ["--frames", rng, "--chunk", chunk, "--overlap", overlap]
    rows = {}
    w = _cli("decompose", src, "--out", tmp / "plain", "--frames", rng)
    rows["1 process, plain decompose (no chunks)"] = w
    w = _cli("farm", "local", "decompose", src, "--out", tmp / "local", *plan)
    rows[f"1 process, farm local (chunk {chunk}, overlap {overlap})"] = w
    ref = sorted((tmp / "local").glob("gbuffer_*.exr"))
    identical = {}
    plain = sorted((tmp / "plain").glob("gbuffer_*.exr"))
    for name, workers, cpus, head_cpus in (("Ray 1 node (2 CPUs)", 0, 2, 2),
                                           ("Ray 3 nodes on loopback (1 CPU each, sharing 2 cores)", 2, 1, 1)):
        root = Path(tempfile.mkdtemp(prefix="gbbench_", dir="/tmp"))
        c = LoopbackCluster(root, workers=workers, cpus=cpus, head_cpus=head_cpus,
                            env={"PYTHONPATH": str(ROOT)})
        try:
            c.start(timeout=120)
            out = tmp / name.split(" (")[0].replace(" ", "_")
            rows[name] = _cli("farm", "ray", "decompose", src, "--out", out, *plan, "--address", c.address,
                              wrap=c.wrap)
            identical[name] = all(a.read_bytes() == (out / a.name).read_bytes() for a in ref)
            if workers:
                cname = f"Ray 3 nodes, --overlap chain (chunks in sequence; identical to plain)"
                out = tmp / "ray3_chain"
                rows[cname] = _cli("farm", "ray", "decompose", src, "--out", out, "--frames", rng, "--chunk", chunk,
                                   "--overlap", "chain", "--address", c.address, wrap=c.wrap)
                identical[cname] = all(a.read_bytes() == (out / a.name).read_bytes() for a in plain)
        finally:
            c.stop()
            shutil.rmtree(root, ignore_errors=True)
    return {"clip": "bikes.mp4 (640x272)", "frames": frames, "chunk": chunk, "overlap": overlap,
            "cores": os.cpu_count(),
            "rows": {k: {"wall_s": round(v, 2), "fps": round(frames / v, 3)} for k, v in rows.items()},
            "byte_identical_to_farm_local": identical,
            "note": "every node runs on this one machine: the nodes share its cores; wall time includes "
                    "interpreter start-up, planning, the visibility check and the merge"}


CLIPS = ("bikes", "boat", "dolphins", "phone_office")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true", help="24 frames for the boundary, 24 for throughput")
    ap.add_argument("--clips", default=",".join(CLIPS), help="clips for the boundary table (default: %(default)s)")
    ap.add_argument("--skip-throughput", action="store_true",
                    help="keep the throughput section of the existing farm.json (the Ray runs take minutes)")
    ap.add_argument("--skip-boundary", action="store_true",
                    help="keep the boundary and anchor-cost sections of the existing farm.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="gbfarm_"))
    old = {}
    if (args.skip_throughput or args.skip_boundary) and (out / "farm.json").is_file():
        old = json.loads((out / "farm.json").read_text())
    try:
        if args.skip_boundary:
            bs, cost = old["boundary"], old["anchor_cost"]
        else:
            bs = [boundary(tmp / "b", clip=c, frames=24 if args.quick else 48) for c in args.clips.split(",")]
            cost = anchor_cost(tmp / "c", frames=24 if args.quick else 48)
        t = old.get("throughput") if args.skip_throughput else throughput(tmp / "t", frames=24 if args.quick else 96)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "boundary": bs,
           "anchor_cost": cost, "throughput": t}
    if args.skip_throughput and t:
        res["throughput_note"] = "kept from an earlier run of this script (--skip-throughput)"
    out.mkdir(parents=True, exist_ok=True)
    (out / "farm.json").write_text(json.dumps(res, indent=1) + "\n")
    print("\n| clip | run (chunk 12) | vs unchunked at boundaries (worst) | inside chunks | worst frame | "
          "step at boundaries | step inside |")
    print("|---|---|---|---|---|---|---|")
    for b in bs:
        for k, r in b["rows"].items():
            f = lambda key: f"{100 * r[key]:.2f} %" if key in r else "-"  # noqa: E731
            worst = f" ({f('vs_unchunked_boundary_max')})" if "vs_unchunked_boundary_max" in r else ""
            print(f"| {b['clip']} | {k} | {f('vs_unchunked_boundary')}{worst} | {f('vs_unchunked_interior')} | "
                  f"{f('vs_unchunked_max')} | {f('step_at_boundaries')} | {f('step_interior')} |")
    print(f"\nanchor pass {cost['anchor_pass_s']} s vs decompose {cost['decompose_s']} s ({cost['clip']}, "
          f"{cost['frames']} frames): {100 * cost['ratio']:.0f} %")
    if t:
        print(f"\nThroughput, {t['clip']} {t['frames']} frames, {t['cores']} cores shared by every node")
        print("| run | wall s | fps | byte-identical to its reference |")
        print("|---|---|---|---|")
        for k, r in t["rows"].items():
            print(f"| {k} | {r['wall_s']} | {r['fps']} | {t['byte_identical_to_farm_local'].get(k, '-')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
