"""One benchmark measurement in a fresh process, so peak RSS belongs to it alone.

Usage: ``python benchmarks/_child.py '<json spec>'``; prints one JSON line with
``frames``, ``wall_s`` (whole job), ``steady_fps`` (frames after the first, from
per-frame progress events), ``peak_rss_mb`` (``ru_maxrss`` of this process).
"""
from __future__ import annotations

import io
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


class _Tap(io.TextIOBase):
    """Collects the job's JSON progress lines with arrival times."""

    def __init__(self):
        self.times = []

    def write(self, s):
        for line in s.splitlines():
            if '"progress"' in line:
                self.times.append(time.perf_counter())
        return len(s)


def main() -> None:
    spec = json.loads(sys.argv[1])
    tap = _Tap()
    t0 = time.perf_counter()
    if spec["job"] == "decompose":
        from backend.jobs.decompose import decompose

        res = decompose(spec["input"], spec["out"], max_size=spec.get("max_size"),
                        frames=spec.get("frames"), stabilize=spec.get("stabilize", False),
                        progress=tap)
    elif spec["job"] == "restyle":
        from backend.jobs.restyle import restyle

        res = restyle(spec["input"], spec["out"], prompt=spec["prompt"], frames=spec.get("frames"),
                      progress=tap, **spec.get("options", {}))
    else:
        raise SystemExit(f"unknown job {spec['job']}")
    wall = time.perf_counter() - t0
    t = tap.times
    steady = (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 and t[-1] > t[0] else float("nan")
    print(json.dumps({
        "frames": len(t),
        "wall_s": wall,
        "steady_fps": steady,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "manifest_flicker": res.manifest.get("flicker"),
    }))


if __name__ == "__main__":
    main()
