"""Extra site folders at the start of a backend process (no ``bpy``).

The on-demand diffusion packages (torch, diffusers, ...) live in a folder of their own
that never holds numpy. A worker process started by the add-on gets that folder in the
environment variable :data:`EXTRA_SITE_ENV` and appends it to the END of ``sys.path``
(:func:`append_extra_site_paths`), so Blender's numpy and the bundled wheels are never
shadowed. Used by ``python -m backend`` (``backend/__main__.py``) and the model download
worker (``operators/models.py``); ``addon/dependencies.py`` re-exports both names.
"""
from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional

#: Environment variable naming extra site folders (``os.pathsep`` separated) that the
#: backend process appends to the END of ``sys.path`` (after its own site-packages).
EXTRA_SITE_ENV = "GBUFFER_EXTRA_SITE"


def append_extra_site_paths(environ: Optional[Mapping[str, str]] = None,
                            path: Optional[list] = None) -> List[str]:
    """Append the folders named by :data:`EXTRA_SITE_ENV` to the END of ``sys.path``.

    Args:
        environ: the environment to read (default ``os.environ``).
        path: the list to extend (default ``sys.path``).

    Returns:
        The folders appended. Folders that do not exist or are already on the path are
        skipped.
    """
    environ = os.environ if environ is None else environ
    path = sys.path if path is None else path
    added = []
    for folder in environ.get(EXTRA_SITE_ENV, "").split(os.pathsep):
        if folder and os.path.isdir(folder) and folder not in path:
            path.append(folder)
            added.append(folder)
    return added
