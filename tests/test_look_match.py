"""Look matching (--match-look): restyle of boat.mp4 matched to dolphins.mp4 on real footage,
fixed transform per shot, resume, bad references."""
import io
import json

import numpy as np
import pytest

from backend import contract
from backend.geometry import intrinsics_from_fov, normals_from_depth
from backend.jobs.restyle import LOOK_MATCH_NAME, output_path, read_rgba_exr, restyle
from backend.look_match import ColourStats, LookMatch, LookMatchError, gaussian_w2, reference_stats
from cli_util import run_cli

F32 = np.float32


def boat_gbuffers(path, footage, n=3, size=128):
    from backend.footage import open_footage
    path.mkdir()
    with open_footage(footage("boat"), max_size=size) as fo:
        for sf in fo:
            if sf.index >= n:
                break
            rgb = sf.rgb
            h, w = rgb.shape[:2]
            intr = intrinsics_from_fov(w, h, 60.0)
            depth = np.broadcast_to(np.linspace(50.0, 2.0, h, dtype=F32)[:, None], (h, w)).astype(F32)
            f = contract.GBufferFrame(
                combined=np.concatenate([rgb, np.ones((h, w, 1), F32)], -1), depth=depth,
                normal=normals_from_depth(depth, intr).astype(F32), albedo=np.clip(rgb, 0, 1),
                metallic=np.zeros((h, w), F32), roughness=np.full((h, w), 0.5, F32),
                meta=contract.make_meta(estimator="test", intrinsics=intr, timestamp=sf.pts_s))
            contract.write_frame(contract.frame_path(path, sf.index + 1), f)
    return path


def test_mk_transform_matches_gaussian_statistics():
    rng = np.random.default_rng(0)
    a = np.exp2(rng.normal([-3, -2, -1], [0.5, 0.3, 0.2], (64, 64, 3))).astype(F32)
    b = np.exp2(rng.multivariate_normal([-1, -2, -4], [[.4, .1, 0], [.1, .3, .05], [0, .05, .2]],
                                        (64, 64))).astype(F32)
    sa, sb = ColourStats.of(a), ColourStats.of(b)
    out = LookMatch(sa, sb).apply(a)
    so = ColourStats.of(out)
    assert gaussian_w2(sa, sb) > 2.0 and gaussian_w2(so, sb) < 0.05
    assert out.dtype == F32 and out.shape == a.shape and np.all(out >= 0)


def test_restyle_boat_matched_to_dolphins(tmp_path, footage):
    gb = boat_gbuffers(tmp_path / "gb", footage)
    ref = reference_stats(footage("dolphins"))
    restyle(gb, tmp_path / "plain", "", progress=io.StringIO(), mp4=False)
    res = restyle(gb, tmp_path / "matched", "", match_look=footage("dolphins"), progress=io.StringIO(), mp4=False)
    before = [ColourStats.of(read_rgba_exr(output_path(tmp_path / "plain", n))[..., :3]) for n in (1, 2, 3)]
    after = [ColourStats.of(read_rgba_exr(output_path(tmp_path / "matched", n))[..., :3]) for n in (1, 2, 3)]
    for b, a in zip(before, after):
        # the distance to the reference drops to a fraction (half-float EXR, small later-frame drift)
        assert gaussian_w2(a, ref) < 0.25 * gaussian_w2(b, ref)
        assert np.abs(a.mean - ref.mean).max() < 0.2
    doc = json.loads((tmp_path / "matched" / LOOK_MATCH_NAME).read_text())
    assert doc["method"].startswith("monge-kantorovich")
    assert res.manifest["match_look"]["transform"] == LOOK_MATCH_NAME
    # resume: nothing re-rendered, same transform; another reference is another setting
    first = read_rgba_exr(output_path(tmp_path / "matched", 1))
    restyle(gb, tmp_path / "matched", "", match_look=footage("dolphins"), progress=io.StringIO(), mp4=False)
    assert np.array_equal(first, read_rgba_exr(output_path(tmp_path / "matched", 1)))
    with pytest.raises(Exception, match="overwrite|settings"):
        restyle(gb, tmp_path / "matched", "", match_look=footage("bikes"), progress=io.StringIO(), mp4=False)


def test_bad_reference_is_one_line(tmp_path, footage):
    gb = boat_gbuffers(tmp_path / "gb", footage, n=1, size=64)
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.mp4").write_bytes(b"not a movie")
    for ref in (tmp_path / "empty", tmp_path / "junk.mp4", tmp_path / "missing.mp4"):
        with pytest.raises(LookMatchError, match=str(ref.name)):
            reference_stats(ref)
        r = run_cli("restyle", str(gb), "--out", str(tmp_path / "o"), "--match-look", str(ref))
        assert r.returncode != 0
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(err) == 1 and "look reference" in err[0] and ref.name in err[0], r.stderr
        assert not (tmp_path / "o").exists()


def test_foreign_look_match_file_is_never_replaced(tmp_path, footage):
    gb = boat_gbuffers(tmp_path / "gb", footage, n=1, size=64)
    out = tmp_path / "o"
    out.mkdir()
    (out / LOOK_MATCH_NAME).write_text("my notes\n")
    with pytest.raises(Exception, match="did not write"):
        restyle(gb, out, "", match_look=footage("dolphins"), progress=io.StringIO(), mp4=False)
    assert (out / LOOK_MATCH_NAME).read_text() == "my notes\n"
    assert not output_path(out, 1).exists()
