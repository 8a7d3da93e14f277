"""A farm job's plan (chunks of a shot) and one chunk's run; engine-agnostic.

``make_plan`` splits the wanted frames of a shot into chunks of ``chunk`` consecutive
source frames; every chunk runs as ``decompose|restyle --frames A-B --warmup K
--manifest-part`` (K = ``overlap``: the temporal state starts K frames before A, those
frames are computed and discarded). Whatever engine runs the chunks, in whatever order
and on whichever node, each frame is computed from the same inputs in the same order, so
the output is byte-identical to running the same plan in one process
(``python -m backend farm local ...``).

The folder a farm job writes into holds ``.gbuffer_farm.json`` (the job's plan: job,
settings, chunk, overlap), created exclusively (``link``, atomic on NFS too) by the
first driver; a second farm job with another plan for the same folder is refused before
anything runs. ``.gbuffer_farm_token`` holds a random token every chunk reads before it
starts: a worker node that does not see the folder fails naming itself.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import contract, events
from ..errors import JobError
from ..input_files import load_json, read_text

PLAN_FILE = ".gbuffer_farm.json"
TOKEN_FILE = ".gbuffer_farm_token"
#: ``kwargs`` a farm job may not pass on (the plan sets them per chunk)
FARM_OWNED = ("frames", "warmup", "manifest_part", "overwrite", "cancel", "progress")


@dataclass
class Chunk:
    """One chunk: frames ``first..last`` (inclusive source numbers) of the plan."""

    first: int
    last: int
    frames: List[int]

    @property
    def name(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass
class FarmPlan:
    """A farm job: ``job`` (``decompose``/``restyle``), its input ``src``, ``out``, the
    job's keyword arguments (``kwargs``, without :data:`FARM_OWNED`), ``chunk`` size,
    ``overlap`` K and the ``chunks`` covering the ``wanted`` frames."""

    job: str
    src: str
    out: str
    kwargs: Dict[str, Any]
    chunk: int
    overlap: int
    wanted: List[int]
    chunks: List[Chunk] = field(default_factory=list)
    token: str = ""
    #: the engine computes the shot-wide depth anchors (``kwargs["depth_anchors"]``) first
    anchor_pass: bool = False

    def identity(self) -> Dict[str, Any]:
        """What two farm jobs into one folder must share (the frames may differ)."""
        return {"job": self.job, "src": os.path.realpath(self.src),
                "kwargs": json.loads(json.dumps(self.kwargs, sort_keys=True, default=str)),
                "chunk": self.chunk, "overlap": "chain" if self.overlap is None else self.overlap}


def _clip_numbers(job: str, src: str, kwargs: Dict[str, Any]) -> List[int]:
    if job == "decompose":
        from ..footage import open_footage

        with open_footage(src, colorspace=kwargs.get("colorspace"), start_frame=kwargs.get("start_frame")) as f:
            nums = f.info.frame_numbers()
        if nums is None:
            raise ValueError(f"{src}: the clip's length is unknown; a farm job needs it to plan chunks")
        return nums
    if job == "restyle":
        if not Path(src).is_dir():
            raise JobError(f"G-buffer folder {src} does not exist or is not a folder", file=src)
        nums = sorted(contract.list_frames(src))
        if not nums:
            raise JobError(f"no G-buffer frames ({contract.FILE_PREFIX}NNNN.exr) in {src}", file=src)
        return nums
    raise ValueError(f"unknown farm job {job!r}: expected decompose or restyle")


def make_plan(job: str, src: os.PathLike, out: os.PathLike, kwargs: Dict[str, Any], *, frames: Optional[str],
              chunk: int, overlap: int, anchors: bool = True) -> FarmPlan:
    """Plan a farm job.

    Args:
        frames: ``"A-B"`` source frame numbers, or ``None`` for the whole clip.
        chunk: frames per chunk, >= 1 and >= ``overlap``.
        overlap: warmup frames K >= 0 computed (and discarded) before each chunk, or
            ``None`` ("chain"): each chunk continues from the previous chunk's last frame
            file (it starts when that chunk is done), byte-identical to an unchunked run.
        anchors: a parallel decompose (``overlap`` not ``None``, no ``--cameras``) aligns
            every frame to the shot-wide depth anchors in ``OUT/.gbuffer_depth_anchors.npz``
            (``kwargs["depth_anchors"]``; the engine computes them before the chunks,
            :func:`run_anchors`), unless the caller gave its own ``depth_anchors``.
            ``False``: the old per-chunk alignment (chunks drift from an unchunked run).

    Raises:
        ValueError: a chunk smaller than the overlap, bad numbers, farm-owned kwargs.
        FootageError / InputError: a frame range that starts past the clip's end or
            holds no frame (a range only ending past the end is clipped, with a warning).
    """
    from ..jobs.decompose import clip_frame_range, parse_frames

    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"--chunk {chunk!r}: expected an integer >= 1 (frames per chunk)")
    if overlap is not None and (not isinstance(overlap, int) or overlap < 0):
        raise ValueError(f"--overlap {overlap!r}: expected an integer >= 0 (warmup frames before each chunk) "
                         "or 'chain'")
    if overlap is not None and chunk < overlap:
        raise ValueError(f"--chunk {chunk} is below the temporal overlap --overlap {overlap}: every chunk would "
                         f"compute more discarded warmup frames than frames it writes; use --chunk >= {overlap} "
                         f"or a smaller --overlap")
    bad = [k for k in FARM_OWNED if kwargs.get(k) not in (None, False)]
    if bad:
        raise ValueError(f"{', '.join('--' + k.replace('_', '-') for k in bad)}: set by the farm job per chunk "
                         f"(--chunk, --overlap, --frames); not accepted here")
    nums = _clip_numbers(job, os.fspath(src), kwargs)
    first, last = parse_frames(frames)
    clip_frame_range(first, last, nums, os.fspath(src), frames)  # past the end: refused / clipped
    wanted = [n for n in nums if n >= first and (last is None or n <= last)]
    chunks = [Chunk(c[0], c[-1], c) for c in (wanted[i:i + chunk] for i in range(0, len(wanted), chunk))]
    kw = {k: v for k, v in kwargs.items() if k not in FARM_OWNED}
    if job == "decompose" and overlap is not None and anchors and not kw.get("cameras") \
            and not kw.get("depth_anchors"):
        from ..depth_anchors import ANCHOR_FILE

        kw["depth_anchors"] = os.path.join(os.path.abspath(os.fspath(out)), ANCHOR_FILE)
        return FarmPlan(job, os.fspath(src), os.fspath(out), kw, chunk, overlap, wanted, chunks, anchor_pass=True)
    return FarmPlan(job, os.fspath(src), os.fspath(out), kw, chunk, overlap, wanted, chunks)


def claim_folder(plan: FarmPlan) -> None:
    """Create ``out``, check it is safe and writable, and record the plan in
    ``.gbuffer_farm.json`` (exclusively; an identical plan is a resume); write the
    visibility token (``plan.token``).

    Raises:
        JobError: another farm job with another plan (settings, chunk, overlap) owns the
            folder; an unsafe or unwritable folder.
    """
    from ..jobs.runner import check_output_safe, prepare_output_dir

    out = prepare_output_dir(check_output_safe(plan.out, [plan.src]))
    ident = plan.identity()
    path = out / PLAN_FILE
    fd, tmp = tempfile.mkstemp(prefix=".tmp_farm_", dir=out)
    with os.fdopen(fd, "w") as f:
        json.dump(ident, f, indent=1, sort_keys=True)
    try:
        os.link(tmp, path)  # exclusive create (atomic, NFS-safe)
    except FileExistsError:
        try:
            old = load_json(path, "the farm job's identity file")
        except (OSError, ValueError):
            old = None
        if old != ident:
            diff = sorted(k for k in set(ident) | set(old or {}) if (old or {}).get(k) != ident.get(k))
            raise JobError(f"another farm job with other settings ({', '.join(diff)}) owns {out} ({path}); "
                           f"one folder holds one farm job: choose another --out", file=path) from None
    finally:
        os.unlink(tmp)
    plan.token = secrets.token_hex(16)
    tok = out / TOKEN_FILE
    fd, tmp = tempfile.mkstemp(prefix=".tmp_token_", dir=out)
    with os.fdopen(fd, "w") as f:
        f.write(plan.token)
    os.replace(tmp, tok)


def node_name() -> str:
    """This machine as a worker: its Ray node address when inside Ray, else the host name."""
    try:
        import ray  # noqa: F401 - only when running inside Ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001
        pass
    return socket.gethostname()


def check_visible(out: str, token: str, node: Optional[str] = None) -> str:
    """Read the driver's token in ``out`` from this worker; returns the node's name.

    Raises:
        JobError: the folder or the token is not there (naming the node).
    """
    node = node or node_name()
    try:
        ok = read_text(Path(out) / TOKEN_FILE, "the farm token") == token
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise JobError(f"output folder {out} is not visible from worker node {node} (it cannot read "
                       f"{TOKEN_FILE} the driver wrote there); put --out on storage every node mounts at "
                       f"the same path", file=out)
    return node


_ESTIMATORS: Dict[str, Any] = {}


def _cached_estimator(kwargs: Dict[str, Any]):
    """The decompose estimator, loaded once per worker process and kept across chunks
    (a GPU model stays loaded). ``None`` when it cannot be built here (the job reports)."""
    from ..decomposer import _make_estimator

    name = kwargs.get("estimator") or "embedded"
    key = json.dumps([name, kwargs.get("estimator_options"), kwargs.get("device")], sort_keys=True, default=str)
    if key not in _ESTIMATORS:
        _ESTIMATORS[key] = _make_estimator(name, kwargs.get("estimator_options"), kwargs.get("device"))
    return _ESTIMATORS[key]


def anchor_frames(plan: FarmPlan) -> str:
    """The range the anchor pass covers: the job's frames, ``A-B``."""
    return f"{plan.wanted[0]}-{plan.wanted[-1]}"


