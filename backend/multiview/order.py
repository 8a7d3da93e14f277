"""Measured depth that contradicts a static scene: depth order against the prior (issue 33).

A plane sweep assumes a static scene. An object that moves while the camera follows it
(a boat crossing a bay, filmed from the shore) moves along the epipolar lines and is
matched at a consistent but wrong depth: on ``boat.mp4`` the hull came out at 12.9
units with Confidence 0.95, *behind* the shore it covers (9.8). The multi-view
consistency check (:mod:`backend.multiview.consistency`) cannot see this: every view
agrees with the wrong depth.

What still contradicts it is the depth **order** of the single-image prior, which sees
one frame and no motion: the hull is in front of the shore above it. For every measured
pixel ``p`` and measured pixels ``q`` on rings around it (:data:`RADII` of the frame
width, :data:`DIRECTIONS` directions), a pair *counts* when the measurement puts them at
clearly different depths (``|log z_p - log z_q| > MIN_LOG_GAP``) and the prior orders
them too (``|log prior_p - log prior_q| > PRIOR_LOG_GAP``); it *contradicts* when the two
orders differ. A contradicting pair is held against the one of the two that
disagrees more with the prior after its robust affine alignment to the measurement (the
moving object, not the static shore it was compared with). A pixel whose counted pairs
contradict in more than :data:`CONTRADICT_SHARE` (with at least :data:`MIN_PAIRS` pairs)
is flagged, and the
flags are closed and grown over the measured pixels at the same depth (the same surface),
so the object's inside, whose neighbours are all on the object, goes with its rim.

The prior's order alone is no evidence: the embedded prior orders whole static scenes
wrongly (on the tests' synthetic shot it flagged 9-15 % of correct measurements). A flagged
region is kept only where the views themselves contradict the measured order
(:func:`visibility_violations`): pixels that the measured depth says are hidden behind
something nearer in a neighbour view, yet that view shows them. A boat measured behind the
shore it covers is such a case; a static scene measured right has none.

The result lowers the multi-view confidence there, so the fusion
(:func:`backend.multiview.fusion.fuse_depth`) fills those pixels from the prior, aligned
to the static scene around them. Only the prior's order is used (never its values), on a
grid of :data:`WORK_WIDTH` pixels; numpy and OpenCV.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..geometry import _robust_scale_shift
from ..imaging import resize

#: grid width on which the order is compared
WORK_WIDTH = 256
#: ring radii, fractions of the grid width
RADII = (0.03, 0.06, 0.12)
#: directions per ring
DIRECTIONS = 16
#: measured depths closer than this in log (about 8 %) are the same depth: no order
MIN_LOG_GAP = 0.08
#: prior depths closer than this in log give no order
PRIOR_LOG_GAP = 0.03
#: share of counted pairs that must contradict to flag a pixel
CONTRADICT_SHARE = 0.7
#: fewest counted pairs for a verdict
MIN_PAIRS = 4
#: the flags are closed with a square of this many grid pixels (gaps in an object's outline)
CLOSE_PX = 9
#: a pixel is hidden in a neighbour when something measured this much nearer lands there
HIDE_GAP = 0.05
#: NCC from which a hidden pixel is seen anyway
VISIBLE_NCC = 0.6
#: a flagged region is kept only when this many of its grid pixels (and at least this share
#: of the grid) violate visibility: the prior's order alone is no evidence (the embedded
#: prior orders whole static scenes wrongly). Measured: the boat's hull region holds 214-282
#: such pixels of a 256 x 138 grid (0.6-0.8 %), regions of the static Open3D RGB-D frames at
#: most 22 of 256 x 192 (0.05 %)
MIN_EVIDENCE_PX = 16
MIN_EVIDENCE_FRACTION = 0.0015
#: holes of the flagged mask up to this share of the frame are flagged too
HOLE_FRACTION = 0.01
#: ... and only this far (fraction of the grid width) from it: a moving object's wrong depth
#: may equal that of far static hills, which must not be taken along
GROW_REACH = 0.03
#: a grown pixel's disagreement with the aligned prior must exceed this times the median
GROW_BLAME = 2.0
#: growth steps (each reaches GROW_REACH further)
GROW_STEPS = 3
#: a flagged region is grown over measured pixels within this log depth of its median
GROW_LOG_GAP = 0.1


def _shift(a: np.ndarray, dy: int, dx: int, fill) -> np.ndarray:
    out = np.full_like(a, fill)
    h, w = a.shape
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[yd, xd] = a[ys, xs]
    return out


def contradiction_share(log_z: np.ndarray, measured: np.ndarray, log_prior: np.ndarray,
                        blame: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(share, pairs)`` per grid pixel: contradicting / counted pairs (0 where none) and
    the number of counted pairs (see the module doc). A contradicting pair is held against
    the pixel of the two with the larger ``blame`` (its disagreement with the aligned
    prior), not against both."""
    h, w = log_z.shape
    bad = np.zeros((h, w), np.float32)
    cnt = np.zeros((h, w), np.float32)
    for rf in RADII:
        r = max(2.0, rf * w)
        for k in range(DIRECTIONS):
            a = 2 * np.pi * k / DIRECTIONS
            dy, dx = int(round(r * np.sin(a))), int(round(r * np.cos(a)))
            qz = _shift(log_z, dy, dx, np.nan)
            qm = _shift(measured, dy, dx, False)
            qp = _shift(log_prior, dy, dx, np.nan)
            qb = _shift(blame, dy, dx, np.inf)
            dz = log_z - qz
            dp = log_prior - qp
            with np.errstate(invalid="ignore"):
                counted = measured & qm & (np.abs(dz) > MIN_LOG_GAP) & (np.abs(dp) > PRIOR_LOG_GAP)
                cnt += counted
                bad += counted & (np.sign(dz) != np.sign(dp)) & (blame >= qb)
    share = np.where(cnt > 0, bad / np.maximum(cnt, 1), 0.0).astype(np.float32)
    return share, cnt


