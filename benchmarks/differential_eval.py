"""Issue 39's bars for differential re-rendering, on decomposed real clips.

For every frame of each G-buffer folder given (decomposed by ``python -m backend
decompose CLIP --out DIR``, the default embedded estimator):

* **identity**: the embedded renderer with no prompt and no edits against the frame's
  ``Combined``, PSNR (dB) of linear RGB clipped to [0, 1], through half float as the
  restyle job stores it; bar >= 45 dB on every frame.
* **box edit** with the unedited frame as ``reference``: roughness 0.05 in a centred box
  (a quarter of each side) and albedo x0.5 in the lower-left corner box (same size,
  1/16 of the side from the corner): PSNR outside both boxes grown by 16 px (bar >= 40 dB)
  and the mean luminance inside the albedo box over the footage's (bar 0.4-0.65).

Usage::

    python benchmarks/differential_eval.py /tmp/gb/boat /tmp/gb/dolphins ... \
        [--every N] [--json benchmarks/results/differential.json] [--prompt relight]

``--prompt`` renders that look instead of no prompt (``relight``: the old default,
for the before/after figures). Not a timed test: speed is in benchmarks/differential_speed.py.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend import contract  # noqa: E402
from backend.renderers.embedded import EmbeddedRenderer  # noqa: E402

Y709 = np.array([0.2126, 0.7152, 0.0722], np.float32)


def psnr(a: np.ndarray, b: np.ndarray, mask=None) -> float:
    a = np.clip(a[..., :3], 0, 1)
    b = np.clip(b[..., :3], 0, 1)
    d = (a - b) ** 2
    mse = float(d[mask].mean() if mask is not None else d.mean())
    return float("inf") if mse <= 0 else 10.0 * np.log10(1.0 / mse)


def stored(rgb: np.ndarray) -> np.ndarray:
    return contract.half_to_float32(contract.to_half(np.clip(rgb, 0.0, 65000.0)))


def boxes(h: int, w: int):
    """(roughness box, albedo box) as (y0, y1, x0, x1)."""
    bh, bw = h // 4, w // 4
    centre = (h // 2 - bh // 2, h // 2 - bh // 2 + bh, w // 2 - bw // 2, w // 2 - bw // 2 + bw)
    corner = (h - h // 16 - bh, h - h // 16, w // 16, w // 16 + bw)
    return centre, corner


def box_edit(f: contract.GBufferFrame) -> contract.GBufferFrame:
    """Roughness 0.05 in the centred box, albedo x0.5 in the corner box."""
    h, w = f.shape
    (a0, a1, b0, b1), (c0, c1, d0, d1) = boxes(h, w)
    rough = f.roughness.copy()
    rough[a0:a1, b0:b1] = 0.05
    alb = f.albedo.copy()
    alb[c0:c1, d0:d1] *= 0.5
    return replace(f, roughness=rough, albedo=alb)


def outside_mask(h: int, w: int, grow: int = 16) -> np.ndarray:
    m = np.ones((h, w), bool)
    for y0, y1, x0, x1 in boxes(h, w):
        m[max(0, y0 - grow):y1 + grow, max(0, x0 - grow):x1 + grow] = False
    return m


def evaluate(folder: Path, every: int = 1, prompt: str = "", lighting: bool = True) -> dict:
    r = EmbeddedRenderer()
    files = contract.list_frames(folder)
    nums = sorted(files)[::every]
    if lighting:
        from backend.renderers.differential import FIT_FRAMES, estimate_plate_lighting

        pick = [nums[int(i)] for i in np.linspace(0, len(nums) - 1, min(FIT_FRAMES, len(nums)))]
        r.plate_lighting = estimate_plate_lighting([contract.read_frame(files[n]) for n in pick], pick)
    ident, outside, ratio = [], [], []
    for n in nums:
        f = contract.read_frame(files[n])
        src = f.combined[..., :3]
        out = stored(r.render(f, prompt, frame_index=n - 1))
        ident.append(psnr(out, src))
        e = box_edit(f)
        out_e = stored(r.render(e, prompt, frame_index=n - 1, reference=f))
        h, w = f.shape
        outside.append(psnr(out_e, src, outside_mask(h, w)))
        c0, c1, d0, d1 = boxes(h, w)[1]
        lum_src = float((np.clip(src[c0:c1, d0:d1], 0, None) @ Y709).mean())
        lum_out = float((out_e[c0:c1, d0:d1] @ Y709).mean())
        ratio.append(lum_out / max(lum_src, 1e-6))
    fin = [x for x in ident if np.isfinite(x)]
    return {"folder": str(folder), "frames": len(nums), "prompt": prompt,
            "identity_db_min": min(ident), "identity_db_mean": float(np.mean(fin)) if fin else float("inf"),
            "identity_frames_below_45": int(sum(x < 45 for x in ident)),
            "outside_db_min": min(outside), "outside_frames_below_40": int(sum(x < 40 for x in outside)),
            "albedo_box_ratio_min": min(ratio), "albedo_box_ratio_max": max(ratio)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--prompt", default="")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = []
    for folder in a.folders:
        row = evaluate(folder, a.every, a.prompt)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
        lines = ["# Differential re-rendering: issue 39's bars", "",
                 f"`python benchmarks/differential_eval.py {' '.join(str(f) for f in a.folders)}`"
                 f"{' --prompt ' + repr(a.prompt) if a.prompt else ''}; every {a.every} frame(s).", "",
                 "| folder | frames | no edit: min dB (bar 45) | box edit outside +16 px: min dB (bar 40) "
                 "| albedo x0.5 box / footage (bar 0.4-0.65) |", "|---|---:|---:|---:|---|"]
        for r in rows:
            lines.append(f"| {Path(r['folder']).name} | {r['frames']} | {r['identity_db_min']:.1f} | "
                         f"{r['outside_db_min']:.1f} | {r['albedo_box_ratio_min']:.3f}-{r['albedo_box_ratio_max']:.3f} |")
        lines += ["", "inf: bit-exact (the no-edit output is the footage; pixels outside an edit are untouched)."]
        a.json.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
