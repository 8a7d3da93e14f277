"""Contact sheets of decompose outputs (issue 33): ``source | depth | confidence | no-surface``
at full size, one row per frame, from a G-buffer folder.

Usage: ``.venv/bin/python benchmarks/issue33_sheets.py GBUFFER_DIR OUT.png [FRAME ...]``
(frame numbers of the files; default: first, middle, last). Depth is shown as log depth,
near = bright, over the frame's surface pixels; Confidence as grey (0 black, 1 white);
the no-surface mask (Confidence 0) in red over the source.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend import contract  # noqa: E402
from backend.colour import linear_to_srgb  # noqa: E402


def row(fr: contract.GBufferFrame) -> np.ndarray:
    src = (np.clip(linear_to_srgb(np.clip(fr.combined[..., :3], 0, 1)), 0, 1) * 255).astype(np.uint8)
    surf = contract.surface_mask(fr)
    d = np.log(fr.depth)
    vals = d[surf] if surf.any() else d.ravel()
    lo, hi = np.percentile(vals, [1, 99])
    dn = np.clip(1.0 - (d - lo) / max(hi - lo, 1e-6), 0, 1)
    dn[~surf] = 0.0
    depth = (np.repeat(dn[..., None], 3, -1) * 255).astype(np.uint8)
    c = fr.confidence if fr.confidence is not None else np.ones(fr.shape, np.float32)
    conf = (np.repeat(np.clip(c, 0, 1)[..., None], 3, -1) * 255).astype(np.uint8)
    over = src.copy()
    over[~surf] = (0.45 * over[~surf] + np.array([140, 0, 0])).astype(np.uint8)
    gap = np.full((src.shape[0], 6, 3), 255, np.uint8)
    return np.concatenate([src, gap, depth, gap, conf, gap, over], axis=1)


def main(argv) -> int:
    import cv2

    folder, out = Path(argv[0]), Path(argv[1])
    files = sorted(folder.glob("gbuffer_*.exr"))
    def number(f):
        return int(f.stem.rsplit("_", 1)[1])

    nums = [int(a) for a in argv[2:]] or [number(f) for f in (files[0], files[len(files) // 2], files[-1])]
    rows = [row(contract.read_frame(contract.frame_path(folder, n))) for n in nums]
    sep = np.full((6, rows[0].shape[1], 3), 255, np.uint8)
    sheet = np.concatenate([x for r in rows for x in (r, sep)][:-1], axis=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), sheet[..., ::-1])
    print(out, sheet.shape)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
