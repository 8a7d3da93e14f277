"""The "G-Buffer" sidebar tab, in the Compositor and in the Movie Clip Editor.

The same panels (Footage, Decompose, Scene G-Buffers, Restyle, Status) are generated for both
editors; their drawing code is shared (``draw_*`` functions taking a layout).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import bpy

from ..addon import tracking
from ..operators.export_scene import default_output_dir

CATEGORY = "G-Buffer"


def settings(context):
    return context.scene.gbuffer_editor


def draw_footage(layout, context) -> None:
    s = settings(context)
    layout.operator("gbuffer.import_footage", icon="FILE_MOVIE")
    if s.source_path:
        layout.label(text=os.path.basename(bpy.path.abspath(s.source_path)), icon="SEQUENCE")
    layout.prop(s, "output_dir")
    draw_output_folder_note(layout, context)


def blend_saved() -> bool:
    return bool(bpy.data.filepath)


def draw_output_folder_note(layout, context) -> None:
    """Where results really go, when that is not what the Output Folder field shows: a
    relative ``//`` folder of an unsaved file resolves to a temporary folder."""
    from ..operators import backend_args

    s = settings(context)
    if (s.output_dir or "//").startswith("//") and not blend_saved():
        col = layout.column(align=True)
        col.label(text="Unsaved file: results go to", icon="ERROR")
        col.label(text=str(backend_args.output_root(s)), icon="BLANK1")
        col.label(text="Save the .blend or pick a folder to keep them", icon="BLANK1")


def resolution_note(estimator: str, requested: Optional[int]) -> str:
    """What the estimator will really compute at, for the line under the setting
    (``requested``: ``None`` = the estimator's own default, 0 = full size)."""
    from ..backend.estimators.base import resolution_of

    try:
        used = resolution_of(estimator, requested)
    except (KeyError, ImportError):
        return "Estimator unavailable"
    size = "full size" if used is None else f"{used} px"
    capped = " (its maximum)" if used is not None and requested and used < requested else ""
    return f"Computes at {size}{capped}; G-buffers at full size"


def missing_model_note(estimator: str, cache) -> str:
    """The sidebar's line when ``estimator`` needs a downloadable model (Preferences >
    Models) that is not in the models folder ``cache``; ``""`` when nothing is missing."""
    from ..addon.model_catalog import model_specs, model_status

    for spec in model_specs():
        if spec.key == estimator and spec.repo_id and not model_status(spec, cache)[0]:
            return "Model missing: Preferences > Add-ons > G-Buffer Editor > Models > Download"
    return ""


def prior_note(estimator: str, use_best_prior: bool, present: bool, online: bool) -> Tuple[str, bool]:
    """The sidebar's line about the depth prior: ``(text, offer_download)``.

    Args:
        estimator: the dropdown's choice; use_best_prior: the *Best Available Prior* box.
        present: whether :data:`backend.catalog.BEST_PRIOR` can run (model in the folder).
        online: whether downloads are allowed (Blender's online access on, offline mode off).

    Returns:
        ``("", False)`` when another estimator is chosen or the box is off; else which one
        will run, and whether to offer the download (missing, and online).
    """
    from ..backend.catalog import BEST_PRIOR_OFFER

    if estimator != "embedded" or not use_best_prior:
        return "", False
    if present:
        return "Depth: Depth Anything V2 Small; materials: embedded network", False
    if online:
        return BEST_PRIOR_OFFER, True
    return "Depth: embedded network (offline; Depth Anything V2 Small is not in the models folder)", False


def draw_prior(col, s) -> None:
    """Which prior Decompose will run, the download offer, and which one ran last."""
    from ..addon.preferences import downloads_allowed, get_preferences
    from ..backend.catalog import BEST_PRIOR
    from ..operators import backend_args

    if s.estimator == "embedded":
        col.prop(s, "use_best_prior")
    prefs = get_preferences()
    present = backend_args.not_ready("estimator", BEST_PRIOR, prefs) is None
    text, offer = prior_note(s.estimator, s.use_best_prior, present, downloads_allowed(prefs)[0])
    if text:
        col.label(text=text, icon="IMPORT" if offer else "INFO")
    if offer:
        col.operator("gbuffer.download_model", text="Download Depth Anything V2 Small",
                     icon="IMPORT").model = BEST_PRIOR
    if s.last_estimator:
        col.label(text=f"Last run: {s.last_estimator}", icon="CHECKMARK")


