#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the extension zips with Blender's own extension CLI (``./dev build``).

Steps:

1. Download the default-path wheels (``requirements-wheels.txt``) for every requested
   platform and for Python 3.11 and 3.13 into ``wheels/<platform>/<python>/``
   (git-ignored; skipped when already there for the same pins).
2. Stage a copy of the source tree in a temporary folder, with the wheels in
   ``wheels/`` and a manifest whose ``platforms`` and ``wheels`` lists are written here.
   The committed ``blender_manifest.toml`` is never modified, so concurrent builds do
   not race on it.
3. Run ``blender_ext.py build --split-platforms`` (found inside the ``bpy`` package of
   the running Python) and ``blender_ext.py validate`` on every zip produced.

Usage: ``python tools/build_extension.py [--platforms linux-x64,windows-x64]
[--output-dir dist] [--offline] [--with-models NAME... [--models-from DIR]]``. Prints the
paths of the zips, one a line.

``--with-models NAME...`` (estimator names, e.g. ``depth-anything-v2-small``) puts those
models' files into the zip under ``models/``, a Hugging Face cache folder
(``models--<org>--<name>/refs/main``, ``snapshots/<commit>/<file>`` as plain files) that
the backend reads before the models folder (``backend.estimators.onnx_depth.BUNDLED_MODELS_DIR``),
with each model's licence text in ``models/LICENSES/<name>.txt``. Only permissive
licences (:data:`PERMISSIVE`) are bundled; any other is refused by name and the build
stops. The files come from the model hub (``huggingface_hub``; ``HF_TOKEN`` as usual)
or, with ``--models-from DIR``, from a local Hugging Face cache folder. When the hub
cannot be reached (or ``--offline`` / ``HF_HUB_OFFLINE=1``) one line says so and the zip
is built without models.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
WHEELS_DIR = REPO / "wheels"
REQUIREMENTS_WHEELS = REPO / "requirements-wheels.txt"

#: Blender platform id -> pip ``--platform`` tags (pip does not expand manylinux_2_x).
PLATFORM_TAGS: Dict[str, Sequence[str]] = {
    "linux-x64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "windows-x64": ("win_amd64",),
    # av and onnxruntime publish macosx_14_0 wheels only: macOS 14+ on Apple Silicon.
    "macos-arm64": ("macosx_14_0_arm64",),
}
#: Python 3.11: Blender 4.2 to 5.0. Python 3.13: Blender 5.1 and later.
PYTHON_VERSIONS = ("3.11", "3.13")

#: Top-level entries never copied into the staging folder (the manifest's
#: ``paths_exclude_pattern`` filters the rest; this only avoids copying big folders).
_PRUNE_TOP = {".git", "wheels", "dist", "tests", "training", "benchmarks", ".ci", "out",
              "demo_output", "data", ".pytest_cache", "tools", "docs"}


class BuildError(RuntimeError):
    pass


#: SPDX ids of the licences whose weights may go into the zip
PERMISSIVE = ("Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause")
#: licence texts (tools/licences/<SPDX>.txt)
LICENCE_DIR = Path(__file__).resolve().parent / "licences"
#: models that exist upstream but are never bundled: name -> licence
NOT_PERMISSIVE = {
    "depth-anything-v2-base": "CC-BY-NC-4.0", "depth-anything-v2-large": "CC-BY-NC-4.0",
    "video-depth-anything-base": "CC-BY-NC-4.0", "video-depth-anything-large": "CC-BY-NC-4.0",
    "marigold": "the Marigold weights' own licences (not checked: not bundled)",
    "controlnet": "CreativeML-OpenRAIL-M (Stable Diffusion 1.5)",
}


def bundle_specs(names: Sequence[str]):
    """The registry entries (:class:`backend.estimators.onnx_depth.DepthModel`) of ``names``.

    Raises:
        BuildError: an unknown name, or a licence not in :data:`PERMISSIVE` (named).
    """
    sys.path.insert(0, str(REPO))
    try:
        from backend.estimators.onnx_depth import MODELS
        from backend.estimators.video_depth import VIDEO_MODELS
    finally:
        sys.path.remove(str(REPO))
    known = dict(MODELS, **VIDEO_MODELS)
    specs = []
    for name in names:
        if name in NOT_PERMISSIVE:
            raise BuildError("{} is {}: only permissively licensed weights ({}) go into the zip".format(
                name, NOT_PERMISSIVE[name], ", ".join(PERMISSIVE)))
        if name not in known:
            raise BuildError("unknown model {!r} for --with-models; known: {}".format(name, ", ".join(sorted(known))))
        spec = known[name]
        if spec.licence not in PERMISSIVE:
            raise BuildError("{} is {}: only permissively licensed weights ({}) go into the zip".format(
                name, spec.licence, ", ".join(PERMISSIVE)))
        specs.append(spec)
    return specs