def _fill_small_holes(mask: np.ndarray, max_area: float) -> np.ndarray:
    """``mask`` with its holes (regions not touching the border) up to ``max_area`` pixels
    filled: measured specks inside an untrusted object are on that object."""
    import cv2

    n, lbl, stats, _ = cv2.connectedComponentsWithStats((~mask).astype(np.uint8), connectivity=4)
    h, w = mask.shape
    out = mask.copy()
    for k in range(1, n):
        x0, y0, bw, bh, area = stats[k]
        if area <= max_area and x0 > 0 and y0 > 0 and x0 + bw < w and y0 + bh < h:
            out[lbl == k] = True
    return out


def visibility_violations(ref_grey: np.ndarray, ref_cam, depth: np.ndarray, measured: np.ndarray,
                          nb_greys, nb_cams) -> np.ndarray:
    """Measured pixels that the measurement says are hidden in a neighbour view, but that
    view shows them (a free-space violation).

    Each neighbour gets a z-buffer of the measured pixels projected into it (splatted to the
    nearest pixel, then a 3x3 minimum so splat gaps do not hide anything). A pixel is
    *hidden* there when something measured at least :data:`HIDE_GAP` nearer lands on the
    same place; it is *seen anyway* when its window matches the neighbour at its own depth
    (NCC >= :data:`VISIBLE_NCC`). At a true occlusion the hidden pixels do not match; an
    object measured behind what it really covers (a boat behind the shore) keeps matching.

    Args:
        ref_grey: ``h x w`` float32 grey frame; ``ref_cam`` its pinhole camera (``w x h``).
        depth: ``h x w`` measured planar depth; ``measured``: ``h x w`` bool.
        nb_greys, nb_cams: the neighbour views (grey, camera of the same size).

    Returns:
        ``h x w`` bool: hidden in at least one neighbour and seen anyway in at least half
        of those.
    """
    import cv2

    from .consistency import ncc, warp_by_depth
    from .reproject import project_points, world_points

    pts = world_points(np.where(measured, depth, 1.0).astype(np.float32), ref_cam)
    hidden_n = np.zeros(depth.shape, np.int32)
    seen_n = np.zeros(depth.shape, np.int32)
    for g, c in zip(nb_greys, nb_cams):
        u, v, z = project_points(pts, c)
        hh, ww = g.shape[:2]
        ok = measured & (z > 0) & (u >= 0) & (u < ww) & (v >= 0) & (v < hh)
        iu = np.clip(np.floor(u), 0, ww - 1).astype(np.int64)
        iv = np.clip(np.floor(v), 0, hh - 1).astype(np.int64)
        zbuf = np.full((hh, ww), np.inf, np.float32)
        np.minimum.at(zbuf, (iv[ok], iu[ok]), z[ok])
        zbuf = cv2.erode(zbuf, np.ones((3, 3), np.uint8))
        with np.errstate(over="ignore", invalid="ignore"):  # inf where nothing landed
            hidden = ok & (z > zbuf[iv, iu] * np.float32(1.0 + HIDE_GAP))
        warped, _ = warp_by_depth(g, c, np.where(measured, depth, 1.0), ref_cam)
        visible = ncc(ref_grey.astype(np.float32), warped) >= VISIBLE_NCC
        hidden_n += hidden
        seen_n += hidden & visible
    return (hidden_n > 0) & (2 * seen_n >= hidden_n) & measured


