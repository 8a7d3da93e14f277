"""Frames in, G-buffers out, in memory: :class:`Decomposer`.

The per-frame half of Decompose (the file-and-folder half is
:func:`backend.jobs.decompose.decompose`). For each frame:

1. Downscale (bilinear, linear light) so the long side is the *processing
   resolution* (:meth:`backend.estimators.base.Estimator.resolution`) and run the
   estimator there.
2. Depth: metric depth is kept in metres; relative depth is mapped onto the contract's
   ``RELATIVE_NEAR..RELATIVE_FAR`` and scale/shift-aligned to the previous frame
   (:class:`backend.geometry.TemporalDepthAligner`) so it does not pump.
3. Missing passes are filled and recorded in ``meta["filled"]``: normals from depth
   (:func:`backend.geometry.normals_from_depth`, intrinsics from an assumed horizontal
   field of view unless given), albedo = the source clipped to [0, 1], metallic = 0,
   roughness = 0.5. Normals the estimator gave are checked against normals derived
   from its depth (``normal_depth_angle_deg``, indicative only for relative depth).
4. Optional ``stabilize``: blend with the previous result warped by optical flow
   (:mod:`backend.temporal`); the warping error before/after is reported.
5. Sky / background (estimator confidence <= :data:`SKY_CONFIDENCE`): depth = far,
   normal = (0, 0, 1), Confidence = 0.
6. Resample every pass to the full frame size (bilinear; normals re-normalised; sky
   mask at the 0.5 level); restore fine albedo detail lost to the downscale
   (:func:`albedo_detail_transfer`), unless the estimator computes its albedo on the
   full-size frame itself (:meth:`~backend.estimators.base.Estimator.full_size_albedo`:
   the embedded estimator's single-frame intrinsic decomposition).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import contract, geometry, sky as sky_mod, temporal
from .depth_edges import EdgeSettings, display_guide, edge_settings, refine_depth
from .estimators.base import PROVENANCE_PASSES, Estimator, EstimatorOutput, get_estimator
from .footage import fit_long_side
from .imaging import resize

DEFAULT_ESTIMATOR = "embedded"
DEFAULT_STRENGTH = 0.5
FALLBACK_ROUGHNESS = 0.5
FALLBACK_METALLIC = 0.0
SKY_CONFIDENCE = contract.NO_SURFACE  # confidence at or below this marks "no surface"
#: how the sky detector is named in ``pass_models["confidence"]``
#: (it names its version: a change of the detector changes the settings hash, so a folder
#: is never resumed with sky masks of two versions)
SKY_METHOD = "sky detector v2 (smooth, bright or edge-bounded blue, top-connected; backend/sky.py)"
MIN_RESOLUTION = 16  # smallest processing resolution (long side) accepted; 0 / None = full size

ALBEDO_DETAIL_RANGE = (0.25, 4.0)
ALBEDO_DETAIL_EPS = 0.005


def albedo_detail_transfer(albedo_up: np.ndarray, src_full: np.ndarray, src_small: np.ndarray) -> np.ndarray:
    """Restore fine detail in an albedo estimated at a lower resolution.

    The estimator sees the frame area-downscaled to the processing size, so its albedo,
    bilinearly upsampled, is blurred. Under the Retinex assumption (Land & McCann
    1971: sharp image changes come from reflectance, shading varies smoothly) the
    detail it misses is the ratio between the source and the same downscale/upscale
    of the source, per channel::

        A_full = clip(A_up * clip((I + e) / (up(down(I)) + e), 0.25, 4), 0, 1)

    with ``e = 0.005`` (keeps dark, noisy pixels from being amplified). Fine shadow
    edges and highlights are detail too and end up in the albedo. Measured on 80
    held-out synthetic frames with the network at 1/2-1/3 of the frame size: albedo
    PSNR 14.78 -> 14.91 dB, scale-invariant MSE 0.0257 -> 0.0249.

    Args:
        albedo_up: ``H x W x 3`` float32 linear albedo in [0, 1] at the frame size.
        src_full: ``H x W x 3`` float32 scene-linear source frame.
        src_small: the source at the processing size (area-downscaled), ``h x w x 3``.

    Returns:
        ``H x W x 3`` float32 albedo in [0, 1].
    """
    h, w = albedo_up.shape[:2]
    e = np.float32(ALBEDO_DETAIL_EPS)
    low = resize(np.asarray(src_small, dtype=np.float32), (w, h))
    ratio = (np.maximum(src_full, 0).astype(np.float32) + e) / (np.maximum(low, 0) + e)
    np.clip(ratio, *ALBEDO_DETAIL_RANGE, out=ratio)
    ratio *= albedo_up
    np.clip(ratio, 0.0, 1.0, out=ratio)
    return ratio


def pass_provenance(out: EstimatorOutput, estimator_name: str, filled: List[str], *,
                    albedo_detail: bool = False, stabilized: bool = False) -> Tuple[Dict[str, str], Dict[str, str]]:
    """Per-pass provenance of a decomposed frame: ``(provenance, pass_models)``.

    What the estimator declared (:attr:`EstimatorOutput.provenance`) is kept; a pass it
    returned without a declaration is ``estimated`` by it; a pass it left out is what
    :class:`Decomposer` filled in: normals ``derived`` from depth, albedo ``derived``
    from the source colour, metallic/roughness ``default`` constants
    (:data:`FALLBACK_METALLIC`, :data:`FALLBACK_ROUGHNESS`), no confidence ``default``
    (every pixel a surface). Post-processing is appended to the method
    (``+ source detail`` for the albedo detail transfer, ``+ flow stabilisation``).
    """
    prov: Dict[str, str] = {}
    models: Dict[str, str] = {}
    fill = {"normal": ("derived", "normals from depth (plane fit of the depth pass)"),
            "albedo": ("derived", "source colour (the estimator gives no albedo)"),
            "metallic": ("default", f"constant {FALLBACK_METALLIC}"),
            "roughness": ("default", f"constant {FALLBACK_ROUGHNESS}"),
            "confidence": ("default", "none: every pixel a surface")}
    for k in PROVENANCE_PASSES:
        if k in filled or (getattr(out, k) is None and k in fill):
            prov[k], models[k] = fill[k]
        else:
            prov[k] = out.provenance.get(k, "estimated")
            models[k] = out.pass_models.get(k, estimator_name)
    if albedo_detail and prov["albedo"] == "estimated":
        models["albedo"] += " + source detail"
    if stabilized:
        for k in ("depth", "normal", "albedo", "metallic", "roughness"):
            if prov[k] != "default":
                models[k] += " + flow stabilisation"
    return prov, models


#: what a relative depth made from affine-invariant disparity is, in the frame header
RELATIVE_FROM_DISPARITY = ("1 / network disparity, whose shift is unknown and taken as 0 (no metric evidence "
                           "in this job): the depth ordering holds, far depth ratios are distorted")


def check_estimator_output(out: EstimatorOutput, h: int, w: int, name: str) -> None:
    """Shapes, finiteness and depth kind of an estimator's result.

    Raises:
        ValueError: naming the estimator and the pass.
    """
    for k in ("depth", "normal", "albedo", "metallic", "roughness", "confidence"):
        a = getattr(out, k)
        if a is None:
            continue
        want = (h, w) if k in ("depth", "metallic", "roughness", "confidence") else (h, w, 3)
        if tuple(a.shape) != want:
            raise ValueError(f"estimator {name!r} returned {k} of shape {tuple(a.shape)}, expected {want}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"estimator {name!r} returned NaN/Inf in {k}")
    if out.depth_kind not in contract.DEPTH_KINDS:
        raise ValueError(f"estimator {name!r} returned depth_kind {out.depth_kind!r}")


def _resample(arr: np.ndarray, w: int, h: int, nearest: bool = False) -> np.ndarray:
    """float32 resample to ``(w, h)`` (bilinear, or nearest for masks)."""
    return resize(np.asarray(arr, dtype=np.float32), (w, h), "nearest" if nearest else "linear")


def _windows(meta, width: int, height: int):
    """``((data window), (display window))`` from a frame's meta when the data window is
    ``width x height`` and differs from the display window; else ``None``."""
    data, disp = (meta or {}).get("data_window"), (meta or {}).get("display_window")
    if not data or not disp or list(data) == list(disp):
        return None
    data, disp = tuple(int(v) for v in data), tuple(int(v) for v in disp)
    if (data[2] - data[0] + 1, data[3] - data[1] + 1) != (int(width), int(height)):
        return None
    return data, disp


@dataclass
class FramePlan:
    """Sizes and camera for frames of one size.

    Attributes:
        width, height: full frame size in pixels (what is written).
        proc_width, proc_height: processing size (what the estimator sees).
        intrinsics: ``(fx, fy, cx, cy)`` in pixels of the full frame.
        intrinsics_assumed: True when they come from the assumed field of view.
    """

    width: int
    height: int
    proc_width: int
    proc_height: int
    intrinsics: Tuple[float, float, float, float]
    intrinsics_assumed: bool = True

    @property
    def downscaled(self) -> bool:
        return (self.proc_width, self.proc_height) != (self.width, self.height)


@dataclass
class FrameReport:
    """What :meth:`Decomposer.frame` did besides producing the frame.

    Attributes:
        filled: passes the estimator did not give (filled with defaults / derived).
        normal_depth_angle_deg: mean angle between the estimator's normals and normals
            derived from its depth (``None`` when the normals were derived).
        flicker_raw, flicker: warping error before/after stabilisation (dicts with
            ``mean`` ...; ``None`` without ``stabilize`` or on the first frame).
        consistent_fraction: share of flow-consistent pixels (stabilisation).
    """

    filled: List[str] = field(default_factory=list)
    #: ``(provenance, method)`` when the estimator made the albedo at full size
    #: (:meth:`~backend.estimators.base.Estimator.full_size_albedo`), else ``None``
    albedo_full: Optional[Tuple[str, str]] = None
    normal_depth_angle_deg: Optional[float] = None
    flicker_raw: Optional[Dict[str, Any]] = None
    flicker: Optional[Dict[str, Any]] = None
    consistent_fraction: Optional[float] = None

    def manifest_fields(self) -> Dict[str, Any]:
        """The per-frame fields the decompose job records in ``manifest.json``."""
        out: Dict[str, Any] = {"filled": list(self.filled)}
        for k in ("normal_depth_angle_deg", "flicker_raw", "flicker", "consistent_fraction"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out


@dataclass
class _History:
    """What the next frame needs from the previous one (at the processing size)."""

    number: Optional[int] = None
    rgb: Optional[np.ndarray] = None
    passes: Optional[Dict[str, np.ndarray]] = None
    mask: Optional[np.ndarray] = None


class Decomposer:
    """Turn scene-linear RGB frames into G-buffer frames, in memory.

    Consecutive calls of :meth:`frame` form a shot: relative depth is aligned frame to
    frame and, with ``stabilize``, passes are blended along optical flow. Call
    :meth:`reset` between shots. Nothing is written or printed.

    Args:
        estimator: a registry name (:func:`backend.list_estimators`) or an
            :class:`~backend.estimators.base.Estimator` instance.
        processing_resolution: long side in pixels at which the estimator computes
            (``None``: the estimator's default; ``0``: the full frame), capped to what
            the estimator supports (:meth:`Estimator.resolution`). The frames produced
            are always at the full input size.
        estimator_options: keyword options for the estimator factory (names only).
        device: ``cpu``/``cuda``/``mps``/``None`` (auto), for estimators that take it.
        stabilize: temporal stabilisation with optical flow (:mod:`backend.temporal`).
        strength: history weight for ``stabilize``, in [0, 1).
        hfov_deg: assumed horizontal field of view, in degrees, when ``intrinsics`` is
            not given (normals from depth, header ``intrinsics``).
        intrinsics: known ``(fx, fy, cx, cy)`` in pixels of the full frame, or ``None``.
        sar: sample (pixel) aspect ratio of the frames.
        albedo_detail: restore the source's fine detail in an albedo estimated below
            full size (:func:`albedo_detail_transfer`).
        depth_edges: refine the full-size depth so its discontinuities lie on the frame's
            edges (:func:`backend.depth_edges.refine_depth`; issue 33). Default off
            (:func:`backend.jobs.decompose.decompose` turns it on for measured depth).
        detect_sky: add the sky found by :func:`backend.sky.detect_sky` on the full frame
            to the estimator's no-surface mask (Confidence 0, depth far, normal (0, 0, 1)).

    Raises:
        KeyError: unknown estimator name. ValueError: a bad option.
    """

    def __init__(self, estimator: Union[str, Estimator] = DEFAULT_ESTIMATOR, *,
                 processing_resolution: Optional[int] = None,
                 estimator_options: Optional[Dict[str, Any]] = None, device: Optional[str] = None,
                 stabilize: bool = False, strength: float = DEFAULT_STRENGTH,
                 hfov_deg: float = geometry.DEFAULT_HFOV_DEG,
                 intrinsics: Optional[Tuple[float, float, float, float]] = None, sar: float = 1.0,
                 albedo_detail: bool = True, detect_sky: bool = True, depth_edges: bool = False):
        self._check_options(processing_resolution=processing_resolution, stabilize=stabilize,
                            strength=strength, hfov_deg=hfov_deg)
        if isinstance(estimator, Estimator):
            self.estimator = estimator
        else:
            self.estimator = _make_estimator(estimator, estimator_options, device)
        self.estimator_name = getattr(self.estimator, "name", str(estimator)) if isinstance(estimator, Estimator) \
            else str(estimator)
        self.processing_resolution = processing_resolution
        #: the long side actually used (``None``: the full frame)
        self.resolution = self.estimator.resolution(processing_resolution)
        self.estimator.use_resolution(self.resolution)
        self.stabilize = bool(stabilize)
        self.strength = float(strength)
        self.hfov_deg = float(hfov_deg)
        self.intrinsics = None if intrinsics is None else tuple(map(float, intrinsics))
        self.sar = float(sar)
        self.albedo_detail = bool(albedo_detail)
        #: :class:`backend.depth_edges.EdgeSettings` of the edge refinement, ``None``: off
        self.depth_edges = EdgeSettings() if depth_edges else None
        self.detect_sky = bool(detect_sky)
        #: the last frame's full-size sky mask from :mod:`backend.sky` (``None``: none found / off)
        self.last_sky: Optional[np.ndarray] = None
        self.report = FrameReport()
        self.last_disparity: Optional[np.ndarray] = None
        self._hist = _History()
        self._aligner = geometry.TemporalDepthAligner(contract.RELATIVE_NEAR, contract.RELATIVE_FAR)
        #: shot-wide depth anchors (:class:`backend.depth_anchors.DepthAnchors`): a frame with
        #: an anchor is aligned to it alone instead of to the previous frame
        self.anchors = None
        self._number: Optional[int] = None
        self._plans: Dict[Tuple[int, int], FramePlan] = {}

    # ------------------------------------------------------------------ set-up
    @staticmethod
    def _check_options(*, processing_resolution: Optional[int] = None, stabilize: bool = False,
                       strength: float = DEFAULT_STRENGTH, hfov_deg: float = geometry.DEFAULT_HFOV_DEG,
                       **_unused) -> None:
        """Raise ``ValueError`` for an option out of range (before any model loads)."""
        if processing_resolution is not None and processing_resolution != 0 \
                and processing_resolution < MIN_RESOLUTION:
            raise ValueError(f"processing resolution must be 0 (full size) or at least {MIN_RESOLUTION} "
                             f"pixels, got {processing_resolution}")
        if stabilize and not 0.0 <= strength < 1.0:
            raise ValueError(f"stabilize strength must be in [0, 1), got {strength}")
        if not 0.0 < hfov_deg < 180.0:
            raise ValueError(f"hfov_deg must be in (0, 180), got {hfov_deg}")

    def plan(self, width: int, height: int, meta: Optional[Dict[str, Any]] = None) -> FramePlan:
        """Processing size and intrinsics for ``width x height`` frames. An overscan frame
        (``meta`` with ``data_window`` / ``display_window``, ``[x0, y0, x1, y1]``, the data
        window ``width x height``): the assumed field of view spans the display window,
        centred on it, in data-window pixels (:func:`geometry.intrinsics_from_fov_windows`)."""
        wins = _windows(meta, width, height)
        key = (int(width), int(height), wins)
        if key not in self._plans:
            pw, ph = fit_long_side(key[0], key[1], self.resolution)
            if self.intrinsics:
                intr = self.intrinsics
            elif wins:
                intr = geometry.intrinsics_from_fov_windows(wins[0], wins[1], self.hfov_deg, self.sar)
            else:
                intr = geometry.intrinsics_from_fov(key[0], key[1], self.hfov_deg, self.sar)
            self._plans[key] = FramePlan(key[0], key[1], pw, ph, tuple(intr), self.intrinsics is None)
        return self._plans[key]

    def settings(self) -> Dict[str, Any]:
        """JSON-serialisable settings that change the result (estimator, size, options)."""
        return {"estimator": self.estimator.settings(), "max_size": self.resolution,
                "stabilize": self.stabilize, "strength": self.strength if self.stabilize else None,
                "hfov_deg": self.hfov_deg, "intrinsics": None if self.intrinsics is None else list(self.intrinsics),
                **({} if self.detect_sky else {"detect_sky": False}),
                **({} if self.depth_edges is None else {"depth_edges": edge_settings(self.depth_edges)})}

    @property
    def last_number(self) -> Optional[int]:
        """Frame number of the last frame seen (:meth:`frame` or :meth:`seed`)."""
        return self._hist.number

    def reset(self) -> None:
        """Forget the previous frame (start of a new shot)."""
        self._hist = _History()
        self._aligner.reset()

    def seed(self, frame: contract.GBufferFrame, number: Optional[int] = None) -> None:
        """Continue a shot from a frame already produced (e.g. read back from disk).

        Both an uninterrupted run and a resumed run seed from the frame *as stored*
        (on-disk dtypes, full size resampled to the processing size), so resuming
        after a cancel gives bit-identical frames.
        """
        plan = self.plan(frame.shape[1], frame.shape[0])
        pw, ph = plan.proc_width, plan.proc_height
        sky = (frame.confidence <= SKY_CONFIDENCE) if frame.confidence is not None else None
        passes = {"depth": frame.depth}
        if self.stabilize:  # the stabiliser's history needs every pass and the colour
            passes.update(normal=frame.normal, albedo=frame.albedo, metallic=frame.metallic,
                          roughness=frame.roughness)
            self._hist.rgb = _resample(frame.combined[..., :3], pw, ph)
        self._hist.passes = {k: _resample(v, pw, ph) for k, v in passes.items()}
        self._hist.mask = None if sky is None else _resample(sky.astype(np.float32), pw, ph, True) < 0.5
        self._hist.number = number
        if frame.meta.get("depth_kind") == "relative":
            self._aligner.reset(self._hist.passes["depth"], self._hist.mask)
        else:
            self._aligner.reset()

    # ------------------------------------------------------------------ per frame
    def frame(self, rgb: np.ndarray, *, alpha: Optional[np.ndarray] = None, number: Optional[int] = None,
              meta: Optional[Dict[str, Any]] = None, refine_edges: bool = True) -> contract.GBufferFrame:
        """G-buffers of one frame.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear Rec.709 RGB (>= 0; straight alpha).
            alpha: ``H x W`` float32 in [0, 1], or ``None`` (opaque).
            number: the frame's number in its shot; a number that does not follow the
                previous one starts a new shot (:meth:`reset`). ``None``: follows.
            meta: extra header attributes (source path, frame index, timestamp ...),
                merged over the ones computed here.
            refine_edges: apply :attr:`depth_edges` (when set); ``False`` for a caller
                that replaces the depth anyway (the multi-view shot refines its own).

        Returns:
            :class:`backend.contract.GBufferFrame` at ``H x W`` (see the contract for
            every pass's dtype, units and range); :attr:`report` tells what was filled
            and the stabilisation metrics.

        Raises:
            ValueError: a frame that is not ``H x W x 3`` with H, W >= 1, or an
                estimator result of the wrong shape or with NaN/Inf.
        """
        rgb = np.asarray(rgb, dtype=np.float32)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or min(rgb.shape[:2]) < 1:
            raise ValueError(f"frame must be H x W x 3 RGB, got shape {rgb.shape}")
        H, W = rgb.shape[:2]
        plan = self.plan(W, H, meta)
        if number is not None and self._hist.number is not None and number != self._hist.number + 1:
            self.reset()
        self._number = number if number is not None else (self._hist.number or 0) + 1
        small = resize(rgb, (plan.proc_width, plan.proc_height), "linear") if plan.downscaled else rgb
        out = self.estimator.predict(np.ascontiguousarray(small, dtype=np.float32))
        check_estimator_output(out, plan.proc_height, plan.proc_width, self.estimator_name)
        self._add_sky(out, rgb, plan)
        #: the estimator's affine-invariant disparity of this frame (``None``: it gave none, or
        #: metric depth), for a caller with metric evidence (the multi-view shot) to align
        self.last_disparity = out.disparity if out.depth_kind == "relative" else None
        self.report = FrameReport()
        surface = None if out.confidence is None else out.confidence > SKY_CONFIDENCE
        passes, near, far = self._passes(out, small, plan, surface)
        full = self._full_size(passes, out, surface, rgb, small, plan, near, far)
        if refine_edges and self.depth_edges is not None:
            full["depth"] = self.edge_refined(full["depth"], rgb, full["confidence"], near, far)
        alpha_f = alpha if alpha is not None else np.ones((H, W), np.float32)
        # Combined: premultiplied alpha (the OpenEXR / Blender convention), stored as
        # half: clamp to [0, 65504] so HDR input stays finite
        rgb_c = np.clip(rgb, 0, 65504.0) * (alpha_f[..., None] if alpha is not None else 1.0)
        combined = np.concatenate([rgb_c, alpha_f[..., None]], axis=-1).astype(np.float32)
        provenance, pass_models = pass_provenance(
            out, self.estimator_name, self.report.filled,
            albedo_detail=self.albedo_detail and plan.downscaled and self.report.albedo_full is None,
            stabilized=self.report.flicker is not None)
        if self.report.albedo_full is not None:  # computed on the full frame, after stabilisation
            provenance["albedo"], pass_models["albedo"] = self.report.albedo_full
        header = contract.make_meta(
            estimator=self.estimator_name, models=out.models, depth_kind=out.depth_kind,
            depth_near=near, depth_far=far, intrinsics=plan.intrinsics,
            extra={"intrinsics_assumed": plan.intrinsics_assumed, "hfov_deg": self.hfov_deg,
                   "filled": list(self.report.filled), "processing_size": [plan.proc_width, plan.proc_height],
                   "provenance": provenance, "pass_models": pass_models})
        for k in ("flicker", "normal_depth_angle_deg"):
            if getattr(self.report, k) is not None:
                header[k] = getattr(self.report, k)
        if self.last_disparity is not None:  # say what the relative depth is (issue 26)
            header["relative_depth"] = RELATIVE_FROM_DISPARITY
        header.update(meta or {})
        frame = contract.GBufferFrame(combined=combined, meta=header, **full)
        self.seed(contract.as_stored(frame) if self.stabilize else frame,  # depth is stored exactly
                  number if number is not None else (self._hist.number or 0) + 1)
        return frame

    def _add_sky(self, out: EstimatorOutput, rgb: np.ndarray, plan: FramePlan) -> None:
        """Add the detected sky (:mod:`backend.sky`) to the estimator's no-surface mask:
        ``out.confidence`` becomes 0 where the sky covers half a processing pixel or more
        (1 elsewhere when the estimator gave none); :attr:`last_sky` keeps the full-size mask,
        which :meth:`_full_size` uses for the frame's sky edges."""
        self.last_sky = None
        if not self.detect_sky:
            return
        found = sky_mod.detect_sky(rgb)
        if not found.mask.any():
            return
        self.last_sky = found.mask
        small = _resample(found.mask.astype(np.float32), plan.proc_width, plan.proc_height) > 0.5
        out.pass_models = dict(out.pass_models or {})
        if out.confidence is None:  # every pixel a surface, but the sky
            out.provenance = dict(out.provenance or {}, confidence="estimated")
            out.pass_models["confidence"] = SKY_METHOD
            conf = np.ones(small.shape, np.float32)
        else:
            out.pass_models["confidence"] = out.pass_models.get("confidence", self.estimator_name) + " + " + SKY_METHOD
            conf = np.asarray(out.confidence, np.float32)
        out.confidence = np.where(small, 0.0, conf).astype(np.float32)

    def _passes(self, out: EstimatorOutput, small: np.ndarray, plan: FramePlan,
                surface: Optional[np.ndarray]) -> Tuple[Dict[str, np.ndarray], float, float]:
        """Every pass at the processing size: depth aligned, missing passes filled,
        optionally stabilised, sky set. Returns ``(passes, near, far)``."""
        pw, ph = plan.proc_width, plan.proc_height
        depth = np.asarray(out.depth, np.float32)
        if out.depth_kind == "relative":
            depth = self._align(depth, surface)
            near, far = contract.RELATIVE_NEAR, contract.RELATIVE_FAR
        else:
            depth = np.maximum(depth, 1e-4)
            vals = depth[surface] if surface is not None and surface.any() else depth
            near, far = float(vals.min()), float(max(vals.max(), vals.min() * 1.0001))
        passes = {"depth": depth}
        intr = geometry.scale_intrinsics(plan.intrinsics, (plan.width, plan.height), (pw, ph))
        passes["normal"] = self._normals(out, depth, intr, surface)
        if out.albedo is not None:
            passes["albedo"] = np.clip(out.albedo, 0, 1).astype(np.float32)
        else:
            passes["albedo"] = np.clip(small, 0, 1).astype(np.float32)
            self.report.filled.append("albedo")
        for k, fallback in (("metallic", FALLBACK_METALLIC), ("roughness", FALLBACK_ROUGHNESS)):
            v = getattr(out, k)
            if v is None:
                passes[k] = np.full((ph, pw), fallback, np.float32)
                self.report.filled.append(k)
            else:
                passes[k] = np.clip(v, 0, 1).astype(np.float32)
        if self.stabilize and self._hist.passes is not None and self._hist.rgb is not None:
            passes = self._stabilized(passes, small, near, far)
        if surface is not None:
            sky = ~surface
            passes["depth"] = np.where(sky, far, passes["depth"]).astype(np.float32)
            passes["normal"][sky] = contract.SKY_NORMAL
        return passes, near, far

    def _align(self, depth: np.ndarray, surface: Optional[np.ndarray]) -> np.ndarray:
        """Relative depth aligned: to the frame's shot-wide anchor when :attr:`anchors` has
        one (on its own: no history), else to the previous frame (the chain)."""
        if self.anchors is not None and self._number in self.anchors:
            aligned = self.anchors.align(depth, surface, self._number)
            if aligned is None:  # degenerate fit: the frame on its own, still history-free
                aligned = geometry.normalise_relative_depth(depth, self._aligner.near, self._aligner.first_far,
                                                            surface, clip_max=self._aligner.far)
            return aligned
        return self._aligner(depth, surface)

    def depth_anchor(self, rgb: np.ndarray, number: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The depth-only part of :meth:`frame` (the anchor pass,
        :func:`backend.jobs.anchors.compute_anchors`): the estimator, the frame-to-frame
        alignment and the round trip through the full-size depth that :meth:`frame`'s
        :meth:`seed` makes, so the chain equals the one :meth:`frame` runs.

        Args:
            rgb: ``H x W x 3`` float32 scene-linear RGB.
            number: the frame's source number (a gap starts a new chain, as in :meth:`frame`).

        Returns:
            ``(depth, surface)`` at the processing size: float32 aligned relative depth
            (sky = ``RELATIVE_FAR``) and a bool surface mask; ``None`` for metric depth
            (nothing to anchor).
        """
        rgb = np.asarray(rgb, dtype=np.float32)
        H, W = rgb.shape[:2]
        plan = self.plan(W, H)
        if self._hist.number is not None and number != self._hist.number + 1:
            self.reset()
        self._number = number
        small = resize(rgb, (plan.proc_width, plan.proc_height), "linear") if plan.downscaled else rgb
        out = self.estimator.predict(np.ascontiguousarray(small, dtype=np.float32))
        check_estimator_output(out, plan.proc_height, plan.proc_width, self.estimator_name)
        self._add_sky(out, rgb, plan)
        self._hist.number = number
        if out.depth_kind != "relative":
            return None
        near, far = contract.RELATIVE_NEAR, contract.RELATIVE_FAR
        surface = None if out.confidence is None else out.confidence > SKY_CONFIDENCE
        depth = self._align(np.asarray(out.depth, np.float32), surface)
        full = _resample(depth if surface is None else np.where(surface, depth, far), W, H)
        mask = None
        if surface is not None:  # as _full_size: bilinear sky mask at the 0.5 level
            sky = _resample((~surface).astype(np.float32), W, H) > 0.5
            full[sky] = far
            mask = _resample(sky.astype(np.float32), plan.proc_width, plan.proc_height, True) < 0.5
        full = np.clip(full, near, far).astype(np.float32)
        prev = _resample(full, plan.proc_width, plan.proc_height)  # as seed()
        self._aligner.reset(prev, mask)
        return prev, (np.ones(prev.shape, bool) if mask is None else mask)

    def edge_refined(self, depth: np.ndarray, rgb: np.ndarray, confidence: Optional[np.ndarray],
                      near: float, far: float) -> np.ndarray:
        """Full-size depth with its edges on the frame's (:mod:`backend.depth_edges`); sky
        (Confidence 0) neither moves nor votes. Normals stay the estimator's."""
        mask = None if confidence is None else confidence > 0
        out = refine_depth(depth, display_guide(rgb), None, mask, self.depth_edges)
        return np.clip(out, near, far).astype(np.float32)

    def _normals(self, out: EstimatorOutput, depth: np.ndarray, intr, surface) -> np.ndarray:
        if out.normal is None:
            self.report.filled.append("normal")
            return geometry.normals_from_depth(depth, intr)
        normal = np.asarray(out.normal, np.float32)
        # consistency check: estimator normals vs normals derived from its depth
        # (a diagnostic: on every 2nd pixel in each direction, with matching intrinsics)
        k = 2 if min(depth.shape) >= 16 else 1
        intr_s = tuple(v / k for v in intr)
        from_depth = geometry.normals_from_depth(depth[::k, ::k], intr_s)
        self.report.normal_depth_angle_deg = round(geometry.normal_consistency(
            normal[::k, ::k], from_depth, None if surface is None else surface[::k, ::k]), 3)
        return normal

    def _stabilized(self, passes: Dict[str, np.ndarray], small: np.ndarray, near: float,
                    far: float) -> Dict[str, np.ndarray]:
        pair = temporal.FlowPair.compute(self._hist.rgb, small)
        warped_prev = temporal.warp_passes(self._hist.passes, pair)
        self.report.flicker_raw = temporal.flicker(passes, warped_prev, pair.mask, far - near)
        passes = temporal.stabilize(passes, self._hist.passes, pair, self.strength, (near, far))
        self.report.flicker = temporal.flicker(passes, warped_prev, pair.mask, far - near)
        self.report.consistent_fraction = float(pair.mask.mean())
        return passes

    def _full_size(self, passes: Dict[str, np.ndarray], out: EstimatorOutput, surface, rgb: np.ndarray,
                   small: np.ndarray, plan: FramePlan, near: float, far: float) -> Dict[str, np.ndarray]:
        """Every pass resampled to the full frame (contract arrays, keyword names of
        :class:`GBufferFrame`)."""
        W, H = plan.width, plan.height
        depth = _resample(passes["depth"], W, H)
        normal = _resample(passes["normal"], W, H)
        nn = np.linalg.norm(normal, axis=-1, keepdims=True)
        normal = np.where(nn > 1e-6, normal / np.maximum(nn, 1e-6), np.float32(0))
        normal[nn[..., 0] <= 1e-6] = contract.SKY_NORMAL
        metallic = np.clip(_resample(passes["metallic"], W, H), 0, 1)
        roughness = np.clip(_resample(passes["roughness"], W, H), 0, 1)
        confidence = None
        if out.confidence is not None:
            confidence = np.clip(_resample(out.confidence, W, H), 0, 1)
            # bilinear mask at the 0.5 level: smooth sky edges when upsampling
            sky = _resample((~surface).astype(np.float32), W, H) > 0.5
            if self.last_sky is not None:  # the detector's edge, on the image edge, at full size
                small_sky = _resample(self.last_sky.astype(np.float32), plan.proc_width, plan.proc_height) > 0.5
                est_sky = _resample((~(surface | small_sky)).astype(np.float32), W, H) > 0.5
                sky = est_sky | self.last_sky
            confidence[sky] = 0.0
            confidence[~sky] = np.maximum(confidence[~sky], 2 * SKY_CONFIDENCE)
            depth[sky] = far
            normal[sky] = contract.SKY_NORMAL
        own = None
        if "albedo" not in self.report.filled:
            own = self.estimator.full_size_albedo(rgb, normal, confidence)
        if own is not None:  # the estimator's full-size albedo (no upsampling, no detail transfer)
            albedo = np.clip(own[0], 0, 1).astype(np.float32)
            self.report.albedo_full = own[1:]
        else:
            albedo = np.clip(_resample(passes["albedo"], W, H), 0, 1)
            if self.albedo_detail and plan.downscaled:
                albedo = albedo_detail_transfer(albedo, rgb, small)
        return {"depth": np.clip(depth, near, far).astype(np.float32), "normal": normal.astype(np.float32),
                "albedo": albedo, "metallic": metallic, "roughness": roughness, "confidence": confidence}


def _option_names(name: str) -> Optional[List[str]]:
    """The keyword options estimator ``name``'s factory names (``None``: not known, e.g. a
    factory that takes anything)."""
    import inspect

    from .estimators.base import ESTIMATORS

    try:
        f = ESTIMATORS.factory(name)
        # a class's own options and those of the classes it passes ``**options`` on to
        funcs = [c.__init__ for c in f.__mro__ if "__init__" in vars(c) and c is not object] \
            if isinstance(f, type) else [f]
        sigs = [inspect.signature(fn) for fn in funcs]
    except (KeyError, TypeError, ValueError):
        return None
    named: List[str] = []
    for sig in sigs:
        named += [p.name for p in sig.parameters.values() if p.name != "self" and p.name not in named
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not named and sigs and any(p.kind == p.VAR_KEYWORD for p in sigs[0].parameters.values()):
        return None
    return named


def _make_estimator(name: str, options: Optional[Dict[str, Any]], device: Optional[str]) -> Estimator:
    """Instantiate a registered estimator, passing ``device`` when its factory takes it.

    Raises:
        ValueError: an option the estimator does not have (a typo would otherwise be
            ignored silently), or a value it rejects; both name the option.
    """
    opts = dict(options or {})
    known = _option_names(name)
    if known is not None:
        unknown = [k for k in opts if k not in known]
        if unknown:
            shown = ", ".join(k for k in known if k != "device") or "none"
            raise ValueError(f"estimator {name!r} has no option {unknown[0]!r} (--estimator-option); "
                             f"its options: {shown}")
    given = dict(opts)
    if device is not None:
        opts["device"] = device
    try:
        try:
            return get_estimator(name, **opts)
        except TypeError:
            if device is None:
                raise
            opts.pop("device", None)
            return get_estimator(name, **opts)
    except (TypeError, ValueError) as e:
        if not given or any(repr(k) in str(e) for k in given):
            raise
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError(f"estimator {name!r} rejected --estimator-option {shown}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
