"""Export Scene G-Buffers: exact G-buffers of the current scene, rendered with Cycles.

The UI and headless face of :func:`..addon.scene.export.export_scene_gbuffers` (issue 4):
the scene's frame range (or the current frame) is rendered into contract EXR frames
``gbuffer_NNNN.exr`` (numbered by scene frame) in an output folder, by default
``//gbuffers_<scene>/`` next to the .blend, listed in its ``manifest.json``
(:class:`..addon.scene.export.ExportManifest`, rewritten after every frame).

One :class:`.jobs.JobController` drives it, so the operator, the sidebar's Status box,
the status bar and the headless command share one code path:

1. :class:`ExportStep` prepares the scene once (:class:`..addon.scene.export.GBufferRenderer`:
   Cycles, passes, shader AOVs ...) and renders **one frame per tick**; the modal
   operator ticks it from a timer, so **Esc cancels between frames**. Everything the
   renderer changed is restored when the step ends, fails or is cancelled, so the .blend
   is left as it was (finished frames stay on disk).
2. Optionally (``load_compositor``) the frames are wired into the compositor exactly as
   Decompose does (:func:`..addon.compositor.setup_gbuffer`), ready for material edits and
   Restyle.

While the modal operator runs, keyboard and mouse input is swallowed (except Esc): the
scene is in its temporary export state between frames, and saving or undoing then
would store or corrupt that state.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import bpy

from ..addon import compositor
from ..addon import worker as worker_mod
from ..addon.scene.export import ExportError, ExportManifest, GBufferRenderer
from ..addon.scene.passes import PassError
from ..backend import contract
from .jobs import CallStep, JobController, JobFailed, ModalJobMixin, Step, idle_settings

#: ``estimator`` header value of frames written by the scene export
SCENE_ESTIMATOR = "scene"


def default_output_dir(scene) -> str:
    """``//gbuffers_<scene name>/`` (the name made file-system safe)."""
    return f"//gbuffers_{bpy.path.clean_name(scene.name)}/"


def scene_frames(scene, current_only: bool = False) -> List[int]:
    """The scene's frame range, or just the current frame."""
    if current_only:
        return [int(scene.frame_current)]
    return list(range(scene.frame_start, scene.frame_end + 1))


def _foreign_frames(out_dir: Path) -> Optional[str]:
    """A reason when ``out_dir`` holds ``gbuffer_NNNN.exr`` files that a scene export did
    not write (e.g. a Decompose result, or unreadable files); ``None`` otherwise."""
    if not out_dir.is_dir():
        return None
    for path in contract.list_frames(out_dir).values():
        try:
            est = contract.read_meta(path).get("estimator")
        except contract.ContractError:  # anything unreadable is not ours to replace
            return f"{path.name} is not a readable G-buffer frame"
        if est != SCENE_ESTIMATOR:
            return f"it holds G-buffers estimated by {est!r} ({path.name}), e.g. a Decompose result"
    return None


def check_export(scene, directory: str, frames: Sequence[int], *, blend_path: Optional[str] = None) -> Path:
    """Validate an export before anything is touched; returns the absolute output folder.

    Args:
        directory: output folder; ``//`` is relative to the .blend; empty means
            :func:`default_output_dir`.
        frames: scene frame numbers to export.
        blend_path: the .blend's path (default ``bpy.data.filepath``; ``""`` = unsaved).

    Raises:
        JobFailed: a one-line reason for the user (no camera, Cycles missing, a relative
            folder in an unsaved file, the folder is a file or holds other G-buffers,
            no or negative frames).
    """
    blend_path = bpy.data.filepath if blend_path is None else blend_path
    cam = scene.camera
    if cam is None or cam.type != "CAMERA":
        raise JobFailed(f"scene {scene.name!r} has no active camera; set one in Scene Properties > Camera")
    if not hasattr(scene, "cycles"):
        raise JobFailed("Cycles is not available; enable the Cycles add-on (scene export renders with Cycles)")
    frames = list(frames)
    if not frames:
        raise JobFailed("no frames to export (the frame range is empty)")
    if min(frames) < 0:
        raise JobFailed(f"cannot export negative frame {min(frames)}; use frames >= 0")
    directory = directory or default_output_dir(scene)
    if directory.startswith("//"):
        if not blend_path:
            raise JobFailed(f"output folder {directory!r} is relative to the .blend file, which is not "
                            "saved yet; save the file or choose an absolute folder")
        out = Path(os.path.dirname(blend_path)) / directory[2:]
    else:
        out = Path(bpy.path.abspath(directory))
    out = Path(os.path.abspath(out))
    if out.exists() and not out.is_dir():
        raise JobFailed(f"output folder {out} is a file; choose a folder")
    reason = _foreign_frames(out)
    if reason is not None:
        raise JobFailed(f"output folder {out} overlaps other data: {reason}; choose another folder")
    return out


