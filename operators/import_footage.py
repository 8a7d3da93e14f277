"""Import Footage: load a movie or image sequence and set the scene up to match it."""
from __future__ import annotations

import os
from pathlib import Path

import bpy
from bpy.props import CollectionProperty, StringProperty
from bpy_extras.io_utils import ImportHelper

from ..addon import compositor
from . import footage


def apply_footage(scene, info: footage.FootageInfo):
    """Load ``info``'s footage as a Movie Clip and match the scene to it.

    Sets: frame range (a movie: 1..frame_count; an image sequence: its own file
    numbers, first to last, e.g. 1001..1100, the clip starting there), frame rate (``fps`` / ``fps_base``, exact for
    fractional rates; image sequences keep the scene's rate), resolution at 100 %, pixel
    aspect from the sample aspect ratio, the clip's input colour space, the "Standard"
    view transform (the viewer then shows the footage as it is encoded), and the
    compositor source nodes. Shows the clip in open Movie Clip Editors.

    Returns:
        The ``bpy.types.MovieClip``.
    """
    clip = bpy.data.movieclips.load(str(info.path), check_existing=False)
    first, last = footage.number_range(info)
    clip.frame_start = first  # clip frame 1 = the first file: scene frame N shows source frame N
    try:
        clip.colorspace_settings.name = info.colorspace
    except TypeError:  # colour space not in this Blender's OCIO config
        clip.colorspace_settings.name = "sRGB"

    r = scene.render
    r.resolution_x, r.resolution_y = info.width, info.height
    r.resolution_percentage = 100
    r.pixel_aspect_x, r.pixel_aspect_y = footage.pixel_aspect(info.pixel_aspect)
    if info.fps is not None:
        r.fps, r.fps_base = footage.scene_fps(info.fps)
    if info.kind != "SEQUENCE":
        last = first - 1 + max(1, info.frame_count or clip.frame_duration)
    scene.frame_start = first
    scene.frame_end = max(first, last)
    scene.frame_current = first
    try:
        scene.view_settings.view_transform = "Standard"
    except TypeError:
        pass

    s = scene.gbuffer_editor
    s.source_path = str(info.path)
    s.frame_start, s.frame_end = scene.frame_start, scene.frame_end
    compositor.setup_source(scene, clip)

    wm = getattr(bpy.context, "window_manager", None)
    for window in wm.windows if wm else ():
        for area in window.screen.areas:
            if area.type == "CLIP_EDITOR":
                area.spaces.active.clip = clip
    return clip


class GBUFFER_OT_import_footage(bpy.types.Operator, ImportHelper):
    """Import a movie or an image sequence and match the scene's frame range, frame rate,
    resolution, pixel aspect and colour space to it"""

    bl_idname = "gbuffer.import_footage"
    bl_label = "Import Footage"
    bl_options = {"REGISTER", "UNDO"}

    filter_glob: StringProperty(default=footage.FILTER_GLOB, options={"HIDDEN"})
    files: CollectionProperty(type=bpy.types.OperatorFileListElement, options={"HIDDEN", "SKIP_SAVE"})
    directory: StringProperty(subtype="DIR_PATH", options={"HIDDEN", "SKIP_SAVE"})

    @classmethod
    def poll(cls, context):
        if context.scene is None:
            cls.poll_message_set("No active scene")
            return False
        return True

    def _path(self) -> Path:
        if self.files and self.files[0].name and self.directory:
            names = sorted(f.name for f in self.files)
            return Path(self.directory) / names[0]
        return Path(bpy.path.abspath(self.filepath))

    @staticmethod
    def _not_imported(path: Path, s) -> str:
        """The Status line after a failed import: it names the file, and says which footage
        Decompose would still use, so an earlier "done" is not read as this file's."""
        kept = os.path.basename(s.source_path) if s.source_path else None
        return (f"Import failed: {path.name}" + (f" (still using {kept})" if kept else "")
                + "; see the Info log")

    def execute(self, context):
        path = self._path()
        s = context.scene.gbuffer_editor
        try:
            info = footage.probe(path)
        except (OSError, ValueError) as e:
            self.report({"ERROR"}, str(e))
            s.status = self._not_imported(path, s)
            return {"CANCELLED"}
        try:
            apply_footage(context.scene, info)
        except RuntimeError as e:  # bpy load errors
            self.report({"ERROR"}, f"{path}: {e}")
            s.status = self._not_imported(path, s)
            return {"CANCELLED"}
        rate = f"{float(info.fps):.3f} fps" if info.fps else "scene fps"
        self.report(
            {"INFO"},
            f"Imported {os.path.basename(info.path)}: {info.width}x{info.height}, "
            f"{info.frame_count} frames, {rate}, {info.colorspace}",
        )
        return {"FINISHED"}


def menu_import(self, context):
    """File > Import > Footage (G-Buffer Editor)."""
    self.layout.operator(GBUFFER_OT_import_footage.bl_idname, text="Footage (G-Buffer Editor)", icon="FILE_MOVIE")


classes = (GBUFFER_OT_import_footage,)
