"""Property tests of the embedded renderer on synthetic G-buffers with known geometry.

Edits must change the re-render correctly (issue 5 §4): roughness -> specular peak,
albedo -> proportional colour, depth -> fog density, depth -> underwater red loss.
"""
import dataclasses

import numpy as np
import pytest

from backend.contract import GBufferFrame, make_meta
from backend.renderers import get_renderer
from backend.renderers.embedded import EmbeddedRenderer
from backend.renderers.looks import LOOK_NAMES, build_params
from backend.renderers.prompt import PromptError, parse_prompt
from backend.renderers.synthetic import sphere_scene

F32 = np.float32


def wall(depth: float, h: int = 24, w: int = 32, *, kind: str = "metric", albedo=(0.8, 0.8, 0.8),
         normal=(0.0, 0.0, 1.0), roughness: float = 0.8) -> GBufferFrame:
    """A fronto-parallel wall at constant planar depth, uniformly lit source."""
    alb = np.empty((h, w, 3), F32)
    alb[:] = albedo
    comb = np.concatenate([alb * F32(0.9), np.ones((h, w, 1), F32)], axis=-1)
    nrm = np.empty((h, w, 3), F32)
    nrm[:] = np.asarray(normal, F32) / np.linalg.norm(normal)
    near, far = (1.0, 100.0) if kind == "relative" else (0.5, 1000.0)
    return GBufferFrame(
        combined=comb, depth=np.full((h, w), depth, F32), normal=nrm, albedo=alb,
        metallic=np.zeros((h, w), F32), roughness=np.full((h, w), roughness, F32),
        confidence=np.ones((h, w), F32),
        meta=make_meta(estimator="test", depth_kind=kind, depth_near=near, depth_far=far))


def with_(frame: GBufferFrame, **arrays) -> GBufferFrame:
    return dataclasses.replace(frame, **arrays)


@pytest.fixture(scope="module")
def scene():
    f = sphere_scene(96, 128, roughness=0.5, sphere_center=(0.0, 1.2, -4.0))
    f.validate()
    return f


def test_registry_gives_embedded_renderer():
    r = get_renderer("embedded")
    assert isinstance(r, EmbeddedRenderer)
    assert r.settings()["name"] == "embedded"
    with pytest.raises(TypeError, match="unknown option"):
        EmbeddedRenderer(not_a_field=1)


def test_output_contract(scene):
    # no prompt, no edits: the footage itself (issue 39), bit for bit
    plate = EmbeddedRenderer().render(scene, "")
    assert plate.shape == (96, 128, 3) and plate.dtype == np.float32
    assert np.array_equal(plate, scene.combined[..., :3])
    out = EmbeddedRenderer().render(scene, "relight")
    assert out.shape == (96, 128, 3) and out.dtype == np.float32
    assert np.all(np.isfinite(out)) and out.min() >= 0.0
    # the relight look (the empty prompt before issue 39) keeps the source's exposure
    # roughly (same order of magnitude)
    surf = scene.confidence > 0
    ratio = out[surf].mean() / scene.combined[..., :3][surf].mean()
    assert 0.6 < ratio < 1.6, ratio


def test_roughness_to_zero_raises_specular_peak(scene):
    r = EmbeddedRenderer()
    surf = scene.confidence > 0
    peaks, rgb_peaks = [], []
    for rough in (0.8, 0.5, 0.25, 0.0):
        f = with_(scene, roughness=np.full(scene.shape, rough, F32))
        lay = r.render_layers(f, "relight")
        peaks.append(float(lay.specular.max()))
        rgb_peaks.append(float(lay.rgb[surf].max()))
    assert all(a < b for a, b in zip(peaks, peaks[1:])), peaks
    assert rgb_peaks[-1] > 2.0 * rgb_peaks[1], rgb_peaks  # 0.5 -> 0: a clearly brighter highlight
    # a local edit: only the edited pixels change
    rough = scene.roughness.copy()
    rough[:, :64] = 0.0
    a = r.render(scene, "relight")
    b = r.render(with_(scene, roughness=rough), "relight")
    assert np.array_equal(a[:, 70:], b[:, 70:])
    assert not np.array_equal(a[:, :64], b[:, :64])


