"""Tune the edge refinement (issue 33) on clips the pot test never uses: boat.mp4 with
cameras (its solve: ``solve --focal 3390``) and bikes.mp4 with the default estimator.

Held-out measurements: on a decomposed frame (``--no-depth-edges``), the measured pixels
(Confidence >= 0.5) in a random 25 % of square blocks (1.5 % of the long side) are hidden; their depth is replaced by a plain
(not edge-aware) normalised-convolution fill of the visible measured pixels, the way the
fusion fills holes, and they get no vote. The refinement then has to bring each hidden
pixel back to its measured depth from the frame's colours and the visible measurements.
Reported: the median |log error| on hidden pixels near depth edges (local log-depth range
> 0.1 in 7x7), before (the plain fill) and after, per setting. For the single-image path
(no measurements) the share of log-depth variance explained by the image row is
reported (``pot_test.row_variance_share``).

``python benchmarks/depth_edges_tune.py CAM_DIR [DEFAULT_DIR]`` -> prints a table and
writes ``benchmarks/results/depth_edges_tune.json``.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from backend.contract import list_frames, read_frame  # noqa: E402
from backend.depth_edges import EdgeSettings, display_guide, refine_depth  # noqa: E402

GRID = {"median_radius_frac": [0.01, 0.02, 0.04], "median_eps": [1e-5, 1e-4, 1e-3], "bins": [16]}
#: second sweep at the chosen settings: the vote weight is Confidence ** power
POWERS = [1.0, 2.0, 4.0]


def plain_fill(ld: np.ndarray, w: np.ndarray, sigma: float) -> np.ndarray:
    num = cv2.GaussianBlur(ld * w, (0, 0), sigma)
    den = cv2.GaussianBlur(w, (0, 0), sigma)
    return num / np.maximum(den, 1e-6)


def held_out(frame, settings: EdgeSettings, seed: int, power: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    conf = frame.confidence
    meas = conf >= 0.5
    # hidden in blocks of about 1.5 % of the long side (holes and halo bands are contiguous)
    b = max(2, round(0.015 * max(conf.shape)))
    blocks = rng.random((conf.shape[0] // b + 1, conf.shape[1] // b + 1)) < 0.25
    hide = meas & np.kron(blocks, np.ones((b, b), bool))[:conf.shape[0], :conf.shape[1]]
    vis_w = (conf * (meas & ~hide)).astype(np.float32)
    ld = np.log(frame.depth).astype(np.float32)
    fill = plain_fill(ld, vis_w, 0.02 * max(ld.shape))
    ld_in = np.where(hide, fill, ld)
    # hidden pixels: the fill, no vote; other unmeasured pixels keep their (fused) depth, low vote
    weight = np.where(hide, 0.0, conf ** power).astype(np.float32)
    guide = display_guide(frame.combined[..., :3])
    out = np.log(refine_depth(np.exp(ld_in), guide, weight, None, settings))
    rngl = cv2.dilate(ld, np.ones((7, 7), np.uint8)) - cv2.erode(ld, np.ones((7, 7), np.uint8))
    edge = hide & (rngl > 0.1)
    return {"before": float(np.median(np.abs(fill - ld)[edge])) if edge.any() else float("nan"),
            "after": float(np.median(np.abs(out - ld)[edge])) if edge.any() else float("nan"),
            "after_all": float(np.median(np.abs(out - ld)[hide])), "before_all": float(np.median(np.abs(fill - ld)[hide])),
            "n_edge": int(edge.sum())}


def main(argv):
    cam_dir = Path(argv[0])
    frames = sorted(list_frames(cam_dir).items())[::4]
    rows = []
    for values in itertools.product(*GRID.values()):
        s = EdgeSettings(**dict(zip(GRID, values)))
        t = time.time()
        res = [held_out(read_frame(p), s, n) for n, p in frames]
        row = dict(zip(GRID, values), before=float(np.nanmean([r["before"] for r in res])),
                   after=float(np.nanmean([r["after"] for r in res])),
                   before_all=float(np.mean([r["before_all"] for r in res])),
                   after_all=float(np.mean([r["after_all"] for r in res])),
                   seconds_per_frame=(time.time() - t) / len(res))
        rows.append(row)
        print(json.dumps(row))
    powers = []
    for pw in POWERS:
        res = [held_out(read_frame(p), EdgeSettings(), n, pw) for n, p in frames]
        powers.append({"power": pw, "before": float(np.nanmean([r["before"] for r in res])),
                       "after": float(np.nanmean([r["after"] for r in res])),
                       "after_all": float(np.mean([r["after_all"] for r in res]))})
        print(json.dumps(powers[-1]))
    out = ROOT / "benchmarks" / "results" / "depth_edges_tune.json"
    out.write_text(json.dumps({"clip_dir": str(cam_dir), "frames": [n for n, _ in frames], "rows": rows,
                               "defaults": dataclasses.asdict(EdgeSettings()), "powers": powers},
                              indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
