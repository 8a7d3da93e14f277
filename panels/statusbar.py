"""Progress of a running G-Buffer job in Blender's status bar (next to Blender's own jobs)."""
from __future__ import annotations

import bpy


def draw_statusbar(self, context) -> None:
    """Appended to ``STATUSBAR_HT_header``: a progress bar and Cancel while a job runs."""
    scene = context.scene
    s = getattr(scene, "gbuffer_editor", None) if scene is not None else None
    if s is None or not s.is_running:
        return
    row = self.layout.row(align=True)
    row.progress(factor=s.progress, type="BAR", text=s.status)
    row.operator("gbuffer.cancel_job", text="", icon="CANCEL")


def register():
    bpy.types.STATUSBAR_HT_header.append(draw_statusbar)


def unregister():
    bpy.types.STATUSBAR_HT_header.remove(draw_statusbar)
