"""Farm integration: run a shot's chunks on engines studios already run.

* :mod:`backend.farm.merge` -- ``python -m backend farm merge OUT``: one ``manifest.json``
  from the chunks' manifest parts (:mod:`backend.jobs.parts`).
* :mod:`backend.farm.chunks` -- chunking a shot (``--chunk N --overlap K``), its checks,
  one chunk's run and the anchor pass's (:mod:`backend.jobs.anchors`).
* :mod:`backend.farm.ray_engine` -- ``python -m backend farm ray|local decompose|restyle``.
* :mod:`backend.farm.nodes` -- ``python -m backend farm stop TEMP_DIR``: exactly these Ray nodes.

Nothing here imports an engine at module level: Ray is an optional dependency (the farm
extra, never in the extension zip) and is imported only when a Ray job starts.
"""
