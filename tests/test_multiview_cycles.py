"""Measured geometry against exact ground truth (issue 14, first "Done when" line).

Three camera moves (a sideways dolly, an orbit around the middle box, a forward walk
with handheld jitter) through a textured room, rendered by Cycles through our own scene
export (exact depth, normals and cameras; tests/cycles_scenes.py). Decompose with the
exact cameras must measure depth to AbsRel <= 0.03 and delta1 >= 0.97 on pixels with
Confidence > 0.5, which cover >= 70 % of the frame, and normals to <= 12 degrees mean
angular error there. The single-image estimator's depth and a constant facing normal are
reported on the same pixels as baselines.

The second test runs our own Track & Solve (Blender's tracker, addon/tracking.py) on the
dolly render and decomposes with the solved cameras: AbsRel <= 0.06 once the solve's
unknown scale is aligned to the truth.

Renders 7 + 7 + 12 frames at 320x180 (16 samples, denoised): about three minutes on 2
cores, so it runs once, in the bpy 5.0.1 lane.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.blender, pytest.mark.slow]

bpy = pytest.importorskip("bpy")
if bpy.app.version < (5, 0, 0):
    pytest.skip("renders once, in the bpy 5.0.1 lane (scene export itself is tested on 4.5)",
                allow_module_level=True)

from blender_workflow_util import put_checkout_on_path  # noqa: E402

put_checkout_on_path()

import cycles_scenes  # noqa: E402
from backend import contract, decompose  # noqa: E402


def _scores(out, shot):
    rows = []
    for i, n in enumerate(sorted(shot["cams"])):
        fr = contract.read_frame(contract.frame_path(out, n))
        gt, ng = shot["depths"][i], shot["normals"][i]
        m = fr.confidence > 0.5
        ratio = fr.depth / gt
        ang = np.degrees(np.arccos(np.clip((fr.normal * ng).sum(-1), -1, 1)))
        facing = np.degrees(np.arccos(np.clip(ng[..., 2], -1, 1)))
        rows.append({"absrel": float((np.abs(fr.depth - gt) / gt)[m].mean()),
                     "delta1": float((np.maximum(ratio, 1 / ratio) < 1.25)[m].mean()),
                     "coverage": float(m.mean()), "normal_deg": float(ang[m].mean()),
                     "facing_normal_deg": float(facing[m].mean()),
                     "absrel_all_pixels": float((np.abs(fr.depth - gt) / gt).mean())})
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


#: frames per move (the dolly is also tracked, which wants a few more frames)
N_FRAMES = {"dolly": 12, "orbit": 7, "handheld": 7}


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    root = tmp_path_factory.mktemp("mv_cycles")
    return root, {move: cycles_scenes.render_shot(root / move, move, n_frames=N_FRAMES[move])
                  for move in cycles_scenes.MOVES}


@pytest.fixture(scope="module")
def results(shots):
    root, rendered = shots
    out = {}
    for move, shot in rendered.items():
        decompose(shot["shot"], root / move / "gb", cameras=shot["cameras"], multiview={"processing_width": 320})
        single = root / move / "single"
        decompose(shot["shot"], single, frames="4-4")
        scores = _scores(root / move / "gb", shot)
        # the single-image baseline on the same pixels: rank correlation with the truth
        fr = contract.read_frame(contract.frame_path(single, 4))
        gt, m = shot["depths"][3], contract.read_frame(contract.frame_path(root / move / "gb", 4)).confidence > 0.5
        from scipy.stats import spearmanr  # noqa: PLC0415

        scores["single_image_spearman"] = float(spearmanr(fr.depth[m], gt[m])[0])
        man = json.loads((root / move / "gb" / "manifest.json").read_text())
        scores["temporal"] = man["temporal_consistency"]["median"]
        out[move] = scores
    print("\nmulti-view on exact cameras:", json.dumps(out, indent=1))
    return out


@pytest.mark.parametrize("move", list(cycles_scenes.MOVES))
def test_exact_cameras_meet_the_depth_and_normal_bars(results, move):
    r = results[move]
    assert r["absrel"] <= 0.03 and r["delta1"] >= 0.97, r
    assert r["coverage"] >= 0.70, r
    assert r["normal_deg"] <= 12.0, r
    assert r["normal_deg"] < r["facing_normal_deg"] / 2, r  # far better than a constant normal
    assert r["temporal"] < 0.02, r


def test_own_track_and_solve_then_decompose(shots, tmp_path):
    """Blender's tracker on the rendered dolly (the lens known, as an artist would set it),
    our cameras JSON from the solve, decompose with it; depth in solve units, compared
    after one scale factor for the whole shot."""
    from gbuffer_editor.addon import tracking

    root, rendered = shots
    shot = rendered["dolly"]
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, N_FRAMES["dolly"]
    clip = bpy.data.movieclips.load(str(shot["shot"] / "shot_0001.png"))
    clip.frame_start = 1
    cam1 = shot["cams"][1]
    clip.tracking.camera.sensor_width = 36.0
    clip.tracking.camera.focal_length_pixels = cam1.fx
    result = tracking.track_and_solve(scene, clip, refine_focal=False)
    info = tracking.write_cameras_json(clip, tmp_path / "solve.json")
    out = tmp_path / "gb"
    decompose(shot["shot"], out, cameras=info["path"], multiview={"processing_width": 320})
    ratios, rows = [], []
    frames = [contract.read_frame(contract.frame_path(out, n)) for n in sorted(shot["cams"])]
    for fr, gt in zip(frames, shot["depths"]):
        m = fr.confidence > 0.5
        ratios.append(gt[m] / fr.depth[m])
    scale = float(np.median(np.concatenate(ratios)))  # one factor for the shot
    for fr, gt in zip(frames, shot["depths"]):
        m = fr.confidence > 0.5
        rows.append((float((np.abs(scale * fr.depth - gt) / gt)[m].mean()), float(m.mean())))
    absrel, coverage = np.mean(rows, axis=0)
    print(f"\nTrack & Solve on the dolly: {result.message()}; decompose with it: AbsRel {absrel:.3f} after "
          f"scale {scale:.3f}, coverage {coverage:.0%}; depth kind {frames[0].meta['depth_kind']}")
    assert result.frames == N_FRAMES["dolly"] and result.error <= 1.0
    assert frames[0].meta["depth_kind"] == "up_to_scale"
    assert absrel <= 0.06 and coverage >= 0.5
