"""Training losses of GBufNet (torch). Every loss takes an explicit validity mask.

* depth: MiDaS scale-and-shift-invariant loss on disparity (Ranftl et al. 2020,
  "Towards Robust Monocular Depth Estimation", eq. 5-7 with least-squares
  alignment) plus their multi-scale gradient-matching term (eq. 11);
* normals: mean angular error (radians) between unit vectors;
* albedo / metallic / roughness: L1 plus an L1 gradient-difference term;
* sky: binary cross-entropy on the sky logit (Confidence == 0 in the data).

Masks are ``N x 1 x H x W`` float tensors (1 = valid surface pixel).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def align_scale_shift(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor):
    """Per-image least-squares ``s, t`` minimising ``sum(mask * (s*pred + t - target)^2)``.

    Args: ``N x 1 x H x W`` tensors. Returns ``(s, t)`` of shape ``N x 1 x 1 x 1``.
    """
    dims = (1, 2, 3)
    a00 = (mask * pred * pred).sum(dims)
    a01 = (mask * pred).sum(dims)
    a11 = mask.sum(dims)
    b0 = (mask * pred * target).sum(dims)
    b1 = (mask * target).sum(dims)
    det = a00 * a11 - a01 * a01
    ok = det.abs() > 1e-8
    det_safe = torch.where(ok, det, torch.ones_like(det))
    s = torch.where(ok, (a11 * b0 - a01 * b1) / det_safe, torch.ones_like(det))
    t = torch.where(ok, (-a01 * b0 + a00 * b1) / det_safe, torch.zeros_like(det))
    return s.view(-1, 1, 1, 1), t.view(-1, 1, 1, 1)


def normalise_disparity(disp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Median-shift / mean-absolute-deviation normalisation per image (MiDaS eq. 6)."""
    n = disp.shape[0]
    out = []
    for i in range(n):
        m = mask[i] > 0.5
        if m.sum() < 8:
            out.append(torch.zeros_like(disp[i]))
            continue
        v = disp[i][m]
        med = v.median()
        s = (v - med).abs().mean().clamp_min(1e-6)
        out.append((disp[i] - med) / s)
    return torch.stack(out)


def gradient_matching(diff: torch.Tensor, mask: torch.Tensor, scales: int = 4) -> torch.Tensor:
    """Multi-scale gradient-matching term on a residual map (MiDaS eq. 11)."""
    total = diff.new_zeros(())
    for k in range(scales):
        if k:
            diff = F.avg_pool2d(diff * mask, 2) / F.avg_pool2d(mask, 2).clamp_min(1e-6)
            mask = (F.avg_pool2d(mask, 2) > 0.99).float()
        if diff.shape[-1] < 2 or diff.shape[-2] < 2:
            break
        gx = (diff[..., :, 1:] - diff[..., :, :-1]).abs() * mask[..., :, 1:] * mask[..., :, :-1]
        gy = (diff[..., 1:, :] - diff[..., :-1, :]).abs() * mask[..., 1:, :] * mask[..., :-1, :]
        total = total + (gx.sum() + gy.sum()) / mask.sum().clamp_min(1.0)
    return total


def ssi_disparity_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                       grad_weight: float = 0.5) -> torch.Tensor:
    """Scale-and-shift-invariant disparity loss + gradient matching.

    Both ``pred`` and ``target`` disparity maps are normalised per image by median and
    mean absolute deviation over ``mask``; the loss is the masked mean absolute
    difference plus ``grad_weight`` times :func:`gradient_matching` of the difference.
    """
    p = normalise_disparity(pred, mask)
    t = normalise_disparity(target, mask)
    diff = (p - t) * mask
    l1 = diff.abs().sum() / mask.sum().clamp_min(1.0)
    return l1 + grad_weight * gradient_matching(p - t, mask)


def scale_invariant_log_disparity(pred: torch.Tensor, target: torch.Tensor,
                                  mask: torch.Tensor) -> torch.Tensor:
    """Scale-only invariant log loss (Eigen et al. 2014, lambda=1): keeps the shift meaningful,
    so ``1 / disparity`` is a usable relative depth."""
    lp = torch.log(pred.clamp_min(1e-4))
    lt = torch.log(target.clamp_min(1e-4))
    d = (lp - lt) * mask
    n = mask.sum((1, 2, 3)).clamp_min(1.0)
    mean = d.sum((1, 2, 3)) / n
    var = (d * d).sum((1, 2, 3)) / n - mean * mean
    return var.clamp_min(0).mean()


def angular_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean angle (radians) between unit normals ``N x 3 x H x W`` over ``mask``."""
    cos = (pred * target).sum(1, keepdim=True).clamp(-0.999999, 0.999999)
    ang = torch.acos(cos)
    return (ang * mask).sum() / mask.sum().clamp_min(1.0)


def l1_grad_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                 grad_weight: float = 0.5) -> torch.Tensor:
    """Masked L1 plus L1 of the difference of horizontal/vertical gradients."""
    m = mask.expand_as(pred)
    diff = pred - target
    l1 = (diff.abs() * m).sum() / m.sum().clamp_min(1.0)
    gx = (diff[..., :, 1:] - diff[..., :, :-1]).abs() * m[..., :, 1:] * m[..., :, :-1]
    gy = (diff[..., 1:, :] - diff[..., :-1, :]).abs() * m[..., 1:, :] * m[..., :-1, :]
    g = (gx.sum() + gy.sum()) / m.sum().clamp_min(1.0)
    return l1 + grad_weight * g


def total_loss(out: dict, batch: dict, weights: dict | None = None) -> tuple:
    """Weighted sum of all task losses.

    Args:
        out: network outputs (see :class:`backend.model.net.GBufNet`).
        batch: ``disparity`` (N x 1 x H x W, 0 for sky), ``normal``, ``albedo``,
            ``metallic``, ``roughness``, ``mask`` (1 = surface).
    Returns:
        ``(loss, parts)``: scalar tensor and a dict of float parts.
    """
    w = {"ssi": 1.0, "silog": 0.25, "normal": 1.0, "albedo": 1.0, "mat": 0.5, "sky": 0.2}
    if weights:
        w.update(weights)
    mask = batch["mask"]
    parts = {
        "ssi": ssi_disparity_loss(out["disparity"], batch["disparity"], mask),
        "silog": scale_invariant_log_disparity(out["disparity"], batch["disparity"], mask),
        "normal": angular_loss(out["normal"], batch["normal"], mask),
        "albedo": l1_grad_loss(out["albedo"], batch["albedo"], mask),
        "mat": l1_grad_loss(out["metallic"], batch["metallic"], mask)
        + l1_grad_loss(out["roughness"], batch["roughness"], mask),
        "sky": F.binary_cross_entropy_with_logits(out["_sky_logit"], 1.0 - mask),
    }
    loss = sum(w[k] * v for k, v in parts.items())
    return loss, {k: float(v.detach()) for k, v in parts.items()}
