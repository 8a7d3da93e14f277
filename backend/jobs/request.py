"""The settings of one job, as one frozen value: :class:`DecomposeRequest`, :class:`RestyleRequest`.

A request is built once (by the command line parser, :func:`backend.jobs.decompose_cli.request`,
:func:`backend.jobs.restyle_cli.request`; by the Blender add-on, ``operators/backend_args.py``;
by the keyword API, :func:`backend.jobs.decompose.decompose` and
:func:`backend.jobs.restyle.restyle`), is validated once, when it is made (``ValueError``
with one line naming the option), and travels to a worker process as one JSON file
(:meth:`DecomposeRequest.write`, ``python -m backend run REQUEST.json``). It alone
produces what a job records about its settings: the block hashed for resume and written
as the manifest's ``settings`` (:meth:`DecomposeRequest.settings`,
:meth:`RestyleRequest.settings`).

Adding a setting: add a field with its default here (and its check in ``_validate``),
read it from the parsed arguments in the job's ``*_cli.request``, set it in the add-on's
request builder, use ``request.<field>`` in the job; when it changes the output, add it
to ``settings()`` *only when it differs from its default* (``if x != default:
block["x"] = x``), so folders written before still resume.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

from .. import arguments as args, contract, geometry
from ..decomposer import DEFAULT_ESTIMATOR, DEFAULT_STRENGTH, Decomposer
from ..depth_edges import edge_settings
from ..input_files import load_json
from ..renderers.base import DEFAULT_RENDERER

#: version of the request JSON file (``"request_version"``); a newer file is refused
REQUEST_VERSION = 1

#: the add-on's Precision preference values (:mod:`backend.precision`); ``None``: no preference
PRECISIONS = (None, "fp16", "fp32")


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


def _path(v) -> Optional[str]:
    return None if v is None else os.fsdecode(os.fspath(v))


#: the command line's words for a request field, in messages (``out_dir (--out) ...``)
_FLAGS = {"input": "input_path (INPUT)", "out": "out_dir (--out)", "gbuffer_dir": "gbuffer_dir (GBUFFER_DIR)",
          "reference_dir": "reference_dir (--reference)", "estimator_options": "estimator_options (--estimator-option)",
          "renderer_options": "renderer_options (--option)", "match_look": "match_look (--match-look)",
          "depth_anchors": "depth_anchors (--depth-anchors)", "manifest_part": "manifest_part (--manifest-part)"}


def _name(field: str) -> str:
    return _FLAGS.get(field, f"{field} (--{field.replace('_', '-')})")


def _finite_json(v: Any) -> bool:
    """No NaN, infinity or integer past 64 bits anywhere in an option value (numbers,
    lists, dicts; :func:`backend.jobs.options.finite_value`)."""
    from .options import finite_value

    return finite_value(v)


def _plain(v: Any) -> Any:
    """``v`` with numpy scalars (``np.int64(64)``, ``np.float32(1)``, ``np.bool_``) as the
    Python numbers they hold, inside dicts, lists and tuples too, so a request from the
    Python API writes as JSON and its numbers check like Python's (issue 36)."""
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    return v


def _check_types(req, *, paths=(), flags=(), texts=(), optional_texts=(), mappings=(), whole=()) -> None:
    """The request's fields checked by type before anything else (:mod:`backend.arguments`,
    ``ArgumentError`` naming the keyword argument and its flag: ``out_dir (--out) must be a
    path ...``); the values' ranges and blank paths are :meth:`_validate`'s. Issue 36, item 5.
    Numpy scalars are first made Python numbers (:func:`_plain`)."""
    for f in dataclasses.fields(req):
        object.__setattr__(req, f.name, _plain(getattr(req, f.name)))
    for k in paths:
        v = getattr(req, k)
        if v is not None and not isinstance(v, (str, bytes, os.PathLike)):
            raise args.ArgumentError(f"{_name(k)} must be a path (str or os.PathLike), got {v!r} ({type(v).__name__})")
    for k in flags:
        args.flag(_name(k), getattr(req, k))
    for k in texts:
        args.text(_name(k), getattr(req, k))
    for k in optional_texts:
        args.text(_name(k), getattr(req, k), none=True)
    for k in mappings:
        if getattr(req, k) is not None:
            args.mapping(_name(k), getattr(req, k))
    for k in whole:
        args.whole_number(_name(k), getattr(req, k))
    args.frames_spec(req.frames)