def run_anchors(src: str, out: str, kwargs: Dict[str, Any], frames: str, token: str = "") -> Dict[str, Any]:
    """The anchor pass of a farm decompose (:func:`backend.jobs.anchors.compute_anchors`)
    into ``kwargs["depth_anchors"]``, in this process (a worker keeps the estimator it
    loads for its chunks). Returns the ``anchors`` event with ``node``.

    Raises:
        JobError: the folder is not visible here (naming the node); the estimator failed.
    """
    from ..jobs.anchors import compute_anchors

    node = check_visible(out, token) if token else node_name()
    kw = dict(kwargs)
    path = kw.pop("depth_anchors")
    kw["estimator"] = _cached_estimator(kw)
    kw.pop("frames", None)
    res = compute_anchors(src, out, frames=frames, path=path, **kw)
    res["node"] = node
    return res


def _drop_unrecorded(job: str, out: str, first: int, last: int) -> List[int]:
    """Before a chunk runs again (a retry): remove the chunk's frame files its manifest part
    does not record, so they are recomputed, byte-identical, with their full manifest
    entry. A worker killed between a frame's rename and the part's next write leaves such
    a file; resumed as is, its entry kept only the file's checksum (8 fields lost, issue
    29). Only files whose header names the part's settings hash are removed (this chunk's
    own output), with a restyle frame's PNG preview; returns their numbers.
    """
    from ..jobs.parts import part_path

    path = part_path(out, first, last)
    try:
        part = load_json(path, "the manifest part")
    except (OSError, ValueError):
        return []
    shash = part.get("settings_hash")
    recorded = {e.get("frame") for e in part.get("frames") or () if isinstance(e, dict) and "sha256" in e}
    if job == "decompose":
        from ..jobs.decompose import read_settings_hash as read_hash

        prefix = contract.FILE_PREFIX
    else:
        from ..jobs.restyle import OUT_PREFIX as prefix
        from ..jobs.restyle import read_settings_hash as read_hash
    dropped = []
    for n, f in sorted(contract.list_frames(out, prefix).items()):
        if first <= n <= last and n not in recorded:
            try:
                ours = shash is not None and read_hash(f) == shash
            except Exception:  # noqa: BLE001 - unreadable: the job's resume check decides
                ours = False
            if ours:
                f.unlink()
                dropped.append(n)
                if job == "restyle":  # its preview, written with it, is just as unrecorded
                    from ..jobs.restyle import preview_path

                    preview_path(out, n).unlink(missing_ok=True)
    return dropped


