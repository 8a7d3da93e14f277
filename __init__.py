# SPDX-License-Identifier: GPL-3.0-or-later
"""G-Buffer Editor: a Blender extension.

Registers, in this order, :mod:`.preferences`, :mod:`.operators`, :mod:`.panels` and
:mod:`.cli_command`, and unregisters them in reverse order. Each of those modules owns
what it registers (classes, properties, handlers, timers) and removes all of it in its
own ``unregister()``.

Relative imports only: the package is imported as ``bl_ext.<repo>.gbuffer_editor``
when installed, and under other names in tests.
"""

import importlib

_SUBMODULE_NAMES = ("preferences", "operators", "panels", "cli_command")


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
