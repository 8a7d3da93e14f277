"""Export Scene G-Buffers from the UI and headless (issue 4): ``gbuffer.export_scene``,
the sidebar's Scene G-Buffers panel and ``--command gbuffer_editor export-scene``.

Real Cycles renders of a tiny scene (32x24 px, 1 sample, 1 thread): a camera looking
at a large plane 5 m away, so every pixel's planar depth is 5.000. Runs in bpy 5.0.1
(.venv) and bpy 4.5 (.venv45): `./dev test` runs ``blender`` tests in both.
"""
import json
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")

import blender_workflow_util as util  # noqa: E402
from backend import contract  # noqa: E402
from gbuffer_util import flat_frames, write_sequence  # noqa: E402
from test_scene_export import _check_manifest, _principled, _snapshot  # noqa: E402  (material; "unchanged .blend" snapshot; manifest)

W, H = 32, 24


@pytest.fixture(scope="module")
def addon():
    mod = util.enable_addon()
    yield mod
    util.disable_addon()


def _plane_mesh(name, z, size):
    me = bpy.data.meshes.new(name)
    h = size / 2
    me.from_pydata([(-h, -h, z), (h, -h, z), (h, h, z), (-h, h, z)], [], [(0, 1, 2, 3)])
    me.update()
    return me


@pytest.fixture
def scene(addon):
    """A scene with a camera at the origin looking down -Z at a 40 m plane 5 m away."""
    sc = bpy.data.scenes.new("export_test")
    sc.render.resolution_x, sc.render.resolution_y, sc.render.resolution_percentage = W, H, 100
    sc.render.threads_mode, sc.render.threads = "FIXED", 1
    sc.cycles.samples = 1
    sc.cycles.use_denoising = False
    sc.frame_start, sc.frame_end = 1, 2
    cam = bpy.data.objects.new("export_cam", bpy.data.cameras.new("export_cam"))
    cam.data.lens = 35.0
    sc.collection.objects.link(cam)
    sc.camera = cam
    me = _plane_mesh("export_plane", -5.0, 40.0)
    me.materials.append(_principled("export_grey", (0.5, 0.4, 0.3), 0.2, 0.6)[0])
    sc.collection.objects.link(bpy.data.objects.new("export_plane", me))
    sc.collection.objects.link(bpy.data.objects.new("export_sun", bpy.data.lights.new("export_sun", "SUN")))
    yield sc
    bpy.data.scenes.remove(sc)


def _export(scene, **kw):
    with bpy.context.temp_override(scene=scene):
        return bpy.ops.gbuffer.export_scene(**kw)


def _files(folder):
    return sorted(p.name for p in folder.glob("gbuffer_*.exr"))


def _check_plane(path, scene_frame):
    f = contract.read_frame(path, validate=True)
    assert f.depth.shape == (H, W)
    assert np.abs(f.depth - 5.0).max() < 1e-3  # planar depth, corners included
    assert np.allclose(f.normal, (0.0, 0.0, 1.0), atol=1e-3)
    assert np.abs(f.albedo - (0.5, 0.4, 0.3)).max() < 2e-3
    assert np.abs(f.metallic - 0.2).max() < 2e-3 and np.abs(f.roughness - 0.6).max() < 2e-3
    assert f.meta["estimator"] == "scene" and f.meta["scene_frame"] == scene_frame
    return f


def test_operator_exports_frame_range_with_exact_depth_and_leaves_blend_unchanged(scene, tmp_path):
    before = _snapshot(scene)
    out = tmp_path / "gb"
    assert _export(scene, directory=str(out)) == {"FINISHED"}
    assert _files(out) == ["gbuffer_0001.exr", "gbuffer_0002.exr"]
    for n in (1, 2):
        f = _check_plane(out / f"gbuffer_{n:04d}.exr", n)
        assert f.meta["samples"] == 1 and f.meta["motion_blur_steps"] == 1
    assert _snapshot(scene) == before  # render settings, passes, AOVs, materials, frame, world
    s = scene.gbuffer_editor
    assert not s.is_running and s.status == f"Export Scene: 2 frames written to {out}"
    assert not s.gbuffer_dir  # not loaded into the compositor unless asked


def test_operator_current_frame_motion_blur_samples_and_load_into_compositor(scene, tmp_path):
    from gbuffer_editor.addon import compositor

    scene.frame_set(3)
    out = tmp_path / "gb"
    assert _export(scene, directory=str(out), current_frame_only=True, motion_blur_steps=2, samples=2,
                   load_compositor=True) == {"FINISHED"}
    assert _files(out) == ["gbuffer_0003.exr"]
    f = _check_plane(out / "gbuffer_0003.exr", 3)
    assert f.meta["motion_blur_steps"] == 2 and f.meta["samples"] == 2
    assert scene.cycles.samples == 1 and scene.frame_current == 3
    # wired as Decompose does: the Image node shows file 0003 at scene frame 3
    tree = compositor.find_tree(scene)
    node = compositor.find_node(tree, compositor.ROLE_GBUFFER)
    assert node.frame_start == 3 and node.frame_duration == 1 and node.frame_offset == 2
    assert "Depth" in node.outputs and compositor.find_node(tree, compositor.ROLE_OUTPUT) is not None
    assert scene.gbuffer_editor.gbuffer_dir == str(out)


