"""Add-on Restyle vs CLI restyle on the same frames (issue 17: the add-on was ~5x slower).

Usage: ``python benchmarks/restyle_addon.py [--frames 24] [--prompt "dense fog"]`` with a
Python that has ``bpy`` (the project's ``.venv``).

1. Decomposes the first ``--frames`` frames of ``shared/footage/dolphins.mp4`` (960x540)
   once with the default estimator (not timed).
2. **CLI**: ``python -m backend restyle GB --prompt P --out DIR`` in a child process
   (process start included), wall time.
3. **Add-on**: a child process imports ``bpy``, enables the add-on, wires the G-buffers
   into the compositor (Load G-Buffers) with untouched Material edits, sets the scene
   range to the frames and runs ``bpy.ops.gbuffer.restyle()`` (blocking in background
   mode: the same worker command plus the add-on's steps); the operator's wall time.
   With ``--edit`` a Roughness edit is added first, so the per-frame edit bake runs too.
4. **CLI on the same frames**: the CLI restyling the add-on's edited G-buffers (with the
   unedited ones as ``--reference``, the add-on's own worker command): the fair baseline
   for the edited run, since Roughness 0 makes the renderer itself slower.

Prints a table and writes ``benchmarks/results/restyle_addon.json``. Both outputs
include the PNG previews and preview.mp4 (the defaults of both paths).
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

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GBUFFER_SHARED_DIR", REPO.parent / "shared"))
if not (SHARED / "footage").is_dir():
    SHARED = Path("/work/shared")

ADDON_CHILD = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, {tests!r})
os.environ.setdefault("BLENDER_USER_RESOURCES", tempfile.mkdtemp())
import bpy
import blender_workflow_util as util
util.enable_addon()
from gbuffer_editor.addon import compat, compositor
from gbuffer_editor.operators import decompose
sc = bpy.context.scene
gb, out, prompt, n, edit = {gb!r}, {out!r}, {prompt!r}, {n}, {edit}
decompose.wire_gbuffers(sc, gb)
sc.frame_start, sc.frame_end = 1, n
s = sc.gbuffer_editor
s.output_dir = out + "/"
s.renderer, s.prompt = "embedded", prompt
tree = compositor.find_tree(sc)
if edit:
    v = compat.new_value_node(tree, 0.0, "Roughness 0")
    tree.links.new(v.outputs[0], compositor.find_node(tree, "out", "Roughness").inputs[0])
t = time.perf_counter()
rc = bpy.ops.gbuffer.restyle()
dt = time.perf_counter() - t
print(json.dumps({{"rc": list(rc), "seconds": dt, "status": s.status,
                   "baked": os.path.isdir(os.path.join(out, "restyle_001", "edited_gbuffer"))}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--prompt", default="dense fog")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each path; the median is kept")
    ap.add_argument("--json", default=None, help="result file (default benchmarks/results/restyle_addon.json)")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    work = Path(tempfile.mkdtemp(prefix="restyle_addon_"))
    gb = work / "gb"
    subprocess.run([sys.executable, "-m", "backend", "decompose", str(SHARED / "footage" / "dolphins.mp4"),
                    "--out", str(gb), "--frames", f"1-{args.frames}"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    rows = []
    for path in ("cli", "addon", "addon_with_edit"):
        times = []
        for k in range(args.repeat):
            out = work / f"{path}_{k}"
            if path == "cli":
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "backend", "restyle", str(gb), "--prompt", args.prompt,
                                "--out", str(out)], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
                times.append(time.perf_counter() - t)
            else:
                code = ADDON_CHILD.format(tests=str(REPO / "tests"), gb=str(gb), out=str(out), prompt=args.prompt,
                                          n=args.frames, edit=path == "addon_with_edit")
                r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
                if r.returncode != 0 or not line:
                    raise SystemExit(f"add-on run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
                res = json.loads(line[-1])
                if res["rc"] != ["FINISHED"]:
                    raise SystemExit(f"add-on restyle: {res}")
                times.append(res["seconds"])
        times.sort()
        rows.append({"path": path, "seconds": round(times[len(times) // 2], 2), "runs": [round(x, 2) for x in times]})
    # the CLI on the same frames as the edited add-on run: the edited G-buffers the add-on
    # baked (Roughness 0 makes every pixel glossy, so the renderer itself costs more), with
    # the unedited ones as --reference, exactly the worker command the add-on runs
    times = []
    for k in range(args.repeat):
        edited = work / f"addon_with_edit_{k}" / "restyle_001" / "edited_gbuffer"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "backend", "restyle", str(edited), "--reference", str(gb),
                        "--prompt", args.prompt, "--out", str(work / f"cli_edited_{k}")], cwd=REPO, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    times.sort()
    rows.append({"path": "cli_on_the_edited_gbuffers", "seconds": round(times[len(times) // 2], 2),
                 "runs": [round(x, 2) for x in times]})
    cli = rows[0]["seconds"]
    for r in rows:
        r["ratio_to_cli"] = round(r["seconds"] / cli, 2)
    edited_cli = rows[-1]["seconds"]
    rows[2]["ratio_to_cli_same_frames"] = round(rows[2]["seconds"] / edited_cli, 2)
    result = {"frames": args.frames, "size": "960x540", "prompt": args.prompt, "footage": "dolphins.mp4",
              "rows": rows, "cpu_count": os.cpu_count(),
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    print(f"restyle of {args.frames} frames at 960x540, prompt {args.prompt!r} (median of {args.repeat})")
    print(f"{'path':<30}{'seconds':>9}{'x CLI':>8}")
    for r in rows:
        print(f"{r['path']:<30}{r['seconds']:>9.2f}{r['ratio_to_cli']:>8.2f}")
    print(f"add-on with the edit vs the CLI on the same edited frames: x{rows[2]['ratio_to_cli_same_frames']:.2f}")
    out = Path(args.json) if args.json else REPO / "benchmarks" / "results" / "restyle_addon.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
