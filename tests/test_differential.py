"""Issue 39: edits act only where they were made (differential re-rendering).

Synthetic frames with known lighting check the maths; frames of the four shared clips,
decomposed by the default (embedded) estimator, check the issue's bars: no prompt and no
edits give the footage (>= 45 dB), and a box edit (roughness 0.05 in a centred box,
albedo x0.5 in a corner box, with the reference) leaves everything outside the boxes
grown by 16 px at >= 40 dB and the albedo box at 0.4-0.65 of the footage's luminance.
The same measurement on every frame: ``benchmarks/differential_eval.py``.
"""
import dataclasses
import json

import numpy as np
import pytest

from backend import contract
from backend.contract import GBufferFrame
from backend.renderers.differential import (PlateLighting, differential_plate, edited_mask,
                                            estimate_plate_lighting, sh_basis)
from backend.renderers.embedded import EmbeddedRenderer
from backend.renderers.synthetic import sphere_scene

F32 = np.float32
Y709 = np.array([0.2126, 0.7152, 0.0722], F32)
CLIPS = ("bikes", "boat", "dolphins", "phone_office")


def with_(frame, **arrays):
    return dataclasses.replace(frame, **arrays)


def _lit(frame: GBufferFrame, coeffs: np.ndarray) -> GBufferFrame:
    """``frame`` with Combined = albedo x S(n) under SH shading ``coeffs`` (9 x 3)."""
    s = np.maximum(np.tensordot(sh_basis(np.moveaxis(frame.normal, -1, 0)), coeffs, axes=(0, 0)), 0.0)
    comb = np.concatenate([frame.albedo * s.astype(F32), np.ones(frame.shape + (1,), F32)], -1)
    return with_(frame, combined=comb.astype(F32))


#: a sky-lit shading: brighter from above (+Y) and a little from the right (+X)
SKY = np.zeros((9, 3))
SKY[0] = (2.0, 2.1, 2.3)
SKY[1] = (0.5, 0.55, 0.6)
SKY[3] = (0.2, 0.2, 0.2)


def test_plate_lighting_fit_recovers_a_known_lighting():
    f = _lit(sphere_scene(96, 128, sky=False, sphere_radius=1.6, sphere_center=(0.0, 1.2, -5.0)), SKY)
    lt = estimate_plate_lighting([f], [1])
    n = np.moveaxis(f.normal, -1, 0)
    err = np.abs(lt.shading(n) - np.moveaxis(f.combined[..., :3] / np.maximum(f.albedo, 0.02), -1, 0))
    # within 5 % of the shading level (the smoothness prior shrinks bands 1-2 a little)
    assert float(err.mean()) < 0.05 * float(SKY[0].mean() * 0.282), err.mean()
    # up is brighter than down in the radiance too; the JSON round-trips
    up, down = lt.radiance(np.array([[0.0], [1.0], [0.0]], F32)), lt.radiance(np.array([[0.0], [-1.0], [0.0]], F32))
    assert float(up.mean()) > float(down.mean())
    again = PlateLighting.from_json(json.loads(json.dumps(lt.to_json())))
    np.testing.assert_allclose(again.shading_sh, lt.shading_sh, atol=1e-6)
    # the equirect for Blender: world +Z (row 0, the zenith) is camera +Y, the bright side
    env = lt.equirect(64)
    assert env.shape == (32, 64, 3) and env.dtype == np.float32 and env.min() >= 0
    assert env[:4].mean() > env[-4:].mean()
    with pytest.raises(ValueError, match="9 x 3"):
        PlateLighting.from_json({"shading_sh": [[1, 2]]})


def test_no_edit_is_the_footage_bit_for_bit():
    f = _lit(sphere_scene(48, 64), SKY)
    r = EmbeddedRenderer()
    assert np.array_equal(r.render(f, ""), f.combined[..., :3])
    assert np.array_equal(r.render(f, "", reference=f), f.combined[..., :3])
    assert not edited_mask(f, f).any()


def test_edits_are_local_and_act_through_their_difference():
    f = _lit(sphere_scene(48, 64, roughness=1.0, sky=False), SKY)
    r = EmbeddedRenderer()
    r.plate_lighting = PlateLighting(SKY)
    src = f.combined[..., :3]
    # albedo x0.5 in a box: exactly half there (roughness 1: no estimated specular), the rest untouched
    alb = f.albedo.copy()
    alb[10:20, 5:25] *= 0.5
    out = r.render(with_(f, albedo=alb), "", reference=f)
    np.testing.assert_allclose(out[10:20, 5:25], 0.5 * src[10:20, 5:25], rtol=1e-5, atol=1e-6)
    box = np.zeros(f.shape, bool)
    box[10:20, 5:25] = True
    assert np.array_equal(out[~box], src[~box])
    # a normal edit adds the irradiance difference: turned to face up (the bright side) it brightens
    nrm = f.normal.copy()
    nrm[30:40, 40:60] = (0.0, 1.0, 0.0)
    out = r.render(with_(f, normal=nrm), "", reference=f)
    d = (f.albedo * (1 - f.metallic[..., None]))[30:40, 40:60]
    s_up = PlateLighting(SKY).shading(np.array([[0.0], [1.0], [0.0]], F32))[:, 0]
    s_o = np.moveaxis(PlateLighting(SKY).shading(np.moveaxis(f.normal[30:40, 40:60], -1, 0)), 0, -1)
    np.testing.assert_allclose(out[30:40, 40:60], src[30:40, 40:60] + d * (s_up - s_o), rtol=1e-4, atol=1e-5)
    keep = np.ones(f.shape, bool)
    keep[30:40, 40:60] = False
    assert np.array_equal(out[keep], src[keep])


