"""The kinds of shot a decompose runs, each a source of per-frame tasks for the runner:
frame by frame (:class:`_Shot`), measured from cameras (:class:`_MultiViewShot`, with
the camera file's opening and the multi-view summary) and windowed video estimators
(:class:`_WindowedShot`). Part of the decompose job (:mod:`backend.jobs.decompose`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

from .. import contract, events, extra_passes
from ..decomposer import Decomposer
from ..errors import JobError
from ..footage import Footage
from ..imaging import resize
from .decompose_manifest import _option_settings
from .runner import Deferred, JobResult


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
    #: ``--handles``: ``(cut_in, cut_out)`` frame numbers; frames outside are handles
    cut: Optional[Tuple[int, int]] = None
    #: ``--passes``: optional passes to add (``vector``, ``position``; :mod:`backend.extra_passes`)
    passes: Tuple[str, ...] = ()
    #: ``--layout``: channel layout of the files (:mod:`backend.layouts`)
    layout: str = "gbuffer"
    #: ``--working-space``: interop ID of the colour passes in the files
    working_space: str = "lin_rec709_scene"

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
                "sar": f"{info.sar.numerator}/{info.sar.denominator}", "rotation": info.rotation,
                "fps": f"{info.fps.numerator}/{info.fps.denominator}",
                **({"handle": not self.cut[0] <= number <= self.cut[1]} if self.cut else {}),
                **({"timecode_start": info.timecode, "timecode_frame": (info.frame_numbers() or [1])[0]}
                   if info.timecode else {}),
                **({"data_window": info.windows[0], "display_window": info.windows[1]} if info.windows else {}),
                **({"layout": self.layout} if self.layout != "gbuffer" else {}),
                **({"working_space": self.working_space} if self.working_space != "lin_rec709_scene" else {})}

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
            est = _raised_in_estimator(e) or str(e).startswith("estimator ")
            who = f"estimator {self.estimator!r}" if est else "decompose (not the estimator)"
            raise JobError(f"{who} failed on {sf.path} (frame {number}): "
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
        vector = "vector" in self.passes

        def wanted():
            """``(number, frame, written)``; with ``vector`` also the frames just before
            and after the range (when the clip has them), for the flow only."""
            for sf in self.src:
                number = sf.number
                if self.warm_from is not None and self.warm_from <= number < self.first:
                    if self.warm_needed:  # warmup: temporal state only, never written
                        self.compute(sf, number)
                if number < self.first:
                    if vector and number == self.first - 1:
                        yield number, sf, False
                    continue
                if self.last is not None and number > self.last:
                    if vector and number == self.last + 1:
                        yield number, sf, False
                    break
                yield number, sf, True

        for number, sf, prev, nxt in _paired(wanted(), vector):
            yield number, self._work(sf, number, prev, nxt)

    def _work(self, sf, number: int, prev=None, nxt=None):
        def work(tmp_path: Path, shash: str):
            frame = self.compute(sf, number)
            if "vector" in self.passes:
                frame.extras["Vector"] = extra_passes.motion_vectors(sf.rgb, prev, nxt)
            if "position" in self.passes:
                extra_passes.add_position(frame)
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

        lag = 1 if "vector" in self.passes else 0  # _paired holds one frame back
        yield from _lagging_tasks(self, self.mv.stream(frames(self.src), wanted, lag=lag), frames)


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

    def _frames(self, src, margin: int = 0):
        for sf in src:
            if sf.number < self.first - margin:
                continue
            if self.last is not None and sf.number > self.last + margin:
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
        margin = 1 if "vector" in self.passes else 0  # the flow's neighbours beyond the range
        yield from _lagging_tasks(self, self._complete(), lambda src: self._frames(src, margin))


def _lagging_tasks(shot, numbers: Iterator[int], frames) -> Iterator[Tuple[int, Any]]:
    """The tasks of a shot whose frames are computed in the order of ``numbers`` (a
    generator driven by a leading decoder): a second, lagging decoder over the footage
    (``shot.reopen()``, filtered by ``frames(src) -> (number, frame)``) gives each frame in
    full when its number comes, so no full frame waits in memory.

    With ``--passes vector`` the frames the lagging decoder passes over (the one before
    the range among them) and the one after the last number also go to :func:`_paired`,
    as the flow's neighbours (never written).

    Raises:
        JobError: the second decoder ended before a number came (the footage changed).
    """
    vector = "vector" in shot.passes

    def full(lag):
        for number in numbers:
            for n, sf in lag:
                if n == number:
                    break
                if vector and n == number - 1:
                    yield n, sf, False
            else:  # the second decoder ended early: the footage changed under us
                raise JobError(f"{shot.src.info.path}: frame {number} could not be decoded a second time",
                               frame=number, file=shot.src.info.path)
            yield number, sf, True
        if vector:
            after = next(lag, None)
            if after is not None:
                yield after[0], after[1], False

    with shot.reopen() as lag_src:
        for number, sf, prev, nxt in _paired(full(frames(lag_src)), "vector" in shot.passes):
            yield number, shot._work(sf, number, prev, nxt)


def _raised_in_estimator(e: BaseException) -> bool:
    """Whether ``e`` was raised inside an estimator: the traceback passes through a module
    of ``backend/estimators`` (the estimator itself, or what it called)."""
    import traceback

    mark = os.sep + "backend" + os.sep + "estimators" + os.sep
    return any(mark in f.filename for f in traceback.extract_tb(e.__traceback__))


def _paired(items, neighbours: bool):
    """``(number, frame, written)`` -> ``(number, frame, previous rgb, next rgb)`` for the
    frames to write, the neighbours' ``H x W x 3`` scene-linear frames when their numbers
    are adjacent (else ``None``); frames not written (just outside the range) serve as
    neighbours only. With ``neighbours`` off, ``None`` and no lookahead. Holds one frame
    ahead."""
    if not neighbours:
        for n, sf, written in items:
            if written:
                yield n, sf, None, None
        return
    pending = None  # (number, frame, written, previous rgb)
    for n, sf, written in items:
        prev_rgb = None
        if pending is not None:
            pn, psf, pwritten, pprev = pending
            adjacent = n == pn + 1
            if pwritten:
                yield pn, psf, pprev, (sf.rgb if adjacent else None)
            prev_rgb = psf.rgb if adjacent else None
        pending = (n, sf, written, prev_rgb)
    if pending is not None and pending[2]:
        yield pending[0], pending[1], pending[3], None


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


def contract_half_max() -> float:
    """The largest finite half float (65504): what the Combined pass can hold."""
    return float(np.finfo(np.float16).max)