class ExportStep(Step):
    """Render one scene frame per tick into contract frames (restores the scene at the end)."""

    label = "Rendering"

    def __init__(self, scene, out_dir: os.PathLike, frames: Sequence[int], *, samples: Optional[int] = None,
                 motion_blur_steps: int = 1, resolution=None, threads: Optional[int] = None,
                 on_frame: Optional[Callable[[int, int, int, Path], None]] = None):
        self.scene_name = scene.name
        self.out_dir = Path(out_dir)
        self.frames = [int(f) for f in frames]
        self.samples = samples
        self.motion_blur_steps = max(1, int(motion_blur_steps))
        self.resolution = resolution
        self.threads = threads
        self.on_frame = on_frame  # on_frame(frame, done, total, path) after each frame
        self.done = 0
        self.written: List[Path] = []
        self._renderer = None
        self._manifest = None
        self._progress = False
        self.t0 = None

    def start(self, ctl):
        scene = bpy.data.scenes[self.scene_name]
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise JobFailed(f"cannot create output folder {self.out_dir}: {e.strerror or e}") from e
        try:
            self._renderer = GBufferRenderer(scene, samples=self.samples, resolution=self.resolution,
                                             threads=self.threads).__enter__()
        except ExportError as e:
            raise JobFailed(str(e)) from e
        self._manifest = ExportManifest(self.out_dir, self._renderer, self.frames, self.motion_blur_steps)
        ctl.data["out_dir"] = self.out_dir
        self.t0 = time.monotonic()
        wm = getattr(bpy.context, "window_manager", None)
        if wm is not None and not bpy.app.background:
            wm.progress_begin(0, len(self.frames))
            self._progress = True

    def tick(self, ctl):
        fr = self.frames[self.done]
        path = contract.frame_path(self.out_dir, fr)
        try:
            frame = self._renderer.render_frame(fr, motion_blur_steps=self.motion_blur_steps)
            contract.write_frame(path, frame)
            self._manifest.add(fr, path, frame.meta)
        except (ExportError, contract.ContractError, PassError, RuntimeError, ValueError) as e:
            raise JobFailed(f"scene {self.scene_name!r} frame {fr}: {e}") from e
        except OSError as e:
            raise JobFailed(f"scene {self.scene_name!r} frame {fr}: cannot write {path}: "
                            f"{e.strerror or e}") from e
        self.done += 1
        self.written.append(path)
        if self._progress:
            bpy.context.window_manager.progress_update(self.done)
        if self.on_frame is not None:
            self.on_frame(fr, self.done, len(self.frames), path)
        if self.done < len(self.frames):
            return False
        self._close()
        return True

    def _close(self) -> None:
        if self._renderer is not None:
            renderer, self._renderer = self._renderer, None
            renderer.__exit__(None, None, None)
        if self._progress:
            self._progress = False
            bpy.context.window_manager.progress_end()

    def cancel(self, ctl):
        self._close()

    def progress(self):
        return self.done, len(self.frames)


def load_into_compositor(scene, out_dir: os.PathLike):
    """Wire the exported frames into the compositor like Decompose does (G-buffer Image
    node, "Material edits" frame, G-buffer output, Viewer); the Image node starts at the
    scene frame of the first file. Returns the Image node."""
    s = scene.gbuffer_editor
    node = compositor.setup_gbuffer(scene, out_dir, "Combined" if s.preview_pass == compositor.RESULT_PASS
                                    else s.preview_pass)
    node.frame_start = next(iter(contract.list_frames(out_dir)))  # files are numbered by scene frame
    s.gbuffer_dir = str(out_dir)
    return node


