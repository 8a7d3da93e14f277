"""End to end in bpy background mode on real footage (boat.mp4, 3 frames):
import -> decompose (worker process) -> compositor wiring -> material edit -> restyle
(compositor render + restyle worker) -> result frames; then the headless command.

Decompose uses the real embedded estimator when its weights exist
(backend/model/weights/embedded.onnx). Until then the worker Python is a launcher that
registers the decompose tests' tiny random-weight estimator (tests/decompose_util.py)
and runs the same backend CLI; everything else is identical.
"""
import os
import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")

import blender_workflow_util as util  # noqa: E402
from backend import contract  # noqa: E402


@pytest.fixture(scope="module")
def addon(tmp_path_factory):
    mod = util.enable_addon()
    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    if not util.EMBEDDED_ONNX.exists():
        prefs.backend_python = str(util.write_tiny_launcher(tmp_path_factory.mktemp("launcher")))
    yield mod
    prefs.backend_python = ""
    util.disable_addon()


def _decompose(scene):
    """Run Decompose like the sidebar button (blocking path of the same operator)."""
    from gbuffer_editor.operators import decompose

    if util.EMBEDDED_ONNX.exists():
        assert bpy.ops.gbuffer.decompose() == {"FINISHED"}
        return
    # same operator code builds the job; only the estimator name differs (tiny, see module doc)
    ctl = decompose.GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=False), bpy.context)
    step = ctl.steps[0]
    assert step.request.estimator == "embedded"
    step.request = step.request.replace(estimator="tiny")  # the request file is written when the step starts
    assert ctl.run_blocking() == "DONE", ctl.message


def _frame_files(folder, prefix):
    return sorted(p.name for p in folder.glob(f"{prefix}*.exr"))


def test_import_decompose_edit_restyle(addon, footage, tmp_path):
    from gbuffer_editor.addon import compat, compositor

    scene = bpy.context.scene
    assert bpy.ops.gbuffer.import_footage(filepath=str(footage("boat"))) == {"FINISHED"}
    assert (scene.render.resolution_x, scene.render.resolution_y, scene.render.fps) == (832, 448, 8)
    assert (scene.frame_start, scene.frame_end) == (1, 16)
    s = scene.gbuffer_editor
    scene.frame_end = 3
    s.output_dir = str(tmp_path) + os.sep
    s.processing_resolution, s.use_scene_range, s.stabilize = 64, True, False
    s.use_estimator_resolution = False

    # -- decompose -------------------------------------------------------------
    _decompose(scene)
    gb = tmp_path / "decompose_001"
    assert s.gbuffer_dir == str(gb) and s.status == "Decompose: done" and not s.is_running
    assert _frame_files(gb, "gbuffer_") == ["gbuffer_0001.exr", "gbuffer_0002.exr", "gbuffer_0003.exr"]
    assert (gb / "decompose.log").exists()
    src2 = contract.read_frame(gb / "gbuffer_0002.exr", validate=True)
    assert src2.depth.shape == (448, 832)

    # -- wiring and sockets ------------------------------------------------------
    tree = compositor.find_tree(scene)
    image = compositor.find_node(tree, compositor.ROLE_GBUFFER)
    assert image.image.source == "SEQUENCE" and (image.frame_start, image.frame_duration) == (1, 3)
    sockets = {o.name: o.type for o in image.outputs if o.enabled}
    assert {k: sockets[k] for k in contract.PASSES} == {k: v[2] for k, v in contract.PASSES.items()}
    fo_inputs = compat.file_output_inputs(compositor.gbuffer_output(tree))
    assert list(fo_inputs) == list(contract.PASSES) and all(sk.is_linked for sk in fo_inputs.values())
    frame = compositor.find_node(tree, compositor.ROLE_EDITS)
    assert frame.label == "Material edits"

    # -- material edit: Roughness := 0 inside the "Material edits" frame ------------
    value = compat.new_value_node(tree, 0.0, "Roughness 0")
    value.parent = frame
    r_out = compositor.find_node(tree, "out", "Roughness")
    tree.links.new(value.outputs[0], r_out.inputs[0])

    # -- a Render Layers node in the tree (default compositor, scene-export projects):
    # the edit bake must not re-render the 3D scene for every frame ----------------------
    layers = tree.nodes.new("CompositorNodeRLayers")
    layers.scene = scene
    scene.render.engine = "CYCLES"
    engine_stats = []

    def _stats(text):
        engine_stats.append(str(text))

    bpy.app.handlers.render_stats.append(_stats)

    # -- restyle ---------------------------------------------------------------
    s.prompt = "dense fog"
    try:
        assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    finally:
        bpy.app.handlers.render_stats.remove(_stats)
    assert not [t for t in engine_stats if "Sample" in t or "Rendering" in t], engine_stats[:5]
    assert not layers.mute  # restored after the bake
    tree.nodes.remove(layers)  # the next test module reuses this scene (test_blender_ui asserts no RLayers)
    run = tmp_path / "restyle_001"
    edited = contract.read_frame(run / "edited_gbuffer" / "gbuffer_0002.exr", validate=True)
    assert np.all(edited.roughness == 0.0)
    assert src2.roughness.max() > 0.0
    np.testing.assert_allclose(edited.depth, src2.depth, rtol=1e-6)
    np.testing.assert_allclose(edited.normal, src2.normal, atol=1e-3)
    np.testing.assert_allclose(edited.albedo, src2.albedo, atol=1e-3)
    assert edited.meta["frame_index"] == src2.meta["frame_index"] == 1 and edited.meta["edited"] is True
    assert not (run / "edited_gbuffer" / "_render").exists()
    result = run / "result"
    assert s.result_dir == str(result) and (run / "restyle.log").exists()
    assert _frame_files(result, "restyle_") == ["restyle_0001.exr", "restyle_0002.exr", "restyle_0003.exr"]
    chans, _ = contract.read_channels(result / "restyle_0002.exr")
    rgb = np.stack([chans[c] for c in "RGB"], -1)
    assert rgb.shape[:2] == (448, 832) and np.isfinite(rgb).all()
    assert np.abs(rgb.astype(np.float32) - src2.combined[..., :3]).mean() > 0.01  # restyled, not a copy
    res_node = compositor.find_node(tree, compositor.ROLE_RESULT)
    assert res_node.image.source == "SEQUENCE" and res_node.frame_duration == 3
    assert compat.output_socket(tree).links[0].from_node == res_node
    assert compositor.gbuffer_output(tree).mute  # switched off again after the edit render
    # the result is where the artist looks (issue 17): the backdrop (Viewer), the Preview
    # list ("Result") and the Image Editor of the Rendering workspace
    viewer = compositor.find_node(tree, compositor.ROLE_VIEWER)
    assert viewer.inputs["Image"].links[0].from_node == res_node
    assert s.preview_pass == compositor.RESULT_PASS
    rendering = bpy.data.workspaces["Rendering"].screens[0]
    space = next(a.spaces.active for a in rendering.areas if a.type == "IMAGE_EDITOR")
    assert space.image == res_node.image and space.image.name.startswith("restyle_001 result")
    assert (run / "result" / "preview.mp4").is_file()

    # -- a second run never overwrites the first --------------------------------
    before = {p: p.stat().st_mtime_ns for p in result.glob("restyle_*.exr")}
    s.prompt = "night"
    assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    assert _frame_files(tmp_path / "restyle_002" / "result", "restyle_") == _frame_files(result, "restyle_")
    assert {p: p.stat().st_mtime_ns for p in result.glob("restyle_*.exr")} == before

    # -- a failing worker: the backend's reason + log path; scene settings restored ------
    from gbuffer_editor.operators import restyle

    bad = tmp_path / "bad"
    ctl = restyle.restyle_job(scene, bad / "result", prompt="fog", renderer="nope", edited_dir=bad / "edited")
    assert ctl.run_blocking() == "ERROR"
    assert "nope" in ctl.message and ctl.message.endswith(f"log: {bad / 'restyle.log'}")
    assert s.status == ctl.message and not s.is_running
    assert (scene.render.resolution_x, scene.render.resolution_y) == (832, 448)
    assert compositor.gbuffer_output(tree).mute


