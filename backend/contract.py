"""The G-buffer contract: one multilayer OpenEXR file per frame.

Every piece of G-Buffer Editor reads and writes exactly this (see
``docs/gbuffer-contract.md`` for the prose version; both carry
:data:`CONTRACT_VERSION`).

Layout of a frame file (one part per pass, named ``GBuffer.<Pass>`` as Blender 5
writes them; scanline, ZIP compression)::

    GBuffer.Combined.{R,G,B,A}   half   scene-linear Rec.709 source frame
    GBuffer.Depth.Z              float  planar depth along the camera axis (before: Depth.V, still read)
    GBuffer.Normal.{X,Y,Z}       half   camera space, OpenGL (+X right, +Y up, +Z to camera)
    GBuffer.Albedo.{R,G,B}       half   linear base colour, 0..1
    GBuffer.Metallic.V           half   0..1
    GBuffer.Roughness.V          half   0..1
    GBuffer.Confidence.V         half   0..1, 0 marks "no surface" (sky / background)

The layer name ``GBuffer`` makes Blender treat the file as multilayer; each pass
becomes its own socket of the Image node once that layer is selected. Each part states
its colour space (``colorInteropID``, ``chromaticities``) and carries the camera
(``worldToCamera``, ``worldToNDC``), rate and timecode when known.

This module never imports ``bpy``.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import InputError
from . import arguments as args
from .input_files import check_write_target, native_path, refuse_special
from .extra_passes import EXTRA_PASSES
from .header_text import TEXT_KEYS, decode_header_value, encode_header_value, utf8  # noqa: F401

CONTRACT_VERSION = "1.0"
LAYER = "GBuffer"
FILE_PREFIX = "gbuffer_"
FRAME_DIGITS = 4

#: pass name -> (channel suffixes, numpy dtype on disk, Blender socket type)
PASSES: Dict[str, tuple] = {
    "Combined": (("R", "G", "B", "A"), np.float16, "RGBA"),
    "Depth": (("Z",), np.float32, "VALUE"),
    "Normal": (("X", "Y", "Z"), np.float16, "VECTOR"),
    "Albedo": (("R", "G", "B"), np.float16, "RGBA"),
    "Metallic": (("V",), np.float16, "VALUE"),
    "Roughness": (("V",), np.float16, "VALUE"),
    "Confidence": (("V",), np.float16, "VALUE"),
}
LEGACY_SUFFIXES: Dict[str, tuple] = {"Depth": ("V",)}  #: read too (files before Depth.Z, Blender's/OIIO's name)
REQUIRED_PASSES = ("Combined", "Depth", "Normal", "Albedo", "Metallic", "Roughness")

#: Header attribute names (all strings unless noted), prefixed to avoid clashes.
HEADER_PREFIX = "gbuffer/"
#: ``metric``: metres; ``up_to_scale``: a camera solve's units (metric up to one global factor,
#: the same for a whole shot); ``relative``: an estimator's relative depth mapped onto
#: RELATIVE_NEAR..RELATIVE_FAR
DEPTH_KINDS = ("metric", "relative", "up_to_scale")
#: relative depth is mapped onto this near..far range (metres-like units)
RELATIVE_NEAR = 1.0
RELATIVE_FAR = 100.0
#: depth written for pixels with no surface (sky / background): the far value
#: of the frame's depth range. Their normal is (0, 0, 1) and Confidence is 0.
SKY_NORMAL = (0.0, 0.0, 1.0)
#: Confidence at or below this marks "no surface" (sky / background); every surface
#: pixel is above it. Between it and 1 the value says how far the passes are measured
#: (multi-view decompose: >= 0.5 measured from parallax, below: filled from the
#: single-image estimate; scene export: pixel coverage; embedded: the network's
#: surface confidence).
NO_SURFACE = 1e-3


class ContractError(InputError):
    """A file or array does not follow the G-buffer contract (``file``: the file, when
    one is concerned; ``frame``: its frame number, when known)."""


@dataclass
class GBufferFrame:
    """One frame of G-buffers, in memory.

    All arrays are ``float32``, ``H x W`` (values) or ``H x W x C`` (vectors and colours).

    Attributes:
        combined: ``H x W x 4`` source frame, scene-linear Rec.709 RGBA, >= 0.
        depth: ``H x W`` planar depth along the camera axis, > 0. Metres when
            ``meta['depth_kind'] == 'metric'``; otherwise relative depth mapped onto
            ``[meta['depth_near'], meta['depth_far']]``.
        normal: ``H x W x 3`` unit camera-space normals, OpenGL convention
            (+X right, +Y up, +Z toward the camera).
        albedo: ``H x W x 3`` linear base colour in ``[0, 1]``.
        metallic: ``H x W`` in ``[0, 1]``.
        roughness: ``H x W`` in ``[0, 1]`` (Principled BSDF roughness, not squared).
        confidence: optional ``H x W`` in ``[0, 1]``; ``0`` marks pixels with no
            surface (sky / background), whose depth is the far value and normal (0,0,1).
        meta: header attributes (see :func:`make_meta`).
        extras: optional passes by name (:data:`backend.extra_passes.EXTRA_PASSES`:
            ``Vector`` ``H x W x 4``, ``Position`` ``H x W x 3``), written after the others.
    """

    combined: np.ndarray
    depth: np.ndarray
    normal: np.ndarray
    albedo: np.ndarray
    metallic: np.ndarray
    roughness: np.ndarray
    confidence: Optional[np.ndarray] = None
    meta: Dict[str, Any] = field(default_factory=dict)
    extras: Dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def shape(self) -> tuple:
        """``(H, W)`` of the frame."""
        return tuple(self.depth.shape[:2])

    def arrays(self) -> Dict[str, np.ndarray]:
        """Pass name -> array, in contract order; Confidence only when present."""
        out = {
            "Combined": self.combined,
            "Depth": self.depth,
            "Normal": self.normal,
            "Albedo": self.albedo,
            "Metallic": self.metallic,
            "Roughness": self.roughness,
        }
        if self.confidence is not None:
            out["Confidence"] = self.confidence
        out.update((k, v) for k, v in self.extras.items() if k in EXTRA_PASSES)
        return out

    def validate(self) -> None:
        """Check shapes, finiteness and ranges.

        Raises:
            ContractError: naming the pass and the problem.
        """
        h, w = self.shape
        for name, arr in self.arrays().items():
            chans = len(_spec(name)[0])
            want = (h, w) if chans == 1 else (h, w, chans)
            if arr.shape != want:
                raise ContractError(f"pass {name}: shape {arr.shape}, expected {want}")
            if not all_finite(arr):
                raise ContractError(f"pass {name}: contains NaN or Inf")
        if self.depth.min() <= 0:
            raise ContractError("pass Depth: values must be > 0")
        sq = np.einsum("...i,...i->...", self.normal, self.normal)  # |n|^2
        if sq.min() < 0.99 ** 2 or sq.max() > 1.01 ** 2:  # | |n| - 1 | > 1e-2
            raise ContractError("pass Normal: vectors must be unit length")
        for name in ("Albedo", "Metallic", "Roughness", "Confidence"):
            arr = self.arrays().get(name)
            if arr is not None and (arr.min() < -1e-3 or arr.max() > 1.0 + 1e-3):
                raise ContractError(f"pass {name}: values must lie in [0, 1]")


def _spec(name: str) -> tuple:
    """``(channel suffixes, dtype on disk, Blender socket)`` of a contract or extra pass."""
    return PASSES.get(name) or EXTRA_PASSES[name]


def all_finite(a: np.ndarray) -> bool:
    """True when no element of ``a`` is NaN or Inf.

    A float64 sum is finite exactly when every element is (no overflow at float32 or
    half magnitudes), and needs no full-size boolean temporary: about 10x cheaper than
    ``np.isfinite(a).all()`` on a frame.
    """
    return bool(np.isfinite(np.add.reduce(a, axis=None, dtype=np.float64)))


def default_file_mode() -> int:
    """``0o666`` less the process umask: what ``open(..., "w")`` would give a new file
    (``tempfile.mkstemp`` creates 0600 files, which other users could not read)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: os.PathLike, prefix: Optional[str] = None):
    """Yield a temporary path in ``path``'s folder; on success rename it onto ``path``.

    Atomic on one file system: readers see the old file or the whole new one. On any
    exception the temporary file is removed and it propagates (``OSError``: full disk,
    unwritable folder; InputError: no folder, or no regular file at ``path``, kept).
    """
    path = check_write_target(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix or (".tmp_" + path.stem), suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, default_file_mode())
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def make_meta(
    *,
    estimator: str,
    models: Optional[Dict[str, str]] = None,
    depth_kind: str = "relative",
    depth_near: float = RELATIVE_NEAR,
    depth_far: float = RELATIVE_FAR,
    source: str = "",
    frame_index: int = 0,
    timestamp: float = 0.0,
    source_colorspace: str = "sRGB",
    intrinsics: Optional[tuple] = None,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Build the header attributes every frame file carries.

    Args:
        estimator: registry name of the estimator (``embedded``, ``marigold``, ``scene``...).
        models: model id -> revision (or file hash) used for this frame.
        depth_kind: ``metric`` (metres) or ``relative``.
        depth_near, depth_far: depth range; for relative depth the documented
            mapping range, for metric depth the observed min/max.
        source: source file path; frame_index: 0-based index in the source;
        timestamp: presentation time in seconds.
        source_colorspace: colour space the source was decoded from.
        intrinsics: ``(fx, fy, cx, cy)`` in pixels of the written frame, if known.
        extra: any further JSON-serialisable attributes.

    Raises:
        ContractError: for an unknown depth kind.
    """
    if depth_kind not in DEPTH_KINDS:
        raise ContractError(f"depth_kind must be one of {DEPTH_KINDS}, got {depth_kind!r}")
    meta = {
        "contract_version": CONTRACT_VERSION,
        "estimator": estimator,
        "models": dict(models or {}),
        "depth_kind": depth_kind,
        "depth_near": float(depth_near),
        "depth_far": float(depth_far),
        "source": str(source),
        "frame_index": int(frame_index),
        "timestamp": float(timestamp),
        "source_colorspace": source_colorspace,
        "intrinsics": list(map(float, intrinsics)) if intrinsics is not None else None,
    }
    if extra:
        meta.update(extra)
    return meta


def frame_path(out_dir: os.PathLike, index: int, prefix: str = FILE_PREFIX) -> Path:
    """Path of frame ``index`` (file names end in the frame number, 4+ digits)."""
    return Path(out_dir) / f"{prefix}{index:0{FRAME_DIGITS}d}.exr"


_FRAME_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)\.exr$", re.IGNORECASE)


def list_frames(folder: os.PathLike, prefix: str = FILE_PREFIX) -> Dict[int, Path]:
    """Frame number -> path for every ``{prefix}NNNN.exr`` in ``folder``, sorted.

    Raises:
        ContractError: two files name the same frame (``gbuffer_0001.exr`` and
            ``gbuffer_001.exr``): which one is meant cannot be told, so neither is
            silently dropped.
    """
    out: Dict[int, Path] = {}
    for p in sorted(Path(args.path("folder", folder)).iterdir()):
        m = _FRAME_RE.match(p.name)
        if m and m.group("prefix") == prefix and not p.name.startswith("."):
            n = int(m.group("num"))
            if n in out:
                raise ContractError(f"{folder}: {out[n].name} and {p.name} are both frame {n}; "
                                    "remove or rename one")
            out[n] = p
    return dict(sorted(out.items()))


def _cv2_fp16():
    try:
        import cv2

        return getattr(cv2, "convertFp16", None)
    except ImportError:  # pragma: no cover - opencv is a backend dependency
        return None


def to_half(arr: np.ndarray) -> np.ndarray:
    """``float32``-convertible array -> C-contiguous ``float16`` (IEEE round-to-nearest-even).

    Bit-identical to ``arr.astype(np.float16)``, about 10x faster: OpenCV's
    ``convertFp16`` uses the CPU's F16C instructions where numpy 1.x converts one
    value at a time. Used for every half pass written and read.
    """
    a = np.ascontiguousarray(arr, dtype=np.float32)
    conv = _cv2_fp16()
    if conv is not None and a.size and (a.ndim == 2 or (a.ndim == 3 and a.shape[2] <= 4)):
        return conv(a).view(np.float16)
    return a.astype(np.float16)


def half_to_float32(arr: np.ndarray) -> np.ndarray:
    """``float16`` array -> C-contiguous ``float32`` (exact), the inverse of :func:`to_half`."""
    a = np.ascontiguousarray(arr, dtype=np.float16)
    conv = _cv2_fp16()
    if conv is not None and a.size and (a.ndim == 2 or (a.ndim == 3 and a.shape[2] <= 4)):
        return conv(a.view(np.int16))
    return a.astype(np.float32)


def _channel_dict(frame: GBufferFrame) -> Dict[str, np.ndarray]:
    chans = {}
    for name, arr in frame.arrays().items():
        suffixes, dtype, _ = _spec(name)
        conv = to_half if dtype == np.float16 else (lambda a, dt=dtype: np.ascontiguousarray(a, dtype=dt))
        if len(suffixes) == 1:
            chans[f"{LAYER}.{name}.{suffixes[0]}"] = conv(arr)
        else:
            stored = conv(arr)  # H x W x C in the stored dtype, then one planar copy
            planar = np.ascontiguousarray(np.moveaxis(stored, -1, 0))
            for i, s in enumerate(suffixes):
                chans[f"{LAYER}.{name}.{s}"] = planar[i]
    return chans


def as_stored(frame: GBufferFrame) -> GBufferFrame:
    """A copy of ``frame`` whose arrays hold exactly what :func:`write_frame` stores
    (each pass rounded through its on-disk dtype, returned as float32), i.e. what
    :func:`read_frame` will give back."""
    arrays = {name: (half_to_float32(to_half(arr)) if _spec(name)[1] == np.float16
                     else np.asarray(arr, dtype=_spec(name)[1]).astype(np.float32))
              for name, arr in frame.arrays().items()}
    std = {n.lower(): arrays.get(n) for n in PASSES}
    return GBufferFrame(meta=dict(frame.meta), extras={n: arrays[n] for n in EXTRA_PASSES if n in arrays}, **std)


_EXR_THREADS_SET = False


def exr_threads() -> None:
    """Give OpenEXR a worker pool (once per process) so it (de)compresses a file's
    chunks in parallel: ``GBUFFER_EXR_THREADS`` threads, default the CPU count (at most
    8). OpenEXR's own default is 0 (all work on the calling thread). Measured: embedded
    decompose at 960x540 on 2 cores, 6.4 -> 7.5 fps."""
    global _EXR_THREADS_SET
    if _EXR_THREADS_SET:
        return
    _EXR_THREADS_SET = True
    import OpenEXR

    try:
        n = int(os.environ.get("GBUFFER_EXR_THREADS", "") or min(os.cpu_count() or 1, 8))
    except ValueError:
        n = min(os.cpu_count() or 1, 8)
    if n > 0 and OpenEXR.global_thread_count() == 0 and hasattr(OpenEXR, "set_global_thread_count"):
        OpenEXR.set_global_thread_count(n)


def write_frame(path: os.PathLike, frame: GBufferFrame, *, validate: bool = True,
                atomic: bool = True) -> Path:
    """Write one contract frame atomically (temporary file in the same folder, then rename).

    Args:
        path: destination ``.exr`` path (see :func:`frame_path`).
        frame: the G-buffers; ``frame.meta`` becomes header attributes.
        validate: run :meth:`GBufferFrame.validate` first.
        atomic: write to a temporary file next to ``path`` and rename it; ``False``
            writes ``path`` directly, for a caller that already writes to a temporary
            path it renames itself (the job runner), so no nested temporary is left
            behind when the process is killed.

    Returns:
        The written path.

    Raises:
        ContractError: invalid frame.
        ArgumentError: no folder, or a FIFO/device/socket/folder/symlink at ``path`` (kept).
        OSError: the folder is not writable or the disk is full; no partial file is left.
    """
    import OpenEXR

    args.path("path", path)
    args.instance("frame", frame, GBufferFrame)
    exr_threads()
    if validate:
        frame.validate()
    path = check_write_target(path, "the frame", args.ArgumentError)
    parts = _parts(frame)
    file_args = parts if isinstance(parts, tuple) else (parts,)  # (header, channels): one unnamed part
    if not atomic:
        with OpenEXR.File(*file_args) as f:
            f.write(native_path(path))
        return path
    with atomic_path(path) as tmp, OpenEXR.File(*file_args) as f:
        f.write(native_path(tmp))
    return path


#: passes holding colour (tagged with the working space); the others are data
COLOUR_PASSES = ("Combined", "Albedo")


def _parts(frame: GBufferFrame):
    """One OpenEXR part per pass, named ``GBuffer.<Pass>`` as Blender 5 writes them, each
    stating its colour space (``colorInteropID``: the working space on colour passes,
    ``data`` on the others; ``chromaticities``) and the frame's camera, lens, rate and
    timecode (:mod:`backend.exr_attrs`); the ``gbuffer/*`` attributes on the first part."""
    import OpenEXR

    from . import exr_attrs, exr_colour, layouts

    meta = dict(frame.meta)
    meta.setdefault("contract_version", CONTRACT_VERSION)
    ws = exr_colour.working_space(meta.get("working_space"))
    frame = exr_colour.to_working(frame, ws)
    common = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    common.update(exr_attrs.standard_attributes(meta, frame.shape), **exr_attrs.depth_attributes(meta))
    if layouts.check(meta.get("layout")) == "nuke":  # one part: colour tags for the beauty
        common.update(exr_colour.colour_attributes(ws))
        common.update((HEADER_PREFIX + k, encode_header_value(k, v)) for k, v in meta.items())
        chans = {}  # one unnamed part: a part name would make Blender show one pass named after it
        for name, arr in frame.arrays().items():
            dtype = _spec(name)[1]
            stored = to_half(arr) if dtype == np.float16 else np.asarray(arr, dtype)
            chans.update((k, np.ascontiguousarray(v)) for k, v in layouts.nuke_channels(name, stored).items())
        return common, chans
    channels = _channel_dict(frame)
    parts = []
    for name in frame.arrays():
        header = dict(common)
        header.update(exr_colour.colour_attributes(ws, data=name not in COLOUR_PASSES))
        if not parts:
            for k, v in meta.items():
                header[HEADER_PREFIX + k] = encode_header_value(k, v)
        prefix = f"{LAYER}.{name}."
        chans = {k: v for k, v in channels.items() if k.startswith(prefix)}
        parts.append(OpenEXR.Part(header, chans, f"{LAYER}.{name}"))
    return parts


def _decode_meta(header: Dict[str, Any]) -> Dict[str, Any]:
    return {k[len(HEADER_PREFIX):]: decode_header_value(k[len(HEADER_PREFIX):], v)
            for k, v in header.items() if k.startswith(HEADER_PREFIX)}


def read_meta(path: os.PathLike) -> Dict[str, Any]:
    """The ``gbuffer/*`` header attributes of a contract frame, decoded; no pixels are read.

    Args:
        path: a contract frame (ours, or one re-written by Blender's File Output node,
            single- or multi-part).

    Returns:
        dict of the header values (JSON-decoded where they were stored as JSON), e.g.
        ``estimator``, ``depth_kind``, ``frame_index``, ``settings_hash``; ``{}`` when
        the file carries none.

    Raises:
        ContractError: the file cannot be opened as OpenEXR.
    """
    return _decode_meta(_read_header(args.path("path", path)))


def frame_size(path: os.PathLike) -> Tuple[int, int]:
    """``(width, height)`` of a frame's data window, from the header; no pixels are read.

    Raises:
        ContractError: the file cannot be opened as OpenEXR, or has no data window.
    """
    header = _read_header(path)
    try:
        (x0, y0), (x1, y1) = header["dataWindow"]
    except (KeyError, TypeError, ValueError):
        raise ContractError(f"{path}: OpenEXR header has no data window", file=path) from None
    return int(x1) - int(x0) + 1, int(y1) - int(y0) + 1


def _read_header(path: os.PathLike) -> Dict[str, Any]:
    """The first part's header attributes, raw (``{}`` for a file without parts)."""
    import OpenEXR

    refuse_special(path, "the OpenEXR file", ContractError)  # a FIFO would block OpenEXR (issue 36)
    try:
        with OpenEXR.File(native_path(path), header_only=True) as f:
            return dict(f.parts[0].header) if f.parts else {}
    except Exception as e:  # noqa: BLE001 - OpenEXR raises plain RuntimeError variants
        raise ContractError(f"{path}: not a readable OpenEXR file ({e})", file=path) from e


def sanitize(frame: GBufferFrame, passes: Optional[Sequence[str]] = None) -> GBufferFrame:
    """Bring edited passes back inside the contract, in place (and return the frame).

    Used on frames an artist changed in the compositor before they are re-rendered:
    NaN/Inf -> 0; Albedo, Metallic, Roughness, Confidence clipped to [0, 1]; Combined
    clamped to >= 0; Depth clamped to >= 1e-4; Normals re-normalised (zero vectors
    become the contract's facing normal (0, 0, 1)). Arrays become ``float32``.

    Args:
        passes: lower-case names of the passes to treat (e.g. ``["roughness"]``, the
            ones an edit changed); ``None``: all of them.
    """
    args.instance("frame", frame, GBufferFrame)
    todo = set(PASS_ATTRS if passes is None else passes)
    for name in PASS_ATTRS:
        arr = getattr(frame, name)
        if arr is not None and name in todo:
            setattr(frame, name, np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32))
    for name in ("albedo", "metallic", "roughness", "confidence"):
        arr = getattr(frame, name)
        if arr is not None and name in todo:
            setattr(frame, name, np.clip(arr, 0.0, 1.0))
    if "combined" in todo:
        frame.combined = np.maximum(frame.combined, 0.0)
    if "depth" in todo:
        frame.depth = np.maximum(frame.depth, 1e-4)
    if "normal" in todo:
        n = frame.normal
        length = np.linalg.norm(n, axis=-1, keepdims=True)
        safe = np.where(length > 1e-6, n / np.maximum(length, 1e-6), np.array(SKY_NORMAL, np.float32))
        frame.normal = safe.astype(np.float32)
    return frame


#: the pass attributes of :class:`GBufferFrame`, lower-case
PASS_ATTRS = ("combined", "depth", "normal", "albedo", "metallic", "roughness", "confidence")


def read_channels(path: os.PathLike) -> tuple:
    """Read every channel of every part of an EXR file.

    Blender 5.0 writes multilayer EXR as multi-part files; this reads them all.

    Returns:
        ``(channels, header)``: channel name -> 2-D array (dtype as stored),
        and the first part's header attributes.

    Raises:
        ContractError: the file cannot be read as OpenEXR.
    """
    import OpenEXR

    exr_threads()
    refuse_special(path, "the OpenEXR file", ContractError)  # a FIFO would block OpenEXR (issue 36)
    try:
        with OpenEXR.File(native_path(path), separate_channels=True) as f:
            if not f.parts:
                # OpenEXR prints a warning and gives no parts when the pixel data cannot
                # be read (a truncated or corrupt file)
                raise ContractError(f"{path}: unreadable OpenEXR file (truncated or corrupt pixel data)",
                                    file=path)
            if len(f.parts) < _part_count(path):
                # a truncated multi-part file: OpenEXR gives the parts it could read
                raise ContractError(f"{path}: unreadable OpenEXR file (truncated or corrupt pixel data)",
                                    file=path)
            chans = {}
            header = {}
            for i, part in enumerate(f.parts):
                if i == 0:
                    header = dict(part.header)
                for name, ch in part.channels.items():
                    chans[name] = np.asarray(ch.pixels)
            return chans, header
    except ContractError:
        raise
    except Exception as e:  # OpenEXR raises plain RuntimeError / IOError variants
        raise ContractError(f"{path}: not a readable OpenEXR file ({e})", file=path) from e


def _part_count(path) -> int:
    """Parts a file's headers declare (OpenEXR reads them even when pixel data is cut)."""
    import OpenEXR

    with OpenEXR.File(native_path(path), header_only=True) as f:
        return len(f.parts)


def _find_pass(chans: Dict[str, np.ndarray], name: str, suffixes) -> Optional[np.ndarray]:
    """Find a pass regardless of the layer prefix (Blender may rename the view layer), in
    either layout (:mod:`backend.layouts`)."""
    arr = _find_layered(chans, name, suffixes)
    if arr is None and tuple(suffixes) == _spec(name)[0]:
        from .layouts import find_nuke

        arr = find_nuke(chans, name)
        if arr is None and name in LEGACY_SUFFIXES:  # folders written before
            arr = _find_layered(chans, name, LEGACY_SUFFIXES[name])
    return arr


def _find_layered(chans: Dict[str, np.ndarray], name: str, suffixes) -> Optional[np.ndarray]:
    found = []
    for s in suffixes:
        hit = None
        for key in (f"{LAYER}.{name}.{s}", f"{name}.{s}"):
            if key in chans:
                hit = chans[key]
                break
        if hit is None:
            cands = [k for k in chans if k.endswith(f".{name}.{s}")]
            if len(cands) == 1:
                hit = chans[cands[0]]
        if hit is None:
            return None
        found.append(hit)
    if all(f.dtype == np.float16 for f in found) and len(found) <= 4:
        return half_to_float32(found[0] if len(found) == 1 else np.stack(found, axis=-1))
    found = [f.astype(np.float32) for f in found]
    return found[0] if len(found) == 1 else np.stack(found, axis=-1)


def read_passes(path: os.PathLike, names: Sequence[str]) -> Dict[str, np.ndarray]:
    """Read some passes of an EXR file that may hold only those (e.g. a compositor bake
    of the edited passes), under any layer prefix, either Blender version's layout.
    Args: names: contract pass names (keys of :data:`PASSES`, e.g. ``["Roughness"]``).

    Returns:
        Lower-case pass name -> ``float32`` array (``H x W`` or ``H x W x C``, channels as
        in :data:`PASSES`; ``combined`` without alpha gets alpha 1; a colour pass baked as
        one ``V`` channel, as Blender 4.x writes a Value node's link, is grey).

    Raises:
        ContractError: unreadable file, or one of ``names`` missing (naming file and pass);
        KeyError: a name that is not a contract pass."""
    chans, _ = read_channels(path)
    out = {}
    for name in names:
        suffixes = PASSES[name][0]
        arr = _find_pass(chans, name, suffixes)
        if arr is None and name == "Combined":
            arr3 = _find_pass(chans, name, ("R", "G", "B"))
            if arr3 is not None:
                arr = np.concatenate([arr3, np.ones_like(arr3[..., :1])], axis=-1)
        if arr is None and len(suffixes) > 1 and (one := _find_pass(chans, name, ("V",))) is not None:
            arr = np.repeat(one[..., None], len(suffixes), axis=-1)  # Blender 4.x bakes a Value link as X.V
        if arr is None:
            raise ContractError(f"{path}: missing pass {name} (channels: {', '.join(sorted(chans))})", file=path)
        out[name.lower()] = arr
    return out


def read_frame(path: os.PathLike, *, validate: bool = False) -> GBufferFrame:
    """Read a contract frame (ours, or one re-written by Blender's File Output node).

    Returns:
        :class:`GBufferFrame` with ``float32`` arrays and decoded ``meta``.

    Raises:
        ContractError: unreadable file, or a required pass missing (the message
        names the file and the pass).
    """
    chans, header = read_channels(args.path("path", path))
    arrays = {}
    for name, (suffixes, _, _) in PASSES.items():
        arr = _find_pass(chans, name, suffixes)
        if arr is None and name == "Combined":
            arr3 = _find_pass(chans, name, ("R", "G", "B"))
            if arr3 is not None:
                arr = np.concatenate([arr3, np.ones_like(arr3[..., :1])], axis=-1)
        if arr is None and name in REQUIRED_PASSES:
            raise ContractError(f"{path}: missing pass {name}", file=path)
        arrays[name.lower()] = arr
    frame = GBufferFrame(
        combined=arrays["combined"],
        depth=arrays["depth"],
        normal=arrays["normal"],
        albedo=arrays["albedo"],
        metallic=arrays["metallic"],
        roughness=arrays["roughness"],
        confidence=arrays["confidence"],
        meta=_decode_meta(header),
        extras={n: a for n, spec in EXTRA_PASSES.items() if (a := _find_pass(chans, n, spec[0])) is not None},
    )
    from .exr_colour import from_stated_working

    from_stated_working(frame, header)  # colour passes in another working space -> Rec.709
    if validate:
        try:
            frame.validate()
        except ContractError as e:
            raise ContractError(f"{path}: {e}", file=path) from None
    return frame


def write_manifest(out_dir: os.PathLike, manifest: Dict[str, Any]) -> Path:
    """Write ``manifest.json`` atomically into ``out_dir`` and return its path."""
    out_dir = Path(out_dir)
    data = dict(manifest)
    data.setdefault("contract_version", CONTRACT_VERSION)
    path = out_dir / "manifest.json"
    text = json.dumps(data, indent=2, sort_keys=True)  # one string: ~5x faster than json.dump
    with atomic_path(path, prefix=".tmp_manifest") as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


#: hidden folder of a farm job's manifest parts (``A-B.json``, one per chunk; see
#: :mod:`backend.jobs.parts`)
PARTS_DIR = ".gbuffer_parts"


def read_parts(out_dir: os.PathLike) -> List[Tuple[Path, Dict[str, Any]]]:
    """The manifest parts of a folder (``.gbuffer_parts/A-B.json``), ordered by range.

    Raises:
        ContractError: a part that is not a JSON object (naming it).
    """
    from .input_files import loads_bounded, read_text

    d = Path(out_dir) / PARTS_DIR
    if not d.is_dir():
        return []
    found = []
    for f in d.glob("*.json"):
        m = re.fullmatch(r"(\d+)-(\d+)\.json", f.name)
        if not m:
            continue
        try:
            data = loads_bounded(read_text(f, "the manifest part", ContractError))
        except ContractError:
            raise
        except (OSError, ValueError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else e
            raise ContractError(f"{f}: not a valid manifest part ({why}); remove it and re-run its chunk",
                                file=f) from None
        if not isinstance(data, dict):
            raise ContractError(f"{f}: not a valid manifest part (not a JSON object)", file=f)
        found.append(((int(m.group(1)), int(m.group(2))), f, data))
    return [(f, data) for _, f, data in sorted(found, key=lambda t: t[0])]


def assemble_parts(parts: List[Tuple[Path, Dict[str, Any]]], base: Optional[Dict[str, Any]] = None
                   ) -> Dict[str, Any]:
    """One manifest from manifest parts (and ``base``, a merged ``manifest.json``, whose
    frames are kept when its settings hash is the parts'): top-level fields of the last
    part, the union of the frame entries (ordered), ``outputs`` and ``inputs`` merged.
    Parts with another settings hash than the last one are left out. ``{}`` for none."""
    if not parts:
        return dict(base or {})
    shash = parts[-1][1].get("settings_hash")
    docs = ([base] if base and base.get("settings_hash") == shash else []) + \
        [d for _, d in parts if d.get("settings_hash") == shash]
    out = {k: v for k, v in parts[-1][1].items() if k != "part"}
    frames: Dict[int, Any] = {}
    for d in docs:
        for key in ("outputs", "inputs"):
            if isinstance(d.get(key), dict):
                merged = dict(out.get(key) or {})
                merged.update(d[key])
                out[key] = merged
        for e in d.get("frames") or ():
            if isinstance(e, dict) and isinstance(e.get("frame"), int):
                frames[e["frame"]] = e
    out["frames"] = [frames[n] for n in sorted(frames)]
    out["complete"] = False
    return out


def read_manifest(out_dir: os.PathLike) -> Dict[str, Any]:
    """Read ``manifest.json`` of a contract folder; ``{}`` when absent. A farm job's
    folder with manifest parts but no merged ``manifest.json`` yet is read "on read":
    its parts assembled in memory (:func:`assemble_parts`, ``complete: false``).

    Raises:
        ContractError: the file is not JSON, or not a JSON object (naming it).
        OSError: it cannot be read.
    """
    from .input_files import MAX_JSON_DEPTH, loads_bounded, read_text

    out_dir = args.path("out_dir", out_dir)
    p = Path(out_dir) / "manifest.json"
    if not p.exists():
        return assemble_parts(read_parts(out_dir)) if (Path(out_dir) / PARTS_DIR).is_dir() else {}
    text = read_text(p, "the manifest", ContractError)
    try:
        data = loads_bounded(text)
    except (ValueError, RecursionError) as e:
        why = f"nested deeper than {MAX_JSON_DEPTH} levels" if isinstance(e, RecursionError) else e
        raise ContractError(f"{p}: not a valid manifest (not JSON: {why}); fix it or move it away",
                            file=p) from None
    if not isinstance(data, dict):
        raise ContractError(f"{p}: not a valid manifest (a JSON {type(data).__name__}, not an object); "
                            f"fix it or move it away", file=p)
    return data


def surface_mask(frame: GBufferFrame) -> np.ndarray:
    """``H x W`` bool: pixels with a surface (``Confidence > NO_SURFACE``; all pixels when
    the frame has no Confidence pass)."""
    if frame.confidence is None:
        return np.ones(frame.shape, bool)
    return np.asarray(frame.confidence) > NO_SURFACE
