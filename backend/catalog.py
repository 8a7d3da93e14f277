"""What each estimator and renderer needs, and whether it can run here (no model loaded).

For UIs and ``--help``: :func:`describe_estimators` / :func:`describe_renderers` give one
dict per registered name with a one-line ``summary``, what it ``needs`` (packages,
models, a GPU), its ``state`` in words and ``ready``, and the plugin's declared facts
(:mod:`backend.plugins`: ``licence``, ``windowed``, ``devices``, ``needs_torch``); :func:`readiness` gives the reason
a name cannot run (``None`` when it can), so a job is refused before anything runs.

Checks are cheap: packages by ``importlib.util.find_spec`` (nothing imported), models by
the presence of the snapshot ``refs/main`` names in the Hugging Face cache layout of the
models folder (``models--org--name/snapshots/<rev>/`` with ``model_index.json`` or
``config.json``; :mod:`backend.hub_cache`),
never the network. The models folder is ``cache_dir`` when given, else
``$GBUFFER_EDITOR_MODEL_DIR``, ``$HF_HUB_CACHE``, or huggingface_hub's default cache.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import List, Optional

from . import plugins
from .plugins import PluginInfo

#: the estimator Decompose runs in place of the default ``embedded`` once its model is in
#: the models folder (the add-on's *Best Available Prior*, on by default): pretrained depth
#: (Depth Anything V2 Small, Apache-2.0), materials still from the embedded network
BEST_PRIOR = "depth-anything-v2-small"
#: what the add-on says when it offers :data:`BEST_PRIOR` for download
BEST_PRIOR_OFFER = "Depth Anything V2 Small: better depth (Apache-2.0, 99 MB download)"

#: where an artist gets what is missing (the add-on's preferences)
PACKAGES_WHERE = "Preferences > Add-ons > G-Buffer Editor > Diffusion packages"
MODELS_WHERE = "Preferences > Add-ons > G-Buffer Editor > Models"


def models_folder(cache_dir: Optional[os.PathLike] = None) -> Optional[Path]:
    """The folder searched for downloaded models (see the module docstring)."""
    for c in (cache_dir, os.environ.get("GBUFFER_EDITOR_MODEL_DIR"), os.environ.get("HF_HUB_CACHE")):
        if c:
            return Path(c)
    try:
        from huggingface_hub import constants

        return Path(constants.HF_HUB_CACHE)
    except ImportError:
        return None


def model_present(repo_id: str, cache_dir: Optional[os.PathLike] = None, marker: Optional[str] = None) -> bool:
    """Whether the snapshot ``refs/main`` names (:func:`backend.hub_cache.cached_snapshot`,
    the look-up the loaders use) holds a config (or, given ``marker``, that file, e.g.
    ``onnx/model.onnx``), in the models folder or bundled in the zip (``models/`` at the
    extension's root)."""
    from .hub_cache import cached_snapshot

    bundled = Path(__file__).resolve().parent.parent / "models"  # a release zip's (--with-models)
    for folder in (models_folder(cache_dir), bundled):
        snap = cached_snapshot(folder, repo_id)
        if snap is None:
            continue
        if any((snap / m).exists() for m in ((marker,) if marker else ("model_index.json", "config.json"))):
            return True
    return False


def _package_present(name: str, extra_sites=()) -> bool:
    for site in extra_sites or ():
        if site and (Path(site) / name).is_dir():
            return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _describe(name: str, spec: Optional[PluginInfo], cache_dir, extra_sites=(), check_packages: bool = True,
              registered: bool = True) -> dict:
    """One catalog row (module docstring) from the plugin's facts (:mod:`backend.plugins`)."""
    row = {"name": name, "gpu": False, "licence": "", "windowed": False, "devices": [], "needs_torch": False,
           "missing_packages": [], "missing_models": []}
    if not registered:
        return dict(row, summary="unknown name", needs="unknown", state="not registered", ready=False)
    if spec is None:  # registered by a plug-in at run time: nothing known about it
        return dict(row, summary="registered plug-in", needs="unknown", state="registered", ready=True)
    pk = [p for p in spec.packages if check_packages and not _package_present(p, extra_sites)]
    md = [m if isinstance(m, str) else m[0] for m in spec.models
          if not (model_present(m, cache_dir) if isinstance(m, str) else model_present(m[0], cache_dir, m[1]))]
    needs = []
    if spec.gpu:
        needs.append("a GPU (CPU works, slowly)")
    if spec.packages:
        needs.append("packages " + ", ".join(spec.packages))
    if spec.models:
        n = len(spec.models)
        needs.append(f"{n} downloaded model" + ("s" if n > 1 else ""))
    if pk or md:
        state = "missing " + "; ".join(filter(None, [("packages " + ", ".join(pk)) if pk else "",
                                                      ("models " + ", ".join(md)) if md else ""]))
    else:
        state = "ready"
    return dict(row, summary=spec.summary + ".", needs=", ".join(needs) or "nothing extra", state=state,
                ready=not (pk or md), missing_packages=pk, missing_models=md, gpu=spec.gpu, licence=spec.licence,
                windowed=spec.windowed, devices=list(spec.devices), needs_torch=spec.needs_torch)


def describe_estimators(cache_dir: Optional[os.PathLike] = None, **kw) -> List[dict]:
    """One dict per registered estimator (see the module docstring), default first.
    ``extra_sites``: further folders holding packages; ``check_packages=False`` when the
    job runs in another Python (its packages cannot be seen from here)."""
    from .estimators.base import available_estimators

    names = sorted(available_estimators(), key=lambda n: (n != "embedded", n))
    return [_describe(n, plugins.info("estimator", n), cache_dir, **kw) for n in names]


def describe_renderers(cache_dir: Optional[os.PathLike] = None, **kw) -> List[dict]:
    """One dict per registered renderer (see :func:`describe_estimators`), default first."""
    from .renderers import available_renderers

    names = sorted(available_renderers(), key=lambda n: (n != "embedded", n))
    return [_describe(n, plugins.info("renderer", n), cache_dir, **kw) for n in names]


def readiness(kind: str, name: str, cache_dir: Optional[os.PathLike] = None, **kw) -> Optional[str]:
    """Why ``kind`` (``"estimator"`` / ``"renderer"``) ``name`` cannot run here: a first
    line saying how many packages / models are missing and where to get them, then a
    line per kind naming them; ``None`` when it can (a plug-in registered at run time,
    of which nothing is known, can). A name that is not registered cannot run: one line
    listing the known names.

    Raises:
        ValueError: ``kind`` is neither.
    """
    known = _registered(kind)  # ValueError: another kind
    d = _describe(name, plugins.info(kind, name), cache_dir, registered=name in known, **kw)
    if not d["ready"] and name not in known:
        return f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}"
    if d["ready"]:
        return None
    parts, names = [], []
    pk, md = d["missing_packages"], d["missing_models"]
    if pk:
        parts.append(f"{len(pk)} package{'s' if len(pk) > 1 else ''} missing: install in {PACKAGES_WHERE}")
        names.append("packages: " + ", ".join(pk))
    if md:
        parts.append(f"{len(md)} model{'s' if len(md) > 1 else ''} missing: download in {MODELS_WHERE} "
                     f"or `python -m backend models download {name}`")
        names.append("models: " + ", ".join(md))
    return f"{kind} '{name}' cannot run: " + "; ".join(parts) + "\n" + "\n".join(names)


def _registered(kind: str) -> List[str]:
    """Names registered for ``kind`` (built-ins and plug-ins registered at run time)."""
    if kind == "estimator":
        from .estimators.base import available_estimators

        return available_estimators()
    if kind == "renderer":
        from .renderers import available_renderers

        return available_renderers()
    raise ValueError(f"kind must be 'estimator' or 'renderer', got {kind!r}")