def export_job(scene, out_dir: os.PathLike, frames: Sequence[int], *, samples: Optional[int] = None,
               motion_blur_steps: int = 1, load: bool = False, resolution=None, threads=None,
               on_frame=None) -> JobController:
    """Controller exporting ``frames`` of ``scene`` to ``out_dir`` (then wiring the
    compositor when ``load``). Validate with :func:`check_export` first."""
    out_dir = Path(out_dir)
    step = ExportStep(scene, out_dir, frames, samples=samples, motion_blur_steps=motion_blur_steps,
                      resolution=resolution, threads=threads, on_frame=on_frame)
    steps: List[Step] = [step]
    if load:
        steps.append(CallStep("Loading into the compositor", lambda ctl: load_into_compositor(ctl.scene, out_dir)))

    def _done(ctl):
        ctl.data["written"] = list(step.written)

    steps.append(CallStep("Finishing", _done))
    return JobController(scene, "Export Scene", steps)


class GBUFFER_OT_export_scene(ModalJobMixin, bpy.types.Operator):
    """Render exact G-buffers (Combined, Depth, Normal, Albedo, Metallic, Roughness) of this
    scene with Cycles into a folder of multilayer EXR frames (Esc cancels between frames).
    The .blend is left unchanged"""

    bl_idname = "gbuffer.export_scene"
    bl_label = "Export Scene G-Buffers"
    bl_options = {"REGISTER"}

    directory: bpy.props.StringProperty(
        name="Output Folder",
        subtype="DIR_PATH",
        default="",
        description="Folder for gbuffer_NNNN.exr (numbered by scene frame); empty: //gbuffers_<scene>/",
    )
    current_frame_only: bpy.props.BoolProperty(
        name="Current Frame Only", default=False, description="Export only the current frame, not the frame range"
    )
    motion_blur_steps: bpy.props.IntProperty(
        name="Motion Blur Sub-frames",
        default=1,
        min=1,
        soft_max=16,
        max=256,
        description="Sub-frames over the scene's shutter averaged into Combined (1: no motion blur); "
        "depth, normals and materials stay exact (centre sub-frame)",
    )
    samples: bpy.props.IntProperty(
        name="Samples", default=0, min=0, soft_max=4096, description="Cycles samples (0: the scene's own setting)"
    )
    load_compositor: bpy.props.BoolProperty(
        name="Load into Compositor",
        default=False,
        description="Afterwards wire the frames into this scene's compositor as Decompose does, to edit "
        "materials and Restyle (replaces the compositor's output link)",
    )

    @classmethod
    def poll(cls, context):
        if idle_settings(cls, context) is None:
            return False
        if context.scene.camera is None:
            cls.poll_message_set("The scene has no camera")
            return False
        return True

    def build_job(self, context) -> JobController:
        scene = context.scene
        frames = scene_frames(scene, self.current_frame_only)
        out = check_export(scene, self.directory, frames)
        return export_job(scene, out, frames, samples=self.samples or None,
                          motion_blur_steps=self.motion_blur_steps, load=self.load_compositor)

    def _finish(self, job):
        if job.state == worker_mod.DONE:
            n = len(job.data.get("written", []))
            job.message = f"Export Scene: {n} frame{'s' * (n != 1)} written to {job.data.get('out_dir')}"
            job.scene.gbuffer_editor.status = job.message
        return ModalJobMixin._finish(self, job)

    def modal(self, context, event):
        result = ModalJobMixin.modal(self, context, event)
        if result == {"PASS_THROUGH"} and not event.type.startswith("TIMER"):
            # the scene is in its temporary export state: no edits, saves or undo now
            return {"RUNNING_MODAL"}
        return result


classes = (GBUFFER_OT_export_scene,)


# -- headless: blender -b scene.blend --command gbuffer_editor export-scene ... -----------
def _parse_frames(spec: str) -> List[int]:
    a, sep, b = spec.strip().partition("-")
    try:
        first = int(a)
        last = int(b) if sep else first
    except ValueError:
        raise ValueError(f"--frames {spec}: expected a frame number N or a range A-B, e.g. 1-24") from None
    if last < first:
        raise ValueError(f"--frames {spec}: the end is before the start")
    return list(range(first, last + 1))


def _parse_res(spec: str) -> tuple:
    w, _, h = spec.lower().partition("x")
    try:
        res = (int(w), int(h))
    except ValueError:
        raise ValueError(f"--res {spec}: expected WIDTHxHEIGHT in pixels, e.g. 1920x1080") from None
    if min(res) < 1:
        raise ValueError(f"--res {spec}: width and height must be >= 1")
    return res


