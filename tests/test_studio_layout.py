"""The opt-in Nuke layout (issue 38): ``--layout nuke`` writes R G B A, depth.Z, normal.XYZ,
albedo.RGB ... in one part; our readers give the same frame as the default layout, and
OpenImageIO takes depth.Z as the depth channel."""
from __future__ import annotations

import numpy as np
import pytest

from backend import contract, decompose

from footage_util import write_movie
from test_studio_passes import _texture


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    big = _texture(160, 200)
    frames = [(np.clip(big[40:136, 40 - 4 * i:40 - 4 * i + 128], 0, 1) * 255 + 0.5).astype(np.uint8)
              for i in range(3)]
    clip = write_movie(d / "pan.mp4", frames, rate=24, options={"crf": "1"})
    for layout in ("gbuffer", "nuke"):
        decompose(clip, d / layout, estimator="embedded", passes="vector,position", layout=layout)
    return d


def test_nuke_layout_channels_and_the_same_frame_read_back(both):
    import OpenEXR

    path = contract.frame_path(both / "nuke", 2)
    with OpenEXR.File(str(path), header_only=True) as f:
        assert len(f.parts) == 1
        hdr = dict(f.parts[0].header)
        names = {c.name for c in hdr["channels"]}
    assert names == {"R", "G", "B", "A", "depth.Z", "normal.X", "normal.Y", "normal.Z", "albedo.R", "albedo.G",
                     "albedo.B", "metallic.V", "roughness.V", "confidence.V", "position.X", "position.Y",
                     "position.Z", "backward.u", "backward.v", "forward.u", "forward.v"}
    assert hdr["colorInteropID"] == "lin_rec709_scene" and hdr["gbuffer/layout"] == "nuke"
    nk = contract.read_frame(path, validate=True)
    gb = contract.read_frame(contract.frame_path(both / "gbuffer", 2), validate=True)
    for name in contract.PASS_ATTRS:
        np.testing.assert_array_equal(getattr(nk, name), getattr(gb, name), err_msg=name)
    for name in ("Vector", "Position"):
        np.testing.assert_array_equal(nk.extras[name], gb.extras[name], err_msg=name)
    # Nuke's motion layers: forward = Blender's ZW, backward = -XY
    assert float(np.median(nk.extras["Vector"][..., 2])) == pytest.approx(4.0, abs=0.1)


#: OpenImageIO 3.1+ names the colorInteropID "lin_rec709_scene" itself; 3.0 (the last series
#: that installs beside numpy 1.x, which bpy needs) reports its own name for it, "lin_rec709"
LIN_REC709 = ("lin_rec709_scene", "lin_rec709")


def test_openimageio_takes_depth_z_as_the_depth_channel(both):
    oiio = pytest.importorskip("OpenImageIO")
    inp = oiio.ImageInput.open(str(contract.frame_path(both / "nuke", 2)))
    try:
        spec = inp.spec()
        assert spec.channelnames[spec.z_channel] == "depth.Z"
        assert spec.channelnames[spec.alpha_channel] == "A"
        assert spec.get_string_attribute("oiio:ColorSpace") in LIN_REC709
        assert spec.channelnames[:4] == ("R", "G", "B", "A")
    finally:
        inp.close()
    # the default layout: each pass is a subimage with its colour space stated
    inp = oiio.ImageInput.open(str(contract.frame_path(both / "gbuffer", 2)))
    try:
        spaces = {}
        i = 0
        while inp.seek_subimage(i, 0):
            spec = inp.spec()
            # OIIO 3.0 leaves oiio:ColorSpace empty on multi-part files and gives
            # colorInteropID as read (3.1+ per-part spaces: the TD's report, not run here)
            space = spec.get_string_attribute("oiio:ColorSpace") or spec.get_string_attribute("colorInteropID")
            spaces[spec.channelnames[0].split(".")[1]] = space
            i += 1
        assert spaces["Combined"] == spaces["Albedo"] and spaces["Albedo"] in LIN_REC709
        assert spaces["Depth"] == spaces["Normal"] == spaces["Vector"] == "data"
    finally:
        inp.close()