def _json_lines(text: str) -> list:
    """Every non-empty line of ``text`` parsed as JSON (fails on any other line)."""
    lines = [line for line in text.splitlines() if line.strip()]
    bad = [line for line in lines if not line.startswith("{")]
    assert not bad, f"non-JSON lines on stdout: {bad}"
    return [json.loads(line) for line in lines]


def test_headless_command(addon, footage, tmp_path, capsys):
    """``blender -b --command gbuffer_editor ...``: the registered function with an argv list."""
    from gbuffer_editor.addon import compositor
    from gbuffer_editor.operators import cli_command

    assert cli_command._handle is not None  # registered with bpy.utils.register_cli_command
    est = "embedded" if util.EMBEDDED_ONNX.exists() else "tiny"
    scene = bpy.context.scene
    gb = tmp_path / "gb"
    rc = cli_command.run(["decompose", str(footage("boat")), "--out", str(gb), "--estimator", est,
                          "--max-size", "48", "--frames", "2-3", "--setup",
                          "--save", str(tmp_path / "shot.blend")])
    assert rc == 0, capsys.readouterr().err
    assert _frame_files(gb, "gbuffer_") == ["gbuffer_0002.exr", "gbuffer_0003.exr"]
    cap = capsys.readouterr()
    ev = _json_lines(cap.out)  # stdout: JSON lines only; human lines go to stderr
    assert ev[0]["event"] == "start" and ev[0]["stage"] == "decompose"
    assert [e["frame"] for e in ev if e["event"] == "progress"] == [2, 3]
    assert ev[-1]["event"] == "done" and ev[-1]["out"] == str(gb) and ev[-1]["written"] == 2
    assert "Decompose: done" in cap.err
    assert (tmp_path / "shot.blend").exists()
    tree = compositor.find_tree(scene)
    image = compositor.find_node(tree, compositor.ROLE_GBUFFER)
    assert image.frame_start == 2 and image.frame_duration == 2  # source frame 2 -> scene frame 2

    # restyle with the scene's material edits (the setup exists): edited G-buffers, then frames
    scene.frame_start, scene.frame_end = 2, 3
    out = tmp_path / "styled"
    rc = cli_command.run(["restyle", str(gb), "--prompt", "underwater", "--out", str(out), "--no-mp4"])
    assert rc == 0, capsys.readouterr().err
    assert _frame_files(tmp_path / "styled_edited_gbuffer", "gbuffer_") == ["gbuffer_0002.exr", "gbuffer_0003.exr"]
    assert _frame_files(out, "restyle_") == ["restyle_0002.exr", "restyle_0003.exr"]
    cap = capsys.readouterr()
    ev = _json_lines(cap.out)
    assert [(e["stage"], e["done"]) for e in ev if e["event"] == "progress" and e["stage"] == "edits"] == \
        [("edits", 1), ("edits", 2)]
    assert [e["frame"] for e in ev if e["event"] == "progress" and e["stage"] == "restyle"] == [2, 3]
    assert ev[-1]["event"] == "done" and ev[-1]["out"] == str(out)
    assert "[gbuffer_editor]" not in cap.out and "Restyle: done" in cap.err

    # errors: meaningful exit codes, an error JSON line on stdout and the reason on stderr
    assert cli_command.run(["restyle", str(gb), "--out", str(tmp_path / "x")]) == 2
    cap = capsys.readouterr()
    assert "--prompt is required" in cap.err
    assert _json_lines(cap.out) == [{"event": "error", "message": "restyle: --prompt is required",
                                     "frame": None, "file": None}]
    assert cli_command.run(["frobnicate"]) == 2
    missing = tmp_path / "missing.mp4"
    assert cli_command.run(["decompose", str(missing), "--out", str(tmp_path / "m")]) == 2
    cap = capsys.readouterr()
    assert "missing.mp4" in cap.err and "log:" in cap.err
    (err_ev,) = _json_lines(cap.out)
    assert err_ev["event"] == "error" and "missing.mp4" in err_ev["message"]


