"""``python -m backend solve INPUT --out cams.json``: the footage's camera from the footage
alone (the solve of ``decompose --camera auto``; :mod:`backend.multiview.autosolve`)."""
from __future__ import annotations

from .. import events
from ..arguments import cli_float
from ..multiview.autosolve import solve_footage, write_solve
from .decompose import parse_frames


def add_parser(subparsers):
    """Register ``solve``: the footage's camera from the footage alone (Camera: Auto's solve)."""
    p = subparsers.add_parser(
        "solve", help="solve the camera of a moving-camera clip (focal length unknown) -> cameras JSON",
        description="Track the footage and solve its camera (structure from motion; the focal length is "
                    "searched unless --focal is given). Exit 0 and the cameras JSON when the solve passes its "
                    "checks (parallax, reprojection error, a determined focal length), else exit 1 with one "
                    "line saying why. See docs/cameras.md.")
    p.add_argument("input", help="movie, image folder or pattern")
    p.add_argument("--out", required=True, help="cameras JSON to write (docs/cameras.md)")
    p.add_argument("--frames", help="inclusive range A-B of source frame numbers")
    p.add_argument("--focal", type=cli_float, default=None, metavar="PX",
                   help="the focal length in pixels at the footage's size, when known (then not searched)")
    p.add_argument("--refine-k1", action="store_true", help="also solve the radial distortion k1")
    p.add_argument("--colorspace", default=None, help="OpenColorIO name of the source colour space")
    p.set_defaults(func=_run_cli)
    return p


def _run_cli(args) -> int:
    first, last = parse_frames(args.frames)
    report = solve_footage(args.input, first=first, last=last, colorspace=args.colorspace,
                           focal_px=args.focal, refine_k1=args.refine_k1)
    events.emit(dict({"event": "camera_solve"}, **report.summary()))
    if not report.ok:
        events.emit({"event": "error", "message": f"{args.input}: camera solve refused: {report.reason}",
                     "frame": None, "file": str(args.input)})
        return 1
    for w in report.warnings:
        events.warning(w, file=args.input)
    path = write_solve(report, args.out)
    events.emit({"event": "done", "stage": "solve", "cameras": str(path), "message": report.line()})
    return 0
