"""Sky detection (issue 33): backend/sky.py and the Decomposer's no-surface mark."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.colour import srgb_to_linear
from backend.sky import detect_sky

DATA = Path(__file__).parent / "data"


def _scene(top_value=(0.55, 0.7, 0.95), seed=0):
    """A smooth blue-ish sky gradient over a textured dark ground (sRGB -> linear)."""
    rng = np.random.default_rng(seed)
    h, w = 180, 320
    img = np.zeros((h, w, 3), np.float32)
    ramp = np.linspace(0.9, 1.0, 70, dtype=np.float32)[:, None, None]
    img[:70] = np.array(top_value, np.float32) * ramp
    img[70:] = 0.25 + 0.15 * rng.random((h - 70, w, 3)).astype(np.float32)
    return srgb_to_linear(img)


def test_smooth_bright_top_is_sky_and_textured_ground_is_not():
    r = detect_sky(_scene())
    assert r.reason == "sky"
    assert r.mask[:60].mean() > 0.97
    assert r.mask[80:].mean() < 0.01


def test_blown_out_top_is_not_sky():
    img = _scene()
    img[:70] = 1.0  # an over-exposed window: clipped white, no evidence of sky
    r = detect_sky(img)
    assert not r.mask.any() and "clipped" in r.reason


def test_sky_darker_than_the_ground_is_not_sky():
    img = _scene(top_value=(0.2, 0.35, 0.6))  # deep blue water above bright sand
    img[70:] = srgb_to_linear(np.full((110, 320, 3), 0.8, np.float32) + 0.1 * np.random.default_rng(1).random((110, 320, 3)).astype(np.float32))
    assert not detect_sky(img).mask.any()


def test_decomposer_marks_sky_per_contract():
    from backend.decomposer import Decomposer

    fr = Decomposer("embedded").frame(_scene(), number=1)
    fr.validate()
    nos = ~contract.surface_mask(fr)
    assert nos[:60].mean() > 0.97 and nos[80:].mean() < 0.01
    assert np.all(fr.depth[nos] == fr.meta["depth_far"])
    assert np.allclose(fr.normal[nos], contract.SKY_NORMAL, atol=1e-3)
    assert "sky detector" in fr.meta["pass_models"]["confidence"]
    off = Decomposer("embedded", detect_sky=False).frame(_scene(), number=1)
    assert (off.confidence <= contract.NO_SURFACE).mean() < 0.5


def _frames(path, wanted):
    from backend.footage import open_footage

    with open_footage(path) as f:
        for sf in f:
            if sf.index in wanted:
                yield sf


def _score(name, path):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from benchmarks.sky_eval import rasterise

    spec = json.loads((DATA / "sky_masks.json").read_text())["clips"][name]
    for sf in _frames(path, {int(k) for k in spec["frames"]}):
        d = spec["frames"][str(sf.index)]
        m = detect_sky(sf.rgb).mask
        s = rasterise(d["sky"], spec["drawn_on_size"], m.shape)
        g = rasterise(d["ground"], spec["drawn_on_size"], m.shape)
        yield sf.index, float(m[s].mean()), float(m[g].mean())


def test_heldout_overcast_lake_hand_mask():
    for idx, recall, false in _score("demo2_video", DATA / "footage" / "demo2_video.mp4"):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


def test_boat_hand_mask(footage):
    for idx, recall, false in _score("boat", footage("boat")):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


@pytest.mark.parametrize("name", ["dolphins", "phone_office"])
def test_no_sky_under_water_or_in_an_office(footage, name):
    for sf in _frames(footage(name), set(range(0, 60, 10))):
        assert not detect_sky(sf.rgb).mask.any(), (name, sf.index)
