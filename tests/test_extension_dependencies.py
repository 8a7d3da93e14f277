"""addon/dependencies.py: the on-demand diffusion install never leaves numpy next to Blender's.

Runs a real ``pip install --target`` (offline, from wheels built here) with the exact
command line the preferences operator uses. No bpy needed.
"""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from blender_workflow_util import checkout_module

REPO = Path(__file__).resolve().parent.parent
dependencies = checkout_module("addon.dependencies")


def _make_wheel(folder: Path, name: str, version: str, files: dict, requires=()) -> Path:
    """A minimal valid pure-Python wheel (PEP 427) with a hashed RECORD."""
    dist = "{}-{}.dist-info".format(name, version)
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n".format(name, version)
    meta += "".join("Requires-Dist: {}\n".format(r) for r in requires)
    contents = dict(files)
    contents[dist + "/METADATA"] = meta
    contents[dist + "/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("{},sha256={},{}".format(path, digest, len(data)))
    record.append(dist + "/RECORD,,")
    contents[dist + "/RECORD"] = "\n".join(record) + "\n"
    whl = folder / "{}-{}-py3-none-any.whl".format(name, version)
    with zipfile.ZipFile(whl, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return whl


def test_pinned_like_requirements_txt():
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    for req in dependencies.DIFFUSION_REQUIREMENTS:
        name, version = req.split("==")
        assert pins[name.lower()] == version, req
    assert "torch==2.13.0" in dependencies.DIFFUSION_REQUIREMENTS
    assert not any(r.startswith("numpy") for r in dependencies.DIFFUSION_REQUIREMENTS)


def test_install_command_shape(tmp_path):
    cmd = dependencies.pip_install_command("/py", tmp_path / "site", numpy_version="1.26.4",
                                           index_url="https://download.pytorch.org/whl/cu128")
    assert cmd[:4] == ["/py", "-m", "pip", "install"]
    assert cmd[cmd.index("--target") + 1] == str(tmp_path / "site")
    assert cmd[cmd.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu128"
    assert "numpy==1.26.4" in cmd and "torch==2.13.0" in cmd
    assert "--index-url" not in dependencies.pip_install_command("/py", tmp_path)


def test_real_pip_install_then_numpy_removed(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _make_wheel(wheels, "gbtestpkg", "1.0", {"gbtestpkg/__init__.py": "VALUE = 42\n"}, requires=["numpy>=1.20"])
    _make_wheel(wheels, "numpy", "1.26.4", {"numpy/__init__.py": "__version__ = '1.26.4'\n"})
    target = dependencies.diffusion_site_dir(tmp_path / "user")
    assert target.name == "site-packages-py{}.{}".format(*sys.version_info[:2])

    cmd = dependencies.pip_install_command(
        sys.executable, target, requirements=["gbtestpkg==1.0"], numpy_version="1.26.4",
        extra_args=["--no-index", "--find-links", str(wheels)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "numpy" / "__init__.py").is_file()  # pip put a copy there...
    (target / "numpyro").mkdir()  # ...and an unrelated package whose name starts alike

    removed = dependencies.remove_shadowing_packages(target)
    assert removed == ["numpy", "numpy-1.26.4.dist-info"]
    names = sorted(p.name for p in target.iterdir())
    assert "gbtestpkg" in names and "numpyro" in names
    assert not [n for n in names if n == "numpy" or n.startswith("numpy-")]

    dependencies.write_marker(target, ["gbtestpkg==1.0"])
    assert dependencies.read_marker(target)["requirements"] == ["gbtestpkg==1.0"]
    assert dependencies.read_marker(tmp_path / "nowhere") is None


def test_extra_site_paths_go_last(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    path = ["/site-packages"]
    env = {dependencies.EXTRA_SITE_ENV: os.pathsep.join([str(a), str(tmp_path / "missing"), str(b)])}
    assert dependencies.append_extra_site_paths(env, path) == [str(a), str(b)]
    assert path == ["/site-packages", str(a), str(b)]
    assert dependencies.append_extra_site_paths(env, path) == []  # no duplicates


def test_blender_wheels_site_dir():
    assert dependencies.blender_wheels_site_dir("/ext", (3, 11)) == Path("/ext/.local/lib/python3.11/site-packages")