def contradicted(depth: np.ndarray, confidence: np.ndarray, prior: np.ndarray, space: str,
                 threshold: float, evidence: Optional[np.ndarray] = None) -> np.ndarray:
    """Measured pixels whose depth order contradicts the prior's (a moving object).

    Args:
        depth: ``H x W`` float32 measured planar depth (> 0 where measured).
        confidence: ``H x W`` multi-view confidence in [0, 1]; measured = ``>= threshold``.
        prior: ``H x W`` the single-image prior: a relative depth (``space = "depth"``) or
            an affine-invariant disparity (``space = "inverse"``; 0 = sky). Its order
            decides; its robust affine alignment to the measurement only says which
            pixel of a contradicting pair is to blame.
        threshold: the confidence at which a pixel counts as measured.
        evidence: optional bool map (any size) of physical evidence against the static
            scene (:func:`visibility_violations`); given, a flagged region is kept only
            when it holds :data:`MIN_EVIDENCE_PX` grid pixels of it.

    Returns:
        ``H x W`` bool, True where the measurement should not be trusted.
    """
    import cv2

    H, W = depth.shape
    w = min(WORK_WIDTH, W)
    h = max(1, int(round(H * w / W)))
    z = resize(np.asarray(depth, np.float32), (w, h), "nearest")
    c = resize(np.asarray(confidence, np.float32), (w, h), "nearest")
    p = resize(np.asarray(prior, np.float32), (w, h), "linear")
    measured = (c >= threshold) & (z > 0) & np.isfinite(z)
    if measured.sum() < 16:
        return np.zeros((H, W), bool)
    log_z = np.log(np.where(measured, z, 1.0)).astype(np.float32)
    p = np.where(np.isfinite(p), p, 0.0).astype(np.float32)
    if space == "inverse":  # the prior is a disparity: its order is reversed
        log_p = -np.log(np.maximum(p, 1e-6)).astype(np.float32)
        a, b = _robust_scale_shift(p, 1.0 / np.where(measured, z, 1.0), measured)
        aligned = 1.0 / np.maximum(a * p + b, 1e-6)
    else:
        log_p = np.log(np.maximum(p, 1e-6)).astype(np.float32)
        a, b = _robust_scale_shift(p, np.where(measured, z, 1.0), measured)
        aligned = np.maximum(a * p + b, 1e-6)
    blame = np.abs(log_z - np.log(aligned)).astype(np.float32)
    blame = np.where(measured, blame, np.inf).astype(np.float32)
    share, pairs = contradiction_share(log_z, measured, log_p, blame)
    flag = measured & (pairs >= MIN_PAIRS) & (share > CONTRADICT_SHARE)
    if not flag.any():
        return np.zeros((H, W), bool)
    flag = cv2.morphologyEx(flag.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))  # no specks
    flag = cv2.morphologyEx(flag, cv2.MORPH_CLOSE, np.ones((CLOSE_PX, CLOSE_PX), np.uint8)) > 0
    flag &= measured
    if evidence is not None and flag.any():
        ev = resize(np.asarray(evidence, np.float32), (w, h), "linear") > 0.25
        n, lbl = cv2.connectedComponents(flag.astype(np.uint8), connectivity=8)
        counts = np.bincount(lbl[ev & flag], minlength=n)
        need = max(MIN_EVIDENCE_PX, MIN_EVIDENCE_FRACTION * flag.size)
        flag = np.isin(lbl, np.nonzero(counts >= need)[0]) & flag & (lbl > 0)
    if not flag.any():
        return np.zeros((H, W), bool)
    # a grown pixel must itself stand out from the prior: further from its alignment than
    # twice the typical measured pixel (the static scene fits it to that)
    growable = measured & (blame > GROW_BLAME * float(np.median(blame[measured])))
    # grow over the same surface: measured pixels next to flagged ones, at the depth the
    # flagged pixels around them have (local, so far hills at the same depth stay)
    k = 2 * max(1, int(GROW_REACH * w)) + 1
    out = flag.copy()
    for _ in range(GROW_STEPS):
        f32 = out.astype(np.float32)
        wsum = cv2.blur(f32, (k, k))
        local = cv2.blur(np.where(out, log_z, 0.0).astype(np.float32), (k, k)) / np.maximum(wsum, 1e-6)
        grow = growable & ~out & (wsum > 0) & (np.abs(log_z - local) < GROW_LOG_GAP)
        if not grow.any():
            break
        out |= grow
    out = _fill_small_holes(out, HOLE_FRACTION * out.size)
    out = cv2.dilate(out.astype(np.uint8), np.ones((3, 3), np.uint8))  # a grid pixel of margin
    return resize(out.astype(np.float32), (W, H), "linear") > 0.25
