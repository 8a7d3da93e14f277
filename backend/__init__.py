"""G-Buffer Editor backend: contract, footage I/O, estimators, renderers, jobs.

Never imports ``bpy``: runs inside Blender, as a worker process and as a plain CLI
(``python -m backend``).
"""
__version__ = "0.1.0"
