"""Speed and peak memory of decompose and restyle (embedded, CPU) by frame size (issue 37).

Usage::

    .venv/bin/python benchmarks/sizes.py [--out benchmarks/results] [--sizes 960x540,1920x1080,3840x2160]

Real footage (``../shared/footage/dolphins.mp4``, 960x540) re-encoded at each size
(H.264, CRF 18; upscaled for 1080p and 4K, so the pixels are real but softer than a real
4K camera's), then in a fresh child process each (``benchmarks/_child.py``, so the peak
RSS is the job's own): decompose, restyle "dense fog", restyle "underwater". Frames: 12
at 960x540, 8 at 1080p, 4 at 4K. Writes ``sizes.json`` and ``sizes.md``. Wall time and
steady fps depend on what else runs on the machine (the load average is recorded);
peak RSS does not.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import run  # noqa: E402  (benchmarks/run.py: the clip maker and the child runner)

FRAMES = {"960x540": 12, "1920x1080": 8, "3840x2160": 4}


def measure(sizes, tmp: Path) -> list:
    rows = []
    for res in sizes:
        w, h = (int(x) for x in res.split("x"))
        clip = run._make_clip(run.FOOTAGE / "dolphins.mp4", tmp / f"clip_{res}.mp4", (w, h), FRAMES.get(res, 4))
        gb = tmp / f"gb_{res}"
        load = os.getloadavg()[0]
        d = run._child({"job": "decompose", "input": str(clip), "out": str(gb), "max_size": None})
        rows.append({"stage": "decompose", "resolution": res, "load_avg_1min": round(load, 1), **d})
        for prompt in ("dense fog", "underwater"):
            load = os.getloadavg()[0]
            r = run._child({"job": "restyle", "input": str(gb), "out": str(tmp / f"rs_{res}_{prompt[:3]}"),
                            "prompt": prompt})
            rows.append({"stage": f"restyle '{prompt}'", "resolution": res, "load_avg_1min": round(load, 1), **r})
        print(json.dumps(rows[-3:]), flush=True)
    return rows


def table(rows) -> str:
    lines = ["| stage (embedded, CPU) | size | frames | steady fps | whole job s | peak RSS MB | load avg |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['stage']} | {r['resolution']} | {r['frames']} | {r['steady_fps']:.2f} | "
                     f"{r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['load_avg_1min']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--sizes", default=",".join(FRAMES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gbuffer_sizes_") as t:
        rows = measure(args.sizes.split(","), Path(t))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": platform.processor() or
            platform.machine(), "cpus": os.cpu_count(), "footage": "dolphins.mp4 re-encoded at each size"}
    (out / "sizes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = f"# Speed and peak memory by frame size\n\n{json.dumps(meta)}\n\n{table(rows)}\n"
    (out / "sizes.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
