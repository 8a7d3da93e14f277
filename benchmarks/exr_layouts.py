"""Write/read time and size of one G-buffer frame in each file layout (issue 38).

The frame: the boat clip's first frame decomposed at full size (832x448 ... whatever the
clip is), written as (a) one part with every channel (the layout before issue 38), (b)
one part per pass with colour tags (the default now), (c) ``--layout nuke``. Median of
N repeats each, on this machine; results in ``benchmarks/results/exr_layouts.{json,md}``.

Run: ``.venv/bin/python benchmarks/exr_layouts.py [--repeats 9]``
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend import contract, decompose  # noqa: E402


def _single_part(path, frame):
    import OpenEXR

    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    for k, v in frame.meta.items():
        header[contract.HEADER_PREFIX + k] = v if isinstance(v, str) else json.dumps(v)
    with OpenEXR.File(header, contract._channel_dict(frame)) as f:
        f.write(str(path))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--clip", default=str(REPO.parent / "shared" / "footage" / "boat.mp4"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="exr_layouts_"))
    decompose(args.clip, tmp / "gb", frames="1-1", estimator="embedded")
    frame = contract.read_frame(contract.frame_path(tmp / "gb", 1))
    nuke = contract.GBufferFrame(**{k: getattr(frame, k) for k in contract.PASS_ATTRS},
                                 meta=dict(frame.meta, layout="nuke"))
    writers = {"single part (before)": lambda p: _single_part(p, frame),
               "one part per pass (default)": lambda p: contract.write_frame(p, frame, atomic=False),
               "nuke layout": lambda p: contract.write_frame(p, nuke, atomic=False)}
    rows = {}
    for name, write in writers.items():
        path = tmp / f"{name.split()[0]}.exr"
        w, r = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            write(path)
            w.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            contract.read_frame(path)
            r.append(time.perf_counter() - t0)
        rows[name] = {"write_ms": round(1000 * statistics.median(w), 1), "read_ms": round(1000 * statistics.median(r), 1),
                      "bytes": path.stat().st_size}
    h, w_ = frame.shape
    doc = {"frame": f"{w_}x{h}", "clip": Path(args.clip).name, "repeats": args.repeats, "rows": rows}
    out = REPO / "benchmarks" / "results"
    (out / "exr_layouts.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# EXR layouts: one {w_}x{h} G-buffer frame ({Path(args.clip).name}), median of {args.repeats}", "",
             "| layout | write ms | read ms | bytes |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['write_ms']} | {v['read_ms']} | {v['bytes']} |" for k, v in rows.items()]
    (out / "exr_layouts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
