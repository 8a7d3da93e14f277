"""Sidebar panels, scene settings, compat layer, compositor wiring and the job state machine.

Runs in bpy 5.0.1 (.venv) and bpy 4.5 (.venv45): `./dev test` runs ``blender`` tests in both.
"""
import sys
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")

import blender_workflow_util as util  # noqa: E402
from backend import contract  # noqa: E402
from gbuffer_util import flat_frames, write_sequence  # noqa: E402


@pytest.fixture(scope="module")
def addon():
    mod = util.enable_addon()
    yield mod
    util.disable_addon()


@pytest.fixture
def scene(addon):
    """A fresh scene (own compositor tree) per test, removed afterwards."""
    sc = bpy.data.scenes.new("gbuffer_test")
    yield sc
    bpy.data.scenes.remove(sc)


def _op_exists(idname: str) -> bool:
    mod, name = idname.split(".")
    try:
        getattr(getattr(bpy.ops, mod), name).get_rna_type()
    except (KeyError, AttributeError):
        return False
    return True


def _draw_all(addon, context):
    from gbuffer_editor.panels import sidebar, statusbar

    layout = util.RecordingLayout()
    for cls in sidebar.classes:
        cls.draw(SimpleNamespace(layout=layout), context)
    statusbar.draw_statusbar(SimpleNamespace(layout=layout), context)
    return layout.calls


def test_panels_draw_only_existing_operators_and_properties(addon, scene, tmp_path):
    from gbuffer_editor.panels import sidebar

    assert {c.bl_space_type for c in sidebar.classes} == {"NODE_EDITOR", "CLIP_EDITOR"}
    assert {c.bl_category for c in sidebar.classes} == {"G-Buffer"}
    for cls in sidebar.classes:
        assert hasattr(bpy.types, cls.__name__), f"{cls.__name__} not registered"

    s = scene.gbuffer_editor
    ctx = SimpleNamespace(scene=scene, window_manager=bpy.context.window_manager)
    states = [
        dict(),
        dict(use_scene_range=False, source_path=str(tmp_path / "a.mp4"), result_dir=str(tmp_path / "r" / "result"),
             last_decompose_dir=str(tmp_path / "decompose_001")),
        dict(is_running=True, progress=0.4, status="Decompose: Decomposing 2/5", log_path=str(tmp_path / "x.log")),
    ]
    ops, props = set(), set()
    for state in states:
        for k, v in state.items():
            setattr(s, k, v)
        for call in _draw_all(addon, ctx):
            if call[0] == "operator":
                assert _op_exists(call[1]), f"panel shows unknown operator {call[1]}"
                ops.add(call[1])
            elif call[0] == "prop":
                data, name = call[1], call[2]
                assert name in data.bl_rna.properties, f"panel shows unknown property {name}"
                props.add(name)
            elif call[0] == "operator_prop":
                mod, name = call[1].split(".")
                rna = getattr(getattr(bpy.ops, mod), name).get_rna_type()
                assert call[2] in rna.properties, f"{call[1]} has no property {call[2]}"
                props.add(f"{call[1]}.{call[2]}")
            elif call[0] == "operator_menu_enum":
                mod, name = call[1].split(".")
                rna = getattr(getattr(bpy.ops, mod), name).get_rna_type()
                assert call[2] in rna.properties, f"{call[1]} has no property {call[2]}"
                ops.add(call[1])
            elif call[0] == "progress":
                assert call[1]["factor"] == pytest.approx(0.4)
    assert ops == {"gbuffer.import_footage", "gbuffer.decompose", "gbuffer.load_gbuffers",
                   "gbuffer.restyle", "gbuffer.cancel_job", "gbuffer.export_scene", "gbuffer.track_solve",
                   "gbuffer.show_result", "gbuffer.play_preview", "gbuffer.open_path", "gbuffer.look_preset",
                   "gbuffer.import_fused_mesh"}
    assert {"output_dir", "estimator", "processing_resolution", "use_scene_range", "frame_start", "frame_end",
            "stabilize", "use_camera_solve", "camera_auto", "preview_pass", "prompt", "renderer", "log_path", "gbuffer.decompose.resume",
            "show_looks", "look_fog", "look_night", "look_rain", "look_snow", "look_underwater", "look_overcast",
            "look_golden_hour"} <= props


def test_compositor_panel_poll(addon):
    from gbuffer_editor.panels import sidebar

    comp = next(c for c in sidebar.classes if c.bl_space_type == "NODE_EDITOR")
    sc = bpy.context.scene
    assert comp.poll(SimpleNamespace(space_data=SimpleNamespace(tree_type="CompositorNodeTree"), scene=sc))
    assert not comp.poll(SimpleNamespace(space_data=SimpleNamespace(tree_type="ShaderNodeTree"), scene=sc))


def test_enums_list_the_backend_registries(addon, scene):
    # the add-on's own copy of the backend (other tests may register test estimators
    # in the top-level ``backend`` package, a different module)
    from gbuffer_editor.backend.estimators import available_estimators
    from gbuffer_editor.backend.renderers import available_renderers

    # dynamic enums: read the items through the callback the property uses
    from gbuffer_editor.addon import props as props_mod

    assert sorted(i[0] for i in props_mod._estimator_items(None, None)) == sorted(available_estimators())
    assert sorted(i[0] for i in props_mod._renderer_items(None, None)) == sorted(available_renderers())
    assert {"embedded", "marigold"} <= {i[0] for i in props_mod._estimator_items(None, None)}
    assert {"embedded", "controlnet"} <= {i[0] for i in props_mod._renderer_items(None, None)}
    assert props_mod._estimator_items(None, None)[0][0] == "embedded"  # default first
    assert scene.gbuffer_editor.estimator == "embedded"


def test_import_footage_sets_scene_from_fractional_rate_movie(addon, footage):
    from gbuffer_editor.addon import compositor

    sc = bpy.context.scene
    assert bpy.ops.gbuffer.import_footage(filepath=str(footage("phone_office"))) == {"FINISHED"}
    r = sc.render
    assert (r.resolution_x, r.resolution_y, r.resolution_percentage) == (320, 240, 100)
    assert r.fps == 30
    assert r.fps / r.fps_base == pytest.approx(45000 / 1499, rel=1e-6)
    assert (r.pixel_aspect_x, r.pixel_aspect_y) == (1.0, 1.0)
    assert (sc.frame_start, sc.frame_end) == (1, 36)
    tree = compositor.find_tree(sc)
    src = compositor.find_node(tree, compositor.ROLE_SOURCE)
    assert src.bl_idname == "CompositorNodeMovieClip"
    assert src.clip.colorspace_settings.name == "sRGB"
    assert src.outputs["Image"].is_linked
    assert sc.gbuffer_editor.source_path.endswith("phone_office.mp4")
    assert not any(n.bl_idname == "CompositorNodeRLayers" for n in tree.nodes)


