"""``./dev build --with-models NAME...`` (tools/build_extension.py), for real.

The offline path is the real one: this machine cannot reach the model hub, so the build
says so in one line and the zip has no models. The bundling path takes the files from a
local Hugging Face cache folder holding a tiny random-weight replica (``--models-from``);
the zip is then unpacked and the backend from it resolves the model from its own
``models/`` folder, with an empty models folder and downloads off. The published weights
were never bundled here (no network).
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import onnx_depth_util as odu
from tools_util import tool_module

pytestmark = pytest.mark.blender  # blender_ext.py comes from the bpy package

REPO = Path(__file__).resolve().parent.parent
NAME = "depth-anything-v2-small"


def _build(tmp_path, *args, env=None):
    import os

    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "build_extension.py"), "--platforms", "linux-x64",
                           "--output-dir", str(out), *args],
                          capture_output=True, text=True, timeout=900, env=dict(os.environ, **(env or {})))
    return proc, out


def test_non_permissive_and_unknown_models_are_refused(tmp_path):
    be = tool_module("build_extension")
    with pytest.raises(be.BuildError, match="depth-anything-v2-large is CC-BY-NC-4.0"):
        be.bundle_specs([NAME, "depth-anything-v2-large"])
    with pytest.raises(be.BuildError, match="unknown model 'nope'"):
        be.bundle_specs(["nope"])
    assert [s.key for s in be.bundle_specs([NAME])] == [NAME]
    proc, out = _build(tmp_path, "--offline", "--with-models", "controlnet")
    assert proc.returncode == 1 and not list(out.glob("*.zip"))
    (line,) = proc.stderr.strip().splitlines()
    assert "controlnet is CreativeML-OpenRAIL-M" in line and "permissively licensed" in line


def test_without_network_builds_without_models(tmp_path):
    """This machine cannot reach huggingface.co: the build tries, says so in one line and
    builds the zip without models. ``--offline`` says so without trying."""
    import os

    proc, out = _build(tmp_path, "--with-models", NAME, env={"HF_HUB_OFFLINE": "", "HF_HUB_CACHE": str(tmp_path / "hf")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("build_extension:")]
    assert len(lines) == 1 and "cannot reach the model hub" in lines[0] and NAME in lines[0], proc.stderr
    (zip_path,) = out.glob("*.zip")
    with zipfile.ZipFile(zip_path) as zf:
        assert not [n for n in zf.namelist() if n.startswith("models/")]
    be = tool_module("build_extension")
    code = ("import sys; sys.path.insert(0, {!r}); import build_extension as be; from pathlib import Path; "
            "print(be.stage_models(Path(sys.argv[1]), [{!r}], offline=True))").format(str(REPO / "tools"), NAME)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "stage")], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line == f"build_extension: offline: building without the models {NAME}"
    assert be.PERMISSIVE[0] == "Apache-2.0"


def test_models_from_a_local_folder_are_bundled_and_resolved(tmp_path):
    from backend.estimators.onnx_depth import MODELS

    spec = MODELS[NAME]
    cache = tmp_path / "cache"
    onnx_file = odu.export_replica(tmp_path / "m.onnx", 56, 84)
    for f in (spec.files["fp32"],) + tuple(spec.extra_files):
        odu.install_in_cache(cache, spec.repo_id, f, onnx_file if f.endswith(".onnx") else _json(tmp_path, f))
    proc, out = _build(tmp_path, "--offline", "--with-models", NAME, "--models-from", str(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (zip_path,) = out.glob("*.zip")
    base = "models/models--onnx-community--depth-anything-v2-small/"
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        assert base + "refs/main" in names and zf.read(base + "refs/main").decode() == odu.COMMIT
        assert zf.read(base + f"snapshots/{odu.COMMIT}/{spec.files['fp32']}") == onnx_file.read_bytes()
        licence = zf.read(f"models/LICENSES/{NAME}.txt").decode()
        assert "Apache License" in licence and "Version 2.0" in licence and spec.repo_id in licence
        ext = tmp_path / "unpacked"
        zf.extractall(ext)
    # the unpacked extension's backend finds the bundled copy: empty models folder, downloads off
    code = ("import json; from backend.estimators.onnx_depth import DepthAnythingEstimator as E; "
            "from backend import catalog; e = E(materials='none'); "
            "print(json.dumps([str(e.model_path), e.revision, catalog.model_present({!r}, marker={!r})]))"
            ).format(spec.repo_id, spec.files["fp32"])
    (tmp_path / "empty").mkdir()
    import os

    env = dict(os.environ, PYTHONPATH=str(ext), HF_HUB_CACHE=str(tmp_path / "empty"), HF_HUB_OFFLINE="1")
    env.pop("GBUFFER_EDITOR_MODEL_DIR", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ext, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path, rev, present = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(path).is_relative_to(ext / "models") and rev == odu.COMMIT and present


def _json(tmp_path, name):
    p = tmp_path / "files" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"model_type": "depth_anything"}))
    return p
