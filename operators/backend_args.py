"""From Blender settings to backend command lines: preferences, output folders, argv.

Shared by the operators and the headless ``--command`` so both start identical workers.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional

import bpy

from ..addon import dependencies, worker
from ..addon import preferences as prefs_mod


class _DefaultPrefs:
    """Stand-in when the add-on preferences are not registered (the source tree imported
    without enabling the add-on). Not the preferences' defaults: offline mode on (the
    preference defaults to off) and fp32 (the preference defaults to fp16)."""

    backend_python = ""
    device = "AUTO"
    precision = "fp32"
    model_dir = ""
    offline_mode = True


def preferences():
    """The add-on preferences (:mod:`..addon.preferences`), or :class:`_DefaultPrefs` when
    they are not registered."""
    prefs = prefs_mod.get_preferences()
    return prefs if prefs is not None else _DefaultPrefs()


def not_ready(kind: str, name: str, prefs=None) -> Optional[str]:
    """Why the ``kind`` (estimator / renderer) ``name`` cannot run, pointing at the
    preferences (Models, Diffusion packages); ``None`` when it can."""
    from ..backend.catalog import readiness

    return readiness(kind, name or "embedded", **prefs_mod.catalog_options(prefs or preferences()))


def chosen_estimator(s, prefs=None) -> str:
    """The estimator Decompose runs for the scene settings ``s``: the dropdown's choice, except
    that the default ``embedded`` with *Best Available Prior* on becomes
    :data:`backend.catalog.BEST_PRIOR` when that can run here (its model in the models
    folder or bundled); the embedded network stays the offline fallback."""
    from ..backend.catalog import BEST_PRIOR

    name = s.estimator or "embedded"
    if name == "embedded" and getattr(s, "use_best_prior", False) and not_ready("estimator", BEST_PRIOR, prefs) is None:
        return BEST_PRIOR
    return name


def worker_python(prefs=None) -> tuple:
    """``(python executable, is_external)``: the preferences' backend Python when set, else
    Blender's own (``sys.executable``)."""
    import sys

    prefs = prefs or preferences()
    py = bpy.path.abspath(getattr(prefs, "backend_python", "") or "")
    if py:
        return py, True
    return sys.executable, False


def worker_environment(prefs=None) -> Dict[str, str]:
    """Worker environment: :func:`worker.worker_env` plus the preferences.

    * ``GBUFFER_EXTRA_SITE``: the on-demand diffusion packages folder (Blender's Python
      only), appended to the END of the worker's ``sys.path`` by
      :func:`..backend.sitepaths.append_extra_site_paths` (``python -m backend``, the
      download worker);
    * ``GBUFFER_EDITOR_MODEL_DIR`` and ``HF_HUB_CACHE``: the models folder, where the
      preferences' Download buttons put models (the Precision preference travels in
      the job's request file, :func:`decompose_request`, :func:`request_from_cli`);
    * ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` = 1 in offline mode or when Blender's
      online access is off.
    """
    prefs = prefs or preferences()
    _, external = worker_python(prefs)
    extra = {}
    user_prefs = None if isinstance(prefs, _DefaultPrefs) else prefs
    try:
        if not external:
            extra[dependencies.EXTRA_SITE_ENV] = prefs_mod.diffusion_site_dir()
        extra["GBUFFER_EDITOR_MODEL_DIR"] = prefs_mod.model_dir(user_prefs) if user_prefs else ""
    except (ValueError, RuntimeError, TypeError):
        pass  # not installed as an extension (e.g. tests importing the source folder)
    if getattr(prefs, "model_dir", ""):
        extra["GBUFFER_EDITOR_MODEL_DIR"] = bpy.path.abspath(prefs.model_dir)
    if extra.get("GBUFFER_EDITOR_MODEL_DIR"):
        # downloaded models (operators/models.py) are a Hugging Face cache in this folder
        extra["HF_HUB_CACHE"] = extra["GBUFFER_EDITOR_MODEL_DIR"]
    else:
        extra.pop("GBUFFER_EDITOR_MODEL_DIR", None)
    if getattr(prefs, "offline_mode", True) or not bpy.app.online_access:
        extra["HF_HUB_OFFLINE"] = "1"
        extra["TRANSFORMERS_OFFLINE"] = "1"
    return worker.worker_env(external_python=external, extra=extra)


