"""The "G-Buffer" sidebar tab, in the Compositor and in the Movie Clip Editor.

The same panels (Footage, Decompose, Scene G-Buffers, Restyle, Status) are generated for both
editors; their drawing code is shared (``draw_*`` functions taking a layout).
"""
from __future__ import annotations

import os

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


def resolution_note(estimator: str, requested: int) -> str:
    """What the estimator will really compute at, for the line under the setting."""
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


def draw_decompose(layout, context) -> None:
    s = settings(context)
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(s, "estimator")
    col.prop(s, "max_size")
    col.label(text=resolution_note(s.estimator, s.max_size), icon="INFO")
    from ..addon.preferences import cache_dir

    missing = missing_model_note(s.estimator, cache_dir())
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


def draw_camera(layout, context) -> None:
    """Camera box of the Decompose panel: the clip's solve, Track & Solve, Use Camera Solve."""
    s = settings(context)
    layout.label(text="Camera", icon="CAMERA_DATA")
    clip = tracking.footage_clip(context.scene, context)
    st = tracking.solve_status(clip)
    if clip is None:
        layout.label(text="No movie clip", icon="INFO")
    elif st.valid:
        good = st.error <= tracking.MAX_SOLVE_ERROR_PX
        layout.label(text=st.line(), icon="CHECKMARK" if good else "ERROR")
    else:
        layout.label(text=st.line(), icon="INFO")
    row = layout.row()
    row.enabled = not s.is_running
    row.operator("gbuffer.track_solve", icon="TRACKING")
    layout.prop(s, "use_camera_solve")


def draw_restyle(layout, context) -> None:
    s = settings(context)
    layout.prop(s, "prompt", text="", icon="TEXT")
    col = layout.column()
    col.use_property_split = True
    col.use_property_decorate = False
    col.prop(s, "renderer")
    row = layout.row()
    row.scale_y = 1.4
    row.enabled = not s.is_running
    row.operator("gbuffer.restyle", icon="SHADERFX")
    if s.result_dir:
        layout.label(text=os.path.basename(os.path.dirname(s.result_dir.rstrip("/\\"))) or s.result_dir,
                     icon="CHECKMARK")


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
        layout.prop(s, "log_path", text="Log")


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
