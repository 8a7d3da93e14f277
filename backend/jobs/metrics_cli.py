"""``python -m backend metrics A B``: colour distance and CMMD between two sets of frames
(:mod:`backend.metrics`); prints a small table on stderr and a ``metrics`` event (a JSON line on stdout)."""
from __future__ import annotations

import argparse
import sys

from .. import events
from ..arguments import cli_int


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``metrics`` subcommand."""
    p = subparsers.add_parser(
        "metrics", help="colour distance and CMMD between two sets of frames",
        description="Compare set A (e.g. a restyle output folder) with set B (reference footage): "
                    "colour-distribution distance (2-Wasserstein of Gaussians in log2 RGB) and "
                    "per-channel means, always; CMMD (CLIP embeddings + Gaussian-kernel MMD, "
                    "Jayasumana et al. 2024) when --clip names a local CLIP model folder.")
    p.add_argument("set_a", help="movie, image folder (e.g. a restyle output), pattern or image")
    p.add_argument("set_b", help="the reference set (same kinds)")
    p.add_argument("--clip", default=None, metavar="DIR",
                   help="local folder of a CLIP model (transformers CLIPVisionModelWithProjection, "
                        "model.safetensors or pytorch_model.bin; the paper's is "
                        "openai/clip-vit-large-patch14-336)")
    p.add_argument("--max-frames", type=cli_int, default=None, help="at most this many frames per set")
    p.add_argument("--device", default="cpu", help="torch device for CLIP (default cpu)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..metrics import cmmd, colour_measures

    res = colour_measures(args.set_a, args.set_b, max_frames=args.max_frames)
    if args.clip:
        res["cmmd"] = round(cmmd(args.set_a, args.set_b, args.clip, max_frames=args.max_frames,
                                 device=args.device), 6)
    else:
        res["cmmd"] = None
    for k, v in res.items():
        sys.stderr.write(f"{k:12s} {v if v is not None else 'not computed (no --clip model folder)'}\n")
    events.emit({"event": "metrics", **res})  # the CLI's JSON-lines stdout
    return 0