def test_import_footage_bad_file_reports_error(addon, tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a movie")
    s = bpy.context.scene.gbuffer_editor
    s.source_path, s.status = "/footage/earlier.mp4", "Decompose: done"
    with pytest.raises(RuntimeError, match="broken.mp4"):
        bpy.ops.gbuffer.import_footage(filepath=str(bad))
    # the Status line says the import did not take, and which footage Decompose still uses
    assert s.status == "Import failed: broken.mp4 (still using earlier.mp4); see the Info log"
    assert s.source_path == "/footage/earlier.mp4"


def test_fps_and_pixel_aspect_conversions(addon):
    from gbuffer_editor.operators import footage

    assert footage.scene_fps(Fraction(30000, 1001)) == (30, pytest.approx(1.001))
    assert footage.scene_fps(Fraction(24)) == (24, 1.0)
    fps, base = footage.scene_fps(Fraction(45000, 1499))
    assert fps / base == pytest.approx(45000 / 1499, rel=1e-9)
    assert footage.pixel_aspect(Fraction(4, 3)) == (pytest.approx(4 / 3), 1.0)
    assert footage.pixel_aspect(Fraction(8, 9)) == (1.0, pytest.approx(9 / 8))


def test_compat_multilayer_file_output(addon, scene, tmp_path):
    from gbuffer_editor.addon import compat

    tree = compat.compositor_tree(scene)
    assert tree.bl_idname == "CompositorNodeTree"
    if compat.IS_50:
        assert scene.compositing_node_group == tree
    else:
        assert scene.use_nodes and scene.node_tree == tree
    passes = [(n, spec[2]) for n, spec in contract.PASSES.items()]
    node = compat.new_multilayer_file_output(tree, passes)
    assert list(compat.file_output_inputs(node)) == list(contract.PASSES)
    assert node.format.file_format == "OPEN_EXR_MULTILAYER" and node.format.color_depth == "32"
    if compat.IS_50:
        types = {s.name: s.type for s in node.inputs if s.name}
        assert types["Depth"] == "VALUE" and types["Normal"] == "VECTOR" and types["Combined"] == "RGBA"
    compat.set_file_output_path(node, str(tmp_path), "gbuffer_####")
    d, prefix = compat.file_output_path(node)
    assert (d.rstrip("/"), prefix) == (str(tmp_path), "gbuffer_####")
    out = compat.output_socket(tree)
    assert out.node.bl_idname == ("NodeGroupOutput" if compat.IS_50 else "CompositorNodeComposite")
    assert compat.output_socket(tree) == out  # found again, not duplicated


def test_gbuffer_setup_wires_passes_through_material_edits(addon, scene, tmp_path):
    from gbuffer_editor.addon import compositor

    folder = write_sequence(tmp_path / "gb", flat_frames(48, 64, 3))
    node = compositor.setup_gbuffer(scene, folder, "Roughness")
    tree = compositor.find_tree(scene)
    assert node.image.source == "SEQUENCE" and node.frame_duration == 3 and node.frame_offset == 0
    sockets = {o.name: o.type for o in node.outputs if o.enabled}
    for name, spec in contract.PASSES.items():
        assert sockets[name] == spec[2], name
    frame = compositor.find_node(tree, compositor.ROLE_EDITS)
    assert frame.bl_idname == "NodeFrame" and frame.label == "Material edits"
    fo = compositor.gbuffer_output(tree)
    assert fo.mute  # a plain render writes nothing
    from gbuffer_editor.addon import compat

    for name, sock in compat.file_output_inputs(fo).items():
        link = sock.links[0]
        assert link.from_node.parent == frame and link.from_node.label == name
        r_in = link.from_node.inputs[0].links[0].from_node
        assert r_in.parent == frame
        assert r_in.inputs[0].links[0].from_socket == node.outputs[name]
    viewer = compositor.find_node(tree, compositor.ROLE_VIEWER)
    assert viewer.inputs["Image"].links[0].from_node == compositor.find_node(tree, "out", "Roughness")
    scene.gbuffer_editor.preview_pass = "Depth"  # update callback rewires the Viewer
    src = viewer.inputs["Image"].links[0].from_node
    assert src.bl_idname == "CompositorNodeNormalize"
    compositor.setup_gbuffer(scene, folder)  # idempotent: no duplicates
    assert sum(1 for n in tree.nodes if n.bl_idname == "CompositorNodeOutputFile") == 1
    assert sum(1 for n in tree.nodes if n.bl_idname == "NodeReroute") == 2 * len(contract.PASSES)


def test_job_controller_done_error_cancel(addon, scene, tmp_path):
    from gbuffer_editor.addon import worker
    from gbuffer_editor.operators import jobs

    script = util.write_fake_worker(tmp_path)
    called = []

    def ctl(mode, n=3):
        out = tmp_path / mode
        out.mkdir(exist_ok=True)
        argv = [sys.executable, str(script), str(out), str(n), mode]
        return jobs.JobController(scene, "Test", [
            jobs.WorkerStep("Working", argv, out / "job.log", env=worker.worker_env()),
            jobs.CallStep("Finishing", lambda c: called.append(mode)),
        ])

    c = ctl("ok")
    assert c.run_blocking(poll_interval=0.02) == worker.DONE
    s = scene.gbuffer_editor
    assert called == ["ok"] and s.progress == 1.0 and not s.is_running and s.status == "Test: done"
    assert s.log_path == str(tmp_path / "ok" / "job.log")

    c = ctl("fail")
    assert c.run_blocking(poll_interval=0.02) == worker.ERROR
    assert called == ["ok"]  # the step after a failure never runs
    log = tmp_path / "fail" / "job.log"
    assert s.status == f"estimator exploded (frame 2, /footage/shot_0002.png); log: {log}"

    c = ctl("hang", n=5).start()
    assert jobs.active_job(scene) is c and s.is_running
    with pytest.raises(jobs.JobFailed, match="still running"):
        ctl("ok").start()
    while c.step.progress()[0] < 2:
        c.tick()
    assert 0.0 < s.progress < 1.0 and s.status == "Test: Working 2/5"
    c.cancel()
    assert c.state == worker.CANCELLED and not s.is_running and jobs.active_job(scene) is None
    assert c.returncode == 130 and called == ["ok"]
    assert sorted(p.name for p in (tmp_path / "hang").glob("f*.txt")) == ["f0001.txt", "f0002.txt"]

    # the reader sees end-of-stream ~1 s after the worker exited (as under CPU load):
    # cancel still reports the exit status
    c = ctl("hang_late_eof", n=5).start()
    while c.step.progress()[0] < 2:
        c.tick()
    c.cancel()
    assert c.state == worker.CANCELLED and c.returncode == 130


def test_modal_path_timer_and_escape(addon, scene, tmp_path):
    """The modal operator's event handling, driven with timer / Esc events."""
    from gbuffer_editor.addon import worker
    from gbuffer_editor.operators import jobs
    from gbuffer_editor.operators.decompose import GBUFFER_OT_decompose

    script = util.write_fake_worker(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    removed, reports = [], []
    timer = object()
    ctx = SimpleNamespace(window_manager=SimpleNamespace(event_timer_remove=removed.append))

    def op_for(mode):
        argv = [sys.executable, str(script), str(out), "4", mode]
        job = jobs.JobController(scene, "Decompose", [jobs.WorkerStep("W", argv, out / "m.log")]).start()
        op = SimpleNamespace(_job=job, _timer=timer, report=lambda kind, msg: reports.append((kind, msg)))
        op._finish = lambda j: GBUFFER_OT_decompose._finish(op, j)
        return op, job

    class StrictEvent:
        """Only what bpy.types.Event really has (checked by introspection)."""

        def __init__(self, **kw):
            self.__dict__.update(kw)

        def __getattr__(self, name):
            assert name in bpy.types.Event.bl_rna.properties, f"Event has no attribute {name!r}"
            raise AttributeError(name)

    wm_funcs = bpy.types.WindowManager.bl_rna.functions
    assert {"event_timer_add", "event_timer_remove", "modal_handler_add"} <= set(wm_funcs.keys())

    op, job = op_for("ok")
    tick = StrictEvent(type="TIMER", value="NOTHING")
    result = {"PASS_THROUGH"}
    while result == {"PASS_THROUGH"}:
        result = GBUFFER_OT_decompose.modal(op, ctx, tick)
    assert result == {"FINISHED"} and removed == [timer] and reports[-1] == ({"INFO"}, "Decompose: done")

    op, job = op_for("hang")
    while job.step.progress()[0] < 1:
        assert GBUFFER_OT_decompose.modal(op, ctx, tick) == {"PASS_THROUGH"}
    esc = StrictEvent(type="ESC", value="PRESS")
    assert GBUFFER_OT_decompose.modal(op, ctx, esc) == {"CANCELLED"}
    assert job.state == worker.CANCELLED and reports[-1][0] == {"WARNING"}


def test_poll_messages(addon, scene):
    from gbuffer_editor.operators.decompose import GBUFFER_OT_decompose
    from gbuffer_editor.operators.restyle import GBUFFER_OT_restyle

    ctx = SimpleNamespace(scene=scene)
    assert not GBUFFER_OT_decompose.poll(ctx)  # no footage yet
    assert not GBUFFER_OT_restyle.poll(ctx)  # no G-buffers yet
    scene.gbuffer_editor.source_path = "/x.mp4"
    assert GBUFFER_OT_decompose.poll(ctx)


def test_sanitize_keeps_edited_frames_inside_the_contract(addon):
    """Restyle's EditsStep brings edited frames back with the contract's own sanitize."""
    from gbuffer_editor.backend import contract
    from gbuffer_editor.backend.contract import sanitize

    h, w = 4, 5
    f = contract.GBufferFrame(
        combined=np.full((h, w, 4), -1.0, np.float32), depth=np.zeros((h, w), np.float32),
        normal=np.zeros((h, w, 3), np.float32), albedo=np.full((h, w, 3), 2.0, np.float32),
        metallic=np.full((h, w), np.nan, np.float32), roughness=np.full((h, w), -0.5, np.float32),
    )
    f.normal[0, 0] = (0, 3, 4)
    assert sanitize(f) is f
    f.validate()
    assert np.allclose(f.normal[0, 0], (0, 0.6, 0.8)) and np.allclose(f.normal[1, 1], (0, 0, 1))
    assert f.albedo.max() == 1.0 and f.roughness.min() == 0.0 and f.metallic.max() == 0.0


def test_import_png_sequence(addon, tmp_path):
    import cv2

    from gbuffer_editor.addon import compositor
    from gbuffer_editor.operators import footage

    for i in range(5, 9):  # shot_0005.png .. shot_0008.png, 40x30
        img = np.full((30, 40, 3), 30 * i % 255, np.uint8)
        assert cv2.imwrite(str(tmp_path / f"shot_{i:04d}.png"), img)
    (tmp_path / "other_0001.png").write_bytes((tmp_path / "shot_0005.png").read_bytes())
    sc = bpy.context.scene
    fps_before = (sc.render.fps, sc.render.fps_base)
    assert bpy.ops.gbuffer.import_footage(filepath=str(tmp_path / "shot_0006.png")) == {"FINISHED"}
    assert (sc.render.resolution_x, sc.render.resolution_y) == (40, 30)
    assert (sc.frame_start, sc.frame_end) == (5, 8)  # the files' own numbers (issue 16)
    assert (sc.render.fps, sc.render.fps_base) == fps_before  # a sequence has no rate
    clip = compositor.find_node(compositor.find_tree(sc), compositor.ROLE_SOURCE).clip
    assert clip.source == "SEQUENCE" and clip.colorspace_settings.name == "sRGB"
    assert clip.frame_start == 5
    assert sc.gbuffer_editor.source_path == str(tmp_path / "shot_0005.png")
    assert footage.backend_input(sc.gbuffer_editor.source_path) == str(tmp_path / "shot_####.png")
    assert footage.backend_input("/a/b/clip.mov") == "/a/b/clip.mov"


def test_model_list_status_and_preferences_draw(addon, tmp_path):
    from gbuffer_editor.addon import model_catalog as models
    from gbuffer_editor.addon import preferences
    from gbuffer_editor.backend.estimators import marigold

    specs = models.model_specs()
    assert [m.key for m in specs][:2] == ["embedded", "marigold_depth"]

    assert specs[1].repo_id == marigold.DEPTH_MODEL
    spec = specs[1]
    assert models.model_status(spec, tmp_path) == (False, 0)
    repo = tmp_path / ("models--" + spec.repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"x" * 3000)
    snap = repo / "snapshots" / "0123"
    snap.mkdir(parents=True)
    (snap / "model_index.json").write_text("{}")
    assert models.model_status(spec, tmp_path) == (False, 0)  # no ref names the snapshot
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123")
    present, size = models.model_status(spec, tmp_path)
    assert present and size == 3006  # blob, config and the ref
    assert models.human_size(3002) == "2.9 KB" and models.human_size(512) == "512 B"
    assert models.model_status(specs[0], tmp_path)[0] == util.EMBEDDED_ONNX.exists()

    # bpy as a module runs with online access off: downloads are refused with the reason
    assert not bpy.app.online_access
    assert preferences.downloads_allowed(None) == (False, "Online access is off (Preferences > System > Network)")
    assert not bpy.ops.gbuffer.download_model.poll()

    prefs = bpy.context.preferences.addons[util.PACKAGE].preferences
    prefs.model_dir = str(tmp_path)
    try:
        layout = util.RecordingLayout()
        # the preferences' draw() calls this (its other parts need an installed extension)
        preferences.draw_model_list(layout, prefs)
        labels = [c[1].get("text", "") for c in layout.calls if c[0] == "label"]
        assert "Marigold Depth" in labels and "Marigold Normals" in labels
        assert any(t.startswith("2.9 KB") for t in labels)  # the present one, with its size
        assert sum(t.startswith("missing") for t in labels) == len(specs) - 1 - util.EMBEDDED_ONNX.exists()
        for c in layout.calls:
            if c[0] == "operator":
                assert _op_exists(c[1]), c[1]
        assert sum(c[0] == "operator" and c[1] == "gbuffer.download_model" for c in layout.calls) == len(specs) - 2
    finally:
        prefs.model_dir = ""


def test_marigold_downloads_only_the_weights_it_loads(addon):
    """Issue 26: the Marigold repositories publish every weight file in fp32 and fp16
    (tests/fixtures/hub_files.json); the estimator loads the fp32 ones, so Preferences >
    Models fetches those and the configs/tokenizer, never the fp16 copies."""
    from fnmatch import fnmatch

    import hub_cache_util as hub
    from gbuffer_editor.addon.model_catalog import model_specs

    listed = hub.published()["prs-eth/marigold-depth-v1-1"]["files"]
    for spec in (m for m in model_specs() if m.key.startswith("marigold_")):
        fetched = {f for f in listed if any(fnmatch(f, a) for a in spec.allow)}
        assert not [f for f in fetched if ".fp16." in f], spec.key
        assert fetched == {f for f in listed if ".fp16." not in f}, sorted(set(listed) - fetched)
        assert spec.licence == "OpenRAIL++-M"


def test_download_worker_reports_failure_offline(addon, tmp_path):
    """The real download script in a worker: offline, it ends with an error event naming the repo."""
    from gbuffer_editor.addon import worker
    from gbuffer_editor.addon.model_catalog import model_specs
    from gbuffer_editor.operators import models

    pytest.importorskip("huggingface_hub")
    spec = model_specs()[1]
    env = worker.worker_env(extra={"HF_HUB_OFFLINE": "1"})
    job = worker.WorkerJob(models.download_argv(spec, str(tmp_path), sys.executable),
                           log_path=tmp_path / "dl.log", env=env).start()
    assert job.wait(poll_interval=0.05) == worker.ERROR
    assert spec.repo_id in job.message and "HF_HUB_OFFLINE" in job.message  # the CLI command, one line


def test_file_output_multilayer_roundtrip_and_edits_step(addon, scene, tmp_path):
    """Blender writes the G-buffer output (5.0: one part per pass; 4.x: single part) and
    compat.read_gbuffer_frame reads it back; EditsStep turns renders into contract frames."""
    import OpenEXR

    from gbuffer_editor.addon import compat, compositor, worker
    from gbuffer_editor.operators import jobs
    from gbuffer_editor.operators.restyle import EditsStep

    src_dir = write_sequence(tmp_path / "gb", flat_frames(48, 64, 2))
    scene.frame_start, scene.frame_end = 1, 2
    scene.render.resolution_x, scene.render.resolution_y = 1920, 1080
    # a VSE strip would make a render use the sequencer instead of the compositor
    strip_img = str(contract.frame_path(src_dir, 1))
    strips = compat.strips(scene)
    try:
        strips.new_image(name="plate", filepath=strip_img, channel=1, frame_start=1)
    except TypeError:  # 5.0 keyword names
        strips.new_image(name="plate", filepath=strip_img, channel=1, frame_start=1, fit_method="ORIGINAL")
    scene.render.use_sequencer = True
    compositor.setup_gbuffer(scene, src_dir)
    tree = compositor.find_tree(scene)
    value = compat.new_value_node(tree, 0.25, "Metal")
    tree.links.new(value.outputs[0], compositor.find_node(tree, "out", "Metallic").inputs[0])

    ctl = jobs.JobController(scene, "Edits", [EditsStep(tmp_path / "edited")])
    assert ctl.run_blocking() == worker.DONE, ctl.message
    assert (scene.render.resolution_x, scene.render.resolution_y) == (1920, 1080)  # restored
    assert scene.render.use_sequencer
    assert sorted(p.name for p in (tmp_path / "edited").iterdir()) == [
        "gbuffer_0001.exr", "gbuffer_0002.exr", "manifest.json"]
    for n in (1, 2):
        src = contract.read_frame(contract.frame_path(src_dir, n))
        out = contract.read_frame(contract.frame_path(tmp_path / "edited", n), validate=True)
        assert out.depth.shape == (48, 64)
        np.testing.assert_array_equal(out.depth, src.depth)
        np.testing.assert_allclose(out.normal, src.normal, atol=1e-6)
        np.testing.assert_allclose(out.roughness, src.roughness, atol=1e-3)
        np.testing.assert_allclose(out.combined, src.combined, atol=1e-3)
        assert np.all(out.metallic == 0.25)
        assert out.meta["frame_index"] == n - 1 and out.meta["edited"] is True

    # the raw file Blender writes, read through the compat layer
    fo = compositor.gbuffer_output(tree)
    compat.set_file_output_path(fo, str(tmp_path / "raw"), "raw_####")
    fo.mute = False
    scene.render.use_sequencer = False  # (with it on, this render would write nothing)
    scene.render.resolution_x, scene.render.resolution_y = 64, 48
    scene.frame_set(2)
    with bpy.context.temp_override(scene=scene):
        bpy.ops.render.render(write_still=False, scene=scene.name)
    raw = tmp_path / "raw" / "raw_0002.exr"
    with OpenEXR.File(str(raw)) as f:
        assert len(f.parts) == (len(contract.PASSES) if compat.IS_50 else 1)
    back = compat.read_gbuffer_frame(raw)
    np.testing.assert_array_equal(back.depth, np.full((48, 64), 7.0, np.float32))
    assert np.all(back.metallic == 0.25) and back.confidence is not None


def test_decompose_job_arguments_and_resume(addon, footage, tmp_path):
    """What the Decompose button runs: backend argv from the settings; Resume reuses the folder."""
    from gbuffer_editor.operators.decompose import GBUFFER_OT_decompose

    sc = bpy.context.scene
    assert bpy.ops.gbuffer.import_footage(filepath=str(footage("boat"))) == {"FINISHED"}
    s = sc.gbuffer_editor
    s.output_dir = str(tmp_path) + "/"
    s.processing_resolution, s.stabilize, s.use_scene_range = 256, True, False
    s.use_estimator_resolution = False
    s.frame_start, s.frame_end = 3, 5
    ctl = GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=False), bpy.context)
    step = ctl.steps[0]
    out = tmp_path / "decompose_001"
    # the worker runs the request file written next to the log, which carries every setting
    assert step.argv[1:] == ["-m", "backend", "run", str(out / "decompose.request.json")]
    req = step.request
    assert (req.input, req.out, req.estimator, req.processing_resolution, req.frames, req.stabilize) == \
        (str(footage("boat")), str(out), "embedded", 256, "3-5", True)
    assert req.precision in ("fp16", "fp32") and not req.overwrite
    assert step.log_path == out / "decompose.log"
    assert s.last_decompose_dir == str(out)
    ctl2 = GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=False), bpy.context)
    assert ctl2.steps[0].request.out == str(tmp_path / "decompose_002")  # never reuses a folder
    s.last_decompose_dir = str(out)
    ctl3 = GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=True), bpy.context)
    assert ctl3.steps[0].request.out == str(out)
    # Resume continues in that folder even after a settings change: frames written there
    # with other settings are replaced (a fresh run gets a new, empty folder)
    assert ctl3.steps[0].request.overwrite
    # Estimator's Default (on in a new scene): no processing resolution, so the button
    # computes at the same size as the command line and the Python API
    s.use_estimator_resolution = True
    req4 = GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=False), bpy.context).steps[0].request
    assert req4.processing_resolution is None and req4.estimator == "embedded"
    # the file the worker reads is the same request (written when the step starts)
    from gbuffer_editor.backend.jobs.request import read_request

    assert read_request(req.write(tmp_path / "r.json")) == req
    env = ctl.steps[0].env
    assert env["PYTHONPATH"].split(":")[0] == str(util.REPO_ROOT)
    assert env["HF_HUB_OFFLINE"] == "1"  # bpy's online access is off


