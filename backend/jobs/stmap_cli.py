"""``python -m backend stmap CAMERAS --out DIR``: ST-maps of a solved lens
(:mod:`backend.multiview.stmap`)."""
from __future__ import annotations

from .. import events
from ..arguments import cli_int


def add_parser(subparsers):
    """Register ``stmap``: undistort / redistort ST-maps of a camera file's lens."""
    p = subparsers.add_parser(
        "stmap", help="write undistort/redistort ST-maps (float EXR) of a camera file's lens",
        description="Write stmap_undistort.exr and stmap_redistort.exr (R = s, G = t from the lower-left "
                    "corner, Nuke's STMap convention) for the lens of a camera file (docs/cameras.md). "
                    "Existing files are never written over.")
    p.add_argument("cameras", help="camera file (our JSON or a COLMAP text model folder)")
    p.add_argument("--out", required=True, help="folder for the two maps")
    p.add_argument("--frame", type=cli_int, default=None,
                   help="frame whose camera gives the lens (default: the first with distortion)")
    p.set_defaults(func=_run_cli)
    return p


def _run_cli(args) -> int:
    from ..multiview.camera_files import read_cameras
    from ..multiview.cameras import CameraError
    from ..multiview.stmap import write_st_maps

    cams = read_cameras(args.cameras).cameras
    if args.frame is not None:
        if args.frame not in cams:
            raise ValueError(f"{args.cameras}: no camera for frame {args.frame}")
        cam = cams[args.frame]
    else:
        cam = next((c for c in cams.values() if c.has_distortion), None)
        if cam is None:
            raise CameraError(f"{args.cameras}: no camera with lens distortion; nothing to map", file=args.cameras)
    paths = write_st_maps(cam, args.out)
    events.emit({"event": "done", **{k: str(v) for k, v in paths.items()}})
    return 0
