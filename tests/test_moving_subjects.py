"""Moving subjects (issue 33): measured depth whose order contradicts the prior's is not trusted."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backend.multiview.order import contradicted

DATA = Path(__file__).parent / "data"


def _scene(object_depth: float):
    """A ground plane receding upwards (depth 5 at the bottom row .. 20 at the top) with a
    box in the lower middle; the prior (a disparity) has the box in front of the ground
    behind it. ``object_depth``: where the measurement puts the box."""
    h, w = 120, 200
    rows = np.linspace(20.0, 5.0, h, dtype=np.float32)[:, None]
    depth = np.repeat(rows, w, axis=1)
    box = np.zeros((h, w), bool)
    box[60:90, 70:130] = True
    prior_depth = depth.copy()
    prior_depth[box] = 8.0  # in front of the ground behind its top edge (about 12.5)
    measured = depth.copy()
    measured[box] = object_depth
    conf = np.full((h, w), 0.9, np.float32)
    return measured, conf, (1.0 / prior_depth).astype(np.float32), box


def test_an_object_measured_behind_what_it_covers_is_flagged():
    measured, conf, disp, box = _scene(object_depth=16.0)  # behind the ground it stands on
    bad = contradicted(measured, conf, disp, "inverse", 0.5)
    assert bad[box].mean() > 0.95
    far = np.ones_like(box)
    far[40:110, 50:150] = False  # the static ground away from the box stays trusted
    assert bad[far].mean() < 0.01


def test_a_static_scene_is_left_alone():
    measured, conf, disp, box = _scene(object_depth=8.0)  # measured where the prior has it
    assert not contradicted(measured, conf, disp, "inverse", 0.5).any()


def test_unmeasured_pixels_never_count():
    measured, conf, disp, box = _scene(object_depth=16.0)
    conf[:] = 0.2  # nothing measured: nothing to contradict
    assert not contradicted(measured, conf, disp, "inverse", 0.5).any()


def test_boat_hull_is_never_confident_behind_the_shore(footage, tmp_path):
    """boat.mp4 solved with --focal 3390 (docs/cameras.md): the hull was measured at 12.9
    with Confidence 0.95 behind the shore at 9.8. Hand-drawn hull (3 px inside its outline)
    and shore masks on frames 1, 9 and 16."""
    import cv2

    from backend import contract, decompose
    from backend.multiview.autosolve import solve_footage, write_solve

    clip = footage("boat")
    report = solve_footage(clip, focal_px=3390.0)
    assert report.ok, report.reason
    cams = write_solve(report, tmp_path / "cams.json")
    decompose(clip, tmp_path / "gb", cameras=str(cams))
    spec = json.loads((DATA / "boat_hull_mask.json").read_text())
    for k, v in spec["frames"].items():
        fr = contract.read_frame(tmp_path / "gb" / f"gbuffer_{int(k) + 1:04d}.exr")

        def ras(polys, erode):
            m = np.zeros(fr.depth.shape, np.uint8)
            for p in polys:
                cv2.fillPoly(m, [np.array(p, np.int32)], 1)
            return cv2.erode(m, np.ones((2 * erode + 1,) * 2, np.uint8)) > 0 if erode else m > 0

        hull, shore = ras(v["hull"], 3), ras(v["shore"], 0)
        shore_z = float(np.median(fr.depth[shore]))
        assert np.median(fr.confidence[shore]) >= 0.5  # the static shore stays measured
        wrong = (fr.confidence[hull] >= 0.5) & (fr.depth[hull] >= shore_z)
        assert wrong.sum() == 0, (k, int(wrong.sum()))


def test_the_prior_order_alone_is_no_evidence():
    """Given the views' evidence, a region the prior contradicts is dropped unless the views
    show a visibility violation in it (the embedded prior orders static scenes wrongly)."""
    measured, conf, disp, box = _scene(object_depth=16.0)
    none = np.zeros_like(box)
    assert not contradicted(measured, conf, disp, "inverse", 0.5, evidence=none).any()
    rim = np.zeros_like(box)
    rim[60:64, 70:130] = True  # the box's top edge is seen where the measurement hides it
    bad = contradicted(measured, conf, disp, "inverse", 0.5, evidence=rim)
    assert bad[box].mean() > 0.95


def test_visibility_violation_of_an_object_measured_behind_its_background():
    """Two views of a textured wall at depth 10 with a textured card in front at 6 (true);
    measured with the card at 14 (behind the wall), the card's pixels that the wall should
    hide in the second view are still seen there: violations. Measured right: none."""
    import cv2

    from backend.multiview.cameras import Camera
    from backend.multiview.order import visibility_violations

    rng = np.random.default_rng(0)
    w, h, f = 160, 120, 150.0
    wall = cv2.GaussianBlur(rng.random((h, 3 * w)).astype(np.float32), (0, 0), 1.5)
    card = cv2.GaussianBlur(rng.random((h, w)).astype(np.float32), (0, 0), 1.5)
    ref = Camera(w, h, f, f, w / 2, h / 2)
    nb = Camera(w, h, f, f, w / 2, h / 2, t=np.array([-0.6, 0.0, 0.0]))  # camera moved +x

    def render(cam_x):  # fronto-parallel layers: a shift of f * baseline / z pixels
        img = np.empty((h, w), np.float32)
        sw = int(round(f * cam_x / 10.0))
        img[:] = wall[:, w + sw:2 * w + sw]
        sc = int(round(f * cam_x / 6.0))
        x0, x1 = 60 - sc, 100 - sc
        img[30:90, max(0, x0):min(w, x1)] = card[30:90, max(0, x0) + sc:min(w, x1) + sc]
        return img

    g0, g1 = render(0.0), render(0.6)
    truth = np.full((h, w), 10.0, np.float32)
    truth[30:90, 60:100] = 6.0
    wrong = truth.copy()
    wrong[30:90, 60:100] = 14.0
    m = np.ones((h, w), bool)
    assert visibility_violations(g0, ref, wrong, m, [g1], [nb])[30:90, 60:100].sum() >= 20
    assert visibility_violations(g0, ref, truth, m, [g1], [nb])[30:90, 60:100].sum() <= 2
