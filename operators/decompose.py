"""Decompose: footage -> G-buffer EXR sequence, by the backend worker, then wire the compositor."""
from __future__ import annotations

import os
from pathlib import Path

import bpy

from ..addon import compositor, props
from ..backend import contract
from . import backend_args, camera_solve, footage
from .jobs import CallStep, JobController, JobFailed, ModalJobMixin, WorkerStep, idle_settings


def first_gbuffer_number(gbuffer_dir: os.PathLike) -> int:
    """Number of the first G-buffer file (= its source frame number), 1 when none."""
    frames = contract.list_frames(gbuffer_dir)
    return next(iter(frames)) if frames else 1


def source_first_number(scene) -> int:
    """Source number of the imported footage's first frame (1001 for a sequence numbered
    from 1001; 1 for a movie, or when nothing is imported)."""
    src = scene.gbuffer_editor.source_path
    if not src:
        return 1
    return footage.first_source_number(os.path.abspath(bpy.path.abspath(src)))


def footage_start(scene) -> int:
    """Scene frame showing the footage's first frame (the Movie Clip's start frame; else the
    first source number: 1, or 1001 for a sequence numbered from 1001)."""
    tree = compositor.find_tree(scene)
    node = compositor.find_node(tree, compositor.ROLE_SOURCE) if tree is not None else None
    if node is not None and node.clip is not None:
        return node.clip.frame_start
    return source_first_number(scene)


def wire_gbuffers(scene, gbuffer_dir: os.PathLike):
    """Point the compositor's G-buffer setup at ``gbuffer_dir`` (Image node starts at the
    scene frame of the first decomposed source frame) and remember the folder.

    G-buffer files carry source frame numbers; the scene frame showing source frame N is
    ``clip.frame_start + N - first source number`` (N itself for an imported sequence,
    whose clip starts at its first number; without footage, N)."""
    s = scene.gbuffer_editor
    # a new G-buffer folder shows its passes, not an earlier Restyle result
    shown = "Combined" if s.preview_pass == compositor.RESULT_PASS else s.preview_pass
    node = compositor.setup_gbuffer(scene, gbuffer_dir, shown)
    node.frame_start = footage_start(scene) + first_gbuffer_number(gbuffer_dir) - source_first_number(scene)
    s.gbuffer_dir = str(gbuffer_dir)
    return node


def decompose_job(scene, request, out_dir: os.PathLike, *, wire: bool = True, env=None,
                  solve: bool = False, prefs=None) -> JobController:
    """Controller running the decompose ``request`` (:class:`..backend.jobs.request.DecomposeRequest`)
    in a worker, then wiring the result; with ``solve`` (the request has ``cameras``), the
    scene camera then follows the camera solve and the compositor gets the Z-combine setup."""
    out_dir = Path(out_dir)
    python, _ = backend_args.worker_python(prefs)
    steps = [WorkerStep("Decomposing", [python], out_dir / "decompose.log", env=env, request=request)]
    if wire:

        def _wire(ctl):
            try:
                wire_gbuffers(ctl.scene, out_dir)
            except FileNotFoundError as e:
                raise JobFailed(f"decompose wrote no frames: {e}; log: {out_dir / 'decompose.log'}") from e

        steps.append(CallStep("Wiring compositor", _wire))
        if solve:
            steps.append(CallStep("Scene camera and Z-combine",
                                  lambda ctl: ctl.notes.extend(camera_solve.after_decompose_with_solve(ctl.scene))))
    return JobController(scene, "Decompose", steps)


class GBUFFER_OT_decompose(ModalJobMixin, bpy.types.Operator):
    """Estimate depth, normals, albedo, metallic and roughness for every frame in a worker
    process (Esc cancels), then load them into the compositor"""

    bl_idname = "gbuffer.decompose"
    bl_label = "Decompose"
    bl_options = {"REGISTER"}

    resume: bpy.props.BoolProperty(
        name="Resume",
        default=False,
        options={"SKIP_SAVE"},
        description="Continue the last (cancelled or failed) run in its folder: finished frames "
        "with the same settings are kept, the rest are computed (frames written there with "
        "other settings are replaced)",
    )

    @classmethod
    def poll(cls, context):
        s = idle_settings(cls, context)
        if s is None:
            return False
        if not s.source_path:
            cls.poll_message_set("Import footage first")
            return False
        return True

    def build_job(self, context) -> JobController:
        scene = context.scene
        s = scene.gbuffer_editor
        source = os.path.abspath(bpy.path.abspath(s.source_path))
        if not os.path.exists(source):
            raise JobFailed(f"footage not found: {source}")
        if s.use_scene_range:
            first, last = scene.frame_start, scene.frame_end
        else:
            first, last = s.frame_start, s.frame_end
        start, base = footage_start(scene), source_first_number(scene)
        # source frame numbers (a movie's 1..N, a sequence's file numbers)
        frames = (max(base, first - start + base), max(base, last - start + base))
        prefs = backend_args.preferences()
        estimator = backend_args.chosen_estimator(s, prefs)
        missing = backend_args.not_ready("estimator", estimator, prefs)
        if missing:  # refused before any folder exists or anything runs
            raise JobFailed(missing)
        s.last_estimator = estimator
        if self.resume and s.last_decompose_dir and os.path.isdir(s.last_decompose_dir):
            out_dir = Path(s.last_decompose_dir)
        else:
            out_dir = backend_args.next_numbered_dir(backend_args.output_root(s), "decompose")
        s.last_decompose_dir = str(out_dir)
        cameras = camera_solve.decompose_cameras(scene, out_dir)  # [] without a usable solve
        try:
            request = backend_args.decompose_request(
                footage.backend_input(source), out_dir, estimator=estimator,
                processing_resolution=props.processing_resolution(s),
                frames=frames, stabilize=s.stabilize,
                overwrite=self.resume,  # Resume continues in that folder even after a settings change
                cameras={("cameras" if k == "--cameras" else "camera"): v for k, v in zip(cameras[::2], cameras[1::2])},
                prefs=prefs)
        except ValueError as e:
            raise JobFailed(str(e)) from None
        return decompose_job(scene, request, out_dir, env=backend_args.worker_environment(prefs),
                             solve=request.cameras is not None, prefs=prefs)


class GBUFFER_OT_load_gbuffers(bpy.types.Operator):
    """Load an existing folder of G-buffer EXR frames into the compositor"""

    bl_idname = "gbuffer.load_gbuffers"
    bl_label = "Load G-Buffers"
    bl_options = {"REGISTER", "UNDO"}

    directory: bpy.props.StringProperty(subtype="DIR_PATH")

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        folder = Path(bpy.path.abspath(self.directory or context.scene.gbuffer_editor.gbuffer_dir))
        try:
            wire_gbuffers(context.scene, folder)
        except (FileNotFoundError, LookupError) as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        return {"FINISHED"}


classes = (GBUFFER_OT_decompose, GBUFFER_OT_load_gbuffers)
