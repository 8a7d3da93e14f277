"""Issue 39, the fresh artist's trial: lights under a look, shadows from untrustworthy
depth (Confidence-weighted occluders, edge-aware visibility)."""
from __future__ import annotations

import dataclasses

import numpy as np

from backend import contract
from backend.renderers import embedded as em
from backend.renderers.light_rig import parse_lights
from backend.renderers.lights import light_contribution

H, W = 48, 64
K = (60.0, 60.0, 32.0, 24.0)


def _frame(conf_box=1.0, estimated=False, box=(16, 32, 24, 40, 3.0)):
    """A matte plane at 4 with a nearer block (``box``) whose Confidence is ``conf_box``;
    a grey footage plate (0.2) so a look has something to re-light."""
    d = np.full((H, W), 4.0, np.float32)
    conf = np.ones((H, W), np.float32)
    r0, r1, c0, c1, bd = box
    d[r0:r1, c0:c1] = bd
    conf[r0:r1, c0:c1] = conf_box
    n = np.zeros((H, W, 3), np.float32)
    n[..., 2] = 1.0
    comb = np.ones((H, W, 4), np.float32)
    comb[..., :3] = 0.2
    meta = {"intrinsics": list(K), "depth_kind": "relative", "depth_near": 1.0, "depth_far": 100.0}
    if estimated:
        meta["provenance"] = {"depth": "estimated"}
    return contract.GBufferFrame(
        combined=comb, depth=d, normal=n, albedo=np.full((H, W, 3), 0.5, np.float32),
        metallic=np.zeros((H, W), np.float32), roughness=np.full((H, W), 0.6, np.float32),
        confidence=conf, meta=meta)


def _rig(power=300.0, position=(-2.0, 2.0, -1.0)):
    return parse_lights({"lights": [{"name": "k", "type": "point", "power": power, "position": list(position)}]},
                        "test.json")


def _lum(x):
    return x[..., 0] * 0.2126 + x[..., 1] * 0.7152 + x[..., 2] * 0.0722


def test_an_added_light_survives_a_night_look_as_a_physical_light():
    """'heavy rain at night': before, the light went into the plate and the look re-lit it
    away (boat cabin x1.50 -> x1.04). Now, before the look's grade, the look's frame with
    the light is the look's frame without it plus T x the light on the look's (wet)
    surfaces, exactly; after the grade the lit area stays clearly brighter."""
    f = _frame()
    rig = _rig()
    r0, r1 = em.EmbeddedRenderer(), em.EmbeddedRenderer()
    r1.light_rig = rig
    prompt = "heavy rain at night"
    lit = _lum(r1.render(f, "")) / _lum(r0.render(f, ""))
    night = _lum(r1.render(f, prompt)) / _lum(r0.render(f, prompt))
    spot = lit > np.percentile(lit, 90)
    assert lit[spot].mean() > 1.5
    assert night[spot].mean() > 0.8 * lit[spot].mean()  # was ~1.0: the light vanished
    # before the grade: exactly out_without + T * L(wet surfaces)
    post = em._post
    try:
        em._post = lambda out, p: np.maximum(em.sh.hwc(out), 0)
        layers = r0.render_layers(f, prompt)
        with_light = r1.render(f, prompt)
        without = r0.render(f, prompt)
    finally:
        em._post = post
    p = r0.params(prompt)
    assert p.wetness > 0
    wet = dataclasses.replace(f, albedo=f.albedo * np.float32(1 - 0.45 * p.wetness),
                              roughness=f.roughness * np.float32(1 - 0.6 * p.wetness))
    add = light_contribution(wet, rig, frame_number=1) * em.sh.hwc(layers.transmittance)
    flat = f.depth == 4.0
    got = (with_light - without)[flat]
    np.testing.assert_allclose(got.sum(0), add[flat].sum(0), rtol=0.02)


def test_an_unconfident_occluder_casts_no_shadow_and_a_confident_one_does():
    rig = _rig(2000.0)
    shadows = {}
    for conf in (1.0, 0.7):
        f = _frame(conf_box=conf)
        lit = light_contribution(f, rig, frame_number=1, bounce=False)[..., 0]
        free = light_contribution(f, rig, frame_number=1, shadows=False, bounce=False)[..., 0]
        shadows[conf] = ((lit < 0.5 * free) & (f.depth == 4.0)).sum()
    assert shadows[1.0] > 40
    assert shadows[0.7] == 0


def test_estimated_depth_is_not_taken_as_a_deep_wall_and_its_shadow_is_smooth():
    """A wide near slab of estimated depth (a window corner's wrong near depth) does not
    shadow the plane far behind it the way a trusted one does (the width-based thickness
    is off), and the visibility is smooth (guided filter: no stipple)."""
    box = (0, 48, 0, 36, 2.0)
    rig = _rig(2000.0, position=(-5.0, 0.0, -2.5))
    lost = {}
    for est in (False, True):
        f = _frame(estimated=est, box=box)
        lit = light_contribution(f, rig, frame_number=1, bounce=False)[..., 0]
        free = light_contribution(f, rig, frame_number=1, shadows=False, bounce=False)[..., 0]
        far = (f.depth == 4.0) & (free > 0)
        lost[est] = 1 - lit[far].sum() / free[far].sum()
        if est:
            vis = np.where(far, lit / np.maximum(free, 1e-9), 1.0)
            assert np.abs(np.diff(vis[:, 38:], axis=1)).max() < 0.25  # no stipple
    assert lost[False] > 0.5
    assert lost[True] < 0.5 * lost[False]
