"""Lens undistortion of frames (OpenCV), and a check that refuses distortion we cannot undo.

Plane-sweep stereo needs pinhole frames: :func:`undistort_image` resamples a frame of
a camera with ``distortion_model = "opencv"`` onto the same pinhole intrinsics without
distortion (``cv2.initUndistortRectifyMap`` + ``cv2.remap``), and returns that camera.
"""
from __future__ import annotations

import numpy as np

from .cameras import Camera, CameraError

#: largest round-trip error (pixels) accepted by :func:`check_distortion`
MAX_ROUNDTRIP_PX = 0.25


def _dist_coeffs(cam: Camera) -> np.ndarray:
    return np.asarray(list(cam.distortion) + [0.0] * (5 - len(cam.distortion)), np.float64)


def check_distortion(cam: Camera, file=None, frame=None) -> None:
    """Refuse a lens distortion that cannot be undone over the whole frame.

    Two tests: the radial factor ``1 + k1 r^2 + k2 r^4 + k3 r^6`` must stay positive and
    its radius ``r * factor`` must increase monotonically up to the frame corners (else
    two rays land on one pixel: the model folds over), and a grid of 17 x 17 pixels
    (borders included) must survive distort(undistort(p)) within
    :data:`MAX_ROUNDTRIP_PX` (``cv2.undistortPointsIter`` converges).

    Raises:
        CameraError: one line naming the file and frame, with the failing test.
    """
    import cv2

    if not cam.has_distortion:
        return
    at = ", ".join(str(v) for v in (file, frame if frame is not None else cam.name) if v is not None)
    at = at + ": " if at else ""
    k1, k2, p1, p2, k3 = _dist_coeffs(cam)
    corners = np.array([[0, 0], [cam.width, 0], [0, cam.height], [cam.width, cam.height]], float)
    rmax = float(np.max(np.hypot((corners[:, 0] - cam.cx) / cam.fx, (corners[:, 1] - cam.cy) / cam.fy)))
    r = np.linspace(0.0, 1.5 * rmax, 512)
    factor = 1 + k1 * r ** 2 + k2 * r ** 4 + k3 * r ** 6
    rd = r * factor
    if np.any(factor <= 0) or np.any(np.diff(rd) <= 0):
        raise CameraError(f"{at}lens distortion cannot be undone: the radial model folds over "
                          f"inside the frame (k1={k1:g}, k2={k2:g}, k3={k3:g})", file=file, frame=frame)
    g = np.stack(np.meshgrid(np.linspace(0, cam.width - 1, 17), np.linspace(0, cam.height - 1, 17)),
                 -1).reshape(-1, 1, 2)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-10)
    und = cv2.undistortPointsIter(g, cam.K_cv, _dist_coeffs(cam), None, None, crit)
    back, _ = cv2.projectPoints(np.concatenate([und, np.ones_like(und[..., :1])], -1),
                                np.zeros(3), np.zeros(3), cam.K_cv, _dist_coeffs(cam))
    err = float(np.nanmax(np.linalg.norm(back - g, axis=-1))) if np.all(np.isfinite(back)) else np.inf
    if not err <= MAX_ROUNDTRIP_PX:
        raise CameraError(f"{at}lens distortion cannot be undone: undistort/distort round trip "
                          f"is off by {err:.2g} px", file=file, frame=frame)


def undistort_image(img: np.ndarray, cam: Camera, interp: str = "linear"):
    """Resample a frame to the pinhole camera with the same intrinsics and no distortion.

    Args:
        img: ``H x W`` or ``H x W x C`` array (uint8 or float32) of ``cam``'s size.
        cam: its camera; ``cam.distortion_model`` ``"none"`` returns ``img`` unchanged.
        interp: ``"linear"`` (images) or ``"nearest"`` (masks, labels).

    Returns:
        ``(image, camera)``: the undistorted frame (same shape and dtype; pixels that map
        outside the source are replicated from the border) and ``cam.undistorted()``.

    Raises:
        CameraError: the image size differs from the camera's, or :func:`check_distortion`
            refuses the distortion.
    """
    import cv2

    if img.shape[0] != cam.height or img.shape[1] != cam.width:
        raise CameraError(f"frame {cam.name}: image is {img.shape[1]}x{img.shape[0]}, camera "
                          f"is {cam.width}x{cam.height}", frame=None)
    if not cam.has_distortion:
        return img, cam.undistorted()
    check_distortion(cam)
    map1, map2 = cv2.initUndistortRectifyMap(cam.K_cv, _dist_coeffs(cam), None, cam.K_cv,
                                             (cam.width, cam.height), cv2.CV_16SC2)
    flag = cv2.INTER_NEAREST if interp == "nearest" else cv2.INTER_LINEAR
    out = cv2.remap(img, map1, map2, flag, borderMode=cv2.BORDER_REPLICATE)
    if img.ndim == 3 and out.ndim == 2:
        out = out[..., None]
    return out, cam.undistorted()


def _redistort_maps(cam: Camera):
    """For every pixel of the distorted frame, its position in the undistorted one."""
    import cv2

    key = (cam.width, cam.height, cam.intrinsics, tuple(cam.distortion))
    cached = _REDISTORT_CACHE.get(key)
    if cached is not None:
        return cached
    xs, ys = np.meshgrid(np.arange(cam.width, dtype=np.float64), np.arange(cam.height, dtype=np.float64))
    pts = np.stack([xs.ravel(), ys.ravel()], -1).reshape(-1, 1, 2)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 20, 1e-6)
    und = cv2.undistortPointsIter(pts, cam.K_cv, _dist_coeffs(cam), None, cam.K_cv, crit)
    maps = (und[:, 0, 0].reshape(cam.height, cam.width).astype(np.float32),
            und[:, 0, 1].reshape(cam.height, cam.width).astype(np.float32))
    _REDISTORT_CACHE.clear()  # one camera at a time: a shot has one lens
    _REDISTORT_CACHE[key] = maps
    return maps


_REDISTORT_CACHE: dict = {}


def redistort_image(img: np.ndarray, cam: Camera, interp: str = "linear") -> np.ndarray:
    """The inverse of :func:`undistort_image`: resample a map computed on the undistorted
    (pinhole) grid of ``cam`` back onto the frame's own, distorted pixel grid, so
    per-pixel results (depth, normals, confidence) line up with the footage.

    Args:
        img: ``H x W [x C]`` float32 on the undistorted grid (``cam``'s size).
        cam: the frame's camera (with its distortion); without distortion ``img`` is
            returned unchanged.
        interp: ``"linear"`` or ``"nearest"`` (masks).

    Returns:
        The same shape and dtype on the distorted grid (border pixels replicated).
    """
    import cv2

    if not cam.has_distortion:
        return img
    mx, my = _redistort_maps(cam)
    flag = cv2.INTER_NEAREST if interp == "nearest" else cv2.INTER_LINEAR
    out = cv2.remap(img, mx, my, flag, borderMode=cv2.BORDER_REPLICATE)
    if img.ndim == 3 and out.ndim == 2:
        out = out[..., None]
    return out