def test_worker_warnings_reach_the_status_line(addon, scene, tmp_path):
    """Issue 28: decompose's "--frames ...: clipped to 1-2" warning was only in
    decompose.log while the panel said "done". A real decompose of a 2-frame PNG sequence
    asked for frames 1-5: the Status line (and the operator's report) carry it."""
    import os

    import cv2

    from gbuffer_editor.operators.jobs import JobController, WorkerStep

    src = tmp_path / "shot"
    src.mkdir()
    for i in (1, 2):
        cv2.imwrite(str(src / f"shot_{i:04d}.png"), np.full((24, 32, 3), 60 * i, np.uint8))
    out = tmp_path / "gb"
    argv = [sys.executable, "-m", "backend", "decompose", str(src / "shot_####.png"), "--out", str(out),
            "--frames", "1-5"]
    env = dict(os.environ, PYTHONPATH=str(util.REPO_ROOT))
    ctl = JobController(scene, "Decompose", [WorkerStep("Decomposing", argv, tmp_path / "d.log", env=env)])
    assert ctl.run_blocking() == "DONE", ctl.message
    assert ctl.message.startswith("Decompose: done, with a warning: --frames 1-5") and "clipped to 1-2" in ctl.message
    assert scene.gbuffer_editor.status == ctl.message


