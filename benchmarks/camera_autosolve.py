"""Camera solve with the lens unknown on generated scenes with exact truth (issue 24,
item 5): the focal length found, whether the checks let the solve through, and depth
through decompose with the solved cameras.

    .venv/bin/python benchmarks/camera_autosolve.py --split heldout

For each scene of the split (``tests/eval_scenes.py``, rendered and cached as for
``eval_geometry.py``): ``backend.multiview.autosolve.solve_footage`` on ``shot/`` with
the focal length unknown; the focal error against the true ``fx``; then decompose with
the solved cameras and score against the truth after one scale for the whole shot
(:func:`score_scaled`; the solve is up to scale). Depth is
measured also for solves the checks refuse ("forced": what the refused cameras would have
given; Camera: Auto itself would fall back to single-image depth there). Writes
``benchmarks/results/camera_autosolve_<split>.json`` and ``.md``. Timings on the shared
2-core machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import eval_scenes as es  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def score_scaled(out_dir: Path, truth) -> dict:
    """``eval_scenes.score_frame`` means after ONE scale for the whole shot (a solve from
    the footage alone is up to scale): the median of truth / prediction over the
    confident valid pixels of every frame. A per-frame scale would hide depth that is
    inconsistent across frames; this does not."""
    import numpy as np
    from backend import contract

    frames = [contract.read_frame(contract.frame_path(out_dir, int(n))) for n in truth["frames"]]
    ratios = np.concatenate([(truth["depth"][i] / fr.depth)[truth["valid"][i] & (fr.confidence > 0.5)]
                             for i, fr in enumerate(frames)])
    scale = float(np.median(ratios)) if ratios.size else 1.0
    rows = [es.score_frame(fr.depth * scale, fr.normal, fr.confidence, truth["depth"][i], truth["normal"][i],
                           truth["valid"][i]) for i, fr in enumerate(frames)]
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    out = {k: float(np.nanmean([r[k] for r in rows])) for k in keys}
    out["scale"] = scale
    return out


def run_scene(spec, processing_width: int, depth: bool) -> dict:
    from backend import decompose
    from backend.multiview.autosolve import solve_footage, write_solve

    folder = es.render_scene(spec)
    fx = json.loads((folder / "cameras.json").read_text())["intrinsics"]["fx"]
    t0 = time.perf_counter()
    rep = solve_footage(folder / "shot")
    row = {"scene": spec.name, "true_focal": fx, "seconds_solve": round(time.perf_counter() - t0, 1),
           "focal_error": rep.focal_px / fx - 1 if rep.cameras else None, **rep.summary()}
    if depth and rep.cameras:
        out = es.cache_root() / "runs_solve" / spec.key()
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        cams = out.parent / f"{spec.key()}_cameras.json"
        if cams.exists():
            cams.unlink()
        write_solve(rep, cams)
        decompose(folder / "shot", out, cameras=cams, multiview={"processing_width": processing_width})
        s = score_scaled(out, es.load_truth(folder))
        row.update({k: s[k] for k in ("conf_pred_absrel", "all_pred_absrel", "conf_pred_delta1", "coverage",
                                      "normal_deg", "all_constant_absrel", "all_vertical_absrel", "scale") if k in s})
    return row


def _fmt(rows) -> str:
    lines = ["| scene | true fx | solved fx (error) | +- | checks | AbsRel all (conf) | coverage | "
             "AbsRel constant / vertical |", "|" + "---|" * 8]
    for r in rows:
        fe = "n/a" if r["focal_error"] is None else f"{r['focal_px']:.1f} ({100 * r['focal_error']:+.1f} %)"
        sig = "n/a" if r["focal_sigma"] is None else f"{100 * r['focal_sigma']:.1f} %"
        ok = "pass" if r["ok"] else "refused: " + r["reason"].split(":")[0]
        d = (f"{r['all_pred_absrel']:.3f} ({r['conf_pred_absrel']:.3f})" if "all_pred_absrel" in r else "n/a")
        cov = f"{r['coverage']:.0%}" if "coverage" in r else "n/a"
        base = (f"{r['all_constant_absrel']:.3f} / {r['all_vertical_absrel']:.3f}"
                if "all_constant_absrel" in r else "n/a")
        lines.append(f"| {r['scene']} | {r['true_focal']:.1f} | {fe} | {sig} | {ok} | {d} | {cov} | {base} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", default="heldout", choices=sorted(es.SPLITS))
    p.add_argument("--scenes", default="")
    p.add_argument("--no-depth", action="store_true")
    p.add_argument("--processing-width", type=int, default=256)
    a = p.parse_args(argv)
    rows = []
    for spec in es.SPLITS[a.split]:
        if a.scenes and spec.name not in a.scenes.split(","):
            continue
        try:
            row = run_scene(spec, a.processing_width, not a.no_depth)
        except Exception as e:  # a scene that fails to render is reported, not fatal
            row = {"scene": spec.name, "failed": f"{type(e).__name__}: {e}"}
            print(row, flush=True)
            continue
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    name = f"camera_autosolve_{a.split}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"benchmark": "camera_autosolve", "split": a.split,
                                                      "note": "shared 2-core machine; timings noisy",
                                                      "rows": rows}, indent=1))
    (RESULTS / f"{name}.md").write_text(f"# {name}\n\n{_fmt(rows)}\n")
    print(_fmt(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
