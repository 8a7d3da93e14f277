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

import functools
import os
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .. import contract, events, exr_attrs
from ..decomposer import (  # noqa: F401  (re-exported: the names' former home)
    DEFAULT_ESTIMATOR, DEFAULT_STRENGTH, FALLBACK_METALLIC, FALLBACK_ROUGHNESS, MIN_RESOLUTION,
    SKY_CONFIDENCE, Decomposer, albedo_detail_transfer,
)
from ..errors import JobError
from ..exr_colour import working_space as exr_working_space
from ..footage import FootageError, open_footage
from .decompose_manifest import (  # noqa: F401  (provenance_summary, flicker_summary: re-exported)
    _job_manifest, flicker_summary, provenance_summary, record_summary,
)
from .decompose_shots import (_Shot, _WindowedShot, _camera_settings, _multiview_shot, _multiview_summary,
                              _windows_summary)
from .history import note_stale_history
from .mesh import check_mesh_path, write_mesh
from .options import key_values
from .request import DecomposeRequest, parse_frames  # noqa: F401  (parse_frames: its former home)
from .runner import JobResult, run_job


#: deprecated name of :data:`backend.decomposer.MIN_RESOLUTION`
MIN_MAX_SIZE = MIN_RESOLUTION


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


def decompose(input_path: os.PathLike, out_dir: os.PathLike, *, progress: events.Progress = None,
              cancel: Optional[threading.Event] = None, **settings) -> JobResult:
    """Decompose footage into a G-buffer contract sequence in ``out_dir``.

    The settings are keyword arguments, the fields of
    :class:`backend.jobs.request.DecomposeRequest` (an unknown one is a ``TypeError``);
    this builds the request and runs it (:func:`run_decompose`).

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
        depth_edges: refine the depth at full size so its edges lie on the frame's
            (:mod:`backend.depth_edges`). ``None`` (default) or ``False``: off; ``True``: on
            (opt-in: its results on real footage are mixed, benchmarks/results/pot_test.md;
            it costs about 0.4 CPU-s per 960x540 frame).
        cameras: a camera file (our JSON, or a COLMAP text model folder; see
            ``docs/cameras.md``): depth is then measured from parallax and fused with the
            estimator's (:mod:`backend.multiview.shot`); frames without a camera, or
            without parallax, keep the single-image depth, with a ``warning``.
        camera: ``"none"`` (default) or ``"auto"``: without ``cameras``, solve the
            footage's camera first (:mod:`backend.multiview.autosolve`; focal length
            unknown) and use the solve when it passes its checks (parallax, error, a
            determined focal length), written as ``OUT_cameras.json`` next to ``out_dir``;
            otherwise the single-image path with a one-line ``warning``.
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
        start_frame: a movie's first frame number (``--start-frame``, e.g. 1001 for a
            studio plate): frame numbers, file names and ``--frames`` count from it;
            ``None``: 1. Refused for image sequences (their file names number them).
            Enters the settings hash when given.
        handles: ``--handles N``: the first and last N frames of the range written are
            handles: the manifest's ``cut`` gives ``in``/``out`` inside them, each
            frame's header ``handle`` says whether it is one. Default 0.
        timecode: ``--timecode HH:MM:SS:FF``: the non-drop-frame timecode of the source's
            first frame (``ValueError`` otherwise); default: a movie's own ``timecode``
            tag, else the header's ``timeCode`` counts from the frame number.
        passes: optional passes, comma-separated (``--passes vector,position``):
            motion vectors in Blender's ``Vector`` convention from DIS optical flow, the
            ``Position`` pass (:mod:`backend.extra_passes`). Enters the settings hash.
        layout: channel layout, ``"gbuffer"`` (default) or ``"nuke"`` (``--layout nuke``:
            ``R G B A``, ``depth.Z``, ``normal.XYZ``, ``albedo.RGB`` ... in one part, read by
            Nuke, Blender and OpenImageIO without shuffling; :mod:`backend.layouts`).
            Enters the settings hash when not the default.
        working_space: the colour passes' space in the files: ``"rec709"`` (default,
            ``lin_rec709_scene``) or ``"acescg"`` (``lin_ap1_scene``): Combined and Albedo
            are converted on writing and stated (``colorInteropID``, ``chromaticities``);
            readers convert back. Enters the settings hash when not the default.

    Returns:
        :class:`backend.jobs.runner.JobResult`.

    Raises:
        FootageError, JobError, JobCancelled, ValueError (bad arguments, e.g. a negative
        ``warmup``), KeyError (unknown estimator).
    """
    max_size, stream = settings.pop("max_size", None), settings.pop("stream", None)
    settings.pop("progress_bar", None)
    if settings.get("processing_resolution") is None and max_size is not None:
        settings["processing_resolution"] = max_size
    request = DecomposeRequest(input_path, out_dir, **settings)
    return run_decompose(request, progress=progress if progress is not None else stream, cancel=cancel)


