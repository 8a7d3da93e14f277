"""UI: the "G-Buffer" sidebar tab (Compositor, Movie Clip Editor) and the status-bar progress."""
import bpy

from . import sidebar, statusbar

_classes = sidebar.classes


def register():
    for cls in _classes:
        bpy.utils.register_class(cls)
    statusbar.register()


def unregister():
    statusbar.unregister()
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
