"""Evaluation metrics, baselines and the real-depth test sets (numpy only).

Depth protocol (affine-invariant, MiDaS style): a predicted *disparity* map is
aligned to the ground-truth disparity ``1 / depth`` by least-squares scale and shift
over valid pixels, clamped below at ``1 / max_depth`` (max_depth = the largest valid
ground-truth depth, so aligned depth stays finite), inverted to depth, and scored
against the ground-truth depth on the same valid pixels:

* AbsRel = mean(|d - d*| / d*); delta1 = share of pixels with max(d/d*, d*/d) < 1.25.

Middlebury Motorcycle is scored in disparity (the ground truth is disparity):
AbsRel/delta1 computed on disparity after the same least-squares alignment.

Real sets (read-only, ``../shared/groundtruth`` and scikit-image):
NYU Depth v2 3 frames (16-bit PNG, mm, 0 = invalid), Open3D RGB-D 5 frames (same
encoding), Middlebury Motorcycle (``skimage.data.stereo_motorcycle()``, left image
and dense disparity; non-finite / <= 0 disparity invalid). No eval crop.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

import cv2
import numpy as np

from backend.colour import srgb_to_linear

# the shared real data (footage, ground truth): GBUFFER_SHARED_DIR (the variable the tests
# and the demo use), else ../shared beside the repository
SHARED_ROOT = Path(os.environ.get("GBUFFER_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
# the real test sets: GBUFFER_GT_ROOT, else SHARED_ROOT/groundtruth
GT_ROOT = Path(os.environ.get("GBUFFER_GT_ROOT") or SHARED_ROOT / "groundtruth")


def lstsq_scale_shift(pred: np.ndarray, target: np.ndarray, mask: np.ndarray) -> tuple:
    """``s, t`` minimising ``sum((s * pred + t - target)^2)`` over ``mask``."""
    p = pred[mask].astype(np.float64)
    t = target[mask].astype(np.float64)
    A = np.stack([p, np.ones_like(p)], 1)
    sol, *_ = np.linalg.lstsq(A, t, rcond=None)
    return float(sol[0]), float(sol[1])


def absrel_delta1(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray) -> Dict[str, float]:
    p, g = pred[mask], gt[mask]
    absrel = float(np.mean(np.abs(p - g) / g))
    ratio = np.maximum(p / g, g / p)
    return {"absrel": absrel, "delta1": float(np.mean(ratio < 1.25))}


def depth_metrics_from_disparity(pred_disp: np.ndarray, gt_depth: np.ndarray,
                                 mask: np.ndarray) -> Dict[str, float]:
    """Align predicted disparity to 1/gt_depth (scale+shift), invert, score depth."""
    gt_disp = np.zeros_like(gt_depth)
    gt_disp[mask] = 1.0 / gt_depth[mask]
    s, t = lstsq_scale_shift(pred_disp, gt_disp, mask)
    aligned = s * pred_disp + t
    aligned = np.maximum(aligned, 1.0 / float(gt_depth[mask].max()))
    return absrel_delta1(1.0 / aligned, gt_depth, mask)


def disparity_metrics(pred_disp: np.ndarray, gt_disp: np.ndarray, mask: np.ndarray) -> Dict[str, float]:
    """Scale+shift-align predicted disparity to GT disparity; score in disparity."""
    s, t = lstsq_scale_shift(pred_disp, gt_disp, mask)
    aligned = np.maximum(s * pred_disp + t, float(gt_disp[mask].min()) * 0.5)
    return absrel_delta1(aligned, gt_disp, mask)


def vertical_prior_disparity(h: int, w: int) -> np.ndarray:
    """Vertical-gradient prior as disparity: 1 at the bottom row falling linearly to 0
    at the top (depth grows toward the top of the frame). Aligned like a model's output."""
    y = (np.arange(h, dtype=np.float32) + 0.5) / h
    return np.repeat((y)[:, None], w, axis=1)


