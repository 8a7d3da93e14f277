"""Losses, augmentations and the training loop of the embedded model (needs torch)."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from backend.model import losses  # noqa: E402
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
