"""The shipped embedded model runs through the registry without torch (onnxruntime only)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from training.metrics import GT_ROOT as GT  # noqa: E402  (honours GBUFFER_GT_ROOT / GBUFFER_SHARED_DIR)

_NO_TORCH_SCRIPT = r"""
import sys, json
sys.modules['torch'] = None  # any 'import torch' now raises ImportError
import numpy as np
from backend.estimators.base import get_estimator
est = get_estimator('embedded', max_size=96)
res = []
rng = np.random.default_rng(0)
for h, w in [(1, 1), (1, 9), (13, 1), (37, 53), (120, 90)]:
    rgb = (rng.random((h, w, 3)) ** 2).astype(np.float32) * 3.0
    o = est.predict(rgb)
    n = np.linalg.norm(o.normal, axis=-1)
    res.append({
        'hw': [h, w],
        'shapes': [list(o.depth.shape), list(o.normal.shape), list(o.albedo.shape),
                   list(o.metallic.shape), list(o.roughness.shape), list(o.confidence.shape)],
        'depth_min': float(o.depth.min()), 'finite': bool(all(np.isfinite(a).all() for a in
            (o.depth, o.normal, o.albedo, o.metallic, o.roughness, o.confidence))),
        'norm_err': float(np.abs(n - 1).max()),
        'ranges': [float(a.min()) for a in (o.albedo, o.metallic, o.roughness, o.confidence)]
                  + [float(a.max()) for a in (o.albedo, o.metallic, o.roughness, o.confidence)],
        'kind': o.depth_kind, 'models': o.models,
    })
print(json.dumps({'torch_loaded': sys.modules.get('torch') is not None, 'res': res}))
"""


def test_registry_embedded_runs_without_torch_on_odd_sizes():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _NO_TORCH_SCRIPT], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["torch_loaded"] is False
    for r in out["res"]:
        h, w = r["hw"]
        assert r["shapes"] == [[h, w], [h, w, 3], [h, w, 3], [h, w], [h, w], [h, w]]
        assert r["finite"] and r["depth_min"] > 0
        assert r["norm_err"] < 1e-3
        lo, hi = r["ranges"][:4], r["ranges"][4:]
        assert min(lo) >= 0.0 and max(hi) <= 1.0
        assert r["kind"] == "relative"
        assert list(r["models"]) == ["gbuffer_editor/embedded"]
        assert len(r["models"]["gbuffer_editor/embedded"]) == 12


def test_rejects_bad_input():
    from backend.estimators.embedded import EmbeddedEstimator

    est = EmbeddedEstimator(max_size=64)
    with pytest.raises(ValueError):
        est.predict(np.zeros((8, 8), np.float32))
    with pytest.raises(ValueError):
        est.predict(np.zeros((0, 8, 3), np.float32))
    with pytest.raises(FileNotFoundError):
        EmbeddedEstimator(model_path="/nonexistent/model.onnx")


def test_processing_size_caps_long_side():
    from backend.estimators.embedded import EmbeddedEstimator

    est = EmbeddedEstimator(max_size=384)
    assert est.processing_size(540, 960) == (216, 384)
    assert est.processing_size(1, 2000) == (1, 384)
    assert EmbeddedEstimator().processing_size(540, 960) == (108, 192)
    assert est.processing_size(100, 50) == (100, 50)


@pytest.mark.skipif(not (GT / "nyu_depth").exists(), reason="shared ground truth not available")
def test_beats_vertical_prior_on_real_nyu_frames():
    """Mean depth AbsRel over the 3 NYU frames (affine-aligned in disparity, like
    training/evaluate.py) is at least MARGIN below the vertical-gradient prior's.

    Committed evaluation: model 0.183 vs prior 0.228 (per frame: rgb_00000 0.169 vs
    0.180, rgb_00050 0.189 vs 0.294, rgb_00100 0.192 vs 0.211). The assertion is on
    the mean, as the issue's bar is.
    """
    from backend.estimators.embedded import EmbeddedEstimator
    from backend.imaging import resize
    from training import metrics as M

    est = EmbeddedEstimator()
    model, prior = [], []
    for s in M.load_nyu():
        h, w = s["depth"].shape
        disp = resize(est.run_network(s["rgb"])["disparity"], (w, h))
        model.append(M.depth_metrics_from_disparity(disp, s["depth"], s["mask"])["absrel"])
        prior.append(M.depth_metrics_from_disparity(M.vertical_prior_disparity(h, w), s["depth"], s["mask"])["absrel"])
    assert len(model) == 3
    assert np.mean(model) < np.mean(prior) - MARGIN, (model, prior)


MARGIN = 0.03  # the bar on NYU; the shipped model is 0.045 below the prior (docs/model-card.md)
