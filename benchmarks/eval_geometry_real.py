"""Measured geometry on real frames with measured ground truth (issue 24, "Real data"):
the shared Open3D RGB-D frames (``shared/groundtruth/open3d_rgbd``: 5 Kinect colour
frames, ``trajectory.log`` poses, depth in mm) through ``decompose(cameras=...)`` with
the poses given as our JSON **without** points or a range, and with a range
(0.3-10 m), scored like the generated scenes (tests/eval_scenes.py ``score_frame``:
confident and all valid pixels, oracle constant and vertical baselines on the same
pixels; no normals: the Kinect gives none).

    .venv/bin/python benchmarks/eval_geometry_real.py   # writes results/eval_geometry_real.json/.md
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import numpy as np  # noqa: E402

import eval_scenes as es  # noqa: E402

DATA = Path(os.environ.get("GBUFFER_SHARED_DIR", ROOT.parent / "shared")) / "groundtruth" / "open3d_rgbd"
RESULTS = ROOT / "benchmarks" / "results"


def open3d(depth_range, width: int = 480) -> dict:
    import cv2

    from backend import contract, decompose
    from backend.multiview.camera_files import load_open3d_log, save_cameras_json

    cams = load_open3d_log(DATA / "trajectory.log", 640, 480, (525.0, 525.0, 319.5, 239.5))
    tmp = Path(tempfile.mkdtemp(prefix="eval_real_"))
    try:
        cam_file = tmp / "cams.json"
        save_cameras_json(cam_file, {i: cams[i + 1] for i in range(5)}, units="metres", depth_range=depth_range)
        decompose(DATA / "color", tmp / "gb", cameras=cam_file, multiview={"processing_width": width})
        man = json.loads((tmp / "gb" / "manifest.json").read_text())
        rows = []
        for n in range(5):
            gt = cv2.imread(str(DATA / "depth" / f"{n:05d}.png"), cv2.IMREAD_UNCHANGED).astype(np.float32) / 1000
            fr = contract.read_frame(contract.frame_path(tmp / "gb", n))
            rows.append(es.score_frame(fr.depth, fr.normal, fr.confidence, gt, None, gt > 0))
        out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
        out["ranges"] = [f["multiview"].get("depth_range") for f in man["frames"]]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    res = {"open3d_no_range": open3d(None), "open3d_range_0.3_10": open3d((0.3, 10.0))}
    lines = ["| data | AbsRel conf (const / vert) | delta1 | Spearman (vert) | coverage | AbsRel all (const / vert) |",
             "|---|---|---|---|---|---|"]
    for k, r in res.items():
        lines.append(f"| {k} | {r['conf_pred_absrel']:.3f} ({r['conf_constant_absrel']:.3f} / "
                     f"{r['conf_vertical_absrel']:.3f}) | {r['conf_pred_delta1']:.3f} | {r['conf_pred_spearman']:.3f} "
                     f"({r['conf_vertical_spearman']:.3f}) | {r['coverage']:.0%} | {r['all_pred_absrel']:.3f} "
                     f"({r['all_constant_absrel']:.3f} / {r['all_vertical_absrel']:.3f}) |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "eval_geometry_real.json").write_text(json.dumps({"benchmark": "eval_geometry_real", **res}, indent=1))
    (RESULTS / "eval_geometry_real.md").write_text("# eval_geometry_real\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