def test_albedo_scales_diffuse_proportionally(scene):
    r = EmbeddedRenderer(source_light=0.0)
    surf = scene.confidence > 0
    a1 = np.clip(scene.albedo * F32(0.5), 0.05, 0.5)
    f1, f2, f0 = with_(scene, albedo=a1), with_(scene, albedo=a1 * F32(2.0)), with_(scene, albedo=a1 * F32(0.0))
    l1, l2 = r.render_layers(f1, "relight"), r.render_layers(f2, "relight")
    np.testing.assert_allclose(l2.diffuse[:, surf], 2.0 * l1.diffuse[:, surf], rtol=1e-5, atol=1e-6)
    # before fog: surface - specular is the diffuse part -> exactly 2x
    np.testing.assert_allclose((l2.surface - l2.specular)[:, surf],
                               2.0 * (l1.surface - l1.specular)[:, surf], rtol=1e-5, atol=1e-6)
    # through fog (affine in albedo): out(2A) - out(A) == out(A) - out(0)
    o0, o1, o2 = (r.render(f, "dense fog") for f in (f0, f1, f2))
    np.testing.assert_allclose((o2 - o1)[surf], (o1 - o0)[surf], rtol=1e-4, atol=1e-5)
    assert (o2 - o1)[surf].mean() > 0.01
    # hue edit: a red-only boost changes the red channel only (diffuse); the source
    # detail ratio is computed on luminance, so it moves a little (< 1 %; 0.54 % at most
    # since its base became edge-preserving, issue 17)
    a3 = a1.copy()
    a3[..., 0] *= 1.5
    l3 = r.render_layers(with_(scene, albedo=a3), "relight")
    np.testing.assert_allclose(l3.diffuse[0][surf], 1.5 * l1.diffuse[0][surf], rtol=1e-2)
    np.testing.assert_allclose(l3.diffuse[1:, surf], l1.diffuse[1:, surf], rtol=1e-2)


def test_albedo_edit_visible_with_default_source_light(scene):
    r = EmbeddedRenderer()  # keeps half of the source shading
    surf = scene.confidence > 0
    a1 = np.clip(scene.albedo * F32(0.5), 0.05, 0.5)
    o1 = r.render(with_(scene, albedo=a1), "relight")
    o2 = r.render(with_(scene, albedo=a1 * F32(2.0)), "relight")
    ratio = o2[surf].mean() / o1[surf].mean()
    assert 1.3 < ratio < 2.0, ratio


def test_metallic_tints_specular_with_albedo(scene):
    r = EmbeddedRenderer()
    alb = np.empty_like(scene.albedo)
    alb[:] = (0.9, 0.2, 0.1)
    f = with_(scene, albedo=alb, roughness=np.full(scene.shape, 0.2, F32))
    diel = r.render_layers(f, "relight")
    metal = r.render_layers(with_(f, metallic=np.ones(scene.shape, F32)), "relight")
    i = np.unravel_index(np.argmax(diel.specular.sum(0)), scene.shape)
    s_d, s_m = diel.specular[:, i[0], i[1]], metal.specular[:, i[0], i[1]]
    assert s_d[0] / s_d[2] < 1.3           # dielectric highlight ~ white
    assert s_m[0] / s_m[2] > 3.0           # metal highlight takes the base colour
    assert np.all(metal.diffuse[:, scene.confidence > 0] == 0)  # diffuse *= 1 - metallic


@pytest.mark.parametrize("kind,depths", [("metric", (2.0, 20.0, 60.0, 150.0)),
                                         ("relative", (5.0, 25.0, 60.0, 95.0))])
def test_depth_drives_fog_monotonically(kind, depths):
    r = EmbeddedRenderer()
    trans, dist_to_air = [], []
    far = wall(1e4 if kind == "metric" else 100.0, kind=kind)
    air = r.render(far, "dense fog").mean(axis=(0, 1))       # ~ airlight
    for d in depths:
        lay = r.render_layers(wall(d, kind=kind), "dense fog")
        trans.append(float(lay.transmittance.mean()))
        dist_to_air.append(float(np.abs(lay.rgb.mean(axis=(0, 1)) - air).sum()))
    assert all(a > b for a, b in zip(trans, trans[1:])), trans
    assert all(a > b for a, b in zip(dist_to_air, dist_to_air[1:])), dist_to_air
    assert trans[0] > 0.5 and trans[-1] < 0.2  # near readable, far fogged out
    # denser fog -> less transmittance at the same depth
    t_light = r.render_layers(wall(depths[1], kind=kind), "light fog").transmittance.mean()
    t_dense = r.render_layers(wall(depths[1], kind=kind), "dense fog").transmittance.mean()
    assert t_light > t_dense


