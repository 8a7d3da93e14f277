"""Test helpers for the Blender workflow tests (tests/test_blender_*.py, issue 6).

* :func:`enable_addon` imports the repository folder as the package ``gbuffer_editor``
  (``tools/source_package.py``) and enables it with ``addon_utils``, so the preferences
  exist exactly as for an installed extension. Import Blender-layer modules through that
  package (``gbuffer_editor.addon.worker``, ``gbuffer_editor.operators.jobs``), never as
  top-level modules.
* :class:`RecordingLayout` stands in for ``bpy.types.UILayout`` (bpy as a module draws
  no UI): it records every ``prop``/``operator``/``label``/``progress`` call.
* :func:`write_fake_worker` writes a small real worker script speaking the JSON-lines
  progress protocol (for the worker / job state-machine tests).
* :func:`write_tiny_launcher` writes an executable "Python" for the preference
  ``backend_python`` that registers the decompose tests' tiny estimator
  (``tests/decompose_util.py``) and then runs the real backend CLI.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
EMBEDDED_ONNX = REPO_ROOT / "backend" / "model" / "weights" / "embedded.onnx"

if str(REPO_ROOT / "tools") not in sys.path:
    sys.path.append(str(REPO_ROOT / "tools"))
from source_package import PACKAGE, checkout_module, put_checkout_on_path  # noqa: E402,F401


def enable_addon():
    """Enable the add-on from the source tree; returns the imported package module."""
    import addon_utils

    put_checkout_on_path()
    mod = addon_utils.enable(PACKAGE, default_set=True, handle_error=None)
    if mod is None:
        raise RuntimeError("could not enable the add-on from " + str(REPO_ROOT))
    return mod


def disable_addon():
    import addon_utils

    addon_utils.disable(PACKAGE, default_set=True)


def _ui_rna():
    import bpy

    return bpy.types.UILayout.bl_rna


class RecordingLayout:
    """Records UILayout calls; nested layouts (row/column/box/split...) record into the same log.

    ``calls`` holds tuples: ``("prop", data, name, kwargs)``, ``("operator", idname, kwargs)``,
    ``("operator_prop", idname, name, value)`` (a property set on what ``operator()``
    returned), ``("label", kwargs)``, ``("progress", kwargs)``.

    It is strict where bpy's UILayout is: every keyword argument must be a parameter of
    the real ``UILayout`` function, every ``icon`` a real icon name, every attribute set
    a real ``UILayout`` property (all read from ``bl_rna`` of the running Blender).
    """

    def __init__(self, log=None):
        object.__setattr__(self, "calls", [] if log is None else log)

    def __setattr__(self, name, value):
        assert name in _ui_rna().properties, f"UILayout has no property {name!r}"
        object.__setattr__(self, name, value)

    def _check(self, func, kwargs):
        params = _ui_rna().functions[func].parameters
        for k, v in kwargs.items():
            assert k in params, f"UILayout.{func}() has no parameter {k!r}"
            if k == "icon":
                icons = params["icon"].enum_items.keys()
                assert v in icons, f"unknown icon {v!r}"

    def _child(self, func, kwargs):
        self._check(func, kwargs)
        return RecordingLayout(self.calls)

    def row(self, **kwargs):
        return self._child("row", kwargs)

    def column(self, **kwargs):
        return self._child("column", kwargs)

    def box(self, **kwargs):
        return self._child("box", kwargs)

    def split(self, **kwargs):
        return self._child("split", kwargs)

    def prop(self, data, prop, **kwargs):
        self._check("prop", kwargs)
        self.calls.append(("prop", data, prop, kwargs))

    def operator(self, idname, **kwargs):
        self._check("operator", kwargs)
        self.calls.append(("operator", idname, kwargs))
        calls = self.calls

        class _OpProps:  # operator() returns the operator's properties: record what is set
            def __setattr__(self, key, value):
                calls.append(("operator_prop", idname, key, value))

        return _OpProps()

    def operator_menu_enum(self, idname, prop, **kwargs):
        self._check("operator_menu_enum", kwargs)
        self.calls.append(("operator_menu_enum", idname, prop, kwargs))

    def label(self, **kwargs):
        self._check("label", kwargs)
        self.calls.append(("label", kwargs))

    def progress(self, **kwargs):
        self._check("progress", kwargs)
        self.calls.append(("progress", kwargs))

    def separator(self, **kwargs):
        self._check("separator", kwargs)
        self.calls.append(("separator", kwargs))

    # anything else UILayout has would fail loudly here, on purpose
    def __getattr__(self, name):
        raise AttributeError(f"RecordingLayout has no {name!r}: add it if UILayout has it")


FAKE_WORKER = r'''
import json, os, signal, sys, time
out, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
print("worker starting (plain text goes to the log)", flush=True)
sys.stderr.write("stderr: loading model\n"); sys.stderr.flush()
for i in range(1, n + 1):
    if mode == "fail" and i == 2:
        print(json.dumps({"event": "error", "message": "estimator exploded", "frame": 2,
                          "file": "/footage/shot_0002.png"}), flush=True)
        sys.exit(1)
    if mode == "crash" and i == 2:
        1 / 0
    tmp = os.path.join(out, ".tmp_f%04d" % i)
    with open(tmp, "w") as f:
        f.write("frame %d" % i)
    os.replace(tmp, os.path.join(out, "f%04d.txt" % i))
    print(json.dumps({"event": "progress", "frame": i, "done": i, "total": n, "fps": 5.0,
                      "eta_s": (n - i) * 0.2}), flush=True)
    if mode.startswith("hang") and i == 2:
        while not stop:
            time.sleep(0.02)
    if stop:
        print(json.dumps({"event": "cancelled", "written": i}), flush=True)
        if mode == "hang_late_eof":
            # a child inherits stdout and holds it open after this process exits: the
            # reader sees end-of-stream late (as a loaded machine schedules it late)
            import subprocess
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
        sys.exit(130)
print(json.dumps({"event": "done", "done": n, "total": n}), flush=True)
'''


def write_fake_worker(folder: os.PathLike) -> Path:
    """Write the JSON-lines worker script; run it as ``[python, path, OUT, N, MODE]``.

    MODE: ``ok`` (N frames then done), ``fail`` (error event at frame 2, exit 1),
    ``crash`` (traceback at frame 2), ``hang`` (waits after frame 2 until SIGTERM, exit 130),
    ``hang_late_eof`` (as ``hang``; its stdout reaches end-of-stream ~1 s after it exits).
    """
    p = Path(folder) / "fake_worker.py"
    p.write_text(FAKE_WORKER)
    return p


def write_tiny_launcher(folder: os.PathLike) -> Path:
    """An executable usable as the ``backend_python`` preference: ``LAUNCHER -m backend ARGS``
    registers the tiny test estimator, then runs the real ``backend.cli.main(ARGS)``."""
    p = Path(folder) / "tiny_python"
    p.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"sys.path.insert(0, {str(TESTS_DIR)!r}); sys.path.insert(0, os.getcwd())\n"
        "import decompose_util\n"
        "decompose_util.register_tiny()\n"
        "from backend.cli import main\n"
        "assert sys.argv[1:3] == ['-m', 'backend'], sys.argv\n"
        "sys.exit(main(sys.argv[3:]))\n"
    )
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p