def test_restyle_unknown_prompt_stops_before_anything_is_written(addon, tmp_path):
    """An unknown word for the embedded renderer is refused before restyle_NNN/ exists (no
    bake of the material edits); the report is one short line, the Status keeps it all."""
    from gbuffer_editor.operators import decompose

    sc = bpy.context.scene
    gb = write_sequence(tmp_path / "gb", flat_frames(48, 64, 2))
    decompose.wire_gbuffers(sc, gb)
    s = sc.gbuffer_editor
    runs = tmp_path / "runs"
    s.output_dir = str(runs) + "/"
    s.renderer = "embedded"
    s.prompt = "purple dragons"
    with pytest.raises(RuntimeError) as ei:  # background mode: an ERROR report raises
        bpy.ops.gbuffer.restyle()
    report = str(ei.value)
    assert "does not understand 'purple', 'dragons' in prompt 'purple dragons'." in report
    # (short apart from the log's path, which is as long as the Output Folder's)
    assert len(report.split("; log: ")[0]) < 200
    assert "Looks: golden hour, overcast, rain, snow, underwater, fog, night" in report
    # issue 17: the Status line is short enough to read whole; the full vocabulary is in
    # a log the Status panel links to (Open Log); issue 28: that log is in the Output
    # Folder's logs/ (next to the jobs' logs), and no run folder was started
    assert s.status.startswith("the embedded renderer does not understand") and len(s.status) < 200
    log = s.log_path
    assert log and log in report
    assert Path(log).parent == runs / "logs"
    text = open(log, encoding="utf-8").read()
    assert "'purple', 'dragons'" in text and "--renderer controlnet" in text and "mist" in text
    assert [p.name for p in runs.iterdir()] == ["logs"]
    # a near miss names the known word
    s.prompt = "dense foog"
    with pytest.raises(RuntimeError, match="Did you mean 'fog' for 'foog'"):
        bpy.ops.gbuffer.restyle()