def _without_sky_for_older_folder(dec: Decomposer, out: Path, settings: Dict[str, Any]) -> Dict[str, Any]:
    """A folder written before the sky detector, with otherwise the same settings, resumes
    as it was written: the sky detector is turned off for it (with a warning), so its frames
    are never mixed with frames of another kind. ``settings`` is returned unchanged when the
    folder holds no such frame."""
    if "sky" not in settings or not Path(out).is_dir():
        return settings
    from .job_types import settings_hash

    older = {k: v for k, v in settings.items() if k != "sky"}
    want = settings_hash(older)
    for path in sorted(Path(out).glob("gbuffer_*.exr"))[:8]:
        try:
            found = read_settings_hash(path) if path.is_file() else None
        except Exception:  # an unreadable frame: the runner reports it
            found = None
        if found == want:
            dec.detect_sky = False
            events.warning(f"{out}: written before the sky detector; it resumes without it "
                           f"(--overwrite redoes the folder with sky marked)", file=path)
            return older
    return settings


def run_decompose(request: DecomposeRequest, *, progress: events.Progress = None,
                  cancel: Optional[threading.Event] = None) -> JobResult:
    """Run the decompose ``request`` (:class:`backend.jobs.request.DecomposeRequest`, already
    validated); ``progress`` and ``cancel`` as for :func:`decompose`, which documents the
    settings, the result and the errors."""
    with request.running(progress) as r:
        first, last = parse_frames(r.frames)
        if r.mesh is not None:
            check_mesh_path(r.mesh, r.cameras)
        footage = functools.partial(open_footage, r.input, colorspace=r.colorspace, start_frame=r.start_frame)
        src = footage()  # input errors before model loading
        with src:
            info = src.info
            if r.timecode is not None:  # --timecode: the first frame's, over the movie's tag
                info.timecode = r.timecode
            if info.timecode is not None:
                exr_attrs.parse_timecode(info.timecode, info.fps)  # frames < the rate, before any work
            dec = Decomposer(r.estimator, sar=float(info.sar), **r.decomposer_options())
            plan = dec.plan(info.width, info.height)
            _warn_capped_resolution(r.processing_resolution, dec, r.estimator, info)
            total = clip_frame_range(first, last, info.numbers or info.n_frames, info.path, r.frames)
            anchors = _use_anchors(r.depth_anchors, dec, info, first, last) if r.depth_anchors is not None else None
            manifest = _job_manifest(dec, plan, info, r.processing_resolution, first)
            cameras = r.cameras
            if r.camera == "auto" and cameras is None and not (r.warmup is not None or r.manifest_part):
                from ..multiview.autosolve import auto_cameras

                cameras = auto_cameras(r.input, r.out, first=first, last=last, colorspace=r.colorspace,
                                       start_frame=r.start_frame)
                manifest["camera"] = "auto: solved" if cameras is not None else "auto: single-image"
            shot, camera_block = _make_shot(src, dec, Path(r.out), first, last, r, cameras, footage)
            if camera_block is not None:
                manifest["cameras"] = camera_block
            cut = _apply_studio(r, shot, info, first, last, manifest)
            settings = r.settings(dec, plan, info, anchors=anchors, cameras=camera_block, cut=cut)
            settings = _without_sky_for_older_folder(dec, r.out, settings)
            shot.input_for, manifest["inputs"] = _input_fingerprints(info, r.out)
            chunk, part = None, None
            if r.warmup is not None or r.manifest_part:
                chunk, part = _chunk_frames(info, first, last, r.frames)
            if r.warmup is not None:
                shot.warm_from = _warm_from(info, chunk[0] if chunk else first, r.warmup)
                shot.warm_needed = not _is_current(contract.frame_path(r.out, chunk[0] if chunk else first),
                                                   settings, shot.input_for)
            result = run_job(
                r.out, shot.tasks(), settings=settings, total=total,
                inputs=[info.path] + list(info.files[:1]) + ([cameras] if cameras is not None else []),
                job="decompose", manifest=manifest,
                read_hash=read_settings_hash, overwrite=r.overwrite, cancel=cancel,
                input_for=shot.input_for, read_input=read_input_hash, expected=info.frame_numbers(),
                numbers=chunk, part=part if r.manifest_part else None, read_entry=read_manifest_entry,
            )
            note_stale_history(result, r.stabilize and cameras is None, write_manifest=not r.manifest_part)
            if not r.manifest_part:  # a chunk's shot-level summaries are the merge's (backend.farm.merge)
                _summaries(result, shot, dec, stabilize=r.stabilize, measured=cameras is not None, mesh=r.mesh)
            return result


