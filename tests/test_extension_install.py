"""The built extension zip on real Blender (bpy 5.0.1 in .venv, bpy 4.5 in .venv45).

Builds the linux-x64 zip with Blender's own ``blender_ext.py``, validates it, installs it
with ``bpy.ops.extensions.package_install_files`` into an isolated user folder, checks
register / disable / enable / disable, and runs the default path from the installed
copy with the wheels Blender installed.
"""
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import bpy_util
from blender_workflow_util import checkout_module
from tools_util import tool_module

pytestmark = pytest.mark.blender

REPO = Path(__file__).resolve().parent.parent
EXT_MODULE = bpy_util.EXTENSION_MODULE

#: Import name of every bundled wheel's top-level package (requirements-wheels.txt).
BUNDLED_IMPORTS = {
    "OpenEXR": "OpenEXR",
    "av": "av",
    "onnxruntime": "onnxruntime",
    "opencv-python-headless": "cv2",
    "protobuf": "google.protobuf",
    "flatbuffers": "flatbuffers",
    "packaging": "packaging",
    "huggingface_hub": "huggingface_hub",
    "PyYAML": "yaml",
    "httpx2": "httpx2",
}


def _wheel_pins():
    pins = {}
    for line in (REPO / "requirements-wheels.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name] = version
    return pins


def _blender_ext():
    return tool_module("build_extension").blender_ext_path()


def _validate(path):
    return subprocess.run([sys.executable, str(_blender_ext()), "validate", str(path)],
                          capture_output=True, text=True)


def test_source_manifest_validates_with_blender():
    proc = _validate(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success" in proc.stdout


def test_bad_manifest_is_rejected_by_validate(tmp_path):
    # The validator really checks: a tagline over 64 characters must fail.
    text = (REPO / "blender_manifest.toml").read_text()
    text = re.sub(r'(?m)^tagline = ".*"$', 'tagline = "{}"'.format("x" * 70), text)
    (tmp_path / "blender_manifest.toml").write_text(text)
    (tmp_path / "__init__.py").write_text("")
    proc = _validate(tmp_path)
    assert proc.returncode != 0
    assert "tagline" in (proc.stdout + proc.stderr)


def test_zip_contents_and_manifest(extension_zip):
    import tomllib

    # The build writes `wheels` into a staged copy only, never into the source manifest.
    source = (REPO / "blender_manifest.toml").read_text()
    assert not re.search(r"(?m)^wheels\s*=", source)
    assert tomllib.loads(source)["platforms"] == ["linux-x64", "windows-x64", "macos-arm64"]

    assert extension_zip.name == "gbuffer_editor-0.1.0-linux_x64.zip"
    proc = _validate(extension_zip)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    with zipfile.ZipFile(extension_zip) as zf:
        names = set(zf.namelist())
        manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
    for required in ("__init__.py", "addon/__init__.py", "addon/preferences.py", "addon/props.py",
                     "addon/dependencies.py", "operators/cli_command.py", "addon/scene/export.py",
                     "operators/__init__.py", "panels/__init__.py", "backend/__init__.py",
                     "backend/contract.py"):
        assert required in names
    # The Blender layer has its own packages: no module loose at the root but __init__.py.
    assert {n for n in names if "/" not in n and n.endswith(".py")} == {"__init__.py"}
    # Developer files stay out of the zip.
    for name in names:
        top = name.split("/", 1)[0]
        assert top not in {"tests", "training", "benchmarks", "tools", "docs", ".ci", "dist", "dev"}, name
        assert not top.startswith((".venv", ".git")), name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
        assert not name.startswith("requirements"), name

    assert manifest["id"] == "gbuffer_editor"
    assert manifest["platforms"] == ["linux-x64"]
    assert len(manifest["tagline"]) <= 64
    wheels = sorted(w.split("/")[-1] for w in manifest["wheels"])
    assert wheels == sorted(n.split("/", 1)[1] for n in names if n.startswith("wheels/"))
    # Never numpy (Blender's own is used) nor torch (not on the default path).
    assert not [w for w in wheels if w.lower().startswith(("numpy-", "torch-", "diffusers-"))]
    # Every pinned wheel is there for Python 3.11 and for 3.13 (own build or stable ABI).
    for name, version in _wheel_pins().items():
        norm = name.lower().replace("-", "_")
        mine = [w for w in wheels if w.lower().startswith("{}-{}-".format(norm, version))]
        assert mine, (name, wheels)
        for cp in ("cp311", "cp313"):
            assert any(cp in w or "abi3" in w or "-none-" in w or "-py3-" in w for w in mine), (name, cp, mine)


INSTALL_SCRIPT = r'''
import os, sys
import bpy, addon_utils

zip_path, module = sys.argv_zip, "{module}"
TRACKED_TYPES = ("Scene", "WindowManager", "Object", "Image", "Node", "NodeTree",
                 "CompositorNodeTree", "Material", "World", "MovieClip", "Screen",
                 "Collection", "ID", "Text", "Camera", "Mesh")

def snapshot():
    handlers = {{}}
    for name in dir(bpy.app.handlers):
        value = getattr(bpy.app.handlers, name)
        if isinstance(value, list):
            handlers[name] = [repr(f) for f in value]
    props = {{}}
    for t in TRACKED_TYPES:
        cls = getattr(bpy.types, t, None)
        if cls is not None:
            props[t] = sorted(p.identifier for p in cls.bl_rna.properties)
    return {{
        "types": sorted(dir(bpy.types)),
        "handlers": handlers,
        "props": props,
        "addon_prefs": sorted(a.module for a in bpy.context.preferences.addons),
    }}

# Record every timer the extension registers, to check they are gone after disabling.
_timers = []
_orig_register = bpy.app.timers.register
def _recording_register(fn, *args, **kwargs):
    _timers.append(fn)
    return _orig_register(fn, *args, **kwargs)
bpy.app.timers.register = _recording_register

before = snapshot()
result = bpy.ops.extensions.package_install_files(
    filepath=zip_path, repo="user_default", enable_on_install=True)
assert result == {{"FINISHED"}}, result
enabled_1 = snapshot()
addon = bpy.context.preferences.addons.get(module)
assert addon is not None, "not enabled after install"
prefs = addon.preferences
pref_values = {{k: getattr(prefs, k) for k in
               ("backend_python", "device", "precision", "model_dir", "offline_mode")}}
pkg = sys.modules[module]
ext_dir = os.path.dirname(pkg.__file__)
ext_classes = sorted(
    name for name in dir(bpy.types)
    if getattr(getattr(bpy.types, name), "__module__", "").startswith(module + "."))
model_dir = pkg.addon.preferences.model_dir()

# Draw the preferences into a recording layout (no window in background mode).
drawn = []
class _Layout:
    def __getattr__(self, name):
        def call(*args, **kwargs):
            drawn.append([name] + [a for a in args if isinstance(a, str)])
            return _Layout()
        return call
class _Prefs:
    layout = _Layout()
    def __getattr__(self, name):
        return getattr(prefs, name)
type(prefs).draw(_Prefs(), bpy.context)

# The on-demand diffusion install refuses while online access is off (bpy default).
online = bpy.app.online_access
refused = None
try:
    bpy.ops.gbuffer.install_diffusion_deps()
except RuntimeError as ex:
    refused = str(ex)

addon_utils.disable(module, default_set=True)
disabled_1 = snapshot()
live_timers_1 = [repr(f) for f in _timers if bpy.app.timers.is_registered(f)]

addon_utils.enable(module, default_set=True)
enabled_2 = snapshot()
addon_utils.disable(module, default_set=True)
disabled_2 = snapshot()
live_timers_2 = [repr(f) for f in _timers if bpy.app.timers.is_registered(f)]

# Leave it enabled (as a user would): Blender installs the wheels of enabled extensions only.
addon_utils.enable(module, default_set=True)
enabled_3 = module in bpy.context.preferences.addons

emit_result({{
    "version": list(bpy.app.version),
    "before": before, "enabled_1": enabled_1, "disabled_1": disabled_1,
    "enabled_2": enabled_2, "disabled_2": disabled_2,
    "ext_classes": ext_classes, "pref_values": pref_values, "ext_dir": ext_dir,
    "model_dir": model_dir, "drawn": drawn, "prefs_class": type(prefs).__name__, "online": online, "refused": refused,
    "timers_registered": len(_timers), "enabled_3": enabled_3,
    "live_timers_1": live_timers_1, "live_timers_2": live_timers_2,
    "extensions_dir": bpy.utils.user_resource("EXTENSIONS"),
}})
'''


@pytest.fixture(scope="module")
def installed(extension_zip, tmp_path_factory):
    """Install + enable/disable cycle in a fresh bpy process; returns its report dict."""
    root = tmp_path_factory.mktemp("install")
    code = "import sys; sys.argv_zip = {!r}\n".format(str(extension_zip)) + INSTALL_SCRIPT.format(module=EXT_MODULE)
    result = bpy_util.run_bpy(code, root=root)
    result["root"] = root
    return result


def test_installed_and_registered(installed):
    import bpy

    assert installed["version"][:2] == list(bpy.app.version[:2])
    assert EXT_MODULE in installed["enabled_1"]["addon_prefs"]
    assert EXT_MODULE not in installed["before"]["addon_prefs"]
    classes = set(installed["ext_classes"])
    assert {"GBUFFER_OT_install_diffusion_deps", "GBUFFER_OT_remove_diffusion_deps"} <= classes
    assert installed["prefs_class"] == "GBufferEditorPreferences"
    # Operators and panels of the Blender workflow (issue 6) register under our module.
    new_types = set(installed["enabled_1"]["types"]) - set(installed["before"]["types"])
    assert classes <= new_types
    assert installed["pref_values"] == {
        "backend_python": "", "device": "AUTO", "precision": "fp16", "model_dir": "",
        "offline_mode": False}
    ext_dir = Path(installed["ext_dir"])
    assert ext_dir == Path(installed["extensions_dir"]) / "user_default" / "gbuffer_editor"
    assert (ext_dir / "backend" / "contract.py").is_file()
    # The default model folder is the extension's user folder, created on demand.
    assert Path(installed["model_dir"]).is_dir()
    assert Path(installed["model_dir"]).name == "models"
    assert "gbuffer_editor" in installed["model_dir"]


def test_ext_classes_include_workflow_classes(installed):
    # Every operator/panel class defined in the installed operators/ and panels/ packages
    # is registered while enabled.
    import ast

    ext_dir = Path(installed["ext_dir"])
    defined = set()
    for sub in ("operators", "panels"):
        for py in (ext_dir / sub).rglob("*.py"):
            for node in ast.parse(py.read_text()).body:
                if isinstance(node, ast.ClassDef) and re.match(r"^GBUFFER_(OT|PT|MT|UL)_", node.name):
                    defined.add(node.name)
    assert defined <= set(installed["ext_classes"]), sorted(defined - set(installed["ext_classes"]))


def test_preferences_draw(installed):
    props = {d[1] for d in installed["drawn"] if d[0] == "prop" and len(d) > 1}
    assert {"backend_python", "device", "precision", "model_dir", "offline_mode", "torch_index_url"} <= props
    operators = {d[1] for d in installed["drawn"] if d[0] == "operator" and len(d) > 1}
    assert {"gbuffer.install_diffusion_deps", "gbuffer.remove_diffusion_deps"} <= operators


def test_online_access_respected(installed):
    assert installed["online"] is False
    assert installed["refused"] is not None
    assert "poll" in installed["refused"] or "online" in installed["refused"].lower()


@pytest.mark.parametrize("state", ["disabled_1", "disabled_2"])
def test_disable_leaves_nothing_behind(installed, state):
    before, after = installed["before"], installed[state]
    assert EXT_MODULE not in after["addon_prefs"]
    assert sorted(set(after["types"]) - set(before["types"])) == []
    assert after["handlers"] == before["handlers"]
    assert after["props"] == before["props"]
    assert installed["live_timers_" + state[-1]] == []


def test_enable_again_restores_everything(installed):
    assert installed["enabled_2"]["types"] == installed["enabled_1"]["types"]
    assert installed["enabled_2"]["props"] == installed["enabled_1"]["props"]
    assert EXT_MODULE in installed["enabled_2"]["addon_prefs"]


DEFAULT_PATH_SCRIPT = r'''
import os, sys
ext_dir, site = sys.argv_ext, sys.argv_site
# The installed copy first; then Blender's wheel folder (it holds no numpy, so numpy
# still comes from the interpreter, as it does inside Blender).
sys.path[:0] = [ext_dir, site]
import numpy as np
import OpenEXR, av, onnxruntime, cv2, google.protobuf, flatbuffers, packaging
import huggingface_hub, yaml, httpx2, filelock
mods = {{m.__name__: m.__file__ for m in (OpenEXR, av, onnxruntime, cv2, google.protobuf,
                                          flatbuffers, packaging, huggingface_hub, yaml, httpx2, filelock)}}

import backend
from backend import contract
# The tests' own fixtures (tests/gbuffer_util.py), appended LAST: the `backend` they import
# is still the installed copy's.
sys.path.append(sys.argv_tests)
from gbuffer_util import sphere_frames, write_sequence
h, w = 48, 64
frame = sphere_frames(h, w, 1)[0]
path = contract.frame_path(write_sequence(os.path.join(sys.argv_tmp, "gbuf"), [frame]), 1)
back = contract.read_frame(path)
errs = {{k: float(np.abs(getattr(back, k) - getattr(frame, k)).max())
        for k in ("depth", "normal", "metallic", "roughness")}}

# onnxruntime from the bundled wheel runs a real graph (y = x + 1).
import onnx
from onnx import TensorProto, helper
g = helper.make_graph(
    [helper.make_node("Add", ["x", "one"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
y = sess.run(None, {{"x": np.zeros((2, 3), np.float32)}})[0]

# PyAV from the bundled wheel encodes and decodes a tiny clip.
clip = os.path.join(sys.argv_tmp, "tiny.mp4")
with av.open(clip, "w") as c:
    s = c.add_stream("mpeg4", rate=12)
    s.width, s.height, s.pix_fmt = w, h, "yuv420p"
    for i in range(4):
        img = np.zeros((h, w, 3), np.uint8); img[:, : 8 * (i + 1)] = 200
        for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
with av.open(clip) as c:
    decoded = [f.to_ndarray(format="rgb24").shape for f in c.decode(video=0)]

emit_result({{"modules": mods, "numpy": np.__file__, "backend": backend.__file__,
             "errs": errs, "y": y.tolist(), "decoded": decoded, "clip": clip,
             "exr": str(path), "passes": sorted(back.arrays())}})
'''


@pytest.fixture(scope="module")
def default_path(installed, tmp_path_factory):
    """Runs DEFAULT_PATH_SCRIPT from the installed copy; returns (report, ext_dir, env, tmp)."""
    tmp_path = tmp_path_factory.mktemp("default_path")
    ext_dir = Path(installed["ext_dir"])
    dependencies = checkout_module("addon.dependencies")
    site = dependencies.blender_wheels_site_dir(installed["extensions_dir"])
    assert installed["enabled_3"]
    assert site.is_dir()
    for top in ("OpenEXR", "av", "onnxruntime", "cv2", "google", "flatbuffers", "packaging", "huggingface_hub",
                "yaml", "httpx2"):
        assert list(site.glob(top + "*")), (top, sorted(p.name for p in site.iterdir()))
    assert not list(site.glob("numpy*")), "Blender's numpy must not be shadowed"

    code = "import sys; sys.argv_ext, sys.argv_site, sys.argv_tmp, sys.argv_tests = {!r}, {!r}, {!r}, {!r}\n".format(
        str(ext_dir), str(site), str(tmp_path), str(REPO / "tests")) + DEFAULT_PATH_SCRIPT.format()
    res = bpy_util.run_bpy(code, root=installed["root"], cwd=ext_dir)
    res["site"] = str(site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ext_dir), str(site)]))
    return res, ext_dir, env, tmp_path


