"""Sky on real footage (issue 33): hand-drawn masks, the detector and the whole decompose.

For every clip of ``tests/data/sky_masks.json`` (tune: ``boat``; held out: the clips under
``tests/data/footage``, see ``tests/data/SOURCES.md``) and every frame drawn there:

* **sky recall**: share of the drawn sky (each polygon eroded by 3 px) whose decomposed
  ``Confidence`` is 0 (the contract's no-surface mark), with the default estimator;
* **false sky**: share of the drawn ground (eroded by 3 px) marked no-surface;
* **stability** on every frame of the clip: the detector's mask IoU between consecutive
  frames (sky fraction per frame, its min / max);
* **negatives**: the share of frames, and of pixels, marked sky on the shared clips that
  show no sky (``dolphins`` under water, ``phone_office`` with its blown-out window).

Writes ``benchmarks/results/sky_eval.json`` / ``.md`` and contact sheets
``benchmarks/results/sky_sheets/<clip>.png`` (source | depth | confidence | sky mask, full
size). Run: ``.venv/bin/python benchmarks/sky_eval.py [--shared ../shared]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.colour import linear_to_srgb  # noqa: E402
from backend.decomposer import Decomposer  # noqa: E402
from backend.footage import open_footage  # noqa: E402
from backend.sky import detect_sky  # noqa: E402

MASKS = REPO / "tests" / "data" / "sky_masks.json"
RESULTS = REPO / "benchmarks" / "results"
#: clips with no sky (tuning: the shared three; held out, never looked at while tuning: the aquarium
#: and the snowboarder's bright snow slope, see tests/data/SOURCES.md)
NEGATIVES = (("dolphins", "tune", "shared:footage/dolphins.mp4"), ("phone_office", "tune", "shared:footage/phone_office.mp4"),
             ("bikes", "tune", "shared:footage/bikes.mp4"), ("aquarium", "heldout", "data:footage/aquarium.mp4"),
             ("davis_snowboard", "heldout", "data:footage/davis_snowboard.mp4"))
ERODE_PX = 3


def clip_path(spec: str, shared: Path) -> Path:
    kind, rel = spec.split(":", 1)
    return (shared if kind == "shared" else REPO / "tests" / "data") / rel


def rasterise(polys, size, shape, erode=ERODE_PX) -> np.ndarray:
    """Polygons drawn at ``size`` (w, h) -> bool mask at ``shape`` (h, w), eroded by ``erode`` px."""
    import cv2

    h, w = shape
    sx, sy = w / size[0], h / size[1]
    m = np.zeros((h, w), np.uint8)
    for p in polys:
        cv2.fillPoly(m, [np.round(np.array(p, np.float64) * [sx, sy]).astype(np.int32)], 1)
    if erode:
        m = cv2.erode(m, np.ones((2 * erode + 1, 2 * erode + 1), np.uint8), borderType=cv2.BORDER_REPLICATE)
    return m > 0


def frames_of(path: Path):
    with open_footage(path) as f:
        for sf in f:
            yield sf


def score_clip(name: str, spec: dict, shared: Path, sheet_dir: Path) -> dict:
    path = clip_path(spec["path"], shared)
    drawn = {int(k): v for k, v in spec["frames"].items()}
    dec = Decomposer("embedded")
    rows, ious, fracs, prev, sheet, t_sky = [], [], [], None, None, []
    for sf in frames_of(path):
        t0 = time.perf_counter()
        sky = detect_sky(sf.rgb).mask
        t_sky.append(time.perf_counter() - t0)
        fracs.append(float(sky.mean()))
        if prev is not None and (prev | sky).any():
            ious.append(float((prev & sky).sum() / (prev | sky).sum()))
        prev = sky
        if sf.index not in drawn:
            continue
        fr = dec.frame(sf.rgb, number=None)  # one frame on its own, as the multi-view prior runs
        nos = fr.confidence <= 1e-3 if fr.confidence is not None else np.zeros(sky.shape, bool)
        s = rasterise(drawn[sf.index]["sky"], spec["drawn_on_size"], sky.shape)
        g = rasterise(drawn[sf.index]["ground"], spec["drawn_on_size"], sky.shape)
        rows.append({"frame": sf.index, "sky_px": int(s.sum()), "ground_px": int(g.sum()),
                     "sky_recall": float(nos[s].mean()), "false_sky": float(nos[g].mean()),
                     "detector_recall": float(sky[s].mean()), "detector_false": float(sky[g].mean())})
        if sheet is None:
            sheet = contact_sheet(sf.rgb, fr, sky)
    if sheet is not None:
        import cv2

        sheet_dir.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(sheet_dir / f"{name}.png"), sheet[..., ::-1])
    return {"clip": name, "role": spec["role"], "path": str(path.relative_to(path.parents[1])), "frames": rows,
            "n_frames": len(fracs), "sky_fraction_min": min(fracs), "sky_fraction_max": max(fracs),
            "consecutive_iou_min": min(ious) if ious else None,
            "consecutive_iou_mean": float(np.mean(ious)) if ious else None,
            "sky_seconds_per_frame": float(np.median(t_sky))}


def contact_sheet(rgb: np.ndarray, fr, sky: np.ndarray) -> np.ndarray:
    """``source | depth | confidence | sky mask`` at full size, uint8 RGB."""
    src = (np.clip(linear_to_srgb(np.clip(rgb, 0, 1)), 0, 1) * 255).astype(np.uint8)
    d = np.log(fr.depth)
    lo, hi = float(d.min()), float(d.max())
    dn = 1.0 - (d - lo) / max(hi - lo, 1e-6)  # near = bright
    depth = (np.repeat(dn[..., None], 3, -1) * 255).astype(np.uint8)
    c = fr.confidence if fr.confidence is not None else np.ones(sky.shape, np.float32)
    conf = (np.repeat(np.clip(c, 0, 1)[..., None], 3, -1) * 255).astype(np.uint8)
    over = src.copy()
    over[sky] = (0.45 * over[sky] + np.array([140, 0, 0]) * 0.55 + 0).astype(np.uint8)
    gap = np.full((src.shape[0], 6, 3), 255, np.uint8)
    return np.concatenate([src, gap, depth, gap, conf, gap, over], axis=1)


def negatives(shared: Path, step: int = 5) -> list:
    out = []
    for name, role, spec in NEGATIVES:
        path = clip_path(spec, shared)
        if not path.is_file():
            continue
        fr_any, fr_frac, n = 0, [], 0
        for sf in frames_of(path):
            if sf.index % step:
                continue
            m = detect_sky(sf.rgb).mask
            n += 1
            fr_any += bool(m.any())
            fr_frac.append(float(m.mean()))
        out.append({"clip": name, "role": role, "frames_checked": n, "frames_with_sky": fr_any,
                    "mean_sky_fraction": float(np.mean(fr_frac)), "max_sky_fraction": float(np.max(fr_frac))})
    return out


def table(res: dict) -> str:
    lines = ["# Sky on real footage (issue 33)", "",
             "Decompose with the default estimator; sky recall = share of hand-drawn sky (3 px inside its edges) "
             "with Confidence 0; false sky = share of hand-drawn ground marked no-surface. Bar: recall >= 0.90 on every "
             "frame, false <= 0.02, on held-out clips. Tuned on boat, davis_rollercoaster (held out in round 1, tuned "
             "on in round 2) and the shared negatives; held out: demo2_video (round 1), davis_car-turn, davis_hike, "
             "davis_motocross-jump, aquarium, davis_snowboard (round 2, masks drawn after the detector was frozen, "
             "scored once).", "",
             "| clip | role | frame | sky px | sky recall | false sky | detector recall | detector false |",
             "|---|---|---|---|---|---|---|---|"]
    for c in res["clips"]:
        for r in c["frames"]:
            lines.append(f"| {c['clip']} | {c['role']} | {r['frame']} | {r['sky_px']} | {r['sky_recall']:.3f} | "
                         f"{r['false_sky']:.4f} | {r['detector_recall']:.3f} | {r['detector_false']:.4f} |")
    lines += ["", "| clip | frames | sky fraction min..max | consecutive IoU min / mean | detector s/frame |",
              "|---|---|---|---|---|"]
    for c in res["clips"]:
        iou = "-" if c["consecutive_iou_min"] is None else f"{c['consecutive_iou_min']:.3f} / {c['consecutive_iou_mean']:.3f}"
        lines.append(f"| {c['clip']} | {c['n_frames']} | {c['sky_fraction_min']:.3f}..{c['sky_fraction_max']:.3f} | "
                     f"{iou} | {c['sky_seconds_per_frame']:.3f} |")
    lines += ["", "Clips without sky (every 5th frame): frames with any sky / checked, mean and max sky fraction "
              "(bikes shows a little grey sky in its street shots, not drawn).", "",
              "| clip | role | frames with sky | mean fraction | max fraction |", "|---|---|---|---|---|"]
    for n in res["negatives"]:
        lines.append(f"| {n['clip']} | {n['role']} | {n['frames_with_sky']}/{n['frames_checked']} | {n['mean_sky_fraction']:.4f} | "
                     f"{n['max_sky_fraction']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    spec = json.loads(MASKS.read_text())
    clips = []
    for name, c in spec["clips"].items():
        if not clip_path(c["path"], a.shared).is_file():
            print(f"skip {name}: {clip_path(c['path'], a.shared)} not found")
            continue
        clips.append(score_clip(name, c, a.shared, a.out / "sky_sheets"))
    res = {"clips": clips, "negatives": negatives(a.shared)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sky_eval.json").write_text(json.dumps(res, indent=1))
    (a.out / "sky_eval.md").write_text(table(res))
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
