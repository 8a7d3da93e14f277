"""Per-scene settings and job status: ``scene.gbuffer_editor`` (:class:`GBufferEditorSettings`).

User-level settings (backend Python, device, precision, model folder, offline mode)
live in the add-on preferences instead (:mod:`.preferences`).
"""
from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from ..backend.contract import PASSES
from . import compositor

# Dynamic enum items must stay referenced from Python while Blender uses them: one list
# per distinct set of names, never freed.
_ITEMS_CACHE: dict = {}
_ROWS_CACHE: dict = {}  # kind -> (monotonic time, {name: catalog row})


def estimator_names() -> list:
    """Registry names of the backend's estimators (``backend.estimators``), sorted."""
    from ..backend.estimators import available_estimators

    return list(available_estimators())


def renderer_names() -> list:
    """Registry names of the backend's renderers (``backend.renderers``), sorted."""
    from ..backend.renderers import available_renderers

    return list(available_renderers())


def _default_first(names: list, preferred: str) -> list:
    return sorted(names, key=lambda n: (n != preferred, n))


def item_label(d: dict) -> tuple:
    """``(label, description)`` of a dropdown entry from a :mod:`..backend.catalog` row:
    the label says if it wants a GPU and if it is not ready; the tooltip what it needs."""
    label = d["name"].replace("_", " ").title()
    tags = (["GPU"] if d.get("gpu") else []) + ([] if d["ready"] else ["not ready"])
    if tags:
        label += f" ({', '.join(tags)})"
    desc = f"{d['summary']} Needs: {d['needs']}. State: {d['state']}"
    if not d["ready"]:
        desc += ". Get what is missing in Preferences > Add-ons > G-Buffer Editor (Models, Diffusion packages)"
    return label, desc


def _items(kind: str, names: list) -> list:
    from ..backend import catalog
    from .preferences import catalog_options

    import time

    stamp, rows = _ROWS_CACHE.get(kind, (0.0, None))
    if rows is None or time.monotonic() - stamp > 2.0:  # dropdowns redraw often: file checks at most every 2 s
        try:
            rows = {d["name"]: d for d in (catalog.describe_estimators if kind == "estimator" else
                                            catalog.describe_renderers)(**catalog_options())}
        except Exception:  # noqa: BLE001 - a dropdown must always draw
            rows = {}
        _ROWS_CACHE[kind] = (time.monotonic(), rows)
    entries = []
    for n in _default_first(names, "embedded"):
        d = rows.get(n)
        label, desc = item_label(d) if d else (n.replace("_", " ").title(),
                                                f"{kind.title()} '{n}' from the backend registry")
        entries.append((n, label, desc))
    key = (kind, tuple(entries))
    if key not in _ITEMS_CACHE:
        _ITEMS_CACHE[key] = entries
    return _ITEMS_CACHE[key]


def _estimator_items(self, context):
    return _items("estimator", estimator_names())


def _renderer_items(self, context):
    return _items("renderer", renderer_names())


PASS_ITEMS = [(name, name, f"Show the {name} pass in the Viewer") for name in PASSES] + [
    (compositor.RESULT_PASS, "Result", "Show the last Restyle result in the Viewer (the backdrop)")]


def _preview_pass_update(self, context):
    scene = self.id_data
    tree = compositor.find_tree(scene)
    if tree is not None and compositor.find_node(tree, compositor.ROLE_GBUFFER) is not None:
        compositor.show_pass(tree, self.preview_pass)


# -- the look picker: one strength slider per look, written into the prompt --------------
from ..backend.renderers.prompt import LOOK_ORDER  # noqa: E402  (bpy-free, light)

_SYNCING = False


def _look_update(self, context):
    """A slider moved: write the prompt from all sliders (nearest phrases)."""
    global _SYNCING
    if _SYNCING:
        return
    from ..backend.renderers.prompt import compose_prompt

    strengths = {n: getattr(self, f"look_{n}") for n in LOOK_ORDER}
    self.prompt = compose_prompt(strengths)  # its update snaps the sliders to the words


def sync_looks_from_prompt(settings) -> None:
    """Set the sliders to the looks the prompt names (0 for the others); leaves them
    alone when the prompt is not understood by the embedded renderer."""
    global _SYNCING
    from ..backend.renderers.prompt import PromptError, parse_prompt

    try:
        looks = {lk.name: lk.strength for lk in parse_prompt(settings.prompt)}
    except PromptError:
        return
    _SYNCING = True
    try:
        for n in LOOK_ORDER:
            value = float(looks.get(n, 0.0))
            if abs(getattr(settings, f"look_{n}") - value) > 1e-6:
                setattr(settings, f"look_{n}", value)
    finally:
        _SYNCING = False


