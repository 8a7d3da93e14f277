"""Seconds per frame and memory of issue 25's single-frame steps at 960x540.

Steps: :func:`backend.intrinsic.decompose_frame` (albedo; the one new shipped step: no
roughness/metallic step is shipped), the multi-view observation step of
:mod:`backend.multiview.materials` for 5 views (not in Decompose yet; the frame reused as
every view, speed only), and one :meth:`backend.decomposer.Decomposer.frame` of the embedded
estimator with the new albedo and with the network albedo as on main before issue 25.
Input: frames of ``../shared/footage/dolphins.mp4`` (real 960x540 footage). Median of
``--repeat`` runs after one warm-up; memory = peak of Python-tracked allocations
(``tracemalloc``: numpy buffers included, OpenCV's internal buffers not) during one call.

The machine is shared (2 cores, several engineers at once): absolute times are noisy,
compare the rows of one run.

Usage: ``.venv/bin/python benchmarks/materials_speed.py --out benchmarks/results``
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"s_per_frame": round(float(np.median(times)), 4), "min_s": round(min(times), 4),
            "peak_traced_mb": round(peak / 2**20, 1)}


def _multiview(rgb, f0):
    """Speed only: the frame seen by 5 cameras 5 cm apart, depth from the decompose."""
    from backend.multiview.cameras import Camera
    from backend.multiview.materials import gather_observations, region_specularity, surface_regions, view_dependence

    h, w = rgb.shape[:2]
    cams = [Camera(w, h, 0.9 * w, 0.9 * w, w / 2, h / 2, R=np.eye(3), t=np.array([0.05 * i, 0.0, 0.0]))
            for i in range(-2, 3)]
    obs, valid = gather_observations(2, [rgb] * 5, [f0.depth] * 5, cams)
    _, spec, n = view_dependence(obs, valid)
    region_specularity(spec, surface_regions(f0.depth, f0.normal, n >= 3), 98)


def main(argv=None):
    from backend.decomposer import Decomposer
    from backend.footage import open_footage
    from backend.intrinsic import decompose_frame

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--footage", type=Path,
                    default=Path(os.environ.get("GBUFFER_SHARED_DIR", ROOT.parent / "shared")) / "footage")
    a = ap.parse_args(argv)
    with open_footage(a.footage / "dolphins.mp4") as f:
        rgb = next(iter(f)).rgb
    assert rgb.shape[:2] == (540, 960), rgb.shape
    new, old = Decomposer("embedded"), Decomposer("embedded", estimator_options={"albedo": "network"})
    f0 = new.frame(rgb)
    rows = {
        "intrinsic albedo (decompose_frame)": measure(lambda: decompose_frame(rgb, f0.normal, f0.confidence), a.repeat),
        "Decomposer.frame, embedded, intrinsic albedo": measure(lambda: (new.reset(), new.frame(rgb)), a.repeat),
        "Decomposer.frame, embedded, network albedo (main)": measure(lambda: (old.reset(), old.frame(rgb)), a.repeat),
    }
    rows["multi-view observations + patches, 5 views (gather_observations, view_dependence, "
         "surface_regions, region_specularity)"] = measure(lambda: _multiview(rgb, f0), a.repeat)
    res = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus (shared, noisy)",
           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "resolution": "960x540",
           "input": "dolphins.mp4 frame 0", "rows": rows}
    lines = ["| step (960x540) | s/frame (median) | min s | peak traced MB |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['s_per_frame']} | {v['min_s']} | {v['peak_traced_mb']} |" for k, v in rows.items()]
    print("\n".join(lines))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "materials_speed.json").write_text(json.dumps(res, indent=1))
        (a.out / "materials_speed.md").write_text(
            f"## Single-frame materials steps (issue 25)\n\n{res['machine']}; {res['date_utc']} UTC. "
            "The machine is shared by several engineers: times are noisy, compare rows of this run.\n\n"
            + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
