"""The main job end to end (README command 1, ``tools/demo.py``) on a short real clip.

Runs the demo through headless Blender (the add-on's own operators, the embedded
estimator and renderer) on 4 frames of ``boat.mp4`` at reduced size, then checks the
outputs: contract validity, Blender loading the passes, fog and underwater behaving with
depth, no NaN, outputs differing from the source, and cancel + resume giving frames
identical to an uninterrupted run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from backend import contract
from backend.jobs.restyle import read_rgba_exr
from cli_util import events, run_cli, start_cli

pytestmark = pytest.mark.blender

REPO = Path(__file__).resolve().parent.parent
N_FRAMES = 4


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, footage):
    out = tmp_path_factory.mktemp("demo")
    env = dict(os.environ)
    env["BLENDER_USER_RESOURCES"] = str(out / "_bur")
    env["XDG_CACHE_HOME"] = str(out / "_xdg")
    r = subprocess.run([sys.executable, str(REPO / "tools" / "demo.py"), "--clip", str(footage("boat")),
                        "--frames", f"1-{N_FRAMES}", "--max-size", "320", "--out", str(out / "run"),
                        "--sheet-frames", "2"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = out / "run"
    gb = sorted(run.glob("decompose_*"))
    fog, uw = sorted(run.glob("restyle_*"))[:2]
    return {"run": run, "gbuffer": gb[-1], "fog": fog / "result", "underwater": uw / "result", "stdout": r.stdout}


def _depth_quartile_masks(depth: np.ndarray, conf) -> list:
    valid = np.ones(depth.shape, bool) if conf is None else conf > 0
    qs = np.quantile(depth[valid], [0, 0.25, 0.5, 0.75, 1.0])
    return [valid & (depth >= qs[i]) & (depth <= qs[i + 1]) for i in range(4)]


def test_every_output_file_is_valid_and_finite(demo_run):
    frames = contract.list_frames(demo_run["gbuffer"])
    assert list(frames) == list(range(1, N_FRAMES + 1))
    for p in frames.values():
        fr = contract.read_frame(p, validate=True)  # raises on any contract violation or NaN
        assert fr.meta["estimator"] == "embedded"
        assert fr.shape == (448, 832)  # written at full source size
    for key in ("fog", "underwater"):
        exrs = sorted(demo_run[key].glob("restyle_*.exr"))
        assert len(exrs) == N_FRAMES
        for p in exrs:
            img = read_rgba_exr(p)
            assert img.shape[:2] == (448, 832)
            assert np.isfinite(img).all() and img.min() >= 0
        assert (demo_run[key] / "preview.mp4").stat().st_size > 1000
        assert len(list((demo_run[key] / "preview").glob("*.png"))) == N_FRAMES
    sheet = demo_run["run"] / "contact_sheet.png"
    from PIL import Image

    im = Image.open(sheet)
    assert im.width > 1000 and im.height > 100
    timings = json.loads((demo_run["run"] / "demo_timings.json").read_text())
    assert timings["decompose"]["frames"] == N_FRAMES and timings["decompose"]["fps"] > 0
    assert "contact sheet" in demo_run["stdout"]


def test_blender_loads_the_passes(demo_run):
    import bpy

    p = contract.frame_path(demo_run["gbuffer"], 1)
    img = bpy.data.images.load(str(p), check_existing=False)
    try:
        tree = bpy.data.node_groups.new("t_main_job", "CompositorNodeTree")
        node = tree.nodes.new("CompositorNodeImage")
        node.image = img
        socks = {o.name: o.type for o in node.outputs if o.enabled}
        assert {"Combined": "RGBA", "Depth": "VALUE", "Normal": "VECTOR", "Albedo": "RGBA",
                "Metallic": "VALUE", "Roughness": "VALUE"}.items() <= socks.items()
        bpy.data.node_groups.remove(tree)
    finally:
        bpy.data.images.remove(img)


def test_fog_grows_with_depth_and_underwater_absorbs_red(demo_run):
    fr = contract.read_frame(contract.frame_path(demo_run["gbuffer"], 2))
    src = fr.combined[..., :3]
    fog = read_rgba_exr(demo_run["fog"] / "restyle_0002.exr")[..., :3]
    uw = read_rgba_exr(demo_run["underwater"] / "restyle_0002.exr")[..., :3]
    quart = _depth_quartile_masks(fr.depth, fr.confidence)
    # Fog: Koschmieder L = L0 T + A (1 - T). The haze colour A is what the farthest
    # pixels tend to; the remaining contrast to it (|L - A|) must shrink with depth.
    far = quart[3]
    airlight = np.median(fog[far], axis=0)
    contrast = [float(np.abs(fog[m] - airlight).mean()) for m in quart]
    assert contrast[0] > contrast[1] > contrast[3], contrast
    # Underwater: red/blue falls with depth (red is absorbed faster).
    rb = [float(uw[m][:, 0].mean() / max(uw[m][:, 2].mean(), 1e-6)) for m in quart]
    assert rb[0] > rb[3], rb
    assert rb[3] < 0.8 * float(src[far][:, 0].mean() / max(src[far][:, 2].mean(), 1e-6))
    # Outputs differ from the source, visibly.
    for out in (fog, uw):
        assert float(np.abs(out - src).mean()) > 0.02


def _decompose_args(clip, out, extra=()):
    return ["decompose", clip, "--out", out, "--frames", f"1-{N_FRAMES}", "--max-size", "160", *extra]


@pytest.mark.parametrize("extra", [(), ("--stabilize",)], ids=["plain", "stabilized"])
def test_cancel_and_resume_equals_uninterrupted(tmp_path, footage, extra):
    clip = footage("boat")
    full = tmp_path / "full"
    run_cli(*_decompose_args(clip, full, extra), check=True)
    part = tmp_path / "part"
    proc = start_cli(*_decompose_args(clip, part, extra))
    for line in proc.stdout:  # cancel right after the first written frame
        if '"progress"' in line:
            proc.send_signal(signal.SIGTERM)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    written = contract.list_frames(part)
    assert 1 <= len(written) < N_FRAMES
    assert not [p for p in part.iterdir() if p.name.startswith(".tmp")]  # only complete frames
    r = run_cli(*_decompose_args(clip, part, extra))
    assert r.returncode == 0, r.stderr
    skipped = [e for e in events(r.stdout, strict=False) if e.get("event") == "progress" and e.get("skipped")]
    assert len(skipped) == len(written)
    for n in range(1, N_FRAMES + 1):
        a, _ = contract.read_channels(contract.frame_path(full, n))
        b, _ = contract.read_channels(contract.frame_path(part, n))
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), (n, k)
