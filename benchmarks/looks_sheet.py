"""Contact sheet of every look on one G-buffer frame: before (an older checkout) / after.

Usage::

    python benchmarks/looks_sheet.py GB_DIR FRAME OUT.jpg [--before OLD_REPO] [--width 320]

Rows: the source, then each look of :data:`LOOKS`; columns: "X" and "X at night", each as
rendered by ``OLD_REPO``'s embedded renderer (``git archive <commit> backend | tar -x -C
OLD_REPO``; run in a child process with ``PYTHONPATH=OLD_REPO``) and by this checkout's.
Without ``--before`` only this checkout's columns. sRGB previews
(:func:`backend.renderers.shading.preview_8bit`), JPEG quality 88.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LOOKS = ("heavy rain", "dense fog", "snow", "golden hour", "underwater")

_RENDER = r"""
import sys, numpy as np
from backend import contract
from backend.renderers.embedded import EmbeddedRenderer
from backend.renderers.shading import preview_8bit
f = contract.read_frame(sys.argv[1]); n = int(sys.argv[2]); prompts = sys.argv[4:]
r = EmbeddedRenderer()
np.savez_compressed(sys.argv[3], **{p: preview_8bit(r.render(f, p, frame_index=n - 1)) for p in prompts})
"""


def render(root: Path, exr: Path, number: int, prompts) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.npz"
        env = dict(os.environ, PYTHONPATH=str(root))
        subprocess.run([sys.executable, "-c", _RENDER, str(exr), str(number), str(out), *prompts],
                       check=True, env=env, cwd=tmp)
        with np.load(out) as z:
            return {k: z[k] for k in z.files}


def main(argv=None) -> int:
    import cv2

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gbuffer_dir")
    ap.add_argument("frame", type=int)
    ap.add_argument("out")
    ap.add_argument("--before", help="an older checkout's root (holding backend/)")
    ap.add_argument("--width", type=int, default=320)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from backend import contract
    from backend.renderers.shading import preview_8bit

    exr = contract.frame_path(a.gbuffer_dir, a.frame)
    prompts = [p for x in LOOKS for p in (x, f"{x} at night")]
    after = render(ROOT, exr, a.frame, prompts)
    before = render(Path(a.before), exr, a.frame, prompts) if a.before else None
    src = preview_8bit(contract.read_frame(exr).combined[..., :3])
    h0, w0 = src.shape[:2]
    tw, th = a.width, int(round(a.width * h0 / w0))

    def tile(img, label):
        t = cv2.resize(np.ascontiguousarray(img[..., ::-1]), (tw, th), interpolation=cv2.INTER_AREA)
        cv2.rectangle(t, (0, 0), (tw, 18), (0, 0, 0), -1)
        cv2.putText(t, label, (4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (255, 255, 255), 1, cv2.LINE_AA)
        return t

    cols = 4 if before else 2
    blank = np.zeros((th, tw, 3), np.uint8)
    rows = [np.concatenate([tile(src, "source")] + [blank] * (cols - 1), 1)]
    for x in LOOKS:
        cells = []
        for p in (x, f"{x} at night"):
            if before:
                cells.append(tile(before[p], f"{p} (before)"))
            cells.append(tile(after[p], f"{p} (after)" if before else p))
        rows.append(np.concatenate(cells, 1))
    cv2.imwrite(a.out, np.concatenate(rows, 0), [cv2.IMWRITE_JPEG_QUALITY, 88])
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
