"""Camera solve in Blender (issue 14, Blender side): Track & Solve, the solve's cameras as
our JSON, the scene camera following the solve, the Z-combine compositor setup.

Every test runs Blender in a fresh process (``bpy_util.run_bpy``): tracking switches a
window area to the Clip Editor, loads clips and renders with Cycles.

Measured (2 cores, bpy 5.0.1 / 4.5.15):

* ``phone_office.mp4`` (320x240, 36 frames, hand-held): 36/36 frames solved, error
  0.36 px, ~87 tracks, Track & Solve in about 4 s (focal refinement tried, not kept: the
  error is flat from 160 to 320 px on this short shot).
* Synthetic (Cycles, 320x180, 16 frames, textured ground and boxes, known camera dolly
  and pan, true focal given): 16/16 frames, error ~0.5 px; after a similarity alignment
  (rotation from the orientations, scale and translation from the centres) centre RMS
  about 1.8 % of the 3.2 m path and rotations within ~0.7 degrees on average; our
  cameras reproject Blender's own bundles onto its markers at the solve's own error
  (the convention check: intrinsics, y flip, pose inversion, frame numbers).
"""
from __future__ import annotations

import json
import textwrap

import pytest

from bpy_util import run_bpy

pytestmark = pytest.mark.blender

#: child prelude: the checkout as the package ``gbuffer_editor``, the add-on enabled
PRELUDE = textwrap.dedent('''
    import sys, json, time
    import bpy
    sys.path.insert(0, "tests")
    import blender_workflow_util as util
    util.enable_addon()
    import numpy as np
    from gbuffer_editor.addon import tracking, compositor
    from gbuffer_editor.operators import cli_command
    from gbuffer_editor.operators import camera_solve
    from gbuffer_editor.backend.multiview.camera_files import load_cameras_json
''')


def _bpy(code: str, tmp_path, head: str = "", timeout: float = 600) -> dict:
    (tmp_path / "bpy_root").mkdir(exist_ok=True)
    return run_bpy(PRELUDE + head + textwrap.dedent(code), root=tmp_path / "bpy_root", timeout=timeout)


def _json_lines(stdout: str) -> list:
    out = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# ---- real footage ------------------------------------------------------------------------