#: Runs ``python -m backend ARGS`` with torch and diffusers made unimportable.
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.modules['diffusers'] = None; "
            "sys.argv = ['backend'] + sys.argv[1:]; runpy.run_module('backend', run_name='__main__', alter_sys=True)")


def test_installed_wheels_and_backend_work(default_path):
    res, ext_dir, env, tmp_path = default_path
    site = Path(res["site"])
    for name, file in res["modules"].items():
        assert Path(file).is_relative_to(site), (name, file)
    assert not Path(res["numpy"]).is_relative_to(site)
    assert Path(res["backend"]).is_relative_to(ext_dir)
    assert res["errs"]["depth"] < 1e-5  # float32: exact
    assert res["errs"]["normal"] < 1e-3 and res["errs"]["metallic"] < 1e-3 and res["errs"]["roughness"] < 1e-3  # half
    assert res["passes"] == ["Albedo", "Combined", "Confidence", "Depth", "Metallic", "Normal", "Roughness"]
    assert res["y"] == [[1.0] * 3] * 2
    assert res["decoded"] == [[48, 64, 3]] * 4


def test_backend_cli_and_restyle_from_installed_copy(default_path):
    """``python -m backend`` from the installed copy with the installed wheels."""
    res, ext_dir, env, tmp_path = default_path
    # GBUFFER_EXTRA_SITE (on-demand diffusion packages) is appended to sys.path: a numpy
    # planted there must not shadow the interpreter's own.
    extra = tmp_path / "extra_site"
    (extra / "numpy").mkdir(parents=True)
    (extra / "numpy" / "__init__.py").write_text("raise ImportError('shadowed numpy imported')\n")
    env = dict(env, GBUFFER_EXTRA_SITE=str(extra))
    proc = subprocess.run([sys.executable, "-m", "backend", "--help"], cwd=ext_dir, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "decompose" in proc.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import runpy, sys; sys.argv = ['backend', '--help'];\n"
         "try:\n    runpy.run_module('backend', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "import numpy; print(sys.path.index({!r}) == len(sys.path) - 1, numpy.__file__)".format(str(extra))],
        cwd=ext_dir, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    last, numpy_file = probe.stdout.split()[-2:]
    assert last == "True" and not numpy_file.startswith(str(extra))
    # The embedded renderer (default path) restyles the frame DEFAULT_PATH_SCRIPT wrote, from the
    # installed copy with the installed wheels, with torch and diffusers made unimportable.
    restyled = tmp_path / "restyled"
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH, "restyle", str(Path(res["exr"]).parent), "--prompt", "dense fog",
         "--out", str(restyled), "--no-mp4"],
        cwd=ext_dir, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "done" and events[-1]["written"] == 1, events
    assert (restyled / "restyle_0001.exr").stat().st_size > 0