def draw_decompose(layout, context) -> None:
    s = settings(context)
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(s, "estimator")
    draw_prior(col, s)
    col.prop(s, "use_estimator_resolution")
    sub = col.column()
    sub.active = not s.use_estimator_resolution
    sub.prop(s, "processing_resolution")
    from ..addon.props import processing_resolution

    requested = processing_resolution(s)
    from ..operators.backend_args import chosen_estimator

    chosen = chosen_estimator(s)
    col.label(text=resolution_note(chosen, requested), icon="INFO")
    from ..addon.preferences import cache_dir

    missing = missing_model_note(chosen, cache_dir())
    if missing:
        col.label(text=missing, icon="ERROR")
    col.prop(s, "use_scene_range")
    if not s.use_scene_range:
        sub = col.column(align=True)
        sub.prop(s, "frame_start")
        sub.prop(s, "frame_end")
    col.prop(s, "stabilize")
    draw_camera(layout.box(), context)
    row = layout.row()
    row.scale_y = 1.4
    row.enabled = not s.is_running
    row.operator("gbuffer.decompose", icon="RENDERLAYERS")
    if not s.is_running and s.last_decompose_dir and s.last_decompose_dir != s.gbuffer_dir:
        # the last run did not finish: offer to continue it in its folder
        layout.operator("gbuffer.decompose", text="Resume", icon="FILE_REFRESH").resume = True
    layout.operator("gbuffer.load_gbuffers", icon="FILE_FOLDER")
    box = layout.box()
    box.label(text="Preview", icon="HIDE_OFF")
    box.prop(s, "preview_pass", text="Pass")
    draw_provenance(box, context)


def draw_provenance(layout, context) -> None:
    """Where each pass of the loaded G-buffers came from (measured / estimated / derived /
    default), so a default metallic is never taken for a measured one."""
    from ..addon import provenance

    s = settings(context)
    rows = provenance.lines(provenance.folder_provenance(bpy.path.abspath(s.gbuffer_dir)) if s.gbuffer_dir
                            else None)
    if not rows:
        return
    col = layout.column(align=True)
    col.label(text="Pass sources:")
    for text, icon, _kind in rows:
        col.label(text=text, icon=icon)
    if any(kind == "default" for _t, _i, kind in rows):
        col.label(text="Defaults are constants, not measurements", icon="BLANK1")


def draw_camera(layout, context) -> None:
    """Camera box of the Decompose panel: the clip's solve, Track & Solve, Use Camera Solve, Import
    Fused Mesh (the PLY of ``decompose --mesh``)."""
    s = settings(context)
    layout.label(text="Camera", icon="CAMERA_DATA")
    clip = tracking.footage_clip(context.scene, context)
    st = tracking.solve_status(clip)
    if clip is None:
        layout.label(text="No movie clip", icon="INFO")
    elif st.valid:
        good = st.error <= tracking.MAX_SOLVE_ERROR_PX
        layout.label(text=st.line(), icon="CHECKMARK" if good else "ERROR")
        layout.label(text=tracking.focal_line(clip), icon="CAMERA_DATA")
        note = tracking.lens_note(clip)
        if note:
            layout.label(text=note, icon="ERROR")
    else:
        layout.label(text=st.line(), icon="INFO")
    row = layout.row()
    row.enabled = not s.is_running
    row.operator("gbuffer.track_solve", icon="TRACKING")
    layout.prop(s, "use_camera_solve")
    layout.prop(s, "camera_auto")
    layout.operator("gbuffer.import_fused_mesh", icon="MESH_DATA")


_PROMPT_CACHE: dict = {}


def prompt_message(prompt: str, renderer: str):
    """``None`` when ``renderer`` understands ``prompt``, else one short line naming the
    unknown words and the nearest known ones (checked as the artist types; cached)."""
    key = (prompt, renderer)
    if key not in _PROMPT_CACHE:
        from ..backend.renderers import read_prompt
        from ..backend.renderers.prompt import PromptError

        msg = None
        try:
            read_prompt(prompt, renderer or "embedded")
        except PromptError as e:
            words = ", ".join(map(repr, e.unknown))
            msg = f"Unknown word{'s' if len(e.unknown) > 1 else ''} {words}"
            hints = [(w, h) for w, h in e.suggestions.items() if h]
            if len(e.unknown) == 1 and hints:
                msg += f": did you mean {hints[0][1]!r}?"
            elif hints:
                msg += ": did you mean " + ", ".join(f"{h!r} for {w!r}" for w, h in hints) + "?"
        except (KeyError, ImportError):
            msg = None
        if len(_PROMPT_CACHE) > 256:
            _PROMPT_CACHE.clear()
        _PROMPT_CACHE[key] = msg
    return _PROMPT_CACHE[key]


def free_text_renderer(name: str) -> bool:
    try:
        from ..backend.renderers.base import renderer_class

        return bool(renderer_class(name or "embedded").free_text_prompt)
    except (KeyError, ImportError):
        return False


def draw_restyle(layout, context) -> None:
    from ..backend.renderers.prompt import LOOK_ORDER

    s = settings(context)
    layout.prop(s, "prompt", text="", icon="TEXT")
    msg = prompt_message(s.prompt, s.renderer)
    if msg:
        layout.label(text=msg, icon="ERROR")
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(s, "renderer")
    col.prop(s, "use_scene_lights", icon="LIGHT")
    if not free_text_renderer(s.renderer):
        box = layout.box()
        row = box.row()
        row.prop(s, "show_looks", text="Looks", icon="DOWNARROW_HLT" if s.show_looks else "RIGHTARROW",
                 emboss=False)
        row.operator_menu_enum("gbuffer.look_preset", "preset", text="Presets", icon="PRESET")
        if s.show_looks:
            sub = box.column(align=True)
            for name in LOOK_ORDER:
                sub.prop(s, f"look_{name}", slider=True)
            box.label(text="Sliders write the prompt; words in the tooltip", icon="INFO")
    row = layout.row()
    row.scale_y = 1.4
    row.enabled = not s.is_running
    row.operator("gbuffer.restyle", icon="SHADERFX")
    if s.result_dir:
        draw_result(layout, context)