def test_track_and_solve_phone_office(footage, tmp_path):
    """Headless ``solve`` on real hand-held footage: thresholds measured (0.36 px, 36/36
    frames), the JSON loads with the backend's loader, the poses are finite and move, the
    scene camera follows the solve, Decompose gets ``--cameras`` and the sidebar shows it."""
    path = footage("phone_office")
    res = _bpy(f'''
        scene = bpy.context.scene
        out = {str(tmp_path / "cams.json")!r}
        t = time.perf_counter()
        rc = cli_command.run(["solve", {str(path)!r}, "--cameras", out,
                              "--save", {str(tmp_path / "solved.blend")!r}])
        seconds = time.perf_counter() - t
        clip = tracking.footage_clip(scene)
        cams = load_cameras_json(out)
        keys = sorted(cams)
        C = np.array([cams[k].center for k in keys])
        cam_ob = scene.camera
        cons = [(c.type, c.clip.name if c.clip else None) for c in cam_ob.constraints]
        # the scene camera renders what the JSON says: pose (constraint) and lens/shift; an
        # off-centre principal point checks the shift's sign
        from bpy_extras.object_utils import world_to_camera_view
        clip.tracking.camera.principal_point_pixels = (150.0, 125.0)
        tracking.follow_solve(scene, clip)
        cams_pp = tracking.solve_cameras(clip, scene=scene)
        pts = tracking.bundle_points(clip, scene=scene)
        pose_diff, px_diff, depth_diff = 0.0, 0.0, 0.0
        for f in (1, 18, 36):
            scene.frame_set(f)
            M = np.array(cam_ob.matrix_world)
            pose_diff = max(pose_diff, float(np.abs(M - cams_pp[f].c2w_opengl()).max()))
            uv, z = cams_pp[f].project(pts)
            for p, u, zz in zip(pts[:20], uv, z):
                v = world_to_camera_view(scene, cam_ob, __import__("mathutils").Vector(p))
                px_diff = max(px_diff, float(np.hypot(v.x * 320 - u[0], (1 - v.y) * 240 - u[1])))
                depth_diff = max(depth_diff, abs(v.z - zz) / zz)
        clip.tracking.camera.principal_point_pixels = (160.0, 120.0)
        tracking.follow_solve(scene, clip)
        # Decompose with the solve: --cameras next to the output
        args = camera_solve.decompose_cameras(scene, {str(tmp_path / "dec")!r})
        job = __import__("gbuffer_editor.operators.decompose", fromlist=["x"]).decompose_job(
            scene, ["python", "-m", "backend", "decompose", "x"] + args, {str(tmp_path / "dec")!r}, solve=True)
        steps = [s.label for s in job.steps]
        scene.gbuffer_editor.use_camera_solve = False
        args_off = camera_solve.decompose_cameras(scene, {str(tmp_path / "dec2")!r})
        scene.gbuffer_editor.camera_auto = True  # Camera: Auto without a solve to use: the worker solves
        args_auto = camera_solve.decompose_cameras(scene, {str(tmp_path / "dec3")!r})
        scene.gbuffer_editor.camera_auto = False
        # the sidebar's Camera box
        layout = util.RecordingLayout()
        from gbuffer_editor.panels import sidebar
        class Ctx: pass
        ctx = Ctx(); ctx.scene = scene; ctx.space_data = None
        sidebar.draw_camera(layout, ctx)
        labels = [c[1].get("text") for c in layout.calls if c[0] == "label"]
        ops = [c[1] for c in layout.calls if c[0] == "operator"]
        doc = json.load(open(out))
        emit_result(dict(rc=rc, seconds=seconds, keys=keys, finite=bool(np.isfinite(C).all()),
                         spread=float(np.linalg.norm(C - C[0], axis=1).max()),
                         steps_len=float(np.linalg.norm(np.diff(C, axis=0), axis=1).sum()),
                         error=clip.tracking.reconstruction.average_error, cons=cons,
                         lens=cam_ob.data.lens, units=doc["units"], depth_range=doc.get("depth_range"),
                         lens_note_in_file=doc.get("lens"),
                         args=args, args_off=args_off, args_auto=args_auto, steps=steps, labels=labels, ops=ops,
                         width=doc["width"], height=doc["height"], pose_diff=pose_diff, px_diff=px_diff,
                         depth_diff=depth_diff))
    ''', tmp_path, timeout=1200)
    lines = _json_lines(res["stdout"])
    done = [ev for ev in lines if ev.get("event") == "done"]
    assert res["rc"] == 0, res["stderr"][-3000:]
    assert done and done[-1]["stage"] == "solve"
    d = done[-1]
    print(f"phone_office: {d['message']}; command {res['seconds']:.1f} s; scene camera vs JSON: pose "
          f"{res['pose_diff']:.1e}, projection {res['px_diff']:.1e} px, depth {res['depth_diff']:.1e}")
    assert [ev["step"] for ev in lines if ev.get("event") == "progress"][0] == "Detecting features"
    # measured 0.36 px on 36/36 frames with ~87 tracks (both bpy versions)
    assert d["frames"] == 36 and d["tracked_frames"] == 36
    assert d["error_px"] <= 0.8, d
    assert d["points"] >= 40
    assert res["seconds"] < 400  # includes the focal-length search (noisy shared machine)
    assert res["keys"] == list(range(1, 37))  # source frame numbers 1..36
    assert res["finite"] and (res["width"], res["height"]) == (320, 240)
    assert res["spread"] > 0.05 * res["steps_len"] > 0  # the camera moves
    assert res["units"] == "solve units"
    near, far = res["depth_range"]
    assert 0 < near < far
    assert ("CAMERA_SOLVER", "phone_office.mp4") in [tuple(c) for c in res["cons"]]
    assert res["lens"] > 0
    # Blender's scene camera (Camera Solver constraint, lens, shift) == our cameras
    assert res["pose_diff"] < 1e-4 and res["px_diff"] < 0.02 and res["depth_diff"] < 1e-5, res
    assert res["args"][0] == "--cameras" and res["args"][1].endswith("dec_cameras.json")
    assert res["args_off"] == []
    assert res["args_auto"] == ["--camera", "auto"]
    assert res["steps"] == ["Decomposing", "Wiring compositor", "Scene camera and Z-combine"]
    assert any(t and t.startswith("Solved: 36/36 frames, error") for t in res["labels"])
    # the panel shows the focal length the solve used (searched on Blender's tracks)
    focal = [t for t in res["labels"] if t and t.startswith("Focal: ")]
    assert focal and f"{d['focal_px']:.1f} px" in focal[0], (focal, d)
    print("phone_office focal:", focal[0], d["message"])
    # this short hand-held shot does not pin the lens (measured: +-10 %): the panel says so;
    # the focal the search verified to solve is used (issue 33: the CLI suggests the same),
    # else the clip's is kept
    notes = [t for t in res["labels"] if t and "set the focal length of the clip and solve again" in t]
    assert notes and ("(used " in notes[0] or "(kept " in notes[0]), res["labels"]
    assert res["lens_note_in_file"] and res["lens_note_in_file"]["determined"] is False, res["lens_note_in_file"]
    assert "gbuffer.track_solve" in res["ops"]
    assert (tmp_path / "solved.blend").exists()


