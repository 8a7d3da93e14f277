"""Issue 39 trial numbers: an added light under a night look, and shadows on estimated depth.

Usage (G-buffer folders from ``python -m backend decompose`` of the shared clips, default
estimator, frames 1-4; lights files in camera space, the depth's units)::

    python benchmarks/lights_trial_eval.py BOAT_GB BOAT_LIGHTS PO_GB PO_LIGHTS [PO_LIGHTS ...]

Prints JSON and writes ``benchmarks/results/lights_trial.json``:

* ``night``: boat frame 1, the 3 % of pixels the light lights most (the cabin): lit /
  unlit luminance with no look, under "heavy rain at night", and the same before the
  look's grade (``_post`` replaced by the identity);
* per phone_office light: share of lit pixels in shadow (visibility < 0.5 where the
  unshadowed light exceeds 5 % of its 99th percentile), energy lost to shadow, and the
  frame-to-frame change ``mean |L_t - L_t-1| / mean L_t`` of the added light, shadowed and
  unshadowed (the floor the passes' own flicker sets).
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from backend import contract  # noqa: E402
from backend.renderers import embedded as em  # noqa: E402
from backend.renderers.light_rig import load_lights  # noqa: E402
from backend.renderers.lights import light_contribution  # noqa: E402


def lum(x):
    return x[..., 0] * 0.2126 + x[..., 1] * 0.7152 + x[..., 2] * 0.0722


def night(gb, lights):
    f = contract.read_frame(contract.frame_path(Path(gb), 1))
    r0, r1 = em.EmbeddedRenderer(), em.EmbeddedRenderer()
    r1.light_rig = load_lights(lights)
    p0, p1 = r0.render(f, ""), r1.render(f, "")
    add = lum(p1) - lum(p0)
    box = add > np.percentile(add, 97)
    res = {"no_look": float(lum(p1)[box].mean() / lum(p0)[box].mean())}
    prompt = "heavy rain at night"
    res["night"] = float(lum(r1.render(f, prompt))[box].mean() / lum(r0.render(f, prompt))[box].mean())
    post = em._post
    try:
        em._post = lambda out, p: np.maximum(em.sh.hwc(out), 0)
        res["night_before_grade"] = float(lum(r1.render(f, prompt))[box].mean() / lum(r0.render(f, prompt))[box].mean())
    finally:
        em._post = post
    return {k: round(v, 3) for k, v in res.items()}


def shadows(gb, lights):
    rig = load_lights(lights)
    adds, frees, lost, shad = [], [], [], []
    for n, path in sorted(contract.list_frames(Path(gb)).items())[:4]:
        f = contract.read_frame(path)
        a = lum(light_contribution(f, rig, frame_number=n, bounce=False))
        b = lum(light_contribution(f, rig, frame_number=n, shadows=False, bounce=False))
        lit = b > 0.05 * np.percentile(b, 99)
        lost.append(round(float(1 - a[lit].sum() / b[lit].sum()), 3))
        shad.append(round(float(((a / np.maximum(b, 1e-9)) < 0.5)[lit].mean()), 3))
        adds.append(a)
        frees.append(b)

    def change(xs):
        return [round(float(np.abs(xs[i] - xs[i - 1]).mean() / xs[i].mean()), 3) for i in range(1, len(xs))]

    return {"px_shadowed": shad, "energy_lost": lost, "frame_change": change(adds),
            "frame_change_unshadowed": change(frees)}


if __name__ == "__main__":
    boat_gb, boat_lights, po_gb, *po_lights = sys.argv[1:]
    out = {"night": night(boat_gb, boat_lights), "shadows": {Path(p).stem: shadows(po_gb, p) for p in po_lights}}
    print(json.dumps(out))
    res = Path(__file__).resolve().parent / "results" / "lights_trial.json"
    res.write_text(json.dumps(out, indent=1))
