"""Look quality on real footage (issue 28): night level, frame border, snow on water, flicker.

Usage::

    python benchmarks/looks_quality.py GB_BOAT GB_DOLPHINS [--frames 1-8] [--json OUT.json]
        [--sheet DIR]

``GB_*`` are G-buffer folders decomposed from ``shared/footage/boat.mp4`` and
``dolphins.mp4`` with the default (embedded) estimator, e.g.
``python -m backend decompose ../shared/footage/boat.mp4 --out /tmp/gb_boat --frames 1-8``.
Every look and "X at night" is rendered on every frame; measured per clip:

* ``mean``: mean linear luminance (Rec.709 Y) over all frames;
* ``p99``: 99th percentile of the sRGB luma (Rec.709 weights on sRGB-encoded, clipped
  values) in 0..255;
* ``border``: worst over frames and sides of ``mean(outer 4 px) / mean(next 8 px) - 1``
  on luminance (the ring test of :func:`border_excess`);
* ``flicker``: the restyle job's metric (:mod:`backend.jobs.flicker`) over consecutive
  frames, and the source's;
* ``snow_on_water``: mean snow cover inside ``tests/data/boat_water_mask.json`` on
  boat frame 8 (only for the boat clip and looks with snow).

Timing is not measured here. Results go to stdout (a table) and ``--json``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend import contract  # noqa: E402
from backend.colour import linear_to_srgb  # noqa: E402
from backend.jobs import flicker as flick  # noqa: E402
from backend.renderers.embedded import EmbeddedRenderer, snow_cover_of  # noqa: E402

LOOKS = ("heavy rain", "dense fog", "snow", "golden hour", "underwater")
Y709 = np.array([0.2126, 0.7152, 0.0722], np.float32)


def luminance(rgb):
    return rgb[..., :3] @ Y709


def p99_luma(rgb):
    s = linear_to_srgb(np.clip(rgb[..., :3], 0.0, 1.0))
    return float(np.percentile(s @ Y709, 99) * 255.0)


def border_excess(img, outer: int = 4, inner: int = 8):
    """Per side, ``mean(outer px) / mean(next inner px) - 1`` of ``img`` (H x W [x C];
    C is averaged). Returns ``{side: value}``; a lighter border gives positive values."""
    a = np.asarray(img, np.float32)
    if a.ndim == 3:
        a = a.mean(-1)
    o, i = outer, outer + inner
    sides = {"top": (a[:o], a[o:i]), "bottom": (a[-o:], a[-i:-o]),
             "left": (a[:, :o], a[:, o:i]), "right": (a[:, -o:], a[:, -i:-o])}
    return {k: float(x.mean() / max(float(y.mean()), 1e-6) - 1.0) for k, (x, y) in sides.items()}


def water_mask(h: int, w: int) -> np.ndarray:
    """The hand-drawn water polygon of boat.mp4 frame 8 rasterised at ``h x w``."""
    import cv2

    data = json.loads((ROOT / "tests" / "data" / "boat_water_mask.json").read_text())
    pts = np.array(data["polygon_uv"], np.float64) * [w, h]
    m = np.zeros((h, w), np.uint8)
    cv2.fillPoly(m, [np.round(pts).astype(np.int32)], 1)
    return m.astype(bool)


def measure(folder, frames, prompts, sheet=None):
    files = contract.list_frames(folder)
    nums = [n for n in sorted(files) if frames is None or n in frames]
    gbs = {n: contract.read_frame(files[n]) for n in nums}
    r = EmbeddedRenderer()
    res = {}
    src_rows = None
    for prompt in prompts:
        outs, errs, srcs = {}, [], []
        prev = None
        for n in nums:
            out = r.render(gbs[n], prompt, frame_index=n - 1) if prompt else gbs[n].combined[..., :3]
            outs[n] = out
            cur = flick.sample(gbs[n].combined[..., :3], out)
            if prev is not None:
                e = flick.pair_error(prev, cur)
                if e is not None:
                    errs.append(e.output)
                    srcs.append(e.source)
            prev = cur
        allo = np.stack(list(outs.values()))
        borders = [border_excess(luminance(o)) for o in outs.values()]
        worst = max((v for b in borders for v in b.values()), key=abs)
        row = {"mean": float(luminance(allo).mean()), "p99": float(np.mean([p99_luma(o) for o in outs.values()])),
               "border": worst, "flicker": float(np.mean(errs)) if errs else None,
               "flicker_source": float(np.mean(srcs)) if srcs else None}
        if (prompt and "snow" in prompt and 8 in gbs and "boat" in str(folder)
                and (ROOT / "tests" / "data" / "boat_water_mask.json").exists()):
            cov = snow_cover_of(gbs[8], r.params(prompt))
            m = water_mask(*cov.shape)
            row["snow_on_water"] = float(cov[m].mean())
            row["snow_on_land"] = float(cov[~m].mean())
        res[prompt or "source"] = row
        if sheet is not None:
            sheet.setdefault(prompt or "source", outs[nums[min(len(nums) - 1, 7)]])
        src_rows = src_rows or row
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--frames", default="1-8")
    ap.add_argument("--json")
    ap.add_argument("--looks", default=",".join(LOOKS))
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.frames.split("-"))
    looks = [x for x in a.looks.split(",") if x]
    prompts = [""] + [p for x in looks for p in (x, f"{x} at night")]
    out = {}
    for f in a.folders:
        name = Path(f).name
        res = measure(f, set(range(lo, hi + 1)), prompts)
        out[name] = res
        print(f"== {name}")
        print(f"{'look':28s} {'mean':>7s} {'xday':>6s} {'p99':>6s} {'border':>7s} {'flick':>7s} {'src':>7s} {'snowW':>6s}")
        for k, v in res.items():
            day = res.get(k.replace(" at night", ""), v)["mean"]
            print(f"{k:28s} {v['mean']:7.4f} {v['mean'] / max(day, 1e-9):6.3f} {v['p99']:6.1f} "
                  f"{v['border']:+7.3f} {v['flicker'] or 0:7.4f} {v['flicker_source'] or 0:7.4f} "
                  f"{v.get('snow_on_water', float('nan')):6.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
