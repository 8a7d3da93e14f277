"""Pretrained depth on ONNX Runtime (issue 15), on tiny random-weight replicas.

The replicas are the real ``transformers`` Depth Anything architecture with a tiny config,
exported by torch under the published export's names and layout and put into a Hugging
Face cache folder the way ``huggingface_hub`` lays out a download
(tests/onnx_depth_util.py). Everything after that is the product's path: the real
``hf_hub_download(local_files_only=True)``, onnxruntime, the decompose job and its CLI.
The published weights were never run here (no network).
"""
from __future__ import annotations

import json
import os
import shutil
import socket

import numpy as np
import pytest

from backend import contract
from backend.estimators import available_estimators
from backend.estimators.onnx_depth import (
    MODELS, DepthAnythingEstimator, DepthModelError, network_size, select_providers,
)
from backend.jobs.decompose import decompose

import onnx_depth_util as odu
from cli_util import cli_env, events, run_cli
from footage_util import write_movie

pytest.importorskip("torch")
pytest.importorskip("transformers")

NAME = "depth-anything-v2-small"
SPEC = MODELS[NAME]
FILE = SPEC.files["fp32"]
H, W = 56, 84  # the test clip: multiples of 14, so the network runs at the frame size


def _rank(a):
    r = np.empty(a.size)
    r[np.argsort(a.ravel(), kind="stable")] = np.arange(a.size)
    return r


def spearman(a, b) -> float:
    return float(np.corrcoef(_rank(a), _rank(b))[0, 1])


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """``(cache folder, clip, onnx file)``: the replica installed in a cache; a 3-frame clip."""
    root = tmp_path_factory.mktemp("onnx_depth")
    onnx_file = odu.export_replica(root / "export" / "model.onnx", H, W)
    cache = root / "cache"
    odu.install_in_cache(cache, SPEC.repo_id, FILE, onnx_file)
    frames = []
    yy, xx = np.mgrid[0:H, 0:W]
    for t in range(3):
        img = np.stack([(xx * 3 + t * 5) % 256, (yy * 4) % 256, ((xx + yy) * 2) % 256], -1)
        frames.append(img.astype(np.uint8))
    clip = write_movie(root / "clip.mp4", frames, rate=12)
    return cache, clip, onnx_file


def test_registered_and_listed():
    assert NAME in available_estimators()
    assert SPEC.licence == "Apache-2.0" and SPEC.commercial_use
    assert SPEC.input_name == "pixel_values" and SPEC.output_name == "predicted_depth"
    assert SPEC.multiple == 14 and SPEC.output_kind == "relative_disparity"
    assert network_size(291, 518) == (294, 518) and network_size(5, 5) == (14, 14)
    import backend

    # 924: 16:9 at upstream's network size (518 x 924) without upsampling (issue 26; was 518)
    assert backend.resolution_of(NAME) == 924 and backend.resolution_of(NAME, 1024) == 1024  # no cap
    assert backend.resolution_of(NAME, 0) is None  # full size


def test_catalog_state_follows_the_models_folder(replica, tmp_path):
    """`--help` / the add-on's dropdown state: missing in an empty models folder (naming the
    repo), ready once the file is in the folder's hub-cache layout."""
    from backend import catalog

    cache, _, _ = replica
    empty = tmp_path / "empty"
    empty.mkdir()
    d = {e["name"]: e for e in catalog.describe_estimators(cache_dir=empty)}[NAME]
    assert not d["ready"] and d["missing_models"] == [SPEC.repo_id], d
    assert "1 downloaded model" in d["needs"] and "Apache-2.0" in d["summary"]
    assert SPEC.repo_id in catalog.readiness("estimator", NAME, cache_dir=empty)
    d = {e["name"]: e for e in catalog.describe_estimators(cache_dir=cache)}[NAME]
    assert d["ready"] and d["state"] == "ready", d
    assert catalog.readiness("estimator", NAME, cache_dir=cache) is None


