"""Single-frame albedo against exact materials (issue 25), on two held-out Cycles scenes
of ``tests/material_scenes.py`` (never used to choose anything).

Decompose's albedo (the embedded estimator's single-frame intrinsic decomposition) must
beat both trivial baselines in scale-invariant PSNR on each scene -- the source frame as
albedo by 2 dB, the scene's mean colour by 0.5 dB (measured: +3.0 / +1.2 and +8.1 /
+1.1 dB; the issue's bar of +3 dB over the better baseline is not met, see the model card) --
stay in [0, 1] and finite, and be labelled ``estimated`` by the colour-Retinex method;
metallic and roughness stay labelled ``default`` (no single-frame evidence; see
docs/model-card.md, "Albedo without the light"). The full evaluation (24 scenes,
baselines) is ``benchmarks/materials_eval.py``.

Renders 2 scenes at 256x192 (16 samples): about 20 s on 2 cores, once, in the bpy 5.0.1 lane.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")
if bpy.app.version < (5, 0, 0):
    pytest.skip("renders once, in the bpy 5.0.1 lane", allow_module_level=True)

from blender_workflow_util import put_checkout_on_path  # noqa: E402

put_checkout_on_path()

import material_scenes as ms  # noqa: E402
from backend.decomposer import Decomposer  # noqa: E402


def si_psnr(x, gt, m):
    a, b = x[m].astype(np.float64).ravel(), gt[m].astype(np.float64).ravel()
    s = a @ b / max(a @ a, 1e-12)
    return float(10 * np.log10(1.0 / max(np.mean((s * a - b) ** 2), 1e-12)))


@pytest.mark.parametrize("seed", ms.HELDOUT_SEEDS[:2])
def test_albedo_beats_the_baselines_on_a_held_out_scene(tmp_path, seed):
    d = ms.render_scene(seed, tmp_path / f"s{seed}")
    assert d["mask"].mean() > 0.5 and d["metallic"].max() == 1.0  # a real scene, with metal
    f = Decomposer("embedded").frame(d["rgb"])
    assert np.isfinite(f.albedo).all() and f.albedo.min() >= 0 and f.albedo.max() <= 1
    m = d["mask"]
    ours, src = si_psnr(f.albedo, d["albedo"], m), si_psnr(d["rgb"], d["albedo"], m)
    mean = si_psnr(np.broadcast_to(d["rgb"][m].mean(0), d["rgb"].shape), d["albedo"], m)
    assert ours > src + 2.0 and ours > mean + 0.5, (ours, src, mean)
    prov, models = f.meta["provenance"], f.meta["pass_models"]
    assert prov["albedo"] == "estimated" and models["albedo"].startswith("colour-retinex")
    assert prov["metallic"] == prov["roughness"] == "default"
