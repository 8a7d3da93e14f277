"""Turn Cycles render passes into contract G-buffers (numpy only, no ``bpy``).

Inputs are the channels of a Cycles multilayer EXR (``<layer>.<pass>.<chan>``,
as read by :func:`backend.contract.read_channels`); outputs are the arrays of a
:class:`backend.contract.GBufferFrame`.

Method:
  * **Coverage** (``Confidence``): ``1 - Mist`` with the mist range set to
    ``[0, MIST_DEPTH]`` so every surface gives ~0 and the background exactly 1;
    it is the anti-aliased fraction of the pixel covered by a surface.
  * **Depth**: Cycles' ``Depth`` pass, which for perspective and orthographic
    cameras is planar depth along the camera axis (verified by tests). Background
    samples give 1e10; pixels with coverage < 0.5, or whose depth sample hit the
    background, are sky: depth = ``depth_far``, normal (0,0,1), confidence 0.
  * **Normal**: the world-space ``Normal`` pass rotated into camera space by the
    transpose of the camera's world rotation, then renormalised (anti-aliased
    pixels average several normals).
  * **Albedo/Metallic/Roughness**: shader AOVs divided by the mask AOV (undoes
    the averaging with background samples at object edges); pixels with
    coverage but no mask get the default surface.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ...backend.geometry import unit_or_facing

#: mist range used for coverage (Blender units); surfaces closer than this read ~0
MIST_DEPTH = 1.0e6
#: Cycles writes this (1e10) into the Depth pass for background samples
BACKGROUND_DEPTH = 1.0e9


class PassError(ValueError):
    """A render pass needed for the G-buffers is missing."""


def find_pass(chans: Dict[str, np.ndarray], name: str, suffixes: Sequence[str]) -> Optional[np.ndarray]:
    """``H x W`` or ``H x W x C`` float32 array of pass ``name`` under any layer, or None."""
    found = []
    for s in suffixes:
        cands = [k for k in chans if k.endswith(f".{name}.{s}") or k == f"{name}.{s}"]
        if not cands:
            return None
        found.append(np.asarray(chans[sorted(cands, key=len)[0]], dtype=np.float32))
    return found[0] if len(found) == 1 else np.stack(found, axis=-1)


def _value_pass(chans, name):
    for suffixes in (("V",), ("X",), ("Z",), ("R",)):
        arr = find_pass(chans, name, suffixes)
        if arr is not None:
            return arr
    return None


def world_to_camera_normals(normal_world: np.ndarray, cam_rotation: np.ndarray) -> np.ndarray:
    """Rotate world-space normals into camera space and renormalise.

    Args:
        normal_world: ``H x W x 3`` float world-space normals (may be shorter than
            unit at anti-aliased pixels; zero where there is no surface).
        cam_rotation: ``3 x 3`` rotation of the camera's ``matrix_world``
            (columns = camera X, Y, Z axes in world space; scale removed).

    Returns:
        ``H x W x 3`` float32 unit normals in camera space (OpenGL: +X right,
        +Y up, +Z toward the camera). Zero-length input gives (0, 0, 1).
    """
    r = np.asarray(cam_rotation, dtype=np.float64)
    return unit_or_facing(normal_world.astype(np.float64) @ r, 1e-6)  # R^T n per pixel


def passes_to_gbuffers(
    chans: Dict[str, np.ndarray],
    cam_rotation: np.ndarray,
    *,
    unit_scale: float = 1.0,
    aov_names: Tuple[str, str, str, str] = ("_gbx_albedo", "_gbx_metallic", "_gbx_roughness", "_gbx_mask"),
    default_surface: Tuple[Tuple[float, float, float], float, float] = ((0.8, 0.8, 0.8), 0.0, 0.5),
    combined: Optional[np.ndarray] = None,
) -> Dict[str, np.ndarray]:
    """Convert Cycles passes into contract arrays.

    Args:
        chans: channel name -> ``H x W`` array (Combined, Depth, Normal, Mist and
            the four AOVs must be present).
        cam_rotation: ``3 x 3`` camera world rotation (see :func:`world_to_camera_normals`).
        unit_scale: metres per Blender unit (``scene.unit_settings.scale_length``).
        aov_names: names of the albedo, metallic, roughness and mask AOVs.
        default_surface: ``(albedo, metallic, roughness)`` for covered pixels
            without material AOVs.
        combined: optional ``H x W x 4`` replacement for the Combined pass (e.g.
            the average of motion-blur sub-frames).

    Returns:
        dict with ``combined`` (H x W x 4, scene-linear), ``depth`` (H x W, metres,
        sky = far), ``normal`` (H x W x 3), ``albedo`` (H x W x 3, [0,1]),
        ``metallic``, ``roughness``, ``confidence`` (H x W, [0,1]),
        ``depth_near``, ``depth_far`` (floats) and ``sky`` (bool H x W).

    Raises:
        PassError: naming the missing pass.
    """
    if combined is None:
        combined = find_pass(chans, "Combined", ("R", "G", "B", "A"))
    depth = _value_pass(chans, "Depth")
    normal = find_pass(chans, "Normal", ("X", "Y", "Z"))
    mist = _value_pass(chans, "Mist")
    a_name, m_name, r_name, k_name = aov_names
    albedo = find_pass(chans, a_name, ("R", "G", "B"))
    metallic = _value_pass(chans, m_name)
    rough = _value_pass(chans, r_name)
    mask = _value_pass(chans, k_name)
    for label, arr in (("Combined", combined), ("Depth", depth), ("Normal", normal), ("Mist", mist),
                       (a_name, albedo), (m_name, metallic), (r_name, rough), (k_name, mask)):
        if arr is None:
            raise PassError(f"render pass {label} missing (channels: {sorted(chans)[:12]}...)")

    coverage = np.clip(1.0 - mist, 0.0, 1.0)
    sky = (coverage < 0.5) | (depth >= BACKGROUND_DEPTH) | ~np.isfinite(depth)
    depth_m = depth.astype(np.float64) * unit_scale
    surf = ~sky
    if surf.any():
        near = float(depth_m[surf].min())
        far = float(depth_m[surf].max())
    else:
        near, far = 1.0, 100.0
    near = max(near, 1e-6)
    far = max(far, near)
    depth_out = np.where(sky, far, np.maximum(depth_m, 1e-6)).astype(np.float32)

    n_cam = world_to_camera_normals(normal, cam_rotation)
    n_cam[sky] = (0.0, 0.0, 1.0)

    has_mat = mask > 1e-3
    safe = np.where(has_mat, mask, 1.0)
    alb = albedo / safe[..., None]
    met = metallic / safe
    rou = rough / safe
    d_alb, d_met, d_rou = default_surface
    nomat = surf & ~has_mat
    alb[nomat] = d_alb
    met[nomat] = d_met
    rou[nomat] = d_rou
    alb[sky] = 0.0
    met[sky] = 0.0
    rou[sky] = 0.0

    conf = np.where(sky, 0.0, coverage).astype(np.float32)
    comb = np.nan_to_num(combined.astype(np.float32), nan=0.0, posinf=65000.0)
    comb = np.clip(comb, 0.0, 65000.0)  # half-float range, no negative light
    return {
        "combined": comb,
        "depth": depth_out,
        "normal": n_cam,
        "albedo": np.clip(alb, 0.0, 1.0).astype(np.float32),
        "metallic": np.clip(met, 0.0, 1.0).astype(np.float32),
        "roughness": np.clip(rou, 0.0, 1.0).astype(np.float32),
        "confidence": conf,
        "depth_near": near,
        "depth_far": far,
        "sky": sky,
    }
