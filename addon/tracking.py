"""Blender's camera solve (Movie Clip Editor, libmv) -> our cameras, and Track & Solve.

Three services for the operators and the headless ``solve`` command:

* :func:`solve_cameras` / :func:`write_cameras_json`: a clip's valid reconstruction as
  ``{source frame number: backend.multiview.cameras.Camera}`` and as our cameras JSON
  (``docs/cameras.md``), with the clip's focal length, principal point and distortion;
* :func:`track_and_solve`: Blender's own tracker on a clip (detect features, track both
  ways from the middle frame, clean, keyframe selection, solve), the focal length from
  ``backend.multiview.sfm`` on Blender's tracks when the clip determines it (else the
  clip's focal is kept with a one-line lens note: "set the focal length of the clip and
  solve again"), refusing a solve that is not good enough (:class:`SolveError`);
* :func:`follow_solve`: the scene camera follows the solve (a Camera Solver constraint,
  focal length / sensor / shift from the solve), as Blender's "Setup Tracking Scene".

Conventions, checked numerically by ``tests/test_camera_solve.py``:

* **Frames.** ``reconstruction.cameras[i].frame`` is a *clip frame*: scene frame
  ``clip.frame_start`` shows clip frame 1 (``BKE_movieclip_remap_scene_to_clip_frame``),
  which is the movie's frame ``clip.frame_offset`` (0-based), or, for an image sequence,
  the file ``clip.frame_offset`` places after the clip's first file. The backend numbers
  the footage's frames 1, 2, ... in file order, so the source frame number is
  ``clip_frame + clip.frame_offset`` (:func:`source_frame_number`).
* **Poses.** A reconstructed camera's ``matrix`` is a Blender camera-to-world matrix
  (the camera looks down its local -Z, +Y up) in the solve's frame. The Camera Solver
  constraint renders it as ``base @ matrix``, where ``base`` is the camera object's own
  transform without constraints (parent included; ``BKE_tracking_get_camera_object_matrix``):
  that is where Set Origin / Set Floor / Set Scale put the artist's orientation and scale.
  We write ``base @ matrix`` when a scene camera follows the clip, else ``matrix``; the
  JSON's ``"convention"`` is ``"blender"``.
* **Intrinsics.** ``tracking.camera.focal_length_pixels`` is ``fx = fy`` (square pixels
  only); ``principal_point_pixels`` counts from the bottom-left corner with pixel centres
  at +0.5, so ``cx = px``, ``cy = height - py`` in our top-left, y-down frame. The
  scene camera that follows the solve renders exactly these cameras (tested: pose 1e-7,
  projection 3e-5 px, with an off-centre principal point).
* **Distortion.** Blender's ``POLYNOMIAL`` model is libmv's: on coordinates normalised by
  the focal length, ``x_d = x (1 + k1 r^2 + k2 r^4 + k3 r^6)`` -- OpenCV's radial model,
  so it maps to ``opencv`` with ``(k1, k2, p1=0, p2=0, k3)`` (checked against Blender's
  Movie Distortion node: the same undistortion within 0.23 px over the frame). ``BROWN``
  maps the same way when ``k4``, ``p1`` and ``p2`` are zero. ``DIVISION`` and ``NUKE`` (and Brown with
  ``k4`` or tangential terms) are refused unless all their coefficients are zero.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import bpy
import numpy as np

from ..backend.multiview.cameras import Camera, validate_camera
from ..backend.multiview.camera_files import save_cameras_json

#: A solve whose average reprojection error is above this (pixels) is refused: libmv
#: solves of usable shots land well under 1 px; above 1.5 px the cameras wobble visibly
#: and multi-view stereo gets no better than the single-image prior.
MAX_SOLVE_ERROR_PX = 1.5
#: A solve with fewer solved frames than this, or than this fraction of the tracked
#: range, is refused (too little of the shot would get measured depth).
MIN_SOLVED_FRAMES = 8
MIN_SOLVED_FRACTION = 0.5
#: Tracks shorter than this many frames are removed before solving (noise for the solver).
MIN_TRACK_FRAMES = 8

_FIX = "track by hand or decompose without it"


class SolveError(ValueError):
    """A clip's solve is missing, failed or unusable; the message is one line."""


# ---- frames and intrinsics -------------------------------------------------------------