def _fetch_model(spec, files: Sequence[str], models_from) -> Dict[str, Path]:
    """``{file: local path}`` of ``spec``'s files, from ``models_from`` (a hub-cache
    folder) or downloaded into the user's Hugging Face cache."""
    sys.path.insert(0, str(REPO))
    try:
        from backend.hub_cache import cached_file
    finally:
        sys.path.remove(str(REPO))
    got = {}
    for f in files:
        if models_from is not None:
            hit = cached_file(models_from, spec.repo_id, f)
            if hit is None:
                raise BuildError("{}: {} is not in {} (a Hugging Face cache folder)".format(spec.key, f, models_from))
            got[f] = hit
        else:
            from huggingface_hub import hf_hub_download

            got[f] = Path(hf_hub_download(spec.repo_id, f))
    return got


def stage_models(stage: Path, names: Sequence[str], models_from=None, offline: bool = False) -> List[str]:
    """Copy ``names``' files and licences into ``stage/models``; returns the names bundled.

    Without ``models_from``, when the hub cannot be reached (or ``offline``), prints one
    line to stderr and bundles nothing.

    Raises:
        BuildError: see :func:`bundle_specs`; a file missing from ``models_from``.
    """
    specs = bundle_specs(names)
    if not specs:
        return []
    fetched = {}
    for spec in specs:
        files = [spec.files["fp32"]] + list(spec.extra_files)
        if models_from is None and not spec.published:
            raise BuildError("{}: no ONNX export is published to download; export it (docs/models.md) into a "
                             "models folder and pass --models-from that folder".format(spec.key))
        if models_from is None and (offline or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")):
            print("build_extension: offline: building without the models {}".format(", ".join(names)), file=sys.stderr)
            return []
        try:
            fetched[spec.key] = (spec, _fetch_model(spec, files, models_from))
        except BuildError:
            raise
        except Exception as e:  # noqa: BLE001 - no network, hub down, ...: one line, no models
            why = " ".join("{}: {}".format(type(e).__name__, e).split())[:200]
            print("build_extension: cannot reach the model hub for {} ({}): building without the models {}".format(
                spec.repo_id, why, ", ".join(names)), file=sys.stderr)
            return []
    root = stage / "models"
    for key, (spec, files) in fetched.items():
        repo = root / ("models--" + spec.repo_id.replace("/", "--"))
        snap_commit = None
        for f, path in files.items():
            parts = Path(path).parts
            snap_commit = parts[len(parts) - 1 - parts[::-1].index("snapshots") + 1] if "snapshots" in parts else "local"
            dst = repo / "snapshots" / snap_commit / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst)  # the file itself, never a link: zips hold no links
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(snap_commit or "local")
        licence = LICENCE_DIR / "{}.txt".format(spec.licence)
        if not licence.is_file():
            raise BuildError("{}: no text of its licence {} in {}".format(key, spec.licence, LICENCE_DIR))
        (root / "LICENSES").mkdir(parents=True, exist_ok=True)
        header = ("{} ({})\nweights: https://huggingface.co/{} at commit {}\nsource: {}\nlicence: {}\n\n"
                  .format(spec.label, key, spec.repo_id, snap_commit, spec.source, spec.licence))
        (root / "LICENSES" / "{}.txt".format(key)).write_text(header + licence.read_text())
    return list(fetched)


def blender_ext_path(python: str = sys.executable) -> Path:
    """``bl_pkg/cli/blender_ext.py`` inside the ``bpy`` package installed for ``python``."""
    if python == sys.executable:
        spec = importlib.util.find_spec("bpy")
        roots = list(spec.submodule_search_locations or []) if spec else []
    else:
        out = subprocess.run(
            [python, "-c", "import importlib.util as u; print(*u.find_spec('bpy').submodule_search_locations, sep='\\n')"],
            check=True, capture_output=True, text=True)
        roots = out.stdout.split()
    for root in roots:
        hits = sorted(glob.glob(os.path.join(root, "*", "scripts", "addons_core", "bl_pkg", "cli", "blender_ext.py")))
        if hits:
            return Path(hits[-1])
    raise BuildError("bpy is not installed for {}: run ./dev setup".format(python))


