"""Speed of the embedded estimator on this machine (2 CPU cores, shared).

    python -m training.bench_speed [--frames 30] [--clip ../shared/footage/boat.mp4]

Measures, at 960x540:
* ``network_ms``: one onnxruntime run at the processing size (long side 192 = default, and 384);
* ``predict_ms``: :meth:`EmbeddedEstimator.predict` (encode, run, decode, resize to 960x540);
* ``decompose_fps``: the real ``python -m backend decompose`` job on ``--frames`` frames of
  the clip downscaled to 960x540 (decode + estimate + EXR writing), from its own
  progress lines, when the job module is available.

Writes ``benchmarks/results/speed_embedded.json``. Timings on a shared machine are
noisy; the load average at the time is recorded with them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .metrics import SHARED_ROOT

ROOT = Path(__file__).resolve().parents[1]


def _time(f, n):
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1000)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--clip", default=str(SHARED_ROOT / "footage" / "boat.mp4"))
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    from backend.estimators.embedded import EmbeddedEstimator

    rng = np.random.default_rng(0)
    x = (rng.random((540, 960, 3)) ** 2).astype(np.float32)
    res = {"load_avg_before": os.getloadavg(), "cpu_count": os.cpu_count()}
    for ms in (192, 384):
        est = EmbeddedEstimator(max_size=ms, threads=2)
        small = np.ascontiguousarray(x[: est.processing_size(540, 960)[0], : est.processing_size(540, 960)[1]])
        res[f"network_ms_{ms}"] = _time(lambda: est.run_network(small), args.repeats)
        res[f"predict_ms_960x540_{ms}"] = _time(lambda: est.predict(x), args.repeats)
    clip = Path(args.clip)
    if clip.exists():
        with tempfile.TemporaryDirectory() as td:
            src = Path(td) / "clip540"
            src.mkdir()
            import av
            import cv2

            from backend.imaging import resize

            n = 0
            while n < args.frames:  # loop short clips until --frames frames exist
                with av.open(str(clip)) as c:
                    for fr in c.decode(video=0):
                        if n >= args.frames:
                            break
                        img = resize(fr.to_ndarray(format="bgr24"), (960, 540), "area")
                        n += 1
                        cv2.imwrite(str(src / f"shot_{n:04d}.png"), img)
            out = Path(td) / "out"
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "backend", "decompose", str(src / "shot_####.png"),
                                "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - t
            fps = [json.loads(line).get("fps") for line in p.stdout.splitlines()
                   if line.startswith("{") and '"progress"' in line]
            written = len(list(out.glob("gbuffer_*.exr"))) if out.exists() else 0
            res["decompose"] = {"rc": p.returncode, "frames": written, "wall_s": round(wall, 2),
                                "fps_end_to_end_incl_startup": round(written / wall, 2),
                                "fps_reported_last": fps[-1] if fps else None,
                                "stderr_tail": p.stderr[-300:] if p.returncode else ""}
    res["load_avg_after"] = os.getloadavg()
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "speed_embedded.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