def test_bad_input_one_line_errors(footage, tmp_path):
    """No solve, too few frames, distortion we cannot undo, unknown clip: one-line errors."""
    path = footage("phone_office")
    res = _bpy(f'''
        scene = bpy.context.scene
        errors = {{}}
        clip = bpy.data.movieclips.load({str(path)!r})
        def err(key, fn):
            try:
                fn()
                errors[key] = None
            except (tracking.SolveError, ValueError) as e:
                errors[key] = str(e)
        err("no_solve", lambda: tracking.write_cameras_json(clip, {str(tmp_path / "x.json")!r}))
        err("no_solve_check", lambda: tracking.check_solve(clip))
        cam = clip.tracking.camera
        cam.distortion_model = "DIVISION"; cam.division_k1 = -0.05
        err("division", lambda: tracking.clip_distortion(clip))
        cam.distortion_model = "NUKE"; cam.nuke_k1 = 0.02
        err("nuke", lambda: tracking.clip_distortion(clip))
        cam.distortion_model = "BROWN"; cam.brown_k1 = 0.1; cam.brown_p1 = 0.001
        err("brown_tangential", lambda: tracking.clip_distortion(clip))
        cam.brown_p1 = 0.0
        brown_radial = tracking.clip_distortion(clip)
        cam.distortion_model = "POLYNOMIAL"; cam.k1, cam.k2, cam.k3 = -0.1, 0.02, 0.0
        poly = tracking.clip_distortion(clip)
        cam.k1 = cam.k2 = 0.0
        # too few frames: the CLI on a 5-frame window
        rc_few = cli_command.run(["solve", clip.name, "--frames", "1-5", "--cameras", {str(tmp_path / "few.json")!r}])
        few_status = tracking.solve_status(clip).line()
        scene.frame_start, scene.frame_end = 1, 36
        rc_missing = cli_command.run(["solve", "no such clip", "--cameras", {str(tmp_path / "m.json")!r}])
        # a valid solve over a tight threshold
        rc_ok = cli_command.run(["solve", clip.name, "--cameras", {str(tmp_path / "ok.json")!r}])
        err("over_threshold", lambda: tracking.check_solve(clip, max_error=0.01))
        scene.gbuffer_editor.use_camera_solve = True
        import gbuffer_editor.operators.jobs as jobs
        try:
            tracking.MAX_SOLVE_ERROR_PX = 0.01
            camera_solve.decompose_cameras(scene, {str(tmp_path / "dec")!r})
            errors["decompose"] = None
        except jobs.JobFailed as e:
            errors["decompose"] = str(e)
        emit_result(dict(errors=errors, brown_radial=brown_radial, poly=poly, rc_few=rc_few,
                         few_status=few_status, rc_missing=rc_missing, rc_ok=rc_ok))
    ''', tmp_path)
    e = res["errors"]
    for key, msg in e.items():
        assert msg and "\n" not in msg, (key, msg)
    assert "has no valid camera solve" in e["no_solve"] and "phone_office.mp4" in e["no_solve"]
    assert "has no valid camera solve" in e["no_solve_check"]
    assert "division distortion (k1)" in e["division"]
    assert "nuke distortion (k1)" in e["nuke"]
    assert "brown distortion (p1)" in e["brown_tangential"]
    assert res["brown_radial"][0] == "opencv" and res["brown_radial"][1] == pytest.approx([0.1, 0, 0, 0, 0])
    assert res["poly"][0] == "opencv" and res["poly"][1][:2] == pytest.approx([-0.1, 0.02])
    assert res["rc_few"] == 1 and res["rc_missing"] == 2 and res["rc_ok"] == 0
    lines = _json_lines(res["stdout"])
    errs = [ev["message"] for ev in lines if ev.get("event") == "error"]
    few = errs[0]
    assert few.startswith("camera solve failed: ") and "frames solved, error" in few
    assert "track by hand or decompose without it" in few
    assert "no movie clip or file 'no such clip'" in errs[1]
    assert e["over_threshold"].startswith("camera solve failed: 36 frames solved, error ")
    assert e["decompose"].endswith("(or turn off Use Camera Solve)")


