"""``python -m backend decompose ...``: the command line of :func:`backend.jobs.decompose.decompose`."""
from __future__ import annotations

import argparse

from .. import geometry
from ..decomposer import DEFAULT_ESTIMATOR, DEFAULT_STRENGTH, MIN_RESOLUTION
from ..multiview.shot import MultiViewOptions
from .decompose import decompose, parse_options, run_decompose  # noqa: F401  (decompose: its former import)
from .request import DecomposeRequest


def resolution_arg(text: str) -> int:
    """argparse type of ``--processing-resolution``: 0 (full size) or an integer >= 16."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v != 0 and v < MIN_RESOLUTION:
        raise argparse.ArgumentTypeError(
            f"{v} is too small: use 0 (full size) or at least {MIN_RESOLUTION} pixels")
    return v


def add_farm_chunk_args(p: argparse.ArgumentParser) -> None:
    """``--warmup K`` and ``--manifest-part`` (farm chunks; decompose and restyle)."""
    g = p.add_argument_group("farm chunk", "How a farm runs one chunk of a shot (see docs/farm_ray.md)")
    g.add_argument("--warmup", type=int, default=None, metavar="K",
                   help="temporal state starts fresh K frames before the first of --frames (clamped to the "
                        "clip's first frame); they are computed, never written; never seeds from another "
                        "chunk's file. Enters the settings hash. Default: off (continue from the previous "
                        "frame's file)")
    g.add_argument("--manifest-part", action="store_true",
                   help="no lock: write the chunk's manifest part OUT/.gbuffer_parts/A-B.json (atomic) "
                        "instead of manifest.json; 'python -m backend farm merge OUT' assembles it")


def add_anchor_args(p: argparse.ArgumentParser) -> None:
    """``--depth-anchors FILE`` (decompose)."""
    p.add_argument("--depth-anchors", metavar="FILE", default=None,
                   help="a shot's depth anchors ('python -m backend farm anchors' writes "
                        "OUT/.gbuffer_depth_anchors.npz): each frame's relative depth is aligned to its "
                        "anchor alone, so farm chunks and an unchunked run with the same file agree exactly. "
                        "Enters the settings hash")


def add_parser(subparsers, name: str = "decompose", help: str = "footage -> G-buffer EXR sequence",
               description: str = "Decompose footage into a G-buffer contract sequence (multilayer EXR per "
                                  "frame).") -> argparse.ArgumentParser:
    """Register the ``decompose`` subcommand (or another command taking decompose's
    options, e.g. ``farm anchors``) on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(name, help=help, description=description)
    p.add_argument("input", help="movie, image, image folder, or pattern (shot_####.png / shot_%%04d.png)")
    p.add_argument("--out", required=True, help="output folder (must not overlap the input)")
    p.add_argument("--frames", help="inclusive range A-B (also A- or A) of source frame numbers: 1..N for "
                   "a movie, the numbers in the file names for an image sequence (e.g. 1001-1100)")
    p.add_argument("--estimator", default=DEFAULT_ESTIMATOR, help="estimator name (default: %(default)s)")
    p.add_argument("--processing-resolution", "--max-size", dest="processing_resolution", type=resolution_arg,
                   default=None, metavar="N",
                   help=f"long side in pixels at which the estimator computes, at least {MIN_RESOLUTION}; "
                        "0 = full size; default: the estimator's own (embedded: 192, its maximum; "
                        "marigold: 768). Output is always full size. --max-size is the old name")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: auto)")
    p.add_argument("--estimator-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra estimator option, repeatable; VALUE is JSON when it parses "
                        "(e.g. num_inference_steps=4, normals=null), else a string "
                        "(e.g. depth=/models/marigold-depth)")
    p.add_argument("--stabilize", action="store_true",
                   help="temporal stabilisation with optical flow (flicker metric in manifest.json)")
    p.add_argument("--stabilize-strength", type=float, default=DEFAULT_STRENGTH, metavar="W",
                   help="history weight for --stabilize, in [0, 1) (default: %(default)s)")
    p.add_argument("--colorspace", default=None,
                   help="OpenColorIO name of the source colour space (default: sRGB; EXR: linear)")
    _add_studio_arguments(p)
    p.add_argument("--overwrite", action="store_true",
                   help="when --out holds frames of an earlier decompose with other settings, "
                        "remove them (and its manifest) first; without it that is refused. "
                        "Frames with the same settings are always kept (resume)")
    p.add_argument("--no-albedo-detail", dest="albedo_detail", action="store_false",
                   help="keep the estimator's upsampled albedo as is (default: restore the "
                        "source's fine detail in it when the estimator ran below full size)")
    edges = p.add_mutually_exclusive_group()
    edges.add_argument("--depth-edges", dest="depth_edges", action="store_true", default=None,
                       help="refine the depth at full size so its edges lie on the frame's edges "
                            "(opt-in, default off: mixed results on real footage; docs/decompose.md)")
    edges.add_argument("--no-depth-edges", dest="depth_edges", action="store_false",
                       help="keep the depth as estimated or measured")
    p.add_argument("--hfov", type=float, default=geometry.DEFAULT_HFOV_DEG,
                   help="assumed horizontal field of view in degrees (default: %(default)s)")
    add_farm_chunk_args(p)
    add_anchor_args(p)
    mv = p.add_argument_group(
        "measured geometry (camera-tracked shots)",
        "With --cameras, depth is measured from parallax between frames (plane-sweep stereo) and "
        "fused with the estimator's depth; see docs/cameras.md")
    mv.add_argument("--cameras", metavar="PATH",
                    help="camera file: our JSON (frames by source frame number; Blender's Track & Solve "
                         "writes it) or a COLMAP text model folder (cameras.txt + images.txt; frames by "
                         "image file name)")
    mv.add_argument("--camera", choices=("auto", "none"), default="none",
                    help="auto: without --cameras, solve the camera from the footage (focal length unknown) "
                         "and measure depth with it when the solve passes its checks (parallax, error, a "
                         "determined focal length; written as OUT_cameras.json next to --out), else the "
                         "single-image path with a one-line note. none (default): single-image unless "
                         "--cameras")
    mv.add_argument("--mv-neighbours", type=int, default=MultiViewOptions.neighbours, metavar="K",
                    help="frames each frame is matched against (default: %(default)s)")
    mv.add_argument("--mv-window", type=int, default=MultiViewOptions.window, metavar="N",
                    help="frames searched for neighbours on each side (default: %(default)s)")
    mv.add_argument("--mv-resolution", type=int, default=MultiViewOptions.processing_width, metavar="W",
                    help="width in pixels of the stereo matching (default: %(default)s)")
    mv.add_argument("--mv-densify", action="store_true",
                    help="piecewise-planar densification of the measured depth along image segments "
                         "(off by default; see docs/cameras.md)")
    mv.add_argument("--mv-surface", action="store_true",
                    help="render each frame's depth back from the shot's fused surface so far (a static "
                         "point gets one depth; slower; off by default)")
    mv.add_argument("--mesh", metavar="OUT.ply",
                    help="with --cameras: also fuse the measured depth of every computed frame into one "
                         "surface (TSDF) and write it as a PLY mesh in the cameras' world (import it into "
                         "the tracked Blender scene as a shadow catcher / holdout); never written over a file")
    p.set_defaults(func=run)
    return p


