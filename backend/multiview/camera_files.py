"""Camera file formats: our JSON, COLMAP's text model, Open3D's ``trajectory.log``.

Every loader returns ``{key: Camera}`` (see :mod:`backend.multiview.cameras` for the
conventions and the JSON schema; ``docs/cameras.md`` is the prose version) and
validates each camera; every error is a one-line :class:`CameraError` naming the file
and frame. Writers exist for our JSON and COLMAP's text model (round trips, exports).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ..input_files import loads_json, read_text
from .cameras import COLMAP_MODELS, Camera, CameraError, validate_camera

JSON_FORMAT = "gbuffer-cameras"
JSON_VERSION = 1
_CONVENTIONS = ("blender", "opencv")


def _read_text(path: Path) -> str:
    """The camera file's text: a regular file only (a FIFO is refused, never waited on)."""
    try:
        return read_text(path, "the camera file", CameraError)
    except OSError as e:
        raise CameraError(f"{path}: cannot read camera file ({e.strerror or e})", file=path) from None


def _load_json(path: Path):
    """The camera file's JSON (nesting bounded; errors name the file)."""
    return loads_json(_read_text(path), path, "the camera file", CameraError)


def _distortion_from_json(d, path) -> Tuple[str, Tuple[float, ...]]:
    if not d or d.get("model", "none") == "none":
        return "none", ()
    if d.get("model") != "opencv":
        raise CameraError(f"{path}: unknown distortion model {d.get('model')!r}; one of none, opencv",
                          file=path)
    keys = ("k1", "k2", "p1", "p2", "k3")
    return "opencv", tuple(float(d.get(k, 0.0)) for k in keys)


def _json_intrinsics(d, path, frame=None) -> Tuple[float, float, float, float]:
    try:
        return tuple(float(d[k]) for k in ("fx", "fy", "cx", "cy"))
    except (KeyError, TypeError, ValueError):
        at = f", frame {frame}" if frame is not None else ""
        raise CameraError(f"{path}{at}: intrinsics need numbers fx, fy, cx, cy", file=path,
                          frame=frame) from None


def load_cameras_json(path: os.PathLike) -> Dict[int, Camera]:
    """Read our camera JSON (schema: :mod:`backend.multiview.cameras`, ``docs/cameras.md``).

    Returns:
        ``{frame_number: Camera}`` keyed by 1-based source frame number.

    Raises:
        CameraError: unreadable or invalid JSON, wrong ``format``, unknown convention or
            distortion model, a frame without a 4x4 ``camera_to_world``, a duplicate
            frame, or a camera that fails :func:`validate_camera`.
    """
    path = Path(path)
    doc = _load_json(path)
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise CameraError(f"{path}: not a camera file (\"format\" must be {JSON_FORMAT!r})", file=path)
    conv = doc.get("convention", "blender")
    if conv not in _CONVENTIONS:
        raise CameraError(f"{path}: unknown convention {conv!r}; one of {_CONVENTIONS}", file=path)
    try:
        w, h = int(doc["width"]), int(doc["height"])
    except (KeyError, TypeError, ValueError):
        raise CameraError(f"{path}: needs integer \"width\" and \"height\"", file=path) from None
    model, coeffs = _distortion_from_json(doc.get("distortion"), path)
    intr = _json_intrinsics(doc.get("intrinsics"), path)
    make = Camera.from_c2w_opengl if conv == "blender" else Camera.from_c2w_opencv
    cams: Dict[int, Camera] = {}
    for entry in doc.get("frames") or []:
        frame = entry.get("frame") if isinstance(entry, dict) else None
        if not isinstance(frame, int) or frame < 0:
            raise CameraError(f"{path}: every frame needs an integer \"frame\" >= 0 (the source frame number), got {frame!r}",
                              file=path)
        if frame in cams:
            raise CameraError(f"{path}, frame {frame}: listed twice", file=path, frame=frame)
        m = np.asarray(entry.get("camera_to_world", []), dtype=np.float64)
        if m.shape != (4, 4):
            raise CameraError(f"{path}, frame {frame}: camera_to_world must be a 4x4 matrix, "
                              f"got shape {m.shape}", file=path, frame=frame)
        fi = _json_intrinsics(entry["intrinsics"], path, frame) if "intrinsics" in entry else intr
        if not np.all(np.isfinite(m)):
            raise CameraError(f"{path}, frame {frame}: camera_to_world has non-finite values",
                              file=path, frame=frame)
        if not np.allclose(m[3], (0.0, 0.0, 0.0, 1.0), atol=1e-9):
            raise CameraError(f"{path}, frame {frame}: camera_to_world's bottom row is {m[3].tolist()}, not "
                              f"[0, 0, 0, 1]: not a rigid camera pose (a projection or a transposed matrix?)",
                              file=path, frame=frame)
        cam = make(m, w, h, *fi, distortion_model=model, distortion=coeffs, name=str(frame))
        cams[frame] = validate_camera(cam, path, frame)
    if not cams:
        raise CameraError(f"{path}: no frames", file=path)
    return cams


