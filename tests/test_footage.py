"""Footage input: movies (codecs, bit depth, chroma, rotation, SAR, VFR), images, colour."""
from __future__ import annotations

import tracemalloc
from fractions import Fraction

import numpy as np
import pytest

from backend import colour
from backend.footage import FootageError, open_footage
from footage_util import gradient_rgb, write_exr, write_image, write_movie


# ------------------------------------------------------------------ colour

def test_srgb_eotf_known_values():
    v = np.array([0.0, 0.04045, 0.5, 1.0], np.float32)
    lin = colour.srgb_to_linear(v)
    np.testing.assert_allclose(lin, [0.0, 0.04045 / 12.92, 0.2140411, 1.0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(colour.linear_to_srgb(lin), v, atol=1e-5)


def test_ocio_named_space_matches_and_converts():
    rgb = np.random.default_rng(0).random((4, 5, 3)).astype(np.float32)
    via_ocio = colour.to_scene_linear(rgb, "sRGB Encoded Rec.709 (sRGB)")
    np.testing.assert_allclose(via_ocio, colour.srgb_to_linear(rgb), atol=2e-4)
    red = np.array([[[1.0, 0.0, 0.0]]], np.float32)
    out = colour.to_scene_linear(red, "ACEScg")[0, 0]
    # ACEScg (AP1) red is outside Rec.709: R > 1, G and B negative
    assert out[0] > 1.5 and out[1] < 0 and out[2] < 0
    assert colour.canonical_name("lin_rec709_srgb") == "Linear Rec.709 (sRGB)"
    with pytest.raises(colour.ColourError, match="unknown colour space 'NoSuchSpace'"):
        colour.to_scene_linear(red, "NoSuchSpace")


# ------------------------------------------------------------------ real footage

def test_probe_reads_metadata_only(footage):
    from backend.footage import probe_footage

    info = probe_footage(footage("phone_office"))
    assert (info.width, info.height, info.n_frames) == (320, 240, 36)
    assert info.fps == Fraction(45000, 1499) and info.to_dict()["fps"] == "45000/1499"


def test_boat_streams_all_frames_downscaled(footage):
    path = footage("boat")
    with open_footage(path, max_size=128) as r:
        info = r.info
        assert (info.kind, info.width, info.height) == ("movie", 832, 448)
        assert (info.out_width, info.out_height) == (128, 69)
        assert info.fps == Fraction(8) and info.n_frames == 16
        assert info.codec == "h264" and info.bit_depth == 8 and info.pix_fmt == "yuv420p"
        frames = [(f.index, f.pts_s, f.rgb.shape, f.rgb.dtype, float(f.rgb.mean())) for f in r]
    assert [f[0] for f in frames] == list(range(16))
    np.testing.assert_allclose([f[1] for f in frames], np.arange(16) / 8.0)
    assert all(f[2] == (69, 128, 3) and f[3] == np.float32 for f in frames)
    assert all(0.05 < f[4] < 0.6 for f in frames)  # linear, not sRGB-encoded nor 0..255


def _peak_bytes(path, n_frames):
    with open_footage(path) as r:
        tracemalloc.start()
        n = 0
        for f in r:
            n += 1
            del f
            if n == n_frames:
                break
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert n == n_frames
    return peak


def test_memory_does_not_grow_with_clip_length(footage):
    frame_bytes = 832 * 448 * 3 * 4
    short = _peak_bytes(footage("boat"), 2)
    full = _peak_bytes(footage("boat"), 16)
    assert full < 1.25 * short + frame_bytes, (short, full)  # 8x the frames, same peak
    assert full < 10 * frame_bytes  # a few conversion temporaries, not the clip


# ------------------------------------------------------------------ movie formats

@pytest.mark.parametrize(
    "ext,codec,pix_fmt,bits",
    [
        ("mp4", "libx264", "yuv420p", 8),
        ("mkv", "libx264", "yuv444p", 8),
        ("mov", "prores_ks", "yuv422p10le", 10),
        ("webm", "libvpx-vp9", "yuv420p", 8),
        ("avi", "mpeg4", "yuv420p", 8),
        ("mkv", "libx265", "yuv420p10le", 10),
    ],
)
def test_movie_containers_codecs_bitdepth(tmp_path, ext, codec, pix_fmt, bits):
    hi = bits > 8
    frames = [gradient_rgb(48, 64, t, np.uint16 if hi else np.uint8) for t in range(3)]
    opts = {"x265-params": "log-level=none"} if codec == "libx265" else None
    if codec == "libx264":
        opts = {"crf": "1"}
    p = write_movie(tmp_path / f"clip.{ext}", frames, codec=codec, pix_fmt=pix_fmt, options=opts)
    with open_footage(p) as r:
        assert r.info.bit_depth == bits and r.info.pix_fmt == pix_fmt
        assert (r.info.width, r.info.height) == (64, 48)
        out = list(r)
    assert len(out) == 3
    want = colour.srgb_to_linear(frames[1].astype(np.float32) / (65535.0 if hi else 255.0))
    err = np.abs(out[1].rgb - want)
    assert np.median(err) < 0.02, np.median(err)
    if hi:  # decoded through rgb48: values are not on the 8-bit grid
        enc = colour.linear_to_srgb(out[1].rgb) * 255.0
        assert np.mean(np.abs(enc - np.round(enc)) > 0.05) > 0.3


def test_rotation_metadata_gives_portrait(tmp_path):
    img = np.zeros((48, 64, 3), np.uint8)
    img[:10, :20] = 255  # white block top-left
    p = write_movie(tmp_path / "phone.mp4", [img, img], rotation=90)
    with open_footage(p) as r:
        assert r.info.rotation == 90
        assert (r.info.width, r.info.height) == (48, 64)  # portrait
        f = next(iter(r))
    assert f.rgb.shape == (64, 48, 3)
    # 90 degrees counter-clockwise: top-left goes to bottom-left
    assert f.rgb[-3, 3].mean() > 0.8 and f.rgb[3, 3].mean() < 0.1


def test_sar_reported_not_resampled(tmp_path):
    frames = [gradient_rgb(48, 64, t) for t in range(2)]
    p = write_movie(tmp_path / "anamorphic.mkv", frames, sar=Fraction(4, 3))
    with open_footage(p) as r:
        assert r.info.sar == Fraction(4, 3)
        assert next(iter(r)).rgb.shape == (48, 64, 3)


def test_variable_frame_rate_keeps_pts(tmp_path):
    frames = [gradient_rgb(48, 64, t) for t in range(4)]
    p = write_movie(tmp_path / "vfr.mkv", frames, pts_ms=[0, 40, 120, 130], rate=25)
    with open_footage(p) as r:
        got = [(f.index, f.pts_s) for f in r]
    assert [g[0] for g in got] == [0, 1, 2, 3]
    np.testing.assert_allclose([g[1] for g in got], [0.0, 0.04, 0.12, 0.13], atol=1e-6)


# ------------------------------------------------------------------ images

def test_png_8_and_16_bit_rgba_gray(tmp_path):
    rgba8 = np.zeros((5, 7, 4), np.uint8)
    rgba8[..., :3] = 128
    rgba8[..., 3] = np.arange(7, dtype=np.uint8)[None, :] * 40
    with open_footage(write_image(tmp_path / "a.png", rgba8)) as r:
        assert r.info.kind == "image" and r.info.has_alpha and r.info.bit_depth == 8
        f = next(iter(r))
    np.testing.assert_allclose(f.rgb, colour.srgb_to_linear(np.full((5, 7, 3), 128 / 255)), atol=1e-6)
    np.testing.assert_allclose(f.alpha[0], np.arange(7) * 40 / 255, atol=1e-6)

    rgb16 = np.full((3, 4, 3), 1000, np.uint16)
    with open_footage(write_image(tmp_path / "b16.png", rgb16)) as r:
        assert r.info.bit_depth == 16 and not r.info.has_alpha
        f = next(iter(r))
    np.testing.assert_allclose(f.rgb, colour.srgb_to_linear(np.full((3, 4, 3), 1000 / 65535)), rtol=1e-5)

    gray = (np.arange(12, dtype=np.uint8).reshape(3, 4) * 20)
    with open_footage(write_image(tmp_path / "g.png", gray)) as r:
        f = next(iter(r))
    assert f.rgb.shape == (3, 4, 3)
    np.testing.assert_array_equal(f.rgb[..., 0], f.rgb[..., 2])
    np.testing.assert_allclose(f.rgb[..., 1], colour.srgb_to_linear(gray / 255.0), atol=1e-6)


def test_tiff_16bit_and_jpeg(tmp_path):
    import tifffile

    rgb16 = (np.random.default_rng(1).random((6, 5, 3)) * 65535).astype(np.uint16)
    tifffile.imwrite(tmp_path / "t.tif", rgb16, photometric="rgb")
    with open_footage(tmp_path / "t.tif") as r:
        assert r.info.bit_depth == 16
        f = next(iter(r))
    np.testing.assert_allclose(f.rgb, colour.srgb_to_linear(rgb16 / 65535.0), atol=1e-6)

    jpg = write_image(tmp_path / "j.jpg", np.full((16, 16, 3), 200, np.uint8))
    with open_footage(jpg) as r:
        f = next(iter(r))
    np.testing.assert_allclose(f.rgb, colour.srgb_to_linear(np.full((16, 16, 3), 200 / 255)), atol=0.01)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_exr_half_float_is_linear_passthrough(tmp_path, dtype):
    rgb = (np.random.default_rng(2).random((4, 6, 3)) * 4).astype(dtype)  # HDR > 1 allowed
    alpha = np.linspace(0, 1, 24).reshape(4, 6).astype(dtype)
    with open_footage(write_exr(tmp_path / "lin.exr", rgb, alpha, dtype)) as r:
        assert r.info.colorspace == colour.LINEAR and r.info.has_alpha
        assert r.info.bit_depth == (16 if dtype == np.float16 else 32)
        f = next(iter(r))
    np.testing.assert_array_equal(f.alpha, alpha.astype(np.float32))
    # EXR colour is premultiplied; the reader returns straight colour
    a = alpha.astype(np.float32)[..., None]
    want = np.where(a > 1e-6, rgb.astype(np.float32) / np.maximum(a, 1e-6), 0.0)
    np.testing.assert_allclose(f.rgb, want, rtol=1e-6)
    with open_footage(write_exr(tmp_path / "opaque.exr", rgb, None, dtype)) as r:
        np.testing.assert_array_equal(next(iter(r)).rgb, rgb.astype(np.float32))  # no alpha: exact


def test_sequences_folder_and_patterns(tmp_path):
    seq = tmp_path / "shot é dir"
    seq.mkdir()
    for i in (9, 10, 11):  # numeric, not lexical, order
        write_image(seq / f"shot_{i}.png", np.full((4, 4, 3), i * 10, np.uint8))
    with open_footage(seq) as r:
        assert r.info.kind == "sequence" and r.info.n_frames == 3
        vals = [round(float(colour.linear_to_srgb(f.rgb)[0, 0, 0]) * 255) for f in r]
    assert vals == [90, 100, 110]
    for i in (1, 2):
        write_image(tmp_path / f"p_{i:04d}.png", np.full((4, 4, 3), i, np.uint8))
    for pattern in ("p_####.png", "p_%04d.png"):
        with open_footage(tmp_path / pattern) as r:
            assert [f.index for f in r] == [0, 1]
            assert r.info.files[0].endswith("p_0001.png")


def test_sequence_size_change_is_a_clear_error(tmp_path):
    write_image(tmp_path / "s_0001.png", np.zeros((4, 4, 3), np.uint8))
    write_image(tmp_path / "s_0002.png", np.zeros((5, 4, 3), np.uint8))
    with open_footage(tmp_path) as r, pytest.raises(FootageError, match=r"s_0002\.png \(frame 2\)"):
        list(r)


@pytest.mark.parametrize("codec,pix_fmt,opts,bits", [
    ("png", "rgba", None, 8),
    ("prores_ks", "yuva444p10le", {"profile": "4444"}, 12),  # ProRes 4444 decodes as 12-bit
])
def test_movie_with_alpha(tmp_path, codec, pix_fmt, opts, bits):
    import av

    img = np.zeros((8, 16, 4), np.uint8)
    img[..., 0] = 200
    img[..., 3] = np.arange(16, dtype=np.uint8)[None] * 16
    p = tmp_path / "alpha.mov"
    with av.open(str(p), "w") as c:
        s = c.add_stream(codec, rate=10, options=opts or {})
        s.width, s.height, s.pix_fmt = 16, 8, pix_fmt
        for _ in range(2):
            for pk in s.encode(av.VideoFrame.from_ndarray(img, format="rgba")):
                c.mux(pk)
        for pk in s.encode():
            c.mux(pk)
    with open_footage(p) as r:
        assert r.info.has_alpha and r.info.bit_depth == bits
        f = next(iter(r))
    np.testing.assert_allclose(f.alpha[3], np.arange(16) * 16 / 255, atol=2e-3)
    assert f.rgb[..., 0].mean() == pytest.approx(float(colour.srgb_to_linear(np.float32(200 / 255))), abs=0.01)


@pytest.mark.parametrize("orientation", [1, 2, 3, 5, 6, 8])
def test_jpeg_exif_orientation_matches_pillow(tmp_path, orientation):
    from PIL import Image, ImageOps

    img = np.zeros((16, 24, 3), np.uint8)
    img[:8, :8] = (255, 0, 0)  # red block top-left
    img[8:, 16:] = (0, 0, 255)  # blue block bottom-right
    im = Image.fromarray(img)
    exif = im.getexif()
    exif[0x0112] = orientation
    path = tmp_path / f"o{orientation}.jpg"
    im.save(path, exif=exif, quality=100)
    with Image.open(path) as src:
        ref = np.asarray(ImageOps.exif_transpose(src)).astype(np.float32) / 255.0
    with open_footage(path) as r:
        assert (r.info.width, r.info.height) == (ref.shape[1], ref.shape[0])
        f = next(iter(r))
    np.testing.assert_allclose(colour.linear_to_srgb(f.rgb), ref, atol=2 / 255)
