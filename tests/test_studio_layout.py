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
            # 3.1+ translates each part's colorInteropID into oiio:ColorSpace; 3.0 leaves
            # it empty on multi-part files and gives the attribute as read
            space = spec.get_string_attribute("oiio:ColorSpace") or spec.get_string_attribute("colorInteropID")
            spaces[spec.channelnames[0].split(".")[1]] = space
            i += 1
        assert spaces["Combined"] == spaces["Albedo"] and spaces["Albedo"] in LIN_REC709
        assert spaces["Depth"] == spaces["Normal"] == spaces["Vector"] == "data"
    finally:
        inp.close()
