"""Relight fidelity against Cycles (issue 39): on two held-out scenes of
``tests/relight_scenes.py`` (never used to choose anything), plate + our added light
(``light_contribution`` on the exact passes of our scene export) is >= 30 dB PSNR from
Cycles rendered with that light, and far better than the plate alone. The lights file is
written by the add-on's own gatherer (``addon.scene.lights.scene_lights``), so this also
checks that Blender's light objects reach the backend in the right place and units.

Held-out seeds 200 (point) and 202 (area) measure 31.3 and 31.8 dB (plate alone 15.1 and
19.0 dB). The whole table (held-out mean 33.2 dB, 11 of 12 scenes >= 30 dB, the sun scene
207 at 28.5): ``benchmarks/results/relight_fidelity.md``. Renders 2 x 2 frames at 128x96, 32 samples:
about 10 s on 2 cores, in the bpy 5.0.1 lane.
"""
from __future__ import annotations

import json

import numpy as np

import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")
if bpy.app.version < (5, 0, 0):
    pytest.skip("renders once, in the bpy 5.0.1 lane", allow_module_level=True)

from blender_workflow_util import put_checkout_on_path  # noqa: E402

put_checkout_on_path()

import relight_scenes as rs  # noqa: E402


@pytest.mark.parametrize("seed", [rs.HELDOUT_SEEDS[0], rs.HELDOUT_SEEDS[2]])
def test_plate_plus_our_light_matches_cycles_on_a_held_out_scene(tmp_path, seed):
    paths = rs.render_pair(seed, tmp_path / f"s{seed}")
    doc = json.loads(paths["lights"].read_text())
    assert doc["space"] == "world" and [lt["name"] for lt in doc["lights"]] == [rs.ADDED]
    assert doc["lights"][0]["type"] == rs.TYPES[seed % 4]
    r = rs.score(paths)
    # the bar (the seeds were fixed before measuring, not picked); they measure
    # 31.3 and 31.8 dB, over 1 dB above it for Cycles' noise between builds and platforms
    assert r["relit"] >= 30.0, r
    assert r["relit"] > r["plate"] + 8.0, r


def test_the_add_on_gathers_animated_lights_per_frame_in_world_and_camera_space():
    """``addon.scene.lights.scene_lights``: a keyframed spot (power and location) and a
    scaled disk area light; world values are Blender's, camera values are relative to the
    scene camera, keyframes carry the G-buffer numbers, and the backend parses the file."""
    import math

    from gbuffer_editor.addon.scene.lights import scene_lights

    from backend.renderers.light_rig import parse_lights

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    scene.collection.objects.link(cam)
    scene.camera = cam
    cam.location = (0.0, -5.0, 0.0)
    cam.rotation_euler = (math.radians(90), 0.0, 0.0)  # looks along +Y
    spot = bpy.data.objects.new("Spot", bpy.data.lights.new("Spot", "SPOT"))
    scene.collection.objects.link(spot)
    spot.data.spot_size = math.radians(40)
    for f, (energy, x) in {1: (100.0, 0.0), 3: (300.0, 2.0)}.items():
        spot.data.energy = energy
        spot.location = (x, 0.0, 3.0)
        spot.data.keyframe_insert("energy", frame=f)
        spot.keyframe_insert("location", frame=f)
    area = bpy.data.objects.new("Area", bpy.data.lights.new("Area", "AREA"))
    scene.collection.objects.link(area)
    area.data.shape, area.data.size = "DISK", 0.5
    area.scale = (2.0, 1.0, 1.0)
    scene.frame_set(1)
    doc = scene_lights(scene, [1, 2, 3], numbers=[11, 12, 13])
    lights = {lt["name"]: lt for lt in doc["lights"]}
    keys = lights["Spot"]["keyframes"]
    assert [k["frame"] for k in keys] == [11, 12, 13]
    assert [round(k["power"]) for k in keys] == [100, 200, 300]
    assert keys[2]["position"] == pytest.approx([2.0, 0.0, 3.0]) and keys[0]["spot_size_deg"] == pytest.approx(40)
    assert keys[0]["direction"] == pytest.approx([0.0, 0.0, -1.0], abs=1e-6)
    a = lights["Area"]
    assert "keyframes" not in a and a["shape"] == "ellipse" and (a["size"], a["size_y"]) == pytest.approx((1.0, 0.5))
    assert scene.frame_current == 1
    cam_doc = scene_lights(scene, [1], space="camera")
    sp = {lt["name"]: lt for lt in cam_doc["lights"]}["Spot"]
    # 5 m in front of the camera (camera -Z), 3 m up (camera +Y)
    assert sp["position"] == pytest.approx([0.0, 3.0, -5.0], abs=1e-5)
    rig = parse_lights(doc, "gathered")
    assert rig.at(12, camera_to_world=np.eye(4))[0].power == pytest.approx(200.0)