def source_frame_number(clip, clip_frame: int) -> int:
    """Source frame number (the backend's numbering: a movie's 1..N, an image
    sequence's file numbers) of a clip frame.

    Clip frame 1 is what scene frame ``clip.frame_start`` shows; the footage frame it
    reads is ``clip.frame_offset`` frames after the clip's first frame (for a sequence,
    Blender counts from the number in the clip's file name: ``shot_1001.png`` -> 1001).
    """
    return int(clip_frame) + int(clip.frame_offset) + _sequence_base(clip) - 1


def _sequence_base(clip) -> int:
    """The file number of an image-sequence clip's first file (1 for a movie)."""
    import re

    if getattr(clip, "source", "") != "SEQUENCE":
        return 1
    m = re.search(r"(\d+)(?!.*\d)", os.path.splitext(os.path.basename(clip.filepath))[0])
    return int(m.group(1)) if m else 1


def clip_frame_of_scene_frame(clip, scene_frame: int) -> int:
    """Clip frame shown at ``scene_frame`` (``scene_frame - clip.frame_start + 1``)."""
    return int(scene_frame) - int(clip.frame_start) + 1


def clip_size(clip) -> Tuple[int, int]:
    """``(width, height)`` of the clip's frames (loads a frame when Blender has not yet)."""
    w, h = int(clip.size[0]), int(clip.size[1])
    if w <= 0 or h <= 0:
        raise SolveError(f"clip {clip.name!r}: cannot read its frames ({bpy.path.abspath(clip.filepath)})")
    return w, h


def clip_distortion(clip) -> Tuple[str, Tuple[float, ...]]:
    """``(model, coefficients)`` in our terms (``"none"`` or ``"opencv"`` with
    ``k1, k2, p1, p2, k3``) for the clip's lens distortion.

    Raises:
        SolveError: a distortion model or term we cannot undo (names clip and model).
    """
    cam = clip.tracking.camera
    model = cam.distortion_model
    if model == "POLYNOMIAL":
        k = (cam.k1, cam.k2, cam.k3)
        extra = ()
    elif model == "BROWN":
        k = (cam.brown_k1, cam.brown_k2, cam.brown_k3)
        extra = (("k4", cam.brown_k4), ("p1", cam.brown_p1), ("p2", cam.brown_p2))
    elif model == "DIVISION":
        k, extra = (), (("k1", cam.division_k1), ("k2", cam.division_k2))
    elif model == "NUKE":
        k, extra = (), (("k1", cam.nuke_k1), ("k2", cam.nuke_k2))
    else:
        raise SolveError(f"clip {clip.name!r}: unknown distortion model {model!r}")
    bad = [name for name, v in extra if abs(v) > 0]
    if bad:
        raise SolveError(f"clip {clip.name!r}: {model.lower()} distortion ({', '.join(bad)}) cannot be "
                         "undone here; use the Polynomial model (k1, k2, k3) or no distortion")
    if not any(abs(v) > 0 for v in k):
        return "none", ()
    return "opencv", (float(k[0]), float(k[1]), 0.0, 0.0, float(k[2]))


def clip_intrinsics(clip) -> dict:
    """``width, height, fx, fy, cx, cy`` of the clip's tracking camera in our convention
    (pixel centres at +0.5, y down).

    Raises:
        SolveError: non-square pixels (not supported), unreadable frames.
    """
    w, h = clip_size(clip)
    cam = clip.tracking.camera
    if abs(cam.pixel_aspect - 1.0) > 1e-6:
        raise SolveError(f"clip {clip.name!r}: pixel aspect {cam.pixel_aspect:g} is not supported "
                         "(square pixels only)")
    f = float(cam.focal_length_pixels)
    px, py = (float(v) for v in cam.principal_point_pixels)
    return {"width": w, "height": h, "fx": f, "fy": f, "cx": px, "cy": h - py}


# ---- the solve -> cameras --------------------------------------------------------------


@dataclass
class SolveStatus:
    """What the sidebar shows about a clip's solve."""

    valid: bool
    error: float = 0.0
    frames: int = 0
    total: int = 0

    def line(self) -> str:
        if not self.valid:
            return "No camera solve"
        return f"Solved: {self.frames}/{self.total} frames, error {self.error:.2f} px"


#: the focal-length search runs on at most this many evenly spaced frames of the clip
#: (the spread of views decides the focal length; libmv then solves every frame with it)
LENS_SEARCH_FRAMES = 16
#: what to do when the clip does not determine its lens
SET_FOCAL_HINT = "set the focal length of the clip and solve again"
#: clip ID property holding the last Track & Solve's note about the lens (empty: determined)
LENS_NOTE_KEY = "gbuffer_lens_note"