_EVENTS = None  # the JSON event stream while run_cli runs (the real stdout)


def _emit(**obj) -> None:
    import json
    import sys

    stream = _EVENTS or sys.stdout
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


def _fail(message: str, frame=None, code: int = 1) -> int:
    import sys

    _emit(event="error", message=message, frame=frame, file=None)
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return code


def run_cli(argv: List[str]) -> int:
    """``export-scene`` of the headless command (:mod:`..operators.cli_command`); returns the exit code."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="blender -b FILE.blend --command gbuffer_editor export-scene",
                                description="Export exact G-buffers of a Blender scene (Cycles).")
    p.add_argument("--out", required=True, help="output folder (// = next to the .blend)")
    p.add_argument("--frames", default=None, help="A-B or N (default: the scene's frame range)")
    p.add_argument("--motion-blur", type=int, default=1, metavar="N",
                   help="sub-frames averaged into Combined (default 1: none)")
    p.add_argument("--samples", type=int, default=None, metavar="S", help="Cycles samples (default: the scene's)")
    p.add_argument("--res", default=None, metavar="WxH", help="render size (default: the scene's)")
    p.add_argument("--scene", default=None, help="scene name (default: the active scene)")
    p.add_argument("--setup", action="store_true", help="wire the frames into the compositor")
    p.add_argument("--save", default=None, metavar="FILE.blend", help="save the .blend afterwards")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:  # argparse printed the problem (or --help)
        return int(e.code or 0)
    try:
        if a.motion_blur < 1:
            raise ValueError("--motion-blur must be >= 1")
        if a.samples is not None and a.samples < 1:
            raise ValueError("--samples must be >= 1")
        res = _parse_res(a.res) if a.res else None
        if a.scene is not None and a.scene not in bpy.data.scenes:
            raise ValueError(f"--scene {a.scene!r}: no such scene (have: {', '.join(bpy.data.scenes.keys())})")
        scene = bpy.data.scenes[a.scene] if a.scene else bpy.context.scene
        frames = _parse_frames(a.frames) if a.frames else scene_frames(scene)
    except ValueError as e:
        print(f"export-scene: {e}", file=sys.stderr)
        return 2
    from ..backend.cli import json_stdout

    global _EVENTS
    # stdout carries only our JSON lines; Cycles' own messages go to stderr
    with json_stdout() as _EVENTS:
        try:
            return _export_cli(a, scene, frames, res)
        finally:
            _EVENTS = None


def _export_cli(a, scene, frames: List[int], res) -> int:
    import sys

    try:
        out = check_export(scene, a.out if a.out.startswith("//") else os.path.abspath(a.out), frames)
    except JobFailed as e:
        return _fail(str(e))
    t0 = time.monotonic()

    def on_frame(fr, done, total, path):
        el = time.monotonic() - t0
        fps = done / el if el > 0 else 0.0
        _emit(event="progress", frame=fr, done=done, total=total, fps=round(fps, 4),
              eta_s=round((total - done) / fps, 2) if fps > 0 else None, file=str(path))

    ctl = export_job(scene, out, frames, samples=a.samples, motion_blur_steps=a.motion_blur,
                     load=a.setup, resolution=res, on_frame=on_frame)
    _emit(event="start", total=len(frames), out=str(out), scene=scene.name, frames=[frames[0], frames[-1]])
    step = ctl.steps[0]
    try:
        ctl.run_blocking()
    except KeyboardInterrupt:
        ctl.cancel()
        _emit(event="cancelled", written=step.done, frame=None)
        sys.stderr.write(f"cancelled; {step.done} complete frames kept in {out}\n")
        return 130
    if ctl.state != worker_mod.DONE:
        failed = step.frames[step.done] if step.done < len(step.frames) else None
        return _fail(ctl.message, frame=failed)
    if a.save:
        try:
            bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(a.save), check_existing=False)
        except RuntimeError as e:
            return _fail(f"cannot save {a.save}: {e}")
    _emit(event="done", done=step.done, written=len(step.written), total=len(frames),
          elapsed_s=round(time.monotonic() - t0, 3), out=str(out))
    return 0
