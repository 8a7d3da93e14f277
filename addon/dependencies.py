# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the backend's Python dependencies come from (no ``bpy`` in this module).

Two sources, see README "Where dependencies come from":

* **Default path** (embedded estimator and renderer): the wheels bundled in the
  extension zip (``requirements-wheels.txt``: OpenEXR, PyAV, onnxruntime,
  opencv-python-headless and their small pure-Python deps). Blender installs them
  into ``<extensions>/.local/lib/pythonX.Y/site-packages`` and appends that folder to
  ``sys.path``. numpy is never bundled: Blender's own numpy is used.
* **Diffusion backends** (torch, diffusers, ...): either an external Python chosen in
  the preferences, or an on-demand install into the extension's user folder
  (:func:`diffusion_site_dir`) made by :func:`pip_install_command`. That folder never
  contains numpy (:func:`remove_shadowing_packages`) and is *appended* to ``sys.path``
  of the backend process (:data:`EXTRA_SITE_ENV`), so Blender's numpy is never replaced
  or shadowed.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

# the worker appends the on-demand folder with the backend's own function (re-exported here)
from ..backend.sitepaths import EXTRA_SITE_ENV, append_extra_site_paths  # noqa: F401

#: Pinned top-level packages of the diffusion backends (same versions as requirements.txt).
#: torch is pinned exactly: never install an unpinned torch.
DIFFUSION_REQUIREMENTS = (
    "torch==2.13.0",
    "diffusers==0.42.1",
    "transformers==5.24.0",
    "safetensors==0.8.0",
    "huggingface-hub==2.4.0",
    "accelerate==1.15.0",
)

#: Distributions that must never be installed next to the extension: Blender ships them.
SHADOWING_DISTRIBUTIONS = ("numpy",)

#: Marker written after a successful on-demand install (JSON: requirements, python).
MARKER_NAME = "gbuffer_install.json"


def python_tag(version_info: Sequence[int] = sys.version_info) -> str:
    """``"py3.11"`` for the running (or given) Python: installed binaries are per version."""
    return "py{:d}.{:d}".format(version_info[0], version_info[1])


def diffusion_site_dir(user_dir: os.PathLike, version_info: Sequence[int] = sys.version_info) -> Path:
    """Folder for on-demand diffusion packages: ``<user_dir>/site-packages-py3.11``.

    ``user_dir`` is the extension's user folder
    (``bpy.utils.extension_path_user(__package__)`` inside Blender).
    """
    return Path(user_dir) / ("site-packages-" + python_tag(version_info))


def pip_install_command(
    python: str,
    target: os.PathLike,
    *,
    requirements: Iterable[str] = DIFFUSION_REQUIREMENTS,
    numpy_version: Optional[str] = None,
    index_url: str = "",
    extra_args: Sequence[str] = (),
) -> List[str]:
    """The pip command line that installs ``requirements`` into ``target``.

    ``numpy_version`` (normally Blender's ``numpy.__version__``) becomes a constraint so
    that everything resolved is compatible with the numpy that Blender already has;
    the numpy copy pip puts into ``target`` is deleted afterwards by
    :func:`remove_shadowing_packages`. ``index_url`` replaces PyPI (e.g. the PyTorch CUDA
    or CPU index); empty means PyPI.
    """
    cmd = [
        python, "-m", "pip", "install",
        "--target", str(target),
        "--upgrade",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
    ]
    if numpy_version:
        # A constraints file would need a temp file; pinning numpy as a requirement
        # has the same resolution effect and the copy is removed afterwards.
        cmd.append("numpy==" + numpy_version)
    if index_url:
        cmd += ["--index-url", index_url]
    cmd += list(extra_args)
    cmd += list(requirements)
    return cmd


def remove_shadowing_packages(target: os.PathLike) -> List[str]:
    """Delete every distribution of :data:`SHADOWING_DISTRIBUTIONS` from ``target``.

    Removes the package folder and its ``*.dist-info`` / ``*.libs`` folders (console
    scripts in ``bin/`` are harmless and stay). Returns the names removed, sorted.
    """
    target = Path(target)
    removed = []
    if not target.is_dir():
        return removed
    for entry in target.iterdir():
        name = entry.name
        for dist in SHADOWING_DISTRIBUTIONS:
            if (
                name == dist
                or name == dist + ".libs"
                or (name.startswith(dist + "-") and name.endswith((".dist-info", ".egg-info")))
            ):
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
                removed.append(name)
    return sorted(removed)


def write_marker(target: os.PathLike, requirements: Iterable[str]) -> Path:
    """Record a finished install (atomic write) and return the marker path."""
    target = Path(target)
    path = target / MARKER_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "requirements": list(requirements),
        "python": python_tag(),
    }, indent=1))
    os.replace(tmp, path)
    return path


def read_marker(target: os.PathLike) -> Optional[dict]:
    """The marker of a finished install, or ``None`` when there is none (or it is unreadable)."""
    try:
        return json.loads((Path(target) / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


def blender_wheels_site_dir(extensions_dir: os.PathLike, version_info: Sequence[int] = sys.version_info) -> Path:
    """Where Blender installs the wheels of enabled extensions.

    ``extensions_dir`` is ``bpy.utils.user_resource('EXTENSIONS')``; the result is
    ``<extensions_dir>/.local/lib/python3.11/site-packages`` (the same rule as
    ``addon_utils._extension_sync_wheels``).
    """
    return (
        Path(extensions_dir) / ".local" / "lib"
        / "python{:d}.{:d}".format(version_info[0], version_info[1]) / "site-packages"
    )
