"""What the depth-edge refinement costs per frame (issue 33).

``refine_depth`` on a real dolphins.mp4 frame (960x540, the default estimator's depth)
and on that frame at 320x240, with a Confidence-like weight; CPU seconds of the process
(``time.process_time``: the shared 2-core machine's load inflates wall time several
fold, CPU time much less), minimum and median of 7 runs, and wall seconds alongside.

    .venv/bin/python benchmarks/depth_edges_speed.py   # -> results/depth_edges_speed.json
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import cv2
    from backend import decompose
    from backend.contract import read_frame
    from backend.depth_edges import EdgeSettings, display_guide, refine_depth

    out = Path(tempfile.mkdtemp(prefix="edges_speed_"))
    decompose(ROOT.parent / "shared" / "footage" / "dolphins.mp4", out, frames="6", depth_edges=False,
              progress=lambda e: None)
    f = read_frame(out / "gbuffer_0006.exr")
    guide = display_guide(f.combined)
    weight = np.random.default_rng(0).random(f.depth.shape).astype(np.float32)
    rows = []
    for w, h in ((960, 540), (320, 240)):
        d = cv2.resize(f.depth, (w, h), interpolation=cv2.INTER_AREA)
        g = cv2.resize(guide, (w, h), interpolation=cv2.INTER_AREA)
        wt = cv2.resize(weight, (w, h), interpolation=cv2.INTER_AREA)
        cpu, wall = [], []
        for _ in range(7):
            t, c = time.perf_counter(), time.process_time()
            refine_depth(d, g, wt)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - t)
        rows.append({"size": f"{w}x{h}", "cpu_s_min": round(min(cpu), 3), "cpu_s_median": round(float(np.median(cpu)), 3),
                     "wall_s_min": round(min(wall), 3), "wall_s_median": round(float(np.median(wall)), 3)})
        print(rows[-1])
    doc = {"benchmark": "depth_edges_speed", "settings": EdgeSettings().__dict__, "cores": os.cpu_count(),
           "load_average": os.getloadavg(), "rows": rows}
    (ROOT / "benchmarks" / "results" / "depth_edges_speed.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