def test_play_reports_a_missing_movie_player(addon, scene, tmp_path, monkeypatch):
    """Issue 28: with no program to open a movie (no xdg-open on PATH here), Play reports
    an error naming the file instead of printing a traceback and returning FINISHED."""
    result = tmp_path / "restyle_001" / "result"
    result.mkdir(parents=True)
    (result / "preview.mp4").write_bytes(b"\0" * 16)
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))
    with bpy.context.temp_override(scene=scene):
        with pytest.raises(RuntimeError, match="no program to open files") as ei:
            bpy.ops.gbuffer.play_preview(directory=str(result))
    assert str(result / "preview.mp4") in str(ei.value)


def test_run_history_lists_every_run_and_its_edits(addon, tmp_path):
    """Issue 28: the history is not cut at 5 runs, and a run restyled from material edits
    says which passes were edited (edited_gbuffer/manifest.json)."""
    import json

    from gbuffer_editor.operators import results

    for i in range(1, 8):
        res = tmp_path / f"restyle_{i:03d}" / "result"
        res.mkdir(parents=True)
        (res / "manifest.json").write_text(json.dumps({"prompt": f"p{i}", "renderer": {"name": "embedded"},
                                                       "frames": [{}, {}], "complete": True}))
    edited = tmp_path / "restyle_006" / "edited_gbuffer"
    edited.mkdir()
    (edited / "manifest.json").write_text(json.dumps({"edited_passes": ["Roughness", "Metallic"]}))
    runs = results.run_history(tmp_path)
    assert [r.number for r in runs] == [7, 6, 5, 4, 3, 2, 1]
    assert runs[1].line() == "006: p6 - embedded, 2 frames, edits: Roughness, Metallic"
    assert runs[0].line() == "007: p7 - embedded, 2 frames"


def test_brief_report_keeps_the_log_path():
    from gbuffer_editor.operators.jobs import brief

    assert brief("short; log: /x/restyle.log") == "short; log: /x/restyle.log"
    long = "bad thing happened. " + "details " * 60 + "; log: /x/restyle.log"
    assert brief(long, headless=False) == "bad thing happened. (full message in the Status panel); log: /x/restyle.log"
    # issue 37: headless (blender -b, the demo) there is no Status panel to point at
    assert brief(long) == brief(long, headless=True) == "bad thing happened. (full message in the log: /x/restyle.log)"


