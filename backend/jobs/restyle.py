"""Restyle job: a G-buffer contract sequence + a prompt -> re-rendered frames and previews.

Output folder layout (``--out DIR``; it may not be, contain or lie inside the input)::

    DIR/restyle_NNNN.exr      scene-linear Rec.709 RGBA, single part, half float, PIZ;
                              NNNN = the input frame number (gbuffer_NNNN.exr). A is the
                              source Combined alpha; RGB is premultiplied by it. Header: restyle/prompt,
                              restyle/looks (JSON), restyle/renderer (JSON settings),
                              restyle/settings_hash, restyle/source_frame,
                              gbuffer/contract_version.
    DIR/preview/restyle_NNNN.png   sRGB 8-bit preview (soft highlight shoulder,
                              :func:`backend.renderers.shading.preview_8bit`).
    DIR/preview.mp4           H.264 yuv420p preview of all frames in the folder (odd
                              sizes padded by edge replication to even).
    DIR/plate_lighting.json   the shot's plate lighting (embedded renderer, issue 39): SH
    DIR/plate_lighting.exr    coefficients, and an equirect radiance map for a Blender
                              World (:mod:`backend.jobs.restyle_plate`).
    DIR/manifest.json         job, settings (+ hash), prompt, looks, renderer parameters,
                              per-frame entries, the preview paths and a flicker metric.

Progress events, cancel (a ``threading.Event``; only complete frames are kept) and resume
(frames whose EXR carries the current settings hash are skipped) come from the shared
runner :func:`backend.jobs.runner.run_job`, exactly as for ``decompose``. The settings
hash covers the prompt, the renderer settings and a digest of the input files (name,
size, mtime), so re-running after editing the G-buffers re-renders: into the same folder
that needs ``overwrite``, which first removes the earlier frames, their previews, the
MP4 and the manifest (without it, a folder holding frames written with other settings
is refused; :mod:`backend.jobs.outputs`).

Whole-clip renderers (``Renderer.window > 0``, e.g. ``wan-vace``) render overlapping
windows of frames laid over the whole clip (so ``--frames`` does not change a frame's
value), blended in scene-linear light (:mod:`backend.jobs.windows`); each frame
is still written, recorded and resumed on its own as above (a window whose frames are all
done is not rendered again; a partly done one is, and only its missing frames are
written).

Pieces: :class:`RestyleInputs` (the folders, checked), :class:`RestyleLook` (the
renderer and the prompt, parsed once by :func:`backend.renderers.read_prompt`),
:class:`RestyleJob` (one run); the writers are :mod:`backend.jobs.writers`, the flicker
metric :mod:`backend.jobs.flicker`, the command line :mod:`backend.jobs.restyle_cli`.
"""
from __future__ import annotations

import functools
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from . import flicker as flick
from .. import arguments as args, contract, events, exr_attrs, exr_colour
from ..input_files import load_json
from ..look_match import ColourStats, LookMatch, reference_stats
from .restyle_files import (HEADER, LOOK_MATCH_NAME, MP4_NAME, OUT_PREFIX, PREVIEW_DIR, flicker_metric,
    output_path, preview_path, read_input_hash, read_manifest_entry, read_settings_hash, _mean_rgb, _ranges,
    _source_fps)
from .restyle_frames import PREFETCH_MAX_PIXELS, _Measured, _Previews, _Reader, _Rendered
from .request import RestyleRequest
from .restyle_plate import recorded_reference, shot_lighting, write_lighting
from .restyle_settings import RestyleInputs, RestyleLook
from .runner import Deferred, JobError, JobResult, run_job
from .windows import WindowBlender
from .writers import write_bytes_atomic, write_rgba_exr
# names importable from here before the split (backend.jobs.restyle was one 1,000-line file)
from .flicker import FLICKER_MAX_SIDE, PairError  # noqa: F401
from .restyle_files import _header_value, parse_frames  # noqa: F401
from .restyle_settings import RANGE_TOLERANCE, out_of_range  # noqa: F401
from .writers import (DEFAULT_FPS, Mp4Encoder, encode_png, exr_size, read_rgba_exr, write_mp4,  # noqa: F401
                      write_png)


