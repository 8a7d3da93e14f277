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

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, IO, Iterable, Optional, Sequence, Tuple

from .. import contract, events
from ..errors import JobCancelled, JobError  # noqa: F401  (JobCancelled re-exported: its former home)
from .frame_run import FrameRun, _cleanup_tmp
# the runner's parts (one 1,000-line file before); every name stays importable from here
from .job_types import MANIFEST_INTERVAL_S, Deferred, JobResult, WorkFn, settings_hash  # noqa: F401
from .output_folder import check_output_safe, prepare_output_dir
from .read_only import complete_read_only
from .outputs import check_previous_outputs, read_own_manifest
from .run_lock import RUN_LOCK, _manifest_lock, _RunLock, run_lock  # noqa: F401
from .signals import CANCEL_SIGNALS, SignalCancel  # noqa: F401


def run_job(
    out_dir: os.PathLike,
    tasks: Iterable[Tuple[int, WorkFn]],
    *,
    settings: Dict[str, Any],
    total: Optional[int] = None,
    inputs: Sequence[os.PathLike] = (),
    job: str = "job",
    path_for: Optional[Callable[[int], Path]] = None,
    manifest: Optional[Dict[str, Any]] = None,
    read_hash: Optional[Callable[[Path], Optional[str]]] = None,
    progress: "events.Progress" = None,
    cancel: Optional[threading.Event] = None,
    on_frame: Optional[Callable[[int, Dict[str, Any]], None]] = None,
    overwrite: bool = False,
    companions: Optional[Callable[[int], Sequence[Path]]] = None,
    extra_outputs: Sequence[Path] = (),
    stream: Optional[IO[str]] = None,
    progress_bar: Optional[bool] = None,
    input_for: Optional[Callable[[int], Optional[str]]] = None,
    read_input: Optional[Callable[[Path], Optional[str]]] = None,
    expected: Optional[Sequence[int]] = None,
    throttle: Optional[bool] = None,
    numbers: Optional[Sequence[int]] = None,
    before_done: Optional[Callable[[JobResult], None]] = None,
    leftovers: Sequence[str] = (),
    part: Optional[Tuple[int, int]] = None,
    read_entry: Optional[Callable[[Path], Optional[Dict[str, Any]]]] = None,
) -> JobResult:
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
    shash = settings_hash(settings)
    chk = dict(read_hash=read_hash, companions=companions, extra_outputs=extra_outputs, read_input=read_input,
               input_for=input_for)
    with events.reporting(progress if progress is not None else stream):
        done = part is None and not overwrite and complete_read_only(  # a finished folder, read-only mount
            out_dir, inputs, shash=shash, job=job, path_for=path_for, expected=expected, total=total, t0=t0, **chk)
        if done:
            return done
        out = prepare_output_dir(check_output_safe(out_dir, inputs))
        path_for = path_for or (lambda n: contract.frame_path(out, n))
        if part is not None:
            return _run_part(out, tasks, part, settings=settings, shash=shash, total=total, job=job,
                             path_for=path_for, manifest=manifest, cancel=cancel, on_frame=on_frame,
                             overwrite=overwrite, expected=expected, throttle=throttle, t0=t0,
                             numbers=numbers if numbers is not None else expected, before_done=before_done,
                             read_entry=read_entry, **chk)
        with _manifest_lock(out):
            # under the folder lock: no other job starts, finishes or checks meanwhile
            old = read_own_manifest(out)
            lock = run_lock(out)
            from .parts import check_no_foreign_parts

            check_no_foreign_parts(out, shash, job)  # farm chunks take no lock: their parts say it
            if old.get("settings_hash") not in (None, shash) and lock.others_running():
                raise JobError(
                    f"another {old.get('job') or job} job with other settings (settings hash "
                    f"{old.get('settings_hash')}) is writing into {out} right now; one folder holds one "
                    f"set of settings: wait for it to finish, or choose another --out", file=out)
            check_previous_outputs(out, shash, old, job=job, path_for=path_for, overwrite=overwrite,
                                   numbers=numbers if numbers is not None else expected, **chk)
            if overwrite:
                old = read_own_manifest(out)
            run = FrameRun(out, settings=settings, total=total, job=job, path_for=path_for, manifest=manifest,
                           read_hash=read_hash, on_frame=on_frame, cancel=cancel, old=old, t0=t0,
                           input_for=input_for, read_input=read_input, expected=expected,
                           throttle=throttle, read_entry=read_entry)
            run.book.runlock = lock
            run.book.created = not old
            run.before_done = before_done
            if not lock.others_running():  # a hard kill's temporaries (a live chunk's are kept)
                for pattern in (".tmp_manifest*", *leftovers):
                    for p in out.glob(pattern):
                        _cleanup_tmp(p)
            lock.acquire()
            try:  # claim the folder for these settings before the first frame
                run.book.save_locked(None)
            except BaseException:
                lock.release()
                raise
        return run.run(tasks)


def _run_part(out: Path, tasks, part: Tuple[int, int], *, settings, shash, total, job, path_for, manifest,
              read_hash, cancel, on_frame, overwrite, companions, extra_outputs, input_for, read_input,
              expected, throttle, t0, numbers, before_done, read_entry=None) -> JobResult:
    """:func:`run_job` in farm chunk mode (``part``): no lock, the manifest part only."""
    from .parts import clean_part_temporaries, folder_view

    first, last = int(part[0]), int(part[1])
    if overwrite:
        raise ValueError("--overwrite cannot be combined with --manifest-part: farm chunks never remove "
                         "other chunks' files; empty the folder (or choose another --out) first")
    from .parts import input_identity

    # JobError: other settings / other chunking / other inputs
    old = folder_view(out, shash, job, (first, last), identity=input_identity(manifest or {}))
    chunk = [n for n in (numbers if numbers is not None else range(first, last + 1)) if first <= n <= last]
    check_previous_outputs(out, shash, old, job=job, path_for=path_for, read_hash=read_hash,
                           overwrite=False, companions=companions, extra_outputs=extra_outputs,
                           read_input=read_input, input_for=input_for, numbers=chunk)
    run = FrameRun(out, settings=settings, total=total, job=job, path_for=path_for, manifest=manifest,
                   read_hash=read_hash, on_frame=on_frame, cancel=cancel, old=old, t0=t0,
                   input_for=input_for, read_input=read_input, expected=expected, throttle=throttle,
                   read_entry=read_entry)
    run.book.part = (first, last, chunk)
    run.before_done = before_done
    clean_part_temporaries(out, first, last)
    run.book.save_part(None)  # claim: the part names these settings before the first frame
    return run.run(tasks)