def test_sidebar_says_what_resolution_the_estimator_really_uses(addon):
    """The Processing Resolution line under the setting: embedded caps at 192 px."""
    from gbuffer_editor.panels.sidebar import resolution_note

    assert resolution_note("embedded", 768) == "Computes at 192 px (its maximum); G-buffers at full size"
    assert resolution_note("embedded", 96) == "Computes at 96 px; G-buffers at full size"
    assert resolution_note("marigold", 0) == "Computes at full size; G-buffers at full size"
    assert resolution_note("nope", 768) == "Estimator unavailable"
    # Estimator's Default: the estimator's own size, as on the command line
    assert resolution_note("embedded", None) == "Computes at 192 px; G-buffers at full size"
    assert resolution_note("marigold", None) == "Computes at 768 px; G-buffers at full size"
    assert bpy.types.Scene.bl_rna.properties["gbuffer_editor"].fixed_type.properties[
        "use_estimator_resolution"].default is True


def test_scene_saved_with_the_old_resolution_name_loads_into_the_new_one(addon, tmp_path):
    """A scene saved when Processing Resolution was stored as ``max_size`` (an ID property of
    that name in the .blend) opens with the value in ``processing_resolution``."""
    from gbuffer_editor.addon import props

    sc = bpy.context.scene
    sc.gbuffer_editor.processing_resolution = 768
    sc.gbuffer_editor.use_estimator_resolution = False
    props.stored_settings(sc)["max_size"] = 320  # what the older add-on wrote
    path = tmp_path / "old.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path), copy=True)
    bpy.ops.wm.open_mainfile(filepath=str(path))
    s = bpy.context.scene.gbuffer_editor
    assert s.processing_resolution == 320 and "max_size" not in props.stored_settings(bpy.context.scene).keys()
    assert props.processing_resolution(s) == 320
    s.use_estimator_resolution = True
    assert props.processing_resolution(s) is None


def test_sidebar_shows_which_passes_are_defaults(addon, scene, footage, tmp_path):
    """Decompose (the real embedded estimator, one real frame) records per-pass provenance;
    the Preview box lists it: the network's near-constant metallic and roughness read as
    defaults (ERROR icon), depth/normal/albedo as estimated (issue 17)."""
    from backend import decompose

    res = decompose(footage("boat"), tmp_path / "gb", frames="1-1")
    s = scene.gbuffer_editor
    s.gbuffer_dir = str(res.out_dir)
    ctx = SimpleNamespace(scene=scene, window_manager=bpy.context.window_manager)
    labels = {c[1].get("text"): c[1].get("icon") for c in _draw_all(addon, ctx) if c[0] == "label"}
    assert "Pass sources:" in labels
    assert labels["Metallic: default"] == "ERROR"
    assert labels["Roughness: default"] == "ERROR"
    assert labels["Depth: estimated"] == "INFO"
    assert labels["Albedo: estimated"] == "INFO"
    assert "Defaults are constants, not measurements" in labels
    # an older folder without provenance: nothing is claimed
    s.gbuffer_dir = str(tmp_path)
    labels = [c[1].get("text") for c in _draw_all(addon, ctx) if c[0] == "label"]
    assert "Pass sources:" not in labels


def test_result_is_shown_in_backdrop_and_image_editors_with_history(addon, scene, tmp_path):
    """After a Restyle the result is where the artist looks (issue 17): the Viewer (the
    compositor backdrop) shows the Restyle result node, the Preview list reads "Result",
    the Image Editor of the Rendering workspace shows the sequence playing along with the
    scene, and the Restyle panel lists earlier runs (prompt, renderer, frames) to re-load.
    Two real backend restyle runs on small G-buffers."""
    from backend import restyle
    from gbuffer_editor.addon import compat, compositor
    from gbuffer_editor.operators import results
    from gbuffer_util import make_gbuffers

    gb = make_gbuffers(tmp_path / "gb", n=3, h=24, w=32)
    root = tmp_path / "out"
    for i, prompt in enumerate(("dense fog", "night"), 1):
        restyle(gb, root / f"restyle_{i:03d}" / "result", prompt, flicker=False)
    s = scene.gbuffer_editor
    s.output_dir = str(root) + "/"
    compositor.setup_gbuffer(scene, gb)
    tree = compositor.find_tree(scene)
    last = root / "restyle_002" / "result"
    node = compositor.load_result(scene, last)
    s.result_dir, s.preview_pass = str(last), compositor.RESULT_PASS
    viewer = compositor.find_node(tree, compositor.ROLE_VIEWER)
    assert viewer.inputs["Image"].links[0].from_node == node          # backdrop shows it
    assert compat.output_socket(tree).links[0].from_node == node       # and the final output
    assert node.image.name.startswith("restyle_002 result") and node.frame_duration == 3
    rendering = bpy.data.workspaces["Rendering"].screens[0]
    space = next(a.spaces.active for a in rendering.areas if a.type == "IMAGE_EDITOR")
    assert space.image == node.image and space.image_user.frame_duration == 3
    uv = bpy.data.workspaces["UV Editing"].screens[0]
    assert all(a.spaces.active.image != node.image for a in uv.areas if a.type == "IMAGE_EDITOR")
    # the Preview list switches between passes and the result
    s.preview_pass = "Normal"
    assert viewer.inputs["Image"].links[0].from_node != node
    s.preview_pass = compositor.RESULT_PASS
    assert viewer.inputs["Image"].links[0].from_node == node

    runs = results.run_history(root)
    assert [(r.number, r.prompt, r.renderer, r.frames, r.complete) for r in runs] == [
        (2, "night", "embedded", 3, True), (1, "dense fog", "embedded", 3, True)]
    assert runs[0].preview.is_file()  # preview.mp4 that Play opens
    ctx = SimpleNamespace(scene=scene, window_manager=bpy.context.window_manager)
    calls = _draw_all(addon, ctx)
    labels = [c[1].get("text") for c in calls if c[0] == "label"]
    assert "Result: restyle_002" in labels and "Earlier runs:" in labels
    assert "001: dense fog - embedded, 3 frames" in labels
    loads = [c[3] for c in calls if c[0] == "operator_prop" and c[1] == "gbuffer.show_result"]
    assert str(root / "restyle_001" / "result") in loads
    # re-load the earlier run through the operator (what the history's button does)
    with bpy.context.temp_override(scene=scene):
        assert bpy.ops.gbuffer.show_result(directory=str(root / "restyle_001" / "result")) == {"FINISHED"}
        assert compositor.find_node(tree, compositor.ROLE_RESULT).image.name.startswith("restyle_001 result")
        assert s.result_dir == str(root / "restyle_001" / "result")
        # Show Result again reuses the image (issue 28: it added "restyle_001 result.001")
        # (compared by name with what was loaded before: an earlier test in the same Blender
        # may have loaded another folder's "restyle_001 result", making this one ".001")
        names = sorted(im.name for im in bpy.data.images)
        shown = compositor.find_node(tree, compositor.ROLE_RESULT).image.name
        assert bpy.ops.gbuffer.show_result(directory=str(root / "restyle_001" / "result")) == {"FINISHED"}
        assert sorted(im.name for im in bpy.data.images) == names
        assert compositor.find_node(tree, compositor.ROLE_RESULT).image.name == shown
        # no preview movie -> a clear error, nothing opened
        with pytest.raises(RuntimeError, match="No preview movie"):
            bpy.ops.gbuffer.play_preview(directory=str(tmp_path))
        with pytest.raises(RuntimeError, match="Not found"):
            bpy.ops.gbuffer.open_path(path=str(tmp_path / "missing.log"))


