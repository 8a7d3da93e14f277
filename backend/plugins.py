"""One entry per built-in plugin (estimator, renderer) declaring its facts.

The registries (:data:`backend.estimators.base.ESTIMATORS`,
:data:`backend.renderers.base.RENDERERS`) take their built-in factories from here, and the
catalog (:mod:`backend.catalog`: the command line's ``--help``, the add-on's dropdowns and
Models panel, readiness before a job) takes what each one needs from here. Nothing here
imports a plugin's module.

Adding a plugin: write its class (an :class:`~backend.estimators.base.Estimator` or
:class:`~backend.renderers.base.Renderer` subclass), add a :class:`PluginInfo` to
:data:`BUILTINS`, and run ``tests/test_plugin_contract.py`` (every registered plugin
goes through the same checks). A plugin registered at run time
(:func:`backend.estimators.register_estimator`) has no entry: the catalog says
"registered plug-in" and nothing about what it needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

#: a model: a hub repository id (present when a snapshot has a config), or
#: ``(repository id, file)`` (present when the snapshot has that file)
Model = Union[str, Tuple[str, str]]

KINDS = ("estimator", "renderer")


@dataclass(frozen=True)
class PluginInfo:
    """The facts of one plugin.

    Attributes:
        name: registry name (``--estimator NAME`` / ``--renderer NAME``).
        kind: ``"estimator"`` or ``"renderer"``.
        factory: ``"module:Class"`` relative to ``backend.estimators`` / ``backend.renderers``.
        summary: one line for ``--help`` and the add-on's tooltips (no trailing full stop).
        packages: Python packages it imports (checked by ``find_spec``, never imported).
        models: downloaded models it loads (:data:`Model`); ``()``: bundled or none.
        gpu: a GPU is recommended (the CPU works, slowly).
        devices: the ``device`` values it accepts besides ``None`` (auto).
        windowed: an estimator that computes depth over windows of frames of the shot
            (``feed``/``take``) rather than frame by frame.
        licence: the licence of its weights (SPDX id or name), ``"this project's"`` for
            the bundled network.
    """

    name: str
    kind: str
    factory: str
    summary: str
    packages: Tuple[str, ...] = ()
    models: Tuple[Model, ...] = ()
    gpu: bool = False
    devices: Tuple[str, ...] = ("cpu",)
    windowed: bool = False
    licence: str = ""

    @property
    def needs_torch(self) -> bool:
        """Whether it needs PyTorch (the default path never does)."""
        return "torch" in self.packages


_DIFFUSION = ("torch", "diffusers", "transformers")
_TORCH_DEVICES = ("cpu", "cuda", "mps")
_ORT_DEVICES = ("cpu", "cuda", "coreml", "directml")

BUILTINS: Tuple[PluginInfo, ...] = (
    PluginInfo("embedded", "estimator", ".embedded:EmbeddedEstimator",
               "bundled G-buffer network on ONNX Runtime, CPU, ~0.1 s per frame",
               packages=("onnxruntime",), licence="this project's"),
    PluginInfo("marigold", "estimator", ".marigold:MarigoldEstimator",
               "Marigold diffusion models (depth, normals, appearance); 30-50 s per frame on a CPU",
               packages=_DIFFUSION, gpu=True, devices=_TORCH_DEVICES, licence="OpenRAIL++-M",
               models=("prs-eth/marigold-depth-v1-1", "prs-eth/marigold-normals-v1-1",
                       "prs-eth/marigold-iid-appearance-v1-1")),
    PluginInfo("depth-anything-v2-small", "estimator", ".onnx_depth:DepthAnythingEstimator",
               "Depth Anything V2 Small (Apache-2.0, ONNX Runtime, no torch): pretrained relative depth, "
               "normals from it, materials from the embedded network; network at upstream's size (short side "
               "518: 518 x 924 for 16:9); about 1.2 s per frame at 294 x 518 (fit=frame) on 2 idle CPU cores, "
               "about 4x that at 518 x 924",
               packages=("onnxruntime",), devices=_ORT_DEVICES, licence="Apache-2.0",
               models=(("onnx-community/depth-anything-v2-small", "onnx/model.onnx"),)),
    PluginInfo("video-depth-anything-small", "estimator", ".video_depth:VideoDepthAnythingEstimator",
               "Video Depth Anything Small (Apache-2.0, ONNX Runtime, no torch): consistent relative depth "
               "over the shot in overlapping 32-frame windows, normals from it, materials from the embedded "
               "network; needs an ONNX export in the models folder (none is published)",
               packages=("onnxruntime",), devices=_ORT_DEVICES, windowed=True, licence="Apache-2.0",
               models=(("depth-anything/Video-Depth-Anything-Small", "onnx/model.onnx"),)),
    PluginInfo("embedded", "renderer", ".embedded:EmbeddedRenderer",
               "physically based relighting + atmosphere, numpy, CPU; a list of look words (see the prompt "
               "words)", packages=(), licence="this project's"),
    PluginInfo("controlnet", "renderer", ".controlnet:ControlNetRenderer",
               "Stable Diffusion 1.5 + ControlNet depth/normal, free-form prompts",
               packages=_DIFFUSION, gpu=True, devices=_TORCH_DEVICES,
               licence="OpenRAIL-M (SD 1.5), OpenRAIL (ControlNet 1.1)",
               models=("stable-diffusion-v1-5/stable-diffusion-v1-5", "lllyasviel/control_v11f1p_sd15_depth",
                       "lllyasviel/control_v11p_sd15_normalbae")),
    PluginInfo("flux2-klein", "renderer", ".flux2_klein:Flux2KleinRenderer",
               "FLUX.2 [klein] 4B img2img (Apache-2.0, ~16 GB download, ~13 GB VRAM): a photoreal restyle "
               "that keeps the composition, 4 steps",
               packages=_DIFFUSION, gpu=True, devices=_TORCH_DEVICES, licence="Apache-2.0",
               models=("black-forest-labs/FLUX.2-klein-4B",)),
    PluginInfo("wan-vace", "renderer", ".wan_vace:WanVaceRenderer",
               "Wan2.1 VACE 1.3B video restyle of whole windows of frames, G-buffer depth (or normals) as the "
               "control video, free-form prompts; a GPU with 8+ GB VRAM at 480p",
               packages=_DIFFUSION, gpu=True, devices=_TORCH_DEVICES, licence="Apache-2.0",
               models=("Wan-AI/Wan2.1-VACE-1.3B-diffusers",)),
)


def builtins(kind: str) -> Dict[str, PluginInfo]:
    """``name -> PluginInfo`` of the built-in plugins of ``kind``.

    Raises:
        ValueError: ``kind`` is not ``"estimator"`` or ``"renderer"``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be 'estimator' or 'renderer', got {kind!r}")
    return {p.name: p for p in BUILTINS if p.kind == kind}


def factories(kind: str) -> Dict[str, str]:
    """``name -> "module:Class"`` of the built-in plugins of ``kind`` (the registries' built-ins)."""
    return {name: p.factory for name, p in builtins(kind).items()}


def info(kind: str, name: str) -> Optional[PluginInfo]:
    """The facts of built-in plugin ``name`` of ``kind``; ``None`` for another name."""
    return builtins(kind).get(name)
