"""Cameras for multi-view depth: one pinhole model, three file formats, undistortion.

Internal convention (one, everywhere in ``backend.multiview``)
---------------------------------------------------------------
* **Pose**: world-to-camera rotation ``R`` (3x3) and translation ``t`` (3,) in the
  OpenCV / COLMAP camera frame: +x right, +y down, +z forward (the camera looks down
  +z). A world point ``X`` has camera coordinates ``R @ X + t``; the camera centre is
  ``C = -R.T @ t``. Units are the solve's units (metres once the solve is scaled).
* **Intrinsics** ``fx, fy, cx, cy`` in pixels of the frame, with the G-buffer
  contract's pixel-centre convention: pixel ``(x, y)`` has its centre at
  ``(x + 0.5, y + 0.5)`` (COLMAP's convention too). OpenCV and Open3D put pixel
  centres at integers; :attr:`Camera.K_cv` is the matrix for OpenCV calls
  (``cx - 0.5``, ``cy - 0.5``).
* **Distortion**: ``model = "none"`` or ``"opencv"`` (Brown-Conrady radial-tangential,
  coefficients ``k1, k2, p1, p2[, k3]`` as in OpenCV and COLMAP's ``OPENCV``).
* Planar depth of a point is its camera ``z`` (> 0 in front), the contract's depth.

Converters: :meth:`Camera.from_c2w_opengl` / :meth:`Camera.c2w_opengl` for Blender
(``Object.matrix_world`` of a camera: it looks down -Z with +Y up) and OpenGL,
:meth:`Camera.from_c2w_opencv` (Open3D, our JSON with ``"convention": "opencv"``),
:meth:`Camera.from_colmap` / :meth:`Camera.colmap_pose` (quaternion + translation).

Loaders, in :mod:`backend.multiview.camera_files` (each returns ``{key: Camera}``;
errors are :class:`CameraError`, one line naming the file and frame):

* :func:`load_cameras_json` -- our JSON (schema below and in ``docs/cameras.md``),
  keyed by 1-based source frame number (the ``gbuffer_NNNN.exr`` numbering).
* :func:`load_colmap_text` -- COLMAP's text model folder (``cameras.txt`` +
  ``images.txt``), keyed by image file name. Models SIMPLE_PINHOLE, PINHOLE,
  SIMPLE_RADIAL, RADIAL, OPENCV.
* :func:`load_open3d_log` -- Open3D's ``trajectory.log`` (camera-to-world per frame,
  OpenCV camera frame) with intrinsics given by the caller; keyed by 1-based frame
  number (the log's frame index + 1).

JSON schema (``"format": "gbuffer-cameras"``, ``"version": 1``)::

    {
      "format": "gbuffer-cameras", "version": 1,
      "convention": "blender",          # or "opencv": how camera_to_world's camera axes point
      "units": "metres",                # or "solve units" (unscaled solve)
      "width": 1920, "height": 1080,    # pixels of the frames the intrinsics describe
      "intrinsics": {"fx": 1500.0, "fy": 1500.0, "cx": 960.0, "cy": 540.0},
      "distortion": {"model": "opencv", "k1": -0.1, "k2": 0.01, "p1": 0, "p2": 0, "k3": 0},
      "frames": [
        {"frame": 1, "camera_to_world": [[1,0,0,0],[0,1,0,0],[0,0,1,5],[0,0,0,1]]},
        {"frame": 2, "camera_to_world": [...], "intrinsics": {...}}   # optional per-frame override
      ]
    }

``distortion`` may be omitted or ``{"model": "none"}``. ``camera_to_world`` is a
row-major 4x4 matrix; with ``"blender"`` the camera looks down its local -Z with +Y
up (Blender's ``matrix_world``), with ``"opencv"`` down +Z with +Y down.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError

#: Blender/OpenGL camera axes -> OpenCV camera axes (flip y and z)
_GL_TO_CV = np.diag([1.0, -1.0, -1.0])
#: COLMAP camera models we read: name -> parameter names
COLMAP_MODELS = {
    "SIMPLE_PINHOLE": ("f", "cx", "cy"),
    "PINHOLE": ("fx", "fy", "cx", "cy"),
    "SIMPLE_RADIAL": ("f", "cx", "cy", "k1"),
    "RADIAL": ("f", "cx", "cy", "k1", "k2"),
    "OPENCV": ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2"),
}
DISTORTION_MODELS = ("none", "opencv")


class CameraError(InputError):
    """A camera file or camera is unusable; the message is one line naming file and frame."""


def _where(file, frame) -> str:
    parts = [str(file)] if file is not None else []
    if frame is not None:
        parts.append(f"frame {frame}")
    return (", ".join(parts) + ": ") if parts else ""


@dataclass(frozen=True)
class Camera:
    """A calibrated pinhole camera with an optional lens distortion and a pose.

    Attributes:
        width, height: frame size in pixels (>= 1).
        fx, fy, cx, cy: intrinsics in pixels; pixel ``(x, y)`` centred at ``(x+0.5, y+0.5)``.
        R: ``3 x 3`` float64 world-to-camera rotation (OpenCV camera frame, det +1).
        t: ``(3,)`` float64 world-to-camera translation, solve units.
        distortion_model: ``"none"`` or ``"opencv"``.
        distortion: coefficients ``(k1, k2, p1, p2[, k3])`` for ``"opencv"``, else ``()``.
        name: frame key (source frame number or image name), for messages.
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    t: np.ndarray = field(default_factory=lambda: np.zeros(3))
    distortion_model: str = "none"
    distortion: Tuple[float, ...] = ()
    name: Optional[str] = None

    # ---- derived -------------------------------------------------------------
    @property
    def intrinsics(self) -> Tuple[float, float, float, float]:
        """``(fx, fy, cx, cy)`` as ``backend.geometry`` takes them."""
        return (self.fx, self.fy, self.cx, self.cy)

    @property
    def K(self) -> np.ndarray:
        """``3 x 3`` float64 intrinsic matrix, pixel-centre convention (centres at +0.5)."""
        return np.array([[self.fx, 0, self.cx], [0, self.fy, self.cy], [0, 0, 1.0]])

    @property
    def K_cv(self) -> np.ndarray:
        """``3 x 3`` intrinsic matrix for OpenCV calls and array indices (centres at integers)."""
        return np.array([[self.fx, 0, self.cx - 0.5], [0, self.fy, self.cy - 0.5], [0, 0, 1.0]])

    @property
    def center(self) -> np.ndarray:
        """Camera centre in world coordinates, ``(3,)`` float64."""
        return -self.R.T @ self.t

    @property
    def has_distortion(self) -> bool:
        return self.distortion_model != "none" and any(abs(c) > 0 for c in self.distortion)

    def scaled(self, width: int, height: int) -> "Camera":
        """The same camera for the frame resized to ``width x height`` (pose unchanged)."""
        sx, sy = width / self.width, height / self.height
        return replace(self, width=int(width), height=int(height), fx=self.fx * sx,
                       fy=self.fy * sy, cx=self.cx * sx, cy=self.cy * sy)

    def undistorted(self) -> "Camera":
        """The same camera without lens distortion (what :func:`undistort_image` yields)."""
        return replace(self, distortion_model="none", distortion=())

    # ---- pose converters ------------------------------------------------------
    def c2w_opencv(self) -> np.ndarray:
        """``4 x 4`` camera-to-world matrix, OpenCV camera axes (+z forward, +y down)."""
        m = np.eye(4)
        m[:3, :3] = self.R.T
        m[:3, 3] = self.center
        return m

    def c2w_opengl(self) -> np.ndarray:
        """``4 x 4`` camera-to-world matrix, Blender/OpenGL camera axes (-Z forward, +Y up):
        what Blender's camera ``matrix_world`` holds (without scale)."""
        m = self.c2w_opencv()
        m[:3, :3] = m[:3, :3] @ _GL_TO_CV
        return m

    def colmap_pose(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(qvec, tvec)`` as COLMAP stores them: ``qvec = (qw, qx, qy, qz)`` of ``R``."""
        return rotation_to_quaternion(self.R), self.t.copy()

    @classmethod
    def from_c2w_opencv(cls, c2w, width, height, fx, fy, cx, cy, **kw) -> "Camera":
        """Camera from a ``4 x 4`` (or ``3 x 4``) camera-to-world matrix, OpenCV axes."""
        m = np.asarray(c2w, dtype=np.float64)
        rot = m[:3, :3].T
        return cls(int(width), int(height), float(fx), float(fy), float(cx), float(cy),
                   R=rot, t=-rot @ m[:3, 3], **kw)

    @classmethod
    def from_c2w_opengl(cls, c2w, width, height, fx, fy, cx, cy, **kw) -> "Camera":
        """Camera from a Blender/OpenGL camera-to-world matrix (camera looks down -Z).
        A scale in the matrix (Blender object scale) is removed per axis."""
        m = np.array(c2w, dtype=np.float64)[:4, :4]
        norm = np.linalg.norm(m[:3, :3], axis=0, keepdims=True)
        m[:3, :3] = m[:3, :3] / np.where(norm > 0, norm, 1.0)
        m[:3, :3] = m[:3, :3] @ _GL_TO_CV
        return cls.from_c2w_opencv(m, width, height, fx, fy, cx, cy, **kw)

    @classmethod
    def from_colmap(cls, qvec, tvec, width, height, fx, fy, cx, cy, **kw) -> "Camera":
        """Camera from COLMAP's world-to-camera ``qvec = (qw, qx, qy, qz)`` and ``tvec``."""
        return cls(int(width), int(height), float(fx), float(fy), float(cx), float(cy),
                   R=quaternion_to_rotation(qvec), t=np.asarray(tvec, np.float64), **kw)

    # ---- projection -----------------------------------------------------------
    def project(self, X: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Project world points ``N x 3`` -> (pixel coords ``N x 2`` in the pixel-centre
        convention, planar depth ``N``). No distortion is applied."""
        Xc = np.asarray(X, np.float64) @ self.R.T + self.t
        z = Xc[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = np.stack([self.fx * Xc[:, 0] / z + self.cx, self.fy * Xc[:, 1] / z + self.cy], -1)
        return uv, z


def quaternion_to_rotation(q) -> np.ndarray:
    """Rotation matrix from a quaternion ``(w, x, y, z)`` (normalised first)."""
    w, x, y, z = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def rotation_to_quaternion(R) -> np.ndarray:
    """Quaternion ``(w, x, y, z)`` with ``w >= 0`` of a rotation matrix (Shepperd's method)."""
    m = np.asarray(R, np.float64)
    tr = np.trace(m)
    i = int(np.argmax([tr, m[0, 0], m[1, 1], m[2, 2]]))
    if i == 0:
        s = 2 * math.sqrt(1 + tr)
        q = [s / 4, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        a, b, c = [(0, 1, 2), (1, 2, 0), (2, 0, 1)][i - 1]
        s = 2 * math.sqrt(max(1 + m[a, a] - m[b, b] - m[c, c], 1e-300))
        q = [0.0] * 4
        q[0] = (m[c, b] - m[b, c]) / s
        q[1 + a] = s / 4
        q[1 + b] = (m[a, b] + m[b, a]) / s
        q[1 + c] = (m[a, c] + m[c, a]) / s
    q = np.array(q)
    return -q if q[0] < 0 else q


#: the largest camera position accepted, in the file's units (issue 36: a translation
#: of 1e308 was accepted); a solve in any unit stays far below
MAX_POSITION = 1e9


def _check_magnitudes(cam: Camera, at: str, file, frame) -> None:
    """Values no camera has, refused naming the value: a position beyond
    :data:`MAX_POSITION`, a principal point outside the image by more than half its size
    (``cx=500`` on a 64 px frame), a focal length over 1000 image widths."""
    pos = -np.asarray(cam.R, np.float64).T @ np.asarray(cam.t, np.float64)
    if not np.all(np.abs(pos) <= MAX_POSITION):
        raise CameraError(f"{at}camera position {np.array2string(pos, precision=4)} is beyond {MAX_POSITION:g} "
                          f"units from the origin: not a camera pose (a unit or export error?)",
                          file=file, frame=frame)
    for name, v, size in (("cx", cam.cx, cam.width), ("cy", cam.cy, cam.height)):
        if not -0.5 * size <= v <= 1.5 * size:
            raise CameraError(f"{at}principal point {name}={v:g} lies far outside the {cam.width}x{cam.height} "
                              f"image (expected about {size / 2:g}): intrinsics for another image size?",
                              file=file, frame=frame)
    if max(cam.fx, cam.fy) > 1000 * max(cam.width, cam.height):
        raise CameraError(f"{at}focal length fx={cam.fx:g}, fy={cam.fy:g} is over 1000 image widths "
                          f"({cam.width}x{cam.height} px): not a camera's", file=file, frame=frame)


def validate_camera(cam: Camera, file=None, frame=None) -> Camera:
    """Check one camera; returns it unchanged.

    Raises:
        CameraError: non-positive size or focal length, non-finite values, a rotation
            that is not orthonormal with determinant +1 (a degenerate pose), or an
            unknown distortion model / wrong number of coefficients.
    """
    at = _where(file, frame if frame is not None else cam.name)
    vals = np.concatenate([[cam.fx, cam.fy, cam.cx, cam.cy], np.ravel(cam.R), np.ravel(cam.t),
                           np.asarray(cam.distortion, np.float64)])
    if not np.all(np.isfinite(vals)):
        raise CameraError(f"{at}camera has non-finite values (intrinsics, pose or distortion)",
                          file=file, frame=frame)
    if cam.width < 1 or cam.height < 1 or cam.fx <= 0 or cam.fy <= 0:
        raise CameraError(f"{at}bad intrinsics: size {cam.width}x{cam.height}, "
                          f"fx={cam.fx:g}, fy={cam.fy:g} (need size >= 1, focal > 0)",
                          file=file, frame=frame)
    R = np.asarray(cam.R)
    if R.shape != (3, 3) or np.asarray(cam.t).shape != (3,):
        raise CameraError(f"{at}pose must be a 3x3 rotation and a 3-vector", file=file, frame=frame)
    err = float(np.abs(R @ R.T - np.eye(3)).max())
    if err > 1e-3 or np.linalg.det(R) < 0:
        raise CameraError(f"{at}degenerate pose: rotation is not orthonormal with det +1 "
                          f"(|R R^T - I| = {err:.3g}, det = {np.linalg.det(R):.3g})",
                          file=file, frame=frame)
    _check_magnitudes(cam, at, file, frame)
    if cam.distortion_model not in DISTORTION_MODELS:
        raise CameraError(f"{at}unknown distortion model {cam.distortion_model!r}; "
                          f"one of {DISTORTION_MODELS}", file=file, frame=frame)
    if cam.distortion_model == "opencv" and len(cam.distortion) not in (4, 5):
        raise CameraError(f"{at}opencv distortion needs k1, k2, p1, p2[, k3], got "
                          f"{len(cam.distortion)} coefficients", file=file, frame=frame)
    return cam


def fit_to_frame(cam: Camera, width: int, height: int, file=None, frame=None) -> Camera:
    """The camera for footage of ``width x height``: unchanged when the sizes match,
    rescaled when only the resolution differs (a solve on a proxy).

    Raises:
        CameraError: the aspect ratios differ by more than 0.5 % (wrong camera file).
    """
    if (cam.width, cam.height) == (int(width), int(height)):
        return cam
    a_cam, a_img = cam.width / cam.height, width / height
    if abs(a_cam / a_img - 1.0) > 5e-3:
        raise CameraError(f"{_where(file, frame)}camera image size {cam.width}x{cam.height} "
                          f"does not match the footage's {width}x{height}", file=file, frame=frame)
    return cam.scaled(width, height)


def match_frames(cameras: Dict, keys: Sequence, file=None,
                 allow_missing: bool = False) -> Tuple[List[Optional[Camera]], List]:
    """Cameras for the footage's frames, in order.

    Args:
        cameras: ``{key: Camera}`` from a loader.
        keys: frame keys of the footage (source frame numbers, or image names).
        allow_missing: when true, frames without a camera get ``None`` (the caller falls
            back to the single-image path and warns); else they are an error.

    Returns:
        ``(cams, missing)``: one entry per key, and the keys that had no camera.

    Raises:
        CameraError: a frame has no camera and ``allow_missing`` is false.
    """
    cams = [cameras.get(k) for k in keys]
    missing = [k for k, c in zip(keys, cams) if c is None]
    if missing and not allow_missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CameraError(f"{_where(file, missing[0])}no camera for this frame{more}",
                          file=file, frame=missing[0] if isinstance(missing[0], int) else None)
    return cams, missing
