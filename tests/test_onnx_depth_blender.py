"""Blender's Decompose with the pretrained depth estimator (issue 15), offline.

The add-on is enabled from the source tree; its Models folder preference points at a
Hugging Face cache holding a tiny random-weight Depth Anything V2 replica exported to ONNX
like the published export (tests/onnx_depth_util.py); offline mode is on. The sidebar's
estimator dropdown offers the model, and the Decompose operator's worker writes contract
frames made by it.
"""
import os

import numpy as np
import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")
pytest.importorskip("torch")

import blender_workflow_util as util  # noqa: E402
import onnx_depth_util as odu  # noqa: E402
from backend import contract  # noqa: E402
from backend.estimators.onnx_depth import MODELS, network_size  # noqa: E402
from backend.footage import fit_long_side  # noqa: E402

NAME = "depth-anything-v2-small"


@pytest.fixture
def addon():
    mod = util.enable_addon()
    yield mod
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    prefs.model_dir, prefs.offline_mode = "", False
    # later in-process tests get the scene's defaults back (the embedded estimator, ...)
    s = bpy.context.scene.gbuffer_editor
    for key in ("estimator", "output_dir", "processing_resolution", "use_scene_range", "stabilize"):
        s.property_unset(key)
    util.disable_addon()


def test_blender_decompose_with_depth_anything_offline(addon, footage, tmp_path):
    from gbuffer_editor.addon import props
    from gbuffer_editor.operators import backend_args

    spec = MODELS[NAME]
    clip = footage("boat")  # 832 x 448
    pw, ph = fit_long_side(832, 448, 64)
    nh, nw = network_size(ph, pw)
    cache = tmp_path / "models"
    odu.install_in_cache(cache, spec.repo_id, spec.files["fp32"], odu.export_replica(tmp_path / "m.onnx", nh, nw))

    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    prefs.model_dir, prefs.offline_mode = str(cache), True
    env = backend_args.worker_environment(prefs)
    assert env["HF_HUB_CACHE"] == str(cache) and env["HF_HUB_OFFLINE"] == "1"

    # Preferences > Models: the model's row, with licence and size, present in the models folder
    from gbuffer_editor.addon import model_catalog, preferences

    (row,) = [m for m in model_catalog.model_specs() if m.key == NAME]
    assert row.repo_id == spec.repo_id and row.licence == "Apache-2.0" and row.size == "99 MB"
    assert model_catalog.model_status(row, cache)[0]
    assert not model_catalog.model_status(row, tmp_path / "nothing")[0]
    layout = util.RecordingLayout()
    preferences.draw_model_list(layout, prefs)
    labels = [c[1].get("text", "") for c in layout.calls if c[0] == "label"]
    assert "Depth Anything V2 Small (ONNX)" in labels and "Apache-2.0, 99 MB" in labels

    # the sidebar says when the chosen estimator's model is missing, pointing at Preferences
    from gbuffer_editor.panels import sidebar

    assert sidebar.missing_model_note(NAME, str(cache)) == ""
    assert "Preferences > Add-ons > G-Buffer Editor > Models" in sidebar.missing_model_note(NAME, str(tmp_path))
    assert sidebar.missing_model_note("embedded", str(tmp_path)) == ""

    scene = bpy.context.scene
    assert bpy.ops.gbuffer.import_footage(filepath=str(clip)) == {"FINISHED"}
    s = scene.gbuffer_editor
    assert NAME in props.estimator_names()
    s.estimator = NAME
    scene.frame_end = 2
    s.output_dir = str(tmp_path / "out") + os.sep
    s.processing_resolution, s.use_scene_range, s.stabilize = 64, True, False
    s.use_estimator_resolution = False
    assert bpy.ops.gbuffer.decompose() == {"FINISHED"}, s.status
    gb = tmp_path / "out" / "decompose_001"
    assert s.status == "Decompose: done", s.status
    assert sorted(p.name for p in gb.glob("gbuffer_*.exr")) == ["gbuffer_0001.exr", "gbuffer_0002.exr"]
    fr = contract.read_frame(gb / "gbuffer_0002.exr", validate=True)
    assert fr.depth.shape == (448, 832)
    assert fr.meta["estimator"] == NAME
    assert fr.meta["models"][f"{spec.repo_id}/{spec.files['fp32']}"] == odu.COMMIT
    assert fr.meta["processing_size"] == [pw, ph]
    assert fr.depth.std() > 0 and np.allclose(np.linalg.norm(fr.normal, axis=-1), 1.0, atol=1e-2)


def test_best_available_prior_by_default(addon, tmp_path):
    """Issue 26: with the default estimator (embedded) and *Best Available Prior* on (the
    default), Decompose runs Depth Anything V2 Small once it is in the models folder; the
    artist's other choice (or the box off) is run as chosen; missing and online, the panel
    offers the download with size and licence; offline the embedded network runs and the
    panel says so; the panel says which one ran last."""
    from gbuffer_editor.operators import backend_args
    from gbuffer_editor.panels import sidebar

    spec = MODELS[NAME]
    s = bpy.context.scene.gbuffer_editor
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    assert s.estimator == "embedded" and s.use_best_prior
    prefs.model_dir, prefs.offline_mode = str(tmp_path / "empty"), True
    assert backend_args.chosen_estimator(s, prefs) == "embedded"  # missing: the offline fallback
    cache = tmp_path / "models"
    odu.install_in_cache(cache, spec.repo_id, spec.files["fp32"], odu.export_replica(tmp_path / "m.onnx", 56, 84))
    prefs.model_dir = str(cache)
    assert backend_args.chosen_estimator(s, prefs) == NAME
    s.use_best_prior = False
    assert backend_args.chosen_estimator(s, prefs) == "embedded"
    s.use_best_prior = True
    s.estimator = "marigold"
    assert backend_args.chosen_estimator(s, prefs) == "marigold"
    s.estimator = "embedded"
    # the panel's line: which one runs, the offer (size, licence) only when missing and online
    text, offer = sidebar.prior_note("embedded", True, present=False, online=True)
    assert offer and "99 MB" in text and "Apache-2.0" in text
    text, offer = sidebar.prior_note("embedded", True, present=False, online=False)
    assert not offer and "embedded network" in text and "offline" in text
    assert sidebar.prior_note("embedded", True, present=True, online=False)[0].startswith("Depth: Depth Anything")
    assert sidebar.prior_note("marigold", True, present=True, online=True) == ("", False)
    # drawn: the box, the line, and (here offline) no download button; "Last run" after a run
    s.last_estimator = NAME
    layout = util.RecordingLayout()
    sidebar.draw_prior(layout, s)
    labels = [c[1].get("text", "") for c in layout.calls if c[0] == "label"]
    assert "Depth: Depth Anything V2 Small; materials: embedded network" in labels
    assert f"Last run: {NAME}" in labels
    assert not [c for c in layout.calls if c[0] == "operator"]
    s.property_unset("use_best_prior")
    s.property_unset("last_estimator")
