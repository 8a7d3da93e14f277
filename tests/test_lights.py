"""Lights files and the added light (issue 39 item 4), without Blender: the parser's refusals
(one line naming the file and the light, exit 2 on the command line), Blender's units on
a flat plane against closed-form irradiance, keyframes, negative power, the shadow march
on a box standing on a plane, and ``restyle --lights`` end to end on a small contract
folder. The comparison with Cycles is ``tests/test_lights_cycles.py``."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.renderers.light_rig import LightsError, load_lights, parse_lights
from backend.renderers.lights import light_contribution

REPO = Path(__file__).resolve().parents[1]
H, W = 48, 64
K = (60.0, 60.0, 32.0, 24.0)


def _plane(depth=4.0, albedo=0.5, rough=1.0, metal=0.0, box=None):
    """A fronto-parallel matte plane at ``depth``; ``box``: (r0, r1, c0, c1, depth) a
    nearer fronto-parallel block in front of it (an occluder)."""
    d = np.full((H, W), depth, np.float32)
    if box is not None:
        r0, r1, c0, c1, bd = box
        d[r0:r1, c0:c1] = bd
    n = np.zeros((H, W, 3), np.float32)
    n[..., 2] = 1.0
    return contract.GBufferFrame(
        combined=np.zeros((H, W, 4), np.float32), depth=d, normal=n,
        albedo=np.full((H, W, 3), albedo, np.float32), metallic=np.full((H, W), metal, np.float32),
        roughness=np.full((H, W), rough, np.float32), confidence=np.ones((H, W), np.float32),
        meta={"intrinsics": list(K)})


def _rig(*lights, space="camera"):
    return parse_lights({"format": "gbuffer-lights", "version": 1, "space": space, "lights": list(lights)},
                        "test.json")


def test_point_light_units_are_cycles_watts():
    """A P W point light at distance d on its axis: irradiance P / (4 pi d^2) (measured in
    Cycles, docs/lights.md), diffuse radiance albedo E / pi (times Principled's layering)."""
    rig = _rig({"name": "k", "type": "point", "power": 100.0, "position": [0.0, 0.0, -2.0]})
    out = light_contribution(_plane(rough=1.0), rig, frame_number=1, shadows=False, bounce=False)
    centre = out[H // 2 - 1:H // 2 + 1, W // 2 - 1:W // 2 + 1].mean()
    expect = 0.5 / math.pi * 100.0 / (4 * math.pi * 2.0 ** 2)
    assert 0.85 * expect < centre < 1.02 * expect, (centre, expect)  # 1 - E_spec of the dielectric coat
    assert out.shape == (H, W, 3) and out.dtype == np.float32 and np.isfinite(out).all()
    assert out[0, 0].mean() < centre  # falls off away from the axis


def test_sun_irradiance_negative_power_and_colour():
    sun = {"name": "s", "type": "sun", "power": 3.0, "direction": [0.0, 0.0, -1.0], "color": [1.0, 0.5, 0.0]}
    out = light_contribution(_plane(), _rig(sun), frame_number=1, shadows=False, bounce=False)
    px = out[H // 2, W // 2]
    assert abs(px[0] / (0.5 * 3.0 / math.pi) - 1) < 0.15 and abs(px[1] / px[0] - 0.5) < 1e-3 and px[2] == 0
    neg = light_contribution(_plane(), _rig(dict(sun, power=-3.0)), frame_number=1, shadows=False, bounce=False)
    np.testing.assert_allclose(neg, -out, rtol=1e-5, atol=1e-7)


def test_keyframes_animate_power_and_position():
    rig = _rig({"name": "k", "type": "point", "position": [0.0, 0.0, -2.0],
                "keyframes": [{"frame": 1, "power": 0.0}, {"frame": 11, "power": 100.0},
                              {"frame": 21, "position": [1.0, 0.0, -2.0]}]})
    f = _plane()
    v = [float(light_contribution(f, rig, frame_number=n, shadows=False, bounce=False).mean()) for n in (1, 6, 11)]
    assert v[0] == 0.0 and abs(v[1] / v[2] - 0.5) < 1e-4
    moved = light_contribution(f, rig, frame_number=21, shadows=False, bounce=False)[..., 0]
    assert np.argmax(moved.max(0)) > W // 2 + 5  # the light moved right (camera +X)


def test_spot_cone_masks_and_area_light_is_one_sided():
    spot = {"name": "s", "type": "spot", "power": 500.0, "position": [0.0, 0.0, -1.0],
            "direction": [0.0, 0.0, -1.0], "spot_size_deg": 30.0, "spot_blend": 0.0}
    out = light_contribution(_plane(), _rig(spot), frame_number=1, shadows=False, bounce=False)[..., 0]
    # cone of half-angle 15 deg at 3 m from the light: radius 0.8 m, 12 px at depth 4
    assert out[H // 2, W // 2] > 0 and out[H // 2, W // 2 + 16] == 0
    area = {"name": "a", "type": "area", "power": 200.0, "position": [0.0, 0.0, -2.0], "size": 0.5,
            "direction": [0.0, 0.0, 1.0]}  # facing the camera, away from the plane
    assert not light_contribution(_plane(), _rig(area), frame_number=1, shadows=False, bounce=False).any()
    area["direction"] = [0.0, 0.0, -1.0]
    lit = light_contribution(_plane(), _rig(area), frame_number=1, shadows=False, bounce=False)
    expect = 0.5 / math.pi * 200.0 / (math.pi * 2.0 ** 2)  # P / pi W/sr on the axis
    assert 0.85 * expect < lit[H // 2, W // 2, 0] < 1.02 * expect


def test_a_block_casts_a_shadow_in_the_depth_buffer():
    """A block 1 m in front of the plane between it and a light up-left: its shadow falls
    down-right of it on the plane and nowhere else."""
    f = _plane(box=(16, 32, 24, 40, 3.0))
    rig = _rig({"name": "k", "type": "point", "power": 2000.0, "position": [-2.0, 2.0, -1.0]})
    lit = light_contribution(f, rig, frame_number=1, shadows=True, bounce=False)[..., 0]
    free = light_contribution(f, rig, frame_number=1, shadows=False, bounce=False)[..., 0]
    shadow = (lit < 0.5 * free) & (f.depth == 4.0)
    assert shadow.sum() > 40
    off = _rig({"name": "k", "type": "point", "power": 2000.0, "position": [-2.0, 2.0, -1.0], "shadow": False})
    np.testing.assert_array_equal(light_contribution(f, off, frame_number=1, bounce=False)[..., 0], free)
    rows, cols = np.nonzero(shadow)
    assert rows.mean() > 24 and cols.mean() > 32  # down-right of the block's centre (24, 32)
    assert not shadow[:16].any() and not shadow[:, :24].any()  # nothing toward the light


@pytest.mark.parametrize("doc, words", [
    ("{not json", ["malformed JSON"]),
    ({"lights": []}, ["non-empty list"]),
    ({"lights": [{"name": "Key", "type": "laser", "power": 1}]}, ["'Key'", "type"]),
    ({"lights": [{"name": "Key", "type": "point", "power": float("nan")}]}, ["'Key'", "NaN"]),
    ({"lights": [{"name": "Fill", "type": "area", "power": 10, "size": -1}]}, ["'Fill'", "size", "negative"]),
    ({"lights": [{"name": "Key", "type": "point"}]}, ["'Key'", "power is missing"]),
    ({"lights": [{"name": "Key", "type": "point", "power": 5, "color": [1, -1, 0]}]}, ["'Key'", "color"]),
    ({"lights": [{"name": "Key", "type": "point", "power": 5, "spot_size_deg": 30}]}, ["'Key'", "unknown key"]),
    ({"lights": [{"name": "Rim", "type": "spot", "power": 5, "position": [0, 0, 3], "direction": [0, 0.2, 1]}]},
     ["'Rim'", "behind the camera"]),
    ({"lights": [{"name": "Key", "type": "point", "power": 5,
                  "keyframes": [{"frame": 3, "position": [0, 0, float("inf")]}]}]}, ["'Key'", "NaN or infinite"]),
])
def test_bad_lights_files_are_refused_with_one_line(tmp_path, doc, words):
    path = tmp_path / "rig.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(LightsError) as e:
        load_lights(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and all(w in msg for w in words), msg


def test_pixels_without_depth_or_surface_get_nothing_and_the_result_stays_finite():
    f = _plane()
    f.depth[:4] = 0.0  # an edit gone wrong
    f.confidence[-4:] = 0.0  # sky
    rig = _rig({"name": "k", "type": "point", "power": 100.0, "position": [0.0, 0.0, -2.0]})
    out = light_contribution(f, rig, frame_number=1)
    assert np.isfinite(out).all() and not out[:4].any() and not out[-4:].any() and out[H // 2].min() > 0


def test_a_point_light_behind_the_camera_is_kept_and_lights_the_plane():
    rig = _rig({"name": "k", "type": "point", "power": 500.0, "position": [0.0, 0.0, 1.0]})
    assert light_contribution(_plane(), rig, frame_number=1, shadows=False).mean() > 0


def test_world_space_needs_a_camera_and_uses_it():
    rig = _rig({"name": "k", "type": "point", "power": 100.0, "position": [0.0, 0.0, 3.0]}, space="world")
    f = _plane()
    with pytest.raises(LightsError, match="carry a camera"):
        light_contribution(f, rig, frame_number=1)
    # a camera at (0, 0, 5) looking down -Z: the light is 2 m in front of it, as in the first test
    f.meta["camera_matrix_world"] = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 5], [0, 0, 0, 1]]
    world = light_contribution(f, rig, frame_number=1, shadows=False, bounce=False)
    cam = light_contribution(f, _rig({"name": "k", "type": "point", "power": 100.0, "position": [0.0, 0.0, -2.0]}),
                             frame_number=1, shadows=False, bounce=False)
    np.testing.assert_allclose(world, cam, rtol=1e-5, atol=1e-8)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "backend", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_restyle_lights_cli_adds_light_and_refuses_a_bad_file(tmp_path):
    gb = tmp_path / "gb"
    gb.mkdir()
    f = _plane()
    f.combined[..., :3] = 0.1
    f.combined[..., 3] = 1.0
    f.meta = contract.make_meta(estimator="test", depth_kind="metric", depth_near=4.0, depth_far=4.0,
                                intrinsics=K)
    contract.write_frame(contract.frame_path(gb, 1), f)
    rig = tmp_path / "rig.json"
    rig.write_text(json.dumps({"format": "gbuffer-lights", "version": 1, "space": "camera", "lights": [
        {"name": "Key", "type": "point", "power": 400.0, "position": [0.0, 0.0, -2.0]}]}))
    for out, extra in (("plain", []), ("lit", ["--lights", str(rig)])):
        p = _cli("restyle", str(gb), "--out", str(tmp_path / out), "--no-mp4", *extra)
        assert p.returncode == 0, p.stderr
    from backend.jobs.writers import read_rgba_exr

    def centre(name):
        return read_rgba_exr(tmp_path / name / "restyle_0001.exr")[H // 2, W // 2, :3]

    gain = float(centre("lit").mean() - centre("plain").mean())
    expect = 0.5 / math.pi * 400.0 / (4 * math.pi * 4.0)
    assert 0.8 * expect < gain < 1.05 * expect, (gain, expect)
    man = json.loads((tmp_path / "lit" / "manifest.json").read_text())
    assert man["lights"]["lights"] == [{"name": "Key", "type": "point"}]
    again = _cli("restyle", str(gb), "--out", str(tmp_path / "lit"), "--no-mp4", "--lights", str(rig))
    assert again.returncode == 0 and '"skipped": 1' in again.stdout  # same lights: resumes
    rig.write_text(rig.read_text().replace("400.0", "800.0"))  # the file's content is in the settings hash
    other = _cli("restyle", str(gb), "--out", str(tmp_path / "lit"), "--no-mp4", "--lights", str(rig))
    assert other.returncode != 0 and "other settings" in other.stderr, other.stderr
    rig.write_text(json.dumps({"lights": [{"name": "Key", "type": "point", "power": 1, "radius": -0.1}]}))
    p = _cli("restyle", str(gb), "--out", str(tmp_path / "bad"), "--no-mp4", "--lights", str(rig))
    assert p.returncode == 2 and "'Key'" in p.stderr and str(rig) in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("error")]) == 1


def test_world_lights_are_checked_against_every_frames_camera_before_writing(tmp_path):
    """A world-space file on frames without a camera, and a spot that frame 2's camera has
    behind it pointing away: exit 2, one line naming file, light and frame; nothing written."""
    gb = tmp_path / "gb"
    gb.mkdir()
    for n, z in ((1, -10.0), (2, 10.0)):  # frame 2's camera moved past the light
        f = _plane()
        f.combined[..., 3] = 1.0
        f.meta = contract.make_meta(estimator="test", depth_kind="metric", depth_near=4.0, depth_far=4.0,
                                    intrinsics=K, extra={"camera_matrix_world": [[1, 0, 0, 0], [0, 1, 0, 0],
                                                                                  [0, 0, 1, z], [0, 0, 0, 1]]})
        contract.write_frame(contract.frame_path(gb, n), f)
    rig = tmp_path / "rig.json"
    # the cameras look down world -Z; the spot at z = 0 points up +Z: behind frame 1's camera
    # (z = -10) pointing away from what it sees, in front of frame 2's (z = 10), toward it
    rig.write_text(json.dumps({"space": "world", "lights": [
        {"name": "Spot", "type": "spot", "power": 100.0, "position": [0, 0, 0], "direction": [0, 0, 1],
         "spot_size_deg": 30}]}))
    p = _cli("restyle", str(gb), "--out", str(tmp_path / "out"), "--no-mp4", "--lights", str(rig))
    assert p.returncode == 2, p.stderr
    assert "'Spot'" in p.stderr and "behind the camera" in p.stderr and "frame 1" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()
    ok = _cli("restyle", str(gb), "--out", str(tmp_path / "out2"), "--no-mp4", "--frames", "2", "--lights", str(rig))
    assert ok.returncode == 0, ok.stderr
    nocam = tmp_path / "nocam"
    nocam.mkdir()
    f = _plane()
    f.meta = contract.make_meta(estimator="test", depth_kind="metric", depth_near=4.0, depth_far=4.0, intrinsics=K)
    contract.write_frame(contract.frame_path(nocam, 1), f)
    p = _cli("restyle", str(nocam), "--out", str(tmp_path / "out3"), "--no-mp4", "--lights", str(rig))
    assert p.returncode == 2 and "carry a camera" in p.stderr and str(rig) in p.stderr, p.stderr
