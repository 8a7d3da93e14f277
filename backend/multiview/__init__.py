"""Geometry measured from the footage: cameras, multi-view stereo depth, fusion.

* :mod:`.cameras` -- the :class:`Camera` model and its conventions; :mod:`.camera_files`
  -- our JSON, COLMAP text and Open3D ``trajectory.log`` loaders; :mod:`.undistort`.
* :mod:`.planesweep` -- plane-sweep depth with confidence, rotation-only detection.
* :mod:`.reproject` -- geometric consistency and the temporal-consistency metric.
* :mod:`.fusion` -- fill low-confidence pixels from a single-image prior depth.

Pure numpy / OpenCV; never imports ``bpy``.
"""
