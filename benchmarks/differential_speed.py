"""Differential re-rendering speed at 960x540 (renderer only: no EXR I/O), issue 39.

Usage: ``python benchmarks/differential_speed.py [--repeat 5] [GB_FOLDER]``

On a frame of a decomposed clip (default ``/tmp/diffeval/dolphins``, frame 30, resized to
960x540 by nearest neighbour when needed) the embedded renderer renders, ``repeat``
times each (median wall and process CPU time per frame; the machine has 2 cores shared
by others, CPU time is the cost on one free core):

* ``plate`` - no prompt, no edits (the footage: a copy);
* ``lighting fit`` - :func:`estimate_plate_lighting` on 5 frames (once per shot);
* ``box edit`` - roughness 0.05 in a centred box + albedo x0.5 in a corner box, with the
  reference (:mod:`benchmarks.differential_eval`'s boxes);
* ``whole-frame edit`` - roughness 0.05 and albedo x0.5 everywhere;
* ``box edit + dense fog`` - the box edit with a look on top;
* ``relight`` - the old default (the named look ``relight``).

Writes ``benchmarks/results/differential_speed.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _timed(fn, repeat):
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default="/tmp/diffeval/dolphins")
    ap.add_argument("--frame", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import numpy as np

    import differential_eval as ev
    from backend import contract
    from backend.renderers.differential import estimate_plate_lighting
    from backend.renderers.embedded import EmbeddedRenderer

    files = contract.list_frames(a.folder)
    f = contract.read_frame(files[a.frame])
    h, w = f.shape
    if (w, h) != (960, 540):
        ys = (np.arange(540) * h // 540)[:, None]
        xs = (np.arange(960) * w // 960)[None, :]
        f = replace(f, **{k: getattr(f, k)[ys, xs] for k in ("combined", "depth", "normal", "albedo",
                                                               "metallic", "roughness")},
                    confidence=None if f.confidence is None else f.confidence[ys, xs])
    nums = sorted(files)
    pick = [nums[int(i)] for i in np.linspace(0, len(nums) - 1, 5)]
    frames5 = [contract.read_frame(files[n]) for n in pick]
    r = EmbeddedRenderer()
    r.plate_lighting = estimate_plate_lighting(frames5, pick)
    box = ev.box_edit(f)
    whole = replace(f, roughness=np.full_like(f.roughness, 0.05), albedo=f.albedo * np.float32(0.5))
    cases = {
        "plate (no prompt, no edits)": lambda: r.render(f, ""),
        "lighting fit (5 frames, once per shot)": lambda: estimate_plate_lighting(frames5, pick),
        "box edit": lambda: r.render(box, "", reference=f),
        "whole-frame edit": lambda: r.render(whole, "", reference=f),
        "box edit + dense fog": lambda: r.render(box, "dense fog", reference=f),
        "relight (the old default)": lambda: r.render(f, "relight"),
    }
    rows = []
    for name, fn in cases.items():
        fn()  # warm caches (rays, allocator)
        wall, cpu = _timed(fn, a.repeat)
        rows.append({"case": name, "wall_ms": round(wall, 1), "cpu_ms": round(cpu, 1),
                     "fps_cpu": round(1e3 / cpu, 2) if cpu > 0 else None})
        print(json.dumps(rows[-1]), flush=True)
    out = Path(__file__).parent / "results"
    meta = {"size": "960x540", "source": f"{a.folder} frame {a.frame}", "repeat": a.repeat,
            "cores": os.cpu_count(), "note": "median per frame; CPU time = cost on one free core"}
    (out / "differential_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# Differential re-rendering speed (issue 39)", "",
             f"960x540, {meta['source']}, median of {a.repeat}, {os.cpu_count()} cores shared "
             "(CPU time is the cost on one free core).", "",
             "| case | wall ms | CPU ms | fps (CPU) |", "|---|---:|---:|---:|"]
    lines += [f"| {x['case']} | {x['wall_ms']} | {x['cpu_ms']} | {x['fps_cpu']} |" for x in rows]
    (out / "differential_speed.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
