"""Operators of the G-Buffer workflow (``gbuffer.*``).

Modules, one per concept:

* :mod:`.import_footage` - Import Footage (movie / image sequence -> scene + compositor)
* :mod:`.decompose` - Decompose (backend worker -> G-buffer EXR sequence -> compositor)
* :mod:`.export_scene` - Export Scene G-Buffers (exact G-buffers of a 3D scene, Cycles)
* :mod:`.camera_solve` - Track & Solve (Blender's tracker -> cameras JSON, scene camera), Z-combine
* :mod:`.restyle` - Restyle (material edits -> edited G-buffers -> restyle worker -> result)
* :mod:`.results` - Show Result, Play Preview, Open (folder / log), run history
* :mod:`.plate_world` - World from Plate (the plate's estimated lighting as a World)
* :mod:`.jobs` - step controller shared by the modal and the blocking paths, Cancel
* :mod:`.footage` - footage metadata; :mod:`.backend_args` - preferences and backend
  command lines
* :mod:`.models` - Download a model; :mod:`.diffusion_deps` - install / remove the
  diffusion packages (both drawn in the add-on preferences)

They build on the settings layer :mod:`..addon` (scene settings, preferences,
compositor wiring, compat, worker); nothing there imports an operator.
"""
import bpy

from . import (camera_solve, decompose, diffusion_deps, export_scene, import_footage, jobs, models, plate_world,
               restyle, results)

_classes = (*import_footage.classes, *decompose.classes, *restyle.classes, *results.classes, *export_scene.classes, *camera_solve.classes, *jobs.classes,
            *models.classes, *diffusion_deps.classes, *plate_world.classes)


def register():
    for cls in _classes:
        bpy.utils.register_class(cls)
    bpy.types.TOPBAR_MT_file_import.append(import_footage.menu_import)


def unregister():
    bpy.types.TOPBAR_MT_file_import.remove(import_footage.menu_import)
    for scene_name, job in list(jobs._ACTIVE.items()):
        job.cancel()
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