def save_cameras_json(path: os.PathLike, cameras: Dict[int, Camera], *,
                      convention: str = "blender", units: str = "solve units",
                      depth_range: Optional[Tuple[float, float]] = None,
                      points: Optional[np.ndarray] = None, lens_note: Optional[str] = None) -> None:
    """Write ``{frame_number: Camera}`` as our JSON. Size, intrinsics and distortion come
    from the first camera; frames whose intrinsics differ carry their own.
    ``depth_range``: the scene's ``(near, far)`` in the solve's units (e.g. from its
    reconstructed points), written as ``"depth_range"``; ``points``: reconstructed world
    points ``N x 3`` (solve units), written as ``"points"`` (per-frame search ranges
    come from them). ``lens_note``: the solve could not determine the lens and kept the
    intrinsics written here anyway (Track & Solve): written as
    ``"lens": {"determined": false, "note": ...}`` so the file says so."""
    items = sorted(cameras.items())
    first = items[0][1]
    frames = []
    for frame, cam in items:
        m = cam.c2w_opengl() if convention == "blender" else cam.c2w_opencv()
        entry = {"frame": int(frame), "camera_to_world": m.tolist()}
        if cam.intrinsics != first.intrinsics:
            entry["intrinsics"] = dict(zip(("fx", "fy", "cx", "cy"), cam.intrinsics))
        frames.append(entry)
    dist = {"model": first.distortion_model}
    dist.update(zip(("k1", "k2", "p1", "p2", "k3"), first.distortion))
    doc = {"format": JSON_FORMAT, "version": JSON_VERSION, "convention": convention,
           "units": units, "width": first.width, "height": first.height,
           "intrinsics": dict(zip(("fx", "fy", "cx", "cy"), first.intrinsics)),
           "distortion": dist, "frames": frames}
    if depth_range is not None:
        doc["depth_range"] = [float(depth_range[0]), float(depth_range[1])]
    if lens_note:
        doc["lens"] = {"determined": False, "note": str(lens_note)}
    if points is not None:
        doc["points"] = [[float(v) for v in p] for p in np.asarray(points, np.float64).reshape(-1, 3)]
    Path(path).write_text(json.dumps(doc, indent=1), encoding="utf-8")


def _data_lines(path: Path):
    """Non-comment lines of a COLMAP text file with their 1-based line numbers."""
    return [(i + 1, ln) for i, ln in enumerate(_read_text(path).splitlines())
            if not ln.lstrip().startswith("#")]


def _colmap_camera(tokens, path, lineno):
    try:
        cam_id, model, w, h = int(tokens[0]), tokens[1], int(tokens[2]), int(tokens[3])
        params = [float(v) for v in tokens[4:]]
    except (IndexError, ValueError):
        raise CameraError(f"{path}, line {lineno}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]",
                          file=path) from None
    if model not in COLMAP_MODELS:
        raise CameraError(f"{path}, camera {cam_id}: unknown camera model {model!r}; "
                          f"supported: {', '.join(COLMAP_MODELS)}", file=path)
    names = COLMAP_MODELS[model]
    if len(params) != len(names):
        raise CameraError(f"{path}, camera {cam_id}: {model} takes {len(names)} parameters, "
                          f"got {len(params)}", file=path)
    p = dict(zip(names, params))
    fx = p.get("fx", p.get("f"))
    fy = p.get("fy", p.get("f"))
    k = (p.get("k1", 0.0), p.get("k2", 0.0), p.get("p1", 0.0), p.get("p2", 0.0))
    model_out = "opencv" if any(name[0] in "kp" for name in names) else "none"
    return cam_id, dict(width=w, height=h, fx=fx, fy=fy, cx=p["cx"], cy=p["cy"],
                        distortion_model=model_out, distortion=k if model_out == "opencv" else ())


