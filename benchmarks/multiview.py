"""Speed and memory of multi-view depth (issue 14): one reference frame at 960x540 against
K = 2, 4, 6 neighbours, at two processing widths.

Frames: the Open3D RGB-D colour frames (``shared/groundtruth/open3d_rgbd``) resized to
960x540 with their real poses; the 6-neighbour case reuses frames (same poses, so the
work is the same as with new ones). End to end = plane sweep + SGM + confidence +
geometric consistency against neighbour depths (given) + local-plane refinement +
piecewise-planar upsampling to 960x540.
Each configuration runs in a fresh process so peak RSS is its own.

    .venv/bin/python benchmarks/multiview.py   # prints a table, writes results/multiview.json
"""
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "multiview.json"
DATA = Path(os.environ.get("GBUFFER_SHARED_DIR", ROOT.parent / "shared")) / "groundtruth" / "open3d_rgbd"


def child(k: int, width: int, repeats: int = 3) -> dict:
    sys.path.insert(0, str(ROOT))
    import cv2
    import numpy as np
    from backend.multiview.camera_files import load_open3d_log
    from backend.multiview.planesweep import multiview_depth

    cams = load_open3d_log(DATA / "trajectory.log", 640, 480, (525.0, 525.0, 319.5, 239.5))
    cams = [cams[i + 1].scaled(960, 540) for i in range(5)]
    imgs = [cv2.resize(cv2.cvtColor(cv2.imread(str(DATA / "color" / f"{i:05d}.jpg")), cv2.COLOR_BGR2RGB),
                       (960, 540), interpolation=cv2.INTER_AREA) for i in range(5)]
    order = [0, 1, 3, 4, 0, 4][:k]
    nb_depth = np.full((540, 960), 2.0, np.float32)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = multiview_depth(imgs[2], cams[2], [imgs[j] for j in order], [cams[j] for j in order],
                              0.4, 8.0, processing_width=width, nb_depths=[nb_depth] * k)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"neighbours": k, "processing_width": width, "frame": "960x540",
            "planes": res.sweep.num_planes, "seconds_per_frame": min(times),
            "fps": 1.0 / min(times), "peak_rss_mib": peak / 1024.0,
            "peak_rss_growth_mib": (peak - rss0) / 1024.0}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]))))
        return
    rows = []
    for width in (320, 480):
        for k in (2, 4, 6):
            out = subprocess.run([sys.executable, __file__, "--child", str(k), str(width)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'K':>2} {'proc':>5} {'planes':>6} {'s/frame':>8} {'fps':>5} {'peak MiB':>9} {'+MiB':>6}")
    for r in rows:
        print(f"{r['neighbours']:>2} {r['processing_width']:>5} {r['planes']:>6} {r['seconds_per_frame']:>8.3f} "
              f"{r['fps']:>5.2f} {r['peak_rss_mib']:>9.0f} {r['peak_rss_growth_mib']:>6.0f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"benchmark": "multiview", "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