def test_headless_command_stdout_is_json_only_at_fd_level(footage, tmp_path):
    """In a real process, Blender's own C-level messages (``Saved: ...``, ``Info: Saved as``)
    and our human lines go to stderr: file descriptor 1 carries only JSON lines."""
    import bpy_util

    est = "embedded" if util.EMBEDDED_ONNX.exists() else "tiny"  # noqa: F841 (as test_headless_command)
    res = bpy_util.run_bpy(f"""
        import sys
        import bpy  # noqa: F401 (makes addon_utils importable)
        sys.path.insert(0, {str(util.TESTS_DIR)!r})
        import blender_workflow_util as util
        util.enable_addon()
        from gbuffer_editor.operators import cli_command
        rc = cli_command.run(["decompose", {str(footage("boat"))!r}, "--out", {str(tmp_path / "gb")!r},
                              "--estimator", {est!r}, "--max-size", "32", "--frames", "1-2",
                              "--save", {str(tmp_path / "s.blend")!r}])
        emit_result({{"rc": rc}})
    """, timeout=300)
    assert res["rc"] == 0, res["stderr"][-3000:]
    lines = [l for l in res["stdout"].splitlines() if l.strip() and not l.startswith(bpy_util.RESULT_PREFIX)]
    ev = _json_lines("\n".join(lines))
    assert ev[0]["event"] == "start" and ev[-1]["event"] == "done"
    assert "Saved" in res["stderr"] and "Decompose: done" in res["stderr"]


def test_cancel_real_decompose_keeps_only_complete_frames(addon, footage, tmp_path):
    """Cancel (SIGTERM) a real backend decompose mid-run: exit 130, only whole frames on disk."""
    from gbuffer_editor.addon import worker
    from gbuffer_editor.operators import decompose, jobs

    launcher = util.write_tiny_launcher(tmp_path)
    out = tmp_path / "gb"
    from gbuffer_editor.backend.jobs.request import DecomposeRequest

    req = DecomposeRequest(str(footage("boat")), str(out), estimator="tiny_slow", processing_resolution=32,
                           frames="1-12")
    ctl = decompose.decompose_job(bpy.context.scene, req, out, wire=False)
    ctl.steps[0].argv[0] = str(launcher)  # the worker's Python: one that registers the tiny estimators
    ctl.start()
    while ctl.step.progress()[0] < 2:
        assert ctl.tick() == worker.RUNNING, ctl.message
        time.sleep(0.05)
    assert jobs.active_job(bpy.context.scene) is ctl
    ctl.cancel()
    assert ctl.state == worker.CANCELLED and ctl.returncode == 130
    assert bpy.context.scene.gbuffer_editor.status == "Decompose: cancelled; complete frames kept"
    frames = contract.list_frames(out)
    assert 2 <= len(frames) < 12
    assert list(frames) == list(range(1, len(frames) + 1))
    for path in frames.values():
        contract.read_frame(path, validate=True)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp")]