def focal_line(clip) -> str:
    """``"Focal: 444.0 px (30.0 mm)"``: the clip's focal length, which the solve uses."""
    cam = clip.tracking.camera
    return f"Focal: {cam.focal_length_pixels:.1f} px ({cam.focal_length:.1f} mm)"


def lens_note(clip) -> str:
    """The last Track & Solve's warning about the lens, or ``""``."""
    return str(clip.get(LENS_NOTE_KEY, "")) if clip is not None else ""


def clip_tracks(clip, first: int, last: int):
    """Blender's tracks of clip frames ``first..last`` as :class:`backend.multiview.sfm.Tracks`
    (source frame numbers, pixel-centre convention, y down; muted markers left out)."""
    from ..backend.multiview.sfm import Tracks

    w, h = clip_size(clip)
    tracks = list(clip.tracking.tracks)
    uv = np.full((last - first + 1, len(tracks), 2), np.nan)
    for n, tr in enumerate(tracks):
        for m in tr.markers:
            if m.mute or not first <= m.frame <= last:
                continue
            uv[m.frame - first, n] = (m.co[0] * w, (1.0 - m.co[1]) * h)
    numbers = [source_frame_number(clip, f) for f in range(first, last + 1)]
    return Tracks(numbers, uv, w, h)


def solve_status(clip) -> SolveStatus:
    """Solve state of the clip's camera tracking object (never raises)."""
    if clip is None:
        return SolveStatus(False)
    rec = clip.tracking.reconstruction
    if not rec.is_valid:
        return SolveStatus(False, total=int(clip.frame_duration))
    return SolveStatus(True, float(rec.average_error), len(rec.cameras), int(clip.frame_duration))


def check_solve(clip, *, max_error: Optional[float] = None, min_frames: Optional[int] = None,
                expected_frames: Optional[int] = None) -> SolveStatus:
    """The clip's solve status when it is usable, else :class:`SolveError`.

    ``max_error`` / ``min_frames`` default to :data:`MAX_SOLVE_ERROR_PX` /
    :data:`MIN_SOLVED_FRAMES`; ``expected_frames``: frames tracked (the solve must cover
    :data:`MIN_SOLVED_FRACTION` of them), by default the clip's length.
    """
    max_error = MAX_SOLVE_ERROR_PX if max_error is None else max_error
    min_frames = MIN_SOLVED_FRAMES if min_frames is None else min_frames
    st = solve_status(clip)
    if not st.valid:
        raise SolveError(f"clip {clip.name!r} has no valid camera solve; run Track & Solve or "
                         "solve it in the Movie Clip Editor")
    need = max(min_frames, int(math.ceil(MIN_SOLVED_FRACTION * (expected_frames or st.total))))
    if st.frames < need or not math.isfinite(st.error) or st.error > max_error:
        raise SolveError(f"camera solve failed: {st.frames} frames solved, error {st.error:.2f} px; {_FIX} "
                         f"(clip {clip.name!r}; needs >= {need} frames and <= {max_error:g} px)")
    return st


def following_camera(scene, clip):
    """The scene's camera when it follows ``clip`` through a Camera Solver constraint."""
    cam = scene.camera if scene is not None else None
    if cam is None:
        return None
    for con in cam.constraints:
        if con.type == "CAMERA_SOLVER" and not con.mute and con.influence > 0:
            target = scene.active_clip if con.use_active_clip else con.clip
            if target == clip:
                return cam
    return None


def base_matrix(camera_object) -> np.ndarray:
    """The camera object's transform without constraints (parent x parent-inverse x own),
    which the Camera Solver constraint multiplies the solved matrix onto."""
    m = np.array(camera_object.matrix_basis, dtype=np.float64)
    parent = camera_object.parent
    if parent is not None:
        m = np.array(parent.matrix_world, np.float64) @ np.array(camera_object.matrix_parent_inverse,
                                                                  np.float64) @ m
    return m