class RestyleJob:
    """One restyle run: ``RestyleJob(inputs, look, request).run(...)``.

    Frames are rendered on the calling thread; input frames are read and PNG previews
    encoded on a two-thread I/O pool; each frame's EXR, MP4 frame and flicker sample are
    written on the runner's writer thread while the next frame renders (OpenEXR, PNG
    encoding and numpy release the GIL).

    Args:
        inputs: the checked input folders.
        look: the renderer and the parsed prompt.
        request: the job's settings (:class:`backend.jobs.request.RestyleRequest`).
    """

    def __init__(self, inputs: RestyleInputs, look: RestyleLook, request: RestyleRequest):
        self.request = request
        out_dir, previews, mp4, flicker = request.out, request.previews, request.mp4, request.flicker
        match_look, warmup, manifest_part = request.match_look, request.warmup, request.manifest_part
        self.inputs, self.look, self.out_dir = inputs, look, Path(out_dir)
        #: farm chunk (see :func:`restyle`): warmup frames, and the manifest part instead
        #: of manifest.json (no MP4 and no flicker metric per chunk: the merge makes them)
        self.warmup, self.manifest_part = warmup, manifest_part
        self._mp4_wanted = mp4
        if manifest_part:
            mp4 = flicker = False
        # look matching (backend.look_match): reference statistics streamed once, before
        # anything is written (an unreadable or empty reference is refused here)
        self.match_look = Path(match_look) if match_look is not None else None
        self._ref_stats = reference_stats(self.match_look) if self.match_look is not None else None
        self._matcher: Optional[LookMatch] = None
        self.previews, self.mp4, self.flicker = previews, mp4, flicker
        self.gb_manifest = contract.read_manifest(inputs.gbuffer_dir)  # ContractError names it
        self._input_state: Dict[str, Any] = {}  # what the input folder's manifest says (run() checks it)
        self.fps = _source_fps(self.gb_manifest, inputs.gbuffer_dir / "manifest.json")
        self.use_reference = bool(inputs.ref_files) and look.renderer.accepts_reference
        self._last: Optional[_Rendered] = None
        self._measured: Optional[_Measured] = None
        self.pair_errors: Dict[int, PairError] = {}  # measured in this run, by frame number
        self.out_of_range: Dict[str, List[int]] = {}  # what -> input frames holding it (this run)
        self._reader: Optional[_Reader] = None  # set by run(), for its duration
        self._previews: Optional[_Previews] = None
        self._windows: Optional[WindowBlender] = None  # whole-clip renderers (window > 0)
        if look.renderer.window > 0:
            # laid over the whole clip, so a frame's value does not depend on --frames
            self._windows = WindowBlender(sorted(inputs.all_files), look.renderer.window,
                                          look.renderer.window_overlap, self._render_window)
        from .fingerprint import InputFingerprints

        try:
            old = contract.read_manifest(self.out_dir) if self.out_dir.is_dir() else {}
        except (OSError, ValueError):
            old = {}
        self.fingerprints = InputFingerprints(old.get("inputs") if isinstance(old, dict) else None)

    def settings(self) -> Dict[str, Any]:
        """What the resume hash covers.

        Raises:
            JobError: the reference folder lacks a frame to render.
        """
        inp = self.inputs
        settings = self.request.settings(self.look, reference=inp.reference_dir is not None,
                                         match_look=self._ref_stats.to_dict() if self._ref_stats is not None else None)
        if inp.reference_dir is not None and hasattr(self.look.renderer, "plate_lighting"):
            # issue 39: edits act through their difference on the footage (a run with a
            # reference from before renders otherwise: it is not resumed)
            from ..renderers.embedded import PLATE_VERSION

            settings["edits"] = f"differential-{PLATE_VERSION}"
        rig = getattr(self.look.renderer, "light_rig", None)
        if rig is not None:  # issue 39: the lights file's content re-renders when it changes
            settings["lights"] = rig.digest
        if self._ref_stats is not None:
            lm = self.out_dir / LOOK_MATCH_NAME
            if lm.exists() or lm.is_symlink():  # never replace a file this product did not write
                try:
                    ours = load_json(lm).get("method") == "monge-kantorovich-linear-log2"
                except (OSError, ValueError, AttributeError):
                    ours = False
                if not ours or lm.is_symlink():
                    raise JobError(f"{lm}: a file with this name that restyle did not write is in the output "
                                   f"folder; move it or choose another --out", file=lm)
        inp.reference_digest()  # a missing reference frame is refused before anything is written
        return settings

    def input_for(self, n: int) -> Optional[str]:
        """Fingerprint of the G-buffer frame ``n`` (and its reference frame) as they are
        now (:mod:`backend.jobs.fingerprint`); ``None`` when there is no such frame."""
        inp = self.inputs
        paths = [inp.all_files.get(n)] + ([inp.ref_files.get(n)] if inp.reference_dir is not None else [])
        if any(p is None for p in paths):
            return None
        try:
            return self.fingerprints.combined(paths)
        except OSError:
            return None

    def manifest(self) -> Dict[str, Any]:
        """The job's top-level manifest fields (the runner adds frames and settings)."""
        inp, look = self.inputs, self.look
        return {
            "input": {"gbuffer_dir": str(inp.gbuffer_dir.resolve()), "frames": [min(inp.files), max(inp.files)],
                      "reference_dir": str(inp.reference_dir.resolve()) if inp.reference_dir else None,
                      "source": self.gb_manifest.get("source") if isinstance(
                          self.gb_manifest.get("source"), dict) else None,
                      # what the G-buffer folder's manifest says (None: it does not say)
                      "complete": self._input_state.get("complete"),
                      "frames_missing": self._input_state.get("frames_missing")},
            # false: the input folder is incomplete or changed while restyle ran, so this is not
            # complete either (backend.jobs.restyle_input)
            "input_complete": self._input_state.get("complete") is not False,
            "prompt": look.prompt,
            "looks": look.info.get("looks"),
            "look_params": look.info.get("params"),
            "renderer": {"name": look.renderer_name, "settings": look.renderer.settings()},
            "output": {"exr": f"{OUT_PREFIX}NNNN.exr: single-part RGBA half float, scene-linear Rec.709",
                       "preview_png": f"{PREVIEW_DIR}/{OUT_PREFIX}NNNN.png (sRGB)" if self.previews else None,
                       "fps": str(self.fps)},
            "inputs": self.fingerprints.cache,  # input file identity -> SHA-256 (resume checks)
            "outputs": {},  # folder-level files written (preview.mp4) -> SHA-256
            "lights": _lights_manifest(getattr(look.renderer, "light_rig", None)),
            "match_look": ({"reference": str(self.match_look.resolve()), "transform": LOOK_MATCH_NAME,
                            "method": "Monge-Kantorovich linear colour transfer in log2 space"}
                           if self.match_look is not None else None),
        }

    def run(self, *, overwrite: bool = False, cancel: Optional[threading.Event] = None) -> JobResult:
        """Render every frame (resuming finished ones), then the previews, the MP4, the
        flicker metric and the final manifest.

        Raises:
            JobError, JobCancelled, InputError: see :func:`restyle`.
        """
        settings = self.settings()
        from .restyle_input import check_input

        inp = self.inputs  # refused: a folder being written, a header contradicting its file, the footage
        self._input_state = check_input(inp.gbuffer_dir, inp.files, self.gb_manifest, self.out_dir,
                                        inp.reference_dir, inp.ref_files, inp.all_files)
        for text in getattr(self, "later_warnings", ()):  # the unedited passes unknown (restyle_plate)
            events.warning(text, file=inp.gbuffer_dir)
        pdir = Path(self.out_dir) / PREVIEW_DIR
        if self.previews and (pdir.is_symlink() or (pdir.exists() and not pdir.is_dir())):
            # a link would send our PNGs (and their clean-up) into someone else's folder,
            # perhaps the input G-buffers (fresh-eyes trial of issue 16)
            what = f"a link to {os.path.realpath(pdir)}" if pdir.is_symlink() else "not a folder"
            raise JobError(f"{pdir} is {what}: restyle writes its PNG previews only into a real "
                           "folder of its own; remove it or choose another --out")
        # the plate's lighting, once per shot (issue 39), before the first frame
        self._lighting = shot_lighting(self.look.renderer, inp.all_files,
                                       inp.ref_files if self.use_reference else {})
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="restyle-io")
        self._reader = _Reader(self.inputs, self.use_reference, pool)
        self._previews = _Previews(self.out_dir, self.fps, pool, self.previews, self.mp4)
        out = self.out_dir
        try:
            result = run_job(out, self.tasks(), settings=settings, total=len(self.inputs.files),
                             inputs=[p for p in (self.inputs.gbuffer_dir, self.inputs.reference_dir) if p],
                             job="restyle", path_for=functools.partial(output_path, out),
                             manifest=self.manifest(), read_hash=read_settings_hash, cancel=cancel,
                             overwrite=overwrite, companions=lambda n: [preview_path(out, n)],
                             extra_outputs=[out / MP4_NAME], input_for=self.input_for,
                             read_input=read_input_hash, expected=list(self.inputs.all_files),
                             numbers=list(self.inputs.files), throttle=False, before_done=self._finish,
                             on_frame=lambda n, entry: self._previews.frame_recorded(n),
                             leftovers=[".tmp_preview_*.mp4", f"{PREVIEW_DIR}/.tmp_{OUT_PREFIX}*"],
                             read_entry=read_manifest_entry,
                             part=(min(self.inputs.files), max(self.inputs.files)) if self.manifest_part else None)
        except BaseException:
            self._previews.discard()
            raise
        finally:
            self._reader.cancel()
            pool.shutdown(wait=True)  # previews are atomic; never leave a half-written one
        return result

    def tasks(self) -> Iterator[Tuple[int, Any]]:
        """``(frame number, work)`` for :func:`backend.jobs.runner.run_job`."""
        self._warm()
        for n in self.inputs.files:
            yield n, functools.partial(self._render_frame, n)

    def _warm(self) -> None:
        """``warmup`` K: a temporal renderer (``uses_previous_output``) renders the K input
        frames before the first one (never written), so the chunk's first frame gets the
        ``prev`` an unchunked run gives it. Renderers that are not temporal need nothing."""
        if not self.warmup or not self.look.renderer.uses_previous_output:
            return
        order = sorted(self.inputs.all_files)
        first = self.inputs.first
        i = order.index(first)
        for n in order[max(0, i - self.warmup):i]:
            path = self.inputs.all_files[n]
            frame = _Reader._read(n, path)
            ref = (_Reader._read(n, self.inputs.ref_files[n])
                   if self.use_reference and n in self.inputs.ref_files else None)
            prev = self._last.rgb if self._last is not None and self._last.number == n - 1 else None
            self._last = _Rendered(n, self.look.render(frame, n, path, self._time_s(n, frame), prev, ref))

    def _time_s(self, n: int, frame: contract.GBufferFrame) -> float:
        """The frame's time: its header timestamp, else from the frame number and fps."""
        t = frame.meta.get("timestamp")
        return float(t) if isinstance(t, (int, float)) and (t or n == 1) else (n - 1) / float(self.fps)

    def _out_of_range_summary(self, man: Dict[str, Any]) -> None:
        """``inputs_out_of_range`` (what -> frames) over every frame in the manifest, resumed
        ones included (second fresh-eyes trial: a resume after a failed run lost it)."""
        found: Dict[str, set] = {k: set(v) for k, v in self.out_of_range.items()}
        for e in man.get("frames") or ():
            if isinstance(e, dict) and isinstance(e.get("frame"), int):
                for what in e.get("inputs_out_of_range") or ():
                    found.setdefault(str(what), set()).add(e["frame"])
        if found:
            man["inputs_out_of_range"] = {k: _ranges(sorted(v)) for k, v in sorted(found.items())}
        else:
            man.pop("inputs_out_of_range", None)

    def _render_frame(self, n: int, tmp_path: Path, shash: str) -> Deferred:
        """Render frame ``n`` (calling thread); its files are written by the returned
        :class:`Deferred` on the writer thread."""
        path = self.inputs.files[n]
        got = self._reader.get(n)
        self.inputs.check_frame(n, got.frame, got.bad_pass)
        for what, detail in got.odd.items():
            if what not in self.out_of_range:  # one warning per kind; the manifest lists every frame
                events.warning(f"G-buffer frame {n} ({path}): {what}: {detail}; rendered as is (check the "
                               f"edit or the exporter that wrote it)", frame=n, file=path)
            self.out_of_range.setdefault(what, []).append(n)
        # previous output, for temporal renderers (only when rendered in this run:
        # they also need the previous source, which a resume does not have)
        prev = self._last.rgb if self._last is not None and self._last.number == n - 1 else None
        if self._windows is not None:  # blended from the window(s) holding frame n
            rgb = self._windows.frame(n)
        else:
            rgb = self.look.render(got.frame, n, path, self._time_s(n, got.frame), prev, got.reference)
        # unmatched: what temporal renderers continue from (only they: a 4K frame is 95 MB)
        self._last = _Rendered(n, rgb) if self.look.renderer.uses_previous_output else None
        if self._ref_stats is not None:
            rgb = self._look_matcher(rgb).apply(rgb)
        entry = {"source": path.name, "mean_rgb": _mean_rgb(rgb)}
        if got.odd:  # kept per frame, so a resumed run still lists it in the summary
            entry["inputs_out_of_range"] = sorted(got.odd)
        entry.update(self.look.renderer.last_info)
        if self._windows is not None:
            entry["windows"] = [[self._windows.numbers[s], self._windows.numbers[e - 1]]
                                for s, e in (self._windows.spans[k] for k in self._windows.windows_of(n))]
        frame = got.frame
        h, w = frame.shape
        alpha = frame.combined[..., 3] if frame.combined.shape[2] == 4 else None
        header = self._header(path, shash, n)
        header[HEADER + "manifest_entry"] = dict(entry)  # a resume after a hard kill records it whole
        return Deferred(functools.partial(self._write, n, tmp_path, rgb, alpha, header, frame.combined), entry,
                        overlap=h * w <= PREFETCH_MAX_PIXELS)

    def _render_window(self, numbers: List[int]) -> List[np.ndarray]:
        """Read and check input frames ``numbers`` and render them as one window."""
        frames, paths = [], []
        for m in numbers:
            got = self._reader.read(m)
            self.inputs.check_frame(m, got.frame, got.bad_pass)
            frames.append(got.frame)
            paths.append(self.inputs.all_files[m])
        times = [self._time_s(m, f) for m, f in zip(numbers, frames)]
        return self.look.render_window(frames, numbers, paths, times)

    def _look_matcher(self, rgb: np.ndarray) -> LookMatch:
        """The shot's fixed look-matching transform: read from ``look_match.json`` in the
        output folder when an earlier run into it used the same reference (so a resume
        maps frames identically), else estimated from ``rgb`` (the first frame rendered)
        and saved there atomically."""
        if self._matcher is not None:
            return self._matcher
        path = self.out_dir / LOOK_MATCH_NAME
        ref = self._ref_stats.to_dict()
        try:
            old = load_json(path)
            if old.get("reference") == ref:
                self._matcher = LookMatch.from_dict(old)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        if self._matcher is None:
            self._matcher = LookMatch(ColourStats.of(rgb), self._ref_stats)
            doc = dict(self._matcher.to_dict(), reference_path=str(self.match_look))
            write_bytes_atomic(path, (json.dumps(doc, indent=1) + "\n").encode())
        return self._matcher

    def _header(self, path: Path, shash: str, n: int) -> Dict[str, Any]:
        look = self.look
        return {
            HEADER + "prompt": look.prompt,
            HEADER + "looks": look.info.get("looks", []),
            HEADER + "renderer": self._renderer_record(n),
            HEADER + "settings_hash": shash,
            HEADER + "input_hash": self.input_for(n) or "",
            HEADER + "source_frame": str(path.name),
            contract.HEADER_PREFIX + "contract_version": contract.CONTRACT_VERSION,
        }

    def _renderer_record(self, n: int) -> Dict[str, Any]:
        """The renderer's settings as this frame used them: a renderer with a fallback
        field of view (``fov_y_deg``) shades with the G-buffer's ``intrinsics`` when the
        frame has them, so the record gives those (``camera: "gbuffer intrinsics"``,
        ``fov_y_deg: null``) instead of an unused default."""
        rec = dict(self.look.renderer.settings())
        if "fov_y_deg" not in rec:
            return rec
        src = self.inputs.all_files.get(n)
        try:
            k = contract.read_meta(src).get("intrinsics") if src is not None else None
        except (contract.ContractError, OSError):
            k = None
        from ..renderers import shading

        if k is not None and shading.intrinsics_for(1, 1, k) == tuple(float(x) for x in k):
            rec.update(fov_y_deg=None, camera="gbuffer intrinsics", intrinsics=[float(x) for x in k])
        else:
            rec["camera"] = "fov_y_deg"
        return rec

    def _attributes(self, n: int, shape) -> Dict[str, Any]:
        """The input G-buffer frame's camera, lens, rate and timecode as OpenEXR standard
        attributes (:mod:`backend.exr_attrs`); ``{}`` when its header cannot be read."""
        src = self.inputs.all_files.get(n)
        try:
            meta = contract.read_meta(src) if src is not None else {}
        except (contract.ContractError, OSError):
            meta = {}
        meta.setdefault("fps", str(self.fps))
        meta.setdefault("frame_number", n)
        out = exr_attrs.standard_attributes(meta, shape)
        if meta.get("working_space"):  # written in the G-buffers' working space (ACEScg ...)
            out.update(exr_colour.colour_attributes(exr_colour.working_space(meta["working_space"])))
        return out

    def _write(self, n: int, tmp_path: Path, rgb: np.ndarray, alpha: Optional[np.ndarray],
               header: Dict[str, Any], combined: np.ndarray) -> Dict[str, Any]:
        """On the runner's writer thread, in frame order, while the next frame renders:
        the EXR, the previews, the flicker sample against the previous frame. Returns
        the preview's checksum for the frame's manifest entry."""
        attrs = self._attributes(n, rgb.shape[:2])
        ws = attrs.get("colorInteropID", exr_colour.WORKING_SPACES["rec709"])  # the G-buffers' working space
        write_rgba_exr(tmp_path, exr_colour.convert_rgb(rgb, "lin_rec709_scene", ws), alpha, header, attrs)
        # previews from the values as stored (half float, premultiplied): a frame's
        # preview is the same whether rendered now or rebuilt from its EXR on a resume
        a = np.ones(rgb.shape[:2], np.float32) if alpha is None else np.clip(alpha, 0.0, 1.0)
        stored = rgb * a[..., None]
        np.clip(stored, 0.0, 65000.0, out=stored)  # in place: one full-size temporary fewer
        stored = contract.half_to_float32(contract.to_half(stored))
        sha = self._previews.add(n, stored)
        more = {"companions": {f"{PREVIEW_DIR}/{preview_path(self.out_dir, n).name}": sha}} if sha else {}
        if self.flicker:
            # measured on the values as stored, as a resume measures them from the files
            # (third hostile trial: the figure changed after a kill and a resume)
            cur = flick.sample(combined[..., :3], stored)
            last = self._measured
            if last is not None and last.number == n - 1:
                err = flick.pair_error(last.sample, cur)
                if err is not None:
                    self.pair_errors[n] = err
            self._measured = _Measured(n, cur)
        return more

    def _finish(self, result: JobResult) -> JobResult:
        man = result.manifest
        if getattr(self, "_lighting", None) is not None:  # for the add-on's World from Plate
            man["plate_lighting"] = write_lighting(self.out_dir, self._lighting)
        from .restyle_input import input_changed

        why = input_changed(self.inputs.gbuffer_dir, self.inputs.all_files)
        if why is not None:
            events.warning(f"{why}: this restyle is marked incomplete (input_complete: false); run it again "
                           "once the G-buffer folder is finished", file=self.inputs.gbuffer_dir)
            man["input_complete"] = False
        done = sorted(int(e["frame"]) for e in man.get("frames", []))
        outputs = man.setdefault("outputs", {})

        entries = {f"{PREVIEW_DIR}/{preview_path(self.out_dir, int(e['frame'])).name}": e
                   for e in man.get("frames", []) if isinstance(e, dict)}

        def record(rel: str, sha: str) -> None:  # checksum in the manifest before the file is in place
            if rel in entries:  # a resumed frame's preview: in its entry, as when rendered in one go
                entries[rel]["companions"] = {**(entries[rel].get("companions") or {}), rel: sha}
            else:
                outputs[rel] = sha
            if not self.manifest_part:  # a chunk: its part is saved by the runner right after
                contract.write_manifest(self.out_dir, man)

        if self.manifest_part:
            mine = [n for n in done if n in self.inputs.files]
            self._previews.finish(mine, record)  # PNGs only (no MP4 per chunk)
            man["preview_mp4_wanted"] = self._mp4_wanted
            self._out_of_range_summary(man)
            result.manifest = man
            return result
        if self._previews.finish(done, record):
            man["preview_mp4"] = MP4_NAME
        elif not (self.out_dir / MP4_NAME).exists():
            # e.g. --no-mp4 --overwrite removed the earlier one: the manifest must not list it
            # (second fresh-eyes trial)
            man.pop("preview_mp4", None)
            outputs.pop(MP4_NAME, None)
        self._out_of_range_summary(man)
        if self.flicker and len(done) > 1:
            fl = flicker_metric(self.out_dir, done, self.inputs.all_files, known=self.pair_errors)
            if fl:
                man["flicker"] = fl
        contract.write_manifest(self.out_dir, man)
        result.manifest = man
        return result


