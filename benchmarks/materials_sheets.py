"""Contact sheets of the shared clips' materials (issue 25): per clip, the first and the
middle frame as rows of source | albedo | roughness | metallic, each panel at the
frame's full size (the shipped Decompose path: ``Decomposer("embedded")``), and the
same for the network albedo as on main before issue 25 (``--before``).

Usage: ``.venv/bin/python benchmarks/materials_sheets.py --out /tmp/sheets [--before]``
(writes ``<clip>.png``; sRGB for display, roughness/metallic as grey levels 0..1).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLIPS = ("boat", "bikes", "dolphins", "phone_office")


def frames_of(path: Path, picks=(0, 0.5)):
    from backend.footage import open_footage

    with open_footage(path) as f:
        frames = list(f)
    idx = sorted({min(len(frames) - 1, int(p * (len(frames) - 1))) for p in picks})
    return [(i, frames[i].rgb) for i in idx]


def sheet(rows):
    from backend.colour import linear_to_srgb

    out = []
    for rgb, f in rows:
        grey = lambda a: np.repeat(np.clip(a, 0, 1)[..., None], 3, -1)
        out.append(np.concatenate([linear_to_srgb(np.clip(rgb, 0, 1)), linear_to_srgb(f.albedo),
                                   grey(f.roughness), grey(f.metallic)], 1))
    return (np.concatenate(out, 0) * 255 + 0.5).astype(np.uint8)


def main(argv=None):
    import cv2

    from backend.decomposer import Decomposer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--footage", type=Path, default=Path(os.environ.get("GBUFFER_SHARED_DIR", ROOT.parent / "shared")) / "footage")
    ap.add_argument("--before", action="store_true", help="the network albedo (main before issue 25)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    opts = {"albedo": "network"} if a.before else {}
    for clip in CLIPS:
        rows = []
        for i, rgb in frames_of(a.footage / f"{clip}.mp4"):
            d = Decomposer("embedded", estimator_options=opts)
            f = d.frame(rgb)
            rows.append((rgb, f))
            print(clip, i, f.meta["provenance"], f.meta["pass_models"]["albedo"])
        cv2.imwrite(str(a.out / f"{clip}.png"), sheet(rows)[..., ::-1])


if __name__ == "__main__":
    main()