def test_fog_transmittance_is_monotone_in_depth_per_pixel(scene):
    r = EmbeddedRenderer()
    l1 = r.render_layers(scene, "fog")
    l2 = r.render_layers(with_(scene, depth=scene.depth * F32(1.5)), "fog")
    assert np.all(l2.transmittance <= l1.transmittance + 1e-7)
    assert np.mean(l2.transmittance < l1.transmittance - 1e-4) > 0.9


@pytest.mark.parametrize("kind,depths", [("metric", (1.0, 4.0, 10.0, 20.0)),
                                         ("relative", (5.0, 25.0, 50.0, 90.0))])
def test_underwater_absorbs_red_faster_than_blue(kind, depths):
    r = EmbeddedRenderer()
    rb, t_r, t_b = [], [], []
    for d in depths:
        lay = r.render_layers(wall(d, kind=kind), "underwater")
        c = lay.rgb.mean(axis=(0, 1))
        rb.append(c[0] / c[2])
        t_r.append(float(lay.transmittance[0].mean()))
        t_b.append(float(lay.transmittance[2].mean()))
    assert all(a > b for a, b in zip(rb, rb[1:])), rb
    assert all(a > b for a, b in zip(t_r, t_r[1:])) and all(a > b for a, b in zip(t_b, t_b[1:]))
    for i in range(1, len(depths)):  # red's transmittance falls by a larger factor
        assert t_r[i] / t_r[i - 1] < t_b[i] / t_b[i - 1]
    assert rb[-1] < 0.2


def test_underwater_caustics_only_on_up_facing_and_animated(scene):
    r = EmbeddedRenderer()
    a = r.render_layers(scene, "underwater", time_s=0.0).surface  # lit, before the water
    b = r.render_layers(scene, "underwater", time_s=0.5).surface
    a, b = np.moveaxis(a, 0, -1), np.moveaxis(b, 0, -1)
    ny = scene.normal[..., 1]
    up = (ny > 0.95) & (scene.confidence > 0)
    down = (ny < -0.2) & (scene.confidence > 0)
    assert up.sum() > 50 and down.sum() > 10
    diff = np.abs(a - b).sum(-1)
    assert diff[up].mean() > 1e-3          # caustics move with time on the ground
    assert diff[down].max() < 1e-6         # surfaces facing down see none


def test_snow_whitens_up_facing_surfaces(scene):
    r = EmbeddedRenderer()
    base = r.render(scene, "relight")
    snow = r.render(scene, "snow")
    up = (scene.normal[..., 1] > 0.9) & (scene.confidence > 0)

    def sat(x):
        return (x.max(-1) - x.min(-1)) / np.maximum(x.max(-1), 1e-6)

    assert snow[up].mean() > base[up].mean() * 1.3
    assert sat(snow[up]).mean() < 0.15 < sat(base[up]).mean()  # near-white (skylight blue)


def test_snow_does_not_settle_on_glossy_surfaces():
    """Up-facing but glossy (roughness 0.05, e.g. water an artist marked in the
    compositor) stays dark; the same surface rough (0.8) turns white. The albedo is a
    neutral dark grey: a blue-dominant albedo is the renderer's water cue (issue 28) and
    would stay open even when rough."""
    r = EmbeddedRenderer()
    up = (0.0, 1.0, 0.0)
    water = wall(10.0, normal=up, albedo=(0.07, 0.07, 0.07), roughness=0.05)
    ground = wall(10.0, normal=up, albedo=(0.07, 0.07, 0.07), roughness=0.8)
    w_snow = r.render_layers(water, "snow").diffuse.mean()
    g_snow = r.render_layers(ground, "snow").diffuse.mean()
    w_base = r.render_layers(water, "relight").diffuse.mean()
    assert g_snow > 5 * w_snow
    assert w_snow < 2 * w_base


def test_dense_fog_keeps_the_mid_ground_readable_on_relative_depth():
    """Relative depth (1..100): 'dense fog' leaves a quarter of the way to the far
    plane partly visible and the far plane gone; 'light fog' is a haze."""
    r = EmbeddedRenderer()
    mid = r.render_layers(wall(25.0, kind="relative"), "dense fog").transmittance.mean()
    far = r.render_layers(wall(95.0, kind="relative"), "dense fog").transmittance.mean()
    light_mid = r.render_layers(wall(25.0, kind="relative"), "light fog").transmittance.mean()
    assert 0.2 < mid < 0.6, mid
    assert far < 0.15, far
    assert light_mid > 0.7, light_mid


