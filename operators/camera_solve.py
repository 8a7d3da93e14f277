"""Track & Solve (Blender's camera tracker on the footage), the solve's cameras for
Decompose, and the Z-combine setup.

* ``gbuffer.track_solve``: :class:`..addon.tracking.TrackSolve` step by step in a
  :class:`.jobs.JobController` (modal in the UI, blocking in background mode), then the
  scene camera follows the solve and the cameras JSON is written
  (:func:`default_cameras_path`, or the operator's ``cameras_path``).
* ``gbuffer.setup_zcombine``: :func:`..addon.compositor.setup_zcombine`.
* ``gbuffer.import_fused_mesh``: the PLY of ``decompose --mesh`` as a shadow catcher / holdout.
* :func:`decompose_cameras`: the ``--cameras PATH`` arguments Decompose adds when the
  footage's clip has a usable solve and "Use Camera Solve" is on.
* :func:`run_cli`: ``blender -b file.blend --command gbuffer_editor solve CLIP ...``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import bpy

from ..addon import compositor, tracking
from ..addon import worker as worker_mod
from . import backend_args
from .jobs import CallStep, JobController, JobFailed, ModalJobMixin, brief, idle_settings

#: suffix of the cameras JSON Decompose writes next to its output folder (not inside it:
#: the backend refuses an output folder that contains one of its inputs)
DECOMPOSE_CAMERAS = "_cameras.json"


def default_cameras_path(scene, clip) -> Path:
    """``<Output Folder>/cameras/<clip name>.json``."""
    name = bpy.path.clean_name(os.path.splitext(clip.name)[0]) or "clip"
    return backend_args.output_root(scene.gbuffer_editor) / "cameras" / f"{name}.json"


def track_solve_job(scene, clip, *, cameras_path: Optional[os.PathLike] = None, follow: bool = True,
                    **solve_kw) -> JobController:
    """Controller running Track & Solve on ``clip`` in steps; ``ctl.data["result"]`` gets
    the :class:`..addon.tracking.SolveResult`, ``ctl.data["cameras"]`` the JSON summary.

    Raises:
        tracking.SolveError: the scene's frame range shows too little of the clip.
    """
    frame = scene.frame_current
    ts = tracking.TrackSolve(scene, clip, **solve_kw)
    path = Path(cameras_path) if cameras_path else default_cameras_path(scene, clip)

    def guarded(fn):
        def run(ctl):
            try:
                fn()
            except tracking.SolveError as e:
                ctl.data["result"] = ts.result
                ctl.scene.frame_set(frame)
                raise JobFailed(str(e)) from None

        return run

    def finish(ctl):
        ctl.data["result"] = ts.result
        if follow:
            tracking.follow_solve(ctl.scene, clip)
        try:
            ctl.data["cameras"] = tracking.write_cameras_json(clip, path, scene=ctl.scene)
        except (tracking.SolveError, ValueError, OSError) as e:
            raise JobFailed(f"cannot write the cameras of clip {clip.name!r} to {path}: {e}") from None
        ctl.scene.gbuffer_editor.cameras_path = str(path)
        ctl.scene.frame_set(frame)

    steps = [CallStep(label, guarded(fn)) for label, fn in ts.plan()]
    steps.append(CallStep("Scene camera and cameras file", finish))
    return JobController(scene, "Track & Solve", steps)


def decompose_cameras(scene, out_dir: os.PathLike) -> List[str]:
    """``["--cameras", PATH]`` for Decompose when "Use Camera Solve" is on and the
    footage's clip has a valid solve: the solve is written next to the output folder
    (``decompose_001`` -> ``decompose_001_cameras.json``). Without a solve:
    ``["--camera", "auto"]`` when "Camera: Auto" is on (the backend solves the footage
    itself and falls back to single-image depth with a one-line note), else ``[]``.

    Raises:
        JobFailed: the solve exists but is not usable (error or frames over the
            thresholds, distortion we cannot undo): one line saying so.
    """
    s = scene.gbuffer_editor
    clip = tracking.footage_clip(scene)
    if not s.use_camera_solve or clip is None or not tracking.solve_status(clip).valid:
        return ["--camera", "auto"] if s.camera_auto else []
    out_dir = Path(out_dir)
    path = out_dir.parent / f"{out_dir.name}{DECOMPOSE_CAMERAS}"
    try:
        tracking.check_solve(clip)
        tracking.write_cameras_json(clip, path, scene=scene)
    except (tracking.SolveError, ValueError, OSError) as e:
        raise JobFailed(f"{e} (or turn off Use Camera Solve)") from None
    s.cameras_path = str(path)
    return ["--cameras", str(path)]


def after_decompose_with_solve(scene) -> list:
    """The scene camera follows the solve and the compositor gets the Z-combine setup.

    Returns the warnings of :func:`..addon.compositor.clear_camera_start` (the startup
    cube hidden, or objects around the camera's first position)."""
    clip = tracking.footage_clip(scene)
    if clip is None:
        return []
    tracking.follow_solve(scene, clip)
    compositor.setup_zcombine(scene)
    return compositor.clear_camera_start(scene)


class GBUFFER_OT_track_solve(ModalJobMixin, bpy.types.Operator):
    """Track the footage with Blender's camera tracker and solve the camera motion
    (detect features, track both ways, clean, solve, refine focal length). A good solve
    makes the scene camera follow it and gives Decompose measured depth"""

    bl_idname = "gbuffer.track_solve"
    bl_label = "Track & Solve"
    bl_options = {"REGISTER", "UNDO"}

    refine_focal: bpy.props.BoolProperty(
        name="Solve Focal Length", default=True,
        description="Search the focal length from the tracks and solve with it when the clip determines it; "
                    "otherwise keep the clip's focal length and say so (set it and solve again)",
    )
    cameras_path: bpy.props.StringProperty(
        name="Cameras File", subtype="FILE_PATH", default="", options={"SKIP_SAVE"},
        description="Where to write the cameras JSON (empty: <Output Folder>/cameras/<clip>.json)",
    )

    @classmethod
    def poll(cls, context):
        if idle_settings(cls, context) is None:
            return False
        if tracking.footage_clip(context.scene, context) is None:
            cls.poll_message_set("Import footage first (no movie clip)")
            return False
        return True

    def build_job(self, context) -> JobController:
        clip = tracking.footage_clip(context.scene, context)
        path = bpy.path.abspath(self.cameras_path) if self.cameras_path else None
        return track_solve_job(context.scene, clip, cameras_path=path, refine_focal=self.refine_focal)

    def _finish(self, job: JobController) -> set:
        result = job.data.get("result")
        if job.state == worker_mod.DONE and result is not None:
            message = f"{result.message()}; cameras: {job.data['cameras']['path']}"
            job.scene.gbuffer_editor.status = message
            self.report({"INFO"}, brief(message))
            return {"FINISHED"}
        return super()._finish(job)


class GBUFFER_OT_setup_zcombine(bpy.types.Operator):
    """Composite the 3D scene's render over the footage by depth (Z Combine): CG objects
    are hidden where the footage is nearer"""

    bl_idname = "gbuffer.setup_zcombine"
    bl_label = "Z-Combine with 3D Scene"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return idle_settings(cls, context) is not None

    def execute(self, context):
        try:
            compositor.setup_zcombine(context.scene)
        except LookupError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        for msg in compositor.clear_camera_start(context.scene):
            self.report({"WARNING"}, msg)
        return {"FINISHED"}


class GBUFFER_OT_import_fused_mesh(bpy.types.Operator):
    """Import the shot's fused surface (``decompose --cameras ... --mesh OUT.ply``), which is
    in the cameras' world, i.e. aligned with the Track & Solve camera, as a shadow catcher
    or holdout for CG"""

    bl_idname = "gbuffer.import_fused_mesh"
    bl_label = "Import Fused Mesh"
    bl_options = {"REGISTER", "UNDO"}

    filepath: bpy.props.StringProperty(subtype="FILE_PATH")
    filter_glob: bpy.props.StringProperty(default="*.ply", options={"HIDDEN"})
    role: bpy.props.EnumProperty(
        name="Role", default="SHADOW_CATCHER",
        items=[("SHADOW_CATCHER", "Shadow Catcher", "receives CG shadows, otherwise transparent (Cycles)"),
               ("HOLDOUT", "Holdout", "cuts CG objects behind the real surface out of the render")])

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        if not self.filepath or not os.path.isfile(bpy.path.abspath(self.filepath)):
            self.report({"ERROR"}, f"{self.filepath or '(no file)'}: not a file")
            return {"CANCELLED"}
        before = set(bpy.data.objects)
        bpy.ops.wm.ply_import(filepath=bpy.path.abspath(self.filepath))
        new = [ob for ob in bpy.data.objects if ob not in before]
        for ob in new:
            if self.role == "HOLDOUT":
                ob.is_holdout = True
            else:
                ob.is_shadow_catcher = True
            ob.display_type = "WIRE"
        self.report({"INFO"}, f"imported {len(new)} object(s) as {self.role.lower().replace('_', ' ')}")
        return {"FINISHED"}


classes = (GBUFFER_OT_track_solve, GBUFFER_OT_setup_zcombine, GBUFFER_OT_import_fused_mesh)


# ---- headless: blender -b file.blend --command gbuffer_editor solve CLIP ... ----------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="blender -b [file.blend] --command gbuffer_editor solve",
                                description="Track & Solve a movie clip with Blender's camera tracker")
    p.add_argument("clip", help="name of a Movie Clip in the .blend, or a movie / image file to import")
    p.add_argument("--cameras", default=None, help="cameras JSON to write (default: <output>/cameras/<clip>.json)")
    p.add_argument("--save", default=None, help="save the .blend afterwards (tracks, solve, scene camera)")
    p.add_argument("--frames", default=None, help="A-B: scene frames to track (default: the scene's range)")
    p.add_argument("--no-refine", action="store_true", help="keep the clip's focal length")
    p.add_argument("--max-error", type=float, default=tracking.MAX_SOLVE_ERROR_PX,
                   help="refuse a solve whose average error is above this (px)")
    return p


