"""Scene export (issue 4 §1) and procedural scenes (§2): exact G-buffers from Cycles.

Known scenes, tiny renders (64x48, 1-4 samples): a plane at 5 m, a sphere with
analytic normals, materials with known base colour / metallic / roughness
(constants, an image texture, a checker texture, non-Principled fallbacks), a
.blend left unchanged, motion-blur averaging, and the key test again in bpy 4.5.
"""
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from blender_workflow_util import put_checkout_on_path

# the scene export is part of the Blender layer: imported through the extension package
# (``gbuffer_editor.addon.scene``), never as a top-level module
put_checkout_on_path()

W, H = 64, 48


# ---------------------------------------------------------------------------------------
# helpers
def _fresh():
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    return bpy.context.scene


def _camera(scene, loc=(0, 0, 0), rot=(0, 0, 0), lens=35.0):
    import bpy

    cd = bpy.data.cameras.new("cam")
    cd.lens = lens
    ob = bpy.data.objects.new("cam", cd)
    scene.collection.objects.link(ob)
    ob.location = loc
    ob.rotation_euler = rot
    scene.camera = ob
    return ob


def _principled(name, base=(0.8, 0.8, 0.8), metallic=0.0, roughness=0.5):
    import bpy

    m = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    p = next(n for n in m.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    p.inputs["Base Color"].default_value = (*base, 1.0)
    p.inputs["Metallic"].default_value = metallic
    p.inputs["Roughness"].default_value = roughness
    return m, p


def _shader_material(name, idname, **inputs):
    """A material whose surface is a single ``idname`` shader node."""
    import bpy

    m = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    t = m.node_tree
    t.nodes.clear()
    out = t.nodes.new("ShaderNodeOutputMaterial")
    sh = t.nodes.new(idname)
    for k, v in inputs.items():
        sh.inputs[k].default_value = v
    t.links.new(sh.outputs[0], out.inputs["Surface"])
    return m


def _sun(scene):
    import bpy

    light = bpy.data.lights.new("sun", "SUN")
    scene.collection.objects.link(bpy.data.objects.new("sun", light))


def _plane(loc, size, mat=None):
    import bpy

    bpy.ops.mesh.primitive_plane_add(size=size, location=loc)
    ob = bpy.context.active_object
    if mat is not None:
        ob.data.materials.append(mat)
    return ob


def _render(scene, **kw):
    from gbuffer_editor.addon.scene.export import GBufferRenderer

    kw.setdefault("resolution", (W, H))
    kw.setdefault("samples", 2)
    kw.setdefault("denoise", False)
    kw.setdefault("threads", 1)
    with GBufferRenderer(scene, **kw) as gr:
        return gr.render_frame(scene.frame_current)


def _erode(mask, r):
    """``mask`` pixels whose whole (2r+1)^2 neighbourhood is in ``mask`` (image border excluded)."""
    h, w = mask.shape
    out = np.zeros_like(mask)
    core = np.ones((h - 2 * r, w - 2 * r), bool)
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            core &= mask[dy:dy + h - 2 * r, dx:dx + w - 2 * r]
    out[r:h - r, r:w - r] = core
    return out


def _pixel_box(frame, centre, half):
    """Integer pixel box (r0, r1, c0, c1) of a camera-facing square at camera-space ``centre``."""
    fx, fy, cx, cy = frame.meta["intrinsics"]
    x, y, z = centre
    d = -z
    u0, u1 = cx + fx * (x - half) / d, cx + fx * (x + half) / d
    v0, v1 = cy - fy * (y + half) / d, cy - fy * (y - half) / d
    return int(math.ceil(v0)) + 1, int(math.floor(v1)) - 1, int(math.ceil(u0)) + 1, int(math.floor(u1)) - 1


# ---------------------------------------------------------------------------------------
# depth: plane at 5 m
def _plane_scene():
    scene = _fresh()
    _camera(scene)
    m, _ = _principled("grey", (0.5, 0.5, 0.5), 0.0, 0.5)
    _plane((0, 0, -5), 40.0, m)
    _sun(scene)
    return scene


@pytest.mark.blender
def test_plane_at_5m_gives_planar_depth_5():
    scene = _plane_scene()
    f = _render(scene)
    assert f.depth.shape == (H, W)
    # planar, not radial: the corners are ~5.9 m away along the ray, still 5.0 deep
    assert np.abs(f.depth - 5.0).max() < 1e-3
    assert np.allclose(f.normal, (0.0, 0.0, 1.0), atol=1e-4)
    assert np.all(f.confidence > 0.999)
    assert f.meta["depth_kind"] == "metric"
    fx, fy, cx, cy = f.meta["intrinsics"]
    assert fx == pytest.approx(35.0 / 36.0 * W) and fy == pytest.approx(fx)
    assert (cx, cy) == (W / 2, H / 2)
    assert np.all(np.isfinite(f.combined)) and f.combined[..., :3].max() > 0
    # exact scene passes are recorded as measured (per-pass provenance, issue 17)
    assert set(f.meta["provenance"].values()) == {"measured"}
    assert "Cycles" in f.meta["pass_models"]["depth"]


@pytest.mark.blender
def test_depth_in_metres_follows_unit_scale():
    scene = _plane_scene()
    scene.unit_settings.scale_length = 0.01  # one Blender unit = 1 cm
    f = _render(scene, samples=1)
    assert np.abs(f.depth - 0.05).max() < 1e-5
    assert f.meta["unit_scale"] == pytest.approx(0.01)


@pytest.mark.blender
def test_tilted_camera_depth_matches_geometry(tmp_path):
    """Camera 2 m above a ground plane, pitched down 30 deg: depth = 2 / (sin(30) + y_n cos(30))."""
    scene = _fresh()
    tilt = math.radians(30)
    _camera(scene, loc=(0, 0, 2.0), rot=(math.pi / 2 - tilt, 0, 0))
    _plane((0, 0, 0), 200.0)
    f = _render(scene)
    fx, fy, cx, cy = f.meta["intrinsics"]
    v = np.arange(H) + 0.5
    yn = -(v - cy) / fy  # camera-space ray slope (up positive)
    # a ray (x, yn, -1) in camera space; world z component: yn*cos(t) - sin(t) ... hits z=0
    denom = np.sin(tilt) - yn * np.cos(tilt)
    ok = denom > 1e-3
    expect = 2.0 / denom[ok]
    got = f.depth[ok, W // 2]
    assert np.abs(got - expect).max() < 1e-3 * expect.max()
    # normal of the ground in camera space: world +Z rotated into the camera
    want_n = np.array([0.0, np.cos(tilt), np.sin(tilt)])
    assert np.abs(f.normal[ok][:, W // 2] - want_n).max() < 1e-3


# ---------------------------------------------------------------------------------------
# normals: sphere
@pytest.mark.blender
def test_sphere_normals_match_analytic_camera_space_normals():
    import bpy
    from mathutils import Euler

    scene = _fresh()
    cam_loc = np.array([1.0, -6.0, 2.0])
    cam_rot = (math.radians(75), 0.0, math.radians(10))
    cam = _camera(scene, loc=tuple(cam_loc), rot=cam_rot)
    cam.data.shift_x, cam.data.shift_y = 0.08, -0.05  # intrinsics must follow lens shift
    bpy.context.view_layer.update()
    R = np.array(cam.matrix_world.to_3x3())
    centre = cam_loc + R @ np.array([0.2, 0.1, -5.0])  # in front of the camera
    radius = 1.2
    bpy.ops.mesh.primitive_uv_sphere_add(radius=radius, location=tuple(centre), segments=96, ring_count=48)
    bpy.ops.object.shade_smooth()
    f = _render(scene, samples=4)
    fx, fy, cx, cy = f.meta["intrinsics"]
    assert (cx, cy) == pytest.approx((W / 2 - 0.08 * W, H / 2 - 0.05 * W))
    u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
    d_cam = np.stack([(u - cx) / fx, -(v - cy) / fy, -np.ones_like(u)], -1)
    d_world = d_cam @ R.T
    oc = cam_loc - centre
    a = (d_world ** 2).sum(-1)
    b = 2 * (d_world @ oc)
    c = oc @ oc - radius ** 2
    disc = b * b - 4 * a * c
    hit = disc > 0
    t = (-b - np.sqrt(np.where(hit, disc, 0))) / (2 * a)
    p = cam_loc + t[..., None] * d_world
    n_world = (p - centre) / radius
    n_cam = n_world @ R  # R^T n
    # interior pixels: the whole 5x5 neighbourhood hits (the pixel filter reaches ~1 px out)
    inner = _erode(hit, 2)
    assert inner.sum() > 200
    assert np.all(f.confidence[inner] > 0.99), (np.argwhere(inner & (f.confidence <= 0.99)), f.confidence[inner].min())
    cosang = np.clip((f.normal[inner] * n_cam[inner]).sum(-1), -1, 1)
    err = np.degrees(np.arccos(cosang))
    assert err.mean() < 1.0 and err.max() < 5.0
    # planar depth on the sphere: -z of the hit point in camera space
    depth = -(p - cam_loc) @ R[:, 2]
    assert np.abs(f.depth[inner] - depth[inner]).max() < 0.01
    # sky: no surface -> far depth, (0,0,1), confidence 0
    sky = _erode(~hit, 2)
    assert sky.sum() > 500
    assert np.all(f.confidence[sky] == 0)
    assert np.allclose(f.normal[sky], (0, 0, 1))
    assert np.allclose(f.depth[sky], f.meta["depth_far"])
    assert np.all(np.linalg.norm(f.normal, axis=-1) == pytest.approx(1.0, abs=1e-4))


# ---------------------------------------------------------------------------------------
# materials
CHECK_A, CHECK_B = (0.9, 0.1, 0.2), (0.05, 0.6, 0.3)
IMG = [(0.1, 0.2, 0.3), (0.7, 0.5, 0.25), (0.33, 0.9, 0.05), (0.6, 0.6, 0.95)]  # 2x2, row-major from bottom


def _materials_scene():
    """Eight 1 m squares at 5 m, two rows of four, one material each (see expectations)."""
    import bpy

    scene = _fresh()
    _camera(scene)
    slots = {}
    xs, ys = (-1.8, -0.6, 0.6, 1.8), (0.6, -0.6)

    def put(i, name, mat):
        loc = (xs[i % 4], ys[i // 4], -5.0)
        _plane(loc, 1.0, mat)
        slots[name] = loc

    put(0, "const", _principled("const", (0.2, 0.4, 0.6), 0.7, 0.3)[0])
    # image texture (2x2, closest) -> base colour; its red channel * 0.5 -> roughness
    m, p = _principled("image", metallic=0.25)
    img = bpy.data.images.new("tex2x2", 2, 2, float_buffer=True)
    img.pixels = [v for rgb in IMG for v in (*rgb, 1.0)]
    img.pack()  # survives save / reload of the test's "third-party" .blend
    tex = m.node_tree.nodes.new("ShaderNodeTexImage")
    tex.image = img
    tex.interpolation = "Closest"
    tex.extension = "EXTEND"
    uv = m.node_tree.nodes.new("ShaderNodeTexCoord")
    m.node_tree.links.new(uv.outputs["UV"], tex.inputs["Vector"])
    m.node_tree.links.new(tex.outputs["Color"], p.inputs["Base Color"])
    sep = m.node_tree.nodes.new("ShaderNodeSeparateColor")
    mul = m.node_tree.nodes.new("ShaderNodeMath")
    mul.operation = "MULTIPLY"
    mul.inputs[1].default_value = 0.5
    m.node_tree.links.new(tex.outputs["Color"], sep.inputs["Color"])
    m.node_tree.links.new(sep.outputs[0], mul.inputs[0])
    m.node_tree.links.new(mul.outputs[0], p.inputs["Roughness"])
    put(1, "image", m)
    # procedural checker -> base colour
    m, p = _principled("checker", metallic=1.0, roughness=0.15)
    chk = m.node_tree.nodes.new("ShaderNodeTexChecker")
    chk.inputs["Color1"].default_value = (*CHECK_A, 1)
    chk.inputs["Color2"].default_value = (*CHECK_B, 1)
    chk.inputs["Scale"].default_value = 2.0
    uv = m.node_tree.nodes.new("ShaderNodeTexCoord")
    m.node_tree.links.new(uv.outputs["UV"], chk.inputs["Vector"])
    m.node_tree.links.new(chk.outputs["Color"], p.inputs["Base Color"])
    put(2, "checker", m)
    put(3, "diffuse", _shader_material("diffuse", "ShaderNodeBsdfDiffuse", Color=(0.5, 0.1, 0.1, 1)))
    put(4, "glossy", _shader_material("glossy", "ShaderNodeBsdfGlossy", Color=(0.9, 0.8, 0.3, 1), Roughness=0.2))
    put(5, "emission", _shader_material("emission", "ShaderNodeEmission", Color=(1, 0, 0, 1)))
    # mix of a Principled BSDF and a diffuse: the Principled inputs win
    m, p = _principled("mix", (0.1, 0.7, 0.2), 0.0, 0.8)
    t = m.node_tree
    out = t.get_output_node("CYCLES")
    dif = t.nodes.new("ShaderNodeBsdfDiffuse")
    mix = t.nodes.new("ShaderNodeMixShader")
    t.links.new(p.outputs[0], mix.inputs[1])
    t.links.new(dif.outputs[0], mix.inputs[2])
    t.links.new(mix.outputs[0], out.inputs["Surface"])
    put(6, "mix", m)
    put(7, "none", None)
    light = bpy.data.lights.new("sun", "SUN")
    lob = bpy.data.objects.new("sun", light)
    scene.collection.objects.link(lob)
    return scene, slots


EXPECT = {  # albedo, metallic, roughness
    "const": ((0.2, 0.4, 0.6), 0.7, 0.3),
    "diffuse": ((0.5, 0.1, 0.1), 0.0, 1.0),
    "glossy": ((0.9, 0.8, 0.3), 1.0, 0.2),
    "emission": ((0.5, 0.5, 0.5), 0.0, 0.5),
    "mix": ((0.1, 0.7, 0.2), 0.0, 0.8),
    "none": ((0.8, 0.8, 0.8), 0.0, 0.5),
}


def _check_materials(f, slots, tol=1e-3):
    for name, (alb, met, rou) in EXPECT.items():
        r0, r1, c0, c1 = _pixel_box(f, slots[name], 0.5)
        sl = (slice(r0, r1 + 1), slice(c0, c1 + 1))
        assert (r1 - r0 + 1) * (c1 - c0 + 1) >= 36, name
        assert np.abs(f.albedo[sl] - alb).max() < tol, (name, f.albedo[sl].reshape(-1, 3)[:3])
        assert np.abs(f.metallic[sl] - met).max() < tol, name
        assert np.abs(f.roughness[sl] - rou).max() < tol, name
    # image texture: each quadrant exactly one texel; roughness = 0.5 * red
    r0, r1, c0, c1 = _pixel_box(f, slots["image"], 0.5)
    rm, cm = (r0 + r1) // 2, (c0 + c1) // 2
    quads = {0: (slice(rm + 2, r1 + 1), slice(c0, cm - 1)), 1: (slice(rm + 2, r1 + 1), slice(cm + 2, c1 + 1)),
             2: (slice(r0, rm - 1), slice(c0, cm - 1)), 3: (slice(r0, rm - 1), slice(cm + 2, c1 + 1))}
    for k, sl in quads.items():
        assert f.albedo[sl].size > 0
        assert np.abs(f.albedo[sl] - IMG[k]).max() < tol, (k, f.albedo[sl].reshape(-1, 3)[:2])
        assert np.abs(f.roughness[sl] - 0.5 * IMG[k][0]).max() < tol
        assert np.abs(f.metallic[sl] - 0.25).max() < tol
    # checker: every inner pixel is one of the two colours (except texel borders), both occur
    r0, r1, c0, c1 = _pixel_box(f, slots["checker"], 0.5)
    alb = f.albedo[r0:r1 + 1, c0:c1 + 1].reshape(-1, 3)
    da = np.abs(alb - CHECK_A).max(-1)
    db = np.abs(alb - CHECK_B).max(-1)
    assert (da < tol).sum() >= 8 and (db < tol).sum() >= 8
    assert (np.minimum(da, db) < tol).mean() > 0.6
    assert np.abs(f.metallic[r0:r1 + 1, c0:c1 + 1] - 1.0).max() < tol


@pytest.mark.blender
def test_materials_exact_albedo_metallic_roughness(tmp_path):
    scene, slots = _materials_scene()
    f = _render(scene, samples=1)
    _check_materials(f, slots)
    # and through the contract file (half floats: 1e-3 relative)
    from gbuffer_editor.addon.scene.export import export_scene_gbuffers

    paths = export_scene_gbuffers(scene, tmp_path, frames=[1], resolution=(W, H), samples=1, denoise=False,
                                  threads=1)
    g = contract.read_frame(paths[0], validate=True)
    _check_materials(g, slots, tol=2e-3)
    assert g.meta["estimator"] == "scene" and len(g.meta["intrinsics"]) == 4


# ---------------------------------------------------------------------------------------
# the .blend stays unchanged; third-party file
def _snapshot(scene):
    import bpy

    r = scene.render
    mats = {}
    for m in bpy.data.materials:
        if m.node_tree is not None:
            mats[m.name] = (len(m.node_tree.nodes), len(m.node_tree.links),
                            sorted(n.name for n in m.node_tree.nodes),
                            sorted((l.from_node.name, l.from_socket.identifier, l.to_node.name, l.to_socket.identifier)
                                   for l in m.node_tree.links))
    snap = {
        "materials": mats,
        "aovs": [(vl.name, [(a.name, a.type) for a in vl.aovs]) for vl in scene.view_layers],
        "passes": [(vl.name, vl.use, vl.use_pass_z, vl.use_pass_normal, vl.use_pass_mist, vl.use_pass_combined)
                   for vl in scene.view_layers],
        "render": (r.engine, r.resolution_x, r.resolution_y, r.resolution_percentage, r.filepath,
                   r.image_settings.file_format, r.image_settings.color_depth, r.use_compositing,
                   r.use_motion_blur, r.threads_mode, r.use_persistent_data, r.film_transparent),
        "cycles": (scene.cycles.samples, scene.cycles.use_denoising, scene.cycles.seed),
        "world": (scene.world.name if scene.world else None,
                  tuple(getattr(scene.world.mist_settings, k) for k in ("start", "depth", "falloff"))
                  if scene.world else None),
        "counts": {k: len(getattr(bpy.data, k)) for k in ("materials", "worlds", "node_groups",
                                                           "objects", "meshes", "scenes")},
        # Blender's own "Render Result" (never saved to the .blend) may appear after any render
        "images": sorted(i.name for i in bpy.data.images if i.type != "RENDER_RESULT"),
        "frame": (scene.frame_current, scene.camera.name),
    }
    if hasattr(r.image_settings, "media_type"):
        snap["media"] = r.image_settings.media_type
    return snap


@pytest.mark.blender
def test_third_party_blend_export_leaves_file_unchanged(tmp_path):
    import bpy
    from gbuffer_editor.addon.scene.export import export_scene_gbuffers

    scene, slots = _materials_scene()
    scene.view_layers[0].aovs.add().name = "user_aov"
    scene.world = bpy.data.worlds.new("their_world")
    scene.world.mist_settings.start, scene.world.mist_settings.depth = 3.0, 17.0
    scene.frame_start, scene.frame_end = 1, 2
    scene.frame_set(7)
    blend = tmp_path / "third_party.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    scene = bpy.context.scene
    before = _snapshot(scene)
    assert "user_aov" in [a for a, _ in before["aovs"][0][1]]
    out = tmp_path / "gb"
    paths = export_scene_gbuffers(scene, out, resolution=(W, H), samples=1, denoise=False, threads=1)
    assert [p.name for p in paths] == ["gbuffer_0001.exr", "gbuffer_0002.exr"]
    after = _snapshot(scene)
    assert after == before
    f = contract.read_frame(paths[1], validate=True)
    assert f.meta["source"] == str(blend) and f.meta["scene_frame"] == 2
    _check_materials(f, slots, tol=2e-3)
    _check_manifest(out, [1, 2], blend=str(blend), resolution=[W, H])
    # skip_existing keeps files (and the manifest still lists both)
    mtime = paths[0].stat().st_mtime_ns
    export_scene_gbuffers(scene, out, frames=[1], resolution=(W, H), samples=1, threads=1, skip_existing=True)
    assert paths[0].stat().st_mtime_ns == mtime
    _check_manifest(out, [1, 2], blend=str(blend), resolution=[W, H])


def _check_manifest(out, frames, **settings):
    """``manifest.json`` of a scene export: job, settings, one row per frame file (with the
    header's intrinsics and camera matrix), contract version."""
    man = contract.read_manifest(out)
    assert man["job"] == "scene_export" and man["contract_version"] == contract.CONTRACT_VERSION
    assert man["complete"] is True and man["passes"] == list(contract.PASSES)
    for k, v in settings.items():
        assert man["settings"][k] == v, k
    assert [row["frame"] for row in man["frames"]] == frames
    for row in man["frames"]:
        assert row["file"] == contract.frame_path(out, row["frame"]).name
        meta = contract.read_meta(out / row["file"])
        assert row["intrinsics"] == meta["intrinsics"] and len(row["intrinsics"]) == 4
        assert row["camera_matrix_world"] == meta["camera_matrix_world"]
        assert row["depth_near"] == meta["depth_near"] and row["depth_far"] == meta["depth_far"]
    return man


@pytest.mark.blender
def test_principled_inside_node_group():
    """A material wrapped in a node group (common in asset libraries): values from inside it."""
    import bpy

    scene = _fresh()
    _camera(scene)
    _sun(scene)
    g = bpy.data.node_groups.new("wrapped", "ShaderNodeTree")
    g.interface.new_socket("Tint", in_out="INPUT", socket_type="NodeSocketColor")
    g.interface.new_socket("Shader", in_out="OUTPUT", socket_type="NodeSocketShader")
    gin, gout = g.nodes.new("NodeGroupInput"), g.nodes.new("NodeGroupOutput")
    p = g.nodes.new("ShaderNodeBsdfPrincipled")
    p.inputs["Metallic"].default_value = 0.6
    p.inputs["Roughness"].default_value = 0.35
    g.links.new(gin.outputs["Tint"], p.inputs["Base Color"])
    g.links.new(p.outputs[0], gout.inputs["Shader"])
    m = bpy.data.materials.new("grouped")
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    m.node_tree.nodes.clear()
    out = m.node_tree.nodes.new("ShaderNodeOutputMaterial")
    node = m.node_tree.nodes.new("ShaderNodeGroup")
    node.node_tree = g
    node.inputs["Tint"].default_value = (0.3, 0.2, 0.1, 1.0)
    m.node_tree.links.new(node.outputs["Shader"], out.inputs["Surface"])
    _plane((0, 0, -5), 40.0, m)
    n_group, n_mat = len(g.nodes), len(m.node_tree.nodes)
    f = _render(scene, samples=1)
    assert np.abs(f.albedo - (0.3, 0.2, 0.1)).max() < 1e-3
    assert np.abs(f.metallic - 0.6).max() < 1e-3 and np.abs(f.roughness - 0.35).max() < 1e-3
    assert (len(g.nodes), len(m.node_tree.nodes)) == (n_group, n_mat)


@pytest.mark.blender
def test_scene_without_camera_raises():
    import bpy
    from gbuffer_editor.addon.scene.export import ExportError, export_scene_gbuffers

    scene = _fresh()
    _plane((0, 0, 0), 1.0)
    with pytest.raises(ExportError, match="no camera"):
        export_scene_gbuffers(scene, "/nonexistent_never_written")


# ---------------------------------------------------------------------------------------
# motion blur
@pytest.mark.blender
def test_motion_blur_averages_subframes_in_linear_light():
    import bpy
    from gbuffer_editor.addon.scene.export import GBufferRenderer, _subframe_offsets

    scene = _fresh()
    _camera(scene)
    m, _ = _principled("white", (0.9, 0.9, 0.9))
    ob = _plane((-1.0, 0, -5), 1.5, m)
    ob.keyframe_insert("location", frame=1)
    ob.location.x = 1.0
    ob.keyframe_insert("location", frame=2)
    light = bpy.data.lights.new("sun", "SUN")
    scene.collection.objects.link(bpy.data.objects.new("sun", light))
    with GBufferRenderer(scene, resolution=(W, H), samples=1, denoise=False, threads=1, seed=3) as gr:
        blurred = gr.render_frame(1, motion_blur_steps=3, shutter=0.5)
        subs = [gr.render_passes(1 + off)[0] for off in _subframe_offsets(3, 0.5)]
        sharp = gr.render_frame(1)
    from gbuffer_editor.addon.scene.passes import find_pass

    mean = np.mean([find_pass(c, "Combined", ("R", "G", "B", "A")) for c in subs], axis=0)
    assert np.abs(blurred.combined - mean).max() < 1e-4
    assert np.abs(blurred.combined - sharp.combined).max() > 0.05  # it really is blurred
    # the other passes come from the centre sub-frame (the frame itself for odd N)
    assert np.abs(blurred.depth - sharp.depth).max() < 1e-4
    assert blurred.meta["motion_blur_steps"] == 3


# ---------------------------------------------------------------------------------------
# procedural scenes
@pytest.mark.blender
def test_procedural_scene_is_reproducible(tmp_path):
    import bpy
    from training.procedural_scenes import build_scene, camera_path, sky_types

    scene = _fresh()

    def build(seed):
        info = build_scene(scene, np.random.default_rng(seed), tmp_path / "tex")
        objs = sorted((o.name, tuple(round(v, 5) for v in o.location)) for o in scene.objects)
        return info, objs, len(bpy.data.materials)

    a, b, c = build([7, 1]), build([7, 1]), build([7, 2])
    assert a == b
    assert a[1] != c[1]
    assert sky_types()  # a physical sky exists in this Blender
    mats = camera_path(np.random.default_rng(0), a[0]["camera"] | {"loc": tuple(a[0]["camera"]["loc"])}, 4)
    assert len(mats) == 4


@pytest.mark.blender
def test_procedural_rgbd_camera_faces_a_near_wall(tmp_path):
    """camera_style='rgbd': eye level, ~60 deg FOV, pitched down, looking at a wall
    1.2-4.5 m ahead (+-0.45 rad); a ray down the view axis hits that wall."""
    import math

    from training.procedural_scenes import build_scene

    scene = _fresh()
    for seed in range(4):
        info = build_scene(scene, np.random.default_rng([11, seed]), tmp_path / "tex", kind="room",
                           camera_style="rgbd")
        cam = info["camera"]
        W, D, _H = info["size"]
        x, y, z = cam["loc"]
        assert info["camera_style"] == "rgbd"
        assert 1.0 <= z <= 1.7 and 28 <= cam["lens"] <= 34 and -0.5 <= cam["pitch"] <= -0.05
        assert abs(x) <= W / 2 - 0.6 + 1e-6 and abs(y) <= D / 2 - 0.6 + 1e-6
        # horizontal distance along the view direction to the room's walls
        dx, dy = -math.sin(cam["yaw"]), math.cos(cam["yaw"])
        t = min(((W / 2 if dx > 0 else -W / 2) - x) / dx if abs(dx) > 1e-9 else math.inf,
                ((D / 2 if dy > 0 else -D / 2) - y) / dy if abs(dy) > 1e-9 else math.inf)
        assert 0.6 < t < 4.5 / math.cos(0.45) + 1e-6, (seed, t)
    with pytest.raises(ValueError, match="room"):
        build_scene(scene, np.random.default_rng(0), tmp_path / "tex", kind="outdoor", camera_style="rgbd")
    with pytest.raises(ValueError, match="camera_style"):
        build_scene(scene, np.random.default_rng(0), tmp_path / "tex", kind="room", camera_style="fisheye")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import render_dataset

    with pytest.raises(SystemExit):  # argparse error, before anything is rendered
        render_dataset.parse_args(["--out", str(tmp_path / "x"), "--count", "1", "--camera", "rgbd"])
    assert not (tmp_path / "x").exists()


@pytest.mark.blender
def test_render_dataset_writes_resumable_clips(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import render_dataset

    out = tmp_path / "ds"
    args = ["--out", str(out), "--count", "4", "--res", "32x24", "--samples", "1", "--clip-len", "2",
            "--ready-min", "4", "--kind", "tabletop", "--blur-fraction", "1"]
    assert render_dataset.main(args) == 0
    frames = contract.list_frames(out)
    assert list(frames) == [1, 2, 3, 4]
    f = contract.read_frame(frames[3], validate=True)
    assert f.shape == (24, 32) and f.meta["depth_kind"] == "metric"
    assert f.meta["procedural"]["scene_id"] == 1 and f.meta["procedural"]["clip_frame"] == 0
    assert f.meta["motion_blur_steps"] == 3
    # the camera moves along the clip (keyframed path)
    g = contract.read_frame(frames[4])
    assert g.meta["camera_matrix_world"] != f.meta["camera_matrix_world"]
    import json

    ready = json.loads((out / "READY").read_text())
    assert ready["count"] == 4 and ready["resolution"] == [32, 24]
    mtimes = {k: p.stat().st_mtime_ns for k, p in frames.items()}
    frames[4].unlink()  # a broken clip is redone, the complete one is kept
    assert render_dataset.main(args) == 0
    assert contract.list_frames(out)[1].stat().st_mtime_ns == mtimes[1]
    assert contract.list_frames(out)[4].exists()


# ---------------------------------------------------------------------------------------
# the key test under bpy 4.5
@pytest.mark.blender
def test_key_exports_under_bpy_45():
    import bpy
    import bpy_util

    if bpy.app.version < (5, 0, 0):
        pytest.skip("already running under bpy 4.x")
    py = bpy_util.venv_python(".venv45")
    if not py.exists():
        pytest.skip(".venv45 (bpy 4.5) not installed")
    res = bpy_util.run_bpy(
        """
        import sys
        sys.path.insert(0, "tests"); sys.path.insert(0, ".")
        import bpy, test_scene_export as t
        scene = t._plane_scene()
        f = t._render(scene)
        scene, slots = t._materials_scene()
        before = t._snapshot(scene)
        g = t._render(scene, samples=1)
        t._check_materials(g, slots)
        emit_result({"version": bpy.app.version_string, "depth_err": float(abs(f.depth - 5.0).max()),
                     "unchanged": t._snapshot(scene) == before})
        """,
        python=py, timeout=300)
    assert res["version"].startswith("4.5")
    assert res["depth_err"] < 1e-3
    assert res["unchanged"]


@pytest.mark.blender
def test_export_command_line_on_a_blend_file(tmp_path):
    """``tools/scene_export.py FILE.blend --out DIR`` in a fresh process (same bpy)."""
    import subprocess

    import bpy
    import bpy_util

    _plane_scene()
    bpy.context.scene.frame_start = bpy.context.scene.frame_end = 3
    blend = tmp_path / "plane.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    env = bpy_util.isolated_env(tmp_path)
    cmd = [sys.executable, str(bpy_util.REPO_ROOT / "tools" / "scene_export.py"), str(blend), "--out",
           str(tmp_path / "gb"), "--res", "32x24", "--samples", "1", "--threads", "1"]
    proc = subprocess.run(cmd, cwd=bpy_util.REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    f = contract.read_frame(tmp_path / "gb" / "gbuffer_0003.exr", validate=True)
    assert f.shape == (24, 32) and np.abs(f.depth - 5.0).max() < 1e-3
    _check_manifest(tmp_path / "gb", [3], resolution=[32, 24], samples=1)
    bad = subprocess.run(cmd[:2] + [str(tmp_path / "missing.blend"), "--out", str(tmp_path / "x")],
                         cwd=bpy_util.REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "missing.blend" in bad.stderr


def test_clip_problem_rejects_black_and_blocked_frames():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from render_dataset import clip_problem

    h, w = 12, 16
    ok = contract.GBufferFrame(
        combined=np.full((h, w, 4), 0.2, np.float32), depth=np.full((h, w), 3.0, np.float32),
        normal=np.tile(np.float32([0, 0, 1]), (h, w, 1)), albedo=np.full((h, w, 3), 0.5, np.float32),
        metallic=np.zeros((h, w), np.float32), roughness=np.full((h, w), 0.5, np.float32),
        confidence=np.ones((h, w), np.float32))
    assert clip_problem(ok) == ""
    ok.combined[: h * 2 // 3] = 0.0
    assert clip_problem(ok) == "mostly black"
    ok.combined[:] = 0.2
    ok.depth[: h // 2] = 0.1
    assert clip_problem(ok) == "camera against a surface"


@pytest.mark.blender
def test_clear_camera_path_removes_objects_around_the_camera():
    import bpy
    from mathutils import Matrix
    from training.procedural_scenes import clear_camera_path

    scene = _fresh()
    bpy.ops.mesh.primitive_uv_sphere_add(radius=2.0, location=(0.5, 0, 0))
    bpy.context.active_object.name = "engulfing"
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 5, 0))
    bpy.context.active_object.name = "ahead"
    removed = clear_camera_path(scene, [Matrix.Translation((0, 0, 0)), Matrix.Translation((0, 0.2, 0))])
    assert removed == ["engulfing"]
    assert [o.name for o in scene.objects] == ["ahead"]


@pytest.mark.blender
def test_factory_startup_scene_exports():
    """Blender's own default scene (cube, light, camera, world) as an untouched input file."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=False)
    scene = bpy.context.scene
    cube = bpy.data.objects["Cube"]
    f = _render(scene, samples=1)
    surf = f.confidence > 0.99
    sky = f.confidence == 0
    assert 0.05 < surf.mean() < 0.9 and sky.mean() > 0.1
    assert np.abs(f.albedo[surf] - 0.8).max() < 1e-3  # the default material: Principled, base 0.8
    assert np.abs(f.roughness[surf] - 0.5).max() < 1e-3 and np.abs(f.metallic[surf]).max() < 1e-3
    # every surface pixel lies on the cube: planar depth within the cube's bounding sphere
    cam = scene.camera
    axis = -(cam.matrix_world.to_3x3().col[2])
    centre = (cube.matrix_world.to_translation() - cam.matrix_world.to_translation()).dot(axis)
    assert centre - math.sqrt(3) < f.depth[surf].min() and f.depth[surf].max() < centre + math.sqrt(3)
    # exact: ray-cast every interior pixel centre through the exported intrinsics
    from mathutils import Vector

    fx, fy, cx, cy = f.meta["intrinsics"]
    dg = bpy.context.evaluated_depsgraph_get()
    origin = cam.matrix_world.to_translation()
    rot = cam.matrix_world.to_3x3().normalized()
    inner = _erode(surf, 2)
    errs = []
    for r, c in np.argwhere(inner):
        d = rot @ Vector(((c + 0.5 - cx) / fx, -(r + 0.5 - cy) / fy, -1.0))
        hit, loc, *_ = scene.ray_cast(dg, origin, d.normalized())
        assert hit
        errs.append(abs((loc - origin).dot(axis) - f.depth[r, c]))
    assert len(errs) > 50 and max(errs) < 1e-3
    assert np.allclose(f.depth[sky], f.meta["depth_far"]) and np.allclose(f.normal[sky], (0, 0, 1))
