"""Colour stated and managed (issue 38): ACES plates in, the right colour out and stated;
a studio ACES OpenColorIO config end to end; a contradicting --colorspace refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend import colour, contract, decompose, exr_colour
from backend.colour import ColourError

from cli_util import cli_env, run_cli

STUDIO = Path(__file__).resolve().parent / "data" / "studio_aces"
W, H = 64, 48


def _reference() -> np.ndarray:
    """``H x W x 3`` scene-linear Rec.709: a hue ramp with saturated patches, 0..2."""
    x = np.linspace(0, 1, W, dtype=np.float32)[None, :]
    y = np.linspace(0, 1, H, dtype=np.float32)[:, None]
    hue = 2 * np.pi * x + 0 * y
    rgb = np.stack([0.5 + 0.45 * np.cos(hue), 0.5 + 0.45 * np.cos(hue - 2.1), 0.5 + 0.45 * np.cos(hue + 2.1)], -1)
    rgb = rgb * (0.05 + 1.95 * y)[..., None]
    rgb[4:12, 4:12] = (0.8, 0.05, 0.02)
    rgb[4:12, 20:28] = (0.02, 0.6, 0.05)
    rgb[4:12, 36:44] = (0.03, 0.05, 0.9)
    return rgb.astype(np.float32)


def _plate(folder: Path, interop: str, *, chroma: bool, interop_attr: bool) -> np.ndarray:
    """Two frames ``plate.1001.exr``/``.1002.exr`` of the reference in space ``interop``
    (float32 RGB), stating it by chromaticities and/or colorInteropID. Returns the values
    written."""
    import OpenEXR

    folder.mkdir(parents=True)
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES["lin_rec709_scene"], exr_colour.PRIMARIES[interop])
    vals = (_reference() @ m.T.astype(np.float32)).astype(np.float32)
    hdr = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    if chroma:
        hdr["chromaticities"] = exr_colour.PRIMARIES[interop]
    if interop_attr:
        hdr["colorInteropID"] = interop
    for n in (1001, 1002):
        with OpenEXR.File(hdr, {c: np.ascontiguousarray(vals[..., i]) for i, c in enumerate("RGB")}) as f:
            f.write(str(folder / f"plate.{n}.exr"))
    return vals


def _parts(path):
    import OpenEXR

    with OpenEXR.File(str(path), header_only=True) as f:
        return {p.name(): dict(p.header) for p in f.parts}


def _assert_stated_rec709(path):
    parts = _parts(path)
    for name, hdr in parts.items():
        want = "lin_rec709_scene" if name.split(".")[-1] in contract.COLOUR_PASSES else "data"
        assert hdr["colorInteropID"] == want, name
        np.testing.assert_allclose(hdr["chromaticities"], exr_colour.PRIMARIES["lin_rec709_scene"], atol=1e-6)


def _combined_rgb(folder, n):
    return contract.read_frame(contract.frame_path(folder, n)).combined[..., :3]


def test_primaries_table_agrees_with_openexr():
    import OpenEXR

    for iid, chroma in exr_colour.PRIMARIES.items():
        np.testing.assert_allclose(OpenEXR.colorInteropIDToChromaticities(iid), chroma, atol=1e-6)
        assert OpenEXR.chromaticitiesToColorInteropID(chroma) == iid


@pytest.mark.parametrize("interop,chroma,attr", [("lin_ap0_scene", True, False), ("lin_ap1_scene", False, True)])
def test_aces_plate_in_right_colour_out_and_stated(tmp_path, interop, chroma, attr):
    plate = _plate(tmp_path / "plate", interop, chroma=chroma, interop_attr=attr)
    ref = _reference()
    assert np.abs(plate - ref).max() > 0.1  # read as Rec.709 it would be visibly wrong
    events = []
    decompose(tmp_path / "plate", tmp_path / "gb", estimator="embedded", progress=events.append)
    got = _combined_rgb(tmp_path / "gb", 1001)
    err = np.abs(got - ref) / np.maximum(ref, 0.02)
    print(f"\n{interop} plate -> Combined: max relative error {err.max():.5f} (half float)")
    assert err.max() < 2e-3
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 1001))
    assert fr.meta["source_colorspace"] == {"lin_ap0_scene": "ACES2065-1", "lin_ap1_scene": "ACEScg"}[interop]
    _assert_stated_rec709(contract.frame_path(tmp_path / "gb", 1001))
    warns = [e["message"] for e in events if e["event"] == "warning"]
    assert any("states ACES" in w and "converted" in w for w in warns), warns
    # consistent with the refusal below (which says to leave --colorspace out): the warning
    # does not ask for --colorspace
    assert not any("name --colorspace" in w for w in warns), warns
    assert any("no --colorspace needed" in w for w in warns), warns


def test_contradicting_colorspace_is_refused(tmp_path):
    _plate(tmp_path / "plate", "lin_ap0_scene", chroma=True, interop_attr=False)
    with pytest.raises(ColourError, match="ACES2065-1.*--colorspace names 'Linear Rec.709"):
        decompose(tmp_path / "plate", tmp_path / "gb", estimator="embedded", colorspace="Linear Rec.709 (sRGB)")
    r = run_cli("decompose", tmp_path / "plate", "--out", tmp_path / "gb2", "--colorspace", "ACEScg")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "states ACES2065-1" in r.stderr
    # naming the space the file states is fine
    decompose(tmp_path / "plate", tmp_path / "gb3", estimator="embedded", colorspace="ACES2065-1")
    np.testing.assert_allclose(_combined_rgb(tmp_path / "gb3", 1001), _reference(), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("config", ["config.ocio", "config_no709.ocio"])
def test_studio_aces_config_end_to_end(tmp_path, config):
    """$OCIO = a studio ACES config without 'Linear Rec.709 (sRGB)' (and, in the second,
    no Rec.709 space at all): an untagged ACEScg plate with --colorspace "ACES - ACEScg"
    decomposes to the right colour, and restyle writes a stated Rec.709 EXR."""
    _plate(tmp_path / "plate", "lin_ap1_scene", chroma=False, interop_attr=False)
    env = cli_env(OCIO=str(STUDIO / config))
    r = run_cli("decompose", tmp_path / "plate", "--out", tmp_path / "gb", "--colorspace", "ACES - ACEScg",
                "--estimator", "embedded", env=env)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(_combined_rgb(tmp_path / "gb", 1001), _reference(), rtol=2e-3, atol=1e-3)
    assert contract.read_meta(contract.frame_path(tmp_path / "gb", 1001))["source_colorspace"] == "ACES - ACEScg"
    r = run_cli("restyle", tmp_path / "gb", "--prompt", "dense fog", "--out", tmp_path / "fog", env=env)
    assert r.returncode == 0, r.stderr
    out = sorted((tmp_path / "fog").rglob("restyle_*.exr"))
    assert out
    hdr = next(iter(_parts(out[0]).values()))
    assert hdr["colorInteropID"] == "lin_rec709_scene"
    np.testing.assert_allclose(hdr["chromaticities"], exr_colour.PRIMARIES["lin_rec709_scene"], atol=1e-6)


def test_working_space_found_in_a_studio_config(monkeypatch):
    def clear():
        for f in (colour._ocio_config, colour._ocio_processor, colour.working_space_name):
            f.cache_clear()

    try:
        monkeypatch.setenv("OCIO", str(STUDIO / "config.ocio"))
        clear()
        assert colour.working_space_name() == "Output - Linear Rec709 Studio"  # by its matrix
        monkeypatch.setenv("OCIO", str(STUDIO / "config_no709.ocio"))
        clear()
        assert colour.working_space_name() is None
        x = np.array([[[0.2, 0.5, 0.1]]], np.float32)
        m = exr_colour.conversion_matrix(exr_colour.PRIMARIES["lin_ap1_scene"], exr_colour.PRIMARIES["lin_rec709_scene"])
        np.testing.assert_allclose(colour.to_scene_linear(x, "ACES - ACEScg"), x @ m.T, atol=1e-6)
        monkeypatch.delenv("OCIO")
        clear()
        assert colour.working_space_name() == "Linear Rec.709 (sRGB)"  # by interop ID in ocio://default
    finally:
        monkeypatch.undo()
        clear()


def _tagged_movie(path, trc, primaries):
    """A 3-frame lossless H.264 clip (qp 0, 4:4:4: every encode decodes to the same values)
    of one colour gradient, tagged with ``color_trc`` and ``color_primaries`` (YUV matrix
    BT.709 in every case)."""
    import av

    from footage_util import gradient_rgb

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=24, options={"qp": "0"})
        s.width, s.height, s.pix_fmt = 64, 48, "yuv444p"
        cc = s.codec_context
        cc.color_trc, cc.color_primaries, cc.colorspace = trc, primaries, 1
        for i in range(3):
            for p in s.encode(av.VideoFrame.from_ndarray(gradient_rgb(48, 64, i), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def test_video_primaries_honoured_and_hdr_transfer_refused(tmp_path):
    from backend.footage import FootageError, open_footage

    def first(path, **kw):
        with open_footage(path, **kw) as src:
            return src.info, next(iter(src)).rgb

    info709, rgb709 = first(_tagged_movie(tmp_path / "rec709.mp4", 1, 1))
    info2020, rgb2020 = first(_tagged_movie(tmp_path / "rec2020.mp4", 14, 9))
    assert info709.colorspace == "sRGB" and info2020.colorspace == "sRGB transfer, Rec.2020 primaries"
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES["lin_rec2020_scene"], exr_colour.PRIMARIES["lin_rec709_scene"])
    np.testing.assert_allclose(rgb2020, rgb709 @ m.T.astype(np.float32), atol=1e-5)
    assert np.abs(rgb2020 - rgb709).max() > 0.05  # the primaries made a visible difference
    hlg = _tagged_movie(tmp_path / "hlg.mp4", 18, 9)
    with pytest.raises(FootageError, match="HLG"):
        first(hlg)
    r = run_cli("decompose", hlg, "--out", tmp_path / "gb")
    assert r.returncode == 2 and "HDR transfer HLG" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # a named colour space decides instead of the tags
    info, _ = first(hlg, colorspace="sRGB Encoded Rec.709 (sRGB)")
    assert info.colorspace == "sRGB Encoded Rec.709 (sRGB)"


def test_acescg_working_space_written_stated_and_read_back(tmp_path):
    """``--working-space acescg``: an ACEScg plate's values land in Combined as they were
    (AP1, stated lin_ap1_scene with AP1 chromaticities on every part, data passes 'data');
    readers convert back to Rec.709, and restyle writes its result in ACEScg too."""
    import OpenEXR

    from backend import restyle
    from backend.jobs.writers import read_rgba_exr

    plate = _plate(tmp_path / "plate", "lin_ap1_scene", chroma=True, interop_attr=True)
    decompose(tmp_path / "plate", tmp_path / "gb", estimator="embedded", working_space="acescg")
    path = contract.frame_path(tmp_path / "gb", 1001)
    with OpenEXR.File(str(path), separate_channels=True) as f:
        parts = {p.name(): p for p in f.parts}
        stored = np.stack([np.asarray(parts["GBuffer.Combined"].channels[f"GBuffer.Combined.{c}"].pixels)
                           for c in "RGB"], -1).astype(np.float32)
        for name, p in parts.items():
            assert p.header["colorInteropID"] == ("lin_ap1_scene" if name.split(".")[1] in contract.COLOUR_PASSES
                                                  else "data"), name
            np.testing.assert_allclose(p.header["chromaticities"], exr_colour.PRIMARIES["lin_ap1_scene"], atol=1e-6)
    np.testing.assert_allclose(stored, plate, rtol=2e-3, atol=1e-3)  # the plate's own values
    np.testing.assert_allclose(_combined_rgb(tmp_path / "gb", 1001), _reference(), rtol=3e-3, atol=1e-3)
    restyle(tmp_path / "gb", tmp_path / "fog", prompt="dense fog")
    out = sorted((tmp_path / "fog").rglob("restyle_1001.exr"))[0]
    assert next(iter(_parts(out).values()))["colorInteropID"] == "lin_ap1_scene"
    back = read_rgba_exr(out)  # Rec.709 again
    with OpenEXR.File(str(out), separate_channels=True) as f:
        raw = np.stack([np.asarray(f.channels()[c].pixels) for c in "RGB"], -1).astype(np.float32)
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES["lin_rec709_scene"], exr_colour.PRIMARIES["lin_ap1_scene"])
    np.testing.assert_allclose(raw, back @ m.T.astype(np.float32), rtol=3e-3, atol=2e-3)