def test_errors_are_clear_and_change_nothing(scene, tmp_path):
    from gbuffer_editor.operators.export_scene import check_export, default_output_dir
    from gbuffer_editor.operators.jobs import JobFailed

    before = _snapshot(scene)
    # a file where the folder should be
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(RuntimeError, match="is a file"):
        _export(scene, directory=str(afile))
    # a Decompose result (estimated G-buffers) is never overwritten by the export
    decomposed = write_sequence(tmp_path / "decompose_001", flat_frames(H, W, 2))
    mtimes = [p.stat().st_mtime_ns for p in sorted(decomposed.glob("*.exr"))]
    with pytest.raises(RuntimeError, match="overlaps other data.*'test'"):
        _export(scene, directory=str(decomposed))
    assert [p.stat().st_mtime_ns for p in sorted(decomposed.glob("*.exr"))] == mtimes
    assert _snapshot(scene) == before and not scene.gbuffer_editor.is_running

    # the default folder is relative to the .blend: refused while the file is unsaved
    assert default_output_dir(scene) == "//gbuffers_export_test/"
    with pytest.raises(JobFailed, match="not saved yet"):
        check_export(scene, "", [1], blend_path="")
    assert check_export(scene, "", [1], blend_path=str(tmp_path / "shot.blend")) == tmp_path / "gbuffers_export_test"
    if not bpy.data.filepath:  # (another test module may have saved the session's file)
        with pytest.raises(RuntimeError, match="not saved yet"):
            _export(scene)
    with pytest.raises(JobFailed, match="negative frame"):
        check_export(scene, str(tmp_path / "n"), [-1, 0])

    # no camera: the operator's poll says so; the check names the scene
    scene.camera = None
    with bpy.context.temp_override(scene=scene):
        assert not bpy.ops.gbuffer.export_scene.poll()
    with pytest.raises(JobFailed, match="'export_test' has no active camera"):
        check_export(scene, str(tmp_path / "x"), [1])
    assert not (tmp_path / "x").exists() and not (tmp_path / "gbuffers_export_test").exists()


def test_modal_escape_cancels_between_frames_and_restores(scene, tmp_path):
    from gbuffer_editor.addon import worker
    from gbuffer_editor.operators import jobs
    from gbuffer_editor.operators.export_scene import GBUFFER_OT_export_scene, export_job

    scene.frame_end = 3
    before = _snapshot(scene)
    out = tmp_path / "gb"
    removed, reports = [], []
    job = export_job(scene, out, [1, 2, 3]).start()
    op = SimpleNamespace(_job=job, _timer=object(), report=lambda kind, msg: reports.append((kind, msg)))
    op._finish = lambda j: GBUFFER_OT_export_scene._finish(op, j)
    ctx = SimpleNamespace(window_manager=SimpleNamespace(event_timer_remove=removed.append))
    modal = GBUFFER_OT_export_scene.modal
    # while exporting, input is swallowed (no save / undo of the temporary export state)
    assert modal(op, ctx, SimpleNamespace(type="S", value="PRESS")) == {"RUNNING_MODAL"}
    assert scene.gbuffer_editor.is_running and jobs.active_job(scene) is job
    assert modal(op, ctx, SimpleNamespace(type="TIMER", value="NOTHING")) == {"PASS_THROUGH"}  # frame 1
    assert _files(out) == ["gbuffer_0001.exr"]
    assert modal(op, ctx, SimpleNamespace(type="ESC", value="PRESS")) == {"CANCELLED"}
    assert job.state == worker.CANCELLED and reports[-1][0] == {"WARNING"} and removed
    assert _files(out) == ["gbuffer_0001.exr"]  # the complete frame is kept
    man = contract.read_manifest(out)  # ... and listed; the export is not complete
    assert [r["file"] for r in man["frames"]] == ["gbuffer_0001.exr"] and man["complete"] is False
    assert _snapshot(scene) == before and not scene.gbuffer_editor.is_running


