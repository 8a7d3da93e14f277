"""Optional passes beside the contract's: motion vectors (``Vector``) and position (``Position``).

Written only when asked for (``decompose --passes vector,position``), as further parts
of the frame file (:data:`EXTRA_PASSES`), named and laid out as Blender's own render
passes so its compositor uses them directly:

* ``Vector`` (``X Y Z W``, float, pixels): Blender's convention (Cycles/EEVEE): ``XY`` the
  motion from the previous frame to this one (this position minus the previous),
  ``ZW`` from this frame to the next (the next position minus this one), with +Y up
  (Blender's image space). From OpenCV DIS optical flow (:func:`backend.temporal.optical_flow`,
  the flow the stabiliser computes): ``b = flow(cur -> prev)``, ``f = flow(cur -> next)``,
  so ``XY = (-b.x, +b.y)`` and ``ZW = (f.x, -f.y)``. The first frame's ``XY`` and the
  last frame's ``ZW`` are 0 (no neighbour).
* ``Position`` (``X Y Z``, float): the surface point of each pixel, from the planar depth
  and the intrinsics, in the world of the frame's camera (Blender axes, the camera
  file's units) when the frame has one (``gbuffer/position_space = "world"``), else in
  Blender camera space (camera at the origin looking down -Z; ``"camera"``). As
  Blender's Position pass.

This module never imports ``bpy``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

#: pass name -> (channel suffixes, numpy dtype on disk, Blender socket type)
EXTRA_PASSES: Dict[str, tuple] = {
    "Vector": (("X", "Y", "Z", "W"), np.float32, "VECTOR"),
    "Position": (("X", "Y", "Z"), np.float32, "VECTOR"),
}
#: names accepted by ``--passes``
CHOICES = ("vector", "position")


def parse_passes(spec: Optional[str]) -> tuple:
    """``"vector,position"`` -> ``("vector", "position")`` (sorted, unique).

    Raises:
        ValueError: an unknown name (one line naming the choices).
    """
    names = sorted({s.strip().lower() for s in (spec or "").split(",") if s.strip()})
    bad = [n for n in names if n not in CHOICES]
    if bad:
        raise ValueError(f"--passes {spec!r}: unknown pass {bad[0]!r}; choose from {', '.join(CHOICES)}")
    return tuple(names)


def motion_vectors(cur: np.ndarray, prev: Optional[np.ndarray], nxt: Optional[np.ndarray]) -> np.ndarray:
    """``H x W x 4`` float32 Blender ``Vector`` pass of frame ``cur`` (pixels, +Y up).

    Args:
        cur, prev, nxt: ``H x W x 3`` scene-linear frames (``prev``/``nxt`` ``None`` at the
            ends of the range, or when their size differs).
    """
    from .temporal import optical_flow

    h, w = cur.shape[:2]
    out = np.zeros((h, w, 4), np.float32)
    if prev is not None and prev.shape == cur.shape:
        b = optical_flow(cur, prev)
        out[..., 0], out[..., 1] = -b[..., 0], b[..., 1]
    if nxt is not None and nxt.shape == cur.shape:
        f = optical_flow(cur, nxt)
        out[..., 2], out[..., 3] = f[..., 0], -f[..., 1]
    return out


def position(depth: np.ndarray, intrinsics: Sequence[float],
             camera_to_world: Optional[Sequence[Sequence[float]]] = None) -> np.ndarray:
    """``H x W x 3`` float32 position pass from planar depth (pixel centres at +0.5).

    Args:
        depth: ``H x W`` planar depth (> 0).
        intrinsics: ``(fx, fy, cx, cy)`` in pixels of this frame.
        camera_to_world: Blender/OpenGL ``4 x 4``; ``None``: camera space.
    """
    fx, fy, cx, cy = map(float, intrinsics)
    h, w = depth.shape
    z = np.asarray(depth, np.float64)
    x = (np.arange(w) + 0.5 - cx)[None, :] / fx * z
    y = -(np.arange(h) + 0.5 - cy)[:, None] / fy * z
    p = np.stack([x, y, -z], -1)
    if camera_to_world is not None:
        m = np.asarray(camera_to_world, np.float64)
        p = p @ m[:3, :3].T + m[:3, 3]
    return p.astype(np.float32)


def add_position(frame) -> None:
    """Set ``frame.extras['Position']`` from its depth, ``intrinsics`` and ``camera`` (in
    place) and record ``position_space``; nothing without intrinsics."""
    meta: Dict[str, Any] = frame.meta
    k = meta.get("intrinsics")
    if not k:
        return
    cam = meta.get("camera") if isinstance(meta.get("camera"), dict) else None
    c2w = cam.get("camera_to_world") if cam else None
    frame.extras["Position"] = position(frame.depth, k, c2w)
    meta["position_space"] = "world" if c2w is not None else "camera"
