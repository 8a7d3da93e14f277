"""Command line: ``python -m backend <subcommand> ...``.

Subcommands are modules that expose ``add_parser(subparsers)``; the parser they
return has ``func(args) -> int`` set with ``set_defaults(func=...)``. To add one,
append ``"module.path"`` to :data:`SUBCOMMANDS` (a missing optional module is skipped).

Exit codes: 0 success, 130 cancelled (SIGINT/SIGTERM/SIGHUP), 1 failure at run time,
2 bad arguments or bad input. On failure a JSON line
``{"event": "error", "message", "frame", "file"}`` goes to stdout and a one-line
reason to stderr; on cancel ``{"event": "cancelled", "written", "frame"}``.

Stdout carries JSON events only: :func:`main` keeps the real stdout for them and points
file descriptor 1 (and ``sys.stdout``) at stderr while the subcommand runs, so a
library that prints (the OpenEXR C++ library warns on stdout about a corrupt file)
cannot break the one-object-per-line protocol (:mod:`backend.events`).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import logging
import os
import sys
from typing import List, Optional

from . import events

#: modules (relative to this package) that provide ``add_parser(subparsers)``
SUBCOMMANDS = [".jobs.decompose_cli", ".jobs.restyle_cli", ".jobs.request_cli", ".jobs.metrics_cli",
               ".jobs.solve_cli", ".jobs.stmap_cli", ".farm.cli", ".jobs.models_cli"]


def _wrap(text: str, indent: str = "  ") -> str:
    import textwrap

    return textwrap.fill(text, width=88, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False)


def estimators_help() -> str:
    """``--help`` lines: each registered estimator with what it needs and its state."""
    from .catalog import describe_estimators

    return "\n".join(_wrap(_help_line(d)) for d in describe_estimators())


def renderers_help() -> str:
    """``--help`` lines: each registered renderer with what it needs and its state."""
    from .catalog import describe_renderers

    return "\n".join(_wrap(_help_line(d)) for d in describe_renderers())


def _help_line(d: dict) -> str:
    """One catalog row (:mod:`backend.catalog`) as a ``--help`` line."""
    licence = f" Licence: {d['licence']}." if d.get("licence") else ""
    return f"{d['name']}: {d['summary']} Needs: {d['needs']}.{licence} State: {d['state']}."


def prompt_words_help() -> str:
    """``--help`` lines: the embedded renderer's looks, their synonyms, intensity words, presets."""
    from .renderers.prompt import INTENSIFIERS, INTENSITY, LOOK_ORDER, PRESETS, SYNONYMS

    lines = []
    for look in LOOK_ORDER:
        syn = sorted(w for w, t in SYNONYMS.items() if t == look and w != look.replace("_", " ") and w != look)
        lines.append(_wrap(f"{look.replace('_', ' ')}: {', '.join(syn)}"))
    lines.append(_wrap("intensity (before a look): " + ", ".join(
        f"{w} {v:g}" for w, v in sorted(INTENSITY.items(), key=lambda kv: kv[1]))))
    lines.append(_wrap("amplifiers (before an intensity word): " + ", ".join(sorted(INTENSIFIERS))))
    lines.append(_wrap("presets: " + "; ".join(PRESETS)))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The full argparse parser with every available subcommand; ``--help`` lists the
    estimators and renderers (with what they need and their state) and the prompt words."""
    parser = argparse.ArgumentParser(
        prog="python -m backend", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="G-Buffer Editor backend: footage -> G-buffers (decompose), G-buffers + prompt -> "
                    "frames (restyle).\nRuns from any folder as 'python path/to/backend COMMAND ...'.",
        epilog="'python -m backend COMMAND --help' shows a command's options.\n\n"
               "progress: a progress bar on a terminal; JSON lines (one event per line on stdout) "
               "otherwise or with --json.")
    parser.add_argument("--json", action="store_true",
                        help="JSON lines on stdout even on a terminal (default: a progress bar there)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    epilogs = {"decompose": lambda: "estimators:\n" + estimators_help(),
               "restyle": lambda: ("renderers:\n" + renderers_help() + "\n\nprompt words of the embedded "
                                   "renderer (any order; 'at', 'with', 'the' ... are ignored):\n"
                                   + prompt_words_help())}
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(name, __package__)
        except ModuleNotFoundError as e:
            # only skip when the subcommand module itself is missing, not its imports
            if e.name and e.name.endswith(name.rsplit(".", 1)[-1]):
                continue
            raise
        p = mod.add_parser(sub)
        if p is not None:
            # also after the subcommand ('python -m backend decompose ... --json'); SUPPRESS
            # keeps the value given before the subcommand when it is not repeated after it
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                           help="JSON lines on stdout even on a terminal (also accepted before COMMAND)")
        if p is not None and p.prog.rsplit(" ", 1)[-1] in epilogs:
            p.formatter_class = argparse.RawDescriptionHelpFormatter
            if p.description:
                import textwrap

                p.description = textwrap.fill(p.description, width=88)
            p.epilog = epilogs[p.prog.rsplit(" ", 1)[-1]]()
    return parser


def subcommand_help(name: str, prog: Optional[str] = None) -> str:
    """The ``--help`` text of backend subcommand ``name`` (``prog`` replaces its usage name).

    Raises:
        KeyError: unknown subcommand.
    """
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = action.choices[name]
    if prog:
        p.prog = prog
    return p.format_help()


def _error_line(message: str, frame=None, file=None) -> None:
    events.emit({"event": "error", "message": message, "frame": frame,
                 "file": None if file is None else str(file)})
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (text a C/C++ library printed but not yet wrote)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None) if os.name != "nt" else ctypes.cdll.msvcrt
        libc.fflush(None)
    except Exception:  # noqa: BLE001 - best effort
        pass


class TerminalProgress:
    """Reporter for a terminal: a tqdm bar on stderr per job; other events are dropped
    (warnings reach the terminal through the ``gbuffer_editor`` logger)."""

    def __init__(self):
        self.bar = None

    def __call__(self, obj) -> None:
        kind = obj.get("event")
        if kind == "start":
            from tqdm import tqdm

            self.close()
            self.bar = tqdm(total=obj.get("total"), desc=obj.get("job", "job"), unit="frame", file=sys.stderr)
        elif kind == "progress" and self.bar is not None:
            self.bar.update(1)
        elif kind == "done":
            self.close()
            sys.stderr.write(final_line(obj) + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def final_line(done: dict) -> str:
    """The last line a terminal shows for a job's ``done`` event: ``decompose: wrote 12,
    skipped 0 of 12 frames in 8.1 s; output: /path`` (a resume shows what it skipped)."""
    job = done.get("job") or "job"
    wrote, skipped, total = done.get("written", 0), done.get("skipped", 0), done.get("total")
    of = f" of {total}" if total is not None else ""
    secs = done.get("elapsed_s")
    took = f" in {secs:.1f} s" if isinstance(secs, (int, float)) else ""
    return f"{job}: wrote {wrote}, skipped {skipped}{of} frames{took}; output: {done.get('out')}"


def _reporter_for(stream, force_json: bool = False):
    return TerminalProgress() if events.is_tty(stream) and not force_json else events.JsonLines(stream)


class _LowerLevelFormatter(logging.Formatter):
    """``warning: message`` (the level in lower case, like the other CLI messages)."""

    def format(self, record):
        record = logging.makeLogRecord(record.__dict__)
        record.levelname = record.levelname.lower()
        return super().format(record)


@contextlib.contextmanager
def _stderr_warnings():
    """Log records of the ``gbuffer_editor`` logger (job warnings) as ``warning: ...``
    lines on stderr while the command runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LowerLevelFormatter("%(levelname)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logger = events.log
    old_level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@contextlib.contextmanager
def json_stdout(force_json: bool = False):
    """Keep the real stdout for JSON events; send everything else printed to stderr.

    Duplicates file descriptor 1 and installs a reporter on it
    (:func:`backend.events.reporting`: JSON lines, or a progress bar when it is a
    terminal), then points fd 1 at fd 2 and ``sys.stdout`` at ``sys.stderr``: output of
    C libraries and stray ``print`` calls goes to stderr (the terminal, or the Blender
    worker's log). Job warnings are printed on stderr too. Everything is restored on
    exit. When stdout is not file descriptor 1 (e.g. replaced in-process), events go
    to that ``sys.stdout`` and only Python-level prints are sent to ``sys.stderr``.
    """
    try:
        if sys.stdout is None or sys.stdout.fileno() != 1 or sys.stderr is None:
            raise ValueError
        sys.stdout.flush()
        real = os.dup(1)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        if sys.stdout is None or sys.stderr is None:
            yield sys.stdout
            return
        old_stdout = sys.stdout
        sys.stdout = sys.stderr
        try:
            with events.reporting(_reporter_for(old_stdout, force_json)), _stderr_warnings():
                yield old_stdout
        finally:
            sys.stdout = old_stdout
        return
    ev = io.TextIOWrapper(io.FileIO(real, "w", closefd=False), encoding="utf-8",
                          errors="replace", line_buffering=True)
    old_stdout = sys.stdout
    try:
        sys.stderr.flush()
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        with events.reporting(_reporter_for(ev, force_json)), _stderr_warnings():
            yield ev
    finally:
        _flush_c_stdio()
        try:
            sys.stderr.flush()
            ev.flush()
        except (OSError, ValueError):
            pass
        sys.stdout = old_stdout
        os.dup2(real, 1)
        os.close(real)


def _command(argv: List[str]) -> Optional[str]:
    """The subcommand named in ``argv`` (its first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Optional[List[str]] = None, cancel=None) -> int:
    """Parse ``argv`` and run the subcommand; returns the process exit code.

    SIGINT/SIGTERM/SIGHUP cancel the job cleanly (:class:`backend.jobs.runner.SignalCancel`;
    the subcommand gets the event as ``args.cancel``). ``cancel``: an event already set
    by a signal that came while loading (``python -m backend`` installs its handler
    first thing); a job then stops before its first frame with ``cancelled``.
    """
    # the jobs never reach a model hub: models load from the local models folder (the
    # Hugging Face cache) only; downloads are the explicit step `python -m backend models
    # download` (or Blender's Preferences > Models), the one command left online
    if _command(sys.argv[1:] if argv is None else argv) != "models":
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from .jobs.runner import SignalCancel

    parser = build_parser()
    args = parser.parse_args(argv)
    with json_stdout(force_json=args.json), SignalCancel(cancel) as ev:
        args.cancel = ev
        if ev.is_set():  # cancelled while loading: nothing was started
            events.emit({"event": "cancelled", "written": 0, "frame": None})
            sys.stderr.write("cancelled before the job started\n")
            return 130
        return _run(args)


#: parsed arguments that name a file or folder: ``(dest, how the message names it)``
PATH_ARGS = (("out", "--out"), ("input", "INPUT"), ("gbuffer_dir", "GBUFFER_DIR"), ("reference", "--reference"),
             ("match_look", "--match-look"), ("cameras", "--cameras"), ("depth_anchors", "--depth-anchors"),
             ("mesh", "--mesh"))


def check_blank_paths(args) -> None:
    """Refuse an empty or blank path argument (``--out ""``: an empty shell variable in a
    farm script), which the file system would read as the current folder.

    Raises:
        ValueError: naming the argument (one line).
    """
    for dest, flag in PATH_ARGS:
        v = getattr(args, dest, None)
        if isinstance(v, str) and not v.strip():
            raise ValueError(f"{flag} {v!r}: an empty path (an empty shell variable?); name a file or folder")
    for v in getattr(args, "temp_dirs", None) or ():
        if isinstance(v, str) and not v.strip():
            raise ValueError(f"TEMP_DIR {v!r}: an empty path (an empty shell variable?); name a folder")


def _run(args) -> int:
    from .colour import ColourError
    from .contract import ContractError
    from .footage import FootageError
    from .jobs.runner import JobCancelled, JobError

    try:
        check_blank_paths(args)
        return int(args.func(args) or 0)
    except JobCancelled as e:
        events.emit({"event": "cancelled", "written": e.written, "frame": e.frame})
        sys.stderr.write(f"{e}; complete frames are kept\n")
        return 130
    except KeyboardInterrupt:
        events.emit({"event": "cancelled", "written": None, "frame": None})
        sys.stderr.write("cancelled\n")
        return 130
    except JobError as e:
        _error_line(str(e), e.frame, e.file)
        return 1
    except (FootageError, ColourError, ContractError) as e:
        _error_line(str(e).splitlines()[0], getattr(e, "frame", None), getattr(e, "file", None))
        return 2
    except (ValueError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        lines = str(msg).splitlines() or [""]
        _error_line(lines[0], getattr(e, "frame", None), getattr(e, "file", None))
        if len(lines) > 1:  # details (e.g. a prompt's whole vocabulary) after the one line
            sys.stderr.write("\n".join(lines[1:]) + "\n")
        return 2
    except OSError as e:
        _error_line(f"{e.filename or ''}: {e.strerror or e}".strip(": "), file=e.filename)
        return 1
    except MemoryError:
        _error_line("out of memory before the first frame (loading the footage or the model); try a smaller "
                    "--processing-resolution or close other programs")
        return 1
    except Exception as e:  # noqa: BLE001 - e.g. a model that is not available: one line, not a traceback
        text = str(e).splitlines()[0] if str(e) else ""
        _error_line(f"{type(e).__name__}: {text}".rstrip(": "))
        return 1