def test_decompose_with_the_solve_in_blender(footage, tmp_path):
    """The artist's path: Import Footage, Track & Solve, Decompose (first 12 frames): the
    worker gets the solve (``--cameras``, recorded in the manifest), frames carry measured
    depth (Confidence), the scene camera follows the solve and the compositor Z-combines."""
    import blender_workflow_util as util

    if not util.EMBEDDED_ONNX.exists():
        pytest.skip("the embedded estimator's weights are not built")
    res = _bpy(f'''
        import os
        from gbuffer_editor.backend import contract
        scene = bpy.context.scene
        s = scene.gbuffer_editor
        s.output_dir = {str(tmp_path / "out")!r}
        bpy.ops.gbuffer.import_footage(filepath={str(footage("phone_office"))!r})
        t = time.perf_counter()
        bpy.ops.gbuffer.track_solve()
        solve_s, solve_status = time.perf_counter() - t, s.status
        scene.frame_end = 12
        t = time.perf_counter()
        bpy.ops.gbuffer.decompose()
        decompose_s = time.perf_counter() - t
        d = s.last_decompose_dir
        man = json.load(open(os.path.join(d, "manifest.json")))
        frames = contract.list_frames(d)
        measured = [float((contract.read_frame(p).confidence > 0.5).mean()) for p in frames.values()]
        tree = compositor.find_tree(scene)
        roles = sorted(str(n.get(compositor.ROLE_KEY)) for n in tree.nodes if n.get(compositor.ROLE_KEY))
        emit_result(dict(solve_s=solve_s, solve_status=solve_status, decompose_s=decompose_s,
                         cameras=man.get("cameras", {{}}).get("file"), n=len(frames), measured=measured,
                         roles=roles, cons=[c.type for c in scene.camera.constraints], status=s.status))
    ''', tmp_path)
    print(f"phone_office in Blender: Track & Solve {res['solve_s']:.1f} s, Decompose 12 frames with the solve "
          f"{res['decompose_s']:.1f} s, measured (Confidence > 0.5) {min(res['measured']):.2f}-"
          f"{max(res['measured']):.2f} of each frame")
    assert res["solve_status"].startswith("camera solve: 36/36 frames solved"), res["solve_status"]
    # the startup scene's cube sits where the solved camera starts: hidden, and said (issue 28)
    assert res["status"].startswith("Decompose: done, with a warning: hid the startup cube 'Cube'"), res["status"]
    assert res["n"] == 12 and res["cameras"].endswith("decompose_001_cameras.json")
    assert min(res["measured"]) > 0.1  # measured 0.35-0.44
    assert "zcombine" in res["roles"] and "render_layers" in res["roles"]
    assert res["cons"] == ["CAMERA_SOLVER"]


# ---- synthetic: a known camera ----------------------------------------------------------

