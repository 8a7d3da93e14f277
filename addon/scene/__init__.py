"""Exact G-buffers of a Blender scene, rendered with Cycles (:mod:`.export`).

:mod:`.export` and :mod:`.material_aov` import ``bpy``; :mod:`.passes` is numpy only.
"""
