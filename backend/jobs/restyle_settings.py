"""What a restyle is asked to do: its inputs (:class:`RestyleInputs`: the G-buffer folder,
frames, reference) and its look (:class:`RestyleLook`: renderer, prompt, options, look
matching), validated before anything is written, and the out-of-range report of input
values. Part of the restyle job (:mod:`backend.jobs.restyle`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..input_files import refuse_special
from .. import contract, events
from ..errors import InputError
from ..renderers.base import Renderer, get_renderer, read_prompt
from ..renderers.prompt import Look
from .restyle_files import parse_frames, _inputs_digest, _ranges
from .runner import JobError, check_output_safe
from .writers import exr_size


@dataclass
class RestyleInputs:
    """The input folders of a restyle, checked, and the frames to render.

    Attributes:
        gbuffer_dir: folder of ``gbuffer_NNNN.exr`` (possibly edited).
        all_files: every frame in it (number -> path); the settings hash covers them all.
        files: the frames to render (``--frames`` applied), in number order.
        reference_dir: the unedited folder ``gbuffer_dir`` was edited from, or ``None``.
        ref_files: its frames (number -> path; empty without ``reference_dir``).
        size: ``(H, W)`` of the first frame to render, from its header; ``None`` when
            unreadable (reading that frame then reports it).
    """

    gbuffer_dir: Path
    all_files: Dict[int, Path]
    files: Dict[int, Path]
    reference_dir: Optional[Path] = None
    ref_files: Dict[int, Path] = field(default_factory=dict)
    size: Optional[Tuple[int, int]] = None

    @property
    def first(self) -> int:
        """The first frame number to render."""
        return min(self.files)

    @classmethod
    def scan(cls, gbuffer_dir: os.PathLike, out_dir: Path, frames: Optional[str],
             reference_dir: Optional[os.PathLike] = None) -> "RestyleInputs":
        """List and check the inputs; a ``--frames`` range that only ends past the last
        frame is clipped, and missing frames inside the range are skipped, each with a
        ``warning`` event.

        Raises:
            JobError: a missing folder, an output overlapping an input, no frames.
            InputError: a range that starts past the end or holds no frame.
            ValueError: a malformed ``frames``.
        """
        gbuffer_dir = Path(gbuffer_dir)
        if not gbuffer_dir.is_dir():
            raise JobError(f"G-buffer folder {gbuffer_dir} does not exist or is not a folder", file=gbuffer_dir)
        inputs = [gbuffer_dir]
        ref_files: Dict[int, Path] = {}
        if reference_dir is not None:
            reference_dir = Path(reference_dir)
            if not reference_dir.is_dir():
                what = "is not a folder" if reference_dir.exists() else "does not exist"
                raise JobError(f"reference G-buffer folder {reference_dir} {what}", file=reference_dir)
            inputs.append(reference_dir)
            ref_files = contract.list_frames(reference_dir)
        check_output_safe(out_dir, inputs)
        first, last = parse_frames(frames)
        all_files = contract.list_frames(gbuffer_dir)
        if not all_files:
            raise JobError(f"no G-buffer frames ({contract.FILE_PREFIX}NNNN.exr) in {gbuffer_dir}",
                           file=gbuffer_dir)
        files = {n: p for n, p in all_files.items() if n >= first and (last is None or n <= last)}
        for n, p in sorted(files.items()) + sorted(ref_files.items()):  # a FIFO is refused, never waited on
            refuse_special(p, f"G-buffer frame {n}", contract.ContractError)
        _check_range(gbuffer_dir, all_files, files, frames, first, last)
        try:
            size = exr_size(files[min(files)])
        except Exception:  # unreadable: reading the frame reports it, naming file and frame
            size = None
        return cls(gbuffer_dir, all_files, files, reference_dir, ref_files, size)

    def reference_digest(self) -> Optional[str]:
        """Digest of the reference frames matching :attr:`files` (``None`` without a
        reference folder).

        Raises:
            JobError: the reference folder lacks one of those frames.
        """
        if self.reference_dir is None:
            return None
        missing = [n for n in self.files if n not in self.ref_files]
        if missing:
            path = contract.frame_path(self.reference_dir, missing[0])
            raise JobError(f"reference folder {self.reference_dir} has no frame {missing[0]} "
                           f"({path.name})", frame=missing[0], file=path)
        return _inputs_digest([self.ref_files[n] for n in sorted(self.files)])

    def check_frame(self, n: int, frame: contract.GBufferFrame, bad_pass: Optional[str]) -> None:
        """Same size as the first frame; finite passes (an edited EXR may hold NaN/Inf).

        Raises:
            JobError: naming the frame and its file.
        """
        path = self.all_files[n]
        if self.size is not None and frame.shape != self.size:
            (h, w), (h0, w0) = frame.shape, self.size
            raise JobError(f"G-buffer frame {n} ({path}) is {w}x{h} but frame {self.first} "
                           f"({self.files[self.first]}) is {w0}x{h0}: every frame of a sequence must have "
                           f"the same size", frame=n, file=path)
        if bad_pass is not None:
            raise JobError(f"pass {bad_pass} of {path} (frame {n}) contains NaN or Inf; fix or "
                           f"re-export that G-buffer frame", frame=n, file=path)


def _check_range(gbuffer_dir: Path, all_files: Dict[int, Path], files: Dict[int, Path],
                 frames: Optional[str], first: int, last: Optional[int]) -> None:
    lo, hi = min(all_files), max(all_files)
    if first > hi:
        raise InputError(f"--frames {frames} starts past the end: {gbuffer_dir} has frames {lo}-{hi}",
                         frame=first, file=gbuffer_dir)
    if not files:
        raise InputError(f"--frames {frames}: no frames in range; {gbuffer_dir} has {lo}-{hi}",
                         file=gbuffer_dir)
    if (last is not None and last > hi) or (frames and first < lo):  # either end: said, never silent
        end = hi if last is None or last > hi else last
        where = f"ends at frame {hi}" if last is not None and last > hi else f"starts at frame {lo}"
        events.warning(f"--frames {frames}: {gbuffer_dir} {where} (frames {lo}-{hi}); clipped to "
                       f"{max(first, lo)}-{end}", file=gbuffer_dir)
    gaps = [n for n in range(min(files), max(files) + 1) if n not in files]
    if gaps:
        events.warning(f"{gbuffer_dir} has no G-buffer frame {_ranges(gaps)} between {min(files)} and "
                       f"{max(files)}: {'that frame is' if len(gaps) == 1 else 'those frames are'} "
                       f"not rendered", frame=gaps[0], file=gbuffer_dir)


@dataclass
class RestyleLook:
    """The renderer and the prompt, parsed once (:func:`backend.renderers.read_prompt`).

    Attributes:
        prompt: the text as given.
        renderer_name: registry name.
        renderer: the renderer instance.
        looks: the parsed prompt, handed to :meth:`Renderer.render` for every frame.
        info: :meth:`Renderer.describe` (``prompt``, ``looks``, ``params``).
    """

    prompt: str
    renderer_name: str
    renderer: Renderer
    looks: Tuple[Look, ...]
    info: Dict[str, Any]

    @classmethod
    def create(cls, prompt: str, renderer: str, options: Optional[Dict[str, Any]] = None,
               lights: Optional[Any] = None) -> "RestyleLook":
        """Build the renderer and parse the prompt, before any output is written.

        ``lights``: a parsed lights file (:class:`backend.renderers.light_rig.LightRig`,
        ``--lights``) whose direct light the renderer adds to the plate (embedded
        renderer only; others refuse it with an :class:`~backend.errors.InputError`).

        Raises:
            KeyError: unknown renderer; TypeError/ValueError: bad options;
            PromptError: a prompt the renderer does not understand; renderer-specific
            load errors (e.g. a missing model) from :meth:`Renderer.describe`.
        """
        opts = dict(options or {})
        try:
            rend = get_renderer(renderer, **opts)
            looks = read_prompt(prompt, rend)
            info = rend.describe(prompt, looks)
        except (TypeError, ValueError) as e:
            if not opts or isinstance(e, InputError) or any(k in str(e) for k in opts):
                raise
            given = ", ".join(f"--option {k}={v!r}" for k, v in opts.items())
            raise ValueError(f"renderer {renderer!r} rejected {given}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        if looks is not None and not looks and (prompt or "").strip() and not rend.free_text_prompt:
            from ..renderers.prompt import LOOK_WORDS

            shown = prompt if len(prompt) <= 60 else prompt[:57] + "..."
            events.warning(f"prompt {shown!r} names no look ({', '.join(LOOK_WORDS)}): the frames are "
                           "the footage with the material edits and lights only, no look applied")
        if lights is not None:
            if not hasattr(rend, "light_rig"):
                raise InputError(f"--lights {lights.source}: the {renderer!r} renderer cannot add lights; "
                                 f"use the embedded renderer", file=lights.source)
            rend.light_rig = lights
        return cls(prompt, renderer, rend, looks, info)

    def render(self, frame: contract.GBufferFrame, n: int, path: Path, time_s: float,
               prev: Optional[np.ndarray], reference: Optional[contract.GBufferFrame]) -> np.ndarray:
        """Render input frame number ``n`` (read from ``path``).

        Returns:
            ``H x W x 3`` float32 scene-linear, the frame's size, finite.

        Raises:
            JobError: the renderer refused the frame or returned a wrong shape or NaN/Inf.
        """
        kw = {"reference": reference} if reference is not None else {}
        try:
            rgb = self.renderer.render(frame, self.prompt, frame_index=n - 1, time_s=time_s, prev=prev,
                                       looks=self.looks, **kw)
        except contract.ContractError as e:
            raise JobError(f"frame {n} ({path}): {e}", frame=n, file=path) from e
        if rgb.shape != frame.shape + (3,) or not contract.all_finite(rgb):
            raise JobError(f"renderer {self.renderer_name!r} returned shape {rgb.shape} or non-finite "
                           f"values for frame {n} ({path})", frame=n, file=path)
        return rgb

    def render_window(self, frames: List[contract.GBufferFrame], numbers: List[int], paths: List[Path],
                      times_s: List[float]) -> List[np.ndarray]:
        """Render input frames ``numbers`` (read from ``paths``) as one window
        (:meth:`Renderer.render_window`).

        Returns:
            One ``H x W x 3`` float32 scene-linear array per frame, the frames' size, finite.

        Raises:
            JobError: the renderer refused the window, or returned a wrong count, shape or
                NaN/Inf (naming the first frame of the window).
        """
        where = f"frames {numbers[0]}-{numbers[-1]} ({paths[0]} ...)"
        try:
            out = self.renderer.render_window(frames, self.prompt, frame_indices=[n - 1 for n in numbers],
                                              times_s=times_s, looks=self.looks)
        except contract.ContractError as e:
            raise JobError(f"{where}: {e}", frame=numbers[0], file=paths[0]) from e
        if len(out) != len(frames) or any(o.shape != f.shape + (3,) or not contract.all_finite(o)
                                          for o, f in zip(out, frames)):
            raise JobError(f"renderer {self.renderer_name!r} returned {len(out)} frames of wrong shape or "
                           f"non-finite values for {where}", frame=numbers[0], file=paths[0])
        return out


#: tolerance above 1 for albedo / metallic / roughness (half-float rounding, gentle edits)
RANGE_TOLERANCE = 0.01


def out_of_range(frame: contract.GBufferFrame) -> Dict[str, str]:
    """Values a G-buffer should not hold (an edit gone wrong, a foreign exporter): negative
    depth, normals far from unit length (zero-length included), albedo / metallic /
    roughness outside [0, 1] (beyond :data:`RANGE_TOLERANCE`), on surface pixels.

    Returns:
        ``{description: "N pixel(s), min..max"}`` for each kind found (empty: all in range).
    """
    found: Dict[str, str] = {}
    mask = contract.surface_mask(frame)

    def add(what: str, bad: np.ndarray, values: np.ndarray) -> None:
        bad = bad & (mask if bad.ndim == 2 else mask[..., None])
        k = int(np.count_nonzero(bad))
        if k:
            v = values[bad]
            found[what] = f"{k} value(s), {float(v.min()):.4g}..{float(v.max()):.4g}"

    d = np.asarray(frame.depth, np.float32)
    add("Depth below 0", d < 0, d)
    n = np.asarray(frame.normal, np.float32)
    length = np.sqrt(np.sum(n * n, axis=-1))
    add("Normal not unit length (outside 0.5..1.5)", (length < 0.5) | (length > 1.5), length)
    hi = 1.0 + RANGE_TOLERANCE
    for name in ("albedo", "metallic", "roughness"):
        a = np.asarray(getattr(frame, name), np.float32)
        add(f"{name.capitalize()} outside 0..1", (a < -RANGE_TOLERANCE) | (a > hi), a)
    return found