def test_default_layout_depth_is_depth_z_and_folders_written_before_still_read(both, tmp_path):
    """The default layout names depth ``GBuffer.Depth.Z`` (Blender's own name): OpenImageIO
    finds the depth channel on the Depth part (it found none on ``Depth.V``). A frame
    written before, with ``GBuffer.Depth.V``, still reads with the same depth."""
    import shutil

    import OpenEXR

    oiio = pytest.importorskip("OpenImageIO")
    path = contract.frame_path(both / "gbuffer", 2)
    inp = oiio.ImageInput.open(str(path))
    try:
        i, z = 0, {}
        while inp.seek_subimage(i, 0):
            spec = inp.spec()
            z[spec.channelnames[0].split(".")[1]] = (spec.channelnames[spec.z_channel]
                                                      if spec.z_channel >= 0 else None)
            i += 1
    finally:
        inp.close()
    print("OpenImageIO z_channel per part:", z)
    assert z["Depth"] == "GBuffer.Depth.Z"
    new = contract.read_frame(path, validate=True)
    # the same frame as an earlier version wrote it: Depth.V
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    old = contract.frame_path(old_dir, 2)
    with OpenEXR.File(str(path), separate_channels=True) as f:
        parts = []
        for p in f.parts:
            chans = {k.replace("GBuffer.Depth.Z", "GBuffer.Depth.V"): v for k, v in p.channels.items()}
            parts.append(OpenEXR.Part(dict(p.header), chans, p.name()))
        OpenEXR.File(parts).write(str(old))
    with OpenEXR.File(str(old), separate_channels=True) as f:
        assert "GBuffer.Depth.V" in f.parts[[p.name() for p in f.parts].index("GBuffer.Depth")].channels
    back = contract.read_frame(old, validate=True)
    np.testing.assert_array_equal(back.depth, new.depth)
    shutil.rmtree(old_dir)


def test_what_openimageio_3_0_reports_for_an_acescg_file(tmp_path):
    """An ACEScg single-part (Nuke layout) frame states AP1 chromaticities and
    ``lin_ap1_scene``; OpenImageIO passes both through as attributes. OpenImageIO 3.0
    (the venv's pin) reports ``oiio:ColorSpace = lin_rec709`` whatever the file states: its
    default for OpenEXR, documented in docs/studio-pipeline.md, not something we write."""
    import cv2

    from backend import exr_colour

    oiio = pytest.importorskip("OpenImageIO")
    img = tmp_path / "still.png"
    cv2.imwrite(str(img), (_texture(48, 64)[..., ::-1] * 255 + 0.5).astype(np.uint8))
    decompose(img, tmp_path / "gb", estimator="embedded", layout="nuke", working_space="acescg")
    path = next((tmp_path / "gb").glob("gbuffer_*.exr"))
    inp = oiio.ImageInput.open(str(path))
    try:
        spec = inp.spec()
        assert spec.get_string_attribute("colorInteropID") == "lin_ap1_scene"
        np.testing.assert_allclose(spec.getattribute("chromaticities"), exr_colour.PRIMARIES["lin_ap1_scene"],
                                   atol=1e-6)
        if oiio.VERSION < 30100:
            assert spec.get_string_attribute("oiio:ColorSpace") == "lin_rec709"
    finally:
        inp.close()


def test_depth_units_are_stated_where_nuke_shows_them(both):
    """Without a camera, depth is relative (1..100): every G-buffer says so in a plain
    ``depthUnits`` attribute (Nuke shows it as ``exr/depthUnits``), in both layouts."""
    import OpenEXR

    for layout in ("nuke", "gbuffer"):
        with OpenEXR.File(str(contract.frame_path(both / layout, 2)), header_only=True) as f:
            for p in f.parts:
                text = p.header["depthUnits"]
                assert text.startswith("relative") and "1 (near) to 100 (far)" in text and "not 1/z" in text
