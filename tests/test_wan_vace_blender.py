"""Blender's Restyle with the wan-vace renderer on a tiny random-weight Wan2.1 VACE replica, offline.

The add-on's Models folder preference points at a Hugging Face cache holding the replica
(tests/wan_vace_util.py); offline mode is on. The Restyle operator's worker runs the
renderer with its defaults (one window holds the whole short clip) and writes the result
sequence.
"""
import os

import numpy as np
import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")
pytest.importorskip("torch")
pytest.importorskip("diffusers")

import blender_workflow_util as util  # noqa: E402
import wan_vace_util as wu  # noqa: E402
from backend import contract  # noqa: E402
from backend.jobs.restyle import read_rgba_exr  # noqa: E402
from backend.renderers.wan_vace import DEFAULT_MODEL  # noqa: E402
from gbuffer_util import sphere_frames, write_sequence  # noqa: E402


@pytest.fixture
def addon():
    mod = util.enable_addon()
    yield mod
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    prefs.model_dir, prefs.offline_mode = "", False
    s = bpy.context.scene.gbuffer_editor
    for key in ("renderer", "prompt", "output_dir"):
        s.property_unset(key)
    util.disable_addon()


def test_blender_restyle_with_wan_vace_offline(addon, tmp_path):
    from gbuffer_editor.addon import model_catalog, props
    from gbuffer_editor.operators import backend_args, decompose

    cache = tmp_path / "models"
    wu.install_in_cache(cache, DEFAULT_MODEL, wu.build_pipeline(tmp_path / "pipe"))
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    prefs.model_dir, prefs.offline_mode = str(cache), True
    env = backend_args.worker_environment(prefs)
    assert env["HF_HUB_CACHE"] == str(cache) and env["HF_HUB_OFFLINE"] == "1"
    (row,) = [m for m in model_catalog.model_specs() if m.repo_id == DEFAULT_MODEL]
    assert row.licence == "Apache-2.0" and "8+ GB" in row.vram and model_catalog.model_status(row, cache)[0]
    assert "wan-vace" in props.renderer_names()
    assert backend_args.not_ready("renderer", "wan-vace") is None

    sc = bpy.data.scenes.new("wan_vace")
    gb = write_sequence(tmp_path / "gb", sphere_frames(32, 48, 3, x0=-0.4, step=0.2, fps=24))
    decompose.wire_gbuffers(sc, gb)
    s = sc.gbuffer_editor
    s.output_dir = str(tmp_path / "runs") + os.sep
    s.renderer, s.prompt = "wan-vace", "a watercolour harbour at night"
    try:
        with bpy.context.temp_override(scene=sc):
            assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
        result = tmp_path / "runs" / "restyle_001" / "result"
        names = sorted(p.name for p in result.glob("restyle_*.exr"))
        assert names == ["restyle_0001.exr", "restyle_0002.exr", "restyle_0003.exr"], s.status
        man = contract.read_manifest(result)
        assert man["renderer"]["name"] == "wan-vace" and man["renderer"]["settings"]["model"] == DEFAULT_MODEL
        assert [e["windows"] for e in man["frames"]] == [[[1, 3]]] * 3   # one window holds the clip
        for n in (1, 2, 3):
            rgb = read_rgba_exr(result / f"restyle_{n:04d}.exr")
            assert rgb.shape == (32, 48, 3) and np.all(np.isfinite(rgb)) and rgb.std() > 0
        assert (result / "preview.mp4").stat().st_size > 0
    finally:
        bpy.data.scenes.remove(sc)
