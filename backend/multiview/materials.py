"""View-dependent appearance of a static surface across calibrated frames (issue 25,
"materials from many views"): the per-pixel observations a roughness / specularity
estimate rests on.

A surface point of a reference frame (planar depth + camera) is projected into every
other frame (:mod:`backend.multiview.reproject`); where that frame sees the same point
(its depth there agrees within ``depth_tol``, relative) the colour is an observation of
the point from another direction. A Lambertian surface looks the same from every
direction; a glossy one shows highlights and reflections that move with the camera. So:

* ``diffuse`` -- the per-pixel minimum over the views of each channel's observation
  (the view-independent part: highlights only add light; dichromatic reflection model,
  Shafer 1985; as in multi-view specular removal, e.g. Lin, Li, Kang, Tong & Shum,
  "Diffuse-specular separation and depth recovery from image sequences", ECCV 2002);
* ``specularity`` -- ``(max - min) / (max + eps)`` of the observed luminance: 0 for a
  matte surface, toward 1 when the colour changes strongly with the view;
* pooled per smooth surface patch (:func:`surface_regions`, :func:`region_specularity`):
  a glossy floor shows view-dependent change only where something bright reflects in it.

Measured with exact depth and cameras (``benchmarks/materials_multiview_eval.py``): a
roughness lookup on the patch specularity reaches 0.55x the constant's MAE on held-out
shots (0.80x on the TUNE shots it was fitted on); the per-pixel specularity alone does
not beat the constant. Decompose does not use this yet: it needs the fused surface of a
solved shot (issue 24) in place of the exact depth.

Depth/cameras: any consistent pair (the exact ones from a scene export, or a solved
shot's multi-view depth). numpy only.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from .cameras import Camera
from .reproject import project_points, sample_nearest, world_points

_LUMA = np.array([0.2126, 0.7152, 0.0722], np.float32)


def gather_observations(ref: int, rgbs: Sequence[np.ndarray], depths: Sequence[np.ndarray],
                        cams: Sequence[Camera], depth_tol: float = 0.02) -> Tuple[np.ndarray, np.ndarray]:
    """Colours of the reference frame's surface points as every frame sees them.

    Args:
        ref: index of the reference frame.
        rgbs: ``H x W x 3`` float32 scene-linear frames (same size).
        depths: ``H x W`` planar depths (> 0; the cameras' units).
        cams: the frames' cameras (:class:`~backend.multiview.cameras.Camera`).
        depth_tol: relative depth agreement for a view to see the same point.

    Returns:
        ``(obs, valid)``: ``V x H x W x 3`` float32 observations (the reference itself
        included) and ``V x H x W`` bool.

    Raises:
        ValueError: lengths or shapes disagree.
    """
    if not (len(rgbs) == len(depths) == len(cams)) or not 0 <= ref < len(rgbs):
        raise ValueError(f"{len(rgbs)} frames, {len(depths)} depths, {len(cams)} cameras, ref {ref}")
    X = world_points(np.asarray(depths[ref], np.float32), cams[ref])
    obs = np.zeros((len(rgbs),) + rgbs[ref].shape, np.float32)
    valid = np.zeros((len(rgbs),) + rgbs[ref].shape[:2], bool)
    for j, (img, dep, cam) in enumerate(zip(rgbs, depths, cams)):
        if img.shape != rgbs[ref].shape:
            raise ValueError(f"frame {j} is {img.shape}, the reference {rgbs[ref].shape}")
        u, v, z = project_points(X, cam)
        dj, inside = sample_nearest(np.asarray(dep, np.float32), u, v)
        ok = inside & (z > 0) & (np.abs(dj - z) <= depth_tol * np.maximum(z, 1e-6))
        for c in range(3):
            obs[j, ..., c] = sample_nearest(img[..., c], u, v)[0]
        valid[j] = ok
    return obs, valid


def view_dependence(obs: np.ndarray, valid: np.ndarray, min_views: int = 3) -> Tuple[np.ndarray, np.ndarray,
                                                                                      np.ndarray]:
    """Diffuse colour and specularity per pixel from :func:`gather_observations`.

    Returns:
        ``(diffuse, specularity, n_views)``: ``H x W x 3`` float32 (per-channel minimum
        over valid views), ``H x W`` float32 in [0, 1] (0 with fewer than ``min_views``
        views) and ``H x W`` int32 (valid views).
    """
    n = valid.sum(0).astype(np.int32)
    big = np.float32(1e9)
    lo = np.where(valid[..., None], obs, big).min(0)
    lo = np.where(n[..., None] > 0, lo, 0).astype(np.float32)
    lum = obs @ _LUMA
    lmax = np.where(valid, lum, -big).max(0)
    lmin = np.where(valid, lum, big).min(0)
    spec = np.where(n >= min_views, (lmax - lmin) / np.maximum(lmax, 1e-4), 0).astype(np.float32)
    return lo, np.clip(spec, 0, 1), n


def surface_regions(depth: np.ndarray, normal: np.ndarray, mask: np.ndarray, angle_deg: float = 10.0,
                    depth_rel: float = 0.03, min_pixels: int = 20) -> np.ndarray:
    """Smooth surface patches: 4-connected components of ``mask`` pixels, cut where the
    normal turns by more than ``angle_deg`` or the planar depth jumps by more than
    ``depth_rel`` (relative) between neighbours. Gloss is a property of a surface, and
    the evidence for it (a reflection that moves with the view) is sparse, so
    :func:`region_specularity` pools it per patch.

    Args:
        depth: ``H x W`` planar depth (> 0).
        normal: ``H x W x 3`` unit normals.
        mask: ``H x W`` bool, pixels to label.

    Returns:
        ``H x W`` int32 labels, 0 = none (outside ``mask``, a patch edge, or a patch of
        fewer than ``min_pixels``).
    """
    import cv2

    cos = np.float32(np.cos(np.radians(angle_deg)))
    ok = np.asarray(mask, bool).copy()
    dx = ((normal[:, 1:] * normal[:, :-1]).sum(-1) > cos) & \
        (np.abs(depth[:, 1:] - depth[:, :-1]) <= depth_rel * depth[:, :-1])
    dy = ((normal[1:] * normal[:-1]).sum(-1) > cos) & (np.abs(depth[1:] - depth[:-1]) <= depth_rel * depth[:-1])
    ok[:, :-1] &= dx
    ok[:-1] &= dy
    n, lab = cv2.connectedComponents(ok.astype(np.uint8), connectivity=4)
    counts = np.bincount(lab.ravel(), minlength=n)
    small = counts < min_pixels
    small[0] = True
    lab[small[lab]] = 0
    return lab.astype(np.int32)


def region_specularity(spec: np.ndarray, labels: np.ndarray, q: float = 98.0) -> np.ndarray:
    """Per patch of :func:`surface_regions`, the ``q``-th percentile of the pixels'
    specularity (:func:`view_dependence`), painted over the patch; 0 where unlabelled.
    ``q = 98`` was chosen on the TUNE shots of ``benchmarks/materials_multiview_eval.py``
    (among 50 / 90 / 98)."""
    out = np.zeros(spec.shape, np.float32)
    lab = labels.ravel()
    order = np.argsort(lab, kind="stable")
    bounds = np.searchsorted(lab[order], np.arange(1, int(labels.max()) + 2))
    flat = spec.ravel()
    for i in range(len(bounds) - 1):
        idx = order[bounds[i]:bounds[i + 1]]
        if len(idx):
            out.ravel()[idx] = np.percentile(flat[idx], q)
    return out
