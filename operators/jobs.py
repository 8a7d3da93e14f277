"""Long jobs as a list of steps driven one tick at a time, modal or blocking.

A :class:`JobController` runs :class:`Step` objects in order. Each :meth:`JobController.tick`
does a small amount of work (drain the worker's progress queue, render one compositor
frame) and returns at once, so the same controller serves:

* the modal operators (a window-manager timer calls ``tick``; Esc calls ``cancel``),
* the blocking path for background mode, headless ``--command`` and tests
  (:meth:`JobController.run_blocking` loops over ``tick``).

Status and progress are mirrored into ``scene.gbuffer_editor`` so the sidebar and the
status bar show them. The one running controller per scene is kept in
:data:`_ACTIVE` (runtime state: a process handle cannot live in a property).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import bpy

from ..addon import worker as worker_mod

_ACTIVE: Dict[str, "JobController"] = {}


def active_job(scene) -> Optional["JobController"]:
    """The controller running for ``scene``, if any."""
    job = _ACTIVE.get(scene.name)
    return job if job is not None and not job.finished else None


def idle_settings(cls, context):
    """For an operator's ``poll``: the scene's G-Buffer settings when a scene exists and no
    G-Buffer job runs in it, else ``None`` (with the reason set as the poll message)."""
    scene = context.scene
    if scene is None:
        return None
    s = scene.gbuffer_editor
    if s.is_running:
        cls.poll_message_set("A G-Buffer job is running")
        return None
    return s


def brief(message: str, limit: int = 160, headless: Optional[bool] = None) -> str:
    """A short first line of ``message`` for Blender's report (which truncates long text);
    the full text stays in the Status panel (``scene.gbuffer_editor.status``) and the log.
    ``headless`` (default: ``bpy.app.background``, no panels) points at the log instead."""
    text = (message or "").strip()
    line = text.splitlines()[0] if text else ""
    if len(line) <= limit and line == text:
        return line
    log = ""
    if "; log: " in line:
        line, log = line.rsplit("; log: ", 1)
        log = f"; log: {log}"
    cut = line.find(". ")
    if 0 < cut < limit:
        line = line[: cut + 1]
    elif len(line) > limit:
        line = line[:limit].rstrip() + "..."
    if bpy.app.background if headless is None else headless:  # blender -b: there is no Status panel
        return f"{line} (full message in the log{': ' + log[7:] if log else ''})"
    return f"{line} (full message in the Status panel){log}"


def refusal_log(label: str, message: str, folder: Optional["os.PathLike"] = None) -> Optional["os.PathLike"]:
    """Write the full text of a refusal (a job that could not start: bad prompt, missing
    model, no G-buffers) to ``<folder>/logs/<label>_refused.log`` -- ``folder`` is the
    scene's Output Folder, where the jobs' own logs are (issue 28: it went to a temporary
    folder shared by every scene and user) -- or, when that cannot be written, to
    ``<temp>/gbuffer_editor/logs/``. Returns its path; ``None`` if neither can be written."""
    import tempfile
    import time
    from pathlib import Path

    name = f"{label.lower().replace(' ', '_')}_refused.log"
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {label} refused\n{message}\n"
    places = ([Path(folder) / "logs"] if folder else []) + [Path(tempfile.gettempdir()) / "gbuffer_editor" / "logs"]
    for where in places:
        try:
            where.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(text, encoding="utf-8")
        except OSError:
            continue
        return where / name
    return None


class JobFailed(RuntimeError):
    """A step failed; the message is meant for the user (reason, frame, file, log)."""


class Step:
    """One stage of a job. Subclasses override :meth:`start` / :meth:`tick` / :meth:`cancel`."""

    label = "Working"

    def start(self, ctl: "JobController") -> None:
        """Begin (must return quickly)."""

    def tick(self, ctl: "JobController") -> bool:
        """Advance; return ``True`` when the step is complete. Raise :class:`JobFailed` on error."""
        return True

    def cancel(self, ctl: "JobController") -> None:
        """Stop as soon as possible, keeping only complete output."""

    def progress(self) -> tuple:
        """``(done, total)`` for the progress bar."""
        return 0, 0


class CallStep(Step):
    """Run a function once (quick work on the main thread: wiring nodes, loading results)."""

    def __init__(self, label: str, fn: Callable[["JobController"], None]):
        self.label = label
        self.fn = fn

    def tick(self, ctl):
        self.fn(ctl)
        return True


class WorkerStep(Step):
    """Run a backend worker process; progress comes from its JSON lines.

    ``argv``: the worker's command line. With ``request`` (a
    :class:`..backend.jobs.request.DecomposeRequest` / ``RestyleRequest``) the command is
    ``python -m backend run <log>.request.json`` (``argv[0]`` is the Python) and the file is
    written next to the log when the step starts, so ``step.request`` may be replaced
    until then."""

    def __init__(self, label: str, argv: List[str], log_path, env=None, request=None):
        self.label = label
        self.log_path = log_path
        self.env = env
        self.request = request
        if request is not None:
            path = Path(log_path).with_suffix(".request.json")
            argv = [argv[0], "-m", "backend", "run", str(path)]
        self.argv = argv
        self.job: Optional[worker_mod.WorkerJob] = None

    def start(self, ctl):
        try:
            if self.request is not None:
                Path(self.argv[-1]).parent.mkdir(parents=True, exist_ok=True)
                self.request.write(self.argv[-1])
            self.job = worker_mod.WorkerJob(self.argv, log_path=self.log_path, env=self.env).start()
        except OSError as e:
            raise JobFailed(f"{e}; log: {self.log_path}") from e
        ctl.log_path = str(self.log_path)

    def tick(self, ctl):
        self.job.poll()
        if not self.job.finished:
            return False
        if self.job.state == worker_mod.DONE:
            return True
        if self.job.state == worker_mod.CANCELLED:
            ctl.cancelled = True
            return True
        raise JobFailed(self.job.describe_error())

    def cancel(self, ctl):
        if self.job is not None:
            self.job.cancel()
            self.job.poll()

    def progress(self):
        if self.job is None:
            return 0, 0
        return self.job.done, self.job.total


class JobController:
    """Runs steps in order for one scene and mirrors status into ``scene.gbuffer_editor``.

    Attributes:
        state: ``RUNNING``, ``DONE``, ``ERROR`` or ``CANCELLED`` (as in :mod:`..worker`).
        message: final message for the user (error reason with log path, or summary).
    """

    def __init__(self, scene, label: str, steps: List[Step], on_done: Optional[Callable] = None):
        self.scene_name = scene.name
        self.label = label
        self.steps = list(steps)
        self.on_done = on_done
        self.index = -1
        self.state = worker_mod.RUNNING
        self.message = ""
        self.log_path = ""
        self.cancelled = False
        self.data: dict = {}
        #: warnings from the add-on's own steps (e.g. the startup cube hidden), shown
        #: with the workers' ones at the end
        self.notes: List[str] = []
        #: what the job did, added to its "done" line (e.g. the lights a restyle took)
        self.summary = ""

    @property
    def scene(self):
        return bpy.data.scenes[self.scene_name]

    @property
    def finished(self) -> bool:
        return self.state != worker_mod.RUNNING

    @property
    def step(self) -> Optional[Step]:
        return self.steps[self.index] if 0 <= self.index < len(self.steps) else None

    def start(self) -> "JobController":
        other = _ACTIVE.get(self.scene_name)
        if other is not None and not other.finished:
            raise JobFailed(f"'{other.label}' is still running; cancel it first")
        _ACTIVE[self.scene_name] = self
        s = self.scene.gbuffer_editor
        s.is_running = True
        s.job_label = self.label
        s.progress = 0.0
        s.status = f"{self.label}: starting"
        self._advance()
        return self

    def _advance(self) -> None:
        self.index += 1
        if self.step is None:
            self._end(worker_mod.DONE, f"{self.label}: done{self.summary}{self._warning_text()}")
            return
        try:
            self.step.start(self)
        except JobFailed as e:
            self._end(worker_mod.ERROR, str(e))

    def tick(self) -> str:
        """Advance the current step a little; returns the controller state."""
        if self.finished:
            return self.state
        try:
            complete = self.step.tick(self)
        except JobFailed as e:
            self._cancel_steps()  # let the step undo temporary changes (render settings...)
            self._end(worker_mod.ERROR, str(e))
            return self.state
        except Exception as e:  # a bug or a Blender error: report it, never leave a zombie job
            self._cancel_steps()
            self._end(worker_mod.ERROR, f"{self.label}: {type(e).__name__}: {e}")
            return self.state
        if self.cancelled:
            self._end(worker_mod.CANCELLED, f"{self.label}: cancelled; complete frames kept")
        elif complete:
            self._advance()
        if not self.finished:
            self._update_status()
        return self.state

    def _update_status(self) -> None:
        done, total = self.step.progress()
        s = self.scene.gbuffer_editor
        n = len(self.steps)
        frac = (done / total) if total else 0.0
        s.progress = min(1.0, (self.index + frac) / n)
        count = f" {done}/{total}" if total else ""
        s.status = f"{self.label}: {self.step.label}{count}"
        tag_redraw()

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the last worker process that ended (``None`` if none did)."""
        codes = [st.job.returncode for st in self.steps if isinstance(st, WorkerStep) and st.job is not None]
        codes = [c for c in codes if c is not None]
        return codes[-1] if codes else None

    @property
    def warnings(self) -> List[str]:
        """The warnings the workers reported (e.g. '--frames 1-100: the clip has 16
        frame(s); clipped to 1-16'), in order; they used to reach decompose.log only."""
        return [w for st in self.steps if isinstance(st, WorkerStep) and st.job is not None
                for w in st.job.warnings if w] + list(self.notes)

    def _warning_text(self) -> str:
        ws = self.warnings
        if not ws:
            return ""
        more = f" (+{len(ws) - 1} more in the log)" if len(ws) > 1 else ""
        return f", with a warning: {ws[0]}{more}"

    def cancel(self) -> None:
        """Stop the running step (SIGTERM for a worker); complete frames stay on disk."""
        if self.finished:
            return
        self.cancelled = True
        self._cancel_steps()
        self._end(worker_mod.CANCELLED, f"{self.label}: cancelled; complete frames kept")

    def _cancel_steps(self) -> None:
        if self.step is not None:
            try:
                self.step.cancel(self)
            except Exception:
                pass

    def _end(self, state: str, message: str) -> None:
        self.state = state
        self.message = message
        if _ACTIVE.get(self.scene_name) is self:
            del _ACTIVE[self.scene_name]
        try:
            s = self.scene.gbuffer_editor
        except KeyError:  # scene deleted while running
            return
        s.is_running = False
        s.status = message
        s.log_path = self.log_path
        if state == worker_mod.DONE:
            s.progress = 1.0
        tag_redraw()

    def run_blocking(self, poll_interval: float = 0.1, on_tick: Optional[Callable] = None) -> str:
        """Start (if needed) and tick until finished; for background mode and tests.

        ``on_tick(controller)`` is called after every tick (headless progress printing).
        """
        if self.index < 0:
            self.start()
        while not self.finished:
            self.tick()
            if on_tick is not None:
                on_tick(self)
            if not self.finished and isinstance(self.step, WorkerStep):
                time.sleep(poll_interval)
        return self.state


