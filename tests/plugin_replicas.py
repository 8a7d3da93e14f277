"""Tiny replicas of every built-in plugin, for the contract test (tests/test_plugin_contract.py).

:data:`ESTIMATORS` / :data:`RENDERERS`: registry name -> ``build(root) -> options``: the
factory options that make the plugin run on random-weight models of the real
architectures (built into ``root`` once per session) or on its bundled weights. A plugin
added to :mod:`backend.plugins` needs an entry here (the contract test fails without one).
The torch-based replicas skip when torch / diffusers / transformers are missing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict

import pytest

#: the frame size every estimator replica runs at (multiples of 14 for the ONNX replicas)
H, W = 28, 42


def _torch():
    for name in ("torch", "diffusers", "transformers"):
        pytest.importorskip(name)


def _embedded(root: Path) -> dict:
    return {}


def _depth_anything(root: Path) -> dict:
    pytest.importorskip("torch")
    import onnx_depth_util as odu
    from backend.estimators.onnx_depth import MODELS

    spec = MODELS["depth-anything-v2-small"]
    odu.install_in_cache(root / "cache", spec.repo_id, spec.files["fp32"], odu.export_replica(root / "m.onnx", H, W))
    return {"cache_dir": str(root / "cache"), "local_files_only": True}


def _video_depth_anything(root: Path) -> dict:
    pytest.importorskip("torch")
    import onnx_depth_util as odu
    from backend.estimators.video_depth import VIDEO_MODELS

    spec = VIDEO_MODELS["video-depth-anything-small"]
    odu.install_in_cache(root / "cache", spec.repo_id, spec.files["fp32"],
                         odu.export_video_replica(root / "m.onnx", H, W, frames=4))
    return {"cache_dir": str(root / "cache"), "local_files_only": True, "window": 4, "overlap": 2}


def _marigold(root: Path) -> dict:
    _torch()
    from test_marigold import _build

    return {"depth": str(_build("depth", root)), "normals": str(_build("normals", root, scheduler="lcm")),
            "intrinsics": str(_build("intrinsics", root, n_targets=2)), "processing_resolution": 16}


def _embedded_renderer(root: Path) -> dict:
    return {}


def _controlnet(root: Path) -> dict:
    _torch()
    from test_controlnet import build_tiny_sd

    build_tiny_sd(root)
    return {"base_model": str(root / "base"), "depth_model": str(root / "depth"),
            "normal_model": str(root / "normal"), "steps": 2, "max_size": 64, "local_files_only": True, "seed": 7}


def _flux2_klein(root: Path) -> dict:
    _torch()
    from flux2_util import build_tiny_flux2_klein

    build_tiny_flux2_klein(root)
    return {"models_dir": str(root), "seed": 7, "steps": 2}


def _wan_vace(root: Path) -> dict:
    _torch()
    import wan_vace_util as wu
    from backend.renderers.wan_vace import DEFAULT_MODEL

    wu.install_in_cache(root / "models", DEFAULT_MODEL, wu.build_pipeline(root / "pipe"))
    return {"cache_dir": str(root / "models"), "steps": 2, "seed": 3, "local_files_only": True, "window": 5,
            "overlap": 2}


ESTIMATORS: Dict[str, Callable[[Path], dict]] = {
    "embedded": _embedded, "depth-anything-v2-small": _depth_anything,
    "video-depth-anything-small": _video_depth_anything, "marigold": _marigold,
}
RENDERERS: Dict[str, Callable[[Path], dict]] = {
    "embedded": _embedded_renderer, "controlnet": _controlnet, "flux2-klein": _flux2_klein, "wan-vace": _wan_vace,
}