def test_glossy_and_metal_edits_show_a_reflection_not_a_dark_smear():
    f = _lit(sphere_scene(48, 64, roughness=0.9, sky=False, albedo=(0.9, 0.9, 0.9)), SKY)
    r = EmbeddedRenderer()
    r.plate_lighting = PlateLighting(SKY)
    src = f.combined[..., :3]
    rough = f.roughness.copy()
    rough[36:46, :] = 0.05  # the ground in front: a glossy floor
    glossy = r.render(with_(f, roughness=rough), "", reference=f)
    assert glossy[36:46].mean() > src[36:46].mean() * 1.02  # it gains a reflection
    metal = f.metallic.copy()
    metal[36:46, :] = 1.0
    chrome = r.render(with_(f, roughness=rough, metallic=metal), "", reference=f)
    # a white metal mirror shows what it reflects (the plate, the sky-lit environment):
    # not black, and neutral (no brown cast from the diffuse that metal loses)
    m = chrome[36:46].reshape(-1, 3).mean(0)
    assert m.mean() > 0.3 * src[36:46].mean(), (m, src[36:46].mean())


def test_without_a_reference_nothing_is_known_to_be_edited():
    f = _lit(sphere_scene(48, 64), SKY)
    e = with_(f, albedo=f.albedo * F32(0.5))
    out, mask = differential_plate(e, None, PlateLighting(SKY), np.zeros((3, 48, 64), F32), None)
    assert np.array_equal(out, np.moveaxis(f.combined[..., :3], -1, 0)) and not mask.any()


# ---------------------------------------------------------------- the shared clips


def _frames(path, numbers):
    from backend import Decomposer
    from backend.footage import read_frames

    dec = Decomposer("embedded")
    out = {}
    for i, fr in enumerate(read_frames(path), 1):
        if i > max(numbers):
            break
        if i in numbers:
            out[i] = contract.as_stored(dec.frame(fr.rgb, number=i))
    return out


@pytest.fixture(scope="module")
def clips(footage):
    return {name: _frames(footage(name), (1, 12)) for name in CLIPS}


def _psnr(a, b, mask=None):
    d = (np.clip(a[..., :3], 0, 1) - np.clip(b[..., :3], 0, 1)) ** 2
    mse = float((d[mask] if mask is not None else d).mean())
    return float("inf") if mse == 0 else 10 * np.log10(1 / mse)


def _stored(rgb):
    return contract.half_to_float32(contract.to_half(np.clip(rgb, 0, 65000)))


def test_no_prompt_no_edits_is_the_footage_on_the_shared_clips(clips):
    r = EmbeddedRenderer()
    for name, frames in clips.items():
        for n, f in frames.items():
            assert _psnr(_stored(r.render(f, "", frame_index=n - 1)), f.combined) >= 45, (name, n)


def test_box_edit_is_local_on_the_shared_clips(clips):
    for name, frames in clips.items():
        r = EmbeddedRenderer()
        r.plate_lighting = estimate_plate_lighting(list(frames.values()), list(frames))
        for n, f in frames.items():
            h, w = f.shape
            bh, bw = h // 4, w // 4
            centre = (slice(h // 2 - bh // 2, h // 2 - bh // 2 + bh), slice(w // 2 - bw // 2, w // 2 - bw // 2 + bw))
            corner = (slice(h - h // 16 - bh, h - h // 16), slice(w // 16, w // 16 + bw))
            rough, alb = f.roughness.copy(), f.albedo.copy()
            rough[centre] = 0.05
            alb[corner] *= 0.5
            out = _stored(r.render(with_(f, roughness=rough, albedo=alb), "", frame_index=n - 1, reference=f))
            outside = np.ones((h, w), bool)
            for ys, xs in (centre, corner):
                outside[max(0, ys.start - 16):ys.stop + 16, max(0, xs.start - 16):xs.stop + 16] = False
            assert _psnr(out, f.combined, outside) >= 40, (name, n)
            ratio = float((out[corner] @ Y709).mean() / (f.combined[..., :3][corner] @ Y709).mean())
            assert 0.4 <= ratio <= 0.65, (name, n, ratio)
            assert not np.array_equal(out[centre], f.combined[..., :3][centre]), (name, n)  # the gloss shows
