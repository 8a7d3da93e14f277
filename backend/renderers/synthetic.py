"""Synthetic G-buffer frames with known geometry (for renderer tests, benchmarks, demos).

:func:`sphere_scene` ray-casts a ground plane, a sphere and a back wall / sky with a
pinhole camera and returns a contract :class:`~backend.contract.GBufferFrame` whose
passes are exact (depth in metres, camera-space OpenGL normals). The Combined pass is a
simple Lambert render of the albedo under a fixed sun plus sky, so that ``Combined /
Albedo`` is a meaningful source shading.
"""
from __future__ import annotations

import numpy as np

from ..contract import GBufferFrame, make_meta
from . import shading as sh

F32 = np.float32


def sphere_scene(h: int = 48, w: int = 64, *, albedo=(0.6, 0.45, 0.3), ground=(0.35, 0.4, 0.3),
                 roughness: float = 0.5, metallic: float = 0.0, sky: bool = True,
                 depth_kind: str = "metric", far: float = 60.0, cam_height: float = 1.5,
                 sphere_center=(0.0, 1.0, -6.0), sphere_radius: float = 1.0,
                 fov_y_deg: float = 50.0) -> GBufferFrame:
    """A sphere on a ground plane, camera ``cam_height`` above the ground looking down -Z.

    Args:
        h, w: frame size in pixels.
        albedo, ground: linear RGB albedo of sphere and ground.
        roughness, metallic: scalars for every surface.
        sky: pixels that hit nothing are sky (Confidence 0, depth ``far``); with
            ``sky=False`` a back wall at ``far * 0.9`` closes the scene.
        depth_kind: ``metric`` (metres) or ``relative`` (the metric depth mapped
            linearly onto 1..100, as the contract does for relative estimators).
        sphere_center: world position (camera at ``(0, cam_height, 0)``).

    Returns:
        A valid :class:`GBufferFrame` (float32 arrays; meta with intrinsics).
    """
    fx, fy, cx, cy = sh.intrinsics_for(h, w, None, fov_y_deg)
    planar, ray_len, _ = sh.camera_rays(h, w, (fx, fy, cx, cy))
    d = sh.hwc(planar / ray_len)  # unit ray directions, camera space, H x W x 3
    cam = np.array([0.0, cam_height, 0.0], dtype=F32)
    t_hit = np.full((h, w), np.inf, dtype=F32)
    normal = np.zeros((h, w, 3), dtype=F32)
    alb = np.zeros((h, w, 3), dtype=F32)
    # ground plane y = 0 (world) -> camera-space y = -cam_height
    with np.errstate(divide="ignore", invalid="ignore"):
        tg = np.where(d[..., 1] < -1e-6, -cam_height / d[..., 1], np.inf).astype(F32)
    hit = tg < t_hit
    t_hit = np.where(hit, tg, t_hit)
    normal[hit] = (0.0, 1.0, 0.0)
    alb[hit] = ground
    # sphere
    c = np.asarray(sphere_center, dtype=F32) - cam
    b = d @ c
    disc = b * b - (float(c @ c) - sphere_radius ** 2)
    ts = np.where(disc > 0, b - np.sqrt(np.maximum(disc, 0)), np.inf).astype(F32)
    hit = (ts > 0) & (ts < t_hit)
    t_hit = np.where(hit, ts, t_hit)
    pts = d * np.where(np.isfinite(t_hit), t_hit, F32(far * 10))[..., None]
    ns = (pts - c) / sphere_radius
    normal[hit] = ns[hit]
    alb[hit] = albedo
    # back wall or sky
    zdepth = -pts[..., 2]
    missing = ~np.isfinite(t_hit) | (zdepth > far * 0.9)
    conf = np.ones((h, w), dtype=F32)
    depth = np.where(missing, F32(far * 0.9), zdepth).astype(F32)
    if sky:
        depth = np.where(missing, F32(far), depth)
        normal[missing] = (0.0, 0.0, 1.0)
        alb[missing] = (0.5, 0.5, 0.5)
        conf[missing] = 0.0
    else:
        normal[missing] = (0.0, 0.0, 1.0)
        alb[missing] = (0.5, 0.5, 0.55)
    # source "photo": Lambert sun + sky
    sun = np.asarray(sh.normalize3((-0.4, 0.8, 0.45)), dtype=F32)
    lam = np.maximum(normal @ sun, 0.0)[..., None]
    t = (0.5 + 0.5 * normal[..., 1:2])
    shade = (lam * np.array([1.2, 1.15, 1.05], F32) + np.array([0.15, 0.14, 0.12], F32)
             + np.array([0.2, 0.26, 0.38], F32) * t)
    rgb = alb * shade
    if sky:
        rgb[missing] = (0.5, 0.65, 0.9)
    combined = np.concatenate([rgb, np.ones((h, w, 1), F32)], axis=-1).astype(F32)
    near_v, far_v = 1.0, float(far)
    if depth_kind == "relative":
        dmin = float(depth[conf > 0].min()) if np.any(conf > 0) else 1.0
        depth = (1.0 + (depth - dmin) / (far - dmin) * 99.0).astype(F32)
        near_v, far_v = 1.0, 100.0
    meta = make_meta(estimator="synthetic", depth_kind=depth_kind, depth_near=near_v,
                     depth_far=far_v, intrinsics=(fx, fy, cx, cy))
    return GBufferFrame(
        combined=combined, depth=depth.astype(F32), normal=normal.astype(F32),
        albedo=alb.astype(F32), metallic=np.full((h, w), metallic, F32),
        roughness=np.full((h, w), roughness, F32), confidence=conf, meta=meta)
