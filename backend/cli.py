"""Command line: ``python -m backend <subcommand> ...``.

Subcommands are modules that expose ``add_parser(subparsers)``; the parser they
return has ``func(args) -> int`` set with ``set_defaults(func=...)``. To add one,
append ``"module.path"`` to :data:`SUBCOMMANDS` (a missing optional module is skipped).

Exit codes: 0 success, 130 cancelled (SIGINT/SIGTERM), 1 failure at run time,
2 bad arguments or bad input. On failure a JSON line
``{"event": "error", "message", "frame", "file"}`` goes to stdout and a one-line
reason to stderr; on cancel ``{"event": "cancelled", "written", "frame"}``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import List, Optional

#: modules (relative to this package) that provide ``add_parser(subparsers)``
SUBCOMMANDS = [".jobs.decompose", ".jobs.restyle"]


def build_parser() -> argparse.ArgumentParser:
    """The full argparse parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="python -m backend", description="G-Buffer Editor backend")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(name, __package__)
        except ModuleNotFoundError as e:
            # only skip when the subcommand module itself is missing, not its imports
            if e.name and e.name.endswith(name.rsplit(".", 1)[-1]):
                continue
            raise
        mod.add_parser(sub)
    return parser


def _error_line(message: str, frame=None, file=None) -> None:
    sys.stdout.write(json.dumps({"event": "error", "message": message, "frame": frame,
                                 "file": None if file is None else str(file)}) + "\n")
    sys.stdout.flush()
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def main(argv: Optional[List[str]] = None) -> int:
    """Parse ``argv`` and run the subcommand; returns the process exit code."""
    from .colour import ColourError
    from .contract import ContractError
    from .footage import FootageError
    from .jobs.runner import JobCancelled, JobError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except JobCancelled as e:
        sys.stdout.write(json.dumps({"event": "cancelled", "written": e.written, "frame": e.frame}) + "\n")
        sys.stdout.flush()
        sys.stderr.write(f"{e}; complete frames are kept\n")
        return 130
    except KeyboardInterrupt:
        sys.stdout.write(json.dumps({"event": "cancelled", "written": None, "frame": None}) + "\n")
        sys.stderr.write("cancelled\n")
        return 130
    except JobError as e:
        _error_line(str(e), e.frame, e.file)
        return 1
    except (FootageError, ColourError, ContractError) as e:
        _error_line(str(e).splitlines()[0])
        return 2
    except (ValueError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        _error_line(str(msg).splitlines()[0])
        return 2
    except OSError as e:
        _error_line(f"{e.filename or ''}: {e.strerror or e}".strip(": "), file=e.filename)
        return 1
    except Exception as e:  # noqa: BLE001 - e.g. a model that is not available: one line, not a traceback
        text = str(e).splitlines()[0] if str(e) else ""
        _error_line(f"{type(e).__name__}: {text}".rstrip(": "))
        return 1
