"""Decompose job: footage in, a G-buffer contract sequence out.

The per-frame computation is :class:`backend.decomposer.Decomposer` (in memory); this
module adds the footage, the files and the folder:

1. Decode each source frame (:mod:`backend.footage`), scene-linear Rec.709, full size.
2. ``Decomposer.frame`` -> a :class:`backend.contract.GBufferFrame` (see
   :mod:`backend.decomposer` for depth alignment, filled passes, stabilisation, sky).
3. Write ``gbuffer_NNNN.exr`` atomically (NNNN = source index + 1) and keep
   ``manifest.json`` up to date (:func:`backend.jobs.runner.run_job`: progress, cancel,
   resume, farm chunks into one folder).

The command line for it is :mod:`backend.jobs.decompose_cli`.
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

from .. import contract, events, geometry
from ..decomposer import (  # noqa: F401  (re-exported: the names' former home)
    DEFAULT_ESTIMATOR, DEFAULT_STRENGTH, FALLBACK_METALLIC, FALLBACK_ROUGHNESS, MIN_RESOLUTION,
    SKY_CONFIDENCE, Decomposer, albedo_detail_transfer,
)
from ..errors import JobError
from ..footage import Footage, FootageError, open_footage
from ..imaging import resize
from .history import note_stale_history
from .mesh import check_mesh_path, write_mesh
from .options import key_values
from .runner import Deferred, JobResult, run_job

#: deprecated name of :data:`backend.decomposer.MIN_RESOLUTION`
MIN_MAX_SIZE = MIN_RESOLUTION


def parse_frames(spec: Optional[str]) -> Tuple[int, Optional[int]]:
    """``"A-B"`` / ``"A-"`` / ``"A"`` -> ``(first, last or None)``, inclusive *source*
    frame numbers (a movie's frames are 1..N; an image sequence's are the numbers in its
    file names, e.g. 1001-1100; output ``gbuffer_NNNN.exr`` carries the same number).
    ``None`` -> ``(0, None)``: every frame.

    Only ASCII digits ``0-9`` are numbers here (docs/reliability.md, "Decisions"): full-width
    or Arabic-Indic digits, ``1_002`` and ``+1002`` (which Python's ``int`` accepts) are
    refused, and so is an empty or blank ``spec`` (``--frames ""`` from an empty shell
    variable in a farm script means a mistake, not "the whole shot").

    Raises:
        ValueError: empty, malformed or reversed range (``""``, ``"-5"``, ``"5-3"``, ``"x"``,
            ``"+1"``, ``"1_0"``), negative numbers.
    """
    if spec is None:
        return 0, None
    s = str(spec).strip()
    if not s:
        raise ValueError(f"--frames {spec!r}: empty (an empty shell variable?); give A-B, A- or A, "
                         "or leave --frames out for the whole shot")
    m = _FRAMES_RE.fullmatch(s)
    if m is None:
        if s.startswith("-") and _FRAMES_RE.fullmatch(s[1:]):
            raise ValueError(f"--frames {spec!r}: frame numbers are >= 0")
        raise ValueError(f"--frames {spec!r}: expected A-B, A- or A with source frame numbers >= 0 in "
                         "ASCII digits 0-9 (e.g. 1-24, or 1001-1100 for a sequence numbered from 1001)")
    first = int(m.group(1))
    if m.group(2) is None:
        last = first
    else:
        last = int(m.group(3)) if m.group(3) else None
    if last is not None and last < first:
        raise ValueError(f"--frames {spec!r}: expected A <= B")
    return first, last


#: ``A``, ``A-`` or ``A-B`` in ASCII digits, blanks allowed around the numbers
_FRAMES_RE = re.compile(r"([0-9]+)\s*(-\s*([0-9]*))?", re.ASCII)


def read_settings_hash(path: Path) -> Optional[str]:
    """Settings hash stored in a contract frame's header (``gbuffer/settings_hash``), or None."""
    v = contract.read_meta(path).get("settings_hash")
    return None if v is None else str(v)


def read_manifest_entry(path: Path) -> Optional[Dict[str, Any]]:
    """The frame's manifest entry as stored in its header (``gbuffer/manifest_entry``), or None."""
    v = contract.read_meta(path).get("manifest_entry")
    return v if isinstance(v, dict) else None


def read_input_hash(path: Path) -> Optional[str]:
    """Input fingerprint stored in a contract frame's header (``gbuffer/input_hash``), or None."""
    v = contract.read_meta(path).get("input_hash")
    return None if v is None else str(v)


def _input_fingerprints(info, out_dir) -> Tuple[Any, Dict[str, Any]]:
    """``(frame number -> fingerprint, cache)``: a movie's frames share the movie file's
    fingerprint; a sequence frame has its image file's (:mod:`backend.jobs.fingerprint`).
    The cache (file identity -> SHA-256) lives in the manifest's ``inputs``."""
    from .fingerprint import InputFingerprints

    try:
        old = contract.read_manifest(out_dir) if Path(out_dir).is_dir() else {}
    except (OSError, ValueError):
        old = {}
    fps = InputFingerprints(old.get("inputs") if isinstance(old, dict) else None)
    if info.kind == "movie":
        # The movie is fingerprinted once, as opened: every frame decoded from it carries
        # that fingerprint. A file moved over it or rewritten in place while the job runs
        # (its identity changes) stops the job at the next frame, naming the file: frames
        # decoded after that could mix two versions (fresh-eyes trial of issue 16).
        from .fingerprint import file_identity

        try:
            fixed, ident0 = fps.of(info.path), file_identity(info.path)
        except OSError:
            fixed = ident0 = None

        def input_for(n: int) -> Optional[str]:
            if fixed is None:
                return None
            try:
                now = file_identity(info.path)
            except OSError:
                now = None
            if now != ident0:
                raise FootageError(f"{info.path} was replaced or modified while it was being decomposed "
                                   f"(noticed at frame {n}); the frames written before it come from the "
                                   "version opened at the start: run again with --overwrite to recompute "
                                   "them from the current file", frame=n, file=info.path)
            return fixed
    else:
        by_number = dict(zip(info.numbers, info.files))

        def input_for(n: int) -> Optional[str]:
            f = by_number.get(n)
            if f is None:
                return None
            try:
                return fps.of(f)
            except OSError:
                return None
    return input_for, fps.cache


def clip_frame_range(first: int, last: Optional[int], n_src, path, spec: Optional[str]
                     ) -> Optional[int]:
    """Number of frames the source-number range ``first..last`` covers.

    Args:
        n_src: the clip's frame count (frames ``1..n_src``), or the list of its source
            frame numbers (an image sequence: ``[1001, 1002, 1004]``), or ``None`` (unknown).

    A range starting past the end, or holding no frame, is an error; one that only ends
    past the end is clipped, with a ``warning`` event (:func:`backend.events.warning`).

    Raises:
        FootageError: naming the clip's frame numbers.
    """
    if n_src is None:
        return None if last is None else last - max(first, 1) + 1
    nums = list(range(1, n_src + 1)) if isinstance(n_src, int) else sorted(n_src)
    if not nums:
        return 0
    lo, hi = nums[0], nums[-1]
    have = f"{len(nums)} frame(s)" if nums == list(range(1, len(nums) + 1)) else \
        f"frames {lo}-{hi} ({len(nums)} in all)"
    if first > hi:
        raise FootageError(f"{path}: --frames {spec} starts past the end: the clip has {have}",
                           frame=first, file=path)
    if last is not None and last > hi:
        events.warning(f"--frames {spec}: the clip has {have}; clipped to {max(first, lo)}-{hi}",
                       file=path)
        last = hi
    count = sum(1 for n in nums if n >= first and (last is None or n <= last))
    if count == 0:
        raise FootageError(f"{path}: --frames {spec} holds no frame: the clip has {have}",
                           frame=first, file=path)
    if spec and first < lo and not (last is not None and last > hi):
        events.warning(f"--frames {spec}: the clip has {have}, starting at frame {lo}; clipped to "
                       f"{lo}-{hi if last is None else last}", file=path)
    return count


def _warn_capped_resolution(requested, dec, estimator: str, info) -> None:
    """A ``warning`` event when the estimator computes below what was asked
    (``--processing-resolution 0`` = full size, or a size above the estimator's maximum:
    the embedded estimator computes at 192 px at most). Output is full size either way."""
    if requested is None:
        return
    want = max(info.width, info.height) if requested == 0 else int(requested)
    got = dec.resolution
    if got is not None and got < min(want, max(info.width, info.height)):
        asked = "0 (full size)" if requested == 0 else str(requested)
        events.warning(f"--processing-resolution {asked}: the {estimator} estimator computes at "
                       f"{got} px at most, so it runs at {got} px (the passes are still written at "
                       f"{info.width}x{info.height})")


@dataclass
class _Shot:
    """The source and what every frame of this job shares."""

    src: Footage
    decomposer: Decomposer
    out_dir: Path
    first: int
    last: Optional[int]
    estimator: str
    input_for: Any = None  # frame number -> input fingerprint (backend.jobs.fingerprint)
    #: farm chunk (``--warmup K``): the first frame whose temporal state is computed
    #: (K frames before ``first``, never written); ``None``: today's behaviour (seed from
    #: the previous frame's file when this run did not compute it)
    warm_from: Optional[int] = None
    #: with ``warm_from``: whether frame ``first`` will be computed (else the warmup is skipped)
    warm_needed: bool = True

    #: whether the shot's first source value above half's range was reported (once per shot)
    over_half: bool = False

    def _check_half_range(self, sf, number: int) -> None:
        """Warn once per shot when a source frame holds values above 65504, the largest finite
        half float: the Combined pass (half) stores them clamped to 65504 (HDR EXR input)."""
        if self.over_half or sf.rgb is None or np.asarray(sf.rgb).dtype.kind != "f":
            return
        peak = float(np.nanmax(sf.rgb)) if np.asarray(sf.rgb).size else 0.0
        if peak > contract_half_max():
            self.over_half = True
            events.warning(f"{sf.path} (frame {number}): source values up to {peak:g} are above 65504, the largest "
                           f"half float: the Combined pass stores them clamped to 65504 (warned once per shot; "
                           f"the other passes are computed from the unclamped values)", frame=number, file=sf.path)

    def frame_meta(self, sf, number: int) -> Dict[str, Any]:
        info = self.src.info
        return {"source": info.path, "source_real_path": os.path.realpath(info.path), "frame_index": sf.index,
                "timestamp": sf.pts_s,
                "source_colorspace": info.colorspace, "frame_number": number, "source_file": sf.path,
                "sar": f"{info.sar.numerator}/{info.sar.denominator}", "rotation": info.rotation}

    def compute(self, sf, number: int) -> contract.GBufferFrame:
        """One frame, with any failure reported as a :class:`JobError` naming it."""
        self._check_half_range(sf, number)
        try:
            return self._compute(sf, number)
        except (KeyboardInterrupt, JobError):
            raise
        except MemoryError as e:
            raise JobError(f"estimator {self.estimator!r} ran out of memory on {sf.path} (frame {number}); try a "
                           f"smaller --processing-resolution or close other programs",
                           frame=number, file=sf.path) from e
        except Exception as e:
            raise JobError(f"estimator {self.estimator!r} failed on {sf.path} (frame {number}): "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                           frame=number, file=sf.path) from e

    def _compute(self, sf, number: int) -> contract.GBufferFrame:
        """The temporal state continues from the previous frame's file when this run did
        not compute it (resume). A farm chunk (``warm_from`` set) seeds only from a frame of
        its own range (its own earlier, identical computation: resume within the chunk);
        its first frame continues from the warmup frames instead, never from another
        chunk's file, so the result does not depend on which chunk finished first."""
        dec = self.decomposer
        if dec.last_number != number - 1:
            dec.reset()
            prev = contract.frame_path(self.out_dir, number - 1)
            own = self.warm_from is None or number - 1 >= self.first
            if number > 1 and own and prev.exists():
                dec.seed(contract.read_frame(prev), number - 1)
        return dec.frame(sf.rgb, alpha=sf.alpha, number=number, meta=self.frame_meta(sf, number))

    def manifest_fields(self) -> Dict[str, Any]:
        return self.decomposer.report.manifest_fields()

    def tasks(self) -> Iterator[Tuple[int, Any]]:
        for sf in self.src:
            number = sf.number
            if self.warm_from is not None and self.warm_from <= number < self.first:
                if self.warm_needed:  # warmup: temporal state only, never written
                    self.compute(sf, number)
                continue
            if number < self.first:
                continue
            if self.last is not None and number > self.last:
                break
            yield number, self._work(sf, number)

    def _work(self, sf, number: int):
        def work(tmp_path: Path, shash: str):
            frame = self.compute(sf, number)
            frame.meta["settings_hash"] = shash
            fp = self.input_for(number) if self.input_for is not None else None
            if fp is not None:
                frame.meta["input_hash"] = fp
            entry = {"source_index": sf.index, "pts_s": sf.pts_s,
                     "depth_near": frame.meta["depth_near"], "depth_far": frame.meta["depth_far"]}
            entry.update(self.manifest_fields())
            for k in ("provenance", "pass_models"):
                if k in frame.meta:
                    entry[k] = frame.meta[k]
            # the entry travels in the frame's header too: a frame written just before a hard
            # kill (not yet in manifest.json) is recorded on resume with all of it
            frame.meta["manifest_entry"] = entry
            # validation + EXR encoding run on the runner's writer thread while the next
            # frame is decoded and estimated (the runner renames tmp_path atomically)
            return Deferred(lambda: contract.write_frame(tmp_path, frame, atomic=False) and None, entry)
        return work


@dataclass
class _MultiViewShot(_Shot):
    """A shot with cameras: frames go through :class:`backend.multiview.shot.MultiViewShot`
    (frames within its window around the range are decoded as neighbours)."""

    mv: Any = None  # MultiViewShot
    reopen: Any = None  # () -> a second Footage over the same source

    def _compute(self, sf, number: int) -> contract.GBufferFrame:
        return self.mv.compute(number, sf, meta=self.frame_meta(sf, number))

    def manifest_fields(self) -> Dict[str, Any]:
        out = super().manifest_fields()
        out.update(self.mv.report.manifest_fields())
        return out

    def tasks(self) -> Iterator[Tuple[int, Any]]:
        """Two decoders over the footage: the leading one feeds the neighbour window
        (``window`` frames ahead), the lagging one gives each frame in full when it is
        computed, so no full frame waits in memory."""
        w = self.mv.options.window

        def frames(src):
            for sf in src:
                number = sf.number
                if number < self.first - w:
                    continue
                if self.last is not None and number > self.last + w:
                    break
                yield number, sf

        def wanted(n: int) -> bool:
            return n >= self.first and (self.last is None or n <= self.last)

        yield from _lagging_tasks(self, self.mv.stream(frames(self.src), wanted), frames)


@dataclass
class _WindowedShot(_Shot):
    """A shot for an estimator that computes frames in windows (``estimator.windowed``:
    :class:`backend.estimators.video_depth.VideoDepthAnythingEstimator`). A leading
    decoder feeds it each frame at the processing size; a lagging decoder gives each
    frame in full once its window has run, so only the estimator's window (network
    inputs) waits in memory, never full frames."""

    reopen: Any = None  # () -> a second Footage over the same source

    def _compute(self, sf, number: int) -> contract.GBufferFrame:
        self.decomposer.estimator.take(number)
        return super()._compute(sf, number)

    def manifest_fields(self) -> Dict[str, Any]:
        out = super().manifest_fields()
        out["depth_window"] = self.decomposer.estimator.current_window
        return out

    def _frames(self, src):
        for sf in src:
            if sf.number < self.first:
                continue
            if self.last is not None and sf.number > self.last:
                break
            yield sf.number, sf

    def _complete(self) -> Iterator[int]:
        """Frame numbers in the order their windows complete them."""
        dec, est = self.decomposer, self.decomposer.estimator
        est.reset_stream()
        for number, sf in self._frames(self.src):
            h, w = sf.rgb.shape[:2]
            plan = dec.plan(w, h)
            small = resize(sf.rgb, (plan.proc_width, plan.proc_height), "linear") if plan.downscaled else sf.rgb
            try:
                done = est.feed(number, small)
            except (KeyboardInterrupt, JobError):
                raise
            except Exception as e:
                raise JobError(f"estimator {self.estimator!r} failed on the window ending at {sf.path} "
                               f"(frame {number}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                               frame=number, file=sf.path) from e
            yield from done
        yield from est.finish()

    def tasks(self) -> Iterator[Tuple[int, Any]]:
        yield from _lagging_tasks(self, self._complete(), self._frames)


def _lagging_tasks(shot, numbers: Iterator[int], frames) -> Iterator[Tuple[int, Any]]:
    """The tasks of a shot whose frames are computed in the order of ``numbers`` (a
    generator driven by a leading decoder): a second, lagging decoder over the footage
    (``shot.reopen()``, filtered by ``frames(src) -> (number, frame)``) gives each frame in
    full when its number comes, so no full frame waits in memory.

    Raises:
        JobError: the second decoder ended before a number came (the footage changed).
    """
    with shot.reopen() as lag_src:
        lag = frames(lag_src)
        for number in numbers:
            for n, sf in lag:
                if n == number:
                    break
            else:  # the second decoder ended early: the footage changed under us
                raise JobError(f"{shot.src.info.path}: frame {number} could not be decoded a second time",
                               frame=number, file=shot.src.info.path)
            yield number, shot._work(sf, number)


def _windows_summary(result: JobResult, estimator) -> None:
    man = result.manifest
    man["depth_windows"] = estimator.report()
    contract.write_manifest(result.out_dir, man)


def _camera_lookup(camset, info) -> Any:
    """``(number, source_file) -> Camera or None`` at the footage's size: our JSON is
    matched by source frame number, a COLMAP model by image file name."""
    from ..multiview.cameras import fit_to_frame
    from ..multiview.undistort import check_distortion

    fitted: Dict[Any, Any] = {}
    by_name = any(isinstance(k, str) for k in camset.cameras)

    def camera_for(number: int, source_file: str):
        key = os.path.basename(source_file) if by_name else number
        if key not in fitted:
            cam = camset.cameras.get(key)
            if cam is not None:
                cam = fit_to_frame(cam, info.width, info.height, camset.path, number)
                check_distortion(cam, camset.path, number)
            fitted[key] = cam
        return fitted[key]

    return camera_for


def _open_cameras(path, info, first: int, last: Optional[int]):
    """Read and check a camera file against the footage (see :func:`decompose`)."""
    from ..multiview.camera_files import read_cameras
    from ..multiview.cameras import CameraError

    camset = read_cameras(path)
    if len(camset.cameras) < 2:
        raise CameraError(f"{camset.path}: a camera solve needs at least 2 cameras, the file has "
                          f"{len(camset.cameras)}", file=camset.path)
    if all(isinstance(k, int) for k in camset.cameras):
        # source frame numbers: a sequence's own (0, 1001, gaps kept), a movie's 1..N
        numbers = list(info.numbers) or (list(range(1, info.n_frames + 1)) if info.n_frames else [])
        wanted = [n for n in numbers if n >= first and (last is None or n <= last)]
        if not numbers:  # frame count unknown: judge by the requested range only
            wanted = None
        keys = sorted(camset.cameras)
        span = f"{keys[0]}-{keys[-1]}"
        if wanted is not None:
            have = set(camset.cameras)
            covered = [n for n in wanted if n in have]
            shown = f"{wanted[0]}-{wanted[-1]}" if wanted else "none"
            if not covered:
                raise CameraError(f"{camset.path}: no camera for the frames decomposed ({shown}); the "
                                  f"file has frames {span} (cameras are matched by source frame number: "
                                  "a movie's frames are 1..N, a sequence keeps its file numbers)",
                                  file=camset.path)
            foreign = [k for k in keys if k not in set(numbers)]
            if len(covered) < len(wanted) and foreign:
                events.warning(f"{camset.path}: cameras for frames {span}, footage frames {numbers[0]}-"
                               f"{numbers[-1]}: {len(wanted) - len(covered)} frame(s) have no camera and "
                               f"{len(foreign)} camera(s) match no frame; cameras are matched by source "
                               "frame number, check that the file is numbered like the footage",
                               file=camset.path)
        elif not [k for k in keys if k >= first and (last is None or k <= last)]:
            raise CameraError(f"{camset.path}: no camera for the frames decomposed ({first}-"
                              f"{last if last is not None else ''}); the file has frames {span}",
                              file=camset.path)
    return camset


def _points_file(camset):
    """The file the camera set's points came from (for messages)."""
    p = Path(camset.path)
    return p / "points3D.txt" if p.is_dir() else p


def _multiview_shot(src, dec, out_dir, first, last, estimator, cameras, options, reopen) -> "_MultiViewShot":
    from ..multiview.shot import MultiViewOptions, MultiViewShot

    from ..multiview.depth_range import RangeFinder, check_file_range, check_points

    camset = _open_cameras(cameras, src.info, first, last)
    opts = options if isinstance(options, MultiViewOptions) else MultiViewOptions(**(options or {}))
    cams = list(camset.cameras.values())
    ranges = RangeFinder(check_points(camset.points, cams, _points_file(camset)),
                         check_file_range(None if Path(camset.path).is_dir() else camset.depth_range, camset.path),
                         cams, _points_file(camset))
    mv = MultiViewShot(dec, _camera_lookup(camset, src.info), units=camset.units,
                       depth_range=ranges.file_range, options=opts, ranges=ranges)
    shot = _MultiViewShot(src, dec, out_dir, first, last, estimator, mv=mv, reopen=reopen)
    shot.camset = camset
    return shot


def _multiview_summary(result: JobResult) -> None:
    """Shot-level figures of the multi-view path in the manifest: the measured share of
    the frames and the temporal consistency (median over frames of the median relative
    depth disagreement after reprojecting frame t into t+1 with the cameras)."""
    man = result.manifest
    rows = [f["multiview"] for f in man.get("frames", []) if f.get("multiview")]
    if not rows:
        return
    temporal = [r["temporal_disagreement"] for r in rows if r.get("temporal_disagreement") is not None]
    man["multiview"] = {
        "frames_measured": sum(1 for r in rows if not r.get("fallback")),
        "frames_single_image": sum(1 for r in rows if r.get("fallback")),
        "measured_fraction": float(np.mean([r.get("measured_fraction", 0.0) for r in rows])),
    }
    man["temporal_consistency"] = {
        "metric": "median relative depth disagreement after reprojecting frame t into t+1 "
                  "with the cameras, on confident pixels; lower is steadier",
        "median": float(np.median(temporal)) if temporal else None,
        "frame_pairs": len(temporal),
    }
    contract.write_manifest(result.out_dir, man)


def _camera_settings(camset, mv_options) -> Dict[str, Any]:
    import hashlib

    p = Path(camset.path)
    files = sorted(p.glob("*.txt")) if p.is_dir() else [p]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
    return {"file": str(p), "sha256": digest, "units": camset.units,
            "depth_range": camset.depth_range, "options": _option_settings(mv_options)}


#: multi-view options added by issue 24, left out of the settings while at their defaults
#: (so the hash of a run without them is unchanged and earlier outputs still resume)
_NEW_OPTION_DEFAULTS = {"densify": False, "surface": False, "plane_agreement": 0.02}


def _option_settings(mv_options) -> Dict[str, Any]:
    return {k: v for k, v in mv_options.__dict__.items()
            if not (k in _NEW_OPTION_DEFAULTS and v == _NEW_OPTION_DEFAULTS[k])}


def contract_half_max() -> float:
    """The largest finite half float (65504): what the Combined pass can hold."""
    return float(np.finfo(np.float16).max)


def _job_settings(dec: Decomposer, plan, info, albedo_detail: bool) -> Dict[str, Any]:
    """What the resume hash covers (key names kept from earlier versions, so folders
    written by them resume: ``max_size`` is the processing resolution used)."""
    return {
        "contract_version": contract.CONTRACT_VERSION,
        "estimator": dec.estimator.settings(),
        "max_size": dec.resolution,
        "processing_size": [plan.proc_width, plan.proc_height],
        "stabilize": dec.stabilize,
        "strength": dec.strength if dec.stabilize else None,
        "colorspace": info.colorspace,
        "hfov_deg": dec.hfov_deg,
        "albedo_detail": bool(albedo_detail) and plan.downscaled,
        "source": {"path": info.path, "width": info.width, "height": info.height, "n_frames": info.n_frames},
    }


def _job_manifest(dec: Decomposer, plan, info, requested: Optional[int], first: int) -> Dict[str, Any]:
    """The top-level fields of the folder's ``manifest.json`` (the runner adds the rest)."""
    return {
        "source": {**info.to_dict(), "real_path": os.path.realpath(info.path)},
        "estimator": {"name": dec.estimator_name, "settings": dec.estimator.settings()},
        "output": {"width": info.width, "height": info.height,
                   "processing_size": [plan.proc_width, plan.proc_height],
                   "processing_resolution_requested": requested,
                   "max_size_requested": requested,  # the old name
                   "processing_resolution": dec.resolution,
                   "intrinsics": list(plan.intrinsics), "intrinsics_assumed": plan.intrinsics_assumed,
                   "hfov_deg": dec.hfov_deg, "first_frame": first},
        "passes": list(contract.PASSES),
        "sky": {"depth": "depth_far", "normal": list(contract.SKY_NORMAL), "confidence": 0.0},
    }


def provenance_summary(frames) -> Dict[str, Any]:
    """Per pass, over the manifest's frame entries: the provenance kind when every frame
    agrees (``"default"``), else ``{kind: frame count}``; plus ``pass_models`` with the
    method of the most frames. ``{}`` when no frame records provenance."""
    from collections import Counter

    kinds: Dict[str, Counter] = {}
    methods: Dict[str, Counter] = {}
    for f in frames:
        for k, v in (f.get("provenance") or {}).items():
            kinds.setdefault(k, Counter())[v] += 1
        for k, v in (f.get("pass_models") or {}).items():
            methods.setdefault(k, Counter())[v] += 1
    if not kinds:
        return {}
    prov = {k: (next(iter(c)) if len(c) == 1 else dict(c)) for k, c in kinds.items()}
    return {"provenance": prov, "pass_models": {k: c.most_common(1)[0][0] for k, c in methods.items()}}


def _provenance_summary(result: JobResult) -> None:
    man = result.manifest
    summary = provenance_summary(man.get("frames", []))
    if summary:
        man.update(summary)
        contract.write_manifest(result.out_dir, man)


def flicker_summary(frames) -> Dict[str, Any]:
    """``{"flicker": {...}}``: the stabilisation's flicker over the manifest entries
    ``frames`` that carry it (raw and stabilised means), ``{}`` when none does."""
    rows = [f for f in frames if f.get("flicker")]
    if not rows:
        return {}
    return {"flicker": {
        "metric": "mean absolute warping error on flow-consistent pixels "
                  "(depth / (far - near)); lower is steadier",
        "raw": float(np.mean([r["flicker_raw"]["mean"] for r in rows])),
        "stabilized": float(np.mean([r["flicker"]["mean"] for r in rows])),
    }}


def _flicker_summary(result: JobResult) -> None:
    man = result.manifest
    summary = flicker_summary(man.get("frames", []))
    if summary:
        man.update(summary)
        contract.write_manifest(result.out_dir, man)


def decompose(
    input_path: os.PathLike,
    out_dir: os.PathLike,
    *,
    frames: Optional[str] = None,
    estimator: str = DEFAULT_ESTIMATOR,
    estimator_options: Optional[Dict[str, Any]] = None,
    processing_resolution: Optional[int] = None,
    device: Optional[str] = None,
    stabilize: bool = False,
    strength: float = DEFAULT_STRENGTH,
    colorspace: Optional[str] = None,
    hfov_deg: float = geometry.DEFAULT_HFOV_DEG,
    overwrite: bool = False,
    albedo_detail: bool = True,
    cameras: Optional[os.PathLike] = None,
    multiview: Optional[Dict[str, Any]] = None,
    mesh: Optional[os.PathLike] = None,
    progress: events.Progress = None,
    cancel: Optional[threading.Event] = None,
    max_size: Optional[int] = None,
    stream=None,
    progress_bar: Optional[bool] = None,
    warmup: Optional[int] = None,
    manifest_part: bool = False,
    depth_anchors: Optional[os.PathLike] = None,
) -> JobResult:
    """Decompose footage into a G-buffer contract sequence in ``out_dir``.

    Args:
        input_path: movie, image, image folder or ``%04d``/``####`` pattern.
        out_dir: output folder (created; must not overlap the input).
        frames: ``"A-B"`` 1-based inclusive source frame numbers (= output numbers).
        estimator: registry name (:func:`backend.list_estimators`).
        estimator_options: extra keyword options for the estimator factory.
        processing_resolution: long side in pixels at which the estimator computes
            (``None``: the estimator's default; ``0``: full size); see
            :class:`backend.decomposer.Decomposer`. Output is always full size.
        device: ``cpu``/``cuda``/``mps``/``None`` (auto), for estimators that take it.
        stabilize: temporal stabilisation with optical flow (:mod:`backend.temporal`).
        strength: history weight for ``stabilize``, in [0, 1).
        colorspace: OpenColorIO name of the source colour space (``None`` = default).
        hfov_deg: assumed horizontal field of view for normals from depth.
        overwrite: replace frames an earlier run with other settings left in ``out_dir``
            (refused otherwise); see :func:`backend.jobs.outputs.check_previous_outputs`.
        albedo_detail: restore the source's fine detail in an albedo estimated below
            full size (:func:`backend.decomposer.albedo_detail_transfer`).
        cameras: a camera file (our JSON, or a COLMAP text model folder; see
            ``docs/cameras.md``): depth is then measured from parallax and fused with the
            estimator's (:mod:`backend.multiview.shot`); frames without a camera, or
            without parallax, keep the single-image depth, with a ``warning``.
        multiview: options of the multi-view path
            (:class:`backend.multiview.shot.MultiViewOptions` fields: ``neighbours``,
            ``window``, ``processing_width``, ``min_parallax_px``, ``confidence_threshold``).
        mesh: with ``cameras``: a ``.ply`` path; the confident measured depth of every frame
            computed in this run is fused into one surface (:mod:`backend.multiview.tsdf`)
            written there as a mesh in the cameras' world and units. Never written over a
            file (``FileExistsError`` before anything runs).
        progress: where events go: a callable taking an event dict, or a text stream
            for JSON lines (:mod:`backend.events`); ``None``: nothing is reported.
        cancel: a ``threading.Event``; setting it stops after the current frame
            (:class:`backend.jobs.runner.JobCancelled`).
        max_size, stream, progress_bar: deprecated: ``max_size`` is the old name of
            ``processing_resolution`` (a positive value; ``None`` = default), ``stream``
            the old name of ``progress``; ``progress_bar`` is ignored.
        warmup: farm chunk overlap K >= 0 (``--warmup``): the temporal state (depth
            alignment, stabilisation) starts fresh K source frames before the first frame
            of ``frames`` (clamped to the clip's first frame); those frames are computed
            but never written, and the chunk never seeds from another chunk's file. Enters
            the settings hash as ``"warmup": K`` (so frames of another overlap are refused);
            ``None`` (default): today's behaviour, hash unchanged.
        manifest_part: farm chunk mode (``--manifest-part``): no lock; the manifest goes to
            ``OUT/.gbuffer_parts/A-B.json`` (:mod:`backend.jobs.parts`), merged later by
            ``python -m backend farm merge OUT``. Not with ``overwrite`` or ``cameras``.
        depth_anchors: a shot's depth anchors file (``--depth-anchors``;
            :func:`backend.jobs.anchors.compute_anchors`, ``farm anchors``): every frame's
            relative depth is aligned to its anchor alone instead of to the previous frame,
            so chunks and an unchunked run with the same file agree exactly
            (:mod:`backend.depth_anchors`). It must cover every frame written and match the
            source, estimator and processing size. Enters the settings hash (its digest).

    Returns:
        :class:`backend.jobs.runner.JobResult`.

    Raises:
        FootageError, JobError, JobCancelled, ValueError (bad arguments, e.g. a negative
        ``warmup``), KeyError (unknown estimator).
    """
    if processing_resolution is None and max_size is not None:
        processing_resolution = max_size
    with events.reporting(progress if progress is not None else stream):
        first, last = parse_frames(frames)
        if warmup is not None and (not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0):
            raise ValueError(f"--warmup {warmup!r}: expected an integer >= 0 (frames of temporal state "
                             "computed before the chunk)")
        if mesh is not None:
            check_mesh_path(mesh, cameras)
        if cameras is not None and (warmup is not None or manifest_part):
            raise ValueError("--cameras is not supported in farm chunks (--warmup, --manifest-part) yet: "
                             "run camera-tracked shots on one machine")
        dec_kwargs = dict(processing_resolution=processing_resolution, stabilize=stabilize, strength=strength,
                          hfov_deg=hfov_deg, albedo_detail=albedo_detail)
        Decomposer._check_options(**dec_kwargs)  # bad arguments before decoding or loading a model
        src = open_footage(input_path, colorspace=colorspace)  # input errors before model loading
        with src:
            info = src.info
            dec = Decomposer(estimator, estimator_options=estimator_options, device=device,
                             sar=float(info.sar), **dec_kwargs)
            plan = dec.plan(info.width, info.height)
            _warn_capped_resolution(processing_resolution, dec, estimator, info)
            total = clip_frame_range(first, last, info.numbers or info.n_frames, info.path, frames)
            settings = _job_settings(dec, plan, info, albedo_detail)
            if depth_anchors is not None:
                if cameras is not None:
                    raise ValueError("--depth-anchors cannot be combined with --cameras (measured depth is "
                                     "consistent across frames by construction)")
                settings["depth_anchors"] = _use_anchors(depth_anchors, dec, info, first, last)
            manifest = _job_manifest(dec, plan, info, processing_resolution, first)
            if cameras is not None:
                shot = _multiview_shot(src, dec, Path(out_dir), first, last, estimator, cameras, multiview,
                                       lambda: open_footage(input_path, colorspace=colorspace))
                settings["cameras"] = manifest["cameras"] = _camera_settings(shot.camset, shot.mv.options)
                if mesh is not None:
                    shot.mv.enable_fusion()
                if stabilize:
                    events.warning("--stabilize is ignored with --cameras: measured depth is consistent "
                                   "across frames by construction")
            elif getattr(dec.estimator, "windowed", False):
                shot = _WindowedShot(src, dec, Path(out_dir), first, last, estimator,
                                     reopen=lambda: open_footage(input_path, colorspace=colorspace))
            else:
                shot = _Shot(src, dec, Path(out_dir), first, last, estimator)
            shot.input_for, manifest["inputs"] = _input_fingerprints(info, out_dir)
            chunk, part = None, None
            if warmup is not None or manifest_part:
                chunk, part = _chunk_frames(info, first, last, frames)
            if warmup is not None:
                settings["warmup"] = warmup
                shot.warm_from = _warm_from(info, chunk[0] if chunk else first, warmup)
                shot.warm_needed = not _is_current(contract.frame_path(out_dir, chunk[0] if chunk else first),
                                                   settings, shot.input_for)
            result = run_job(
                out_dir, shot.tasks(), settings=settings, total=total,
                inputs=[info.path] + list(info.files[:1]) + ([cameras] if cameras is not None else []),
                job="decompose", manifest=manifest,
                read_hash=read_settings_hash, overwrite=overwrite, cancel=cancel,
                input_for=shot.input_for, read_input=read_input_hash, expected=info.frame_numbers(),
                numbers=chunk, part=part if manifest_part else None, read_entry=read_manifest_entry,
            )
            note_stale_history(result, stabilize and cameras is None, write_manifest=not manifest_part)
            if manifest_part:  # shot-level summaries are the merge's (backend.farm.merge)
                return result
            _provenance_summary(result)
            if stabilize and cameras is None:
                _flicker_summary(result)
            if cameras is not None:
                _multiview_summary(result)
                if mesh is not None:
                    write_mesh(result, shot.mv, mesh)
            elif isinstance(shot, _WindowedShot):
                _windows_summary(result, dec.estimator)
            return result


def _use_anchors(path, dec: Decomposer, info, first: int, last: Optional[int]) -> str:
    """Load ``path`` into ``dec.anchors``; their digest (for the settings hash).

    Raises:
        JobError: unreadable, computed from another source/estimator/processing size, or
            missing a frame of ``first..last`` (naming the file and the frame).
    """
    from ..depth_anchors import DepthAnchors, compatible

    try:
        anchors = DepthAnchors.load(path)
    except ValueError as e:
        raise JobError(str(e), file=str(path)) from None
    why = compatible(anchors, dec, info)
    if why is not None:
        raise JobError(f"depth anchors {path} were computed from {why} than this decompose; recompute them "
                       f"with the same options (python -m backend farm anchors INPUT --out OUT ...)", file=str(path))
    if anchors.meta.get("kind") == "relative":
        nums = info.frame_numbers()
        if nums is not None:
            missing = anchors.missing(n for n in nums if n >= first and (last is None or n <= last))
            if missing:
                raise JobError(f"depth anchors {path} have no frame {missing[0]} (they cover "
                               f"{anchors.meta.get('frames') or 'no frame'}); compute them over the job's whole "
                               f"range", frame=missing[0], file=str(path))
        dec.anchors = anchors
    return anchors.digest


def _chunk_frames(info, first: int, last: Optional[int], spec: Optional[str]):
    """``(frame numbers of the chunk, (A, B))`` for a farm chunk over ``first..last``.

    Raises:
        ValueError: the clip's length is unknown and the range is open.
    """
    nums = info.frame_numbers()
    if nums is None:
        if last is None:
            raise ValueError(f"{info.path}: the clip's length is unknown: a farm chunk needs --frames A-B")
        chunk = list(range(max(first, 1), last + 1))
    else:
        chunk = [n for n in nums if n >= first and (last is None or n <= last)]
    if not chunk:
        raise FootageError(f"{info.path}: --frames {spec} holds no frame", file=info.path)
    return chunk, (chunk[0], chunk[-1])


def _warm_from(info, first: int, k: int) -> int:
    """The source frame number K frames before ``first`` (clamped to the clip's first)."""
    nums = info.frame_numbers()
    if nums is None:
        return max(1, first - k)
    i = next((i for i, n in enumerate(nums) if n >= first), len(nums))
    return nums[max(0, i - k)] if nums else first


def _is_current(path: Path, settings: Dict[str, Any], input_for) -> bool:
    """``path`` exists and carries these settings and its input's fingerprint (resume)."""
    from .runner import settings_hash

    try:
        if not path.exists() or read_settings_hash(path) != settings_hash(settings):
            return False
        m = contract._FRAME_RE.match(path.name)
        now = input_for(int(m.group("num"))) if (m and input_for is not None) else None
        stored = read_input_hash(path)
        return stored is None or now is None or stored == now
    except Exception:  # noqa: BLE001 - unreadable: recomputed
        return False


def parse_options(items) -> Dict[str, Any]:
    """``["k=v", ...]`` -> dict; values parsed as JSON when possible, else kept as strings
    (:func:`backend.jobs.options.key_values`).

    Raises:
        ValueError: an item without ``=``.
    """
    return key_values(items, "--estimator-option")
