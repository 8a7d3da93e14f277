"""Estimator interface and registry (inverse rendering: frame -> G-buffers).

An estimator turns one scene-linear RGB frame into G-buffer passes. Estimators
never import ``bpy``. Register new ones with :func:`register_estimator`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import numpy as np

from .. import plugins
from ..registry import Registry


@dataclass
class EstimatorOutput:
    """Per-frame result of an estimator, at the resolution of the input frame.

    Attributes:
        depth: ``H x W`` float32, > 0. Planar depth; metres when ``depth_kind``
            is ``metric``, otherwise relative (larger = farther, any positive scale;
            the decompose job maps it onto the contract's near..far range).
        depth_kind: ``metric`` or ``relative``.
        normal: ``H x W x 3`` float32 unit camera-space normals (OpenGL: +X right,
            +Y up, +Z toward the camera) or ``None`` (the job then derives them
            from depth, see :mod:`backend.geometry`).
        albedo: ``H x W x 3`` float32 linear base colour in [0, 1], or ``None``.
        metallic, roughness: ``H x W`` float32 in [0, 1], or ``None``.
        confidence: ``H x W`` float32 in [0, 1] or ``None``; 0 marks sky/background.
        models: model id -> revision/hash actually used.
        provenance: pass name (``depth``, ``normal``, ``albedo``, ``metallic``,
            ``roughness``, ``confidence``) -> ``measured`` (from the footage's geometry:
            parallax between frames), ``estimated`` (predicted per pixel by a model),
            ``derived`` (computed from other passes or the source, e.g. normals from
            depth) or ``default`` (a constant, or a model output that is constant in
            practice). Passes an estimator leaves out are filled in by
            :class:`backend.decomposer.Decomposer`.
        pass_models: pass name -> the model or method that produced it.
        disparity: ``h x w`` float32 >= 0 (any size; users resample it) or ``None``: the
            *affine-invariant disparity* a relative ``depth`` was made from (larger = nearer,
            scale AND shift unknown, as Depth Anything's and the embedded network's output).
            ``depth`` inverts it with the shift taken as 0 (:func:`backend.model.encoding.
            disparity_to_depth`), which distorts far depth; where the job has metric evidence
            (multi-view depth, :mod:`backend.multiview.shot`) it aligns this disparity with a
            scale and a shift instead.
    """

    depth: np.ndarray
    depth_kind: str = "relative"
    normal: Optional[np.ndarray] = None
    albedo: Optional[np.ndarray] = None
    metallic: Optional[np.ndarray] = None
    roughness: Optional[np.ndarray] = None
    confidence: Optional[np.ndarray] = None
    models: Dict[str, str] = field(default_factory=dict)
    provenance: Dict[str, str] = field(default_factory=dict)  # pass -> "measured" | "estimated" | "derived" | "default"
    pass_models: Dict[str, str] = field(default_factory=dict)  # pass -> model/method that produced it
    disparity: Optional[np.ndarray] = None


#: the values of :attr:`EstimatorOutput.provenance`, most trustworthy first
PROVENANCE_KINDS = ("measured", "estimated", "derived", "default")
#: the passes provenance is recorded for
PROVENANCE_PASSES = ("depth", "normal", "albedo", "metallic", "roughness", "confidence")


class Estimator:
    """Base class. Subclasses set ``name`` and implement :meth:`predict`.

    Attributes:
        name: registry name.
        default_resolution: processing resolution (long side, pixels) used when the
            caller asks for none; ``None`` = the full frame.
        max_resolution: the largest long side at which the estimator really computes
            (the embedded network: 192 px), or ``None`` when it works at any size.
            Larger requests are capped to it: ``decompose`` then does its per-frame
            work (depth alignment, stabilisation, sky handling) at that size and
            resamples to the full frame once, instead of at full size on upsampled
            estimates.

    The *processing resolution* has one meaning from the sidebar to the estimator
    (diffusers' ``processing_resolution``): the long side, in pixels, of the frame the
    estimator is given; ``0`` asks for the full frame. Output G-buffers are always at
    the full frame size.
    """

    name = "base"
    #: computes depth over windows of frames of the shot (``feed``/``take``, e.g.
    #: ``video-depth-anything-small``) rather than frame by frame in :meth:`predict`
    windowed: bool = False
    default_resolution: Optional[int] = None
    max_resolution: Optional[int] = None

    def resolution(self, requested: Optional[int] = None) -> Optional[int]:
        """The processing resolution actually used for a request.

        Args:
            requested: long side in pixels; ``None`` = :attr:`default_resolution`;
                ``0`` = the full frame.

        Returns:
            long side in pixels, or ``None`` for the full frame; never above
            :attr:`max_resolution`.
        """
        return _resolution(self.default_resolution, self.max_resolution, requested)

    def use_resolution(self, resolution: Optional[int]) -> None:
        """Told the processing resolution :func:`decompose` will feed it (``None`` =
        full frame), before the first :meth:`predict`; estimators with an internal
        resize of their own (Marigold's pipeline) adopt it. Default: nothing."""

    def full_size_albedo(self, rgb: np.ndarray, normal: np.ndarray,
                         confidence: Optional[np.ndarray]) -> Optional[tuple]:
        """An albedo computed on the full-size frame after :meth:`predict` ran at the
        processing size, or ``None`` (default: the processing-size albedo is upsampled).

        Args:
            rgb: ``H x W x 3`` float32 scene-linear full-size frame.
            normal: ``H x W x 3`` unit camera-space normals (upsampled).
            confidence: ``H x W`` in [0, 1] or ``None``.

        Returns:
            ``(albedo, provenance, method)``: ``H x W x 3`` float32 in [0, 1], the
            provenance kind and the method's name, or ``None``.
        """
        return None

    @property
    def native_max_size(self) -> Optional[int]:
        """Deprecated name of :attr:`max_resolution`."""
        return self.max_resolution

    def predict(self, rgb: np.ndarray) -> EstimatorOutput:
        """Estimate G-buffers for one frame.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB, >= 0, any H, W >= 1.

        Returns:
            :class:`EstimatorOutput` at ``H x W``.
        """
        raise NotImplementedError

    def settings(self) -> Dict[str, object]:
        """JSON-serialisable settings that affect the output (used in the resume hash)."""
        return {"name": self.name}


def _resolution(default: Optional[int], cap: Optional[int], requested: Optional[int]) -> Optional[int]:
    r = default if requested is None else (int(requested) or None)
    if cap:
        r = min(r, int(cap)) if r else int(cap)
    return r


#: the estimator registry; built-ins load their modules only when created
ESTIMATORS = Registry("estimator", __package__, plugins.factories("estimator"))


def register_estimator(name: str, factory: Callable[..., Estimator]) -> None:
    """Register ``factory(**options) -> Estimator`` under ``name``."""
    ESTIMATORS.register(name, factory)


def available_estimators() -> list:
    """Names of registered estimators."""
    return ESTIMATORS.names()


def resolution_of(name: str, requested: Optional[int] = None) -> Optional[int]:
    """The processing resolution estimator ``name`` would use for ``requested``
    (:meth:`Estimator.resolution`), from its class's declarations: its module is
    imported but no model is loaded (for UIs). Estimators registered as plain
    functions report ``requested`` (``None`` = full frame).

    Raises:
        KeyError: unknown name.
        ArgumentError: ``requested`` not a whole number >= 0 (``0``: full frame; text,
            ``bool``, NaN and negatives refused, as for ``processing_resolution``).
    """
    from ..arguments import whole_number

    requested = whole_number("requested", requested, minimum=0)
    factory = ESTIMATORS.factory(name)
    if isinstance(factory, type) and issubclass(factory, Estimator):
        return _resolution(factory.default_resolution, factory.max_resolution, requested)
    return int(requested) or None if requested is not None else None


def get_estimator(name: str, **options) -> Estimator:
    """Instantiate a registered estimator.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    return ESTIMATORS.create(name, **options)