def load_colmap_text(folder: os.PathLike) -> Dict[str, Camera]:
    """Read a COLMAP text model folder (``cameras.txt`` + ``images.txt``).

    COLMAP stores world-to-camera ``qvec (qw qx qy qz)``, ``tvec`` in the OpenCV camera
    frame and intrinsics with pixel centres at +0.5: exactly our convention.

    Returns:
        ``{image_name: Camera}`` (the name as written in ``images.txt``, e.g.
        ``frame_0001.png``).

    Raises:
        CameraError: a missing file, a malformed line, an unknown camera model
            (anything but SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV), an
            image naming an unknown camera, or an invalid pose (non-finite, degenerate).
    """
    folder = Path(folder)
    intr = {}
    for lineno, ln in _data_lines(folder / "cameras.txt"):
        if ln.strip():
            cam_id, kw = _colmap_camera(ln.split(), folder / "cameras.txt", lineno)
            intr[cam_id] = kw
    path = folder / "images.txt"
    lines = _data_lines(path)
    cams: Dict[str, Camera] = {}
    # images come as pairs of lines (pose line, 2-D points line, which may be empty)
    for (lineno, ln), _points in zip(lines[0::2], lines[1::2] + [(0, "")]):
        tok = ln.split()
        if not tok:
            continue
        try:
            vals = [float(v) for v in tok[1:8]]
            cam_id, name = int(tok[8]), " ".join(tok[9:])
        except (IndexError, ValueError):
            raise CameraError(f"{path}, line {lineno}: expected IMAGE_ID QW QX QY QZ TX TY TZ "
                              "CAMERA_ID NAME", file=path) from None
        if cam_id not in intr:
            raise CameraError(f"{path}, frame {name}: camera {cam_id} is not in cameras.txt",
                              file=path)
        if not np.all(np.isfinite(vals)) or np.linalg.norm(vals[:4]) < 1e-12:
            raise CameraError(f"{path}, frame {name}: non-finite or zero pose", file=path)
        cam = Camera.from_colmap(vals[:4], vals[4:], name=name, **intr[cam_id])
        cams[name] = validate_camera(cam, path, name)
    if not cams:
        raise CameraError(f"{path}: no images", file=path)
    return cams