def test_headless_command_export_scene(scene, tmp_path, capsys):
    from gbuffer_editor.operators import cli_command

    scene.frame_start, scene.frame_end = 1, 5
    out = tmp_path / "cli"
    before = _snapshot(scene)
    rc = cli_command.run(["export-scene", "--scene", scene.name, "--out", str(out), "--frames", "2-3",
                          "--samples", "1", "--res", "32x24"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    events = [json.loads(line) for line in cap.out.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events] == ["start", "progress", "progress", "done"]
    assert events[0]["total"] == 2 and events[0]["out"] == str(out)
    assert [e["frame"] for e in events[1:3]] == [2, 3] and events[2]["done"] == 2
    assert events[-1]["written"] == 2
    assert _files(out) == ["gbuffer_0002.exr", "gbuffer_0003.exr"]
    _check_plane(out / "gbuffer_0002.exr", 2)
    assert _snapshot(scene) == before
    man = _check_manifest(out, [2, 3], scene=scene.name, resolution=[32, 24], samples=1, motion_blur_steps=1)
    assert man["settings"]["camera"] == scene.camera.name

    # usage errors: exit 2, nothing written
    assert cli_command.run(["export-scene", "--scene", scene.name, "--out", str(out / "u"),
                            "--frames", "3-1"]) == 2
    assert "end is before the start" in capsys.readouterr().err
    for bad, text in ((["--frames", "x"], "--frames x: expected a frame number N or a range A-B, e.g. 1-24"),
                      (["--res", "wide"], "--res wide: expected WIDTHxHEIGHT in pixels, e.g. 1920x1080")):
        assert cli_command.run(["export-scene", "--scene", scene.name, "--out", str(out / "u"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.strip() == f"export-scene: {text}" and "invalid literal" not in err
    assert cli_command.run(["export-scene", "--scene", scene.name]) == 2  # no --out
    assert cli_command.run(["export-scene", "--scene", "nope", "--out", str(out / "u")]) == 2
    assert "no such scene" in capsys.readouterr().err
    assert not (out / "u").exists()

    # run-time error (no camera): exit 1, one line on stderr and a JSON error event
    scene.camera = None
    assert cli_command.run(["export-scene", "--scene", scene.name, "--out", str(out / "n")]) == 1
    cap = capsys.readouterr()
    assert cap.err.strip().count("\n") == 0 and "has no active camera" in cap.err
    assert json.loads(cap.out.strip().splitlines()[-1])["event"] == "error"
    assert not (out / "n").exists()


def test_sidebar_scene_gbuffers_panel(scene, tmp_path):
    from gbuffer_editor.panels import sidebar

    panels = [c for c in sidebar.classes if c.bl_label == "Scene G-Buffers"]
    assert {c.bl_space_type for c in panels} == {"NODE_EDITOR", "CLIP_EDITOR"}
    s = scene.gbuffer_editor
    s.scene_export_dir, s.scene_export_motion_blur, s.scene_export_load = str(tmp_path / "o"), 3, True
    layout = util.RecordingLayout()
    sidebar.draw_scene_export(layout, SimpleNamespace(scene=scene))
    op_props = {c[2]: c[3] for c in layout.calls if c[0] == "operator_prop"}
    assert op_props == {"directory": str(tmp_path / "o"), "current_frame_only": False, "motion_blur_steps": 3,
                        "samples": 0, "load_compositor": True}
    rna = bpy.ops.gbuffer.export_scene.get_rna_type()
    assert set(op_props) <= set(rna.properties.keys())
    s.scene_export_dir = ""
    scene.camera = None
    layout = util.RecordingLayout()
    sidebar.draw_scene_export(layout, SimpleNamespace(scene=scene))
    labels = [c[1].get("text") for c in layout.calls if c[0] == "label"]
    assert "//gbuffers_export_test/" in labels and "The scene has no camera" in labels


def test_headless_command_on_a_saved_blend_in_a_fresh_process(tmp_path):
    """``blender -b shot.blend --command gbuffer_editor export-scene --out //gb/ ...``: a
    file saved elsewhere is opened in a fresh Blender, the add-on enabled, the command
    run; ``//`` is next to the .blend, the file on disk is never saved unless --save."""
    import bpy_util

    blend = tmp_path / "shot.blend"
    res = bpy_util.run_bpy(f"""
        import os, sys
        sys.path.insert(0, {str(util.TESTS_DIR)!r}); sys.path.insert(0, {str(util.REPO_ROOT)!r})
        import bpy
        sc = bpy.context.scene
        sc.render.resolution_x, sc.render.resolution_y = {W}, {H}
        sc.render.threads_mode, sc.render.threads = "FIXED", 1
        sc.cycles.samples = 1
        sc.frame_start, sc.frame_end = 1, 2
        for ob in list(sc.objects):
            if ob.type == "MESH":
                bpy.data.objects.remove(ob)
        sc.camera.location, sc.camera.rotation_euler = (0, 0, 0), (0, 0, 0)
        bpy.ops.mesh.primitive_plane_add(size=40.0, location=(0, 0, -5))
        bpy.ops.wm.save_as_mainfile(filepath={str(blend)!r})
        mtime = os.stat({str(blend)!r}).st_mtime_ns
        bpy.ops.wm.read_factory_settings(use_empty=True)
        bpy.ops.wm.open_mainfile(filepath={str(blend)!r})   # as `blender -b shot.blend`
        import blender_workflow_util as util
        util.enable_addon()
        from gbuffer_editor.operators import cli_command
        rc = cli_command.run(["export-scene", "--out", "//gb/", "--motion-blur", "2"])
        rc2 = cli_command.run(["export-scene", "--out", "//gb/", "--frames", "2", "--setup",
                               "--save", {str(tmp_path / "wired.blend")!r}])
        from gbuffer_editor.addon import compositor
        node = compositor.find_node(compositor.find_tree(bpy.context.scene), compositor.ROLE_GBUFFER)
        emit_result({{"rc": rc, "rc2": rc2, "unchanged": os.stat({str(blend)!r}).st_mtime_ns == mtime,
                      "node_start": node.frame_start if node else None}})
    """)
    assert res["rc"] == 0 and res["rc2"] == 0, res["stderr"][-3000:]
    assert res["unchanged"] and (tmp_path / "wired.blend").exists()
    assert _files(tmp_path / "gb") == ["gbuffer_0001.exr", "gbuffer_0002.exr"]
    f = contract.read_frame(tmp_path / "gb" / "gbuffer_0001.exr", validate=True)
    assert np.abs(f.depth - 5.0).max() < 1e-3 and f.meta["motion_blur_steps"] == 2
    assert f.meta["source"] == str(blend)
    assert res["node_start"] == 1  # the folder holds frames 1-2: the Image node starts at frame 1
    done = [json.loads(line) for line in res["stdout"].splitlines() if line.startswith('{"event": "done"')]
    assert [d["written"] for d in done] == [2, 1]
    assert "Saved:" not in res["stdout"] and "Saved:" in res["stderr"]  # Cycles' messages go to stderr; stdout has the JSON lines


def test_exported_frames_restyle_with_material_edits(scene, tmp_path):
    """Export -> Load into Compositor -> a material edit -> Restyle: the product's loop on
    exact G-buffers (embedded renderer, worker process)."""
    from gbuffer_editor.addon import compat, compositor, worker
    from gbuffer_editor.operators import restyle

    scene.frame_end = 1
    out = tmp_path / "gb"
    assert _export(scene, directory=str(out), load_compositor=True) == {"FINISHED"}
    tree = compositor.find_tree(scene)
    value = compat.new_value_node(tree, 0.0, "Roughness 0")
    value.parent = compositor.find_node(tree, compositor.ROLE_EDITS)
    tree.links.new(value.outputs[0], compositor.find_node(tree, "out", "Roughness").inputs[0])
    run = tmp_path / "restyle_001"
    ctl = restyle.restyle_job(scene, run / "result", prompt="dense fog", renderer="embedded",
                              edited_dir=run / "edited_gbuffer")
    assert ctl.run_blocking() == worker.DONE, ctl.message
    src = contract.read_frame(out / "gbuffer_0001.exr")
    edited = contract.read_frame(run / "edited_gbuffer" / "gbuffer_0001.exr", validate=True)
    assert np.all(edited.roughness == 0.0) and src.roughness.min() > 0.5
    np.testing.assert_allclose(edited.depth, src.depth, rtol=1e-6)
    assert edited.meta["estimator"] == "scene" and edited.meta["edited"] is True
    assert _files(run / "result") == [] and sorted(p.name for p in (run / "result").glob("restyle_*.exr")) == \
        ["restyle_0001.exr"]


def test_camera_markers_switch_the_camera_per_frame(scene, tmp_path):
    """Third-party files bind cameras to timeline markers: each frame is exported from the
    camera Blender would render it with (depth, camera matrix); the scene's camera is
    restored afterwards."""
    cam_a = scene.camera
    cam_b = bpy.data.objects.new("export_cam_b", bpy.data.cameras.new("export_cam_b"))
    scene.collection.objects.link(cam_b)
    cam_b.location = (0.0, 0.0, 1.0)  # 6 m from the plane
    scene.timeline_markers.new("b", frame=2).camera = cam_b
    scene.timeline_markers.new("a", frame=1).camera = cam_a
    scene.frame_set(1)
    out = tmp_path / "gb"
    assert _export(scene, directory=str(out)) == {"FINISHED"}
    f1, f2 = (contract.read_frame(out / f"gbuffer_{n:04d}.exr") for n in (1, 2))
    assert np.abs(f1.depth - 5.0).max() < 1e-3 and np.abs(f2.depth - 6.0).max() < 1e-3
    assert f1.meta["camera_matrix_world"][2][3] == pytest.approx(0.0)
    assert f2.meta["camera_matrix_world"][2][3] == pytest.approx(1.0)
    assert scene.camera == cam_a and scene.frame_current == 1