def _prompt_update(self, context):
    sync_looks_from_prompt(self)


def _look_slider(name: str):
    word = name.replace("_", " ")
    return FloatProperty(
        name=word.title(), default=0.0, min=0.0, max=3.0, soft_max=2.5, step=10, precision=2,
        update=_look_update,
        description=f"Strength of the {word} look (0: off, 1: as designed); writes the prompt with the "
                    f"nearest words (e.g. light {word} 0.5, {word} 1.0) and snaps to them",
    )


class GBufferEditorSettings(bpy.types.PropertyGroup):
    """Everything the G-Buffer sidebar edits, stored in the .blend with the scene."""

    # -- footage -------------------------------------------------------------
    source_path: StringProperty(
        name="Footage", subtype="FILE_PATH", description="Movie file or first image of a sequence"
    )
    output_dir: StringProperty(
        name="Output Folder",
        subtype="DIR_PATH",
        default="//gbuffer_editor/",
        description="Decompose and Restyle results go into numbered sub-folders here "
        "(decompose_001, restyle_001, ...); earlier results are never overwritten",
    )
    # -- decompose -------------------------------------------------------------
    estimator: EnumProperty(name="Estimator", items=_estimator_items, description="G-buffer estimator")
    use_best_prior: BoolProperty(
        name="Best Available Prior",
        default=True,
        description="With the Embedded estimator: run Depth Anything V2 Small for depth when it is in "
                    "the models folder (materials still from the embedded network); off, or another "
                    "estimator picked: exactly the one chosen",
    )
    last_estimator: StringProperty(
        name="Last Estimator", description="The estimator the last Decompose ran (Best Available Prior resolved)"
    )
    # on (the default): no --processing-resolution is passed, so the sidebar computes at the
    # same size as the command line and the Python API (the estimator's own default)
    use_estimator_resolution: BoolProperty(
        name="Estimator's Default",
        default=True,
        description="Compute at the estimator's own processing resolution (embedded: 192 px, "
                    "marigold: 768 px), as the command line does; off: set it below",
    )
    # one name from here to the estimator (scenes saved with its old name "max_size" are
    # migrated on load: migrate_old_names)
    processing_resolution: IntProperty(
        name="Processing Resolution",
        default=768,
        min=0,
        soft_max=4096,
        subtype="PIXEL",
        description="Long side, in pixels, of the frame the estimator computes on (0: full size), "
                    "used when Estimator's Default is off. Capped to what the estimator supports "
                    "(embedded: 192). "
                    "The G-buffers are always written at the footage's full size",
    )
    use_scene_range: BoolProperty(
        name="Scene Frame Range", default=True, description="Decompose the scene's frame range"
    )
    frame_start: IntProperty(name="Start", default=1, min=0, description="First scene frame to decompose")
    frame_end: IntProperty(name="End", default=250, min=0, description="Last scene frame to decompose")
    stabilize: BoolProperty(
        name="Stabilise",
        default=False,
        description="Temporally stabilise depth and normals across frames (reduces flicker)",
    )
    use_camera_solve: BoolProperty(
        name="Use Camera Solve",
        default=True,
        description="When the footage's clip has a camera solve, Decompose measures depth from parallax "
                    "with its cameras, the scene camera follows it and the compositor Z-combines the 3D scene",
    )
    camera_auto: BoolProperty(
        name="Camera: Auto",
        default=False,
        description="When the clip has no camera solve, Decompose solves the camera from the footage "
                    "(focal length unknown) and measures depth with it when the solve passes its checks "
                    "(parallax, error, a determined focal length); otherwise single-image depth with a note",
    )
    cameras_path: StringProperty(
        name="Cameras", subtype="FILE_PATH", description="Cameras JSON last written from the camera solve"
    )
    preview_pass: EnumProperty(
        name="Preview Pass",
        items=PASS_ITEMS,
        default="Combined",
        update=_preview_pass_update,
        description="Pass shown by the Viewer node",
    )
    gbuffer_dir: StringProperty(
        name="G-Buffers", subtype="DIR_PATH", description="Folder of G-buffer EXR frames the compositor reads"
    )
    last_decompose_dir: StringProperty(
        name="Last Decompose",
        subtype="DIR_PATH",
        description="Output folder of the last Decompose run (Resume continues it)",
    )
    # -- restyle -------------------------------------------------------------
    prompt: StringProperty(name="Prompt", default="", update=_prompt_update,
                           description='Look to render, e.g. "dense fog", "heavy rain at night", "murky underwater". '
                                       "The embedded renderer understands a list of words: see Looks below")
    renderer: EnumProperty(name="Renderer", items=_renderer_items, description="Restyle renderer")
    result_dir: StringProperty(name="Result", subtype="DIR_PATH", description="Folder of the last Restyle result")
    use_scene_lights: BoolProperty(
        name="Scene Lights", default=False,
        description="Add the direct light of the scene's point, spot, area and sun lights (colour, power in "
                    "watts, transforms and keyframes, evaluated per frame) to the footage, with shadows from "
                    "the depth; placed in the solved camera's world when the G-buffers carry a camera, else "
                    "relative to the scene camera (docs/lights.md)")
    look_relight: _look_slider("relight")
    look_golden_hour: _look_slider("golden_hour")
    look_overcast: _look_slider("overcast")
    look_rain: _look_slider("rain")
    look_snow: _look_slider("snow")
    look_underwater: _look_slider("underwater")
    look_fog: _look_slider("fog")
    look_night: _look_slider("night")
    show_looks: BoolProperty(name="Looks", default=True, description="Show the look sliders and presets")
    # -- scene export (exact G-buffers of this scene, operators/export_scene.py) --
    scene_export_dir: StringProperty(
        name="Folder",
        subtype="DIR_PATH",
        default="",
        description="Folder for the exported gbuffer_NNNN.exr frames; empty: //gbuffers_<scene>/ next to the .blend",
    )
    scene_export_current_frame: BoolProperty(
        name="Current Frame Only", default=False, description="Export only the current frame, not the frame range"
    )
    scene_export_motion_blur: IntProperty(
        name="Motion Blur Sub-frames",
        default=1,
        min=1,
        soft_max=16,
        max=256,
        description="Sub-frames over the scene's shutter averaged into Combined (1: no motion blur)",
    )
    scene_export_samples: IntProperty(
        name="Samples", default=0, min=0, soft_max=4096, description="Cycles samples (0: the scene's own setting)"
    )
    scene_export_load: BoolProperty(
        name="Load into Compositor",
        default=False,
        description="Afterwards wire the frames into the compositor as Decompose does (material edits, Restyle)",
    )
    # -- job status (written by the running job) ----------------------------
    is_running: BoolProperty(name="Running", default=False, options={"SKIP_SAVE"})
    job_label: StringProperty(name="Job", default="", options={"SKIP_SAVE"})
    status: StringProperty(name="Status", default="Ready")
    progress: FloatProperty(name="Progress", default=0.0, min=0.0, max=1.0, subtype="FACTOR")
    log_path: StringProperty(name="Log", subtype="FILE_PATH", description="Log file of the last job")