def solve_cameras(clip, scene=None, camera_object=None) -> Dict[int, Camera]:
    """The clip's solved cameras, keyed by 1-based source frame number.

    ``camera_object``: the scene camera whose own transform places the solve (default:
    :func:`following_camera` of ``scene``); without one the solve's own frame is used.

    Raises:
        SolveError: no valid solve, unsupported distortion or pixel aspect.
        backend.multiview.cameras.CameraError: a non-finite or degenerate solved pose.
    """
    rec = clip.tracking.reconstruction
    if not rec.is_valid or len(rec.cameras) == 0:
        raise SolveError(f"clip {clip.name!r} has no valid camera solve; run Track & Solve or "
                         "solve it in the Movie Clip Editor")
    intr = clip_intrinsics(clip)
    model, coeffs = clip_distortion(clip)
    if camera_object is None and scene is not None:
        camera_object = following_camera(scene, clip)
    base = base_matrix(camera_object) if camera_object is not None else np.eye(4)
    cams: Dict[int, Camera] = {}
    for rc in rec.cameras:
        number = source_frame_number(clip, rc.frame)
        if number < 1:
            continue  # before the footage's first frame (a negative frame offset)
        m = base @ np.array(rc.matrix, dtype=np.float64)
        cam = Camera.from_c2w_opengl(m, distortion_model=model, distortion=coeffs, name=str(number), **intr)
        cams[number] = validate_camera(cam, file=f"clip {clip.name!r}", frame=number)
    return cams


def bundle_points(clip, scene=None, camera_object=None) -> np.ndarray:
    """World positions ``N x 3`` of the camera object's reconstructed track bundles."""
    if camera_object is None and scene is not None:
        camera_object = following_camera(scene, clip)
    base = base_matrix(camera_object) if camera_object is not None else np.eye(4)
    obj = clip.tracking.objects[0] if len(clip.tracking.objects) else None
    tracks = obj.tracks if obj is not None else clip.tracking.tracks
    pts = np.array([tuple(t.bundle) for t in tracks if t.has_bundle], np.float64).reshape(-1, 3)
    return pts @ base[:3, :3].T + base[:3, 3]


def bundle_ray_angles(clip, cameras: Dict[int, Camera], scene=None, camera_object=None) -> np.ndarray:
    """Per bundle (order of :func:`bundle_points`), the widest angle in degrees between the
    rays from the solved cameras of the frames where its track has an unmuted marker; a
    bundle seen under a tiny angle is near infinity (its depth is not measured)."""
    pts = bundle_points(clip, scene=scene, camera_object=camera_object)
    obj = clip.tracking.objects[0] if len(clip.tracking.objects) else None
    tracks = [t for t in (obj.tracks if obj is not None else clip.tracking.tracks) if t.has_bundle]
    out = np.zeros(len(tracks))
    for k, (tr, X) in enumerate(zip(tracks, pts)):
        C = [cameras[n].center for n in (source_frame_number(clip, m.frame) for m in tr.markers if not m.mute)
             if n in cameras]
        if len(C) < 2:
            continue
        d = X - np.array(C)
        d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        out[k] = float(np.degrees(np.arccos(np.clip(d @ d.T, -1.0, 1.0).min())))
    return out


def depth_range(cameras: Dict[int, Camera], points: np.ndarray,
                angles: Optional[np.ndarray] = None) -> Optional[Tuple[float, float]]:
    """``(near, far)``: 2nd and 98th percentile of the points' depths in every camera.
    With ``angles`` (:func:`bundle_ray_angles`), points seen under less than
    ``backend.multiview.sfm.MIN_POINT_ANGLE_DEG`` (near infinity) are left out first."""
    if angles is not None and len(angles) == len(points):
        from ..backend.multiview.sfm import MIN_POINT_ANGLE_DEG

        points = points[angles >= MIN_POINT_ANGLE_DEG]
    if len(points) < 8 or not cameras:
        return None
    z = np.concatenate([(points @ c.R.T + c.t)[:, 2] for c in cameras.values()])
    z = z[np.isfinite(z) & (z > 0)]
    if z.size < 8:
        return None
    near, far = float(np.percentile(z, 2)), float(np.percentile(z, 98))
    return (near, far) if 0 < near < far else None


def solve_units(camera_object) -> str:
    """``"metres"`` when the camera's base transform carries a scale (the artist ran Set
    Scale, which scales the camera object), else ``"solve units"``."""
    if camera_object is None:
        return "solve units"
    s = np.linalg.norm(base_matrix(camera_object)[:3, :3], axis=0)
    return "metres" if np.any(np.abs(s - 1.0) > 1e-4) else "solve units"


