"""Multi-view consistency (issue 24, item 3): an object that moved between the frames is
not confirmed by the other views and loses its confidence; the static scene keeps its.

The ray-cast scene of tests/multiview_util.py with a textured square in front of the
box that slides sideways between frames, along the dolly: its motion lies on the
epipolar lines, so the best-k plane sweep finds a false depth for it that several
neighbours accept (confident garbage without the check).
"""
from __future__ import annotations

import numpy as np
import pytest

import multiview_util as mu
from backend.multiview.consistency import ncc, photometric_agreement, warp_by_depth
from backend.multiview.planesweep import multiview_depth

NB = (0, 1, 3, 4)


@pytest.fixture(scope="module")
def moving_scene():
    base = list(mu._PLANES)
    cams = mu.dolly_cameras(n=5, dolly=0.12)
    imgs, depths, masks = [], [], []
    try:
        for i, c in enumerate(cams):
            _, static = mu.render(c)
            mu._PLANES[:] = base + [(np.array([0.2 + 0.04 * i, -0.3, 3.0]), np.array([0, 0, -1.0]),
                                     np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), (-0.6, 0.6, -0.6, 0.6), 7)]
            g, d = mu.render(c)
            mu._PLANES[:] = base
            imgs.append(g)
            depths.append(d)
            masks.append(d < static - 1e-3)
    finally:
        mu._PLANES[:] = base
    return cams, imgs, depths, masks


def test_warping_through_the_true_depth_reproduces_the_reference():
    cams = mu.dolly_cameras(n=3, dolly=0.12)
    (g0, d0), (g1, _) = mu.render(cams[0]), mu.render(cams[1])
    warped, seen = warp_by_depth(g1, cams[1], np.where(np.isfinite(d0), d0, 0), cams[0])
    score = ncc(g0, warped)
    assert seen.mean() > 0.8 and np.median(score[seen]) > 0.8


def test_a_moving_object_loses_its_confidence_the_static_scene_keeps_it(moving_scene):
    cams, imgs, depths, masks = moving_scene
    m = masks[2]
    rows = {}
    for cons in (False, True):
        r = multiview_depth(imgs[2], cams[2], [imgs[j] for j in NB], [cams[j] for j in NB], 2.0, 20.0,
                            consistency=cons)
        c = r.confidence > 0.5
        err = np.abs(r.depth - depths[2]) / depths[2]
        rows[cons] = (float(c[m].mean()), float(c[~m].mean()), float(err[c & ~m].mean()))
    print(f"\nmoving object pixels confident: {rows[False][0]:.1%} without the check, {rows[True][0]:.1%} with "
          f"it; static pixels confident {rows[False][1]:.1%} -> {rows[True][1]:.1%}; static AbsRel "
          f"{rows[False][2]:.4f} -> {rows[True][2]:.4f} ({m.mean():.1%} of the frame moves)")
    assert m.mean() > 0.1
    assert rows[False][0] > 0.15  # the sweep alone accepts the moving object
    assert rows[True][0] < 0.05
    assert rows[True][1] > rows[False][1] - 0.03 and rows[True][1] > 0.8
    assert rows[True][2] <= rows[False][2] + 1e-3


def test_agreement_counts_only_the_views_that_see_the_pixel(moving_scene):
    cams, imgs, depths, masks = moving_scene
    d = np.where(np.isfinite(depths[2]), depths[2], 0).astype(np.float32)
    agree, seen = photometric_agreement(imgs[2], cams[2], d, [imgs[j] for j in NB], [cams[j] for j in NB])
    static = ~masks[2] & (seen == len(NB))
    assert np.median(agree[static]) == 1.0
    assert np.median(agree[masks[2]]) <= 0.25  # the truth at the object: only its own frame agrees