def test_glossy_ground_reflects_the_object_above_it():
    """Roughness 0 on the ground: screen-space reflections show the red sphere in the
    ground just below it (redder than the same render with reflections off, and than
    a rough ground); the rest of the ground is not tinted red."""
    f = sphere_scene(96, 128, albedo=(0.9, 0.05, 0.05), ground=(0.3, 0.3, 0.3), roughness=0.0,
                     sphere_center=(0.0, 1.0, -5.0))
    ground = (f.normal[..., 1] > 0.95) & (f.confidence > 0)
    sphere = (f.normal[..., 1] <= 0.95) & (f.confidence > 0)
    rows, cols = np.nonzero(sphere)
    below = np.zeros_like(ground)
    below[rows.max() + 1: rows.max() + 12, cols.min() + 4: cols.max() - 4] = True
    below &= ground
    far_side = ground & ~below
    far_side[:, cols.min() - 8: cols.max() + 8] = False
    assert below.sum() > 30 and far_side.sum() > 30

    def spec_rb(renderer, frame, m):  # red / blue of the specular layer over m
        sp = renderer.render_layers(frame, "relight").specular[:, m].mean(1)
        return float(sp[0] / sp[2])

    on, off = EmbeddedRenderer(), EmbeddedRenderer(reflections=0.0)
    # the hemisphere alone is bluish (sky); the reflection of the red sphere is red
    assert spec_rb(off, f, below) < 0.95 < 1.05 < spec_rb(on, f, below)
    rough = with_(f, roughness=np.where(ground, F32(0.9), f.roughness))
    assert spec_rb(on, rough, below) == pytest.approx(spec_rb(off, rough, below), rel=1e-6)  # rough: no SSR
    assert abs(spec_rb(on, f, far_side) - spec_rb(off, f, far_side)) < 0.1  # ground elsewhere


def test_rough_metal_keeps_its_reflection_energy():
    """Split-sum environment BRDF for metals (Karis 2014): a rough metal (r = 0.5) reflects
    most of what a polished one does, only blurred -- not a dark blur (new-user trial)."""
    r = EmbeddedRenderer(reflections=0.0)
    metal = dict(albedo=(0.9, 0.6, 0.3))

    def env_spec(rough):
        f = wall(10.0, roughness=rough, **metal)
        f = with_(f, metallic=np.ones_like(f.metallic))
        return float(r.render_layers(f, "overcast").specular.mean())

    assert env_spec(0.5) > 0.6 * env_spec(0.05)
    # dielectrics keep the faded term (their source shading carries real reflections)
    d = lambda rough: float(r.render_layers(wall(10.0, roughness=rough), "overcast").specular.mean())
    assert d(0.5) < 0.5 * d(0.05)


def test_rain_lowers_roughness_and_darkens_albedo(scene):
    r = EmbeddedRenderer(source_light=0.0)
    base = r.render_layers(scene, build_params(parse_prompt("overcast"), base=build_params(())))
    rain = r.render_layers(scene, "heavy rain")
    surf = scene.confidence > 0
    assert rain.diffuse[:, surf].mean() < base.diffuse[:, surf].mean()
    up = (scene.normal[..., 1] > 0.9) & surf
    assert rain.specular[:, up].mean() > 2.0 * base.specular[:, up].mean()  # wet reflections


def test_looks_change_colour_in_the_expected_direction(scene):
    r = EmbeddedRenderer()
    day = r.render(scene, "relight").mean(axis=(0, 1))
    night = r.render(scene, "night").mean(axis=(0, 1))
    gold = r.render(scene, "golden hour").mean(axis=(0, 1))
    assert night.sum() < 0.3 * day.sum()
    assert night[2] > night[0]                       # moonlight is blue
    assert gold[0] / gold[2] > 1.5 * day[0] / day[2]  # warm