def constant_disparity(h: int, w: int) -> np.ndarray:
    """Constant prediction. After scale+shift alignment it equals the mean GT disparity."""
    return np.zeros((h, w), np.float32)


# ---------------------------------------------------------------- real test sets
def _read_rgb_linear(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise FileNotFoundError(f"cannot read image {path}")
    return srgb_to_linear(bgr[..., ::-1].astype(np.float32) / 255.0)


def _read_depth_mm(path: Path, scale: float = 1000.0) -> np.ndarray:
    d = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if d is None:
        raise FileNotFoundError(f"cannot read depth {path}")
    return d.astype(np.float32) / scale


def load_nyu(root: Path = GT_ROOT) -> List[dict]:
    """NYU Depth v2 demo frames: list of {name, rgb (linear HxWx3), depth (m), mask}."""
    base = Path(root) / "nyu_depth"
    ann = json.loads((base / "test_annotations.json").read_text())
    out = []
    for f in ann["files"]:
        rgb = _read_rgb_linear(base / "rgb" / Path(f["rgb"]).name)
        depth = _read_depth_mm(base / "depth" / Path(f["depth"]).name, f.get("depth_scale", 1000.0))
        out.append({"name": Path(f["rgb"]).stem, "rgb": rgb, "depth": depth, "mask": depth > 1e-3})
    return out


def load_open3d(root: Path = GT_ROOT) -> List[dict]:
    """Open3D RGB-D frames (PrimeSense): list of {name, rgb, depth (m), mask}."""
    base = Path(root) / "open3d_rgbd"
    out = []
    for line in (base / "rgbd.match").read_text().split("\n"):
        if not line.strip():
            continue
        dpath, cpath = line.split()[:2]
        depth = _read_depth_mm(base / dpath)
        out.append({"name": Path(cpath).stem, "rgb": _read_rgb_linear(base / cpath),
                    "depth": depth, "mask": depth > 1e-3})
    return out


def load_middlebury() -> List[dict]:
    """Middlebury 2014 Motorcycle (scikit-image): {name, rgb (left, linear), disparity, mask}."""
    from skimage import data

    left, _right, disp = data.stereo_motorcycle()
    disp = np.asarray(disp, dtype=np.float32)
    mask = np.isfinite(disp) & (disp > 0)
    disp = np.where(mask, disp, 0).astype(np.float32)
    rgb = srgb_to_linear(np.asarray(left, dtype=np.float32) / 255.0)
    return [{"name": "motorcycle", "rgb": rgb, "disparity": disp, "mask": mask}]


# ---------------------------------------------------------------- synthetic metrics
def normal_metrics(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray) -> Dict[str, float]:
    cos = np.clip((pred[mask] * gt[mask]).sum(-1), -1, 1)
    ang = np.degrees(np.arccos(cos))
    return {"mean_deg": float(ang.mean()), "pct_11": float(np.mean(ang < 11.25) * 100),
            "pct_22": float(np.mean(ang < 22.5) * 100), "pct_30": float(np.mean(ang < 30) * 100)}


def albedo_metrics(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray) -> Dict[str, float]:
    p, g = pred[mask].astype(np.float64), gt[mask].astype(np.float64)
    mse = float(np.mean((p - g) ** 2))
    psnr = float(10 * np.log10(1.0 / max(mse, 1e-10)))
    # scale-invariant MSE (Grosse et al.): per-channel least-squares scale first
    si = 0.0
    for c in range(p.shape[-1]):
        a = float((p[:, c] * g[:, c]).sum() / max((p[:, c] ** 2).sum(), 1e-10))
        si += float(np.mean((a * p[:, c] - g[:, c]) ** 2))
    return {"psnr": psnr, "si_mse": si / p.shape[-1]}


def mae(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray) -> float:
    return float(np.mean(np.abs(pred[mask] - gt[mask])))
