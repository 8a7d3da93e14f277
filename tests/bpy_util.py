"""Helpers for tests that need Blender (``bpy``), for bpy 5.0.1 and 4.5 alike.

Two ways to exercise Blender code:

* **In the pytest process**: ``import bpy`` inside a test marked ``blender``.
  ``tests/conftest.py`` has already pointed ``BLENDER_USER_RESOURCES`` and
  ``XDG_CACHE_HOME`` at a temp folder. `./dev test` runs the ``blender`` tests once
  in ``.venv`` (bpy 5.0.1) and again in ``.venv45`` (bpy 4.5), so both APIs are used.
* **In a fresh process** with :func:`run_bpy`: for anything that changes global Blender
  state for good (installing extensions, enabling add-ons, preferences) or needs its own
  user folder. The child uses the same interpreter by default (so the same bpy version).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Mapping, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Module name of the extension once installed into the "user_default" repository.
EXTENSION_MODULE = "bl_ext.user_default.gbuffer_editor"

#: Prefix of the JSON result line printed by :func:`emit_result` in a child process.
RESULT_PREFIX = "@@RESULT@@ "


#: Appended to every child script: bpy 4.5 as a module hangs at interpreter exit while
#: any UI class (Panel, header draw function) is still registered, so the child leaves
#: with ``os._exit`` once its code has finished and its output is flushed.
EPILOGUE = textwrap.dedent('''
    import os as _os, sys as _sys
    _sys.stdout.flush()
    _sys.stderr.flush()
    _os._exit(0)
    ''')


def venv_python(name: str) -> Path:
    """``REPO_ROOT/<name>/bin/python`` (``name`` is ``.venv`` or ``.venv45``)."""
    return REPO_ROOT / name / "bin" / "python"


def isolated_env(root: os.PathLike, extra: Optional[Mapping[str, str]] = None) -> dict:
    """A copy of ``os.environ`` whose Blender user folder and caches live under ``root``."""
    env = dict(os.environ)
    env["BLENDER_USER_RESOURCES"] = os.path.join(root, "blender_user")
    env["XDG_CACHE_HOME"] = os.path.join(root, "xdg_cache")
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PYTHONPATH", None)
    for key in ("BLENDER_USER_RESOURCES", "XDG_CACHE_HOME"):
        os.makedirs(env[key], exist_ok=True)
    if extra:
        env.update(extra)
    return env


def run_bpy(
    code: str,
    *,
    python: Optional[os.PathLike] = None,
    root: Optional[os.PathLike] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[os.PathLike] = None,
    timeout: float = 300,
) -> dict:
    """Run ``code`` (dedented) in a new Python process and return its result.

    ``python`` defaults to the running interpreter. ``root`` holds the child's Blender
    user folder and caches (a new temp folder when ``None``; pass the same ``root`` to
    later calls to see what an earlier call installed). ``env`` adds variables.

    The code reports by calling ``emit_result(dict)`` (predefined in the child); the
    returned dict is that value, plus ``"stdout"``/``"stderr"``. Raises
    ``AssertionError`` with the child's output when it exits non-zero or emits nothing.
    """
    python = str(python or sys.executable)
    root = str(root or tempfile.mkdtemp(prefix="gbuffer_bpy_"))
    prelude = textwrap.dedent('''\
        import json as _json, sys as _sys
        def emit_result(value):
            _sys.stdout.write({prefix!r} + _json.dumps(value) + "\\n")
            _sys.stdout.flush()
        ''').format(prefix=RESULT_PREFIX)
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="bpy_snippet_", dir=root, delete=False) as fh:
        fh.write(prelude + textwrap.dedent(code) + EPILOGUE)
        script = fh.name
    proc = subprocess.run(
        [python, script], env=isolated_env(root, env), cwd=str(cwd or REPO_ROOT),
        capture_output=True, text=True, timeout=timeout,
    )
    out = "--- stdout ---\n{}\n--- stderr ---\n{}".format(proc.stdout[-6000:], proc.stderr[-6000:])
    if proc.returncode != 0:
        raise AssertionError("{} {} exited {}\n{}".format(python, script, proc.returncode, out))
    results = [line[len(RESULT_PREFIX):] for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not results:
        raise AssertionError("{} {} emitted no result\n{}".format(python, script, out))
    value = json.loads(results[-1])
    value["stdout"], value["stderr"] = proc.stdout, proc.stderr
    return value


def install_extension_in_process(zip_path: os.PathLike, *, enable: bool = True) -> str:
    """Install the built zip into the running bpy's ``user_default`` repo; return its module.

    For in-process ``blender`` tests that need the extension as users get it (wheels
    installed by Blender, ``bl_ext.user_default.gbuffer_editor`` importable).
    """
    import bpy

    result = bpy.ops.extensions.package_install_files(
        filepath=str(zip_path), repo="user_default", enable_on_install=enable,
    )
    if result != {'FINISHED'}:
        raise RuntimeError("package_install_files({}) returned {}".format(zip_path, result))
    return EXTENSION_MODULE
