"""Embedded renderer speed at 960x540 (renderer only: no EXR I/O), per look.

Usage: ``python benchmarks/restyle_embedded.py [--size 960x540] [--repeat 10] [GBUFFER_EXR]``

Renders a synthetic sphere-on-ground frame (or the given contract frame, resized by
nearest neighbour) ``repeat`` times per prompt and prints one JSON line per prompt:
``wall_ms`` (median wall time), ``cpu_ms`` (median process CPU time; numpy's
element-wise maths is single-threaded, so this is the cost on one free core even when
the machine is shared) and the corresponding ``fps``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPTS = ["", "dense fog", "light fog", "underwater", "murky underwater at night", "golden hour",
           "overcast", "heavy rain", "snow", "night"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("frame", nargs="?", help="a gbuffer_NNNN.exr to use instead of the synthetic scene")
    ap.add_argument("--size", default="960x540")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    w, h = map(int, args.size.lower().split("x"))

    import numpy as np

    from backend import contract
    from backend.renderers.embedded import EmbeddedRenderer
    from backend.renderers.synthetic import sphere_scene

    if args.frame:
        f = contract.read_frame(args.frame)
        ys = (np.arange(h) * f.shape[0] / h).astype(int)
        xs = (np.arange(w) * f.shape[1] / w).astype(int)
        for k in ("combined", "depth", "normal", "albedo", "metallic", "roughness", "confidence"):
            a = getattr(f, k)
            if a is not None:
                setattr(f, k, np.ascontiguousarray(a[ys][:, xs]))
        f.meta["intrinsics"] = None
    else:
        f = sphere_scene(h, w)
    r = EmbeddedRenderer()
    for prompt in PROMPTS:
        r.render(f, prompt)  # warm caches (rays, parsed prompt)
        walls, cpus = [], []
        for i in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            r.render(f, prompt, frame_index=i, time_s=i / 24.0)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        wm, cm = statistics.median(walls), statistics.median(cpus)
        print(json.dumps({"prompt": prompt, "size": f"{w}x{h}", "wall_ms": round(wm * 1e3, 1),
                          "cpu_ms": round(cm * 1e3, 1), "fps_wall": round(1 / wm, 1),
                          "fps_cpu": round(1 / cm, 1), "load_avg": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
