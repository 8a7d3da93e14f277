"""``python -m backend run REQUEST.json``: run the job a request file describes.

The Blender add-on starts its workers this way: it builds a
:class:`backend.jobs.request.DecomposeRequest` or :class:`~backend.jobs.request.RestyleRequest`
from the scene and the preferences, writes it next to the job's log
(:meth:`~backend.jobs.request.DecomposeRequest.write`) and runs this command. The file
holds every setting, the precision preference included; progress, cancel and exit codes
are those of ``decompose`` / ``restyle``.
"""
from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``run`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "run", help="run the decompose or restyle a request file describes (the add-on's workers)",
        description="Run the job described by a request JSON file (written by the Blender add-on, or by "
                    "DecomposeRequest.write / RestyleRequest.write): {\"job\": \"decompose\" | \"restyle\", "
                    "\"request_version\": 1, ...settings}.")
    p.add_argument("request", metavar="REQUEST.json", help="the request file")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run the parsed ``run`` command; returns the exit code (0)."""
    from .request import DecomposeRequest, read_request

    req = read_request(args.request)
    if isinstance(req, DecomposeRequest):
        from .decompose import run_decompose

        run_decompose(req, cancel=getattr(args, "cancel", None))
    else:
        from .restyle import run_restyle

        run_restyle(req, cancel=getattr(args, "cancel", None))
    return 0