def _add_studio_arguments(p) -> None:
    """The studio-convention options (issue 38; docs/studio-pipeline.md)."""
    p.add_argument("--start-frame", type=int, default=None, metavar="N",
                   help="a movie's first frame number (e.g. 1001 for a studio plate): file names, --frames and "
                        "the header timecode count from it (default 1; image sequences keep their file numbers)")
    p.add_argument("--timecode", default=None, metavar="HH:MM:SS:FF",
                   help="the timecode of the source's first frame (non-drop-frame); default: the movie's "
                        "own timecode tag when it has one, else counted from the frame number")
    p.add_argument("--handles", type=int, default=0, metavar="N",
                   help="the first and last N frames written are handles: the manifest's 'cut' gives the "
                        "cut in/out inside them and each frame's header says whether it is a handle")
    p.add_argument("--passes", default=None, metavar="LIST",
                   help="optional passes, comma-separated: 'vector' (motion vectors in Blender's Vector "
                        "convention, from optical flow), 'position' (the Position pass)")
    p.add_argument("--layout", default="gbuffer", choices=("gbuffer", "nuke"),
                   help="channel layout: gbuffer (default: GBuffer.<Pass>.<Chan>, one part per pass) or nuke "
                        "(R G B A, depth.Z, normal.XYZ, albedo.RGB ... in one part; docs/gbuffer-contract.md)")
    p.add_argument("--working-space", default="rec709", choices=("rec709", "acescg"),
                   help="colour space of the Combined and Albedo passes in the files: rec709 (default, "
                        "scene-linear Rec.709) or acescg (ACEScg, AP1); stated in the headers either way")


def kwargs(args) -> dict:
    """Keyword arguments of :func:`decompose` (after ``input`` and ``out``) from parsed args."""
    return dict(
        frames=args.frames, estimator=args.estimator,
        estimator_options=parse_options(args.estimator_option),
        processing_resolution=args.processing_resolution, device=args.device,
        stabilize=args.stabilize, strength=args.stabilize_strength,
        colorspace=args.colorspace, hfov_deg=args.hfov, albedo_detail=args.albedo_detail,
        depth_edges=args.depth_edges,
        overwrite=args.overwrite, cameras=args.cameras, mesh=getattr(args, "mesh", None),
        camera=getattr(args, "camera", "none"),
        multiview={"neighbours": args.mv_neighbours, "window": args.mv_window,
                   "processing_width": args.mv_resolution, "densify": args.mv_densify,
                   "surface": args.mv_surface},
        warmup=getattr(args, "warmup", None), manifest_part=getattr(args, "manifest_part", False),
        depth_anchors=getattr(args, "depth_anchors", None),
        start_frame=getattr(args, "start_frame", None), handles=getattr(args, "handles", 0),
        timecode=getattr(args, "timecode", None),
        passes=getattr(args, "passes", None), layout=getattr(args, "layout", None),
        working_space=getattr(args, "working_space", None),
    )


def request(args) -> DecomposeRequest:
    """The :class:`backend.jobs.request.DecomposeRequest` of parsed ``decompose`` arguments
    (validated: ``ValueError`` naming the option)."""
    return DecomposeRequest(args.input, args.out, **kwargs(args))


def run(args) -> int:
    """Run the parsed ``decompose`` command; returns the exit code (0)."""
    run_decompose(request(args), cancel=getattr(args, "cancel", None))
    return 0
