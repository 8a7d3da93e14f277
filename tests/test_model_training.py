"""Losses, augmentations and the training loop of the embedded model (needs torch)."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training import losses  # noqa: E402
from training.augment import augment, flip_h  # noqa: E402
from training.data import frame_to_sample, toy_frame  # noqa: E402


def _sample():
    return frame_to_sample(toy_frame(48, 64, seed=1))


def test_ssi_loss_invariant_to_scale_and_shift():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(2, 1, 24, 32, generator=g) + 0.1
    p = torch.rand(2, 1, 24, 32, generator=g) + 0.1
    m = torch.ones_like(t)
    a = losses.ssi_disparity_loss(p, t, m)
    b = losses.ssi_disparity_loss(3.0 * p + 0.7, t, m)
    assert abs(float(a) - float(b)) < 1e-4
    assert float(losses.ssi_disparity_loss(2.0 * t + 1.0, t, m)) < 1e-5
    assert float(a) > 0.1


def test_angular_loss_values():
    n = torch.zeros(1, 3, 4, 4)
    n[:, 2] = 1
    m = torch.ones(1, 1, 4, 4)
    assert float(losses.angular_loss(n, n, m)) < 2e-3
    x = torch.zeros(1, 3, 4, 4)
    x[:, 0] = 1
    assert abs(float(losses.angular_loss(x, n, m)) - np.pi / 2) < 1e-3


def test_flip_negates_normal_x_only():
    s = _sample()
    f = flip_h(s)
    np.testing.assert_allclose(f["normal"][:, ::-1, 0], -s["normal"][..., 0])
    np.testing.assert_allclose(f["normal"][:, ::-1, 1:], s["normal"][..., 1:])
    np.testing.assert_allclose(f["disparity"][:, ::-1], s["disparity"])


def test_augment_shapes_and_unit_normals():
    x, t = augment(_sample(), (40, 56), np.random.default_rng(3))
    assert x.shape == (3, 40, 56) and x.dtype == np.float32 and np.isfinite(x).all()
    assert t["normal"].shape == (3, 40, 56) and t["mask"].shape == (1, 40, 56)
    norms = np.linalg.norm(t["normal"], axis=0)
    assert np.abs(norms - 1).max() < 1e-3
    assert 0 <= t["albedo"].min() and t["albedo"].max() <= 1


def test_train_resume_and_checkpoint(tmp_path):
    from training.train import main

    out = tmp_path / "run"
    args = ["--toy", "--out", str(out), "--batch", "2", "--size", "32", "48", "--threads", "1",
            "--val-every", "2", "--ckpt-every", "2"]
    assert main(args + ["--max-steps", "2"]) == 0
    ck = torch.load(out / "last.pt", weights_only=False)
    assert ck["state"]["step"] == 2
    assert main(args + ["--max-steps", "4", "--resume"]) == 0
    ck = torch.load(out / "last.pt", weights_only=False)
    assert ck["state"]["step"] == 4
    done = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if '"done"' in line]
    assert [d["step"] for d in done] == [2, 4]
    assert (out / "best.pt").exists()


def test_fda_swap_takes_target_low_frequencies_and_keeps_source_detail():
    """Fourier domain adaptation (Yang & Soatto 2020): the mean colour (DC) and the
    low-frequency shading come from the real photograph; edges and texture (high
    frequencies) stay those of the render."""
    import cv2

    from training.augment import fda_swap

    rng = np.random.default_rng(0)
    h, w = 64, 80
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    src = np.clip(0.5 + 0.15 * np.sign(np.sin(xx / 2.0))[..., None] * np.ones(3, np.float32), 0, 1)
    target = np.stack([0.2 + 0.5 * xx / w, 0.3 + 0 * xx, 0.6 - 0.3 * yy / h], -1).astype(np.float32)
    out = fda_swap(src.astype(np.float32), target, beta=0.05)
    assert out.shape == src.shape and out.dtype == np.float32
    assert 0.0 <= out.min() and out.max() <= 1.0
    # DC is swapped: per-channel means follow the photograph, not the render's 0.5 grey
    np.testing.assert_allclose(out.mean((0, 1)), target.mean((0, 1)), atol=0.02)
    # the stripes (high frequency) survive: high-pass of output == high-pass of source
    hp = lambda a: a - cv2.GaussianBlur(a, (0, 0), 4)
    inner = (slice(8, -8), slice(8, -8))
    corr = np.corrcoef(hp(out)[inner].ravel(), hp(src)[inner].ravel())[0, 1]
    assert corr > 0.9
    # a beta covering no more than the DC still moves the mean, and bad input is refused
    tiny = fda_swap(src.astype(np.float32), target, beta=0.001)
    np.testing.assert_allclose(tiny.mean((0, 1)), target.mean((0, 1)), atol=0.05)
    with pytest.raises(ValueError):
        fda_swap(src[..., 0], target, 0.05)
    with pytest.raises(ValueError):
        fda_swap(src.astype(np.float32), target, 0.6)
    # augment uses it only with a pool, and the targets never change
    s = _sample()
    x0, t0 = augment(s, (40, 56), np.random.default_rng(5))
    x1, t1 = augment(s, (40, 56), np.random.default_rng(5), style_pool=[target], style_p=1.0)
    assert not np.allclose(x0, x1)
    for k in t0:
        np.testing.assert_array_equal(t0[k], t1[k])


def test_style_pool_has_no_test_images(tmp_path):
    from training.data import STYLE_PHOTOS, style_pool

    assert "stereo_motorcycle" not in STYLE_PHOTOS
    pool = style_pool(tmp_path / "no_footage", size=(30, 40))
    assert len(pool) == len(STYLE_PHOTOS)
    assert all(p.shape == (30, 40, 3) and p.dtype == np.float32 and 0 <= p.min() and p.max() <= 1 for p in pool)


def test_train_ignores_stale_best_and_inits_from_safetensors(tmp_path):
    """A best.pt left in --out by another run never becomes selected.pt; --init accepts
    exported .safetensors weights (the shipped model's format)."""
    from training.export_onnx import main as export_main
    from training.train import main, spread

    assert spread(10, 4) == [0, 3, 6, 9] and spread(3, 64) == [0, 1, 2]
    base = ["--toy", "--batch", "2", "--size", "32", "48", "--threads", "1"]
    a = tmp_path / "a"
    assert main(base + ["--out", str(a), "--max-steps", "2", "--val-every", "1"]) == 0
    # stale: a "best.pt" whose weights are all zero, in a run that never validates mid-way
    b = tmp_path / "b"
    b.mkdir()
    ck = torch.load(a / "last.pt", weights_only=False)
    ck["model"] = {k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in ck["model"].items()}
    torch.save(ck, b / "best.pt")
    assert main(base + ["--out", str(b), "--max-steps", "2", "--val-every", "100"]) == 0
    done = [json.loads(x) for x in (b / "log.jsonl").read_text().splitlines() if '"done"' in x][-1]
    assert done["selected"] == "last"
    sel = torch.load(b / "selected.pt", weights_only=False)["model"]
    assert any(float(v.abs().sum()) > 0 for k, v in sel.items() if v.is_floating_point())
    # exported weights as --init: the first step starts from exactly those weights
    exp = tmp_path / "export"
    assert export_main([str(a / "selected.pt"), "--out", str(exp)]) == 0
    c = tmp_path / "c"
    assert main(base + ["--out", str(c), "--minutes", "0", "--init", str(exp / "embedded.safetensors")]) == 0
    got = torch.load(c / "last.pt", weights_only=False)["model"]
    want = torch.load(a / "selected.pt", weights_only=False)["model"]
    for k in want:
        torch.testing.assert_close(got[k], want[k])


def test_roomgen_frames_are_exact_reproducible_contract_frames():
    """Analytic rooms: valid contract frames, same seed -> same frame, the depth
    buffer agrees with the normal buffer (planar surfaces), Kinect mode included."""
    from backend.geometry import normals_from_depth
    from training.roomgen import render_room

    for kinect in (False, True):
        a = render_room(48, 64, seed=3, kinect=kinect)
        b = render_room(48, 64, seed=3, kinect=kinect)
        c = render_room(48, 64, seed=4, kinect=kinect)
        a.validate()
        assert a.shape == (48, 64) and a.meta["depth_kind"] == "metric"
        np.testing.assert_array_equal(a.depth, b.depth)
        np.testing.assert_array_equal(a.combined, b.combined)
        assert not np.array_equal(a.depth, c.depth)
        assert 0.0 <= a.albedo.min() and a.albedo.max() <= 1.0
        assert 0.0 <= a.roughness.min() and a.roughness.max() <= 1.0
        # normals recomputed from the metric depth agree with the normal pass away from edges
        fx, fy, cx, cy = a.meta["intrinsics"]
        n_d = normals_from_depth(a.depth, (fx, fy, cx, cy))
        cos = (n_d * a.normal).sum(-1)[2:-2, 2:-2]
        assert np.median(cos) > 0.97
