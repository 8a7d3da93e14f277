"""``python -m backend restyle ...``: the command line of :func:`backend.jobs.restyle.restyle`."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Tuple

from ..arguments import cli_float, cli_int
from ..renderers.base import DEFAULT_RENDERER
from .options import key_value
from .request import RestyleRequest
from .restyle import run_restyle

#: options that only diffusion renderers take; the embedded renderer ignores them with a note
DIFFUSION_OPTIONS = ("device", "seed", "steps", "strength")


def option_arg(text: str) -> Tuple[str, Any]:
    """argparse type of ``--option KEY=VALUE``: ``(key with - as _, JSON value or the text)``
    (:func:`backend.jobs.options.key_value`)."""
    try:
        return key_value(text, "--option")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``restyle`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "restyle", help="G-buffer EXR sequence + prompt -> re-rendered frames",
        description="Re-render a G-buffer contract sequence with a prompt. The embedded "
                    "renderer understands looks such as 'dense fog', 'murky underwater at "
                    "night', 'heavy rain', 'golden hour', 'snow', 'overcast'; use "
                    "--renderer controlnet (per frame) or wan-vace (video windows) for "
                    "free-form prompts.")
    p.add_argument("gbuffer_dir", help="folder of gbuffer_NNNN.exr (possibly edited)")
    p.add_argument("--prompt", default="", help="look to render (default: none: the footage with the material edits only; "
                   "'relight': the daylight relight that was the default before)")
    p.add_argument("--out", required=True, help="output folder (must not overlap the input)")
    p.add_argument("--renderer", default=DEFAULT_RENDERER, help="renderer name (default: %(default)s)")
    p.add_argument("--frames", help="inclusive frame numbers A-B (also A- or A), as in the G-buffer file names "
                   "(the source frame numbers, e.g. 1001-1100)")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (diffusion renderers; default auto)")
    p.add_argument("--seed", type=cli_int, default=None, help="seed (diffusion renderers)")
    p.add_argument("--steps", type=cli_int, default=None, help="denoising steps (diffusion renderers)")
    p.add_argument("--strength", type=cli_float, default=None,
                   help="diffusion renderers: img2img strength in (0, 1] (controlnet); VACE "
                        "conditioning scale in [0, 2] (wan-vace)")
    p.add_argument("--option", action="append", type=option_arg, default=[], metavar="KEY=VALUE",
                   help="renderer option (JSON value), repeatable, e.g. --option source_light=0")
    p.add_argument("--reference", default=None, metavar="DIR",
                   help="the unedited G-buffer folder GBUFFER_DIR was edited from: source "
                        "shading is recovered against its albedo, so albedo edits act fully")
    p.add_argument("--match-look", default=None, metavar="REF",
                   help="reference clip, image folder or image: align the output's colour statistics "
                        "to it (Monge-Kantorovich linear transfer, one transform per shot)")
    p.add_argument("--lights", default=None, metavar="FILE",
                   help="lights file (JSON, docs/lights.md): add the direct light of its point, spot, area "
                        "and sun lights (Blender's units, shadows from the depth buffer) to every frame")
    p.add_argument("--no-mp4", action="store_true", help="skip the MP4 preview")
    p.add_argument("--overwrite", action="store_true",
                   help="when --out holds frames of an earlier restyle with other settings (prompt, "
                        "renderer, edited G-buffers), remove them, their previews and manifest first; "
                        "without it that is refused. Frames with the same settings are kept (resume)")
    from .decompose_cli import add_farm_chunk_args

    add_farm_chunk_args(p)
    p.set_defaults(func=run)
    return p


def kwargs(args) -> dict:
    """Keyword arguments of :func:`restyle` (after the folders and the prompt) from parsed args."""
    opts = dict(args.option)
    for key in DIFFUSION_OPTIONS:
        v = getattr(args, key)
        if v is None:
            continue
        if args.renderer == DEFAULT_RENDERER:  # CPU, deterministic: nothing to set
            sys.stderr.write(f"note: --{key} is ignored by the {args.renderer} renderer\n")
            continue
        opts[key] = v
    return dict(renderer=args.renderer, renderer_options=opts, frames=args.frames, mp4=not args.no_mp4,
                reference_dir=args.reference, match_look=args.match_look, overwrite=args.overwrite,
                warmup=getattr(args, "warmup", None), manifest_part=getattr(args, "manifest_part", False),
                lights=getattr(args, "lights", None))


def request(args) -> RestyleRequest:
    """The :class:`backend.jobs.request.RestyleRequest` of parsed ``restyle`` arguments
    (validated: ``ValueError`` naming the option)."""
    return RestyleRequest(args.gbuffer_dir, args.out, args.prompt, **kwargs(args))


def run(args) -> int:
    """Run the parsed ``restyle`` command; returns the exit code (0)."""
    run_restyle(request(args), cancel=getattr(args, "cancel", None))
    return 0