def _lights_manifest(rig) -> Optional[Dict[str, Any]]:
    """The manifest's ``lights`` entry: file, sha256 of its content, space, names."""
    if rig is None:
        return None
    return {"file": str(Path(rig.source).resolve()), "sha256": rig.digest, "space": rig.space,
            "lights": [{"name": lt.name, "type": lt.type} for lt in rig.lights]}


def restyle(gbuffer_dir: os.PathLike, out_dir: os.PathLike, prompt: str = "", *, progress: events.Progress = None,
            cancel: Optional[threading.Event] = None, **settings) -> JobResult:
    """Re-render a G-buffer sequence with a prompt (see module docstring for outputs).

    The settings are keyword arguments, the fields of
    :class:`backend.jobs.request.RestyleRequest` (an unknown one is a ``TypeError``);
    this builds the request and runs it (:func:`run_restyle`).

    Args:
        gbuffer_dir: folder of ``gbuffer_NNNN.exr`` contract frames (possibly edited).
        out_dir: output folder; refused if it overlaps ``gbuffer_dir``.
        prompt: the look (embedded renderer: see :mod:`backend.renderers.prompt`).
        renderer: registry name (``embedded``, ``controlnet``).
        renderer_options: keyword options for the renderer factory.
        frames: ``"A-B"`` input frame numbers (inclusive), default all.
        previews, mp4, flicker: write PNG previews / the MP4 / the flicker metric.
        reference_dir: the *unedited* G-buffer folder ``gbuffer_dir`` was edited from
            (same frame numbers); ``None``: the folder's manifest ``edited_from`` when
            recorded (:mod:`.restyle_plate`). Renderers that accept it (embedded) make
            the edits act through their difference on the footage (issue 39); without
            it an edited folder gets a warning that its edits cannot act locally.
        overwrite: replace the output of an earlier run with other settings in
            ``out_dir`` (refused otherwise).
        match_look: a reference clip, image folder or image: the output's colour
            statistics are aligned to it (:mod:`backend.look_match`, Monge-Kantorovich
            linear transfer in log2 space, one fixed transform per shot, estimated from
            the first frame rendered into ``out_dir`` and kept in ``look_match.json``).
            Raises :class:`backend.look_match.LookMatchError` for an unreadable or
            empty reference.
        progress: where events go: a callable taking an event dict, or a text stream
            for JSON lines (:mod:`backend.events`); ``None``: nothing is reported.
        cancel: a ``threading.Event``; setting it stops after the current frame
            (:class:`backend.jobs.runner.JobCancelled`).
        stream, progress_bar: deprecated: ``stream`` is the old name of ``progress``;
            ``progress_bar`` is ignored.
        warmup: farm chunk overlap K >= 0 (``--warmup``): a temporal renderer renders the
            K frames before the first of ``frames`` (never written); enters the settings
            hash as ``"warmup": K``. ``None``: today's behaviour.
        manifest_part: farm chunk mode (``--manifest-part``): no lock, the manifest part
            ``OUT/.gbuffer_parts/A-B.json`` instead of manifest.json, PNG previews but no
            ``preview.mp4`` nor flicker metric (``python -m backend farm merge OUT`` makes
            them); not with ``overwrite``.
        lights: a lights file (``docs/lights.md``): the direct light of its point, spot,
            area and sun lights is added to every frame before the looks (embedded
            renderer); its content enters the settings hash. A bad file raises
            :class:`backend.renderers.light_rig.LightsError` (one line naming the file and
            the light) before anything is written.

    Returns:
        :class:`backend.jobs.runner.JobResult`.

    Raises:
        JobError: unsafe output, unreadable input (naming file and frame), write failure.
        JobCancelled: ``cancel`` was set.
        ValueError: no frames in range (:class:`~backend.errors.InputError`), bad
            ``frames``, or a prompt the renderer does not understand
            (:class:`backend.renderers.prompt.PromptError`). A range that only ends
            past the last frame is clipped, with a ``warning`` event.
        KeyError: unknown renderer.
    """
    stream = settings.pop("stream", None)
    settings.pop("progress_bar", None)
    request = RestyleRequest(gbuffer_dir, out_dir, prompt, **settings)
    return run_restyle(request, progress=progress if progress is not None else stream, cancel=cancel)


