"""Operators of the G-Buffer workflow (``gbuffer.*``) and the scene settings they use.

Modules, one per concept:

* :mod:`.import_footage` - Import Footage (movie / image sequence -> scene + compositor)
* :mod:`.decompose` - Decompose (backend worker -> G-buffer EXR sequence -> compositor)
* :mod:`.export_scene` - Export Scene G-Buffers (exact G-buffers of a 3D scene, Cycles)
* :mod:`.restyle` - Restyle (material edits -> edited G-buffers -> restyle worker -> result)
* :mod:`.jobs` - step controller shared by the modal and the blocking paths, Cancel
* :mod:`.compositor` - all node wiring; :mod:`.footage` - footage metadata;
  :mod:`.backend_args` - preferences and backend command lines;
  :mod:`.models` - optional models: status, size, Download (drawn in the preferences)
"""
import bpy

from .. import props
from . import decompose, export_scene, import_footage, jobs, models, restyle

_classes = (*import_footage.classes, *decompose.classes, *restyle.classes, *export_scene.classes, *jobs.classes, *models.classes)


def register():
    props.register()
    for cls in _classes:
        bpy.utils.register_class(cls)


def unregister():
    for scene_name, job in list(jobs._ACTIVE.items()):
        job.cancel()
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
    props.unregister()