def _requirements_digest() -> str:
    return hashlib.sha256(REQUIREMENTS_WHEELS.read_bytes()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path):
    """Exclusive lock on ``path`` (POSIX; no-op elsewhere) so concurrent builds share the cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:
            pass
        yield


def download_wheels(platform: str, python_version: str, *, offline: bool = False) -> List[Path]:
    """Download the pinned wheels for one platform and Python; return their paths (sorted).

    Raises :class:`BuildError` when pip cannot find a wheel, or when ``offline`` and the
    cache is missing or stale.
    """
    if platform not in PLATFORM_TAGS:
        raise BuildError("unknown platform {!r}; known: {}".format(platform, ", ".join(PLATFORM_TAGS)))
    dest = WHEELS_DIR / platform / ("cp" + python_version.replace(".", ""))
    stamp = dest / ".requirements-sha256"
    with _locked(WHEELS_DIR / ".lock"):
        if not (stamp.exists() and stamp.read_text() == _requirements_digest()):
            if offline:
                raise BuildError("wheels for {} / Python {} are not downloaded ({}); run ./dev build once online"
                                 .format(platform, python_version, dest))
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir(parents=True)
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                   "--only-binary=:all:", "--no-deps", "--python-version", python_version,
                   "--dest", str(dest), "-r", str(REQUIREMENTS_WHEELS)]
            for tag in PLATFORM_TAGS[platform]:
                cmd += ["--platform", tag]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BuildError("pip download failed for {} / Python {}:\n{}".format(
                    platform, python_version, proc.stderr[-3000:]))
            stamp.write_text(_requirements_digest())
        wheels = sorted(dest.glob("*.whl"))
    if any(w.name.lower().startswith(("numpy-", "torch-")) for w in wheels):
        raise BuildError("numpy/torch must never be bundled: check requirements-wheels.txt")
    return wheels


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link (fast, for the read-only wheels) or copy when linking is impossible."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_tree(src_root: Path, dst_root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(src_root):
        rel = Path(dirpath).relative_to(src_root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d != "__pycache__" and not d.startswith(".venv")
            and not (rel == Path(".") and d in _PRUNE_TOP)
        )
        for name in filenames:
            if name.endswith(".pyc") or (rel == Path(".") and name in _PRUNE_TOP):
                continue  # (a git worktree's `.git` is a file)
            # Copy, never hard-link: the staged manifest is rewritten in place.
            (dst_root / rel).mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(dirpath) / name, dst_root / rel / name)


def staged_manifest(text: str, platforms: Sequence[str], wheel_names: Sequence[str]) -> str:
    """The manifest text with ``platforms`` replaced and a ``wheels`` list added."""
    plat_line = "platforms = [{}]".format(", ".join('"{}"'.format(p) for p in platforms))
    text, n = re.subn(r"(?m)^platforms\s*=\s*\[[^\]]*\]", plat_line, text)
    if n != 1:
        raise BuildError("blender_manifest.toml must have exactly one `platforms = [...]` line")
    if re.search(r"(?m)^wheels\s*=", text):
        raise BuildError("blender_manifest.toml must not list wheels: the build writes them")
    wheels = "wheels = [\n{}]\n".format("".join('  "./wheels/{}",\n'.format(w) for w in wheel_names))
    return text.replace(plat_line, plat_line + "\n\n" + wheels.rstrip("\n"), 1)


def build(platforms: Sequence[str], output_dir: os.PathLike, *, offline: bool = False,
          python_versions: Sequence[str] = PYTHON_VERSIONS, with_models: Sequence[str] = (),
          models_from=None) -> List[Path]:
    """Build one validated zip per platform into ``output_dir``; return their paths.
    ``with_models`` / ``models_from``: see the module docstring."""
    bundle_specs(with_models)  # refuse a non-permissive or unknown model before any work
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    ext = blender_ext_path()
    wheels: Dict[str, Path] = {}
    for platform in platforms:
        for py in python_versions:
            for w in download_wheels(platform, py, offline=offline):
                wheels[w.name] = w
    with tempfile.TemporaryDirectory(prefix="gbuffer_stage_") as tmp:
        stage = Path(tmp) / "gbuffer_editor"
        _copy_tree(REPO, stage)
        if with_models:
            stage_models(stage, with_models, Path(models_from) if models_from else None, offline=offline)
        for name, path in wheels.items():
            _link_or_copy(path, stage / "wheels" / name)
        manifest = (REPO / "blender_manifest.toml").read_text()
        staged = stage / "blender_manifest.toml"
        staged.unlink()  # a fresh file: never write through to the source tree
        staged.write_text(staged_manifest(manifest, platforms, sorted(wheels)))
        cmd = [sys.executable, str(ext), "build", "--split-platforms",
               "--source-dir", str(stage), "--output-dir", str(output_dir)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError("blender_ext build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    zips = []
    for platform in platforms:
        matches = sorted(output_dir.glob("gbuffer_editor-*-{}.zip".format(platform.replace("-", "_"))))
        if not matches:
            raise BuildError("no zip for {} in {}:\n{}".format(platform, output_dir, proc.stdout[-2000:]))
        zips.append(max(matches, key=lambda p: p.stat().st_mtime))
    for z in zips:
        proc = subprocess.run([sys.executable, str(ext), "validate", str(z)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError("blender_ext validate failed for {}:\n{}{}".format(z, proc.stdout, proc.stderr))
    return zips


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", default=",".join(PLATFORM_TAGS),
                        help="comma-separated Blender platforms (default: %(default)s)")
    parser.add_argument("--output-dir", default=str(REPO / "dist"))
    parser.add_argument("--offline", action="store_true", help="use only wheels already in wheels/")
    parser.add_argument("--with-models", nargs="+", default=[], metavar="NAME",
                        help="put these permissively licensed models (estimator names) into the zip")
    parser.add_argument("--models-from", metavar="DIR",
                        help="take --with-models from this Hugging Face cache folder instead of the hub")
    args = parser.parse_args(argv)
    platforms = [p.strip() for p in args.platforms.split(",") if p.strip()]
    try:
        for z in build(platforms, args.output_dir, offline=args.offline, with_models=args.with_models,
                       models_from=args.models_from):
            print(z)
    except BuildError as ex:
        print("build_extension: " + str(ex), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
