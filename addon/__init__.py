"""Settings and services of the Blender layer (imports no operator or panel).

* :mod:`.preferences` - add-on preferences (user-level settings) and the paths they imply;
* :mod:`.props` - per-scene settings and job status (``scene.gbuffer_editor``);
* :mod:`.model_catalog` - the optional models and whether they are present (no ``bpy``);
* :mod:`.dependencies` - where the backend's Python packages come from (no ``bpy``);
* :mod:`.compositor` - all compositor node wiring; :mod:`.compat` - bpy 4.5 / 5.0 differences;
* :mod:`.worker` - starts and watches the backend worker process (no ``bpy``);
* :mod:`.scene` - exact G-buffers of a 3D scene, rendered with Cycles.

The headless ``blender -b --command gbuffer_editor ...`` drives the operators' jobs, so
it lives with them (:mod:`..operators.cli_command`); nothing here imports upwards
(``tools/import_graph.py --layers`` checks it).
"""