def _emit(obj: dict) -> None:
    from ..backend import events

    events.emit(obj)


def _fail(message: str, code: int) -> int:
    _emit({"event": "error", "message": message, "frame": None, "file": None})
    print(f"[gbuffer_editor] {message}", file=sys.stderr, flush=True)
    return code


def _find_clip(scene, name: str):
    clip = bpy.data.movieclips.get(name)
    if clip is not None:
        return clip
    path = Path(os.path.abspath(name))
    if not path.exists():
        return None
    from . import footage, import_footage

    return import_footage.apply_footage(scene, footage.probe(path))


def run_cli(argv: List[str]) -> int:
    """``solve`` subcommand; JSON lines on stdout (``start``, ``progress`` per step, then
    ``done`` with ``error_px``, ``frames``, ``cameras``, ``seconds``, or ``error``); exit 0
    done, 1 solve refused or failed, 2 bad arguments."""
    try:
        opts = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from ..backend.cli import json_stdout

    with json_stdout():
        return _run(opts)


def _run(opts) -> int:
    scene = bpy.context.scene
    try:
        clip = _find_clip(scene, opts.clip)
    except (OSError, ValueError) as e:
        return _fail(str(e), 2)
    if clip is None:
        return _fail(f"no movie clip or file {opts.clip!r}", 2)
    if opts.frames:
        try:
            a, b = (int(v) for v in opts.frames.split("-"))
        except ValueError:
            return _fail(f"--frames must be A-B, got {opts.frames!r}", 2)
        scene.frame_start, scene.frame_end = a, b
    t0 = time.perf_counter()
    try:
        ctl = track_solve_job(scene, clip, cameras_path=opts.cameras and os.path.abspath(opts.cameras),
                              refine_focal=not opts.no_refine, max_error=opts.max_error)
    except (tracking.SolveError, JobFailed) as e:
        return _fail(str(e), 1)
    _emit({"event": "start", "stage": "solve", "clip": clip.name, "total": len(ctl.steps)})
    done = [0]

    def on_tick(c):
        if c.index > done[0] or c.finished:
            n = len(c.steps) if c.state == worker_mod.DONE else c.index
            for k in range(done[0] + 1, n + 1):
                _emit({"event": "progress", "stage": "solve", "done": k, "total": len(c.steps),
                       "step": c.steps[k - 1].label})
            done[0] = n

    ctl.run_blocking(on_tick=on_tick)
    if ctl.state != worker_mod.DONE:
        return _fail(ctl.message, 1)
    if opts.save:
        try:
            bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(opts.save), check_existing=False)
        except RuntimeError as e:
            return _fail(f"cannot save {opts.save}: {e}", 1)
    r, cams = ctl.data["result"], ctl.data["cameras"]
    _emit({"event": "done", "stage": "solve", "clip": clip.name, "error_px": r.error, "frames": r.frames,
           "tracked_frames": r.tracked_frames, "points": r.bundles, "focal_px": r.focal_px,
           "refined_focal": r.refined_focal, "cameras": cams["path"], "units": cams["units"],
           "seconds": round(time.perf_counter() - t0, 3), "message": r.message()})
    print(f"[gbuffer_editor] {r.message()}; cameras: {cams['path']}", file=sys.stderr, flush=True)
    return 0
