"""Restyle: bake the compositor's material edits into G-buffers, re-render them with a prompt.

Steps (one :class:`.jobs.JobController`):

1. :class:`EditsStep` renders the compositor one frame per tick with a temporary File
   Output node holding only the changed passes, then completes each file from its source
   G-buffer and writes it as a contract frame in
   ``restyle_NNN/edited_gbuffer/`` (same frame numbers as the source G-buffers, header
   metadata copied from them; Blender 5.0's multi-part layout and 4.x's single part are
   both read by :func:`..addon.compat.read_gbuffer_frame`), brought back inside the
   contract by :func:`backend.contract.sanitize`.
2. The backend worker: ``python -m backend restyle edited_gbuffer --prompt ... --out
   restyle_NNN/result --renderer NAME``.
3. The result sequence is loaded into an Image node feeding the compositor output.

Each run gets a new ``restyle_NNN`` folder, so earlier results are never overwritten.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import List, Optional

import bpy

from ..addon import compat, compositor
from ..backend import contract
from . import backend_args
from .jobs import CallStep, JobController, JobFailed, ModalJobMixin, Step, WorkerStep, idle_settings

EDITED_DIR = "edited_gbuffer"
RESULT_DIR = "result"


class EditsStep(Step):
    """Render the compositor's edited passes frame by frame into contract files.

    Only the passes the artist changed (:func:`..addon.compositor.changed_passes`) are
    rendered, by a temporary File Output node; each frame's file is then completed from
    its source G-buffer (the unchanged passes and the header), the changed passes are
    brought back inside the contract (:func:`backend.contract.sanitize`) and it is
    written. All on Blender's main thread: a Python thread running beside Blender's
    render crashed Blender (segmentation fault in 2 of 4 runs of the test suite).
    """

    label = "Applying material edits"
    BAKE_NODE = "G-buffer bake (temporary)"
    CANVAS = "Canvas"

    def __init__(self, edited_dir: os.PathLike, frames: Optional[List[int]] = None):
        self.edited_dir = Path(edited_dir)
        self.render_dir = self.edited_dir / "_render"
        self.frames = frames  # scene frames; None = all G-buffer frames in the scene range
        self.i = 0
        self._saved = None
        self.bake_node = None
        self.changed: List[str] = []

    def start(self, ctl):
        scene = ctl.scene
        tree = compat.compositor_tree(scene, create=False)
        if tree is None:
            raise JobFailed("the scene has no compositor; run Decompose first")
        try:
            self.output = compositor.gbuffer_output(tree)
            start, count = compositor.gbuffer_range(tree)
            self.source_dir = compositor.gbuffer_folder(tree)
        except LookupError as e:
            raise JobFailed(str(e)) from None
        image_node = compositor.find_node(tree, compositor.ROLE_GBUFFER)
        self.offset = image_node.frame_offset
        self.source_frames = contract.list_frames(self.source_dir)
        if not self.source_frames:
            raise JobFailed(f"no G-buffer frames in {self.source_dir}")
        if self.frames is None:
            lo, hi = max(start, scene.frame_start), min(start + count - 1, scene.frame_end)
            self.frames = list(range(lo, hi + 1))
        self.frames = [f for f in self.frames if self.file_number(f, start) in self.source_frames]
        if not self.frames:
            raise JobFailed("no G-buffer frame lies in the scene's frame range")
        self.start_frame = start
        w, h = contract.frame_size(next(iter(self.source_frames.values())))  # header only
        self.render_dir.mkdir(parents=True, exist_ok=True)
        # a caller that asks for the bake with nothing changed gets every pass re-rendered
        self.changed = compositor.changed_passes(tree) or list(compositor.PASS_TYPES)
        r = scene.render
        self._saved = (r.resolution_x, r.resolution_y, r.resolution_percentage, scene.frame_current,
                       self.output.mute, r.use_compositing, r.use_sequencer)
        r.resolution_x, r.resolution_y, r.resolution_percentage = w, h, 100
        # render the compositor only: with VSE strips and use_sequencer, Blender would
        # render the sequencer and skip the compositor
        r.use_compositing, r.use_sequencer = True, False
        self.output.mute = True
        self.tree = tree
        self.bake_node = self._bake_node(tree)
        # The edits come from the G-buffer Image node only. An unmuted Render Layers node
        # anywhere in the tree (the default compositor, or a scene-export project) makes
        # every bake frame re-render the 3D scene with its engine: mute them meanwhile.
        self._muted_layers = [(n, n.mute) for n in tree.nodes if n.bl_idname == "CompositorNodeRLayers"]
        for n, _ in self._muted_layers:
            n.mute = True

    def _bake_node(self, tree):
        """A temporary File Output node writing only the changed passes, each taken from
        what feeds the G-buffer output node's input of that pass (else the pass's ``out``
        reroute)."""
        # an edit may be a constant (a Value node) with no size of its own: a source pass
        # written first gives the output its canvas (the frame's size); it is never read
        canvas_src = compositor.image_output(compositor.find_node(tree, compositor.ROLE_GBUFFER), "Depth")
        items = [(self.CANVAS, "VALUE")] if canvas_src is not None else []
        node = compat.new_multilayer_file_output(
            tree, items + [(p, compositor.PASS_TYPES[p]) for p in self.changed], name=self.BAKE_NODE)
        if hasattr(node, "save_as_render"):
            node.save_as_render = False
        node.location = (self.output.location.x, self.output.location.y - 300)
        ours, theirs = compat.file_output_inputs(node), compat.file_output_inputs(self.output)
        if canvas_src is not None:
            tree.links.new(canvas_src, ours[self.CANVAS])
        for p in self.changed:
            src = theirs[p].links[0].from_socket if p in theirs and theirs[p].is_linked \
                else compositor.pass_socket(tree, p)
            if src is not None:
                tree.links.new(src, ours[p])
        compat.set_file_output_path(node, str(self.render_dir), "gbuffer_####")
        return node

    def file_number(self, scene_frame: int, start: Optional[int] = None) -> int:
        """Source file number the G-buffer Image node shows at ``scene_frame``."""
        start = self.start_frame if start is None else start
        return scene_frame - start + 1 + self.offset

    def tick(self, ctl):
        scene = ctl.scene
        f = self.frames[self.i]
        scene.frame_set(f)
        with bpy.context.temp_override(scene=scene):
            bpy.ops.render.render(write_still=False, scene=scene.name)
        rendered = self.render_dir / f"gbuffer_{f:04d}.exr"
        if not rendered.exists():
            raise JobFailed(f"the compositor wrote no file for frame {f} (expected {rendered})")
        self._finish_frame(rendered, self.file_number(f), f)
        self.i += 1
        if self.i < len(self.frames):
            return False
        self._restore(ctl)
        manifest = contract.read_manifest(self.source_dir)
        manifest.update(edited_from=str(self.source_dir), frames=len(self.frames),
                        edited_passes=list(self.changed))
        contract.write_manifest(self.edited_dir, manifest)
        shutil.rmtree(self.render_dir, ignore_errors=True)
        return True

    def _finish_frame(self, rendered: Path, num: int, f: int) -> None:
        """The source frame with the rendered passes put in, sanitised, written as
        ``edited_dir/gbuffer_NNNN.exr``."""
        try:
            edited = contract.read_passes(rendered, self.changed)
            frame = contract.read_frame(self.source_frames[num])
        except contract.ContractError as e:
            raise JobFailed(f"frame {f}: {e}") from None
        for name, arr in edited.items():
            setattr(frame, name, arr)
        contract.sanitize(frame, passes=list(edited))  # the source's own passes are in the contract
        frame.meta = dict(frame.meta, edited=True)
        contract.write_frame(contract.frame_path(self.edited_dir, num), frame, validate=False)
        rendered.unlink()

    def _restore(self, ctl):
        if self.bake_node is not None:
            with contextlib.suppress(ReferenceError, RuntimeError):
                self.tree.nodes.remove(self.bake_node)
            self.bake_node = None
        if self._saved is None:
            return
        scene = ctl.scene
        r = scene.render
        rx, ry, pct, cur, mute, use_comp, use_seq = self._saved
        r.resolution_x, r.resolution_y, r.resolution_percentage = rx, ry, pct
        r.use_compositing, r.use_sequencer = use_comp, use_seq
        self.output.mute = mute
        for n, was in getattr(self, "_muted_layers", ()):
            try:
                n.mute = was
            except ReferenceError:  # node deleted meanwhile
                pass
        self._muted_layers = []
        scene.frame_set(cur)
        self._saved = None

    def cancel(self, ctl):
        self._restore(ctl)
        shutil.rmtree(self.render_dir, ignore_errors=True)

    def progress(self):
        return self.i, len(self.frames or ())


def check_prompt(prompt: str, renderer: Optional[str] = None) -> None:
    """Refuse a prompt the renderer cannot understand, before anything is written.

    The same parse the backend job makes (:func:`..backend.renderers.read_prompt`): the
    embedded renderer (the default) understands a closed vocabulary; diffusion renderers
    take free text. An unknown renderer name is left to the worker to report.

    Raises:
        ValueError: (``PromptError``) naming the unknown words and the vocabulary.
    """
    from ..backend.renderers import read_prompt

    try:
        read_prompt(prompt, renderer or "embedded")
    except KeyError:
        pass


def restyle_job(
    scene,
    result_dir: os.PathLike,
    *,
    prompt: str,
    renderer: Optional[str] = None,
    extra_args: Optional[List[str]] = None,
    edited_dir: Optional[os.PathLike] = None,
    gbuffer_dir: Optional[os.PathLike] = None,
    load: bool = True,
    prefs=None,
) -> JobController:
    """Controller for a full Restyle writing its frames into ``result_dir``.

    Args:
        edited_dir: when given, the compositor's material edits are rendered into this
            folder first (needs the G-buffer setup) and it is what the worker restyles;
            otherwise ``gbuffer_dir`` goes to the worker unchanged.
        renderer: backend renderer name (``None``: the backend's default).
        extra_args: further backend CLI arguments (``--frames``, ``--seed``, ...).
        load: load the result into the compositor when done.
    """
    check_prompt(prompt, renderer or _take_renderer(extra_args))
    result_dir = Path(result_dir)
    steps: List[Step] = []
    extra = list(extra_args or [])
    if edited_dir is not None:
        steps.append(EditsStep(edited_dir))
        source = Path(edited_dir)
        reference = gbuffer_dir or scene.gbuffer_editor.gbuffer_dir
        if reference:
            # shading is recovered against the unedited albedo, so albedo edits act fully
            extra += ["--reference", str(Path(bpy.path.abspath(str(reference))))]
    elif gbuffer_dir is not None:
        source = Path(gbuffer_dir)
    else:
        raise ValueError("restyle needs edited_dir or gbuffer_dir")
    # restyle_NNN/restyle.log next to result/ (operator), else inside the --out folder (CLI)
    log = (result_dir.parent if result_dir.name == RESULT_DIR else result_dir) / "restyle.log"
    notes: List[str] = []
    if scene.gbuffer_editor.use_scene_lights:  # issue 39: Blender's lights relight the plate
        # the unedited frames carry the headers (camera); the edited ones do not exist yet
        unedited = gbuffer_dir or scene.gbuffer_editor.gbuffer_dir or compositor.gbuffer_folder(
            compositor.find_tree(scene))
        extra += ["--lights", str(write_scene_lights(scene, Path(bpy.path.abspath(str(unedited))),
                                                     result_dir.parent / "lights.json", notes))]
    if renderer:
        extra = ["--renderer", renderer] + extra
    request = backend_args.request_from_cli("restyle", [source, "--prompt", prompt, "--out", result_dir, *extra],
                                            prefs)
    python, _ = backend_args.worker_python(prefs)
    steps.append(WorkerStep("Restyling", [python], log, env=backend_args.worker_environment(prefs), request=request))

    def _load(ctl):
        s = ctl.scene.gbuffer_editor
        s.result_dir = str(result_dir)
        if load:
            try:
                compositor.load_result(ctl.scene, result_dir)
            except FileNotFoundError as e:
                raise JobFailed(f"restyle wrote no frames: {e}; log: {log}") from e
            s.preview_pass = compositor.RESULT_PASS  # the Preview list says what the backdrop shows

    steps.append(CallStep("Loading result", _load))
    ctl = JobController(scene, "Restyle", steps)
    if notes:  # the lights taken (status line), then the skipped ones as warnings
        ctl.summary, ctl.notes[:0] = f" ({notes[0]})", notes[1:]
    return ctl


def write_scene_lights(scene, gbuffer_dir: Path, path: Path, notes: Optional[List[str]] = None) -> Path:
    """Write the scene's lights (:func:`..addon.scene.lights.scene_lights`) for the
    G-buffer frames the scene's frame range shows, keyed by G-buffer file number, to
    ``path`` (in the new restyle_NNN folder: never over a user's file). World space when
    the G-buffer frames carry a camera (scene export, camera-tracked decompose), else
    relative to the scene camera. Lights that lit the plate (the scene export's
    ``settings.lights``) and Blender's startup default light are skipped.

    ``notes`` (when given) receives "Scene Lights: KEY, RIM" (the lights taken), then one
    warning per light skipped or not carried over.

    Raises:
        JobFailed: no light that renders, or neither a solved nor a scene camera.
    """
    import json

    from ..addon.scene.lights import scene_lights
    from ..backend import contract
    from ..backend.renderers.light_rig import frame_camera

    files = contract.list_frames(gbuffer_dir)
    tree = compositor.find_tree(scene)
    try:
        start, _count = compositor.gbuffer_range(tree)
        offset = compositor.find_node(tree, compositor.ROLE_GBUFFER).frame_offset
    except (LookupError, AttributeError, TypeError):
        start, offset = scene.frame_start, min(files) - 1 if files else 0
    frames = [f for f in range(scene.frame_start, scene.frame_end + 1) if f - start + 1 + offset in files]
    if not frames:
        raise JobFailed("Scene Lights: no G-buffer frame lies in the scene's frame range")
    try:
        solved = frame_camera(contract.read_meta(files[frames[0] - start + 1 + offset])) is not None
    except Exception:
        solved = False
    man = contract.read_manifest(gbuffer_dir)
    plate_lights = (man.get("settings") or {}).get("lights") or [] if man.get("job") == "scene_export" else []
    try:
        doc = scene_lights(scene, frames, space="world" if solved else "camera",
                           numbers=[f - start + 1 + offset for f in frames], plate_lights=plate_lights)
    except ValueError as e:
        raise JobFailed(f"Scene Lights: {e}") from e
    if notes is not None:
        notes.append("Scene Lights: " + ", ".join(doc["taken"]))
        notes.extend(f"Scene Lights: {w}" for w in doc["warnings"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def scene_frames_arg(scene, tree) -> List[str]:
    """``["--frames", "A-B"]``: the G-buffer file numbers the scene's frame range shows
    (what the edit bake would have rendered).

    Raises:
        JobFailed: no G-buffer frame lies in the scene's frame range.
    """
    start, count = compositor.gbuffer_range(tree)
    offset = compositor.find_node(tree, compositor.ROLE_GBUFFER).frame_offset
    lo, hi = max(start, scene.frame_start), min(start + count - 1, scene.frame_end)
    if hi < lo:
        raise JobFailed("no G-buffer frame lies in the scene's frame range")
    return backend_args.frames_arg(lo - start + 1 + offset, hi - start + 1 + offset)


def _take_renderer(args: Optional[List[str]]) -> Optional[str]:
    """The value of ``--renderer`` in backend CLI arguments, if any."""
    args = list(args or [])
    for i, a in enumerate(args):
        if a == "--renderer" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--renderer="):
            return a.split("=", 1)[1]
    return None


class GBUFFER_OT_restyle(ModalJobMixin, bpy.types.Operator):
    """Apply the compositor's material edits to the footage and re-render every frame with
    the prompt's look (empty prompt: the edits only; worker process; Esc cancels). Each run
    writes a new restyle_NNN folder"""

    bl_idname = "gbuffer.restyle"
    bl_label = "Restyle"
    bl_options = {"REGISTER"}

    @classmethod
    def poll(cls, context):
        s = idle_settings(cls, context)
        if s is None:
            return False
        tree = compositor.find_tree(context.scene)
        if tree is None or compositor.find_node(tree, compositor.ROLE_GBUFFER) is None:
            cls.poll_message_set("Decompose footage first (no G-buffers in the compositor)")
            return False
        # an empty prompt is allowed (issue 39): the footage with the material edits and
        # lights only, no look
        return True

    def build_job(self, context) -> JobController:
        scene = context.scene
        s = scene.gbuffer_editor
        missing = backend_args.not_ready("renderer", s.renderer)
        if missing:  # before the edit bake, before the restyle_NNN folder exists
            raise JobFailed(missing)
        check_prompt(s.prompt, s.renderer)  # before the restyle_NNN folder exists
        run_dir = backend_args.next_numbered_dir(backend_args.output_root(s), "restyle")
        tree = compositor.find_tree(scene)
        if compositor.edits_untouched(tree):
            # nothing edited: the source G-buffers are the edited ones; no per-frame bake
            return restyle_job(scene, run_dir / RESULT_DIR, prompt=s.prompt, renderer=s.renderer,
                               gbuffer_dir=compositor.gbuffer_folder(tree), extra_args=scene_frames_arg(scene, tree))
        return restyle_job(
            scene, run_dir / RESULT_DIR, prompt=s.prompt, renderer=s.renderer, edited_dir=run_dir / EDITED_DIR
        )


def _preset_items(self, context):
    from ..backend.renderers.prompt import PRESETS

    return _PRESET_ITEMS or _PRESET_ITEMS.extend(
        (p, p[:1].upper() + p[1:], f'Set the prompt to "{p}"') for p in PRESETS) or _PRESET_ITEMS


_PRESET_ITEMS: list = []  # referenced from Python while Blender shows them


class GBUFFER_OT_look_preset(bpy.types.Operator):
    """Set the Restyle prompt to a ready-made look"""

    bl_idname = "gbuffer.look_preset"
    bl_label = "Look Preset"
    bl_options = {"REGISTER", "UNDO"}

    preset: bpy.props.EnumProperty(name="Preset", items=_preset_items, description="Ready-made prompt")

    def execute(self, context):
        context.scene.gbuffer_editor.prompt = self.preset
        return {"FINISHED"}


classes = (GBUFFER_OT_restyle, GBUFFER_OT_look_preset)
