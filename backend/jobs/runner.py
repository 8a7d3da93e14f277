"""Generic frame-job runner: progress, cancel, resume, atomic writes, safety.

Every long job (``decompose``, ``restyle``) is "for each frame: compute, write one
file". :func:`run_job` does everything around the compute step, the same way for all
jobs:

* **Progress** as events (:mod:`backend.events`; the CLI prints them as JSON lines)::

      {"event": "start", "total": N, "out": DIR, "settings_hash": H}
      {"event": "progress", "frame": n, "done": k, "total": N, "fps": x, "eta_s": y, "skipped": bool}
      {"event": "done", "done": k, "written": w, "skipped": s, "total": N, "elapsed_s": t, "out": DIR}

  (``error`` / ``cancelled`` lines are printed by :func:`backend.cli.main`, which also
  draws a progress bar instead when stdout is a terminal).
* **Cancel**: once the ``cancel`` event is set (the CLI sets it on the first
  SIGINT/SIGTERM, :class:`SignalCancel`) the current frame finishes and the job stops;
  a ``KeyboardInterrupt`` (the CLI's second signal) abandons the current frame at once. Either way only complete frames
  exist (each is written to a temporary file in the output folder, then renamed);
  :class:`JobCancelled` is raised (the CLI exits 130). Temporaries a hard kill left
  (``.tmp_<stem>_*``) are removed right before their frame is computed again.
* **Resume**: a frame whose file exists and whose stored settings hash equals the
  current one is skipped. The hash is kept per frame in ``manifest.json`` and, when
  the job provides ``read_hash``, in the file itself (EXR header), which wins; the
  manifest is then rewritten at most every ``MANIFEST_INTERVAL_S`` during the run
  (and always at the end, on cancel and on failure).
* **Overlap**: ``work`` may return :class:`Deferred` to finish its file on a writer
  thread while the next frame is computed (one frame in flight, strictly in order).
* **Safety**: the output folder may not be, contain, or lie inside any input.
* **Failure**: any error becomes :class:`JobError` naming the file and frame; the
  temporary file is removed (full disk, unwritable folder, estimator crash...).

Minimal use (this is the whole API a job needs)::

    from backend.jobs.runner import run_job

    def tasks():
        for n, item in enumerate(items, 1):
            def work(tmp_path, settings_hash, item=item):
                write_my_file(tmp_path, compute(item), settings_hash)
                return {"mean": 0.5}          # optional per-frame manifest fields
            yield n, work

    result = run_job(out_dir, tasks(), settings={"prompt": "fog"}, total=len(items),
                     inputs=[src_dir], job="restyle", path_for=lambda n: out_dir / f"x_{n:04d}.exr")
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple

from .. import contract, events
from ..errors import JobCancelled, JobError  # noqa: F401  (JobCancelled re-exported: its former home)
from .frame_run import FrameRun, _cleanup_tmp
# the runner's parts (one 1,000-line file before); every name stays importable from here
from .job_types import MANIFEST_INTERVAL_S, Deferred, JobResult, RunOptions, WorkFn, settings_hash  # noqa: F401
from .output_folder import check_output_safe, prepare_output_dir
from .outputs import check_previous_outputs, read_own_manifest
from .run_lock import RUN_LOCK, _manifest_lock, _RunLock, run_lock  # noqa: F401
from .signals import CANCEL_SIGNALS, SignalCancel  # noqa: F401


def run_job(out_dir: os.PathLike, tasks: Iterable[Tuple[int, WorkFn]], *, settings: Dict[str, Any],
            progress: "events.Progress" = None, cancel: Optional[threading.Event] = None, **options) -> JobResult:
    """Run a frame job with progress, cancel, resume and atomic output.

    Args:
        out_dir: output folder (created if missing; checked writable).
        tasks: iterable of ``(frame_number, work)``. It is consumed lazily, so it can
            decode input as it goes. ``work(tmp_path, settings_hash)`` must write the
            complete output file to ``tmp_path`` (same folder as the final file, so the
            rename is atomic) and may return a dict of per-frame manifest fields, or a
            :class:`Deferred`. Frames whose output is already valid are skipped
            *without* calling ``work``.
        settings: everything that affects the output (JSON-serialisable); its
            :func:`settings_hash` decides resume.
        total: number of frames, for progress/ETA (``None`` if unknown).
        inputs: input files/folders; the output may not overlap them.
        job: job name recorded in the manifest (``decompose``, ``restyle``).
        path_for: frame number -> final output path; default
            :func:`backend.contract.frame_path` in ``out_dir``.
        options: the keyword arguments below (:class:`RunOptions`; an unknown one is a
            ``TypeError``).
        manifest: extra top-level manifest fields (e.g. source metadata). The runner
            adds ``job``, ``settings``, ``settings_hash``, ``frames`` (list of
            ``{"frame", "file", "settings_hash", ...}``) and ``complete``.
        read_hash: optional ``path -> hash or None`` reading the hash stored in an
            output file; used for resume in preference to the manifest.
        progress: where events go (:func:`backend.events.reporting`: a callable taking
            an event dict, or a text stream for JSON lines); ``None``: the reporter
            already installed, if any (nothing is printed by default).
        cancel: a ``threading.Event``; once set, the frame being computed is finished
            and :class:`JobCancelled` is raised (see :class:`SignalCancel`).
        on_frame: called as ``on_frame(frame_number, entry)`` after each written frame.
        overwrite, companions, extra_outputs: frames of this job in ``out_dir`` written
            with other settings are refused unless ``overwrite``, which removes them (and
            their ``companions(n)`` files, the ``extra_outputs`` and the stale manifest)
            first; see :func:`backend.jobs.outputs.check_previous_outputs`.
        stream, progress_bar: deprecated: ``stream`` is the old name of ``progress``;
            ``progress_bar`` is ignored (the command line draws the bar).
        input_for: frame number -> fingerprint of the input that frame is computed from
            (:mod:`backend.jobs.fingerprint`; ``None``: unknown). Recorded per frame
            (``input``); a frame whose stored fingerprint differs is stale: refused unless
            ``overwrite`` (which recomputes exactly those frames).
        read_input: reads the input fingerprint stored in an output file's header.
        expected: every frame number of the shot; the manifest says ``complete: true``
            only when all of them are present and no other job is writing the folder.
        throttle: rewrite the manifest at most every :data:`MANIFEST_INTERVAL_S`
            (default: when ``read_hash`` is given).
        numbers: the frame numbers this run writes (default ``expected``): their
            ``companions`` may not be files we did not write.
        before_done: the job's finishing work after the last frame (previews, summary
            metrics in ``result.manifest``), run before the manifest says complete and
            before the ``done`` event: a cancel or failure in it leaves ``complete: false``.
        leftovers: glob patterns (relative to ``out_dir``) of the job's own hidden
            temporaries a hard kill can leave (``.tmp_preview_*.mp4``); removed at start
            when no other job is writing into the folder (``.tmp_manifest*`` always are).
        part: ``(A, B)``: farm chunk mode (``--manifest-part``, see
            :mod:`backend.jobs.parts`). No ``flock`` anywhere: instead of
            ``manifest.json`` the run writes ``OUT/.gbuffer_parts/A-B.json`` atomically
            (temporary file + rename) with the entries of its frames ``numbers``; one
            merge step (:func:`backend.jobs.parts.merge`) assembles ``manifest.json``.
            Refused (:class:`JobError`): a part of the folder written with other settings,
            or a part whose range overlaps ``A-B`` without being it (another chunking);
            ``overwrite`` is refused (``ValueError``). ``leftovers`` are not removed
            (other chunks may be writing).
        read_entry: reads the job's per-frame manifest fields stored in an output file's
            header (the dict ``work`` returned, e.g. decompose's ``gbuffer/manifest_entry``).
            A frame found on disk but not in the manifest (written in the last moments
            before a hard kill) is recorded with them, so its entry is the one an
            uninterrupted run writes.

    Returns:
        :class:`JobResult`.

    Raises:
        JobError: unsafe or unwritable output, or a frame failed (message names file
            and frame; no partial file is left).
        JobCancelled: ``cancel`` was set, or ``KeyboardInterrupt`` (complete frames
            stay on disk).
    """
    t0 = time.monotonic()
    stream = options.pop("stream", None)
    options.pop("progress_bar", None)
    opts = RunOptions(**options)
    out = prepare_output_dir(check_output_safe(out_dir, opts.inputs))
    if opts.path_for is None:
        opts = dataclasses.replace(opts, path_for=lambda n: contract.frame_path(out, n))
    shash = settings_hash(settings)
    with events.reporting(progress if progress is not None else stream):
        if opts.part is not None:
            return _run_part(out, tasks, opts, settings=settings, cancel=cancel, t0=t0)
        with _manifest_lock(out):
            # under the folder lock: no other job starts, finishes or checks meanwhile
            old = read_own_manifest(out)
            lock = run_lock(out)
            from .parts import check_no_foreign_parts

            check_no_foreign_parts(out, shash, opts.job)  # farm chunks take no lock: their parts say it
            if old.get("settings_hash") not in (None, shash) and lock.others_running():
                raise JobError(
                    f"another {old.get('job') or opts.job} job with other settings (settings hash "
                    f"{old.get('settings_hash')}) is writing into {out} right now; one folder holds one "
                    f"set of settings: wait for it to finish, or choose another --out", file=out)
            _check_previous(out, shash, old, opts, overwrite=opts.overwrite)
            if opts.overwrite:
                old = read_own_manifest(out)
            run = FrameRun(out, opts, settings=settings, cancel=cancel, old=old, t0=t0)
            run.book.runlock = lock
            run.book.created = not old
            if not lock.others_running():  # a hard kill's temporaries (a live chunk's are kept)
                for pattern in (".tmp_manifest*", *opts.leftovers):
                    for p in out.glob(pattern):
                        _cleanup_tmp(p)
            lock.acquire()
            try:  # claim the folder for these settings before the first frame
                run.book.save_locked(None)
            except BaseException:
                lock.release()
                raise
        return run.run(tasks)


def _run_part(out: Path, tasks, opts: RunOptions, *, settings, cancel, t0) -> JobResult:
    """:func:`run_job` in farm chunk mode (``opts.part``): no lock, the manifest part only."""
    from .parts import clean_part_temporaries, folder_view, input_identity

    first, last = int(opts.part[0]), int(opts.part[1])
    if opts.overwrite:
        raise ValueError("--overwrite cannot be combined with --manifest-part: farm chunks never remove "
                         "other chunks' files; empty the folder (or choose another --out) first")
    shash = settings_hash(settings)
    # JobError: other settings / other chunking / other inputs
    old = folder_view(out, shash, opts.job, (first, last), identity=input_identity(opts.manifest or {}))
    numbers = opts.numbers if opts.numbers is not None else range(first, last + 1)
    chunk = [n for n in numbers if first <= n <= last]
    _check_previous(out, shash, old, dataclasses.replace(opts, numbers=chunk), overwrite=False)
    run = FrameRun(out, opts, settings=settings, cancel=cancel, old=old, t0=t0)
    run.book.part = (first, last, chunk)
    clean_part_temporaries(out, first, last)
    run.book.save_part(None)  # claim: the part names these settings before the first frame
    return run.run(tasks)


def _check_previous(out: Path, shash: str, old: Dict[str, Any], opts: RunOptions, *, overwrite: bool) -> None:
    """:func:`backend.jobs.outputs.check_previous_outputs` with the run's options."""
    check_previous_outputs(out, shash, old, job=opts.job, path_for=opts.path_for, read_hash=opts.read_hash,
                           overwrite=overwrite, companions=opts.companions, extra_outputs=opts.extra_outputs,
                           read_input=opts.read_input, input_for=opts.input_for, numbers=opts.written_numbers)