SYNTHETIC = '''
import math, os
def render_shot(out, W=320, H=180, N=16, samples=8):
    """Render a textured ground and boxes seen by a camera dollying and panning;
    returns the true camera-to-world matrices by frame and the focal length in pixels."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    def material(name, scale):
        m = bpy.data.materials.new(name)
        m.use_nodes = True
        nt = m.node_tree
        nt.nodes.clear()
        tc = nt.nodes.new("ShaderNodeTexCoord")
        noise = nt.nodes.new("ShaderNodeTexNoise"); noise.inputs["Scale"].default_value = scale
        noise.inputs["Detail"].default_value = 8.0
        vor = nt.nodes.new("ShaderNodeTexVoronoi"); vor.inputs["Scale"].default_value = scale * 0.7
        mix = nt.nodes.new("ShaderNodeMix"); mix.data_type = "RGBA"; mix.inputs["Factor"].default_value = 0.5
        em = nt.nodes.new("ShaderNodeEmission"); out_node = nt.nodes.new("ShaderNodeOutputMaterial")
        nt.links.new(tc.outputs["Object"], noise.inputs["Vector"])
        nt.links.new(tc.outputs["Object"], vor.inputs["Vector"])
        nt.links.new(noise.outputs["Color"], mix.inputs[6]); nt.links.new(vor.outputs["Color"], mix.inputs[7])
        nt.links.new(mix.outputs[2], em.inputs["Color"]); nt.links.new(em.outputs[0], out_node.inputs["Surface"])
        return m
    bpy.ops.mesh.primitive_plane_add(size=30)
    bpy.context.object.data.materials.append(material("ground", 1.5))
    rng = np.random.default_rng(1)
    for i, (x, y, s) in enumerate([(-2, 4, 1.0), (1.5, 6, 1.4), (0, 9, 2.0), (3.5, 3, 0.8), (-4, 8, 1.6),
                                   (2, 12, 2.5)]):
        bpy.ops.mesh.primitive_cube_add(size=s, location=(x, y, s / 2))
        bpy.context.object.rotation_euler[2] = rng.uniform(0, 1.5)
        bpy.context.object.data.materials.append(material(f"box{i}", 3.0))
    data = bpy.data.cameras.new("truth"); data.lens, data.sensor_width, data.sensor_fit = 30, 36, "HORIZONTAL"
    cam = bpy.data.objects.new("truth", data); scene.collection.objects.link(cam); scene.camera = cam
    for f in range(1, N + 1):
        t = (f - 1) / (N - 1)
        a = t * t  # accelerating: a shift by one frame shows
        cam.location = (-2.0 + 3.0 * a, -4.0 + 0.8 * t, 2.2 + 0.3 * math.sin(3 * t))
        cam.rotation_euler = (math.radians(72 + 3 * t), 0.0, math.radians(-8 + 14 * a))
        cam.keyframe_insert("location", frame=f); cam.keyframe_insert("rotation_euler", frame=f)
    scene.frame_start, scene.frame_end = 1, N
    r = scene.render
    r.engine = "CYCLES"; r.resolution_x, r.resolution_y, r.resolution_percentage = W, H, 100
    scene.cycles.samples = samples; scene.cycles.use_denoising = False; scene.cycles.device = "CPU"
    scene.view_settings.view_transform = "Standard"
    r.image_settings.file_format = "PNG"; r.filepath = os.path.join(out, "shot_####")
    bpy.ops.render.render(animation=True)
    truth = {}
    for f in range(1, N + 1):
        scene.frame_set(f)
        truth[f] = np.array(cam.matrix_world)
    return truth, 30 / 36 * W


def align(cams, truth, shift=0):
    """Similarity alignment of solved cameras to the truth (rotation from the orientations,
    scale and translation from the centres); ``shift`` compares frame k with truth k+shift."""
    keys = [k for k in sorted(cams) if k + shift in truth]
    C = np.array([cams[k].center for k in keys])
    T = np.array([truth[k + shift][:3, 3] for k in keys])
    Rs = [cams[k].R for k in keys]
    Rt = [(truth[k + shift][:3, :3] @ np.diag([1.0, -1.0, -1.0])).T for k in keys]
    U, _, Vt = np.linalg.svd(sum(rt.T @ rs for rs, rt in zip(Rs, Rt)))
    Rw = U @ np.diag([1.0, 1.0, np.sign(np.linalg.det(U @ Vt))]) @ Vt
    Cr = C @ Rw.T
    s = ((Cr - Cr.mean(0)) * (T - T.mean(0))).sum() / ((Cr - Cr.mean(0)) ** 2).sum()
    err = np.linalg.norm(s * (Cr - Cr.mean(0)) + T.mean(0) - T, axis=1)
    rot = [np.degrees(np.arccos(np.clip((np.trace(rs @ Rw.T @ rt.T) - 1) / 2, -1, 1))) for rs, rt in zip(Rs, Rt)]
    path = np.linalg.norm(np.diff(T, axis=0), axis=1).sum()
    return float(np.sqrt((err ** 2).mean()) / path), float(np.mean(rot)), float(np.max(rot)), len(keys)
'''


