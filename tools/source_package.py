# SPDX-License-Identifier: GPL-3.0-or-later
"""Import this checkout as the extension package, the way Blender imports an installed one.

The Blender layer (``addon/``, ``operators/``, ``panels/``) imports the backend
package-relatively (``from ..backend import contract``), so its modules only import as
parts of the extension package, never as top-level modules. Tools, training scripts and
tests that run the Blender layer from the source tree use :func:`import_checkout`, then
import what they need as ``gbuffer_editor.addon.scene.export`` and so on, and get the
backend as ``gbuffer_editor.backend``: one copy, as inside Blender.
"""
from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Package name Blender gives the extension (its manifest ``id``), minus ``bl_ext.<repo>.``.
PACKAGE = "gbuffer_editor"

_LINKED = set()


def put_checkout_on_path(name: str = PACKAGE) -> None:
    """Make this checkout importable as the package ``name`` (once per process): a symlink
    ``<temp>/<name>`` -> the repository goes on ``sys.path``, so ``importlib`` and
    ``addon_utils.enable(name)`` find the package like any other."""
    if name not in _LINKED:
        link_root = Path(tempfile.mkdtemp(prefix="gbuffer_pkg_"))
        (link_root / name).symlink_to(REPO_ROOT, target_is_directory=True)
        sys.path.insert(0, str(link_root))
        _LINKED.add(name)


def import_checkout(name: str = PACKAGE):
    """:func:`put_checkout_on_path` and import the package (it is not registered)."""
    put_checkout_on_path(name)
    return importlib.import_module(name)


def checkout_module(dotted: str, name: str = PACKAGE):
    """Import ``<name>.<dotted>`` of this checkout (e.g. ``addon.scene.export``)."""
    put_checkout_on_path(name)
    return importlib.import_module(f"{name}.{dotted}")
