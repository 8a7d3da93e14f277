"""End-to-end speed and memory of Decompose with a camera file (issue 14).

The whole job as a user runs it (``decompose(shot, out, cameras=...)``): PNG decode, the
embedded single-image pass, plane sweep against K neighbours, fusion, normals, EXR
writing. The shot is the ray-cast test scene of ``tests/multiview_util.py`` (a textured
wall, box and floor; a sideways dolly with handheld jitter) rendered at 960x540, with its
exact cameras. Rows: K = 2, 4, 6 at processing width 480, K = 4 at 320 and 640, and K = 4
at 480 on a clip twice as long (memory must not grow with clip length). Each row runs in
a fresh process (its own peak RSS); "steady" fps excludes the first frame.

Issue 24 rows (``--fusion``): K = 4 at 480 with the piecewise-planar densification and the
shot's TSDF fusion + mesh (``mesh=``), on the clip and on one twice as long (the sparse
volume grows with the observed surface, not with the frames), plus the same without them
on this run for comparison. Timings on the shared 2-core machine are noisy.

    .venv/bin/python benchmarks/multiview_job.py [--frames N]   # table + results/multiview_job.json
    .venv/bin/python benchmarks/multiview_job.py --fusion       # results/multiview_job_fusion.json
    .venv/bin/python benchmarks/multiview_job.py --edges        # results/multiview_job_edges.json (issue 33:
                                                                # K=4 at 480 without / with, twice, alternating)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "multiview_job.json"
SIZE = (960, 540)


def make_shot(folder: Path, n: int) -> Path:
    """Ray-cast ``n`` frames at 960x540 into ``folder/shot`` and write ``cams.json``."""
    import cv2
    import numpy as np

    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from multiview_util import dolly_cameras, render

    from backend.multiview.camera_files import save_cameras_json

    w, h = SIZE
    cams = [c.scaled(w, h) for c in dolly_cameras(n=n, dolly=0.04)]
    shot = folder / "shot"
    shot.mkdir(parents=True, exist_ok=True)
    for i, cam in enumerate(cams, 1):
        grey, _ = render(cam)
        rgb = np.clip(np.stack([grey, 0.8 * grey + 0.1, 0.6 * grey + 0.2], -1), 0, 1)
        cv2.imwrite(str(shot / f"shot_{i:04d}.png"), (rgb[..., ::-1] * 255 + 0.5).astype(np.uint8))
    save_cameras_json(folder / "cams.json", dict(enumerate(cams, 1)), units="metres", depth_range=(2.0, 20.0))
    return shot


def child(spec: dict) -> dict:
    from backend import decompose

    times = []
    t0 = time.perf_counter()
    decompose(spec["shot"], spec["out"], cameras=spec["cams"], frames=spec.get("frames"),
              multiview={"neighbours": spec["k"], "processing_width": spec["width"],
                         "densify": spec.get("densify", False)},
              mesh=spec.get("mesh"), depth_edges=spec.get("depth_edges", True),
              progress=lambda e: times.append(time.perf_counter()) if e["event"] == "progress" else None)
    wall = time.perf_counter() - t0
    steady = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
    return {"frames": len(times), "wall_s": round(wall, 2), "steady_fps": round(steady, 3),
            "whole_job_fps": round(len(times) / wall, 3),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=12, help="frames per run (default 12; the long row doubles it)")
    ap.add_argument("--fusion", action="store_true", help="only the issue-24 rows (densify, TSDF mesh)")
    ap.add_argument("--edges", action="store_true",
                    help="only K=4 at 480, with and without the depth-edge refinement (issue 33)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mvjob_"))
    shot = make_shot(tmp, 2 * args.frames)
    rows = []
    configs = [(2, 480, 1, False), (4, 480, 1, False), (6, 480, 1, False), (4, 320, 1, False),
               (4, 640, 1, False), (4, 480, 2, False)]
    if args.fusion:
        configs = [(4, 480, 1, False), (4, 480, 1, True), (4, 480, 2, True)]
    edges_off = [False] * len(configs)
    if args.edges:
        configs, edges_off = [(4, 480, 1, False)] * 4, [True, False, True, False]
    for (k, width, mult, fusion), no_edges in zip(configs, edges_off):
        n = args.frames * mult
        tag = f"{k}_{width}_{n}_{int(fusion)}_{int(no_edges)}_{len(rows)}"
        spec = {"shot": str(shot), "cams": str(tmp / "cams.json"), "out": str(tmp / f"out_{tag}"),
                "k": k, "width": width, "frames": f"1-{n}", "densify": fusion,
                "mesh": str(tmp / f"mesh_{tag}.ply") if fusion else None, "depth_edges": not no_edges}
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                           text=True, env=env, cwd=str(ROOT))
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        row = {"neighbours": k, "processing_width": width, "frame": "x".join(map(str, SIZE)), "clip_frames": n,
               "densify_and_mesh": fusion, "depth_edges": not no_edges}
        row.update(json.loads(p.stdout.strip().splitlines()[-1]))
        rows.append(row)
        print(f"K={k} width={width} frames={n} fusion={fusion}: {row['steady_fps']:.2f} fps steady, "
              f"{row['whole_job_fps']:.2f} whole job, peak {row['peak_rss_mib']:.0f} MiB", flush=True)
    doc = {"benchmark": "multiview_job", "cores": os.cpu_count(), "rows": rows,
           "note": "a machine shared by several sessions (2 cores): timings are noisy"}
    out = OUT.with_name("multiview_job_fusion.json") if args.fusion else \
        OUT.with_name("multiview_job_edges.json") if args.edges else OUT
    out.write_text(json.dumps(doc, indent=1))
    print("\n| K | processing width | clip frames | densify + mesh | depth edges | steady fps | whole-job fps | "
          "peak RSS MiB |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['neighbours']} | {r['processing_width']} | {r['clip_frames']} | {r['densify_and_mesh']} | "
              f"{r['depth_edges']} | "
              f"{r['steady_fps']:.2f} | {r['whole_job_fps']:.2f} | {r['peak_rss_mib']:.0f} |")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
