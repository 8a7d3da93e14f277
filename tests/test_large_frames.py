"""Issue 37: what keeps restyle's memory down at 4K changes no output. Large frames are
not read ahead and are written before the next one renders; previews convert in strips;
glibc maps large blocks on their own. The sizes are made small here by lowering the
threshold (the memory itself is measured in benchmarks/sizes.py, never in a test)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from backend.jobs import restyle as restyle_mod
from backend.jobs import restyle_frames
from backend.jobs.restyle import output_path, restyle
from backend.jobs.writers import read_rgba_exr
from gbuffer_util import sphere_frames, write_sequence


def _outputs(out, n):
    return [read_rgba_exr(output_path(out, k)) for k in range(1, n + 1)]


def test_large_frame_path_gives_the_same_frames(tmp_path, monkeypatch):
    gb = write_sequence(tmp_path / "gb", sphere_frames(40, 64, 4, fps=24))
    restyle(gb, tmp_path / "small", prompt="heavy rain at night", mp4=False)
    reads, overlaps = [], []
    real_get, real_deferred = restyle_frames._Reader.get, restyle_mod.Deferred

    def get(self, n):
        got = real_get(self, n)
        reads.append(sorted(self.pending))  # what is being read ahead after frame n
        return got

    def deferred(*a, **k):
        overlaps.append(k.get("overlap", True))
        return real_deferred(*a, **k)

    # every frame is "large" now: 40 x 64 > 100 pixels
    monkeypatch.setattr(restyle_frames, "PREFETCH_MAX_PIXELS", 100)
    monkeypatch.setattr(restyle_mod, "PREFETCH_MAX_PIXELS", 100)
    monkeypatch.setattr(restyle_frames._Reader, "get", get)
    monkeypatch.setattr(restyle_mod, "Deferred", deferred)
    restyle(gb, tmp_path / "large", prompt="heavy rain at night", mp4=False)
    assert reads == [[], [], [], []] and overlaps == [False] * 4  # no read-ahead, no write overlap
    for a, b in zip(_outputs(tmp_path / "small", 4), _outputs(tmp_path / "large", 4)):
        assert np.array_equal(a, b)
    pngs = [sorted(p.read_bytes() for p in (tmp_path / d / "preview").glob("*.png")) for d in ("small", "large")]
    assert pngs[0] == pngs[1] and len(pngs[0]) == 4


def test_preview_strips_equal_the_whole_frame_conversion():
    from backend.renderers import shading as sh

    f32 = np.float32
    rgb = np.random.default_rng(0).random((700, 900, 3), dtype=f32) * f32(9.0)  # > 1 strip, > the LUT's 8
    rgb[1, 1], rgb[2, 2], rgb[3, 3] = np.nan, -1.0, np.inf
    for exposure in (1.0, 0.5):
        x = rgb * f32(exposure * sh._PREVIEW_LUT_SCALE)
        np.fmax(x, f32(0.0), out=x)
        np.minimum(x, f32(sh._PREVIEW_LUT_MAX * sh._PREVIEW_LUT_SCALE), out=x)
        whole = sh._preview_lut()[(x + f32(0.5)).astype(np.int32)]
        assert np.array_equal(sh.preview_8bit(rgb, exposure), whole)
    assert sh.preview_8bit(np.zeros((0, 4, 3), f32)).shape == (0, 4, 3)
    assert sh.preview_8bit(rgb)[1, 1].tolist() == [0, 0, 0] and sh.preview_8bit(rgb)[3, 3].tolist() == [255] * 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_map_large_blocks_on_glibc():
    from backend.memory import map_large_blocks

    assert map_large_blocks() is True and map_large_blocks() is True  # once, then remembered
