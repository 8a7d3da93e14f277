"""ST-maps of a solved lens: undistort and redistort in a comp package (Nuke STMap,
Blender's Map UV / Displace), as float EXR.

An ST-map gives, for every pixel of the output, where to sample the input, as
normalised coordinates: ``s = (x + 0.5) / W`` left to right and ``t = 1 - (y + 0.5) / H``
bottom to top (the origin at the lower-left corner, Nuke's STMap convention; ``y`` the
row from the top, pixel centres at +0.5). Channels ``R = s``, ``G = t``, ``B = 0``, float32,
``colorInteropID = data``.

* **undistort** map (output: the pinhole image): where each undistorted pixel lies in
  the footage (``cv2.initUndistortRectifyMap``, as :func:`backend.multiview.undistort.undistort_image`).
* **redistort** map (output: the footage's own grid): where each footage pixel lies in
  the undistorted image (``cv2.undistortPointsIter``, as
  :func:`backend.multiview.undistort.redistort_image`).

Applying one and then the other returns the footage (within the maps' interpolation).
This module never imports ``bpy``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from .cameras import Camera, CameraError
from .undistort import _dist_coeffs, _redistort_maps, check_distortion


def _st(mx: np.ndarray, my: np.ndarray, w: int, h: int) -> np.ndarray:
    """``H x W x 2`` float32 ST from pixel positions (integer-centre coordinates)."""
    return np.stack([(mx + 0.5) / w, 1.0 - (my + 0.5) / h], -1).astype(np.float32)


def st_maps(cam: Camera) -> Tuple[np.ndarray, np.ndarray]:
    """``(undistort, redistort)`` ST-maps of ``cam``'s lens, each ``H x W x 2`` float32.

    Raises:
        CameraError: no distortion to map (``distortion_model`` ``none`` or all zero), or
            one :func:`~backend.multiview.undistort.check_distortion` refuses.
    """
    import cv2

    if not cam.has_distortion:
        raise CameraError(f"frame {cam.name}: the camera has no lens distortion; an ST-map would be the "
                          "identity", frame=None)
    check_distortion(cam)
    mx, my = cv2.initUndistortRectifyMap(cam.K_cv, _dist_coeffs(cam), None, cam.K_cv,
                                         (cam.width, cam.height), cv2.CV_32FC1)
    rx, ry = _redistort_maps(cam)
    return _st(mx, my, cam.width, cam.height), _st(rx, ry, cam.width, cam.height)


def apply_st(img: np.ndarray, st: np.ndarray) -> np.ndarray:
    """Sample ``img`` (``H x W [x C]`` float32) at an ST-map (bilinear, border replicated),
    as a comp package's STMap node does."""
    import cv2

    h, w = img.shape[:2]
    mx = (st[..., 0] * w - 0.5).astype(np.float32)
    my = ((1.0 - st[..., 1]) * h - 0.5).astype(np.float32)
    return cv2.remap(img, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def write_st_maps(cam: Camera, out_dir: os.PathLike) -> Dict[str, Path]:
    """Write ``stmap_undistort.exr`` and ``stmap_redistort.exr`` into ``out_dir`` (created).

    Raises:
        FileExistsError: either file exists (never written over).
        CameraError: as :func:`st_maps`.
    """
    import OpenEXR

    from .. import contract, exr_colour

    out = Path(out_dir)
    paths = {k: out / f"stmap_{k}.exr" for k in ("undistort", "redistort")}
    for p in paths.values():
        if p.exists():
            raise FileExistsError(f"{p} exists; it is never written over: choose another --out")
    und, red = st_maps(cam)
    out.mkdir(parents=True, exist_ok=True)
    for key, st in (("undistort", und), ("redistort", red)):
        hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage,
               **exr_colour.colour_attributes(data=True),
               "gbuffer/stmap": key, "gbuffer/distortion_model": cam.distortion_model,
               "gbuffer/distortion": ",".join(f"{c:.9g}" for c in cam.distortion),
               "gbuffer/intrinsics": ",".join(f"{c:.9g}" for c in cam.intrinsics)}
        chans = {"R": np.ascontiguousarray(st[..., 0]), "G": np.ascontiguousarray(st[..., 1]),
                 "B": np.zeros(st.shape[:2], np.float32)}
        with contract.atomic_path(paths[key]) as tmp, OpenEXR.File(hdr, chans) as f:
            f.write(tmp)
    return paths