def test_look_sliders_presets_and_prompt_check(addon, scene):
    """The vocabulary where the prompt is typed (issue 17): one slider per look writes the
    prompt and snaps to its words, typing a prompt moves the sliders, a preset sets it,
    and an unknown word shows one short line naming the nearest known word."""
    from backend.renderers.prompt import LOOK_ORDER, PRESETS
    from gbuffer_editor.panels.sidebar import prompt_message

    s = scene.gbuffer_editor
    assert all(hasattr(s, f"look_{n}") for n in LOOK_ORDER)
    s.renderer = "embedded"
    s.look_fog = 1.55
    assert s.prompt == "dense fog" and s.look_fog == pytest.approx(1.6)  # snapped to "dense"
    s.look_night = 1.0
    assert s.prompt == "dense fog at night"
    s.prompt = "light rain"  # typing moves the sliders
    assert (s.look_rain, s.look_fog, s.look_night) == (pytest.approx(0.5), 0.0, 0.0)
    with bpy.context.temp_override(scene=scene):
        assert bpy.ops.gbuffer.look_preset(preset=PRESETS[3]) == {"FINISHED"}
    assert s.prompt == PRESETS[3] and s.look_rain == pytest.approx(1.6) and s.look_night == 1.0
    ctx = SimpleNamespace(scene=scene, window_manager=bpy.context.window_manager)
    calls = _draw_all(addon, ctx)
    assert ("operator_menu_enum", "gbuffer.look_preset", "preset") in [c[:3] for c in calls]
    slider_props = [c[2] for c in calls if c[0] == "prop" and c[2].startswith("look_")]
    assert slider_props[:len(LOOK_ORDER)] == [f"look_{n}" for n in LOOK_ORDER]
    # as you type: a short line under the field
    s.prompt = "heavy rian"
    assert prompt_message(s.prompt, "embedded") == "Unknown word 'rian': did you mean 'rain'?"
    assert prompt_message("purple rian", "embedded") == "Unknown words 'purple', 'rian': did you mean 'rain' for 'rian'?"
    labels = {c[1].get("text"): c[1].get("icon") for c in _draw_all(addon, ctx) if c[0] == "label"}
    assert labels["Unknown word 'rian': did you mean 'rain'?"] == "ERROR"
    assert s.look_rain == pytest.approx(1.6)  # an unparsable prompt leaves the sliders alone
    assert prompt_message("dense fog", "embedded") is None


@pytest.mark.parametrize("args", [["decompose", "--help"], ["restyle", "-h"], ["export-scene", "--help"],
                                  ["solve", "--help"], ["--help"]])
def test_headless_help_exits_0_for_every_subcommand(addon, args, capsys):
    """``blender -b --command gbuffer_editor SUB --help`` (issue 17: it exited 2 with
    "--out required"); decompose/restyle list the Blender-side options, estimators,
    renderers and prompt words."""
    from gbuffer_editor.operators import cli_command

    try:
        rc = cli_command.run(args)
    except SystemExit as e:  # argparse-based subcommands
        rc = e.code or 0
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("usage: blender -b"), out[:200]
    if args[0] == "decompose":
        assert "Blender-side options:" in out and "--setup" in out and "marigold:" in out
    if args[0] == "restyle":
        assert "--no-edits" in out and "controlnet:" in out and "fog: foggy" in out
    if args[0] == "--help":
        assert "export-scene --out DIR" in out and "COMMAND --help" in out


def test_dropdowns_say_what_they_need_and_missing_models_are_refused_first(addon, scene, footage, tmp_path):
    """Estimators/renderers are labelled with what they need and their state; with the
    models missing, Decompose (marigold) and Restyle (controlnet) are refused before any
    folder is made or anything runs, pointing at Preferences > Models (issue 17: they
    failed after 5 s / 31 s, ControlNet after re-rendering the edits)."""
    from gbuffer_editor.addon import props as props_mod
    from gbuffer_editor.operators import decompose

    props_mod._ROWS_CACHE.clear()
    est = {i[0]: i for i in props_mod._estimator_items(None, None)}
    assert est["embedded"][1] == "Embedded" and "State: ready" in est["embedded"][2]
    assert est["marigold"][1] == "Marigold (GPU, not ready)"
    assert "Needs: a GPU" in est["marigold"][2] and "Models" in est["marigold"][2]
    ren = {i[0]: i for i in props_mod._renderer_items(None, None)}
    assert ren["controlnet"][1] == "Controlnet (GPU, not ready)"

    sc = bpy.context.scene
    s = sc.gbuffer_editor
    runs = tmp_path / "runs"
    s.output_dir = str(runs) + "/"
    s.source_path = str(footage("boat"))
    s.estimator = "marigold"
    with pytest.raises(RuntimeError, match="Preferences > Add-ons > G-Buffer Editor > Models"):
        bpy.ops.gbuffer.decompose()
    assert s.status.startswith("estimator 'marigold' cannot run:") and "Models" in s.status
    assert "prs-eth/marigold-depth-v1-1" in open(s.log_path, encoding="utf-8").read()
    assert [p.name for p in runs.iterdir()] == ["logs"]  # only the refusal's log (issue 28)
    s.estimator = "embedded"
    gb = write_sequence(tmp_path / "gb", flat_frames(24, 32, 2))
    decompose.wire_gbuffers(sc, gb)
    s.renderer, s.prompt = "controlnet", "a watercolour painting"
    with pytest.raises(RuntimeError, match="renderer 'controlnet' cannot run: .*models? missing: download in Pref"):
        bpy.ops.gbuffer.restyle()
    assert [p.name for p in runs.iterdir()] == ["logs"]  # no restyle_NNN, no edit bake
    s.renderer, s.prompt = "embedded", ""


