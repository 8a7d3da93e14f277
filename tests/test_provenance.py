"""Per-pass provenance (issue 17): which passes were measured, estimated, derived or are
defaults, in every frame header and in the manifest, so a default metallic is never
mistaken for a measured one."""
import numpy as np
import pytest

from backend import contract
from backend.decomposer import Decomposer, pass_provenance
from backend.estimators.base import PROVENANCE_KINDS, PROVENANCE_PASSES, EstimatorOutput
from backend.estimators.embedded import material_provenance
from backend.jobs.decompose import provenance_summary
from decompose_util import TinyEstimator, register_tiny


def test_embedded_network_on_real_footage_gives_default_materials(footage):
    """What the shipped network really outputs on real footage: metallic ~0 and a
    near-constant roughness (0.56 +- 0.02 measured): both recorded as defaults."""
    from backend.footage import read_frames

    rgb = next(iter(read_frames(footage("dolphins")))).rgb
    f = Decomposer("embedded").frame(rgb)
    prov, models = f.meta["provenance"], f.meta["pass_models"]
    assert set(prov) == set(PROVENANCE_PASSES) and set(models) == set(PROVENANCE_PASSES)
    assert float(f.metallic.max()) < 0.02 and float(f.roughness.std()) < 0.05
    assert prov["metallic"] == "default" and prov["roughness"] == "default"
    assert "constant" in models["metallic"] and "near-constant" in models["roughness"]
    assert prov["depth"] == prov["normal"] == prov["albedo"] == "estimated"
    assert models["depth"] == "gbuffer_editor/embedded"
    # the albedo is the single-frame intrinsic decomposition on the full frame (issue 25)
    assert models["albedo"].startswith("colour-retinex") and "source detail" not in models["albedo"]


def test_material_provenance_rule():
    flat_m, flat_r = np.zeros((8, 8), np.float32), np.full((8, 8), 0.5, np.float32)
    assert material_provenance(flat_m, flat_r)[0]["metallic"] == "default"
    varied_m = flat_m.copy()
    varied_m[:4] = 0.9
    varied_r = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    prov, models = material_provenance(varied_m, varied_r)
    assert prov["metallic"] == prov["roughness"] == "estimated"
    assert models["roughness"] == "gbuffer_editor/embedded"


def test_filled_passes_are_derived_or_default():
    """An estimator without normals (and a wrapper without materials) -> normals derived
    from depth, metallic/roughness constant defaults, naming the constant."""
    class NoMaterials(TinyEstimator):
        def predict(self, rgb):
            out = super().predict(rgb)
            return EstimatorOutput(depth=out.depth, depth_kind=out.depth_kind, albedo=out.albedo,
                                   confidence=out.confidence, models=out.models)

    rgb = np.random.default_rng(0).uniform(0, 0.8, (24, 32, 3)).astype(np.float32)
    f = Decomposer(NoMaterials()).frame(rgb)
    prov, models = f.meta["provenance"], f.meta["pass_models"]
    assert prov == {"depth": "estimated", "normal": "derived", "albedo": "estimated",
                    "metallic": "default", "roughness": "default", "confidence": "estimated"}
    assert models["metallic"] == "constant 0.0" and models["roughness"] == "constant 0.5"
    assert "normals from depth" in models["normal"]
    assert set(prov.values()) <= set(PROVENANCE_KINDS)


def test_declared_provenance_is_kept():
    out = EstimatorOutput(depth=np.ones((2, 2), np.float32), provenance={"depth": "measured"},
                          pass_models={"depth": "lidar"})
    prov, models = pass_provenance(out, "x", ["normal", "albedo", "metallic", "roughness"])
    assert prov["depth"] == "measured" and models["depth"] == "lidar"
    assert prov["albedo"] == "derived" and prov["confidence"] == "default"


def test_decompose_job_writes_provenance_in_every_header_and_the_manifest(tmp_path):
    from backend import decompose

    register_tiny()
    src = tmp_path / "src"
    src.mkdir()
    import cv2

    rng = np.random.default_rng(1)
    for i in range(3):
        cv2.imwrite(str(src / f"shot_{i + 1:04d}.png"), (rng.uniform(0, 200, (20, 28, 3))).astype(np.uint8))
    res = decompose(src, tmp_path / "gb", estimator="tiny")
    frames = contract.list_frames(res.out_dir)
    assert len(frames) == 3
    for path in frames.values():
        meta = contract.read_meta(path)
        assert meta["provenance"]["normal"] == "derived"      # tiny gives no normals
        assert meta["provenance"]["metallic"] == "estimated"  # tiny's random metallic varies
        assert meta["pass_models"]["depth"] == "tiny"
    man = contract.read_manifest(res.out_dir)
    assert man["provenance"]["normal"] == "derived"
    assert man["provenance"]["depth"] == "estimated"
    assert all(e["provenance"]["normal"] == "derived" for e in man["frames"])


def test_provenance_summary_counts_mixed_frames():
    frames = [{"provenance": {"metallic": "default"}, "pass_models": {"metallic": "a"}},
              {"provenance": {"metallic": "default"}, "pass_models": {"metallic": "a"}},
              {"provenance": {"metallic": "estimated"}, "pass_models": {"metallic": "b"}}]
    s = provenance_summary(frames)
    assert s["provenance"]["metallic"] == {"default": 2, "estimated": 1}
    assert s["pass_models"]["metallic"] == "a"
    assert provenance_summary([{}]) == {}
    s1 = provenance_summary(frames[:2])
    assert s1["provenance"]["metallic"] == "default"


@pytest.mark.parametrize("kind", PROVENANCE_KINDS)
def test_kinds_are_the_documented_ones(kind):
    assert kind in {"measured", "estimated", "derived", "default"}
