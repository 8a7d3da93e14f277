"""Blender's Restyle with renderer flux2-klein on the tiny random-weight replica, offline.

The add-on's operator runs the backend worker with the Preferences' models folder (the
replica in the Hugging Face cache layout) and ``HF_HUB_OFFLINE=1``; runs on bpy 5.0.1
(.venv) and 4.5 (.venv45).
"""
import numpy as np
import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")
pytest.importorskip("torch")
pytest.importorskip("diffusers")

import blender_workflow_util as util  # noqa: E402
from backend import contract  # noqa: E402
from backend.jobs.restyle import read_rgba_exr  # noqa: E402
from flux2_util import build_tiny_flux2_klein  # noqa: E402
from gbuffer_util import sphere_frames, write_sequence  # noqa: E402


@pytest.fixture(scope="module")
def addon():
    mod = util.enable_addon()
    yield mod
    util.disable_addon()


def test_restyle_operator_with_flux2_klein_replica(addon, tmp_path, monkeypatch):
    from gbuffer_editor.addon import props as props_mod
    from gbuffer_editor.operators import decompose

    models = tmp_path / "models"
    build_tiny_flux2_klein(models)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    old_dir = prefs.model_dir
    prefs.model_dir = str(models)
    sc = bpy.data.scenes.new("flux2_klein")
    try:
        props_mod._ROWS_CACHE.clear()
        ren = {i[0]: i for i in props_mod._renderer_items(None, None)}
        assert "flux2-klein" in ren and "not ready" not in ren["flux2-klein"][1]
        gb = write_sequence(tmp_path / "gb", sphere_frames(40, 56, 3, x0=-0.5, step=0.25))  # 40x56: padded to 48x64
        decompose.wire_gbuffers(sc, gb)
        sc.frame_start, sc.frame_end = 1, 3
        s = sc.gbuffer_editor
        s.output_dir = str(tmp_path / "runs") + "/"
        s.renderer, s.prompt = "flux2-klein", "a photo of a harbour at dusk"
        with bpy.context.temp_override(scene=sc):
            assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
        result = tmp_path / "runs" / "restyle_001" / "result"
        exrs = sorted(result.glob("restyle_*.exr"))
        assert [p.name for p in exrs] == ["restyle_0001.exr", "restyle_0002.exr", "restyle_0003.exr"]
        for p in exrs:
            img = read_rgba_exr(p)
            assert img.shape == (40, 56, 3) and np.all(np.isfinite(img)) and 0 <= img.min() and img.max() <= 1
        man = contract.read_manifest(result)
        assert man["renderer"]["name"] == "flux2-klein" and man["renderer"]["settings"]["steps"] == 4
        assert (result / "preview.mp4").stat().st_size > 0
    finally:
        prefs.model_dir = old_dir
        props_mod._ROWS_CACHE.clear()
        bpy.data.scenes.remove(sc)