def run_restyle(request: RestyleRequest, *, progress: events.Progress = None,
                cancel: Optional[threading.Event] = None) -> JobResult:
    """:func:`restyle` of a :class:`backend.jobs.request.RestyleRequest` (settings, result, errors: see there)."""
    cancel, progress = args.cancel(cancel), args.progress(progress)  # an Event or a callable; a callable or stream
    with request.running(progress) as r:
        inputs = RestyleInputs.scan(r.gbuffer_dir, Path(r.out), r.frames, r.reference_dir)
        rig = _load_lights(r.lights, inputs) if r.lights is not None else None
        look = RestyleLook.create(r.prompt, r.renderer, r.renderer_options, lights=rig)
        later: list = []  # warned after the input checks (refused input: one line)
        if r.reference_dir is None:  # the folder it was edited from, when recorded (issue 39)
            ref = recorded_reference(inputs.gbuffer_dir, contract.read_manifest(inputs.gbuffer_dir), None,
                                     look.renderer, inputs.files[inputs.first], inputs.files, later)
            if ref is not None:
                inputs = RestyleInputs.scan(r.gbuffer_dir, Path(r.out), r.frames, ref)
        job = RestyleJob(inputs, look, r)
        job.later_warnings = later
        return job.run(overwrite=r.overwrite, cancel=cancel)


def _load_lights(path: os.PathLike, inputs: RestyleInputs):
    """Parse ``--lights`` and, for a ``world`` rig, check it against the camera in the
    header of every frame to render (a frame without a camera, a light behind the camera
    pointing away from it), before anything is written.

    Raises:
        LightsError: one line naming the lights file, the light and the frame.
    """
    from ..renderers.light_rig import LightsError, frame_camera, load_lights

    if not str(path).strip():
        raise LightsError("--lights: empty path")
    rig = load_lights(path)
    if rig.space != "world":
        return rig
    for n, frame_file in sorted(inputs.files.items()):
        try:
            meta = contract.read_meta(frame_file)
        except Exception:  # an unreadable frame is reported when it is read
            continue
        c2w = frame_camera(meta)
        if c2w is None:
            raise LightsError(f"lights file {rig.source}: space 'world' needs G-buffer frames that carry a camera "
                              f"(scene export, or a decompose with --cameras / --camera auto); {frame_file} has none: "
                              f"write the lights with space 'camera'", file=rig.source, frame=n)
        rig.at(n, c2w)
    return rig