def test_decompose_from_installed_copy(default_path):
    """The embedded estimator (default path) decomposes a tiny clip from the installed copy."""
    res, ext_dir, env, tmp_path = default_path
    # the committed weights (backend/model/weights/embedded.onnx) ship in the zip
    assert (ext_dir / "backend" / "model" / "weights" / "embedded.onnx").is_file()
    out = tmp_path / "decomposed"
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH, "decompose", res["clip"], "--out", str(out),
         "--estimator", "embedded"],
        cwd=ext_dir, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    frames = sorted(out.glob("gbuffer_*.exr"))
    assert [f.name for f in frames] == ["gbuffer_{:04d}.exr".format(i) for i in range(1, 5)]
    import numpy as np

    from backend import contract

    frame = contract.read_frame(frames[-1], validate=True)
    assert frame.shape == (48, 64)
    assert frame.meta["estimator"] == "embedded"
    assert np.all(frame.depth > 0)
    assert np.allclose(np.linalg.norm(frame.normal, axis=-1), 1.0, atol=1e-2)


ON_DEMAND_SCRIPT = r'''
import os, sys
import bpy, addon_utils

module = "{module}"
addon_utils.enable(module, default_set=True)
pkg = sys.modules[module]
prefs = bpy.context.preferences.addons[module].preferences
prefs.torch_index_url = {index!r}  # a local index that holds stand-ins for the pins
bpy.context.preferences.system.use_online_access = True
assert bpy.app.online_access
site = pkg.addon.preferences.diffusion_site_dir()
result = bpy.ops.gbuffer.install_diffusion_deps()  # no window: runs pip and waits
listing = sorted(os.listdir(site)) if os.path.isdir(site) else None
marker = pkg.addon.dependencies.read_marker(site)
partial_left = os.path.exists(site + ".partial")
removed = bpy.ops.gbuffer.remove_diffusion_deps()
emit_result({{"result": sorted(result), "listing": listing, "marker": marker, "site": site,
              "partial_left": partial_left, "removed": sorted(removed),
              "exists_after_remove": os.path.exists(site)}})
'''


