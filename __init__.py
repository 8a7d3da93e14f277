# SPDX-License-Identifier: GPL-3.0-or-later
"""G-Buffer Editor: a Blender extension.

The Blender layer, in three layers, each importing only the ones before it:

1. :mod:`.addon` - settings and services: add-on preferences, scene settings, compositor
   wiring, bpy-version compat, the worker process launcher, scene export (Cycles);
2. :mod:`.operators` - the ``gbuffer.*`` operators, and :mod:`.operators.cli_command`,
   the headless ``--command``, which drives the operators' jobs;
3. :mod:`.panels` - the sidebar and the status bar.

Registers, in this order, :mod:`.addon.preferences`, :mod:`.addon.props`,
:mod:`.operators`, :mod:`.panels` and :mod:`.operators.cli_command`, and unregisters them in
reverse order. Each of those modules owns what it registers (classes, properties,
handlers, timers) and removes all of it in its own ``unregister()``.

Relative imports only, the backend included (``from ..backend import contract``): the
package is imported as ``bl_ext.<repo>.gbuffer_editor`` when installed, and under other
names in tests, so there is one copy of the backend in Blender's process. The worker
process runs ``python -m backend`` from this folder (:mod:`.addon.worker`).
"""

import importlib

_SUBMODULE_NAMES = ("addon.preferences", "addon.props", "operators", "panels", "operators.cli_command")


def _submodules():
    """Import (or, after a disable/enable cycle, re-import) the registering submodules."""
    modules = []
    for name in _SUBMODULE_NAMES:
        module = importlib.import_module("." + name, __package__)
        modules.append(module)
    return modules


_registered = []


def register():
    """Register every submodule; on failure, unregister what was registered and re-raise."""
    if _registered:
        # Blender never calls register twice without unregister; be safe anyway.
        unregister()
    for module in _submodules():
        try:
            module.register()
        except Exception:
            unregister()
            raise
        _registered.append(module)


def unregister():
    """Unregister the submodules in reverse order of registration."""
    while _registered:
        module = _registered.pop()
        module.unregister()


def __getattr__(name):
    """``from <package> import cli_command`` (documented before the Blender layer was
    split) still works; deprecated, use ``<package>.operators.cli_command``."""
    if name == "cli_command":
        import warnings

        warnings.warn("import cli_command from the package's 'operators' subpackage", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(".operators.cli_command", __package__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