def write_cameras_json(clip, path: os.PathLike, scene=None, camera_object=None) -> dict:
    """Write the clip's solve as our cameras JSON (``docs/cameras.md``); returns a summary
    ``{"path", "frames", "first", "last", "units", "depth_range", "error"}``.

    Raises:
        SolveError, CameraError: as :func:`solve_cameras`.
    """
    if camera_object is None and scene is not None:
        camera_object = following_camera(scene, clip)
    cams = solve_cameras(clip, camera_object=camera_object)
    if not cams:
        raise SolveError(f"clip {clip.name!r}: no solved frame falls inside the footage")
    rng = depth_range(cams, bundle_points(clip, camera_object=camera_object),
                      bundle_ray_angles(clip, cams, camera_object=camera_object))
    units = solve_units(camera_object)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_cameras_json(path, cams, convention="blender", units=units, depth_range=rng,
                      lens_note=lens_note(clip) or None)
    return {"path": str(path), "frames": len(cams), "first": min(cams), "last": max(cams), "units": units,
            "depth_range": list(rng) if rng else None,
            "error": float(clip.tracking.reconstruction.average_error)}


# ---- the scene camera follows the solve ----------------------------------------------


def follow_solve(scene, clip, camera_object=None):
    """Make the scene camera follow the clip's solve, as Blender's Setup Tracking Scene.

    Uses (or creates) the scene camera; a camera that did not follow the clip yet gets a
    Camera Solver constraint and an identity base transform (so the world is the solve's
    frame; Set Origin / Floor / Scale then move it). Lens from the solve's focal length
    (sensor fit horizontal, sensor width from the clip), shift from the principal point,
    ``scene.active_clip`` set, render size matched to the clip when it differs.

    Returns:
        The camera object.
    """
    intr = clip_intrinsics(clip)
    cam_ob = camera_object or scene.camera
    if cam_ob is None or cam_ob.type != "CAMERA":
        data = bpy.data.cameras.new("Solved Camera")
        cam_ob = bpy.data.objects.new("Solved Camera", data)
        scene.collection.objects.link(cam_ob)
    scene.camera = cam_ob
    scene.active_clip = clip
    if following_camera(scene, clip) is not cam_ob:
        for con in [c for c in cam_ob.constraints if c.type == "CAMERA_SOLVER"]:
            cam_ob.constraints.remove(con)
        con = cam_ob.constraints.new(type="CAMERA_SOLVER")
        con.use_active_clip = False
        con.clip = clip
        con.influence = 1.0
        cam_ob.parent = None
        cam_ob.matrix_basis.identity()
    w, h = intr["width"], intr["height"]
    cam = cam_ob.data
    cam.type = "PERSP"
    cam.sensor_fit = "HORIZONTAL"
    cam.sensor_width = float(clip.tracking.camera.sensor_width)
    cam.lens = intr["fx"] * cam.sensor_width / w
    # shift: fractions of the fitted (horizontal) size; +x moves the view right, i.e. the
    # principal point left of centre; Blender's y is up (``BKE_tracking_camera_shift_get``)
    cam.shift_x = (0.5 * w - intr["cx"]) / w
    cam.shift_y = (intr["cy"] - 0.5 * h) / w
    r = scene.render
    if (r.resolution_x * r.resolution_percentage // 100, r.resolution_y * r.resolution_percentage // 100) != (w, h):
        r.resolution_x, r.resolution_y, r.resolution_percentage = w, h, 100
    return cam_ob


# ---- Track & Solve ----------------------------------------------------------------------


@contextlib.contextmanager
def clip_editor(clip, window=None):
    """A Movie Clip Editor showing ``clip``, as keyword arguments for
    ``bpy.context.temp_override``: an open one is used when there is one, else an area of
    ``window`` (the first window) is switched to the Clip Editor and switched back after.
    Works in background mode (bpy as a module has a window with a screen)."""
    wm = bpy.context.window_manager
    windows = [window] if window is not None else list(wm.windows)
    if not windows:
        raise SolveError("Track & Solve needs a window (none in this Blender session)")
    area = None
    for win in windows:
        area = next((a for a in win.screen.areas if a.type == "CLIP_EDITOR"), None)
        if area is not None:
            window = win
            break
    restore = None
    if area is None:
        window = windows[0]
        area = max(window.screen.areas, key=lambda a: a.width * a.height)
        restore = area.type
        area.type = "CLIP_EDITOR"
    space = area.spaces.active
    old_clip, old_mode = space.clip, space.mode
    space.clip = clip
    space.mode = "TRACKING"
    region = next(r for r in area.regions if r.type == "WINDOW")
    try:
        yield {"window": window, "screen": window.screen, "area": area, "region": region, "space_data": space}
    finally:
        if restore is not None:
            area.type = restore
        else:
            space.clip, space.mode = old_clip, old_mode


def _odd(x: float) -> int:
    n = int(round(x))
    return n if n % 2 else n + 1


def tracking_defaults(clip) -> dict:
    """Tracking settings for real footage, scaled to the frame size (short side ``s``):
    pattern ``s/16`` (11..21 px), search ``s/4`` (41..121 px), translation-only motion
    with brute-force start, correlation >= 0.85, features ``s/24`` apart. Measured on
    ``phone_office.mp4`` (320x240): features 17 px apart gave 46 tracks and a 27 px
    solve; 10 px apart 76 tracks and 0.57 px (0.75 px with correlation 0.75)."""
    w, h = clip_size(clip)
    short = min(w, h)
    pattern = min(21, max(11, _odd(short / 16)))
    search = min(121, max(41, _odd(short / 4)))
    return {"pattern": pattern, "search": search, "motion_model": "Loc", "correlation_min": 0.85,
            "margin": max(8, pattern // 2 + 2), "min_distance": max(8, int(short / 24)),
            "detect_margin": max(8, int(short / 24))}


def _apply_settings(clip, p: dict) -> None:
    s = clip.tracking.settings
    s.default_pattern_size = p["pattern"]
    s.default_search_size = p["search"]
    s.default_motion_model = p["motion_model"]
    s.default_correlation_min = p["correlation_min"]
    s.default_margin = p["margin"]
    s.use_default_brute = True
    s.use_default_normalization = False
    s.default_pattern_match = "KEYFRAME"
    s.default_frames_limit = 0
    s.use_keyframe_selection = True
    s.use_tripod_solver = False
    s.refine_intrinsics_focal_length = False
    s.refine_intrinsics_principal_point = False
    s.refine_intrinsics_radial_distortion = False
    s.refine_intrinsics_tangential_distortion = False


@dataclass
class SolveResult:
    """Outcome of :func:`track_and_solve`."""

    clip: str
    error: float
    frames: int
    tracked_frames: int
    tracks: int
    bundles: int
    focal_px: float
    refined_focal: bool
    seconds: float
    steps: List[Tuple[str, float]] = field(default_factory=list)
    #: one line when the lens could not be determined from the clip (the clip's focal kept)
    lens_note: str = ""
    #: the focal-length search's summary (``backend.multiview.sfm.SolveReport.summary``)
    lens_check: Optional[dict] = None

    def message(self) -> str:
        refined = ", focal solved" if self.refined_focal else ""
        note = f"; {self.lens_note}" if self.lens_note else ""
        return (f"camera solve: {self.frames}/{self.tracked_frames} frames solved, error {self.error:.2f} px, "
                f"{self.bundles} points, focal {self.focal_px:.1f} px{refined} ({self.seconds:.1f} s){note}")


class TrackSolve:
    """Track & Solve as a sequence of steps (for the job controller: one step per tick).

    Args:
        scene: scene whose frame range (mapped through ``clip.frame_start``) bounds the
            tracking; its current frame is restored at the end.
        clip: the Movie Clip. Existing tracks are kept only with ``keep_tracks``.
        refine_focal: search the focal length on Blender's tracks
            (``backend.multiview.sfm.solve_tracks``) and solve again with it when the clip
            determines it; else keep the clip's focal and set :data:`LENS_NOTE_KEY`.
        max_error, min_frames: refusal thresholds (:func:`check_solve`).
    """

    def __init__(self, scene, clip, *, refine_focal: bool = True, keep_tracks: bool = False,
                 max_error: Optional[float] = None, min_frames: Optional[int] = None):
        self.scene, self.clip = scene, clip
        self.refine_focal, self.keep_tracks = refine_focal, keep_tracks
        self.max_error = MAX_SOLVE_ERROR_PX if max_error is None else max_error
        self.min_frames = MIN_SOLVED_FRAMES if min_frames is None else min_frames
        self.params = tracking_defaults(clip)
        last_clip_frame = int(clip.frame_duration)
        first = max(1, clip_frame_of_scene_frame(clip, scene.frame_start))
        last = min(last_clip_frame, clip_frame_of_scene_frame(clip, scene.frame_end))
        if last - first + 1 < 2:
            raise SolveError(f"clip {clip.name!r}: the scene's frame range shows fewer than 2 of its frames")
        self.first, self.last = first, last
        self.steps: List[Tuple[str, float]] = []
        self.result: Optional[SolveResult] = None
        self._t0 = time.perf_counter()

    @property
    def tracked_frames(self) -> int:
        return self.last - self.first + 1

    def _scene_frame(self, clip_frame: int) -> int:
        return clip_frame + int(self.clip.frame_start) - 1

    def _timed(self, label: str, fn: Callable[[], None], clip_frame: Optional[int] = None) -> None:
        t = time.perf_counter()
        with self._editor() as ctx, bpy.context.temp_override(**ctx):
            if clip_frame is not None:
                # the Clip Editor's operators work on its own frame (``sc->user.framenr``),
                # which only a redraw syncs with the scene's: none happens in background mode
                self.scene.frame_set(self._scene_frame(clip_frame))
                ctx["space_data"].clip_user.frame_current = self._scene_frame(clip_frame)
            fn()
        self.steps.append((label, time.perf_counter() - t))

    def _editor(self):
        return clip_editor(self.clip)

    def plan(self) -> List[Tuple[str, Callable[[], None]]]:
        """``(label, function)`` for each step, in order."""
        return [("Detecting features", self.detect), ("Tracking forwards", lambda: self.track(False)),
                ("Tracking backwards", lambda: self.track(True)), ("Cleaning tracks", self.clean),
                ("Solving camera", self.solve)]

    def run(self) -> SolveResult:
        """All steps, blocking; returns the result or raises :class:`SolveError`."""
        for _, fn in self.plan():
            fn()
        return self.result

    # -- steps ---------------------------------------------------------------------------
    def detect(self) -> None:
        tracking = self.clip.tracking
        _apply_settings(self.clip, self.params)
        mid = (self.first + self.last) // 2
        self.mid = mid
        p = self.params
        found = [0]

        def run():
            if not self.keep_tracks and len(tracking.tracks):
                bpy.ops.clip.select_all(action="SELECT")
                bpy.ops.clip.delete_track(confirm=False)
            before = len(tracking.tracks)
            for threshold in (0.1, 0.03, 0.01, 0.003):
                bpy.ops.clip.select_all(action="DESELECT")
                bpy.ops.clip.detect_features(placement="FRAME", margin=p["detect_margin"],
                                             threshold=threshold, min_distance=p["min_distance"])
                found[0] = len(tracking.tracks) - before
                if found[0] >= 40 or threshold == 0.003:
                    break
                bpy.ops.clip.delete_track(confirm=False)  # the new (selected) ones: retry lower

        self._timed("detect", run, clip_frame=mid)
        if found[0] < 8:
            raise SolveError(f"camera solve failed: 0 frames solved, error nan px; {_FIX} "
                             f"(clip {self.clip.name!r}: only {found[0]} features found)")

    def track(self, backwards: bool) -> None:
        frame_start, frame_end = self.scene.frame_start, self.scene.frame_end
        self.scene.frame_start, self.scene.frame_end = self._scene_frame(self.first), self._scene_frame(self.last)

        def run():
            bpy.ops.clip.select_all(action="SELECT")
            bpy.ops.clip.track_markers(backwards=backwards, sequence=True)

        try:
            self._timed("track backwards" if backwards else "track forwards", run, clip_frame=self.mid)
        finally:
            self.scene.frame_start, self.scene.frame_end = frame_start, frame_end

    def clean(self) -> None:
        frames = min(MIN_TRACK_FRAMES, max(3, self.tracked_frames // 3))

        def run():
            bpy.ops.clip.select_all(action="SELECT")
            bpy.ops.clip.clean_tracks(frames=frames, error=0.0, action="DELETE_TRACK")

        self._timed("clean", run)

    def _solve_once(self, refine: bool) -> Tuple[bool, float, int]:
        tracking = self.clip.tracking
        tracking.settings.refine_intrinsics_focal_length = refine
        obj = tracking.objects[0]
        obj.keyframe_a, obj.keyframe_b = self.first, self.last  # replaced by keyframe selection

        def run():
            bpy.ops.clip.solve_camera()

        self._timed("solve (refine focal)" if refine else "solve", run)
        rec = tracking.reconstruction
        return rec.is_valid, float(rec.average_error) if rec.is_valid else float("nan"), len(rec.cameras)

    def _lens_search(self):
        """The focal-length search (``backend.multiview.sfm.solve_tracks``) on the clip's
        tracks; distortion set on the clip is not undone here (the search assumes none)."""
        from ..backend.multiview.sfm import solve_tracks, subsample_frames

        t = time.perf_counter()
        report = solve_tracks(subsample_frames(clip_tracks(self.clip, self.first, self.last), LENS_SEARCH_FRAMES))
        self.steps.append(("focal search", time.perf_counter() - t))
        return report

    def solve(self) -> None:
        tracking = self.clip.tracking
        cam = tracking.camera
        valid, err, n = self._solve_once(False)
        if valid and err > 0.5 * self.max_error:
            # drop tracks that disagree with the solve (3x the average error) and re-solve
            with self._editor() as ctx, bpy.context.temp_override(**ctx):
                bpy.ops.clip.select_all(action="SELECT")
                bpy.ops.clip.clean_tracks(frames=0, error=max(1.0, 3.0 * err), action="DELETE_TRACK")
            valid, err, n = self._solve_once(False)
        refined, note, check = False, "", None
        if self.refine_focal and valid:
            # libmv's own refinement keeps whatever lens it starts from on short shots (the
            # reprojection error is flat in the focal length); the focal comes from our
            # search on Blender's tracks instead, with its profile deciding whether the clip
            # determines it at all (backend.multiview.sfm)
            f0 = cam.focal_length_pixels
            report = self._lens_search()
            check = report.summary()
            if report.ok:
                cam.focal_length_pixels = report.focal_px
                v2, e2, n2 = self._solve_once(False)
                if v2 and n2 >= n:
                    valid, err, n, refined = v2, e2, n2, True
                else:
                    cam.focal_length_pixels = f0
                    valid, err, n = self._solve_once(False)
            elif sfm_lens_reason(report) and report.suggested_focal_px:
                # the clip does not pin the lens, but this focal was verified to solve (the
                # CLI suggests the same): use it rather than the clip's unrelated default, and
                # say so (panel, cameras file)
                bundles0 = sum(1 for t in tracking.tracks if t.has_bundle)
                cam.focal_length_pixels = float(report.suggested_focal_px)
                v2, e2, n2 = self._solve_once(False)
                # only when libmv reconstructs as much with it (phone_office: 28 points instead
                # of about 87 with 278 px, so the clip's lens is kept there)
                if v2 and n2 >= n and sum(1 for t in tracking.tracks if t.has_bundle) >= bundles0:
                    valid, err, n = v2, e2, n2
                    note = f"{report.reason} (used {report.suggested_focal_px:.0f} px: not determined by the clip)"
                else:
                    cam.focal_length_pixels = f0
                    valid, err, n = self._solve_once(False)
                    note = f"{report.reason} (kept {f0:.0f} px)"
            else:
                note = (f"{report.reason} (kept {f0:.0f} px)" if sfm_lens_reason(report)
                        else f"focal length not solved: {report.reason}; kept {f0:.0f} px ({SET_FOCAL_HINT})")
        tracking.settings.refine_intrinsics_focal_length = False
        self.clip[LENS_NOTE_KEY] = note
        bundles = sum(1 for t in tracking.tracks if t.has_bundle)
        self.result = SolveResult(self.clip.name, err, n, self.tracked_frames, len(tracking.tracks), bundles,
                                  float(cam.focal_length_pixels), refined, time.perf_counter() - self._t0,
                                  list(self.steps), note, check)
        if not valid:
            raise SolveError(f"camera solve failed: 0 frames solved, error nan px; {_FIX} "
                             f"(clip {self.clip.name!r}: libmv found no reconstruction)")
        check_solve(self.clip, max_error=self.max_error, min_frames=self.min_frames,
                    expected_frames=self.tracked_frames)


def sfm_lens_reason(report) -> bool:
    """True when ``report`` failed on the lens (not on parallax, error or frames)."""
    from ..backend.multiview.sfm import SET_FOCAL

    return SET_FOCAL in report.reason


def track_and_solve(scene, clip, **kw) -> SolveResult:
    """Run Blender's tracker and solver on ``clip`` (blocking); see :class:`TrackSolve`.

    Raises:
        SolveError: ``"camera solve failed: N frames solved, error E px; track by hand or
            decompose without it"`` (plus the clip and the thresholds).
    """
    frame = scene.frame_current
    try:
        return TrackSolve(scene, clip, **kw).run()
    finally:
        scene.frame_set(frame)


def footage_clip(scene, context=None):
    """The clip Track & Solve works on: the Clip Editor's (when called from one), else
    the compositor's footage node's, else ``scene.active_clip``, else the only clip."""
    space = getattr(context, "space_data", None) if context is not None else None
    if space is not None and getattr(space, "type", "") == "CLIP_EDITOR" and space.clip is not None:
        return space.clip
    from . import compositor

    tree = compositor.find_tree(scene)
    node = compositor.find_node(tree, compositor.ROLE_SOURCE) if tree is not None else None
    if node is not None and node.clip is not None:
        return node.clip
    if scene.active_clip is not None:
        return scene.active_clip
    return bpy.data.movieclips[0] if len(bpy.data.movieclips) == 1 else None
