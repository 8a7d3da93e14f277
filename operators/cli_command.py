"""Headless use: ``blender -b [file.blend] --command gbuffer_editor decompose|restyle|export-scene|solve ...``.

Registered with ``bpy.utils.register_cli_command`` (Blender 4.2+). The arguments are
those of the backend CLI (``python -m backend decompose|restyle --help``) plus a few
Blender-side options; the command blocks until the worker ends and returns its exit
status: 0 done, 130 cancelled, 1 or 2 failed (reason on stderr). Stdout carries JSON
lines only: the worker's ``start`` / ``progress`` / ``warning`` events (with ``"stage"``:
``decompose``, ``restyle``, or ``edits`` for the material-edit bake), then one ``done``,
``error`` or ``cancelled``; everything else (Blender's ``Saved: ...``) goes to stderr.

decompose INPUT --out DIR [backend options] [--setup] [--save FILE.blend]
    Runs the decompose worker. ``--setup`` wires the result into the scene's compositor
    (G-buffer Image node, "Material edits" frame, G-buffer output, Viewer); ``--save``
    saves the .blend afterwards.

restyle GBUFFER_DIR --prompt TEXT --out DIR [backend options] [--no-edits]
        [--edited-dir DIR] [--save FILE.blend]
    When the open .blend has a G-buffer setup (and no ``--no-edits``), its material edits
    are rendered first: the setup is pointed at GBUFFER_DIR, the edited G-buffers go to
    ``--edited-dir`` (default ``<DIR>_edited_gbuffer``, next to ``--out``: the backend
    refuses an output folder containing its input) and that folder is restyled.
    Otherwise GBUFFER_DIR goes to the worker unchanged.

export-scene --out DIR [--frames A-B] [--motion-blur N] [--samples S] [--res WxH]
        [--scene NAME] [--setup] [--save FILE.blend]
    Renders exact G-buffers of the open .blend's scene with Cycles (operators/export_scene.py);
    JSON lines on stdout; exit 0 done, 1 failed, 2 bad arguments.

solve CLIP [--cameras OUT.json] [--frames A-B] [--no-refine] [--max-error PX] [--save FILE.blend]
    Track & Solve with Blender's camera tracker (operators/camera_solve.py): CLIP is a
    Movie Clip of the .blend or a footage file to import; writes the cameras JSON, makes
    the scene camera follow the solve; JSON lines; exit 0 done, 1 solve refused, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

import bpy

from ..addon import compositor, worker
from . import backend_args, camera_solve, decompose, export_scene, jobs, restyle

COMMAND_ID = "gbuffer_editor"
USAGE = f"""usage: blender -b [FILE.blend] --command {COMMAND_ID} COMMAND [options]

G-Buffer Editor, headless. Commands:
  decompose INPUT --out DIR      footage (movie, image sequence) -> G-buffer EXR frames;
                                 --setup wires them into the .blend's compositor
  restyle GBUFFER_DIR --prompt TEXT --out DIR
                                 re-render G-buffers with a look ("dense fog",
                                 "heavy rain at night"); applies the .blend's material edits
  export-scene --out DIR         exact G-buffers of the open .blend's scene (Cycles)
  solve CLIP                     camera track & solve -> cameras JSON, scene camera

'blender -b --command {COMMAND_ID} COMMAND --help' lists a command's options (and, for
decompose and restyle, the estimators, renderers and prompt words).
Output: JSON lines on stdout (start, progress, warning, then done / error / cancelled);
messages on stderr. Exit status: 0 done, 1 failed, 2 bad arguments, 130 cancelled.
"""

_handle = None


def _blender_options(subcommand: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"blender -b --command {COMMAND_ID} {subcommand}", add_help=False)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--save", default=None, metavar="FILE.blend", help="save the .blend afterwards")
    if subcommand == "decompose":
        p.add_argument("--setup", action="store_true",
                       help="wire the frames into the compositor (G-buffer node, Material edits, Viewer)")
    else:
        p.add_argument("--no-edits", action="store_true",
                       help="restyle GBUFFER_DIR as it is (do not apply the .blend's material edits)")
        p.add_argument("--edited-dir", default=None, metavar="DIR",
                       help="where the edited G-buffers go (default: <OUT>_edited_gbuffer)")
    return p


def subcommand_help(sub: str) -> str:
    """``--help`` of ``decompose`` / ``restyle``: the Blender-side options, then the
    backend's options, estimators, renderers and prompt words."""
    from ..backend.cli import subcommand_help as backend_help

    prog = f"blender -b [FILE.blend] --command {COMMAND_ID} {sub}"
    blender = _blender_options(sub)
    lines = ["Blender-side options:"]
    for a in blender._actions:
        flag = ", ".join(a.option_strings) + (f" {a.metavar}" if a.metavar else "")
        lines.append(f"  {flag:<24} {a.help}")
    return backend_help(sub, prog=prog) + "\n" + "\n".join(lines) + "\n"


#: worker events passed on as they come; the command's own outcome (``done``, ``error``,
#: ``cancelled``) is emitted once at the end, after the Blender-side steps
_FORWARDED = ("start", "progress", "warning")


def _emit(obj: dict) -> None:
    from ..backend import events

    events.emit(obj)


def _fail(message: str, code: int, frame=None, file=None) -> int:
    """One ``error`` JSON line on stdout, the reason on stderr; returns ``code``."""
    _emit({"event": "error", "message": message, "frame": frame, "file": None if file is None else str(file)})
    print(f"[gbuffer_editor] {message}", file=sys.stderr, flush=True)
    return code


