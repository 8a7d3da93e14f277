"""Blender-side scene tools: exact G-buffer export and procedural training scenes.

Modules here import ``bpy`` (except :mod:`scene.passes`, which is numpy only).
"""