def run_chunk(job: str, src: str, out: str, kwargs: Dict[str, Any], first: int, last: int,
              overlap: Optional[int], token: str = "", after: Any = None, cancel: Any = None) -> Dict[str, Any]:
    """Run one chunk in this process: ``decompose|restyle --frames first-last --warmup
    overlap --manifest-part`` (``overlap`` ``None``: no ``--warmup``, the chunk continues
    from the previous frame's file, which ``after`` -- the previous chunk's result, an
    engine's dependency -- guarantees is there).

    Returns:
        ``{"chunk": "A-B", "node", "pid", "written": [...], "skipped": [...],
        "elapsed_s", "events": [...]}`` (``events``: the chunk's progress and warnings).

    ``cancel``: a ``threading.Event`` (``farm local``): when set, the chunk's job stops
    after its current frame (:class:`~backend.errors.JobCancelled`).

    Raises:
        JobError and the job's other errors (one line each); JobCancelled.
    """
    node = check_visible(out, token) if token else node_name()
    _drop_unrecorded(job, out, first, last)
    evs: List[Dict[str, Any]] = []
    t0 = time.monotonic()
    frames = f"{first}-{last}"
    with events.reporting(evs.append):
        if job == "decompose":
            from ..jobs.decompose import decompose

            kw = dict(kwargs)
            kw["estimator"] = _cached_estimator(kw)
            kw.pop("estimator_options", None)
            kw.pop("device", None)
            result = decompose(src, out, frames=frames, warmup=overlap, manifest_part=True, cancel=cancel, **kw)
        else:
            from ..jobs.restyle import restyle

            kw = dict(kwargs)
            prompt = kw.pop("prompt", "")
            result = restyle(src, out, prompt, frames=frames, warmup=overlap, manifest_part=True, cancel=cancel,
                             **kw)
    return {"chunk": frames, "node": node, "pid": os.getpid(), "written": list(result.written),
            "skipped": list(result.skipped), "elapsed_s": round(time.monotonic() - t0, 3),
            "events": [e for e in evs if e.get("event") in ("progress", "warning")]}
