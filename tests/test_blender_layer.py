"""The Blender layer's structure: layers that import downwards only, one backend.

* ``addon/`` (settings and services) <- ``operators/`` <- ``panels/``, the backend imported
  package-relatively everywhere in them.
* Inside Blender the backend is imported package-relatively only, so it is loaded once:
  an exception the backend raises is caught by the Blender layer's ``except`` for the
  same class (checked in a fresh Blender process).
"""
import ast
from pathlib import Path

import pytest

from tools_util import tool_module

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYER_PACKAGES = ("addon", "operators", "panels")
#: top-level packages of this repository that the Blender layer must never import absolutely
OWN_TOP_LEVEL = {"backend", "addon", "operators", "panels", "training", "tools", "scene"}


def _import_graph():
    return tool_module("import_graph").graph()


def test_blender_layer_imports_point_down_and_are_relative():
    """addon (settings, services) <- operators <- panels; the backend only as ``..backend``.
    (No cycles and nothing loose at the root: tests/test_layout.py.)"""
    for mod, deps in _import_graph().items():
        if mod.startswith("addon"):
            assert not any(d.startswith(("operators", "panels")) for d in deps), (mod, deps)
        if mod.startswith("operators"):
            assert not any(d.startswith("panels") for d in deps), (mod, deps)
    files = [REPO_ROOT / "__init__.py"] + [p for pkg in LAYER_PACKAGES for p in (REPO_ROOT / pkg).rglob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            own = [n for n in names if n.split(".")[0] in OWN_TOP_LEVEL]
            assert not own, f"{path.relative_to(REPO_ROOT)} imports {own} absolutely; use a relative import"


#: Run in a fresh process: enable the extension from this checkout (as the package
#: ``gbuffer_editor``), with the repository root ALSO on sys.path (as in the test suite), so
#: a stray ``import backend`` anywhere in the Blender layer would load a second copy.
IDENTITY_SCRIPT = '''
import os, sys
import bpy
sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r})
import blender_workflow_util as util
util.enable_addon()
from gbuffer_editor.operators import cli_command
from gbuffer_editor.backend import contract
from gbuffer_editor.operators import export_scene, jobs

tmp = {tmp!r}
bad = os.path.join(tmp, "bad")
os.makedirs(bad)
with open(os.path.join(bad, "gbuffer_0001.exr"), "wb") as f:
    f.write(b"not an OpenEXR file")
try:
    contract.read_meta(os.path.join(bad, "gbuffer_0001.exr"))
    raised = None
except Exception as e:
    raised = type(e).__module__ + "." + type(e).__qualname__
# the operator's check reads the frame header through the backend and turns the backend's
# ContractError into its own message in an `except contract.ContractError` branch; any
# other class would escape as an uncaught exception
try:
    export_scene.check_export(bpy.context.scene, bad, [1], blend_path="")
    message = None
except jobs.JobFailed as e:
    message = str(e)

# real work through the Blender layer: the headless command exports one frame
rc = cli_command.run(["export-scene", "--out", os.path.join(tmp, "ok"), "--frames", "1",
                      "--samples", "1", "--res", "16x12"])

backend_dir = os.path.realpath(os.path.join({root!r}, "backend"))
copies = {{}}
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if path and os.path.realpath(path).startswith(backend_dir + os.sep):
        copies.setdefault(os.path.relpath(os.path.realpath(path), backend_dir), []).append(name)
emit_result({{"raised": raised, "message": message, "rc": rc, "copies": copies}})
'''


@pytest.mark.blender
def test_backend_errors_caught_by_the_blender_layer_and_backend_loaded_once(tmp_path):
    pytest.importorskip("bpy")
    import bpy_util

    res = bpy_util.run_bpy(IDENTITY_SCRIPT.format(tests=str(REPO_ROOT / "tests"), root=str(REPO_ROOT),
                                                  tmp=str(tmp_path)), timeout=300)
    assert res["raised"] == "gbuffer_editor.backend.contract.ContractError"
    assert res["message"] is not None and "gbuffer_0001.exr is not a readable G-buffer frame" in res["message"]
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert (tmp_path / "ok" / "gbuffer_0001.exr").is_file()
    copies = res["copies"]
    assert copies["contract.py"] == ["gbuffer_editor.backend.contract"]
    twice = {f: names for f, names in copies.items() if len(names) > 1}
    assert not twice, f"backend modules loaded under two names: {twice}"
    assert all(n.startswith("gbuffer_editor.backend") for names in copies.values() for n in names)