@pytest.mark.parametrize("look", LOOK_NAMES)
def test_every_look_runs_and_differs_from_neutral(scene, look):
    r = EmbeddedRenderer()
    prompt = look.replace("_", " ")
    assert parse_prompt(prompt)[0].name == look
    neutral = r.render(scene, "")  # the footage (no look); "relight" is a look too
    out = r.render(scene, prompt, frame_index=3, time_s=0.125)
    assert out.shape == neutral.shape and out.dtype == np.float32
    assert np.all(np.isfinite(out)) and out.min() >= 0
    assert np.abs(out - neutral).mean() > 0.01


@pytest.mark.parametrize("prompt", ["", "dense fog", "murky underwater at night", "heavy rain",
                                    "snow at golden hour", "overcast"])
def test_deterministic_bitwise(scene, prompt):
    a = EmbeddedRenderer().render(scene, prompt, frame_index=5, time_s=5 / 24)
    b = EmbeddedRenderer().render(scene, prompt, frame_index=5, time_s=5 / 24)
    assert a.tobytes() == b.tobytes()


def test_no_nan_on_hostile_inputs():
    h, w = 20, 24
    rng = np.random.default_rng(0)
    n = rng.normal(size=(h, w, 3)).astype(F32)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    n[0, 0] = (0, 0, -1)  # facing away from the camera
    f = GBufferFrame(
        combined=np.concatenate([rng.random((h, w, 3), F32) * 50, np.ones((h, w, 1), F32)], -1),
        depth=np.where(rng.random((h, w)) < 0.5, 1e-4, 1e6).astype(F32), normal=n,
        albedo=np.zeros((h, w, 3), F32), metallic=rng.integers(0, 2, (h, w)).astype(F32),
        roughness=np.zeros((h, w), F32), confidence=None, meta={})  # no meta at all
    r = EmbeddedRenderer()
    for prompt in ("", "very dense fog", "murky underwater at night", "heavy rain", "snow",
                   "golden hour", "overcast"):
        out = r.render(f, prompt)
        assert np.all(np.isfinite(out)) and out.min() >= 0, prompt


def test_bad_prompt_and_bad_shapes(scene):
    r = EmbeddedRenderer()
    with pytest.raises(PromptError, match="controlnet"):
        r.render(scene, "cyberpunk city")
    from backend.contract import ContractError
    with pytest.raises(ContractError, match="Albedo"):
        r.render(with_(scene, albedo=scene.albedo[:-1]), "relight")


def test_intrinsics_change_view_dependent_shading():
    f = sphere_scene(48, 64, roughness=0.2)
    r = EmbeddedRenderer()
    a = r.render(f, "relight")
    fx, fy, cx, cy = f.meta["intrinsics"]
    f2 = dataclasses.replace(f, meta=dict(f.meta, intrinsics=[fx * 3, fy * 3, cx, cy]))
    b = r.render(f2, "relight")
    assert not np.array_equal(a, b)


def test_reference_albedo_makes_edits_act_fully_with_source_light(scene):
    """With the unedited frame as reference, 2x albedo -> 2x diffuse even when half of the
    source shading is kept (default source_light). Roughness 1: the plate has no estimated
    specular, so the plate's diffuse part is all of it (issue 39: an albedo edit scales the
    plate minus its estimated specular)."""
    r = EmbeddedRenderer()
    surf = scene.confidence > 0
    a1 = np.clip(scene.albedo * F32(0.5), 0.05, 0.5)
    original = with_(scene, albedo=a1, roughness=np.ones(scene.shape, F32))
    edited = with_(original, albedo=a1 * F32(2.0))
    # no look: the footage with the edit acting as a ratio
    np.testing.assert_allclose(r.render(edited, "", reference=original)[surf],
                               2.0 * scene.combined[..., :3][surf], rtol=1e-5, atol=1e-6)
    l1 = r.render_layers(original, "relight", reference=original)
    l2 = r.render_layers(edited, "relight", reference=original)
    np.testing.assert_allclose(l2.diffuse[:, surf], 2.0 * l1.diffuse[:, surf], rtol=1e-5, atol=1e-6)
    # without the reference the kept source light hides half of the edit
    l2_noref = r.render_layers(edited, "relight")
    assert l2_noref.diffuse[:, surf].mean() < 0.85 * l2.diffuse[:, surf].mean()
    # the unedited frame renders the same with or without itself as reference
    assert np.array_equal(r.render(original, "fog"), r.render(original, "fog", reference=original))
    from backend.contract import ContractError
    with pytest.raises(ContractError, match="reference"):
        r.render(original, "relight", reference=with_(original, albedo=a1[:-1]))
