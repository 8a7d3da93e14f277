"""Depth reprojection between calibrated views: geometric consistency and temporal agreement.

A pixel ``p`` of view A with planar depth ``z`` is back-projected
(:func:`backend.geometry.backproject`, pixel centres at +0.5) to a world point, which
is projected into view B. Both checks below sample B's depth at the projected pixel
(nearest pixel, so depth edges are not blended).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..geometry import backproject
from .cameras import Camera

#: OpenGL camera axes (what backend.geometry.backproject returns) -> OpenCV camera axes
_GL_TO_CV = np.array([1.0, -1.0, -1.0], np.float32)


def world_points(depth: np.ndarray, cam: Camera) -> np.ndarray:
    """World coordinates ``H x W x 3`` (float32) of every pixel of a planar depth map
    ``H x W`` (depth > 0, solve units) seen by ``cam`` (its pinhole intrinsics)."""
    pc = backproject(depth, cam.intrinsics) * _GL_TO_CV
    return ((pc - cam.t.astype(np.float32)) @ cam.R.astype(np.float32))


def project_points(X: np.ndarray, cam: Camera) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Project world points ``... x 3`` into ``cam``.

    Returns:
        ``(u, v, z)`` float32 arrays of shape ``...``: pixel coordinates in the
        pixel-centre convention (pixel ``(x, y)`` covers ``[x, x+1) x [y, y+1)``) and
        planar depth (``<= 0`` behind the camera; ``u, v`` are then meaningless).
    """
    Xc = X @ cam.R.T.astype(np.float32) + cam.t.astype(np.float32)
    z = Xc[..., 2]
    zs = np.where(z > 1e-12, z, np.float32(1e-12))
    return (cam.fx * Xc[..., 0] / zs + cam.cx).astype(np.float32), \
        (cam.fy * Xc[..., 1] / zs + cam.cy).astype(np.float32), z.astype(np.float32)


def sample_nearest(img: np.ndarray, u: np.ndarray, v: np.ndarray):
    """Nearest-pixel lookup of ``img`` (``H x W``) at pixel-centre coordinates ``u, v``.

    Returns:
        ``(values, inside)``: float32 values (0 outside) and the boolean in-frame mask.
    """
    h, w = img.shape[:2]
    xi, yi = np.floor(u).astype(np.int64), np.floor(v).astype(np.int64)
    inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
    vals = np.zeros(u.shape, np.float32)
    vals[inside] = img[yi[inside], xi[inside]]
    return vals, inside


def forward_backward_error(depth_a: np.ndarray, cam_a: Camera, depth_b: np.ndarray, cam_b: Camera):
    """Schönberger et al. 2016 (COLMAP, "Pixelwise View Selection for Unstructured
    Multi-View Stereo", ECCV) geometric consistency: project A's pixel with its depth
    into B, take B's depth there, project back into A.

    Args:
        depth_a, depth_b: ``H x W`` float32 planar depth of views A and B (solve units,
            > 0; other values mark no depth).
        cam_a, cam_b: their cameras (pinhole, sizes matching the depth maps).

    Returns:
        ``(err_px, rel_depth, valid)``: ``H x W`` float32 reprojection error in A's pixels,
        ``|z_AinB - z_B| / z_B`` and a boolean mask of pixels where both are defined
        (in front of B, inside B's frame, B has a depth there). Undefined pixels hold inf.
    """
    h, w = depth_a.shape
    u, v, z = project_points(world_points(depth_a, cam_a), cam_b)
    zb, inside = sample_nearest(depth_b, u, v)
    valid = inside & (z > 0) & (zb > 0) & (depth_a > 0)
    ub = np.floor(u[valid]) + 0.5
    vb = np.floor(v[valid]) + 0.5
    zv = zb[valid]
    Xb = np.stack([(ub - cam_b.cx) * zv / cam_b.fx, (vb - cam_b.cy) * zv / cam_b.fy, zv], -1)
    Xw = (Xb - cam_b.t.astype(np.float32)) @ cam_b.R.astype(np.float32)
    ua, va, _ = project_points(Xw, cam_a)
    ys, xs = np.nonzero(valid)
    err = np.full((h, w), np.inf, np.float32)
    err[valid] = np.hypot(ua - (xs + 0.5), va - (ys + 0.5))
    rel = np.full((h, w), np.inf, np.float32)
    rel[valid] = np.abs(z[valid] - zb[valid]) / zb[valid]
    return err, rel, valid


def geometric_consistency(depth: np.ndarray, cam: Camera, others: Sequence[Tuple[np.ndarray, Camera]],
                          sigma_px: float = 1.0, best_k: Optional[int] = None) -> np.ndarray:
    """Per-pixel geometric-consistency score in [0, 1] of a depth map against other views'.

    Each other view gives ``exp(-(e / sigma_px)^2)`` from the forward-backward
    reprojection error ``e`` (:func:`forward_backward_error`; 0 where undefined, e.g.
    occluded or outside its frame); the score is the mean of the ``best_k`` highest
    (default: half the views, rounded up), so a point seen consistently by enough views
    scores near 1 while moving objects and wrong matches score near 0.

    Args:
        depth: ``H x W`` float32 planar depth (> 0) of the reference view.
        cam: its camera. others: ``(depth, camera)`` pairs of the other views.
        sigma_px: error scale in reference pixels.

    Returns:
        ``H x W`` float32 in [0, 1].
    """
    if not others:
        return np.ones(depth.shape, np.float32)
    scores = np.stack([np.exp(-(forward_backward_error(depth, cam, d, c)[0] / sigma_px) ** 2)
                       for d, c in others]).astype(np.float32)
    k = best_k or (len(others) + 1) // 2
    top = -np.sort(-scores, axis=0)[:k]
    return top.mean(axis=0)


def temporal_disagreement(depth_t: np.ndarray, cam_t: Camera, depth_t1: np.ndarray, cam_t1: Camera,
                          mask: Optional[np.ndarray] = None) -> Tuple[float, float]:
    """Temporal consistency of depth: reproject frame t's depth into frame t+1 with the
    cameras and compare with t+1's depth there.

    Args:
        depth_t, depth_t1: ``H x W`` planar depth maps of frames t and t+1 (same units).
        cam_t, cam_t1: their cameras (pinhole, matching size).
        mask: ``H x W`` bool of frame t's pixels to use (static, confident); ``None`` = all.

    Returns:
        ``(median, coverage)``: the median over used pixels that land inside t+1's frame
        (and in front of it) of ``|z_t->t+1 - z_t+1| / z_t+1``, and the fraction of frame
        t's pixels that entered it. ``(nan, 0.0)`` when none did.
    """
    u, v, z = project_points(world_points(depth_t, cam_t), cam_t1)
    zb, inside = sample_nearest(depth_t1, u, v)
    ok = inside & (z > 0) & (zb > 0) & (depth_t > 0)
    if mask is not None:
        ok &= mask.astype(bool)
    if not ok.any():
        return float("nan"), 0.0
    rel = np.abs(z[ok] - zb[ok]) / zb[ok]
    return float(np.median(rel)), float(ok.mean())
