"""G-buffers of a shot with known cameras: depth measured from parallax, fused with a
single-image prior. The multi-view counterpart of :class:`backend.decomposer.Decomposer`.

For each frame ``t`` of a shot whose frames have calibrated cameras
(:mod:`backend.multiview.cameras`):

1. **Single-image pass**: the ordinary :class:`~backend.decomposer.Decomposer` gives the
   frame's albedo, metallic, roughness, sky mask and a relative depth, the *prior*.
   It is run per frame (no frame-to-frame alignment: the fusion below aligns the prior
   to the measurement anyway), so a frame's result depends only on the frames and
   cameras around it, not on where a run or a farm chunk started.
2. **Neighbours**: up to ``neighbours`` frames nearest in time (within ``window`` frames
   on each side) whose cameras move a point at the scene's typical depth by at least
   ``target_parallax_px`` pixels against infinity (a slow move gets frames further
   apart), topped up with the frames of most parallax above ``min_parallax_px``.
   None (a tripod pan, a locked-off shot,
   rotation only): the frame keeps the single-image result, with a ``warning``.
3. **Plane sweep** (:func:`backend.multiview.planesweep.multiview_depth`) on the
   undistorted frames at ``processing_width``, over inverse depth within the frame's
   range from evidence (:mod:`backend.multiview.depth_range`: the solve's points in
   this frame, the file's ``depth_range``, else sparse features triangulated with the
   cameras; points and file ranges widened by ``range_margin``; with no evidence a wide
   sweep whose confidence is halved), NCC cost, best-k, SGM, confidence (zero where the
   best plane is the first or last), local-plane refinement, piecewise-planar
   upsampling to full size.
4. **Fusion** (:func:`backend.multiview.fusion.fuse_depth`): low-confidence pixels filled
   from the prior, aligned to the measurement (robust scale and shift, then a smooth
   correction). The prior is the estimator's affine-invariant *disparity* when it gives
   one (Depth Anything, the embedded network: scale and shift fitted in disparity, since
   its inverse with the shift taken as 0 distorts far depth), else its relative depth. Normals from the fused depth with the true intrinsics, by robust
   local plane fits (:func:`backend.multiview.planefit.fit_local_planes`). The ``Confidence`` pass is the
   multi-view confidence (high = measured, low = filled), with sky at 0 as the
   contract says.
5. With lens distortion, steps 3-4 run on the undistorted grid and depth, normals and
   confidence are resampled back onto the footage's pixels.

Depth is in the cameras' units: ``depth_kind`` is ``metric`` for a scaled solve
(``units: metres``), else ``up_to_scale`` (metric up to one global factor, the same for
the whole shot).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from .. import contract, events, geometry
from ..colour import linear_to_srgb
from ..decomposer import SKY_CONFIDENCE, Decomposer
from ..depth_edges import refine_depth
from ..imaging import resize
from .cameras import Camera
from .densify import densify_planes, upsample_densified
from .depth_range import UNVERIFIED_CONFIDENCE, DepthRange, Features, RangeFinder, detect_features, wide_range
from .fusion import fuse_depth
from .order import contradicted, visibility_violations
from .planefit import fit_local_planes, fit_multiscale_planes
from .planesweep import detect_rotation_only, multiview_depth, parallax_px, plane_window, to_grey
from .reproject import temporal_disagreement
from .undistort import redistort_image, undistort_image

#: the most confidence of a pixel whose depth is its segment's plane but not measured
FILL_CONFIDENCE = 0.45
#: a frame that falls back to the single-image path gets at most this share of the
#: confidence threshold (it is not measured)
FALLBACK_CONFIDENCE = 0.9
#: a measured pixel whose depth order contradicts the prior keeps at most this share of the
#: confidence threshold (filled from the prior)
CONTRADICTED_CONFIDENCE = 0.5


@dataclass
class MultiViewOptions:
    """Settings of the multi-view path (all enter the resume hash).

    Attributes:
        neighbours: K, the frames each frame is matched against (>= 1).
        window: frames searched on each side of the reference for neighbours (>= 1).
        processing_width: width in pixels of the plane sweep (frames area-downscaled;
            never above the footage's width).
        target_parallax_px: parallax (processing pixels, a point at the scene's typical
            depth against infinity) a neighbour should give: the nearest frames in time
            that reach it are chosen (a slow camera move needs frames further apart).
        min_parallax_px: least parallax of a usable neighbour (when too few reach the
            target, those with the most parallax above this are taken).
        confidence_threshold: confidence from which a pixel counts as measured.
        range_margin: the camera file's depth range (from tracked points, which are
            sparse) is widened by this factor on both sides for the search.
        densify: piecewise-planar densification along image segments
            (:mod:`backend.multiview.densify`) before the prior fills what is left. Off by
            default: measured on Cycles scenes of cones on a cube it lowers the normals'
            error over all pixels (orbit 13.9 -> 8.4 deg, dolly 7.0 -> 6.1) and AbsRel, but
            on the ray-cast dolly of the tests and on an untextured room it makes confident
            depth worse (AbsRel 0.008 -> 0.037 on one frame); see the issue 24 report.
        surface: fuse every measured frame into the shot's surface (a sparse TSDF) and
            render each frame's depth back from it where it is found (normals fitted to it)
            (causal: frame t sees the frames up to t). Off by default (slow: see the
            issue 24 report).
        plane_agreement: relative depth difference up to which a measured pixel takes
            its segment's plane (beyond it: its own measured depth).
        consistency: the multi-view photometric consistency check
            (:mod:`backend.multiview.consistency`): pixels the other views do not
            confirm (moving objects, reflections, false matches) lose confidence.
        order_check: measured pixels whose depth order contradicts the single-image
            prior's (an object moving along the epipolar lines, e.g. a boat the camera
            follows: :mod:`backend.multiview.order`) lose confidence and are filled from
            the prior.
    """

    neighbours: int = 4
    window: int = 15
    processing_width: int = 480
    target_parallax_px: float = 6.0
    min_parallax_px: float = 1.0
    confidence_threshold: float = 0.5
    range_margin: float = 1.5
    densify: bool = False
    surface: bool = False
    plane_agreement: float = 0.02
    consistency: bool = True
    order_check: bool = True

    def __post_init__(self):
        if self.neighbours < 1 or self.window < 1:
            raise ValueError(f"neighbours and window must be >= 1, got {self.neighbours}, {self.window}")
        if self.processing_width < 32:
            raise ValueError(f"multi-view processing width must be >= 32, got {self.processing_width}")


@dataclass
class _View:
    """A frame as a neighbour: undistorted grey at the processing width, and its camera."""

    number: int
    camera: Optional[Camera]  # undistorted pinhole camera scaled to ``grey`` (None: no camera)
    grey: Optional[np.ndarray]
    features: Optional[Features] = None  # sparse features of ``grey`` (computed when needed)


@dataclass
class MultiViewReport:
    """What :meth:`MultiViewShot.compute` did for one frame (manifest fields).

    Attributes:
        neighbours: frame numbers matched against.
        measured_fraction: share of the frame with confidence >= the threshold.
        fallback: why the single-image result was kept (``None``: measured).
        scale, shift: the prior's alignment to the measurement (in disparity when
            ``prior_space`` is ``inverse``, else in depth).
        prior_space: ``inverse`` (the estimator's affine-invariant disparity was aligned)
            or ``depth`` (its relative depth was).
        prior_rank_corr, prior_trust: how well the prior orders depth like the
            measurement, and the weight its shape got in the fill (see
            :func:`backend.multiview.fusion.fuse_depth`).
        temporal_disagreement: median relative depth disagreement with the previous frame
            after reprojection with the cameras, on confident pixels (``None`` when the
            previous frame was not computed in this run).
        depth_range: the frame's search range and its evidence
            (:meth:`backend.multiview.depth_range.DepthRange.as_dict`).
        order_contradicted: share of the frame whose measured depth order contradicted
            the prior's and was not trusted (``None``: check off or not run).
    """

    neighbours: List[int] = field(default_factory=list)
    measured_fraction: float = 0.0
    fallback: Optional[str] = None
    scale: Optional[float] = None
    shift: Optional[float] = None
    prior_space: str = "depth"
    prior_rank_corr: Optional[float] = None
    prior_trust: Optional[float] = None
    temporal_disagreement: Optional[float] = None
    depth_range: Optional[Dict[str, Any]] = None
    order_contradicted: Optional[float] = None

    def manifest_fields(self) -> Dict[str, Any]:
        return {"multiview": {k: v for k, v in self.__dict__.items() if v is not None}}


class MultiViewShot:
    """Streams a shot's frames through the multi-view path (see module docstring).

    Args:
        decomposer: the single-image :class:`Decomposer` (prior, appearance passes).
        camera_for: ``(number, source_file) -> Camera or None``: a frame's camera at the
            footage's size (with its distortion), or ``None`` when it has none.
        units: ``"metres"`` or ``"solve units"``.
        depth_range: ``(near, far)`` in those units, or ``None``.
        options: :class:`MultiViewOptions`.
        ranges: where each frame's search range comes from
            (:class:`backend.multiview.depth_range.RangeFinder`: the solve's points, the
            file's range); ``None``: from ``depth_range`` alone. Without either, from
            image features, else an unverified wide sweep.
    """

    def __init__(self, decomposer: Decomposer, camera_for: Callable[[int, str], Optional[Camera]], *,
                 units: str = "solve units", depth_range: Optional[Tuple[float, float]] = None,
                 options: Optional[MultiViewOptions] = None, ranges: Optional[RangeFinder] = None):
        self.decomposer = decomposer
        self.camera_for = camera_for
        self.depth_kind = "metric" if units == "metres" else "up_to_scale"
        self.units = units
        self.depth_range = depth_range
        self.ranges = ranges if ranges is not None else RangeFinder(None, depth_range)
        self.options = options or MultiViewOptions()
        self.views: Dict[int, _View] = {}
        self.report = MultiViewReport()
        self._prev: Optional[Tuple[int, np.ndarray, Camera, np.ndarray]] = None
        #: the last measured frame: (number, scale, shift, prior space, residual gain) of its fusion, and
        #: its surface depth range; a fallback frame's prior is mapped with them
        self._align: Optional[Tuple[int, float, float, str, float]] = None
        self._range_m: Optional[Tuple[float, float]] = None
        self.fusion = None  # SparseTSDF once enable_fusion() and a frame was measured
        self._fuse = False

    def enable_fusion(self) -> None:
        """Fuse every measured frame's confident depth into one sparse TSDF
        (:class:`backend.multiview.tsdf.SparseTSDF`, ``self.fusion``) for a mesh of the
        shot. Its voxel is the footprint of two processing pixels at the first measured
        frame's median depth; depths beyond four times that frame's 90th percentile (far
        background) are not fused."""
        self._fuse = True

    # ------------------------------------------------------------------ streaming
    def stream(self, frames: Iterable[Tuple[int, Any]], wanted: Callable[[int], bool],
               lag: int = 0) -> Iterator[int]:
        """Feed ``(number, source_frame)`` in order (a *leading* decoder); yields the
        numbers of the wanted frames once every frame within ``window`` after them has
        been seen (or the footage ended), so :meth:`compute` can then run for them with
        the full frame from a second, lagging decoder. Only small grey views are kept:
        ``2 * window + 1 + lag`` of them, so memory does not grow with the window's full
        frames or the clip's length. ``lag``: how many yielded numbers the caller may
        still :meth:`compute` after asking for the next one (``--passes vector`` holds
        one frame back for its next neighbour): their views and neighbours stay. The
        views of the last frames stay after the stream ends."""
        w = self.options.window
        pending: Deque[int] = deque()
        done: Deque[int] = deque(maxlen=lag + 1)
        for number, sf in frames:
            self.views[number] = self._view(number, sf)
            if wanted(number):
                pending.append(number)
            while pending and pending[0] + w <= number:
                done.append(pending.popleft())
                yield done[-1]
                self._evict(done[0])
        while pending:
            done.append(pending.popleft())
            yield done[-1]
            self._evict(done[0])

    def width(self, cam: Camera) -> int:
        """The processing width for frames of ``cam``'s size (never upsampled)."""
        return min(self.options.processing_width, cam.width)

    def _evict(self, oldest: float) -> None:
        """Drop the views no frame from ``oldest`` on needs (they lie more than ``window`` before it)."""
        for n in [n for n in self.views if n < oldest - self.options.window]:
            del self.views[n]

    def _view(self, number: int, sf) -> _View:
        cam = self.camera_for(number, sf.path)
        if cam is None:
            return _View(number, None, None)
        grey = to_grey(linear_to_srgb(sf.rgb))
        grey, cam_u = undistort_image(grey, cam)
        w = self.width(cam)
        h = max(1, int(round(cam.height * w / cam.width)))
        return _View(number, cam_u.scaled(w, h), resize(grey, (w, h), "area"))

    # ------------------------------------------------------------------ per frame
    def _others(self, number: int) -> List[_View]:
        """The views with a camera within ``window`` frames of ``number`` (not its own):
        the window, however many more views :meth:`stream` still holds."""
        w = self.options.window
        return [v for n, v in self.views.items() if n != number and abs(n - number) <= w and v.camera is not None]

    def neighbours(self, number: int, depth: float) -> List[_View]:
        """Up to K views from the window: the nearest in time whose parallax (a point at
        ``depth`` against infinity, in processing pixels) reaches the target, then, if
        too few do, those with the most parallax above the minimum."""
        opts = self.options
        ref = self.views[number].camera
        cands = sorted(self._others(number),
                       key=lambda v: (abs(v.number - number), v.number))
        par = {v.number: parallax_px(ref, v.camera, depth, math.inf) for v in cands}
        out = [v for v in cands if par[v.number] >= opts.target_parallax_px][:opts.neighbours]
        rest = sorted((v for v in cands if v not in out and par[v.number] >= opts.min_parallax_px),
                      key=lambda v: -par[v.number])
        return out + rest[:opts.neighbours - len(out)]

    def compute(self, number: int, sf, meta: Optional[Dict[str, Any]] = None) -> contract.GBufferFrame:
        """G-buffers of frame ``number`` (its view and its neighbours' must be in the
        window: call from the loop over :meth:`stream`)."""
        self.decomposer.reset()
        # the prior's own edge refinement only where it is kept (a fallback)
        prior = self.decomposer.frame(sf.rgb, alpha=sf.alpha, number=number, meta=meta, refine_edges=False)
        self.report = MultiViewReport()
        cam = self.camera_for(number, sf.path)
        if cam is None:
            return self._fallback(prior, number, "no camera for this frame", sf.path)
        ref = self.views[number].camera
        rng = self._range(number, ref)
        nbs = self.neighbours(number, rng.probe)
        if not nbs:
            return self._fallback(prior, number, "no neighbour frame with parallax (rotation only or "
                                  "a locked-off camera?)", sf.path)
        if not rng.verified:
            rng = wide_range(ref, [v.camera for v in nbs])
            events.warning(f"frame {number}: no reconstructed points and too few image features to verify the "
                           "depth range; wide inverse-depth sweep, confidence halved", frame=number, file=sf.path)
        near, far = rng.near, rng.far
        if rng.source in ("points", "shot points", "file"):
            m = self.options.range_margin
            near, far = near / m, far * m
        self.report.depth_range = dict(rng.as_dict(), searched=[round(near, 6), round(far, 6)])
        if detect_rotation_only(ref, [v.camera for v in nbs], math.sqrt(near * far),
                                self.options.min_parallax_px).rotation_only:
            return self._fallback(prior, number, "rotation-only camera move (no parallax)", sf.path)
        self.report.neighbours = [v.number for v in nbs]
        return self._measure(prior, sf, cam, nbs, near, far, rng.verified)

    def _features(self, view: _View) -> Features:
        if view.features is None:
            view.features = detect_features(view.grey)
        return view.features

    def _range(self, number: int, ref: Camera) -> DepthRange:
        """The frame's search range from evidence (:mod:`backend.multiview.depth_range`):
        the file's points or range, else features triangulated against the nearest frames
        in time, else an unverified wide range (against the widest baseline in the window)."""
        rng = self.ranges.from_file(ref)
        if rng is not None:
            return rng
        others = sorted(self._others(number),
                        key=lambda v: (abs(v.number - number), v.number))
        rng = RangeFinder.from_features(self._features(self.views[number]), ref,
                                        [(self._features(v), v.camera) for v in others])
        if rng is not None:
            return rng
        return wide_range(ref, [v.camera for v in others])

    def _measure(self, prior: contract.GBufferFrame, sf, cam: Camera, nbs: List[_View], near: float,
                 far: float, verified: bool = True) -> contract.GBufferFrame:
        opts = self.options
        rgb_u, cam_u = undistort_image(linear_to_srgb(sf.rgb), cam)
        res = multiview_depth(rgb_u, cam_u, [v.grey for v in nbs], [v.camera for v in nbs], near, far,
                              processing_width=self.width(cam), consistency=opts.consistency)
        if not verified:  # nothing confirmed where the scene is: never confident
            res.confidence = (res.confidence * UNVERIFIED_CONFIDENCE).astype(np.float32)
        if prior.confidence is not None:  # sky is never measured (it would anchor the fusion)
            sky_u = undistort_image((prior.confidence <= SKY_CONFIDENCE).astype(np.float32), cam)[0] > 0.5
            res.confidence = np.where(sky_u, 0.0, res.confidence).astype(np.float32)
        prior_map, space = self._prior_map(prior, cam)
        if opts.order_check:
            self._order_check(res, prior_map, space, rgb_u, cam_u, nbs)
        dense = self._densify(rgb_u, res, cam_u) if opts.densify else None
        depth_in, conf_in = res.depth, res.confidence
        if dense is not None:
            depth_in = np.where(dense[0], dense[1].depth, res.depth).astype(np.float32)
            # confident only where a measurement agrees with its plane; an unmeasured pixel
            # given a plane is a good fill, not a measurement (a segment may straddle a depth
            # edge between surfaces of one colour)
            dconf = dense[1].confidence * (1.0 if verified else UNVERIFIED_CONFIDENCE)
            measured = res.confidence >= opts.confidence_threshold
            conf_in = np.where(dense[0], np.where(measured, np.maximum(res.confidence, dconf),
                                                  np.minimum(dconf, FILL_CONFIDENCE)),
                               res.confidence).astype(np.float32)
        try:
            fused = fuse_depth(depth_in, conf_in, prior_map, prior_space=space,
                               threshold=opts.confidence_threshold)
        except ValueError as e:
            return self._fallback(prior, int(prior.meta.get("frame_number", 0)) or None,
                                  f"too little measured depth ({e})", sf.path)
        self.report.scale, self.report.shift = float(fused.scale), float(fused.shift)
        self._align = (int(prior.meta.get("frame_number", 0)), float(fused.scale), float(fused.shift), space,
                       _residual_gain(fused, prior_map, space, opts.confidence_threshold))
        self.report.prior_rank_corr = round(fused.prior_rank_corr, 4)
        self.report.prior_trust = round(fused.prior_trust, 4)
        if self.decomposer.depth_edges is not None:  # issue 33: depth edges on the frame's edges
            # votes: Confidence^2 (held-out blocks of boat.mp4: median |log error| near depth
            # edges 0.054 with Confidence, 0.050 with its square; benchmarks/depth_edges_tune.py)
            # measured pixels vote but keep their measurement
            fused.depth = refine_depth(fused.depth, np.clip(rgb_u[..., :3], 0, 1), fused.confidence ** 2, None,
                                       self.decomposer.depth_edges, fixed=fused.measured)
        if self._fuse or opts.surface:
            self._integrate(fused.depth, fused.confidence, cam_u)
        if opts.surface and self.fusion is not None:
            fused.depth = self._surface(fused.depth, cam_u)
        normal = self._normals(fused.depth, fused.confidence, cam_u)
        if dense is not None:
            # normals only from planes fitted to the segment's own measurements: a plane
            # carried into an untextured segment has a guessed slope (measured: plain rooms'
            # normals 40 -> 55 deg when those were used too)
            normal = np.where((dense[0] & dense[1].own)[..., None], dense[1].normal, normal)
        self._temporal(prior, res, fused.depth, cam_u)
        depth = redistort_image(fused.depth, cam)
        normal = geometry.unit_or_facing(redistort_image(normal, cam))
        conf = np.clip(redistort_image(fused.confidence, cam), 0.0, 1.0)
        return self._assemble(prior, cam, depth, normal, conf)

    def _order_check(self, res, prior_map: np.ndarray, space: str, rgb_u: np.ndarray, cam_u: Camera,
                     nbs: List[_View]) -> None:
        """Lower the confidence of measured pixels whose depth order contradicts the prior's
        where the views confirm it (:func:`backend.multiview.order.contradicted` with
        :func:`~backend.multiview.order.visibility_violations` as evidence) below the threshold."""
        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        thr = self.options.confidence_threshold
        small_z = resize(res.depth, (w, h), "nearest")
        small_m = resize(res.confidence, (w, h), "nearest") >= thr
        grey = resize(to_grey(rgb_u), (w, h), "area")
        ev = visibility_violations(grey, cam_u.scaled(w, h), small_z, small_m,
                                   [v.grey for v in nbs], [v.camera for v in nbs])
        bad = contradicted(res.depth, res.confidence, prior_map, space, thr, evidence=ev)
        cap = np.float32(CONTRADICTED_CONFIDENCE * self.options.confidence_threshold)
        res.confidence = np.where(bad, np.minimum(res.confidence, cap), res.confidence).astype(np.float32)
        self.report.order_contradicted = round(float(bad.mean()), 4)

    def _prior_map(self, prior: contract.GBufferFrame, cam: Camera) -> Tuple[np.ndarray, str]:
        """The prior to align to the measurement, undistorted, and its space for
        :func:`~backend.multiview.fusion.fuse_depth`: the estimator's affine-invariant
        disparity (``inverse``: fitted with a scale AND a shift in disparity, sky at 0) when
        it gave one (Depth Anything, the embedded network), else the prior's depth
        (``depth``: affine in depth, e.g. Marigold's affine-invariant depth)."""
        disp = self.decomposer.last_disparity
        if disp is None:
            return undistort_image(prior.depth, cam)[0], "depth"
        h, w = prior.depth.shape
        d = resize(np.ascontiguousarray(disp, dtype=np.float32), (w, h), "linear")
        if prior.confidence is not None:
            d = np.where(prior.confidence <= SKY_CONFIDENCE, 0.0, d).astype(np.float32)
        self.report.prior_space = "inverse"
        return undistort_image(d, cam)[0], "inverse"

    def _densify(self, rgb_u: np.ndarray, res, cam_u: Camera):
        """Piecewise-planar densification along image segments at the processing width
        (:func:`backend.multiview.densify.densify_planes`), evaluated at full size. Returns
        ``(use, Densified)``: ``use`` marks pixels whose plane is taken, those with a plane
        that are either unmeasured or agree with their measured depth within
        ``plane_agreement`` (a curved or thin surface a segment's plane does not follow keeps
        its measured depth and local-plane normals)."""
        opts = self.options
        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        small = cam_u.scaled(w, h)
        dn = densify_planes(resize(rgb_u[..., :3], (w, h), "area"), resize(res.depth, (w, h), "nearest"),
                            resize(res.confidence, (w, h), "nearest"), small.intrinsics,
                            threshold=opts.confidence_threshold)
        dn = upsample_densified(dn, (cam_u.width, cam_u.height), cam_u.intrinsics)
        with np.errstate(invalid="ignore"):
            agree = np.abs(dn.depth - res.depth) <= opts.plane_agreement * res.depth
        use = dn.has_plane & ((res.confidence < opts.confidence_threshold) | agree)
        return use, dn

    def _surface(self, depth_u: np.ndarray, cam_u: Camera) -> np.ndarray:
        """Depth rendered back from the shot's fused surface so far
        (:meth:`backend.multiview.tsdf.SparseTSDF.render`, at the processing width, near the
        frame's own depth): where the surface is found, the depth is scaled by the
        rendered / own ratio (nearest-upsampled, so edges stay the frame's); elsewhere it
        is kept. Normals are then fitted to this depth as usual: the TSDF's own gradient
        normals measured worse (cones orbit: 8.5 -> 14.4 deg on confident pixels)."""
        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        small = resize(depth_u, (w, h), "nearest")
        d, _, hit = self.fusion.render(small, cam_u.scaled(w, h), normals=False)
        ratio = np.where(hit, d / np.maximum(small, 1e-12), 1.0).astype(np.float32)
        if (w, h) != (cam_u.width, cam_u.height):
            ratio = resize(ratio, (cam_u.width, cam_u.height), "nearest")
        return (depth_u * ratio).astype(np.float32)

    def _integrate(self, depth_u: np.ndarray, conf_u: np.ndarray, cam_u: Camera) -> None:
        from .tsdf import SparseTSDF

        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        d, c, cam = resize(depth_u, (w, h), "nearest"), resize(conf_u, (w, h), "nearest"), cam_u.scaled(w, h)
        thr = self.options.confidence_threshold
        if self.fusion is None:
            ok = (c >= thr) & (d > 0)
            if not ok.any():
                return
            self.fusion = SparseTSDF(SparseTSDF.voxel_for(d, c, cam, thr))
            self._max_depth = 4.0 * float(np.percentile(d[ok], 90))
        self.fusion.integrate(d, c, cam, threshold=thr, max_depth=self._max_depth)

    def _normals(self, depth_u: np.ndarray, conf_u: np.ndarray, cam_u: Camera) -> np.ndarray:
        """Normals of the fused depth from robust local planes at the processing width
        (:func:`backend.multiview.planefit.fit_multiscale_planes`: shiftable windows
        weighted by the confidence, of side :func:`~backend.multiview.planesweep.plane_window`
        or twice that where the larger window fits as well, i.e. on flat surfaces; on
        noisy depth also four times that, with a looser tolerance):
        plane sweep quantises depth into terraces, whose finite differences are noise,
        while a plane fitted over a window that does not cross a depth edge or crease
        gives the surface's orientation. Resampled to full size and re-normalised."""
        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        small = resize(depth_u, (w, h), "area")
        wts = np.maximum(resize(conf_u, (w, h), "area"), 0.05)  # filled pixels: still a surface
        win = plane_window(w)
        n = fit_multiscale_planes(small, wts, cam_u.scaled(w, h).intrinsics, (win, 2 * win + 1),
                                  noisy_wins=(4 * win + 1,)).normal
        if (w, h) == (cam_u.width, cam_u.height):
            return n
        return geometry.unit_or_facing(resize(n, (cam_u.width, cam_u.height), "linear"))

    def _temporal(self, prior, res, depth_u: np.ndarray, cam_u: Camera) -> None:
        """Reproject the previous frame's depth into this one (both computed in this run)."""
        number = int(prior.meta.get("frame_number", -1))
        w = self.width(cam_u)
        h = max(1, int(round(cam_u.height * w / cam_u.width)))
        small, cam_s = resize(depth_u, (w, h), "nearest"), cam_u.scaled(w, h)
        confident = resize(res.confidence, (w, h), "nearest") >= self.options.confidence_threshold
        if self._prev is not None and self._prev[0] == number - 1:
            med, _ = temporal_disagreement(self._prev[1], self._prev[2], small, cam_s, self._prev[3])
            self.report.temporal_disagreement = None if math.isnan(med) else round(med, 5)
        self._prev = (number, small, cam_s, confident)

    def _assemble(self, prior: contract.GBufferFrame, cam: Camera, depth: np.ndarray, normal: np.ndarray,
                  conf: np.ndarray) -> contract.GBufferFrame:
        sky = prior.confidence <= SKY_CONFIDENCE if prior.confidence is not None else np.zeros(depth.shape, bool)
        surface = ~sky
        vals = depth[surface] if surface.any() else depth.ravel()
        near, far = float(vals.min()), float(max(vals.max(), vals.min() * 1.0001))
        depth = np.clip(np.where(sky, far, depth), near, far).astype(np.float32)
        normal[sky] = contract.SKY_NORMAL
        conf = np.where(sky, 0.0, np.maximum(conf, 2 * SKY_CONFIDENCE)).astype(np.float32)
        self.report.measured_fraction = round(float((conf >= self.options.confidence_threshold).mean()), 4)
        self._range_m = (near, far)
        meta = dict(prior.meta)
        meta.update(depth_kind=self.depth_kind, depth_near=near, depth_far=far,
                    **self._camera_meta(cam), depth_source="multiview", prior_estimator=prior.meta.get("estimator"),
                    measured_fraction=self.report.measured_fraction,
                    neighbours=self.report.neighbours,
                    filled=[p for p in prior.meta.get("filled", []) if p != "normal"])
        # per-pass provenance: depth measured from parallax (fused with the estimate where
        # parallax is weak), normals and confidence derived from that measurement
        prov = dict(prior.meta.get("provenance") or {})
        models = dict(prior.meta.get("pass_models") or {})
        prov.update(depth="measured", normal="derived", confidence="derived")
        models.update(depth=f"multi-view plane sweep, fused with {prior.meta.get('estimator')} "
                            f"(measured fraction {self.report.measured_fraction})",
                      normal="plane fit of the measured depth",
                      confidence="multi-view consistency")
        meta.update(provenance=prov, pass_models=models)
        return contract.GBufferFrame(combined=prior.combined, depth=depth, normal=normal.astype(np.float32),
                                     albedo=prior.albedo, metallic=prior.metallic, roughness=prior.roughness,
                                     confidence=conf, meta=meta)

    def _camera_meta(self, cam: Camera) -> Dict[str, Any]:
        """The camera fields of a frame's meta (``camera``, ``intrinsics``), from which the
        writer stamps ``worldToCamera``/``worldToNDC`` (:mod:`backend.exr_attrs`)."""
        return {"intrinsics": list(cam.intrinsics), "intrinsics_assumed": False,
                "camera": {"camera_to_world": cam.c2w_opengl().tolist(), "convention": "blender",
                           "units": self.units, "distortion_model": cam.distortion_model,
                           "distortion": list(cam.distortion)}}

    def _fallback(self, prior: contract.GBufferFrame, number, reason: str, file) -> contract.GBufferFrame:
        """Keep the single-image result for this frame, and say so. Its Confidence is kept
        below the threshold (sky stays at its value): in a multi-view shot, Confidence >=
        the threshold means measured from parallax (docs/gbuffer-contract.md), and nothing
        in this frame is. The frame keeps its camera (when it has one), and its depth is
        mapped into the shot's units with the scale and shift the last measured frame's
        fusion found (:meth:`_scale_to_shot`), so it does not jump between its measured
        neighbours."""
        self.report.fallback = reason
        self._prev = None
        events.warning(f"frame {number}: {reason}; using the single-image depth", frame=number, file=file)
        prior.meta["depth_source"] = "single-image"
        if self.decomposer.depth_edges is not None:
            prior.depth = self.decomposer.edge_refined(prior.depth, prior.combined[..., :3], prior.confidence,
                                                        prior.meta["depth_near"], prior.meta["depth_far"])
        cam = self.camera_for(number, file) if number is not None else None
        if cam is not None:
            prior.meta.update(self._camera_meta(cam))
        self._scale_to_shot(prior)
        if prior.confidence is not None:
            cap = np.float32(FALLBACK_CONFIDENCE * self.options.confidence_threshold)
            c = prior.confidence
            prior.confidence = np.where(c <= SKY_CONFIDENCE, c, np.minimum(c, cap)).astype(np.float32)
        return prior

    def _scale_to_shot(self, prior: contract.GBufferFrame) -> None:
        """Map a fallback frame's single-image depth into the shot's units (in place): the
        prior (disparity or depth, as :meth:`_prior_map` gives it, without undistortion)
        through the last measured frame's fusion scale and shift and its residual gain
        (:func:`_residual_gain`), clipped to half / twice
        that frame's surface range; sky at the far value. Without a measured frame before
        it the frame keeps its relative depth (``depth_kind`` says so)."""
        if self._align is None or self._range_m is None:
            return
        ref, s, t, space, gain = self._align
        disp = self.decomposer.last_disparity
        if (space == "inverse") != (disp is not None):
            return
        h, w = prior.depth.shape
        if space == "inverse":
            m = s * resize(np.ascontiguousarray(disp, dtype=np.float32), (w, h), "linear") + t
            depth = gain / np.maximum(m, 1e-12)
        else:
            depth = gain * (s * prior.depth + t)
        near, far = self._range_m[0] * 0.5, self._range_m[1] * 2.0
        sky = prior.confidence <= SKY_CONFIDENCE if prior.confidence is not None else np.zeros((h, w), bool)
        depth = np.clip(np.where(np.isfinite(depth), depth, far), near, far)
        vals = depth[~sky] if (~sky).any() else depth.ravel()
        lo, hi = float(vals.min()), float(max(vals.max(), vals.min() * 1.0001))
        prior.depth = np.where(sky, hi, np.clip(depth, lo, hi)).astype(np.float32)
        prov = dict(prior.meta.get("provenance") or {}, depth="estimated")
        models = dict(prior.meta.get("pass_models") or {})
        models["depth"] = (f"{prior.meta.get('estimator')}, mapped into the shot's units with frame {ref}'s "
                           f"fusion scale, shift ({space}) and gain {gain:.4f}")
        prior.meta.update(depth_kind=self.depth_kind, depth_near=lo, depth_far=hi, scaled_from_frame=ref,
                          provenance=prov, pass_models=models)


def _residual_gain(fused, prior_map: np.ndarray, space: str, threshold: float) -> float:
    """Median of measured depth / the prior mapped by the fusion's scale and shift, on the
    confident pixels: what the fusion's local correction adds on the whole (the affine fit
    is robust, not a median fit). 1 when nothing is confident."""
    ok = fused.confidence >= threshold
    if not ok.any():
        return 1.0
    h, w = fused.depth.shape
    m = fused.scale * resize(np.asarray(prior_map, np.float32), (w, h)) + fused.shift
    aligned = 1.0 / np.maximum(m, 1e-12) if space == "inverse" else m
    ok &= np.isfinite(aligned) & (aligned > 0)
    return float(np.median(fused.depth[ok] / aligned[ok])) if ok.any() else 1.0
