"""Evaluate the shipped embedded model against baselines; one command.

    python -m training.evaluate [--model backend/model/weights/embedded.onnx]

Prints a markdown table, writes ``benchmarks/results/eval_embedded.json`` and the
contact sheet ``benchmarks/results/eval_contact_sheet.png`` (rows: input, depth,
normals, albedo, metallic, roughness, for real and synthetic frames).

What is evaluated is exactly what users run: the ONNX model through
:class:`backend.estimators.embedded.EmbeddedEstimator` (onnxruntime, ``max_size``
192 by default). Depth is scored from the network's disparity, resized to the
ground-truth size, with the affine protocol of :mod:`training.metrics`.

Sets:
* held-out synthetic: frames whose file-name hash puts them in the held-out split
  (:func:`training.data.is_holdout`), never trained on, from each ``--synthetic``
  folder (Cycles procedural frames, analytic rooms, Kinect-style analytic rooms, Cycles
  rooms framed like RGB-D captures), at most ``--max-synthetic`` each;
  sky pixels (Confidence 0) excluded;
* real depth: NYU v2 (3 frames), Open3D RGB-D (5 frames), Middlebury Motorcycle
  (disparity). No crop.

Baselines: ``constant`` = one value per channel, the mean of the ground truth over
the set (depth: mean depth, scored in depth space; Middlebury: mean disparity);
``fronto`` = normal (0, 0, 1) everywhere; ``vertical`` = disparity falling linearly
from the bottom row to 0 at the top, aligned exactly like the model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

from backend.contract import list_frames
from backend.imaging import resize

from . import metrics as M
from .data import frame_to_sample, is_holdout

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _mean(rows, key):
    vals = [r[key] for r in rows if key in r]
    return float(np.mean(vals)) if vals else float("nan")


def _net_disparity(est, rgb, h, w):
    o = est.run_network(rgb)
    return resize(o["disparity"], (w, h))


def eval_real(est):
    out = {}
    for name, loader in (("nyu", M.load_nyu), ("open3d", M.load_open3d)):
        ds = loader()
        rows = {"model": [], "vertical": [], "constant": []}
        for s in ds:
            h, w = s["depth"].shape
            m = s["mask"]
            rows["model"].append(M.depth_metrics_from_disparity(_net_disparity(est, s["rgb"], h, w), s["depth"], m))
            rows["vertical"].append(M.depth_metrics_from_disparity(M.vertical_prior_disparity(h, w), s["depth"], m))
            const = np.full((h, w), s["depth"][m].mean(), np.float32)
            rows["constant"].append(M.absrel_delta1(const, s["depth"], m))
        out[name] = {k: {"absrel": _mean(v, "absrel"), "delta1": _mean(v, "delta1"), "frames": len(v)}
                     for k, v in rows.items()}
    s = M.load_middlebury()[0]
    h, w = s["disparity"].shape
    m = s["mask"]
    out["middlebury"] = {
        "model": M.disparity_metrics(_net_disparity(est, s["rgb"], h, w), s["disparity"], m),
        "vertical": M.disparity_metrics(M.vertical_prior_disparity(h, w), s["disparity"], m),
        "constant": M.absrel_delta1(np.full((h, w), s["disparity"][m].mean(), np.float32), s["disparity"], m),
    }
    for v in out["middlebury"].values():
        v["frames"] = 1
    return out


def load_heldout(folder: Path, max_n: int):
    frames = []
    if not folder.exists():
        return frames
    paths = [p for d in [folder] + [x for x in sorted(folder.rglob("*")) if x.is_dir()]
             for p in list_frames(d).values() if is_holdout(p)]
    from backend.contract import read_frame

    for p in paths[:max_n]:
        try:
            fr = read_frame(p)
        except Exception as e:
            print(f"skip {p}: {e}", file=sys.stderr)
            continue
        s = frame_to_sample(fr, max_side=10 ** 6)
        if s["mask"].mean() < 0.05:
            continue
        s["depth"] = np.where(s["mask"] > 0, 1.0 / np.maximum(s["disparity"], 1e-8), 0).astype(np.float32)
        s["path"] = str(p)
        frames.append(s)
    return frames


def eval_synthetic(est, frames):
    if not frames:
        return None
    res = {k: [] for k in ("model", "constant", "fronto", "vertical")}
    # constants: mean of GT over the set, per channel
    cat = lambda k: np.concatenate([f[k][f["mask"] > 0].reshape(-1, f[k].shape[-1] if f[k].ndim == 3 else 1)
                                    for f in frames])
    c_alb = cat("albedo").mean(0)
    c_met = float(cat("metallic").mean())
    c_rou = float(cat("roughness").mean())
    c_nrm = cat("normal").mean(0)
    c_nrm = c_nrm / max(np.linalg.norm(c_nrm), 1e-6)
    for f in frames:
        m = f["mask"] > 0
        h, w = m.shape
        out = est.predict(f["combined"])
        disp = _net_disparity(est, f["combined"], h, w)
        r = {}
        r.update({"depth_" + k: v for k, v in M.depth_metrics_from_disparity(disp, f["depth"], m).items()})
        r.update({"normal_" + k: v for k, v in M.normal_metrics(out.normal, f["normal"], m).items()})
        r.update({"albedo_" + k: v for k, v in M.albedo_metrics(out.albedo, f["albedo"], m).items()})
        r["metallic_mae"] = M.mae(out.metallic, f["metallic"], m)
        r["roughness_mae"] = M.mae(out.roughness, f["roughness"], m)
        res["model"].append(r)
        c = {}
        c.update({"depth_" + k: v for k, v in M.absrel_delta1(
            np.full((h, w), f["depth"][m].mean(), np.float32), f["depth"], m).items()})
        c.update({"normal_" + k: v for k, v in M.normal_metrics(
            np.broadcast_to(c_nrm, (h, w, 3)), f["normal"], m).items()})
        c.update({"albedo_" + k: v for k, v in M.albedo_metrics(
            np.broadcast_to(c_alb, (h, w, 3)).astype(np.float32), f["albedo"], m).items()})
        c["metallic_mae"] = M.mae(np.full((h, w), c_met), f["metallic"], m)
        c["roughness_mae"] = M.mae(np.full((h, w), c_rou), f["roughness"], m)
        res["constant"].append(c)
        res["fronto"].append({"normal_" + k: v for k, v in M.normal_metrics(
            np.broadcast_to(np.array([0, 0, 1], np.float32), (h, w, 3)), f["normal"], m).items()})
        res["vertical"].append({"depth_" + k: v for k, v in M.depth_metrics_from_disparity(
            M.vertical_prior_disparity(h, w), f["depth"], m).items()})
    summary = {}
    for k, rows in res.items():
        keys = sorted({kk for r in rows for kk in r})
        summary[k] = {kk: _mean(rows, kk) for kk in keys}
    summary["frames"] = len(frames)
    return summary


def contact_sheet(est, items, path: Path, tile_width: int = 256):
    """Rows = items (name, linear rgb); columns = input, depth, normal, albedo, metallic,
    roughness (:func:`backend.preview.contact_sheet`: aspect kept, columns aligned)."""
    from backend.preview import contact_sheet as grid
    from backend.preview import save_png

    rows, names = [], []
    for name, rgb in items:
        out = est.predict(rgb)
        g = rgb * (0.9 / max(np.percentile(rgb.mean(-1), 97), 1e-6))
        inp = (np.clip(g, 0, 1) ** (1 / 2.2) * 255).astype(np.uint8)
        inv = 1.0 / out.depth
        inv = (inv - inv.min()) / max(np.ptp(inv), 1e-6)
        dep = np.ascontiguousarray(cv2.applyColorMap((inv * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)[..., ::-1])
        nrm = ((out.normal * 0.5 + 0.5) * 255).astype(np.uint8)
        alb = (np.clip(out.albedo, 0, 1) ** (1 / 2.2) * 255).astype(np.uint8)
        met = np.repeat((out.metallic[..., None] * 255).astype(np.uint8), 3, -1)
        rou = np.repeat((out.roughness[..., None] * 255).astype(np.uint8), 3, -1)
        rows.append([inp, dep, nrm, alb, met, rou])
        names.append(name)
    sheet = grid(rows, ("input", "depth (near=bright)", "normal", "albedo", "metallic", "roughness"),
                 tile_width=tile_width, row_labels=names)
    tmp = path.with_name(".tmp_" + path.name)
    save_png(tmp, sheet)
    os.replace(tmp, path)


def footage_frame(path: Path, index: int = 30):
    try:
        import av

        from backend.colour import srgb_to_linear

        with av.open(str(path)) as c:
            last = None
            for i, fr in enumerate(c.decode(video=0)):
                last = fr
                if i >= index:
                    break
            if last is not None:  # frame `index`, or the last one of a shorter clip
                img = last.to_ndarray(format="rgb24").astype(np.float32) / 255.0
                h, w = img.shape[:2]
                f = 540 / h if h > 540 else 1.0
                img = resize(img, (int(w * f), int(h * f)), "area")
                return srgb_to_linear(img)
    except Exception as e:
        print(f"footage {path}: {e}", file=sys.stderr)
    return None


def fmt(x, nd=3):
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def table(res) -> str:
    lines = ["| set | metric | model | vertical prior | constant | fronto-parallel |",
             "|---|---|---|---|---|---|"]
    for name in ("nyu", "open3d", "middlebury"):
        r = res["real"][name]
        for k in ("absrel", "delta1"):
            lines.append(f"| {name} | depth {k} | {fmt(r['model'][k])} | {fmt(r['vertical'][k])} | "
                         f"{fmt(r['constant'][k])} | |")
    for sname, s in res["synthetic"].items():
        if not s:
            continue
        mm, cc, ff, vv = s["model"], s["constant"], s["fronto"], s["vertical"]
        for key, label in (("depth_absrel", "depth AbsRel"), ("depth_delta1", "depth delta1"),
                           ("normal_mean_deg", "normal mean deg"), ("normal_pct_11", "normal % < 11.25"),
                           ("normal_pct_22", "normal % < 22.5"), ("normal_pct_30", "normal % < 30"),
                           ("albedo_psnr", "albedo PSNR dB"), ("albedo_si_mse", "albedo si-MSE"),
                           ("metallic_mae", "metallic MAE"), ("roughness_mae", "roughness MAE")):
            nd = 4 if "si_mse" in key else (1 if ("pct" in key or "deg" in key or "psnr" in key) else 3)
            lines.append(f"| {sname} ({s['frames']} held-out) | {label} | {fmt(mm.get(key), nd)} | "
                         f"{fmt(vv.get(key), nd) if key in vv else ''} | {fmt(cc.get(key), nd)} | "
                         f"{fmt(ff.get(key), nd) if key in ff else ''} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="ONNX file (default: the shipped one)")
    ap.add_argument("--max-size", type=int, default=None, help="processing long side (default: the estimator's)")
    ap.add_argument("--synthetic", nargs="*",
                    default=["training/data/procedural", "training/data/rooms", "training/data/rooms_kinect",
                             "training/data/rooms_rgbd"],
                    help="held-out synthetic sets (folders that do not exist are skipped)")
    ap.add_argument("--max-synthetic", type=int, default=60)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from backend.estimators.base import get_estimator

    est = get_estimator("embedded", model_path=args.model, max_size=args.max_size, threads=args.threads)
    t0 = time.time()
    res = {"model": str(est.model_path), "model_sha256": est.sha256, "max_size": est.max_size,
           "real": eval_real(est), "synthetic": {}}
    sheet_items = []
    for folder in args.synthetic:
        fr = load_heldout(ROOT / folder if not Path(folder).is_absolute() else Path(folder), args.max_synthetic)
        name = Path(folder).name
        res["synthetic"][name] = eval_synthetic(est, fr)
        sheet_items += [(f"{name} (held-out)", f["combined"]) for f in fr[:2]]
    res["eval_wall_s"] = round(time.time() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".tmp_eval_embedded.json"
    tmp.write_text(json.dumps(res, indent=2))
    os.replace(tmp, out / "eval_embedded.json")
    real_items = [("NYU " + s["name"], s["rgb"]) for s in M.load_nyu()[:2]]
    real_items += [("Open3D " + s["name"], s["rgb"]) for s in M.load_open3d()[:1]]
    real_items += [("Middlebury motorcycle", M.load_middlebury()[0]["rgb"])]
    foot = M.SHARED_ROOT / "footage"
    for clip in ("boat.mp4", "phone_office.mp4"):
        img = footage_frame(foot / clip)
        if img is not None:
            real_items.append((clip, img))
    contact_sheet(est, real_items + sheet_items, out / "eval_contact_sheet.png")
    md = table(res)
    print(md)
    (out / "eval_embedded.md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
