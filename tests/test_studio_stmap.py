"""ST-maps of a solved lens (issue 38): undistort/redistort maps in Nuke's STMap
convention that agree with our own undistortion and round-trip the footage."""
from __future__ import annotations

import numpy as np
import pytest

from backend.multiview.camera_files import save_cameras_json
from backend.multiview.cameras import Camera
from backend.multiview.stmap import apply_st
from backend.multiview.undistort import undistort_image

from cli_util import run_cli


def _image(h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    return np.stack([np.sin(x / 7.0) * 0.5 + 0.5, np.cos(y / 5.0) * 0.5 + 0.5, (x + y) / (w + h)], -1)


def test_stmap_cli_matches_undistortion_and_round_trips(tmp_path):
    import OpenEXR

    cam = Camera(160, 120, 150.0, 150.0, 80.0, 60.0, distortion_model="opencv",
                 distortion=(-0.12, 0.02, 0.0, 0.0, 0.0), name="1")
    cams = tmp_path / "cams.json"
    save_cameras_json(cams, {1: cam, 2: cam}, units="metres")
    r = run_cli("stmap", cams, "--out", tmp_path / "st")
    assert r.returncode == 0, r.stderr
    maps = {}
    for key in ("undistort", "redistort"):
        with OpenEXR.File(str(tmp_path / "st" / f"stmap_{key}.exr"), separate_channels=True) as f:
            hdr = f.header()
            assert hdr["colorInteropID"] == "data"
            maps[key] = np.stack([np.asarray(f.channels()[c].pixels) for c in "RG"], -1)
    und, red = maps["undistort"], maps["redistort"]
    assert und.dtype == np.float32 and und.shape == (120, 160, 2)
    # the principal point maps to itself; t runs bottom (0) to top (1)
    np.testing.assert_allclose(und[60, 80], [80.5 / 160, 1 - 60.5 / 120], atol=2e-3)
    assert und[0, 80, 1] > 0.9 and und[-1, 80, 1] < 0.1
    img = _image(120, 160)
    ref, _ = undistort_image(img, cam)
    got = apply_st(img, und)
    assert float(np.abs(got - ref)[4:-4, 4:-4].max()) < 5e-3
    back = apply_st(got, red)
    inner = (slice(12, -12), slice(16, -16))
    err = float(np.abs(back - img)[inner].mean())
    print(f"\nST-map undistort -> redistort round trip: mean abs {err:.5f}")
    assert err < 5e-3
    r = run_cli("stmap", cams, "--out", tmp_path / "st")  # never written over
    assert r.returncode == 1 and "never written over" in r.stderr


def test_stmap_refuses_a_lens_without_distortion(tmp_path):
    cams = tmp_path / "cams.json"
    save_cameras_json(cams, {1: Camera(64, 48, 60.0, 60.0, 32.0, 24.0, name="1")}, units="metres")
    r = run_cli("stmap", cams, "--out", tmp_path / "st")
    assert r.returncode == 2 and "no camera with lens distortion" in r.stderr
    assert not (tmp_path / "st").exists()
