"""Shot-wide depth anchors: the scale/shift every frame of a shot aligns to, fixed once.

Relative depth (affine-invariant estimators: the embedded network, Depth Anything...) is
aligned frame to frame (:class:`backend.geometry.TemporalDepthAligner`): each frame's
scale/shift is fitted to the previous aligned frame, from the first frame of the run.
A frame's scale therefore carries the drift of every frame before it, and a farm chunk
that starts its own chain K frames before its first frame ends up with another scale
(measured on bikes.mp4, chunk 12: 6-8 % median, up to 39 %; docs/farm_ray.md).

Anchors remove that dependency on where a run starts. A cheap first pass over the whole
shot (:func:`backend.jobs.anchors.compute_anchors`: the estimator and the aligner only,
no normals, albedo or EXR) runs the same chain an unchunked decompose runs and keeps each
frame's aligned depth, area-downscaled to at most :data:`ANCHOR_SIZE` px (long side), in
``OUT/.gbuffer_depth_anchors.npz``. A decompose given the file (``--depth-anchors``)
aligns every frame on its own to its anchor: the robust scale/shift fit
(:func:`backend.geometry._robust_scale_shift`) of the frame's prediction, downscaled the
same way, against the anchor, over pixels with a surface in both. A frame's depth then
depends on that frame and the file only, so chunks computed in parallel, in any order,
with any overlap, equal an unchunked run with the same file exactly, and both equal a
plain unchunked run up to the fit's precision (the anchor *is* the plain run's aligned
depth of the same frame).

File format (``numpy.savez_compressed``): ``numbers`` (int64, N source frame numbers),
``depth`` (float32, N x h x w, the contract's relative range ``[RELATIVE_NEAR,
RELATIVE_FAR]``), ``mask`` (bool, N x h x w, a surface in the anchor), ``meta`` (a JSON
string: format version, source path and size, estimator settings, processing size,
frames). :attr:`DepthAnchors.digest` hashes the arrays and ``meta`` (not the zip
container, whose timestamps vary) and enters a decompose's settings hash.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import contract, geometry
from .imaging import resize
from .input_files import check_regular, is_special_file_error

ANCHOR_FILE = ".gbuffer_depth_anchors.npz"
#: long side in pixels of a stored anchor
ANCHOR_SIZE = 96
FORMAT_VERSION = 1
#: smallest share of anchor pixels that must be a surface in both for a fit
MIN_FIT_FRACTION = 0.05


def anchor_size(width: int, height: int, size: int = ANCHOR_SIZE) -> Tuple[int, int]:
    """``(w, h)`` of an anchor for depth maps of ``width x height``: long side at most ``size``."""
    s = min(1.0, size / max(width, height))
    return max(1, round(width * s)), max(1, round(height * s))


def downscale(depth: np.ndarray, mask: Optional[np.ndarray], size: Tuple[int, int]):
    """``(depth, mask)`` area-downscaled to ``size = (w, h)``; the mask keeps pixels that
    were a surface over their whole footprint (no mixed sky/surface pixels)."""
    d = resize(np.asarray(depth, np.float32), size, "area")
    if mask is None:
        return d, np.ones(d.shape, bool)
    m = resize(np.asarray(mask, np.float32), size, "area") > 0.999
    return d, m


@dataclass
class DepthAnchors:
    """Anchors of one shot: ``numbers`` -> aligned low-resolution depth and surface mask.

    Attributes:
        numbers: source frame numbers, ascending.
        depth: float32 ``N x h x w`` in ``[RELATIVE_NEAR, RELATIVE_FAR]``.
        mask: bool ``N x h x w``.
        meta: what they were computed from (``source``, ``estimator``, ``processing_size``, ...).
        path: the file they were read from (``None``: in memory).
    """

    numbers: np.ndarray
    depth: np.ndarray
    mask: np.ndarray
    meta: Dict[str, Any]
    path: Optional[str] = None
    _index: Dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.numbers = np.asarray(self.numbers, np.int64)
        self._index = {int(n): i for i, n in enumerate(self.numbers)}

    def __contains__(self, number: int) -> bool:
        return int(number) in self._index

    def get(self, number: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """``(depth, mask)`` of frame ``number``, or ``None`` when it has no anchor."""
        i = self._index.get(int(number))
        return None if i is None else (self.depth[i], self.mask[i])

    @property
    def digest(self) -> str:
        """sha256 (16 hex digits) of the arrays and ``meta``: equal anchors, equal digest."""
        h = hashlib.sha256()
        for a in (self.numbers, self.depth, self.mask):
            h.update(str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(json.dumps(self.meta, sort_keys=True).encode())
        return h.hexdigest()[:16]

    def missing(self, numbers) -> List[int]:
        """The frame numbers of ``numbers`` without an anchor."""
        return [int(n) for n in numbers if int(n) not in self._index]

    def align(self, depth: np.ndarray, mask: Optional[np.ndarray], number: int) -> Optional[np.ndarray]:
        """Frame ``number``'s raw relative depth aligned to its anchor.

        Args:
            depth: ``h x w`` float32 raw prediction at the processing size (larger = farther).
            mask: ``h x w`` bool, a surface (``None``: every pixel).
            number: the frame's source number.

        Returns:
            ``h x w`` float32 ``s * depth + t`` clipped to ``[RELATIVE_NEAR, RELATIVE_FAR]``,
            ``(s, t)`` the robust fit against the anchor over pixels that are a surface in
            both and not clipped in the anchor; ``None`` when the frame has no anchor or the
            fit is degenerate (``s <= 0``, under :data:`MIN_FIT_FRACTION` of the pixels):
            the caller normalises the frame on its own then.
        """
        got = self.get(number)
        if got is None:
            return None
        ref, ref_mask = got
        near, far = contract.RELATIVE_NEAR, contract.RELATIVE_FAR
        d = np.asarray(depth, np.float32)
        small, m = downscale(d, mask, (ref.shape[1], ref.shape[0]))
        both = m & ref_mask & (ref > near) & (ref < far)
        if both.sum() < max(4, MIN_FIT_FRACTION * both.size):
            return None
        s, t = geometry._robust_scale_shift(small, ref, both)
        if not s > 0:
            return None
        return np.clip(s * d + t, near, far).astype(np.float32)

    # ------------------------------------------------------------------ files
    def save(self, path: os.PathLike) -> Path:
        """Write atomically (temporary file in the folder, fsync, rename)."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=".tmp_anchors_", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez_compressed(f, numbers=self.numbers, depth=self.depth.astype(np.float32),
                                    mask=self.mask.astype(bool), meta=np.array(json.dumps(self.meta, sort_keys=True)))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, contract.default_file_mode())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self.path = str(path)
        return path

    @classmethod
    def load(cls, path: os.PathLike) -> "DepthAnchors":
        """Read a file :meth:`save` wrote.

        Raises:
            ValueError: the file is missing, unreadable or not an anchors file (naming it).
        """
        path = Path(path)
        try:
            check_regular(path, "the depth anchors file")
            with np.load(path, allow_pickle=False) as z:
                numbers, depth, mask = z["numbers"], z["depth"], z["mask"]
                meta = json.loads(str(z["meta"]))
        except FileNotFoundError:
            raise ValueError(f"depth anchors {path} do not exist: compute them first "
                             f"(python -m backend farm anchors INPUT --out OUT ...)") from None
        except (OSError, KeyError, ValueError, EOFError) as e:
            if is_special_file_error(e):
                raise
            raise ValueError(f"depth anchors {path} are unreadable ({type(e).__name__}: {e}); "
                             f"recompute them (python -m backend farm anchors ...)") from None
        if meta.get("version") != FORMAT_VERSION or depth.ndim != 3 or depth.shape != mask.shape \
                or len(numbers) != len(depth):
            raise ValueError(f"depth anchors {path}: not a version-{FORMAT_VERSION} anchors file; recompute them")
        return cls(numbers, depth.astype(np.float32), mask.astype(bool), meta, str(path))


def anchor_meta(dec, info, numbers) -> Dict[str, Any]:
    """What anchors of ``numbers`` depend on: format version, source (path, size, frame
    count), colour space, the estimator's settings and the processing size (``dec``: a
    :class:`backend.decomposer.Decomposer`; ``info``: the footage's info)."""
    plan = dec.plan(info.width, info.height)
    return {"version": FORMAT_VERSION, "kind": "relative",
            "source": {"path": info.path, "width": info.width, "height": info.height, "n_frames": info.n_frames},
            "colorspace": info.colorspace, "estimator": dec.estimator.settings(),
            "processing_size": [plan.proc_width, plan.proc_height],
            "frames": f"{numbers[0]}-{numbers[-1]}" if numbers else ""}


def compatible(anchors: "DepthAnchors", dec, info) -> Optional[str]:
    """``None`` when ``anchors`` were computed from this source and estimator setting,
    else what differs (one phrase)."""
    want = anchor_meta(dec, info, [])
    for key in ("source", "colorspace", "estimator", "processing_size"):
        if anchors.meta.get(key) != want[key]:
            return f"another {key.replace('_', ' ')}"
    return None