def test_provider_choice():
    assert select_providers("auto", ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert select_providers(None, ["DmlExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]) \
        == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert select_providers("auto", ["CoreMLExecutionProvider", "CPUExecutionProvider"])[0] == \
        "CoreMLExecutionProvider"
    assert select_providers("cpu", ["CUDAExecutionProvider", "CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert select_providers("mps", ["CoreMLExecutionProvider", "CPUExecutionProvider"])[0] == \
        "CoreMLExecutionProvider"
    with pytest.raises(ValueError, match="one of auto, cpu, cuda"):
        select_providers("tpu", ["CPUExecutionProvider"])
    from backend.estimators.onnx_depth import choose_variant

    gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_variant(SPEC, "auto", gpu, present=("fp32", "fp16")) == "fp16"
    assert choose_variant(SPEC, "auto", gpu, present=("fp32",)) == "fp32"  # issue 37: fp16 only when there
    assert choose_variant(SPEC, "auto", ["CPUExecutionProvider"], present=("fp32", "fp16")) == "fp32"
    assert choose_variant(SPEC, "int8", ["CPUExecutionProvider"]) == "int8"


def test_cli_decompose_offline_writes_contract_frames(replica, tmp_path):
    """``python -m backend decompose clip.mp4 --estimator depth-anything-v2-small`` with the
    replica in the models folder and downloads off."""
    cache, clip, _ = replica
    out = tmp_path / "gb"
    proc = run_cli("decompose", clip, "--out", out, "--estimator", NAME,
                   env=cli_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert events(proc.stdout)[-1]["event"] == "done"
    files = sorted(p.name for p in out.glob("gbuffer_*.exr"))
    assert files == ["gbuffer_0001.exr", "gbuffer_0002.exr", "gbuffer_0003.exr"]
    est = DepthAnythingEstimator(cache_dir=cache, local_files_only=True)
    for n in (1, 3):
        fr = contract.read_frame(contract.frame_path(out, n), validate=True)
        assert fr.shape == (H, W)
        assert fr.meta["estimator"] == NAME
        assert fr.meta["models"][f"{SPEC.repo_id}/{FILE}"] == odu.COMMIT
        assert "gbuffer_editor/embedded" in fr.meta["models"]
        assert "normal" in fr.meta["filled"] and "albedo" not in fr.meta["filled"]
        assert np.allclose(np.linalg.norm(fr.normal, axis=-1), 1.0, atol=1e-2)
        assert fr.depth.std() > 1e-3 * fr.depth.mean()
        # the depth written is the network's: in the inverse order of its disparity on the
        # same (decoded) frame, apart from the contract's clamp to near..far
        disp = est.disparity(fr.combined[..., :3])
        rho = spearman(fr.depth, disp)
        assert rho < -0.95, rho
    man = json.loads((out / "manifest.json").read_text())
    assert man["estimator"]["settings"]["model"] == f"{SPEC.repo_id}/{FILE}"


def test_composite_pass_models(replica):
    cache, _, _ = replica
    est = DepthAnythingEstimator(cache_dir=cache, local_files_only=True)
    rgb = np.random.default_rng(0).random((H, W, 3), dtype=np.float32)
    out = est.predict(rgb)
    assert out.depth.shape == (H, W) and np.all(out.depth > 0) and out.normal is None
    assert out.pass_models["depth"] == f"{SPEC.repo_id}/{FILE}"
    # the same materials as the embedded estimator alone on that frame, with its own account
    # of them (the intrinsic albedo's method; near-constant metallic / roughness are defaults)
    from backend.estimators.embedded import EmbeddedEstimator

    emb = EmbeddedEstimator().predict(rgb)
    for k in ("albedo", "metallic", "roughness"):
        assert out.pass_models[k] == (emb.pass_models.get(k) or "gbuffer_editor/embedded")
        assert out.provenance[k] == emb.provenance.get(k, "estimated")
    assert out.provenance["depth"] == "estimated" and out.provenance["normal"] == "derived"
    assert out.provenance["albedo"] == "estimated" and out.provenance["roughness"] == "default"
    np.testing.assert_allclose(out.albedo, emb.albedo, atol=1e-6)
    bare = DepthAnythingEstimator(cache_dir=cache, local_files_only=True, materials="none").predict(rgb)
    assert bare.albedo is None and bare.metallic is None
    np.testing.assert_array_equal(bare.depth, out.depth)


def test_fp16_variant_and_stabilize(replica, tmp_path, monkeypatch):
    """The fp16 file (float16 weights and I/O) gives the fp32 file's depth; the image
    model gets decompose's temporal stabilisation."""
    cache, clip, _ = replica
    cache16 = odu.copy_cache(cache, tmp_path / "c16")
    odu.install_in_cache(cache16, SPEC.repo_id, SPEC.files["fp16"],
                         odu.export_replica(tmp_path / "m16.onnx", H, W, fp16=True))
    e32 = DepthAnythingEstimator(cache_dir=cache16, local_files_only=True, materials="none")
    e16 = DepthAnythingEstimator(cache_dir=cache16, local_files_only=True, materials="none", variant="fp16")
    assert e16.input_dtype == np.float16 and e16.model_id.endswith("model_fp16.onnx")
    rgb = np.random.default_rng(1).random((H, W, 3), dtype=np.float32)
    d32, d16 = e32.disparity(rgb), e16.disparity(rgb)
    assert d16.dtype == np.float32 and spearman(d32, d16) > 0.99
    assert float(np.abs(d16 - d32).max()) < 0.02 * float(d32.max())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = decompose(clip, tmp_path / "st", estimator=NAME, estimator_options={"cache_dir": str(cache)},
                    stabilize=True)
    assert res.written == [1, 2, 3]
    flick = json.loads((tmp_path / "st" / "manifest.json").read_text())["flicker"]
    assert flick["stabilized"] <= flick["raw"]


class _NetworkCut:
    """``socket.connect`` / ``create_connection`` raise and count attempts."""

    def __init__(self, monkeypatch):
        self.attempts = 0

        def refuse(*a, **k):
            self.attempts += 1
            raise OSError("network cut by the test")

        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket.socket, "connect_ex", refuse)
        monkeypatch.setattr(socket, "create_connection", refuse)


def test_offline_never_connects(replica, tmp_path, monkeypatch):
    cache, clip, _ = replica
    cut = _NetworkCut(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = decompose(clip, tmp_path / "gb", estimator=NAME, estimator_options={"cache_dir": str(cache)})
    assert res.written == [1, 2, 3]
    assert cut.attempts == 0
    # a missing model while offline: one line naming the model and where to get it, no connection
    with pytest.raises(DepthModelError) as e:
        DepthAnythingEstimator(cache_dir=tmp_path / "empty")
    msg = str(e.value)
    assert "\n" not in msg and "Depth Anything V2 Small" in msg and "downloads are off" in msg
    assert "Preferences" in msg
    assert cut.attempts == 0
    # online, the same request does try the network (so the zero above is meaningful) and
    # fails with one clear line, leaving nothing a later run would load
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at its import
    import types

    import huggingface_hub.utils._http as hf_http

    # huggingface_hub retries a refused connection 5 times with back-off (23 s): no waiting here
    monkeypatch.setattr(hf_http, "time", types.SimpleNamespace(sleep=lambda s: None, time=hf_http.time.time,
                                                              monotonic=hf_http.time.monotonic))
    with pytest.raises(DepthModelError) as e:
        DepthAnythingEstimator(cache_dir=tmp_path / "empty2", local_files_only=False)
    assert cut.attempts > 0
    assert "\n" not in str(e.value) and "download into" in str(e.value)
    leftovers = [p for p in (tmp_path / "empty2").rglob("*") if p.is_file() and "onnx" in p.name]
    assert leftovers == []


def _cli_error(cache, clip, out):
    proc = run_cli("decompose", clip, "--out", out, "--estimator", NAME,
                   env=cli_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (err,) = [e for e in events(proc.stdout) if e["event"] == "error"]
    assert not list(out.glob("gbuffer_*.exr"))
    return err["message"]


def test_bad_model_files_are_one_clear_line(replica, tmp_path):
    cache, clip, onnx_file = replica
    snap = cache / ("models--" + SPEC.repo_id.replace("/", "--")) / "snapshots" / odu.COMMIT / FILE
    # truncated download (e.g. copied by hand half-way)
    bad = odu.copy_cache(cache, tmp_path / "truncated")
    blob = (bad / os.path.relpath(snap, cache)).resolve()
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 2])
    msg = _cli_error(bad, clip, tmp_path / "o1")
    assert "Depth Anything V2 Small" in msg and "truncated or corrupt" in msg and "delete it" in msg
    # an ONNX file of another architecture (other input/output names)
    other = odu.export_replica(tmp_path / "other.onnx", H, W, names=("image", "depth"))
    wrong = tmp_path / "wrong"
    odu.install_in_cache(wrong, SPEC.repo_id, FILE, other)
    msg = _cli_error(wrong, clip, tmp_path / "o2")
    assert "is not a Depth Anything V2 Small export" in msg and "image [" in msg and "pixel_values" in msg
    # an interrupted download: only the partial blob exists; it is never loaded
    partial = tmp_path / "partial"
    repo = partial / ("models--" + SPEC.repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / ("0" * 64 + ".incomplete")).write_bytes(onnx_file.read_bytes()[:1000])
    msg = _cli_error(partial, clip, tmp_path / "o3")
    assert "is not in the models folder" in msg and "Preferences" in msg


def test_read_only_models_folder_is_used_offline(replica, tmp_path, monkeypatch):
    """A shared, read-only models folder (a studio's) works offline."""
    cache, clip, _ = replica
    ro = odu.copy_cache(cache, tmp_path / "ro")
    for root, dirs, files in os.walk(ro):
        for f in files:
            os.chmod(os.path.join(root, f), 0o444)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    est = DepthAnythingEstimator(cache_dir=ro)
    assert est.predict(np.full((H, W, 3), 0.3, np.float32)).depth.shape == (H, W)


def test_without_huggingface_hub_reads_the_cache(replica, monkeypatch):
    """The extension zip's default path has no huggingface_hub: the cache layout is read directly."""
    import sys

    cache, _, _ = replica
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    est = DepthAnythingEstimator(cache_dir=cache, local_files_only=True)
    assert est.revision == odu.COMMIT
    with pytest.raises(DepthModelError, match="huggingface_hub"):
        DepthAnythingEstimator(cache_dir=cache.parent / "none", local_files_only=False)


def test_multiview_uses_the_pretrained_depth_as_prior(tmp_path, monkeypatch):
    """With cameras the pretrained depth is the prior the measured depth is fused with."""
    from multiview_util import H as MH, W as MW, dolly_cameras, write_shot

    nh, nw = network_size(MH, MW)
    cache = tmp_path / "cache"
    odu.install_in_cache(cache, SPEC.repo_id, FILE, odu.export_replica(tmp_path / "m.onnx", nh, nw))
    cams = dolly_cameras(n=4, dolly=0.1)
    seq, cam_file = tmp_path / "shot", tmp_path / "cams.json"
    depths = write_shot(seq, cams, cam_file)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    decompose(seq, tmp_path / "gb", estimator=NAME, estimator_options={"cache_dir": str(cache)},
              cameras=cam_file, frames="2-3", multiview={"processing_width": 160})
    for n in (2, 3):
        fr = contract.read_frame(contract.frame_path(tmp_path / "gb", n), validate=True)
        assert fr.meta["depth_source"] == "multiview" and fr.meta["prior_estimator"] == NAME
        conf = fr.confidence > 0.5
        gt = depths[n - 1]
        assert conf.mean() > 0.5
        assert float((np.abs(fr.depth - gt) / gt)[conf].mean()) < 0.05
        assert f"{SPEC.repo_id}/{FILE}" in fr.meta["models"]
    # the materials are the embedded network's, with the frame's fine albedo detail (the
    # network runs at 192 px inside the composite's 238 x 182): as sharp as decompose with
    # the embedded estimator alone, and close to it
    import cv2

    decompose(seq, tmp_path / "emb", estimator="embedded", frames="2-3")
    a = contract.read_frame(contract.frame_path(tmp_path / "emb", 3)).albedo
    b = contract.read_frame(contract.frame_path(tmp_path / "gb", 3)).albedo

    def detail(x):
        return float(np.abs(x - cv2.GaussianBlur(x, (0, 0), 2)).mean())

    assert detail(b) > 0.8 * detail(a), (detail(a), detail(b))
    assert float(np.abs(a - b).mean()) < 0.03


def test_network_size_is_upstreams_by_default(replica):
    """Issue 26: upstream resizes so the SHORT side is at least 518 (keep aspect, multiples of
    14, ``lower_bound``): 16:9 -> 518 x 924; ``fit=frame`` keeps the faster frame-sized input."""
    from backend.estimators.onnx_depth import upstream_size

    cache = replica[0]
    assert upstream_size(1080, 1920) == (518, 924)
    assert upstream_size(480, 640) == (518, 686) and upstream_size(100, 100) == (518, 518)
    assert upstream_size(1920, 1080) == (924, 518)
    est = DepthAnythingEstimator(cache_dir=cache, local_files_only=True, materials="none")
    assert est.resolution() == 924 and est.network_input(np.zeros((520, 924, 3), np.float32)).shape == (3, 518, 924)
    assert est.network_input(np.zeros((H, W, 3), np.float32)).shape == (3, 518, 784)
    fast = DepthAnythingEstimator(cache_dir=cache, local_files_only=True, materials="none", fit="frame")
    assert fast.resolution() == 518 and fast.network_input(np.zeros((291, 518, 3), np.float32)).shape == (3, 294, 518)
    assert fast.settings()["fit"] == "frame"
    with pytest.raises(ValueError, match="fit"):
        DepthAnythingEstimator(cache_dir=cache, local_files_only=True, fit="long")
