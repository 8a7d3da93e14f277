"""Optional passes (issue 38): motion vectors in Blender's Vector convention and the
Position pass, written by ``decompose --passes vector,position``."""
from __future__ import annotations

import numpy as np

from backend import contract, decompose, extra_passes

from footage_util import write_movie


def _texture(h, w, seed=0):
    import cv2

    rng = np.random.default_rng(seed)
    t = sum(cv2.resize(rng.random((h // s, w // s)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
            for s in (2, 4, 8))
    t = (t - t.min()) / (t.max() - t.min())
    return np.stack([t, 0.7 * t + 0.2, 1.0 - 0.8 * t], -1)


def test_motion_vectors_follow_blenders_convention(tmp_path):
    """Content moving 3 px right and 2 px up per frame: Blender's Vector pass has XY (this
    position minus the previous) = (+3, +2) and ZW (next minus this) = (+3, +2), +Y up."""
    big = _texture(160, 200)
    frames = [(np.clip(big[40 - 2 * -i:40 - 2 * -i + 96, 40 - 3 * i:40 - 3 * i + 128], 0, 1) * 255 + 0.5)
              .astype(np.uint8) for i in range(4)]
    clip = write_movie(tmp_path / "pan.mp4", frames, rate=24, options={"crf": "1"})
    decompose(clip, tmp_path / "gb", estimator="embedded", passes="vector,position")
    inner = (slice(16, -16), slice(16, -16))
    for n in (1, 2, 3, 4):
        fr = contract.read_frame(contract.frame_path(tmp_path / "gb", n), validate=True)
        v = fr.extras["Vector"]
        assert v.shape == (96, 128, 4) and v.dtype == np.float32
        med = np.median(v[inner].reshape(-1, 4), axis=0)
        want = [0 if n == 1 else 3, 0 if n == 1 else 2, 0 if n == 4 else 3, 0 if n == 4 else 2]
        print(f"frame {n}: Vector median {np.round(med, 3)}, expected {want}")
        np.testing.assert_allclose(med, want, atol=0.15)
        assert fr.meta["position_space"] == "camera"
        p = fr.extras["Position"]
        np.testing.assert_allclose(-p[..., 2], fr.depth, rtol=1e-6)  # camera space: -Z = planar depth


def test_position_of_a_known_camera():
    """Pixel centre (cx, cy) at depth 2 in a camera at (1, 0, 0) looking down -Z lands at
    (1, 0, -2); a pixel 10 px right and 10 px down of it at x + 0.2, y - 0.2 (fx = 100)."""
    c2w = np.eye(4)
    c2w[0, 3] = 1.0
    depth = np.full((20, 20), 2.0, np.float32)
    p = extra_passes.position(depth, (100.0, 100.0, 5.5, 5.5), c2w)
    np.testing.assert_allclose(p[5, 5], [1.0, 0.0, -2.0], atol=1e-6)
    np.testing.assert_allclose(p[15, 15], [1.2, -0.2, -2.0], atol=1e-6)


def test_vectors_read_one_frame_beyond_the_range(tmp_path):
    """``--frames 2-4`` of a 6-frame pan: the handle frames get real vectors from the clip's
    frames 1 and 5 (read for the flow, never written): frame 2's XY and frame 4's ZW are
    the motion (+3, +2), not 0."""
    big = _texture(160, 220)
    frames = [(np.clip(big[40 + 2 * i:40 + 2 * i + 96, 60 - 3 * i:60 - 3 * i + 128], 0, 1) * 255 + 0.5)
              .astype(np.uint8) for i in range(6)]
    clip = write_movie(tmp_path / "pan.mp4", frames, rate=24, options={"crf": "1"})
    decompose(clip, tmp_path / "gb", estimator="embedded", passes="vector", frames="2-4")
    assert sorted(p.name for p in (tmp_path / "gb").glob("gbuffer_*.exr")) == [
        "gbuffer_0002.exr", "gbuffer_0003.exr", "gbuffer_0004.exr"]
    inner = (slice(16, -16), slice(16, -16))
    for n in (2, 4):
        v = contract.read_frame(contract.frame_path(tmp_path / "gb", n)).extras["Vector"]
        med = np.median(v[inner].reshape(-1, 4), axis=0)
        print(f"frame {n}: Vector median {np.round(med, 3)}")
        np.testing.assert_allclose(med, [3, 2, 3, 2], atol=0.15)


def test_vectors_with_cameras_on_the_last_frame_of_the_range(tmp_path):
    """A camera file plus ``--passes vector`` on a sub-range: the last frame of the range
    (held back one frame for its next neighbour) still finds its views (it crashed with
    ``KeyError`` blamed on the estimator), and it gets a forward vector from the frame
    after the range."""
    import cv2

    from backend.multiview.camera_files import save_cameras_json

    from multiview_util import dolly_cameras, render

    cams = dolly_cameras(n=5, dolly=0.12)
    seq = tmp_path / "shot"
    seq.mkdir()
    for i, cam in enumerate(cams, 1):
        grey, _ = render(cam)
        rgb = np.clip(np.stack([grey, 0.8 * grey + 0.1, 0.6 * grey + 0.2], -1), 0, 1)
        cv2.imwrite(str(seq / f"shot_{i:04d}.png"), (rgb[..., ::-1] * 255 + 0.5).astype(np.uint8))
    cam_file = tmp_path / "cams.json"
    save_cameras_json(cam_file, dict(enumerate(cams, 1)), units="metres", depth_range=(3.0, 12.0))
    decompose(seq, tmp_path / "gb", estimator="embedded", cameras=cam_file, passes="vector,position",
              frames="2-3")
    for n in (2, 3):
        fr = contract.read_frame(contract.frame_path(tmp_path / "gb", n))
        v = fr.extras["Vector"]
        back, fwd = np.abs(v[..., :2]).mean(), np.abs(v[..., 2:]).mean()
        print(f"frame {n}: mean |XY| {back:.3f} px, mean |ZW| {fwd:.3f} px")
        assert back > 1.0 and fwd > 1.0  # the dolly moves ~12 px a frame: both sides measured


def test_a_failure_outside_the_estimator_is_not_blamed_on_it():
    """The decompose error names the estimator only when the exception came from
    ``backend/estimators`` (the KeyError above came from the multi-view window)."""
    from backend.jobs.decompose_shots import _raised_in_estimator
    from backend.multiview.shot import MultiViewShot

    try:
        MultiViewShot.neighbours(type("S", (), {"options": None, "views": {}})(), 7, 1.0)
    except Exception as e:
        assert isinstance(e, KeyError) and not _raised_in_estimator(e)
    try:
        from backend.estimators.base import get_estimator
        get_estimator("no-such-estimator")
    except KeyError as e:
        assert _raised_in_estimator(e)  # raised in backend/estimators/base.py
    else:
        raise AssertionError("an unknown estimator name was accepted")