def test_synthetic_solve_matches_the_true_camera(tmp_path):
    """Render a known camera move, Track & Solve it, compare: conventions (frames,
    intrinsics, y flip, pose) are right when our cameras reproject Blender's bundles onto
    its markers and the aligned path matches the truth better than at a one-frame shift."""
    res = _bpy(f'''
        out = {str(tmp_path / "shot")!r}
        t0 = time.perf_counter()
        truth, fx = render_shot(out)
        render_s = time.perf_counter() - t0
        scene = bpy.context.scene
        clip = bpy.data.movieclips.load(os.path.join(out, "shot_0001.png"))
        clip.frame_start = 1
        clip.tracking.camera.sensor_width = 36
        clip.tracking.camera.focal_length_pixels = fx
        t1 = time.perf_counter()
        result = tracking.track_and_solve(scene, clip, refine_focal=False)
        solve_s = time.perf_counter() - t1
        path = tracking.write_cameras_json(clip, os.path.join(out, "cams.json"))["path"]
        cams = load_cameras_json(path)
        W, H = tracking.clip_size(clip)
        reproj = []
        for tr in clip.tracking.tracks:
            if not tr.has_bundle:
                continue
            X = np.array(tr.bundle)[None]
            for m in tr.markers:
                k = tracking.source_frame_number(clip, m.frame)
                if m.mute or k not in cams:
                    continue
                uv, _ = cams[k].project(X)
                reproj.append(float(np.hypot(uv[0, 0] - m.co[0] * W, uv[0, 1] - (1 - m.co[1]) * H)))
        # the same shot as clip frames 1..13 from its 4th file, the clip starting at scene frame 101
        clip.frame_start, clip.frame_offset = 101, 3
        scene.frame_start, scene.frame_end = 101, 113
        result2 = tracking.track_and_solve(scene, clip, refine_focal=False)
        cams2 = tracking.solve_cameras(clip)
        emit_result(dict(offset_keys=sorted(cams2), offset_frames=result2.frames, offset_error=result2.error,
                         offset=align(cams2, truth), offset_wrong=[align(cams2, truth, s) for s in (-3, -1, 1)],
                         render_s=render_s, solve_s=solve_s, error=result.error, frames=result.frames,
                         points=result.bundles, keys=sorted(cams), fx=cams[1].fx, cx=cams[1].cx, cy=cams[1].cy,
                         reproj_mean=float(np.mean(reproj)), n_obs=len(reproj),
                         aligned=align(cams, truth), early=align(cams, truth, -1), late=align(cams, truth, 1)))
    ''', tmp_path, head=SYNTHETIC)
    rel, rot_mean, rot_max, n = res["aligned"]
    print(f"synthetic: render {res['render_s']:.1f} s, solve {res['solve_s']:.1f} s, {res['frames']}/16 frames, "
          f"error {res['error']:.2f} px, {res['points']} points; centre RMS {100 * rel:.2f} % of the path, "
          f"rotation {rot_mean:.2f} deg mean / {rot_max:.2f} max; reprojection {res['reproj_mean']:.2f} px "
          f"over {res['n_obs']} markers; shifted by a frame: {100 * res['early'][0]:.1f} % / "
          f"{100 * res['late'][0]:.1f} %")
    assert res["frames"] == 16 and res["keys"] == list(range(1, 17))
    assert res["error"] <= 1.0
    assert res["fx"] == pytest.approx(30 / 36 * 320)
    assert (res["cx"], res["cy"]) == pytest.approx((160.0, 90.0))
    # the convention check: our cameras reproject Blender's bundles at the solve's error
    assert res["reproj_mean"] <= 1.2 * res["error"] + 0.05
    # measured: 1.8 % of the path, 0.7 degrees mean
    assert rel <= 0.05 and rot_mean <= 2.0 and rot_max <= 4.0
    assert rel < res["early"][0] and rel < res["late"][0]
    # clip.frame_start 101, frame_offset 3: clip frame 1 is source frame 4
    print(f"synthetic from its 4th frame: {res['offset_frames']}/13 frames, error {res['offset_error']:.2f} px, "
          f"centre RMS {100 * res['offset'][0]:.2f} %, rotation {res['offset'][1]:.2f} deg; wrong mapping "
          f"(-3, -1, +1 frames): {[round(100 * w[0], 1) for w in res['offset_wrong']]} %")
    assert res["offset_keys"] == list(range(4, 17))
    assert res["offset"][0] <= 0.05 and res["offset"][1] <= 2.0
    assert all(res["offset"][0] < w[0] for w in res["offset_wrong"])


def test_polynomial_distortion_maps_to_opencv(tmp_path):
    """Blender's Movie Distortion node (Undistort, the clip's polynomial k1, k2 and an
    off-centre principal point) and our opencv undistortion (``backend.multiview.undistort``
    on the converted camera) move a grid of dots alike: the same map up to a whole-pixel
    translation of the node's output (measured: (1, -1) px with no distortion at all),
    spread ~0.1 px; a normalisation by the half width instead of the focal length, or no
    undistortion, spreads by pixels."""
    res = _bpy('''
        import os, cv2
        from gbuffer_editor.addon import compat
        from gbuffer_editor.backend.multiview.cameras import Camera
        from gbuffer_editor.backend.multiview.undistort import undistort_image
        out = TMP
        W, H = 320, 240
        img = np.zeros((H, W, 3), np.uint8)
        for x in range(20, W, 40):
            for y in range(20, H, 40):
                cv2.circle(img, (x, y), 3, (255, 255, 255), -1)
        cv2.imwrite(os.path.join(out, "dots.png"), img)
        bpy.ops.wm.read_factory_settings(use_empty=True)
        scene = bpy.context.scene
        clip = bpy.data.movieclips.load(os.path.join(out, "dots.png"))
        cam = clip.tracking.camera
        cam.focal_length_pixels = 300.0
        cam.principal_point_pixels = (165.0, 118.0)
        cam.distortion_model = "POLYNOMIAL"
        cam.k1, cam.k2, cam.k3 = -0.2, 0.04, 0.0
        tree = compat.compositor_tree(scene)
        im = tree.nodes.new("CompositorNodeImage")
        im.image = bpy.data.images.load(os.path.join(out, "dots.png"))
        md = tree.nodes.new("CompositorNodeMovieDistortion")
        md.clip = clip
        if hasattr(md, "distortion_type"):
            md.distortion_type = "UNDISTORT"
        else:
            md.inputs["Type"].default_value = "Undistort"
        tree.links.new(im.outputs[0], md.inputs[0])
        tree.links.new(md.outputs[0], compat.output_socket(tree))
        r = scene.render
        r.resolution_x, r.resolution_y, r.resolution_percentage = W, H, 100
        scene.view_settings.view_transform = "Standard"
        r.image_settings.file_format = "PNG"
        r.filepath = os.path.join(out, "undistorted.png")
        bpy.ops.render.render(write_still=True)
        blender = cv2.imread(os.path.join(out, "undistorted.png"))
        intr = tracking.clip_intrinsics(clip)
        model, coeffs = tracking.clip_distortion(clip)
        def ours(k):
            c = Camera(W, H, intr["fx"], intr["fy"], intr["cx"], intr["cy"], distortion_model=model, distortion=k)
            u = undistort_image(img, c)
            return u[0] if isinstance(u, tuple) else u
        def centres(a):
            g = cv2.cvtColor(a, cv2.COLOR_BGR2GRAY).astype(np.float64)
            n, lab = cv2.connectedComponents((g > 60).astype(np.uint8))
            out = []
            for i in range(1, n):
                ys, xs = np.nonzero(lab == i)
                w = g[ys, xs]
                out.append(((w * xs).sum() / w.sum(), (w * ys).sum() / w.sum()))
            return np.array(out)
        def spread(a):
            A, B = centres(blender), centres(a)
            d = np.array([B[np.argmin(np.linalg.norm(B - p, axis=1))] - p for p in A])
            return dict(n=len(A), offset=d.mean(0).tolist(), spread=float(np.linalg.norm(d - d.mean(0), axis=1).max()))
        s = (intr["fx"] / (W / 2)) ** 2  # wrong: coefficients normalised by the half width
        wrong = (coeffs[0] * s, coeffs[1] * s * s, 0.0, 0.0, 0.0)
        emit_result(dict(model=model, coeffs=list(coeffs), ours=spread(ours(coeffs)), wrong=spread(ours(wrong)),
                         none=spread(img)))
    '''.replace("TMP", repr(str(tmp_path))), tmp_path)
    print(f"distortion: ours vs Blender {res['ours']}, half-width normalisation {res['wrong']['spread']:.2f} px, "
          f"none {res['none']['spread']:.2f} px")
    assert res["model"] == "opencv" and res["coeffs"] == pytest.approx([-0.2, 0.04, 0, 0, 0])
    assert res["ours"]["n"] == 48
    assert res["ours"]["spread"] < 0.5  # measured 0.23 px max (both bpy versions)
    assert res["wrong"]["spread"] > 3 * res["ours"]["spread"] and res["none"]["spread"] > 3 * res["ours"]["spread"]


