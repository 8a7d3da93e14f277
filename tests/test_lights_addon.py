"""Scene Lights in the add-on (issue 39 item 4): Export Scene G-Buffers -> Load into
Compositor -> a point light added to the scene -> Restyle with *Scene Lights* on and no
prompt. The operator gathers the light into ``restyle_NNN/lights.json`` in the exported
camera's world (the frames carry it) and the worker adds its light: the result is
brighter than a run without it, by the amount the light's units predict at the centre.
Real Cycles export (32x24 px, 1 sample) and the real worker process.
"""
import json
import math

import numpy as np
import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")

from backend.jobs.writers import read_rgba_exr  # noqa: E402
from test_scene_export_operator import H, W, _export, addon, scene  # noqa: E402,F401  (fixtures)


def test_restyle_with_scene_lights_adds_the_scene_light(scene, tmp_path):  # noqa: F811
    from gbuffer_editor.addon import worker
    from gbuffer_editor.operators import restyle

    scene.frame_end = 1
    out = tmp_path / "gb"
    assert _export(scene, directory=str(out), load_compositor=True) == {"FINISHED"}
    # export_sun lit the plate (the export's manifest records it): skipped, with a warning;
    # so is Blender's startup default light (issue 39 trial: it was added silently)
    default = bpy.data.objects.new("Light", bpy.data.lights.new("Light", "POINT"))
    default.data.energy = 1000.0
    default.location = (4.0762, 1.0055, 5.9039)
    scene.collection.objects.link(default)
    # the plane is 5 m in front of the camera (camera at the origin looking down -Z);
    # a 500 W point light 2 m in front of the camera on its axis: 3 m above the plane
    pt = bpy.data.objects.new("key", bpy.data.lights.new("key", "POINT"))
    pt.data.energy = 500.0
    pt.data.shadow_soft_size = 0.0
    pt.location = (0.0, 0.0, -2.0)
    scene.collection.objects.link(pt)
    results, messages = {}, {}
    for name, on in (("plain", False), ("lit", True)):
        scene.gbuffer_editor.use_scene_lights = on
        run = tmp_path / name
        ctl = restyle.restyle_job(scene, run / "result", prompt="", renderer="embedded", gbuffer_dir=out)
        assert ctl.run_blocking() == worker.DONE, ctl.message
        results[name] = read_rgba_exr(run / "result" / "restyle_0001.exr")[..., :3]
        messages[name] = ctl.message
    doc = json.loads((tmp_path / "lit" / "lights.json").read_text())
    assert doc["space"] == "world" and [lt["name"] for lt in doc["lights"]] == ["key"] == doc["taken"]
    assert {sk["name"] for sk in doc["skipped"]} == {"export_sun", default.name}
    assert "Restyle: done (Scene Lights: key)" in messages["lit"], messages
    assert any("'export_sun' not added" in w and "in the plate already" in w for w in ctl.warnings), ctl.warnings
    assert any(f"{default.name!r} not added" in w and "startup default light" in w for w in ctl.warnings), ctl.warnings
    assert not (tmp_path / "plain" / "lights.json").exists()
    gain = float((results["lit"] - results["plain"])[H // 2 - 2:H // 2 + 2, W // 2 - 2:W // 2 + 2].mean())
    # what the backend computes for the same light given in camera space (the world -> camera
    # transform of the gathered file is right), and at least the Lambert term of
    # E = P / (4 pi d^2) at d = 3 m on the green albedo 0.4 (the rest is the specular peak
    # of a light on the camera axis)
    from backend import contract
    from backend.renderers.light_rig import parse_lights
    from backend.renderers.lights import light_contribution

    rig = parse_lights({"space": "camera", "lights": [{"name": "k", "type": "point", "power": 500.0,
                                                        "position": [0.0, 0.0, -2.0]}]}, "camera")
    add = light_contribution(contract.read_frame(out / "gbuffer_0001.exr"), rig, frame_number=1)
    expect = float(add[H // 2 - 2:H // 2 + 2, W // 2 - 2:W // 2 + 2].mean())
    assert abs(gain / expect - 1) < 0.05, (gain, expect)
    assert gain > 0.9 * 0.4 / math.pi * 500.0 / (4 * math.pi * 9.0)
    man = json.loads((tmp_path / "lit" / "result" / "manifest.json").read_text())
    assert man["lights"]["space"] == "world"