def _check_path(value, flag: str) -> None:
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{flag} {value!r}: an empty path (an empty shell variable?); name a file or folder")


def _check_warmup(warmup) -> None:
    if warmup is not None and (not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0):
        raise ValueError(f"--warmup {warmup!r}: expected an integer >= 0 (frames of temporal state "
                         "computed before the chunk)")


def _check_precision(precision) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected 'fp16' or 'fp32'")


class _Request:
    """JSON round trip shared by the requests."""

    JOB = ""

    def to_dict(self) -> Dict[str, Any]:
        """Every field (paths as strings), plus ``job`` and ``request_version``."""
        d = {"job": self.JOB, "request_version": REQUEST_VERSION}
        for f in dataclasses.fields(self):
            d[f.name] = getattr(self, f.name)
        return json.loads(json.dumps(d, default=str))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]):
        """The request a :meth:`to_dict` dict describes.

        Raises:
            ValueError: another job, a newer version, an unknown field, or a bad value.
        """
        d = dict(d)
        job = d.pop("job", cls.JOB)
        version = d.pop("request_version", REQUEST_VERSION)
        if job != cls.JOB:
            raise ValueError(f"request: job {job!r}, expected {cls.JOB!r}")
        if not isinstance(version, int) or version > REQUEST_VERSION:
            raise ValueError(f"request: version {version!r} is newer than this backend reads ({REQUEST_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"request: unknown setting(s) {', '.join(unknown)}")
        return cls(**d)

    def write(self, path: os.PathLike) -> Path:
        """Write the request as a JSON file (the worker's ``python -m backend run PATH``)."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
        return path

    @contextlib.contextmanager
    def running(self, progress=None) -> Iterator[Any]:
        """The job's context: events go to ``progress`` (:func:`backend.events.reporting`) and
        the request's precision preference holds (:func:`backend.precision.preference`)."""
        from .. import events, precision

        with events.reporting(progress), precision.preference(self.precision):
            yield self

    def replace(self, **changes):
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DecomposeRequest(_Request):
    """Every setting of one decompose (:func:`backend.jobs.decompose.run_decompose`).

    Fields are those of :func:`backend.jobs.decompose.decompose` (see its docstring for
    each); paths are strings. ``precision``: the add-on's Precision preference
    (``fp16``/``fp32``, ``None``: none; :mod:`backend.precision`).

    Raises:
        ValueError: a bad value (one line naming the option), when made.
    """

    JOB = "decompose"

    input: str
    out: str
    frames: Optional[str] = None
    estimator: str = DEFAULT_ESTIMATOR
    estimator_options: Dict[str, Any] = field(default_factory=dict)
    processing_resolution: Optional[int] = None
    device: Optional[str] = None
    stabilize: bool = False
    strength: float = DEFAULT_STRENGTH
    colorspace: Optional[str] = None
    hfov_deg: float = geometry.DEFAULT_HFOV_DEG
    albedo_detail: bool = True
    depth_edges: Optional[bool] = None
    overwrite: bool = False
    cameras: Optional[str] = None
    camera: str = "none"
    multiview: Optional[Dict[str, Any]] = None
    mesh: Optional[str] = None
    warmup: Optional[int] = None
    manifest_part: bool = False
    depth_anchors: Optional[str] = None
    precision: Optional[str] = None
    start_frame: Optional[int] = None
    handles: int = 0
    timecode: Optional[str] = None
    passes: Optional[str] = None
    layout: str = "gbuffer"
    working_space: str = "rec709"

    def __post_init__(self):
        _check_types(self, paths=("input", "out", "cameras", "mesh", "depth_anchors"),
                     flags=("stabilize", "albedo_detail", "overwrite", "manifest_part"), texts=("camera",),
                     optional_texts=("device", "colorspace", "passes", "layout", "working_space"),
                     mappings=("estimator_options", "multiview"), whole=("warmup", "start_frame", "handles"))
        for name in ("input", "out", "cameras", "mesh", "depth_anchors"):
            object.__setattr__(self, name, _path(getattr(self, name)))
        object.__setattr__(self, "layout", "gbuffer" if self.layout is None else str(self.layout).strip().lower())
        object.__setattr__(self, "working_space",
                           "rec709" if self.working_space is None else str(self.working_space).strip().lower())
        object.__setattr__(self, "estimator_options", dict(self.estimator_options or {}))
        if self.multiview is not None:
            object.__setattr__(self, "multiview", dict(self.multiview))
        self._validate()

    def _validate(self) -> None:
        for name, flag in (("out", "--out"), ("input", "INPUT"), ("cameras", "--cameras"),
                           ("depth_anchors", "--depth-anchors"), ("mesh", "--mesh")):
            _check_path(getattr(self, name), flag)
        parse_frames(self.frames)
        if self.camera not in ("none", "auto"):
            raise ValueError(f"--camera {self.camera!r}: expected 'auto' or 'none'")
        _check_warmup(self.warmup)
        _check_precision(self.precision)
        if self.cameras is not None and (self.warmup is not None or self.manifest_part):
            raise ValueError("--cameras is not supported in farm chunks (--warmup, --manifest-part) yet: "
                             "run camera-tracked shots on one machine")
        if self.depth_anchors is not None and self.cameras is not None:
            raise ValueError("--depth-anchors cannot be combined with --cameras (measured depth is "
                             "consistent across frames by construction)")
        for k, v in self.estimator_options.items():  # as the CLI's --estimator-option refuses NaN
            if not _finite_json(v):
                raise ValueError(f"--estimator-option {k}={args.short_repr(v)}: {k} must be a finite number "
                                 f"within +-{args.INT64_MAX}")
        if self.multiview:  # an unknown key was a TypeError deep in the multi-view shot (issue 36)
            from ..multiview.shot import MultiViewOptions

            known = sorted(f.name for f in dataclasses.fields(MultiViewOptions))
            unknown = sorted(set(self.multiview) - set(known))
            if unknown:
                raise ValueError(f"multiview option(s) {', '.join(unknown)} unknown; known: {', '.join(known)}")
        if self.mesh is not None and self.cameras is None:
            raise ValueError("--mesh needs --cameras: the mesh is fused from measured depth")
        Decomposer._check_options(processing_resolution=self.processing_resolution, stabilize=self.stabilize,
                                  strength=self.strength, hfov_deg=self.hfov_deg, albedo_detail=self.albedo_detail)
        self._validate_studio()

    def _validate_studio(self) -> None:
        """The studio-convention options (issue 38; docs/studio-pipeline.md)."""
        from .. import exr_colour, layouts

        if self.start_frame is not None and (not isinstance(self.start_frame, int) or self.start_frame < 0):
            raise ValueError(f"--start-frame {self.start_frame!r}: expected a frame number >= 0")
        if not isinstance(self.handles, int) or isinstance(self.handles, bool) or self.handles < 0:
            raise ValueError(f"--handles {self.handles!r}: must be an integer >= 0")
        if self.timecode is not None:
            from ..exr_attrs import parse_timecode

            parse_timecode(self.timecode)
        self.extra_passes()
        layouts.check(self.layout)
        exr_colour.working_space(self.working_space)

    def extra_passes(self) -> Tuple[str, ...]:
        """The optional passes asked for (``--passes``; :mod:`backend.extra_passes`)."""
        from ..extra_passes import parse_passes

        return parse_passes(self.passes)

    def decomposer_options(self) -> Dict[str, Any]:
        """Keyword options of :class:`backend.decomposer.Decomposer` from this request."""
        return dict(processing_resolution=self.processing_resolution, stabilize=self.stabilize,
                    strength=self.strength, hfov_deg=self.hfov_deg, albedo_detail=self.albedo_detail,
                    estimator_options=self.estimator_options, device=self.device, depth_edges=self.edges_on())

    def edges_on(self) -> bool:
        """``depth_edges`` resolved: ``None`` = off (opt-in: on phone_office with cameras it
        shrinks the halo and the desk holes but lowers the pot's correct occlusion 78 -> 70 %,
        and it worsens filled pixels on the ray-cast dolly; benchmarks/results/pot_test.md)."""
        return bool(self.depth_edges)

    def settings(self, dec, plan, info, *, anchors: Optional[str] = None,
                 cameras: Optional[Dict[str, Any]] = None, cut: Optional[list] = None) -> Dict[str, Any]:
        """The settings block: hashed for resume, recorded as the manifest's ``settings``.

        Args:
            dec: the job's :class:`backend.decomposer.Decomposer` (the estimator's own
                settings and the processing resolution it resolved).
            plan: ``dec.plan(width, height)``; info: the footage's ``FootageInfo``.
            anchors: the depth anchors' digest, when used; cameras: the measured-geometry
                block (:func:`backend.jobs.decompose_shots._camera_settings`), when used.
            cut: ``[cut_in, cut_out]`` with ``--handles``.

        Key names are kept from earlier versions so folders written by them resume:
        ``max_size`` is the processing resolution used (``dec.resolution``).
        """
        block = {
            "contract_version": contract.CONTRACT_VERSION,
            "estimator": dec.estimator.settings(),
            "max_size": dec.resolution,
            "processing_size": [plan.proc_width, plan.proc_height],
            "stabilize": dec.stabilize,
            "strength": dec.strength if dec.stabilize else None,
            "colorspace": info.colorspace,
            "hfov_deg": dec.hfov_deg,
            "albedo_detail": bool(self.albedo_detail) and plan.downscaled,
            "source": {"path": info.path, "width": info.width, "height": info.height, "n_frames": info.n_frames},
        }
        if dec.depth_edges is not None:  # absent when off: older folders keep resuming
            block["depth_edges"] = edge_settings(dec.depth_edges)
        if getattr(dec, "detect_sky", False):
            # the sky detector changes every frame's passes: a folder written without it
            # is refused on resume (written with other settings), never continued mixed
            from ..decomposer import SKY_METHOD
            block["sky"] = SKY_METHOD
        if anchors is not None:
            block["depth_anchors"] = anchors
        if cameras is not None:
            block["cameras"] = cameras
        if self.warmup is not None:
            block["warmup"] = self.warmup
        block.update(self._studio_settings(cut))
        return block

    def _studio_settings(self, cut: Optional[list]) -> Dict[str, Any]:
        """The studio options' entries of the settings block, each only when not its default."""
        from .. import exr_colour

        out: Dict[str, Any] = {}
        if self.start_frame is not None:
            out["start_frame"] = self.start_frame
        if self.timecode is not None:
            out["timecode"] = self.timecode
        if self.extra_passes():
            out["passes"] = list(self.extra_passes())
        if self.layout != "gbuffer":
            out["layout"] = self.layout
        if self.working_space != "rec709":
            out["working_space"] = exr_colour.working_space(self.working_space)
        if cut is not None:
            out["cut"] = list(cut)
        return out


@dataclass(frozen=True)
class RestyleRequest(_Request):
    """Every setting of one restyle (:func:`backend.jobs.restyle.run_restyle`).

    Fields are those of :func:`backend.jobs.restyle.restyle` (see its docstring); paths
    are strings; ``precision`` as for :class:`DecomposeRequest`.

    Raises:
        ValueError: a bad value (one line naming the option), when made.
    """

    JOB = "restyle"

    gbuffer_dir: str
    out: str
    prompt: str = ""
    renderer: str = DEFAULT_RENDERER
    renderer_options: Dict[str, Any] = field(default_factory=dict)
    frames: Optional[str] = None
    previews: bool = True
    mp4: bool = True
    flicker: bool = True
    reference_dir: Optional[str] = None
    overwrite: bool = False
    match_look: Optional[str] = None
    warmup: Optional[int] = None
    manifest_part: bool = False
    precision: Optional[str] = None
    #: a lights file (``--lights``, docs/lights.md; issue 39 item 4)
    lights: Optional[str] = None

    def __post_init__(self):
        _check_types(self, paths=("gbuffer_dir", "out", "reference_dir", "match_look", "lights"),
                     flags=("previews", "mp4", "flicker", "overwrite", "manifest_part"), texts=("renderer",),
                     optional_texts=("prompt",), mappings=("renderer_options",), whole=("warmup",))
        for name in ("gbuffer_dir", "out", "reference_dir", "match_look", "lights"):
            object.__setattr__(self, name, _path(getattr(self, name)))
        object.__setattr__(self, "renderer_options", dict(self.renderer_options or {}))
        object.__setattr__(self, "prompt", "" if self.prompt is None else str(self.prompt))
        self._validate()

    def _validate(self) -> None:
        for name, flag in (("out", "--out"), ("gbuffer_dir", "GBUFFER_DIR"), ("reference_dir", "--reference"),
                           ("match_look", "--match-look")):
            _check_path(getattr(self, name), flag)
        parse_frames(self.frames)
        _check_warmup(self.warmup)
        _check_precision(self.precision)
        for k, v in self.renderer_options.items():  # as the CLI's --option refuses NaN (issue 36)
            if not _finite_json(v):
                raise ValueError(f"--option {k}={args.short_repr(v)}: {k} must be a finite number "
                                 f"within +-{args.INT64_MAX}")
        if self.match_look is not None and (self.warmup is not None or self.manifest_part):
            raise ValueError("--match-look is not supported in farm chunks (--warmup, --manifest-part) yet: "
                             "each chunk would estimate its own transform")

    def settings(self, look, *, reference: bool, match_look: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The settings block: hashed for resume, recorded as the manifest's ``settings``.

        Args:
            look: the job's :class:`backend.jobs.restyle_settings.RestyleLook` (the
                renderer's own settings, the parsed prompt's shader numbers).
            reference: a reference folder is used.
            match_look: the look reference's colour statistics, when used.

        The inputs are not here: each frame records the fingerprint of the G-buffer
        frame(s) it was rendered from, so an edited frame re-renders only itself.
        """
        block = {
            "prompt": look.prompt,
            "renderer": look.renderer.settings(),
            "output_format": "rgba-half-v2",
            "look": look.info.get("params"),  # every shader number (embedded): changes re-render
            "reference": bool(reference),
        }
        if match_look is not None:  # another reference (or its content) re-renders
            block["match_look"] = match_look
        if self.warmup is not None:
            block["warmup"] = self.warmup
        return block


def read_request(path: os.PathLike):
    """The request in a JSON file written by :meth:`DecomposeRequest.write` /
    :meth:`RestyleRequest.write`.

    Raises:
        ValueError: unreadable, not a request, or a bad setting (one line naming the file).
    """
    try:
        d = load_json(path, "the request")  # a FIFO is refused, never waited on; nesting bounded
    except (OSError, ValueError) as e:
        raise ValueError(f"request {path}: cannot read it ({e})") from None
    kinds = {c.JOB: c for c in (DecomposeRequest, RestyleRequest)}
    if not isinstance(d, dict) or d.get("job") not in kinds:
        raise ValueError(f"request {path}: expected a JSON object with \"job\": \"decompose\" or \"restyle\"")
    try:
        return kinds[d["job"]].from_dict(d)
    except TypeError as e:
        raise ValueError(f"request {path}: {e}") from None