def _progress(ctl) -> None:
    """JSON lines for the job: the worker's own events (tagged with the stage) and, for
    Blender-side steps (material edits), one ``progress`` event per finished frame."""
    emitted = ctl.__dict__.setdefault("_emitted", {})
    for i, step in enumerate(ctl.steps[: ctl.index + 1]):
        if isinstance(step, jobs.WorkerStep):
            job = step.job
            if job is not None and job.on_event is None:
                argv = step.argv
                stage = step.request.JOB if step.request is not None else \
                    argv[argv.index("backend") + 1] if "backend" in argv[:-1] else step.label

                def forward(ev, stage=stage):
                    if ev.get("event") in _FORWARDED:
                        _emit(dict(ev, stage=stage))

                job.on_event = forward
            continue
        if isinstance(step, jobs.CallStep):
            continue
        done, total = step.progress()
        for k in range(emitted.get(i, 0) + 1, done + 1):
            _emit({"event": "progress", "stage": "edits", "done": k, "total": total or None})
            print(f"[gbuffer_editor] {ctl.label}: {step.label} {k}/{total}", file=sys.stderr, flush=True)
        emitted[i] = max(done, emitted.get(i, 0))


def _last_job(ctl):
    found = [st.job for st in ctl.steps if isinstance(st, jobs.WorkerStep) and st.job is not None]
    return found[-1] if found else None


def _finish(ctl, save: Optional[str], out: Path) -> int:
    job = _last_job(ctl)
    if ctl.state == worker.DONE:
        if save:
            try:
                bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(save), check_existing=False)
            except RuntimeError as e:
                return _fail(f"cannot save {save}: {e}", 1, file=save)
        done = dict(job.result) if job is not None else {}
        done.update(event="done", out=str(out), message=ctl.message)
        _emit(done)
        print(f"[gbuffer_editor] {ctl.message}", file=sys.stderr, flush=True)
        return 0
    if ctl.state == worker.CANCELLED:
        _emit({"event": "cancelled", "written": job.done if job is not None else None, "frame": None})
        print(f"[gbuffer_editor] {ctl.message}", file=sys.stderr, flush=True)
        return worker.EXIT_CANCELLED
    rc = ctl.returncode
    return _fail(ctl.message, rc if rc not in (None, 0) else 1,
                 frame=job.error_frame if job is not None else None,
                 file=job.error_file if job is not None else None)


def run(argv: List[str]) -> int:
    """Run ``decompose`` or ``restyle`` with backend-CLI arguments, or ``export-scene``; blocks;
    returns the exit code."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], list(argv[1:])
    if sub == "export-scene":
        return export_scene.run_cli(rest)
    if sub == "solve":
        return camera_solve.run_cli(rest)
    if sub not in ("decompose", "restyle"):
        print(f"unknown subcommand {sub!r}; use decompose, restyle, export-scene or solve\n\n{USAGE}",
              file=sys.stderr)
        return 2
    if any(a in ("-h", "--help") for a in rest):
        print(subcommand_help(sub))
        return 0
    try:
        opts, passthrough = _blender_options(sub).parse_known_args(rest)
    except SystemExit as e:  # argparse reports the problem itself
        return int(e.code or 2)
    from ..backend.cli import json_stdout

    # stdout carries only JSON lines (as export-scene and the backend CLI); Blender's own
    # messages ("Saved: ...") and our human-readable lines go to stderr
    with json_stdout():
        return _run_job(sub, opts, passthrough)


def _run_job(sub: str, opts, passthrough: List[str]) -> int:
    scene = bpy.context.scene
    out = Path(os.path.abspath(opts.out))
    prefs = backend_args.preferences()
    env = backend_args.worker_environment(prefs)
    try:
        if sub == "decompose":
            out.mkdir(parents=True, exist_ok=True)
            request = backend_args.request_from_cli("decompose", [*passthrough, "--out", str(out)], prefs)
            ctl = decompose.decompose_job(scene, request, out, wire=opts.setup, env=env, prefs=prefs)
        else:
            if not passthrough or passthrough[0].startswith("-"):
                return _fail("restyle: GBUFFER_DIR is required", 2)
            gbuffer_dir = Path(os.path.abspath(passthrough[0]))
            extra = passthrough[1:]
            prompt = _take_option(extra, "--prompt")
            if prompt is None:
                return _fail("restyle: --prompt is required", 2)
            out.mkdir(parents=True, exist_ok=True)
            tree = compositor.find_tree(scene)
            has_setup = tree is not None and compositor.find_node(tree, compositor.ROLE_GBUFFER) is not None
            edited = None
            if has_setup and not opts.no_edits:
                decompose.wire_gbuffers(scene, gbuffer_dir)
                if not compositor.edits_untouched(tree):  # else: nothing to bake
                    edited = (Path(os.path.abspath(opts.edited_dir)) if opts.edited_dir
                              else out.parent / f"{out.name}_{restyle.EDITED_DIR}")
            ctl = restyle.restyle_job(
                scene, out, prompt=prompt, extra_args=extra, edited_dir=edited,
                gbuffer_dir=gbuffer_dir, load=has_setup, prefs=prefs,
            )
    except (OSError, ValueError, LookupError, jobs.JobFailed) as e:
        return _fail(str(e), 2)
    try:
        ctl.run_blocking(on_tick=_progress)
    except KeyboardInterrupt:
        ctl.cancel()
    return _finish(ctl, opts.save, out)


def _take_option(args: List[str], name: str) -> Optional[str]:
    """Remove ``name VALUE`` (or ``name=VALUE``) from ``args``; return VALUE or ``None``."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if a.startswith(name + "="):
            del args[i]
            return a.split("=", 1)[1]
    return None


def register():
    global _handle
    if hasattr(bpy.utils, "register_cli_command"):
        _handle = bpy.utils.register_cli_command(COMMAND_ID, run)


def unregister():
    global _handle
    if _handle is not None:
        bpy.utils.unregister_cli_command(_handle)
        _handle = None