def save_colmap_text(folder: os.PathLike, cameras: Dict[str, Camera]) -> None:
    """Write ``{image_name: Camera}`` as a COLMAP text model (one camera per image,
    ``PINHOLE`` or ``OPENCV``; ``points3D.txt`` empty)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cam_lines, img_lines = [], []
    for i, (name, cam) in enumerate(sorted(cameras.items()), start=1):
        params = [cam.fx, cam.fy, cam.cx, cam.cy]
        model = "PINHOLE"
        if cam.distortion_model == "opencv":
            model, params = "OPENCV", params + list(cam.distortion[:4])
        cam_lines.append(f"{i} {model} {cam.width} {cam.height} " + " ".join(repr(float(v)) for v in params))
        q, t = cam.colmap_pose()
        img_lines.append(f"{i} " + " ".join(repr(float(v)) for v in (*q, *t)) + f" {i} {name}")
        img_lines.append("")
    (folder / "cameras.txt").write_text("# Camera list\n" + "\n".join(cam_lines) + "\n")
    (folder / "images.txt").write_text("# Image list\n" + "\n".join(img_lines) + "\n")
    (folder / "points3D.txt").write_text("# 3D point list\n")


def load_open3d_log(path: os.PathLike, width: int, height: int,
                    intrinsics: Sequence[float]) -> Dict[int, Camera]:
    """Read Open3D's ``trajectory.log``: per frame a metadata line (first number: the
    0-based frame index) and a 4x4
    camera-to-world matrix (OpenCV camera axes), rows on four lines.

    Args:
        path: the ``.log`` file.
        width, height: frame size in pixels.
        intrinsics: ``(fx, fy, cx, cy)`` in **Open3D's** convention (pixel centres at
            integers, as ``PinholeCameraIntrinsic``: PrimeSense default ``cx = 319.5``);
            converted to ours by adding 0.5 to ``cx`` and ``cy``.

    Returns:
        ``{frame_number: Camera}`` with frame number = the metadata's frame index + 1.

    Raises:
        CameraError: a truncated record, non-numeric or non-finite values, a degenerate
            pose.
    """
    path = Path(path)
    lines = [ln for ln in _read_text(path).splitlines() if ln.strip()]
    if not lines or len(lines) % 5:
        raise CameraError(f"{path}: expected records of 5 lines (ids + 4x4 matrix), got "
                          f"{len(lines)} lines", file=path)
    fx, fy, cx, cy = map(float, intrinsics)
    cams: Dict[int, Camera] = {}
    for rec in range(len(lines) // 5):
        head = lines[5 * rec].split()
        frame = int(head[0]) + 1 if head and head[0].isdigit() else rec + 1
        try:
            m = np.array([[float(v) for v in ln.split()] for ln in lines[5 * rec + 1:5 * rec + 5]])
        except ValueError:
            raise CameraError(f"{path}, frame {frame}: matrix is not numeric", file=path,
                              frame=frame) from None
        if m.shape != (4, 4) or not np.all(np.isfinite(m)):
            raise CameraError(f"{path}, frame {frame}: camera-to-world must be 4x4 finite numbers",
                              file=path, frame=frame)
        cam = Camera.from_c2w_opencv(m, width, height, fx, fy, cx + 0.5, cy + 0.5, name=str(frame))
        cams[frame] = validate_camera(cam, path, frame)
    return cams


#: ``units`` values of a camera set: ``metres`` (a scaled solve) or the solve's own units
UNITS = ("metres", "solve units")


@dataclass
class CameraSet:
    """Cameras of a shot as read from one file (:func:`read_cameras`).

    Attributes:
        cameras: ``{key: Camera}``: keys are 1-based source frame numbers (our JSON) or
            image file names (COLMAP).
        units: ``"metres"`` or ``"solve units"`` (depth is then metric up to one global
            scale, the same for every frame).
        depth_range: the scene's ``(near, far)`` in those units when the file knows it
            (our JSON's ``depth_range``; for COLMAP the robust range of ``points3D.txt``
            over all cameras), else ``None``.
        path: the file or folder read.
        points: reconstructed world points ``N x 3`` float64 (COLMAP's ``points3D.txt``,
            our JSON's ``points``), or ``None``; per-frame search ranges come from them
            (:mod:`backend.multiview.depth_range`).
    """

    cameras: Dict[Union[int, str], Camera]
    units: str
    depth_range: Optional[Tuple[float, float]]
    path: Path
    points: Optional[np.ndarray] = None


def _json_points(doc, path: Path) -> Optional[np.ndarray]:
    pts = doc.get("points")
    if pts is None:
        return None
    try:
        X = np.asarray(pts, np.float64)
    except (TypeError, ValueError):
        X = np.zeros((0, 0))
    if X.ndim != 2 or X.shape[1] != 3:
        raise CameraError(f"{path}: points must be a list of [x, y, z] world points", file=path)
    return X


def _json_extras(path: Path) -> Tuple[str, Optional[Tuple[float, float]], Optional[np.ndarray]]:
    doc = _load_json(path)
    units = doc.get("units", "solve units")
    if units not in UNITS:
        raise CameraError(f"{path}: unknown units {units!r}; one of {UNITS}", file=path)
    points = _json_points(doc, path)
    rng = doc.get("depth_range")
    if rng is None:
        return units, None, points
    try:
        near, far = float(rng[0]), float(rng[1])
    except (TypeError, ValueError, IndexError):
        raise CameraError(f"{path}: depth_range must be [near, far]", file=path) from None
    if not (np.isfinite(near) and np.isfinite(far) and 0 < near < far):
        raise CameraError(f"{path}: depth_range needs 0 < near < far, got {rng}", file=path)
    return units, (near, far), points


def load_colmap_points(folder: os.PathLike) -> Optional[np.ndarray]:
    """World points ``N x 3`` of a COLMAP text model's ``points3D.txt`` (``None`` when the
    file is missing or empty).

    Raises:
        CameraError: a line without numeric ``POINT3D_ID X Y Z``.
    """
    path = Path(folder) / "points3D.txt"
    if not path.exists():
        return None
    xyz = []
    for lineno, ln in _data_lines(path):
        tok = ln.split()
        if not tok:
            continue
        try:
            xyz.append([float(v) for v in tok[1:4]])
        except ValueError:
            raise CameraError(f"{path}, line {lineno}: expected POINT3D_ID X Y Z ...", file=path) from None
        if len(xyz[-1]) != 3:
            raise CameraError(f"{path}, line {lineno}: expected POINT3D_ID X Y Z ...", file=path)
    return np.asarray(xyz, np.float64).reshape(-1, 3) if xyz else None


def _colmap_depth_range(points: Optional[np.ndarray], cams: Dict[str, Camera]) -> Optional[Tuple[float, float]]:
    """The robust range (:func:`backend.multiview.depth_range.robust_range`) of the points'
    depths in every camera, points in front of it only."""
    from .depth_range import robust_range

    if points is None:
        return None
    z = np.concatenate([(points @ c.R.T + c.t)[:, 2] for c in cams.values()])
    return robust_range(z)


def read_cameras(path: os.PathLike) -> CameraSet:
    """Read a camera file of any supported kind: a folder is a COLMAP text model, a
    ``.json`` file our format (``docs/cameras.md``).

    Raises:
        CameraError: a missing path, an unknown kind, or any loader error.
    """
    path = Path(path)
    if path.is_dir():
        cams = load_colmap_text(path)
        points = load_colmap_points(path)
        return CameraSet(cams, "solve units", _colmap_depth_range(points, cams), path, points)
    if not path.exists():
        raise CameraError(f"{path}: camera file not found", file=path)
    if path.suffix.lower() != ".json":
        raise CameraError(f"{path}: unknown camera file kind; give our JSON (.json) or a COLMAP "
                          "text model folder (cameras.txt + images.txt)", file=path)
    cams = load_cameras_json(path)
    units, rng, points = _json_extras(path)
    return CameraSet(cams, units, rng, path, points)
