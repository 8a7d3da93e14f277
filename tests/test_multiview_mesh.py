"""One surface per shot (issue 24, items 3-4): the sparse TSDF fused from a shot's depth,
its surface-nets mesh, ``decompose --mesh`` writing it as PLY in the cameras' world, and
Blender importing it where the ground-truth surface is."""
from __future__ import annotations

import numpy as np
import pytest

from backend.multiview.tsdf import SparseTSDF, write_ply

from multiview_util import dolly_cameras, render
from test_multiview_decompose import _shot


def _vertex_depth_error(verts, cams, depths):
    """Per vertex, |camera depth - ground-truth depth| at the pixel it projects to, in the
    frame where it is nearest the image centre."""
    cam, gt = cams[len(cams) // 2], depths[len(cams) // 2]
    xc = verts.astype(np.float64) @ cam.R.T + cam.t
    u = np.floor(cam.fx * xc[:, 0] / xc[:, 2] + cam.cx).astype(int)
    v = np.floor(cam.fy * xc[:, 1] / xc[:, 2] + cam.cy).astype(int)
    m = (xc[:, 2] > 0) & (u >= 0) & (u < cam.width) & (v >= 0) & (v < cam.height)
    return np.abs(xc[m, 2] - gt[v[m], u[m]]), m.mean()


def test_tsdf_of_exact_depth_meshes_the_surface(tmp_path):
    cams = dolly_cameras(n=5, dolly=0.1)
    depths = [render(c)[1] for c in cams]
    vol = SparseTSDF(SparseTSDF.voxel_for(depths[2], np.ones_like(depths[2]), cams[2]))
    for c, d in zip(cams, depths):
        vol.integrate(d, np.ones_like(d), c)
    verts, faces = vol.mesh()
    assert len(verts) > 1000 and faces.max() < len(verts)
    err, seen = _vertex_depth_error(verts, cams, depths)
    assert seen > 0.8
    assert np.median(err) < 0.5 * vol.voxel and np.percentile(err, 90) < 2.0 * vol.voxel, (
        np.median(err) / vol.voxel, np.percentile(err, 90) / vol.voxel)
    # triangles face the cameras (free space is positive)
    tri = verts[faces].astype(np.float64)
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    assert ((n * (cams[2].center - tri.mean(1))).sum(1) > 0).mean() > 0.95
    # memory grows with the surface, not the frames: fusing the same frames again adds nothing
    before = len(vol.keys)
    for c, d in zip(cams, depths):
        vol.integrate(d, np.ones_like(d), c)
    assert len(vol.keys) == before
    path = write_ply(tmp_path / "m.ply", verts, faces)
    assert path.read_bytes().startswith(b"ply\nformat binary_little_endian 1.0\n")
    with pytest.raises(FileExistsError, match="never written over"):
        write_ply(path, verts, faces)


def test_decompose_mesh_flag(tmp_path):
    from cli_util import events, run_cli

    seq, cams, depths, cam_file = _shot(tmp_path, n=5)
    mesh = tmp_path / "out" / "scene.ply"
    r = run_cli("decompose", seq, "--out", tmp_path / "gb", "--cameras", cam_file, "--mv-resolution", "160",
                "--mesh", mesh)
    assert r.returncode == 0, r.stderr
    assert events(r.stdout)[-1]["event"] == "done"
    import json

    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    assert man["mesh"]["frames_fused"] == 5 and man["mesh"]["faces"] > 100
    verts = _read_ply_vertices(mesh)
    err, seen = _vertex_depth_error(verts, cams, depths)
    voxel = man["mesh"]["voxel"]
    print(f"\nmesh from measured depth: {len(verts)} vertices, |dz| median {np.median(err) / voxel:.2f} "
          f"voxels, p90 {np.percentile(err, 90) / voxel:.2f} (voxel {voxel:.3f} m)")
    assert np.median(err) < 1.0 * voxel
    # a user's file is never written over: refused before the run
    r = run_cli("decompose", seq, "--out", tmp_path / "gb2", "--cameras", cam_file, "--mesh", mesh)
    assert r.returncode != 0 and "never written over" in r.stdout + r.stderr
    assert not (tmp_path / "gb2").exists() or not list((tmp_path / "gb2").glob("*.exr"))


def _read_ply_vertices(path):
    data = path.read_bytes()
    head, body = data.split(b"end_header\n", 1)
    n = int([ln for ln in head.decode().splitlines() if ln.startswith("element vertex")][0].split()[-1])
    return np.frombuffer(body[:12 * n], "<f4").reshape(n, 3)


@pytest.mark.blender
def test_blender_imports_the_mesh_where_the_surface_is(tmp_path):
    bpy = pytest.importorskip("bpy")
    if not hasattr(bpy.ops.wm, "ply_import"):
        pytest.skip("this bpy has no PLY importer")
    cams = dolly_cameras(n=5, dolly=0.1)
    depths = [render(c)[1] for c in cams]
    vol = SparseTSDF(SparseTSDF.voxel_for(depths[2], np.ones_like(depths[2]), cams[2]))
    for c, d in zip(cams, depths):
        vol.integrate(d, np.ones_like(d), c)
    verts, faces = vol.mesh()
    path = write_ply(tmp_path / "m.ply", verts, faces)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.wm.ply_import(filepath=str(path))
    ob = bpy.context.selected_objects[0]
    got = np.array([ob.matrix_world @ v.co for v in ob.data.vertices], np.float32)
    assert len(got) == len(verts) and len(ob.data.polygons) == len(faces)
    np.testing.assert_allclose(np.sort(got, 0), np.sort(verts, 0), atol=1e-5)


@pytest.mark.blender
def test_import_fused_mesh_operator_makes_a_shadow_catcher(tmp_path):
    bpy = pytest.importorskip("bpy")
    from blender_workflow_util import disable_addon, enable_addon

    cams = dolly_cameras(n=3, dolly=0.1)
    depths = [render(c)[1] for c in cams]
    vol = SparseTSDF(SparseTSDF.voxel_for(depths[1], np.ones_like(depths[1]), cams[1]))
    for c, d in zip(cams, depths):
        vol.integrate(d, np.ones_like(d), c)
    path = write_ply(tmp_path / "m.ply", *vol.mesh())
    bpy.ops.wm.read_factory_settings(use_empty=True)
    enable_addon()
    try:
        assert bpy.ops.gbuffer.import_fused_mesh(filepath=str(path), role="SHADOW_CATCHER") == {"FINISHED"}
        obs = [ob for ob in bpy.data.objects if ob.type == "MESH"]
        assert len(obs) == 1 and obs[0].is_shadow_catcher and len(obs[0].data.vertices) > 100
        assert bpy.ops.gbuffer.import_fused_mesh(filepath=str(path), role="HOLDOUT") == {"FINISHED"}
        assert sum(ob.is_holdout for ob in bpy.data.objects) == 1
    finally:
        disable_addon()


def test_cli_densify_and_surface_flags(tmp_path):
    """--mv-densify and --mv-surface reach the job and enter its settings; without them
    the settings are those of earlier versions (old outputs still resume)."""
    import json

    from cli_util import events, run_cli

    seq, cams, depths, cam_file = _shot(tmp_path, n=4)
    r = run_cli("decompose", seq, "--out", tmp_path / "gb", "--cameras", cam_file, "--mv-resolution", "120",
                "--frames", "2-3", "--mv-densify", "--mv-surface")
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    opts = man["settings"]["cameras"]["options"]
    assert opts["densify"] is True and opts["surface"] is True
    r = run_cli("decompose", seq, "--out", tmp_path / "gb2", "--cameras", cam_file, "--mv-resolution", "120",
                "--frames", "2-2")
    assert r.returncode == 0, r.stderr
    opts = json.loads((tmp_path / "gb2" / "manifest.json").read_text())["settings"]["cameras"]["options"]
    assert "densify" not in opts and "surface" not in opts
