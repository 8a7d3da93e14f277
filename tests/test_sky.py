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


def test_blue_sky_behind_a_brighter_structure_is_sky_but_water_fading_into_sand_is_not():
    """A blue sky need not be the brightest thing (an orange track, a white cloud in front of
    it): its outline ends on the edges of what stands in front of it. Water seen from below
    is as blue but fades into the sand without an edge."""
    h, w = 180, 320
    rng = np.random.default_rng(2)
    sky = np.zeros((h, w, 3), np.float32)
    sky[:] = np.array([0.35, 0.55, 0.80], np.float32) * np.linspace(0.95, 1.05, h, dtype=np.float32)[:, None, None]
    sky[60:80, :] = (0.97, 0.75, 0.45)  # a bright track across the sky: brighter than the sky
    sky[130:] = 0.15 + 0.1 * rng.random((50, w, 3)).astype(np.float32)  # dark textured ground
    import cv2

    sky = cv2.GaussianBlur(sky, (0, 0), 1.5)  # a lens's edges, not 1 px steps
    r = detect_sky(srgb_to_linear(sky))
    assert r.reason == "sky"
    assert r.mask[:55].mean() > 0.97 and r.mask[85:125].mean() > 0.9  # both sides of the track
    assert r.mask[62:78].mean() < 0.05 and r.mask[135:].mean() < 0.01
    water = np.zeros((h, w, 3), np.float32)
    t = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    water[:] = (1 - t) * np.array([0.25, 0.5, 0.8], np.float32) + t * np.array([0.9, 0.92, 0.9], np.float32)
    water[100:, 40:140] = 0.3 + 0.1 * rng.random((80, 100, 3)).astype(np.float32)  # a dolphin
    water = srgb_to_linear(water)
    r = detect_sky(water)
    assert not r.mask.any(), r.reason


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


def test_rollercoaster_clear_blue_sky_between_struts_hand_mask():
    """Tuning clip since round 2 (issue 33): blue sky behind a brighter orange track."""
    for idx, recall, false in _score("davis_rollercoaster", DATA / "footage" / "davis_rollercoaster.mp4"):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


@pytest.mark.parametrize("name", ["davis_hike", "davis_motocross-jump"])
def test_heldout_round2_hand_masks(name):
    """Held out in round 2 (masks drawn after the detector was frozen)."""
    for idx, recall, false in _score(name, DATA / "footage" / f"{name}.mp4"):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


@pytest.mark.xfail(strict=True, reason="known miss (issue 33 round 2): clear sky over a bright grey limestone "
                   "mountain merges with it and the region's outline fades without an edge")
def test_heldout_car_turn_sky_over_a_bright_mountain():
    for idx, recall, false in _score("davis_car-turn", DATA / "footage" / "davis_car-turn.mp4"):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


def test_no_sky_in_the_heldout_aquarium():
    """Blue water above a dark audience (held out): never sky."""
    for sf in _frames(DATA / "footage" / "aquarium.mp4", set(range(0, 220, 20))):
        assert not detect_sky(sf.rgb).mask.any(), sf.index


def test_boat_hand_mask(footage):
    for idx, recall, false in _score("boat", footage("boat")):
        assert recall >= 0.9 and false <= 0.02, (idx, recall, false)


@pytest.mark.parametrize("name", ["dolphins", "phone_office"])
def test_no_sky_under_water_or_in_an_office(footage, name):
    for sf in _frames(footage(name), set(range(0, 60, 10))):
        assert not detect_sky(sf.rgb).mask.any(), (name, sf.index)


def test_grey_road_does_not_join_a_grey_sky(monkeypatch):
    """Greys share one chroma, so a smooth grey road below a grey sky is no 'same sky'
    (round 2: the held-out car-turn road joined a hazy sky that way)."""
    from backend import sky as sky_mod

    rng = np.random.default_rng(3)
    img = np.zeros((180, 320, 3), np.float32)
    img[:60] = np.array([1.0, 1.0, 1.01], np.float32) * np.linspace(0.93, 0.94, 60, dtype=np.float32)[:, None, None]
    img[60:120] = 0.2 + 0.15 * rng.random((60, 320, 3)).astype(np.float32)  # trees
    img[120:] = 0.935  # a smooth grey road, as bright as the sky near the horizon
    img = srgb_to_linear(img)
    r = detect_sky(img)
    assert r.reason == "sky" and r.mask[:50].mean() > 0.97
    assert r.mask[125:].mean() < 0.01
    monkeypatch.setattr(sky_mod, "SAME_SKY_MIN_CHROMA", 0.0)  # without the rule the road joins
    assert detect_sky(img).mask[125:].mean() > 0.5


@pytest.mark.xfail(strict=True, reason="known false positive: flat blue squares bounded by sharp edges and "
                   "touching the top edge pass the edge-bounded blue-sky rule, and the same-colour rule "
                   "joins every other blue square (half the frame marked)")
def test_a_blue_checker_is_not_sky():
    """A red/blue checker under a left-to-right light falloff (test_intrinsic's border test)
    holds no sky: at most 2 % of it may be marked."""
    h, w = 120, 200
    yy, xx = np.mgrid[0:h, 0:w]
    red = ((yy // 20 + xx // 20) % 2) == 0
    alb = np.where(red[..., None], np.float32([0.6, 0.12, 0.08]), np.float32([0.1, 0.3, 0.5]))
    rgb = (alb * (0.4 + 0.6 * xx / w)[..., None]).astype(np.float32)
    assert detect_sky(rgb).mask.mean() <= 0.02
