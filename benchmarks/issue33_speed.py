"""What the issue 33 steps cost (table + JSON): the sky detector per frame (default path)
and the multi-view order check per frame, on boat.mp4 decomposed with its solve
(``--focal 3390``), 2-core CPU. Run: ``.venv/bin/python benchmarks/issue33_speed.py``.
Writes ``benchmarks/results/issue33_speed.json`` / ``.md``."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import backend.decomposer as dm  # noqa: E402
import backend.multiview.shot as shot  # noqa: E402
from backend import decompose  # noqa: E402
from backend.multiview.autosolve import solve_footage, write_solve  # noqa: E402


def main() -> int:
    clip = REPO.parent / "shared" / "footage" / "boat.mp4"
    if not clip.is_file():
        print(f"skip: {clip} not found")
        return 0
    times = {"order": [], "sky": []}
    order_check, detect = shot.MultiViewShot._order_check, dm.sky_mod.detect_sky

    def timed_order(self, *a):
        t = time.perf_counter()
        order_check(self, *a)
        times["order"].append(time.perf_counter() - t)

    def timed_sky(*a, **k):
        t = time.perf_counter()
        r = detect(*a, **k)
        times["sky"].append(time.perf_counter() - t)
        return r

    shot.MultiViewShot._order_check, dm.sky_mod.detect_sky = timed_order, timed_sky
    tmp = Path(tempfile.mkdtemp())
    try:
        cams = write_solve(solve_footage(clip, focal_px=3390.0), tmp / "cams.json")
        t = time.perf_counter()
        decompose(clip, tmp / "gb", cameras=str(cams))
        total = time.perf_counter() - t
    finally:
        shot.MultiViewShot._order_check, dm.sky_mod.detect_sky = order_check, detect
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"clip": "boat.mp4 832x448, 16 frames, --cameras (solve --focal 3390)",
           "machine": "2 shared CPU cores", "total_s": round(total, 2), "fps": round(16 / total, 3),
           "order_check_s_per_frame_median": round(float(np.median(times["order"])), 4),
           "sky_detector_s_per_frame_median": round(float(np.median(times["sky"])), 4)}
    out = REPO / "benchmarks" / "results"
    (out / "issue33_speed.json").write_text(json.dumps(res, indent=1))
    md = ("# Cost of the issue 33 steps\n\n| clip | whole job fps | sky detector s/frame | order check s/frame |\n"
          "|---|---|---|---|\n"
          f"| {res['clip']} | {res['fps']} | {res['sky_detector_s_per_frame_median']} | "
          f"{res['order_check_s_per_frame_median']} |\n")
    (out / "issue33_speed.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