# ---- Z-combine ---------------------------------------------------------------------------


def test_zcombine_occludes_cg_by_footage_depth(tmp_path):
    """Footage (red) with depth 2 m on the left half and 6 m on the right, a green CG cube
    whose front is 3.5 m from the camera: the cube shows only on the right half."""
    res = _bpy(f'''
        import os
        from gbuffer_editor.backend import contract
        out = {str(tmp_path)!r}
        bpy.ops.wm.read_factory_settings(use_empty=True)
        scene = bpy.context.scene
        W, H = 64, 48
        comb = np.zeros((H, W, 4), np.float32); comb[..., 0] = 1; comb[..., 3] = 1
        depth = np.full((H, W), 6.0, np.float32); depth[:, : W // 2] = 2.0
        z = np.zeros((H, W), np.float32)
        frame = contract.GBufferFrame(
            combined=comb, depth=depth, normal=np.dstack([z, z, z + 1]), albedo=np.full((H, W, 3), 0.5, np.float32),
            metallic=z, roughness=z + 0.5, confidence=z + 1,
            meta=contract.make_meta(estimator="test", depth_kind="metric", depth_near=2, depth_far=6))
        gb = os.path.join(out, "gb")
        os.makedirs(gb)
        contract.write_frame(contract.frame_path(gb, 1), frame)
        data = bpy.data.cameras.new("cam")
        cam = bpy.data.objects.new("cam", data); scene.collection.objects.link(cam); scene.camera = cam
        bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 0, -4.0))
        m = bpy.data.materials.new("green"); m.use_nodes = True
        nt = m.node_tree; nt.nodes.clear()
        em = nt.nodes.new("ShaderNodeEmission"); em.inputs[0].default_value = (0, 1, 0, 1)
        nt.links.new(em.outputs[0], nt.nodes.new("ShaderNodeOutputMaterial").inputs[0])
        bpy.context.object.data.materials.append(m)
        r = scene.render
        r.engine = "CYCLES"; r.resolution_x, r.resolution_y, r.resolution_percentage = W, H, 100
        scene.cycles.samples = 4; scene.cycles.use_denoising = False; scene.cycles.device = "CPU"
        scene.view_settings.view_transform = "Standard"
        scene.frame_start = scene.frame_end = scene.frame_current = 1
        compositor.setup_gbuffer(scene, gb)
        compositor.setup_zcombine(scene)
        zc = compositor.setup_zcombine(scene)  # again: updates, no duplicates
        tree = compositor.find_tree(scene)
        into = sorted((l.to_socket.identifier, l.from_node.name, l.from_socket.name) for l in tree.links
                      if l.to_node == zc)
        out_links = sorted(l.to_node.bl_idname for l in tree.links if l.from_node == zc)
        r.image_settings.file_format = "OPEN_EXR"
        r.filepath = os.path.join(out, "z.exr")
        bpy.ops.render.render(write_still=True)
        img = bpy.data.images.load(os.path.join(out, "z.exr"))
        px = np.array(img.pixels[:], np.float32).reshape(H, W, 4)[::-1]
        emit_result(dict(into=into, out_links=out_links, use_pass_z=scene.view_layers[0].use_pass_z,
                         n_zc=sum(n.bl_idname == "CompositorNodeZcombine" for n in tree.nodes),
                         n_rl=sum(n.bl_idname == "CompositorNodeRLayers" for n in tree.nodes),
                         left=px[H // 2, W // 2 - 6].tolist(), right=px[H // 2, W // 2 + 6].tolist(),
                         right_bg=px[2, W - 3].tolist(), left_bg=px[2, 2].tolist()))
    ''', tmp_path)
    assert res["n_zc"] == 1 and res["n_rl"] == 1 and res["use_pass_z"]
    sources = [(src, sock) for _, src, sock in res["into"]]
    assert ("Combined out", "Output") in sources and ("Depth out", "Output") in sources
    assert ("3D scene", "Image") in sources and ("3D scene", "Depth") in sources
    assert "CompositorNodeViewer" in res["out_links"]
    assert res["left"] == pytest.approx([1, 0, 0, 1], abs=1e-3)  # footage nearer: hides the cube
    assert res["right"] == pytest.approx([0, 1, 0, 1], abs=1e-3)  # cube nearer than the wall
    assert res["right_bg"] == pytest.approx([1, 0, 0, 1], abs=1e-3)  # no CG: footage
    assert res["left_bg"] == pytest.approx([1, 0, 0, 1], abs=1e-3)


