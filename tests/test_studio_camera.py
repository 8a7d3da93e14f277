"""The camera on every frame (issue 38): a tracked shot's frames carry OpenEXR's standard
``worldToCamera`` / ``worldToNDC``, focal length and aperture, fallback frames included,
and a fallback frame's depth is mapped into the shot's metres (no jump)."""
from __future__ import annotations

import json

import numpy as np

from backend import contract, decompose, exr_attrs, extra_passes
from backend.multiview.cameras import Camera

from multiview_util import dolly_cameras, write_shot


def _shot_with_a_stop(tmp_path):
    """Six frames: a sideways dolly for frames 1-3, then the camera stops (frames 4-6
    at frame 3's position, only handheld rotation jitter): frames 5 and 6 have no
    neighbour with parallax within the window and fall back."""
    cams = dolly_cameras(n=6, dolly=0.1)
    c3 = cams[2].center
    cams = cams[:3] + [Camera(c.width, c.height, c.fx, c.fy, c.cx, c.cy, R=c.R, t=-c.R @ c3, name=c.name)
                       for c in cams[3:]]
    seq, cam_file = tmp_path / "shot", tmp_path / "cams.json"
    depths = write_shot(seq, cams, cam_file)
    return seq, cams, depths, cam_file


def _tc(t):
    return (t.hours, t.minutes, t.seconds, t.frame)


def _header(path):
    import OpenEXR

    with OpenEXR.File(str(path), header_only=True) as f:
        return [dict(p.header) for p in f.parts]


def test_every_frame_carries_the_camera_and_fallback_depth_stays_metric(tmp_path):
    seq, cams, depths, cam_file = _shot_with_a_stop(tmp_path)
    events = []
    decompose(seq, tmp_path / "gb", estimator="embedded", cameras=cam_file, progress=events.append,
              multiview={"processing_width": 160, "window": 2}, passes="position")
    fallback = {e["frame"] for e in events if e["event"] == "warning" and "parallax" in e["message"]}
    assert fallback == {5, 6}, events
    medians = {}
    for n, cam in enumerate(cams, 1):
        path = contract.frame_path(tmp_path / "gb", n)
        parts = _header(path)
        for hdr in parts:  # every part (pass) states the camera, as OIIO reads it per subimage
            back = exr_attrs.camera_from_header(hdr)
            np.testing.assert_allclose(back, cam.c2w_opengl(), atol=1e-5, err_msg=f"frame {n}")
            # worldToNDC projects a world point where the camera sees it
            X = cam.center + 5.0 * cam.R[2]  # 5 m straight ahead
            ndc = np.append(X, 1.0) @ np.asarray(hdr["worldToNDC"], np.float64)
            u, v = ndc[0] / ndc[3] * cam.width, ndc[1] / ndc[3] * cam.height
            px, _ = cam.project(X[None])
            np.testing.assert_allclose([u, v], px[0], atol=1e-3)
            assert abs(hdr["cameraFocalLength"] / hdr["cameraAperture"] - cam.fx / cam.width) < 1e-6
            assert hdr["framesPerSecond"] == 24 and _tc(hdr["timeCode"]) == (0, 0, 0, n)
        fr = contract.read_frame(path)
        assert fr.meta["depth_kind"] == "metric", n
        surface = contract.surface_mask(fr)
        medians[n] = float(np.median(fr.depth[surface]))
        # the Position pass is in the camera file's world (Blender axes)
        assert fr.meta["position_space"] == "world"
        p_true = extra_passes.position(depths[n - 1], cam.intrinsics, cam.c2w_opengl())
        err = np.linalg.norm(fr.extras["Position"] - p_true, axis=-1) / depths[n - 1]
        assert float(np.median(err[surface])) < 0.05, n
        if n in fallback:
            assert fr.meta["depth_source"] == "single-image" and fr.meta["scaled_from_frame"] == 4
            ratio = float(np.median((fr.depth / depths[n - 1])[surface]))
            print(f"frame {n}: fallback median depth {medians[n]:.3f} m, measured frame 4 {medians[4]:.3f} m, "
                  f"median ratio to the true depth {ratio:.4f}")
            assert abs(ratio - 1.0) < 0.05
            assert abs(medians[n] / medians[4] - 1.0) < 0.05
    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    assert man["multiview"]["frames_single_image"] == 2


def test_world_to_ndc_of_a_known_camera():
    """The matrices by hand: a camera at the origin looking down -Z (Blender), fx = 100 on
    a 200 x 100 frame, centre at the middle: a point 2 m ahead and 1 m right lands at
    x = (100 * 0.5 + 100) / 200 = 0.75, y = 0.5; worldToCamera gives it z = +2."""
    c2w = np.eye(4)
    w2c = exr_attrs.world_to_camera(c2w)
    p = np.array([1.0, 0.0, -2.0, 1.0])
    np.testing.assert_allclose(w2c @ p, [1.0, 0.0, 2.0, 1.0])
    ndc = exr_attrs.world_to_ndc(c2w, (100.0, 100.0, 100.0, 50.0), 200, 100) @ p
    np.testing.assert_allclose(ndc[:2] / ndc[3], [0.75, 0.5])
    up = exr_attrs.world_to_ndc(c2w, (100.0, 100.0, 100.0, 50.0), 200, 100) @ np.array([0.0, 1.0, -2.0, 1.0])
    assert up[1] / up[3] < 0.5  # +Y (up) is toward the top of the image: NDC y smaller
    np.testing.assert_allclose(exr_attrs.camera_to_world_from(exr_attrs.stored(w2c)), c2w, atol=1e-7)
    assert exr_attrs.timecode(1001, 24) == (0, 0, 41, 17)