def output_root(settings) -> Path:
    """Absolute output folder of the scene settings (``//`` resolved; a temp folder for
    unsaved files)."""
    raw = settings.output_dir or "//gbuffer_editor/"
    if raw.startswith("//") and not bpy.data.filepath:
        import tempfile

        return Path(tempfile.gettempdir()) / "gbuffer_editor" / raw[2:]
    return Path(os.path.abspath(bpy.path.abspath(raw)))


def next_numbered_dir(root: os.PathLike, stem: str) -> Path:
    """The first free ``root/<stem>_NNN`` (001, 002, ...), created empty. Never reuses one."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    pat = re.compile(rf"^{re.escape(stem)}_(\d+)$")
    taken = [int(m.group(1)) for p in root.iterdir() if (m := pat.match(p.name))]
    n = max(taken, default=0) + 1
    while True:
        d = root / f"{stem}_{n:03d}"
        try:
            d.mkdir()
            return d
        except FileExistsError:
            n += 1


def frames_arg(first: int, last: int) -> List[str]:
    """``["--frames", "A-B"]``: 1-based source frame numbers, inclusive (backend CLI convention)."""
    if first < 1 or last < first:
        raise ValueError(f"frame range {first}-{last} is empty")
    return ["--frames", f"{first}-{last}"]


def precision(prefs=None) -> str:
    """The Precision preference (``fp16``/``fp32``) every request carries."""
    return str(getattr(prefs or preferences(), "precision", "fp32")).lower()


def device(prefs=None) -> Optional[str]:
    """The Device preference as the backend names it (``None``: auto)."""
    dev = (getattr(prefs or preferences(), "device", "") or "auto").lower()
    return None if dev == "auto" else dev


def decompose_request(source: str, out_dir: os.PathLike, *, estimator: str, processing_resolution: Optional[int],
                      frames: Optional[tuple] = None, stabilize: bool = False, overwrite: bool = False,
                      cameras: Optional[Dict[str, str]] = None, prefs=None):
    """The :class:`..backend.jobs.request.DecomposeRequest` of the Decompose button.

    Args:
        processing_resolution: the sidebar's Processing Resolution (0 = full size, ``None`` =
            the estimator's own default, as on the command line).
        frames: ``(first, last)`` source frame numbers, inclusive.
        overwrite: replace frames an earlier run with other settings left in ``out_dir``.
        cameras: ``{"cameras": PATH}`` or ``{"camera": "auto"}`` (:func:`.camera_solve.decompose_cameras`).

    Raises:
        ValueError: a bad setting (one line).
    """
    from ..backend.jobs.request import DecomposeRequest

    return DecomposeRequest(
        source, str(out_dir), estimator=estimator, processing_resolution=processing_resolution,
        frames=frames_arg(*frames)[1] if frames is not None else None, stabilize=stabilize, overwrite=overwrite,
        device=device(prefs), precision=precision(prefs), **(cameras or {}))


def request_from_cli(sub: str, args: List[str], prefs=None):
    """The request of backend command line arguments ``args`` of ``decompose`` / ``restyle``
    (the headless ``--command``'s pass-through options, Restyle's extra options), read by
    the backend's own parser, with the preferences' device (unless given) and precision.

    Raises:
        ValueError: arguments the backend's parser refuses (one line).
    """
    import contextlib
    import io

    import argparse

    from ..backend.jobs import decompose_cli, restyle_cli

    mod = decompose_cli if sub == "decompose" else restyle_cli
    parser = argparse.ArgumentParser(prog="python -m backend")
    p = mod.add_parser(parser.add_subparsers(dest="command"))
    p.add_argument("--json", action="store_true")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_args([sub, *map(str, args)])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise ValueError(f"{sub}: {lines[-1] if lines else 'bad arguments'}") from None
    with contextlib.redirect_stderr(io.StringIO()):  # notes about options the renderer ignores
        req = mod.request(parsed)
    changes = {"precision": precision(prefs)}
    if sub == "decompose" and req.device is None:
        changes["device"] = device(prefs)
    if sub == "restyle" and "device" not in req.renderer_options and device(prefs) is not None \
            and req.renderer != "embedded":
        changes["renderer_options"] = {**req.renderer_options, "device": device(prefs)}
    return req.replace(**changes)