def test_on_demand_install_in_blender(installed, tmp_path):
    """The preferences operator runs pip into the user folder and leaves no numpy there.

    Offline: the "package index" is a local folder with stand-in wheels for every pin of
    dependencies.DIFFUSION_REQUIREMENTS (each depends on numpy) and for numpy itself.
    """
    from test_extension_dependencies import _make_wheel

    dependencies = checkout_module("addon.dependencies")
    index = tmp_path / "index"
    for req in dependencies.DIFFUSION_REQUIREMENTS + ("numpy==1.26.4",):
        name, version = req.split("==")
        norm = name.lower().replace("-", "_")
        (index / name.lower()).mkdir(parents=True)
        package = "numpy" if name == "numpy" else norm + "_standin"
        whl = _make_wheel(index / name.lower(), norm, version, {package + "/__init__.py": ""},
                          requires=[] if name == "numpy" else ["numpy"])
        (index / name.lower() / "index.html").write_text('<a href="{0}">{0}</a>'.format(whl.name))
    code = ON_DEMAND_SCRIPT.format(module=EXT_MODULE, index=index.as_uri())
    # Only the stand-in index: no pip configuration, find-links or extra indexes.
    env = {"PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}
    res = bpy_util.run_bpy(code, root=installed["root"], env=env)
    assert res["result"] == ["FINISHED"], res["stderr"][-3000:]
    assert Path(res["site"]).name == "site-packages-py{}.{}".format(*sys.version_info[:2])
    assert "gbuffer_editor" in res["site"]
    assert "torch_standin" in res["listing"] and "diffusers_standin" in res["listing"]
    assert not [n for n in res["listing"] if n.startswith("numpy")], res["listing"]
    assert res["marker"]["requirements"] == list(dependencies.DIFFUSION_REQUIREMENTS)
    assert not res["partial_left"]
    assert res["removed"] == ["FINISHED"] and not res["exists_after_remove"]


def test_depth_anything_from_installed_copy(default_path):
    """Issue 15's Done-when from the zip: the installed copy decomposes with
    ``depth-anything-v2-small`` from a models folder holding a tiny random-weight replica of
    the published ONNX export (hub-cache layout), offline, with torch, diffusers *and*
    huggingface_hub made unimportable (the zip ships none of them): the model is read from
    the folder directly."""
    import numpy as np

    import onnx_depth_util as odu
    from backend import contract
    from backend.estimators.onnx_depth import MODELS

    res, ext_dir, env, tmp_path = default_path
    spec = MODELS["depth-anything-v2-small"]
    onnx_file = odu.export_replica(tmp_path / "da_export" / "model.onnx", 56, 84)
    cache = tmp_path / "da_models"
    odu.install_in_cache(cache, spec.repo_id, spec.files["fp32"], onnx_file)
    no_hub = NO_TORCH.replace("sys.modules['diffusers'] = None;",
                              "sys.modules['diffusers'] = None; sys.modules['huggingface_hub'] = None;")
    out = tmp_path / "da_decomposed"
    proc = subprocess.run(
        [sys.executable, "-c", no_hub, "decompose", res["clip"], "--out", str(out),
         "--estimator", "depth-anything-v2-small"],
        cwd=ext_dir, env=dict(env, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    frames = sorted(out.glob("gbuffer_*.exr"))
    assert [f.name for f in frames] == ["gbuffer_{:04d}.exr".format(i) for i in range(1, 5)]
    frame = contract.read_frame(frames[0], validate=True)
    assert frame.meta["estimator"] == "depth-anything-v2-small"
    assert np.all(frame.depth > 0) and float(frame.depth.std()) > 0
    assert any("depth-anything" in str(k) for k in frame.meta.get("models", {})), frame.meta.get("models")


#: Run from the installed copy: the network cut (every connect counted and refused), then
#: the Depth Anything estimator resolving the replica through the bundled huggingface_hub.
HUB_SCRIPT = r"""
import json, os, socket, sys, types
attempts = []
def refuse(*a, **k):
    attempts.append(1)
    raise OSError("network cut by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
import numpy as np
import huggingface_hub
from backend.estimators.onnx_depth import DepthAnythingEstimator, DepthModelError
est = DepthAnythingEstimator(cache_dir=sys.argv[1], materials="none")
depth = est.predict(np.full((56, 84, 3), 0.3, np.float32)).depth
out = {"hub": huggingface_hub.__file__, "revision": est.revision, "depth_ok": bool(np.all(depth > 0)),
       "via_hub": "huggingface_hub.file_download" in sys.modules, "offline_attempts": len(attempts)}
# the positive control: online (HF_HUB_OFFLINE off), an empty folder makes it try to connect
import huggingface_hub.constants
import huggingface_hub.utils._http as hf_http
huggingface_hub.constants.HF_HUB_OFFLINE = False
os.environ["HF_HUB_OFFLINE"] = "0"
hf_http.time = types.SimpleNamespace(sleep=lambda s: None, time=hf_http.time.time, monotonic=hf_http.time.monotonic)
try:
    DepthAnythingEstimator(cache_dir=sys.argv[2], materials="none", local_files_only=False)
except DepthModelError as e:
    out["online_error"] = str(e)
out["online_attempts"] = len(attempts)
print(json.dumps(out))
"""


def test_huggingface_hub_from_installed_wheels(default_path):
    """The zip ships huggingface_hub (the Models preferences' Download button needs it): the
    installed copy imports it from its own wheels, resolves a replica of Depth Anything V2
    Small through it offline without a single connection attempt (socket layer cut), and
    only tries the network when downloads are on (the cut refuses it: one clear line)."""
    import onnx_depth_util as odu
    from backend.estimators.onnx_depth import MODELS

    res, ext_dir, env, tmp_path = default_path
    spec = MODELS["depth-anything-v2-small"]
    cache = tmp_path / "hub_models"
    odu.install_in_cache(cache, spec.repo_id, spec.files["fp32"],
                         odu.export_replica(tmp_path / "hub_export" / "model.onnx", 56, 84))
    proc = subprocess.run([sys.executable, "-c", HUB_SCRIPT, str(cache), str(tmp_path / "hub_empty")],
                          cwd=ext_dir, env=dict(env, HF_HUB_OFFLINE="1"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["hub"]).is_relative_to(Path(res["site"])), out["hub"]
    assert out["via_hub"] and out["revision"] == odu.COMMIT and out["depth_ok"]
    assert out["offline_attempts"] == 0
    assert out["online_attempts"] > 0
    assert "\n" not in out["online_error"] and "download into" in out["online_error"]