_classes = (GBufferEditorSettings,)

#: settings saved in scenes under an old name -> their name now
OLD_NAMES = {"max_size": "processing_resolution"}


def processing_resolution(settings):
    """The processing resolution Decompose asks for: ``None`` (the estimator's own) while
    *Estimator's Default* is on, else the field's value (0: full size)."""
    return None if settings.use_estimator_resolution else settings.processing_resolution


def stored_settings(scene):
    """The ID properties ``scene.gbuffer_editor`` is stored in (Blender 5 keeps add-on
    properties apart from the user's, :meth:`bl_system_properties_get`), or ``None``."""
    get = getattr(scene, "bl_system_properties_get", None)
    group = get() if get is not None else scene
    return group.get("gbuffer_editor") if group is not None else None


@bpy.app.handlers.persistent
def migrate_old_names(*_args) -> None:
    """Move settings a scene saved under an old name (:data:`OLD_NAMES`) to the new one
    (a ``load_post`` handler; the stored value is an ID property of the old name)."""
    for scene in bpy.data.scenes:
        s = stored_settings(scene)
        if s is None:
            continue
        for old, new in OLD_NAMES.items():
            if old in s.keys():
                value = s[old]
                del s[old]
                setattr(scene.gbuffer_editor, new, value)


def register():
    for cls in _classes:
        bpy.utils.register_class(cls)
    bpy.types.Scene.gbuffer_editor = PointerProperty(type=GBufferEditorSettings)
    bpy.app.handlers.load_post.append(migrate_old_names)


def unregister():
    if migrate_old_names in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.remove(migrate_old_names)
    del bpy.types.Scene.gbuffer_editor
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