def draw_result(layout, context) -> None:
    """The last result (shown in the backdrop and Image Editors after Restyle), buttons to
    show it again, play its preview movie and open its folder, and the run history."""
    from ..operators import results

    s = settings(context)
    box = layout.box()
    run_dir = os.path.dirname(s.result_dir.rstrip("/\\"))
    box.label(text=f"Result: {os.path.basename(run_dir) or s.result_dir}", icon="CHECKMARK")
    row = box.row(align=True)
    row.operator("gbuffer.show_result", text="Show", icon="HIDE_OFF").directory = s.result_dir
    row.operator("gbuffer.play_preview", text="Play", icon="PLAY").directory = s.result_dir
    row.operator("gbuffer.open_path", text="Folder", icon="FILE_FOLDER").path = run_dir
    if os.path.isfile(os.path.join(bpy.path.abspath(s.result_dir), "plate_lighting.exr")):
        box.operator("gbuffer.world_from_plate", icon="WORLD").directory = s.result_dir
    runs = results.run_history(results.history_root(context))
    if len(runs) > 1:
        col = box.column(align=True)
        col.label(text="Earlier runs:")
        for run in runs[:results.HISTORY_SHOWN]:
            r = col.row(align=True)
            r.label(text=run.line())
            r.operator("gbuffer.show_result", text="", icon="IMPORT").directory = str(run.result)
        older = len(runs) - results.HISTORY_SHOWN
        if older > 0:
            r = col.row(align=True)
            r.label(text=f"{older} older run{'s' if older > 1 else ''}")
            r.operator("gbuffer.open_path", text="", icon="FILE_FOLDER").path = str(results.history_root(context))


def draw_scene_export(layout, context) -> None:
    """Scene G-Buffers: exact G-buffers of this 3D scene (Cycles) instead of estimates."""
    s, scene = settings(context), context.scene
    layout.prop(s, "scene_export_dir")
    if not s.scene_export_dir:
        layout.label(text=default_output_dir(scene), icon="FILE_FOLDER")
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(s, "scene_export_current_frame")
    col.prop(s, "scene_export_motion_blur")
    col.prop(s, "scene_export_samples")
    col.prop(s, "scene_export_load")
    if scene.camera is None:
        layout.label(text="The scene has no camera", icon="ERROR")
    row = layout.row()
    row.scale_y = 1.4
    row.enabled = not s.is_running
    op = row.operator("gbuffer.export_scene", icon="RENDER_RESULT")
    op.directory = s.scene_export_dir
    op.current_frame_only = s.scene_export_current_frame
    op.motion_blur_steps = s.scene_export_motion_blur
    op.samples = s.scene_export_samples
    op.load_compositor = s.scene_export_load


def draw_status(layout, context) -> None:
    s = settings(context)
    if s.is_running:
        layout.progress(factor=s.progress, type="BAR", text=s.status)
        layout.operator("gbuffer.cancel_job", icon="CANCEL")
    else:
        layout.label(text=s.status or "Ready", icon="INFO")
    if s.log_path:
        row = layout.row(align=True)
        row.prop(s, "log_path", text="Log")
        row.operator("gbuffer.open_path", text="", icon="TEXT").path = s.log_path


class _Sidebar:
    bl_region_type = "UI"
    bl_category = CATEGORY


class _CompositorSidebar(_Sidebar):
    bl_space_type = "NODE_EDITOR"

    @classmethod
    def poll(cls, context):
        space = context.space_data
        return getattr(space, "tree_type", "") == "CompositorNodeTree" and context.scene is not None


class _ClipSidebar(_Sidebar):
    bl_space_type = "CLIP_EDITOR"

    @classmethod
    def poll(cls, context):
        return context.scene is not None


_SECTIONS = (
    ("footage", "Footage", draw_footage),
    ("decompose", "Decompose", draw_decompose),
    ("scene_export", "Scene G-Buffers", draw_scene_export),
    ("restyle", "Restyle", draw_restyle),
    ("status", "Status", draw_status),
)


def _make_panel(space_cls, space_key: str, key: str, label: str, fn):
    def draw(self, context):
        fn(self.layout, context)

    return type(
        f"GBUFFER_PT_{space_key}_{key}",
        (space_cls, bpy.types.Panel),
        {"bl_label": label, "bl_idname": f"GBUFFER_PT_{space_key}_{key}", "draw": draw,
         "__doc__": f"G-Buffer {label} ({space_key})"},
    )


classes = tuple(
    _make_panel(space_cls, space_key, key, label, fn)
    for space_cls, space_key in ((_CompositorSidebar, "compositor"), (_ClipSidebar, "clip"))
    for key, label, fn in _SECTIONS
)