def tag_redraw() -> None:
    """Redraw the areas that show job status (sidebars and the status bar)."""
    wm = getattr(bpy.context, "window_manager", None)
    if wm is None:
        return
    for window in wm.windows:
        for area in window.screen.areas:
            if area.type in {"NODE_EDITOR", "CLIP_EDITOR", "STATUSBAR"}:
                area.tag_redraw()


class ModalJobMixin:
    """Modal driving for an operator whose ``build_job(context)`` returns a controller.

    ``invoke`` starts it with a window-manager timer (UI stays live); ``execute`` runs
    it to completion (background mode, scripts). Esc or the Cancel button cancels.
    """

    _timer = None
    _job = None  # JobController while modal

    def build_job(self, context) -> JobController:  # pragma: no cover - overridden
        raise NotImplementedError

    def _finish(self, job: JobController) -> set:
        if job.state == worker_mod.DONE:
            self.report({"WARNING"} if job.warnings else {"INFO"}, brief(job.message))
            return {"FINISHED"}
        if job.state == worker_mod.CANCELLED:
            self.report({"WARNING"}, job.message)
            return {"CANCELLED"}
        self.report({"ERROR"}, brief(job.message))  # the full text: Status panel and log
        return {"CANCELLED"}

    def _start(self, context) -> Optional[JobController]:
        try:
            return self.build_job(context).start()
        except (JobFailed, LookupError, OSError, ValueError) as e:
            full = str(e)
            first = full.strip().splitlines()[0] if full.strip() else ""
            short = getattr(e, "short", None) or (first if len(first) <= 160 else brief(full))
            root = None
            if context.scene is not None:
                from .backend_args import output_root

                root = output_root(context.scene.gbuffer_editor)
            log = refusal_log(self.bl_label, full, root)
            if context.scene is not None:
                s = context.scene.gbuffer_editor
                s.status = short  # one line the Status panel shows whole; Log holds the rest
                if log is not None:
                    s.log_path = str(log)
            if log is not None and short != full:
                short = f"{short.rstrip('.')}; log: {log}"
            self.report({"ERROR"}, short)
            return None

    def execute(self, context):
        job = self._start(context)
        if job is None:
            return {"CANCELLED"}
        job.run_blocking()
        return self._finish(job)

    def invoke(self, context, event):
        if bpy.app.background or context.window is None:
            return self.execute(context)
        job = self._start(context)
        if job is None:
            return {"CANCELLED"}
        if job.finished:
            return self._finish(job)
        self._job = job
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.2, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = self._job
        if event.type == "ESC" and event.value == "PRESS":
            job.cancel()
        elif event.type == "TIMER":  # (Event has no .timer: any timer tick advances; ticks are cheap)
            job.tick()
        if not job.finished:
            return {"PASS_THROUGH"}
        context.window_manager.event_timer_remove(self._timer)
        self._timer = None
        return self._finish(job)


class GBUFFER_OT_cancel_job(bpy.types.Operator):
    """Stop the running Decompose or Restyle job; frames already written are kept"""

    bl_idname = "gbuffer.cancel_job"
    bl_label = "Cancel"
    bl_options = {"INTERNAL"}

    @classmethod
    def poll(cls, context):
        if context.scene is None or active_job(context.scene) is None:
            cls.poll_message_set("No G-Buffer job is running")
            return False
        return True

    def execute(self, context):
        job = active_job(context.scene)
        job.cancel()
        self.report({"WARNING"}, job.message)
        return {"FINISHED"}


classes = (GBUFFER_OT_cancel_job,)