def test_startup_cube_around_the_solved_camera_is_hidden_with_a_warning(tmp_path):
    """Issue 28: the solved camera starts at the origin, inside Blender's startup cube,
    and the Z Combine was black for the first frames with no word. The untouched startup
    cube is hidden from the render with a warning; another object around the camera is
    only named; a cube elsewhere is left alone."""
    res = _bpy('''
        bpy.ops.wm.read_homefile(use_empty=False)  # the factory startup file: Cube, Camera, Light
        scene = bpy.context.scene
        cube = scene.objects["Cube"]
        cam = scene.camera
        cam.location = (0.2, 0.1, 0.3)            # where a solve starts: at the origin
        first = compositor.clear_camera_start(scene)
        hidden = cube.hide_render
        again = compositor.clear_camera_start(scene)  # hidden objects are not in the way
        cube.hide_render = False
        cube.scale = (3, 3, 3)                   # not the untouched startup cube any more
        other = compositor.clear_camera_start(scene)
        still = cube.hide_render
        cam.location = (10, 0, 0)
        away = compositor.clear_camera_start(scene)
        emit_result(dict(first=first, hidden=hidden, again=again, other=other, still=still, away=away))
    ''', tmp_path)
    assert res["hidden"] and len(res["first"]) == 1 and "hid the startup cube 'Cube'" in res["first"][0]
    assert res["again"] == []
    assert not res["still"] and len(res["other"]) == 1 and "starts inside 'Cube'" in res["other"][0]
    assert res["away"] == []


def test_depth_range_drops_bundles_near_infinity(tmp_path):
    """A few bundles far away and seen under a tiny ray angle (the 46,606 far plane of
    issue 24) do not make the written depth range; without the angles they would."""
    res = _bpy('''
        from gbuffer_editor.backend.multiview.cameras import Camera
        rng = np.random.default_rng(0)
        cams = {k: Camera(320, 240, 300, 300, 160, 120, t=np.array([-0.2 * k, 0.0, 0.0])) for k in range(1, 9)}
        near_pts = rng.uniform([-2, -2, 4], [2, 2, 9], (200, 3))
        far_pts = rng.uniform([-10, -10, 40000], [10, 10, 50000], (10, 3))
        pts = np.concatenate([near_pts, far_pts])
        angles = np.concatenate([np.full(200, 5.0), np.full(10, 0.01)])
        emit_result(dict(clean=tracking.depth_range(cams, near_pts), with_angles=tracking.depth_range(cams, pts, angles),
                         without=tracking.depth_range(cams, pts)))
    ''', tmp_path)
    assert res["with_angles"] == pytest.approx(res["clean"])
    assert res["without"][1] > 100 * res["clean"][1]