def _make_shot(src, dec: Decomposer, out: Path, first: int, last: Optional[int], r: DecomposeRequest, cameras,
               reopen):
    """``(shot, cameras block or None)``: the shot kind for this job, measured from ``cameras``,
    windowed (a video estimator) or frame by frame; the block records the cameras' settings."""
    if cameras is not None:
        shot = _multiview_shot(src, dec, out, first, last, r.estimator, cameras, r.multiview, reopen)
        if r.mesh is not None:
            shot.mv.enable_fusion()
        if r.stabilize:
            events.warning("--stabilize is ignored with --cameras: measured depth is consistent "
                           "across frames by construction")
        return shot, _camera_settings(shot.camset, shot.mv.options)
    if dec.estimator.windowed:
        return _WindowedShot(src, dec, out, first, last, r.estimator, reopen=reopen), None
    return _Shot(src, dec, out, first, last, r.estimator), None


def _apply_studio(r: DecomposeRequest, shot, info, first: int, last: Optional[int],
                  manifest: Dict[str, Any]) -> Optional[list]:
    """The studio-convention settings (issue 38) on the shot: optional passes, layout,
    working space; ``--handles`` gives ``[cut_in, cut_out]`` (also the manifest's ``cut``),
    returned for the settings block (``None`` without handles)."""
    shot.passes, shot.layout, shot.working_space = r.extra_passes(), r.layout, exr_working_space(r.working_space)
    if not r.handles:
        return None
    manifest["cut"] = shot.cut = _cut(info, first, last, r.handles)
    return list(shot.cut)


def _cut(info, first: int, last: Optional[int], handles: int) -> list:
    """``[cut_in, cut_out]``: the range ``first..last`` of the clip less ``handles`` frames
    on each side (``ValueError`` when nothing is left between the handles)."""
    nums = [n for n in (info.frame_numbers() or []) if n >= first and (last is None or n <= last)]
    if len(nums) <= 2 * handles:
        raise ValueError(f"--handles {handles}: the range has {len(nums)} frames, nothing is left between "
                         f"{handles} handle frames on each side")
    return [nums[handles], nums[-1 - handles]]


def _summaries(result, shot, dec: Decomposer, *, stabilize: bool, measured: bool, mesh) -> None:
    """The shot-level summaries in ``result.manifest`` after the frames (and the mesh)."""
    record_summary(result, provenance_summary)
    if stabilize and not measured:
        record_summary(result, flicker_summary)
    if measured:
        _multiview_summary(result)
        if mesh is not None:
            write_mesh(result, shot.mv, mesh)
    elif isinstance(shot, _WindowedShot):
        _windows_summary(result, dec.estimator)


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