def test_file_import_menu_and_unsaved_output_folder(addon, scene, monkeypatch):
    """File > Import lists the footage importer; with an unsaved .blend and a relative
    output folder the panel shows the real (temporary) folder results go to."""
    from gbuffer_editor.operators import backend_args, import_footage
    from gbuffer_editor.panels import sidebar

    monkeypatch.setattr(sidebar, "blend_saved", lambda: False)  # an earlier test may have saved

    menu = bpy.types.TOPBAR_MT_file_import
    assert import_footage.menu_import in menu._dyn_ui_initialize()
    layout = util.RecordingLayout()
    import_footage.menu_import(SimpleNamespace(layout=layout), bpy.context)
    assert layout.calls[0][:2] == ("operator", "gbuffer.import_footage")
    s = scene.gbuffer_editor
    s.output_dir = "//gbuffer_editor/"
    ctx = SimpleNamespace(scene=scene, window_manager=bpy.context.window_manager)
    labels = [c[1].get("text") for c in _draw_all(addon, ctx) if c[0] == "label"]
    real = str(backend_args.output_root(s))
    assert "Unsaved file: results go to" in labels and real in labels and not real.startswith("//")
    s.output_dir = "/tmp/some/where/"
    labels = [c[1].get("text") for c in _draw_all(addon, ctx) if c[0] == "label"]
    assert "Unsaved file: results go to" not in labels


def test_restyle_skips_the_edit_bake_when_nothing_was_edited(addon, tmp_path):
    """Untouched "Material edits": Restyle hands the source G-buffers (the scene's frame
    range) straight to the worker, no per-frame compositor bake, no edited_gbuffer
    folder; one edit inside the frame brings the bake back (issue 17: the add-on was ~5x
    slower than the CLI because of it)."""
    from gbuffer_editor.addon import compat, compositor
    from gbuffer_editor.operators import decompose, restyle

    sc = bpy.data.scenes.new("untouched_edits")  # its own compositor tree
    gb = write_sequence(tmp_path / "gb", flat_frames(24, 32, 4))
    decompose.wire_gbuffers(sc, gb)
    tree = compositor.find_tree(sc)
    sc.frame_start, sc.frame_end = 2, 3
    s = sc.gbuffer_editor
    s.output_dir = str(tmp_path / "runs") + "/"
    s.renderer, s.prompt = "embedded", "fog"
    assert compositor.edits_untouched(tree)
    assert restyle.scene_frames_arg(sc, tree) == ["--frames", "2-3"]
    with bpy.context.temp_override(scene=sc):
        assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    run = tmp_path / "runs" / "restyle_001"
    assert not (run / restyle.EDITED_DIR).exists()
    assert sorted(p.name for p in (run / "result").glob("restyle_*.exr")) == ["restyle_0002.exr", "restyle_0003.exr"]
    # an edit: a Value node into Roughness "out" -> the bake runs again
    value = compat.new_value_node(tree, 0.0, "Roughness 0")
    tree.links.new(value.outputs[0], compositor.find_node(tree, "out", "Roughness").inputs[0])
    assert not compositor.edits_untouched(tree)
    assert compositor.changed_passes(tree) == ["Roughness"]
    n_nodes = len(tree.nodes)
    with bpy.context.temp_override(scene=sc):
        assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    edited = tmp_path / "runs" / "restyle_002" / restyle.EDITED_DIR
    assert (edited / "gbuffer_0002.exr").exists()
    # only Roughness was re-rendered; the other passes are the source frame's own, bit for bit
    assert contract.read_manifest(edited)["edited_passes"] == ["Roughness"]
    for n in (2, 3):
        src, out = (contract.read_frame(contract.frame_path(d, n), validate=True) for d in (gb, edited))
        assert np.all(out.roughness == 0.0) and out.meta["edited"] is True
        for name in ("combined", "depth", "normal", "albedo", "metallic"):
            np.testing.assert_array_equal(getattr(out, name), getattr(src, name))
    assert len(tree.nodes) == n_nodes and not any(nd.name.startswith("G-buffer bake") for nd in tree.nodes)
    assert not (edited / "_render").exists()
    tree.nodes.remove(value)
    r_in, r_out = compositor.find_node(tree, "in", "Roughness"), compositor.find_node(tree, "out", "Roughness")
    tree.links.new(r_in.outputs[0], r_out.inputs[0])
    assert compositor.edits_untouched(tree)
    bpy.data.scenes.remove(sc)


def test_empty_prompt_restyles_the_edits_only_and_builds_the_plate_world(addon, tmp_path):
    """Issue 39: Restyle with an empty prompt is allowed and gives the footage back where
    nothing was edited (the edit acts through its difference, the add-on passes the source
    folder as --reference); World from Plate makes a World from the plate's lighting."""
    from gbuffer_editor.addon import compat, compositor
    from gbuffer_editor.operators import decompose, plate_world, restyle
    from gbuffer_editor.operators.restyle import GBUFFER_OT_restyle

    sc = bpy.data.scenes.new("empty_prompt")
    gb = write_sequence(tmp_path / "gb", flat_frames(24, 32, 2))
    decompose.wire_gbuffers(sc, gb)
    tree = compositor.find_tree(sc)
    sc.frame_start, sc.frame_end = 1, 2
    s = sc.gbuffer_editor
    s.output_dir = str(tmp_path / "runs") + "/"
    s.renderer, s.prompt = "embedded", ""
    assert GBUFFER_OT_restyle.poll(SimpleNamespace(scene=sc))
    with bpy.context.temp_override(scene=sc):
        assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    res = tmp_path / "runs" / "restyle_001" / "result"
    src = contract.read_frame(contract.frame_path(gb, 1))
    from backend.jobs.writers import read_rgba_exr

    out = read_rgba_exr(res / "restyle_0001.exr")
    np.testing.assert_allclose(out[..., :3], src.combined[..., :3], atol=2e-3)
    # an albedo edit (a Value node: albedo 0.1 everywhere) darkens what it edits
    value = compat.new_value_node(tree, 0.1, "Albedo 0.1")
    tree.links.new(value.outputs[0], compositor.find_node(tree, "out", "Albedo").inputs[0])
    with bpy.context.temp_override(scene=sc):
        assert bpy.ops.gbuffer.restyle() == {"FINISHED"}, s.status
    edited = read_rgba_exr(tmp_path / "runs" / "restyle_002" / "result" / "restyle_0001.exr")
    assert edited[..., :3].mean() < 0.5 * src.combined[..., :3].mean()
    # World from Plate: the result folder's plate_lighting.exr as the scene's World
    assert (tmp_path / "runs" / "restyle_002" / "result" / plate_world.EXR_NAME).is_file()
    with bpy.context.temp_override(scene=sc):
        assert bpy.ops.gbuffer.world_from_plate(directory=s.result_dir) == {"FINISHED"}
    world = sc.world
    assert world is not None and world.name == plate_world.WORLD_NAME
    env = [n for n in world.node_tree.nodes if n.bl_idname == "ShaderNodeTexEnvironment"]
    assert env and env[0].image is not None and env[0].image.size[0] == 256
    with bpy.context.temp_override(scene=sc):
        with pytest.raises(RuntimeError, match="not found"):
            bpy.ops.gbuffer.world_from_plate(directory=str(tmp_path))
    tree.nodes.remove(value)
    bpy.data.scenes.remove(sc)
