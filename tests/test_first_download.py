"""A "first download" rehearsal (issue 26): for each published model the product loads, a
Hugging Face cache laid out exactly as ``huggingface_hub`` leaves it after downloading the
repository (every file the hub lists, ``blobs/``, ``snapshots/<commit>/`` symlinks,
``refs/main``; tests/hub_cache_util.py, file lists in tests/fixtures/hub_files.json), with
tiny random-weight replicas in the files the product opens and placeholders in the rest,
then the CLI run offline (``HF_HUB_OFFLINE=1``) on it. What this shows: the file names,
folders and formats the product asks for are the ones the hub publishes, and the loaders
pick the right ones among them (e.g. ``int8`` is the signed-int8 file; Marigold loads the
fp32 weights and never opens the fp16 copies; CLIP loads from ``pytorch_model.bin``). What
it cannot show: the real weights' values (tests/test_model_architectures.py builds the real
architectures at full size with random weights)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backend import contract

import hub_cache_util as hub
import onnx_depth_util as odu
from cli_util import cli_env, events, run_cli
from footage_util import write_movie

torch = pytest.importorskip("torch")
PUB = hub.published()


def _clip(path, h=56, w=84, n=3):
    yy, xx = np.mgrid[0:h, 0:w]
    frames = [np.stack([(xx * 3 + t * 5) % 256, (yy * 4) % 256, ((xx + yy) * 2) % 256], -1).astype(np.uint8)
              for t in range(n)]
    return write_movie(path, frames, rate=12)


def _env(cache):
    return cli_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")


def _weight_types(path):
    """ONNX tensor element types of a graph's initializers (1 float, 2 uint8, 3 int8, 10 float16)."""
    import onnx

    return {i.data_type for i in onnx.load(str(path)).graph.initializer}


def test_depth_anything_v2_small_first_download(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    repo = "onnx-community/depth-anything-v2-small"
    entry = PUB[repo]
    fp32 = odu.export_replica(tmp_path / "r" / "model.onnx", 56, 84)
    fp16 = odu.export_replica(tmp_path / "r" / "model_fp16.onnx", 56, 84, fp16=True)
    q = {}
    for name, wt in (("model_int8.onnx", QuantType.QInt8), ("model_uint8.onnx", QuantType.QUInt8)):
        quantize_dynamic(str(fp32), str(tmp_path / "r" / name), weight_type=wt)
        q[name] = tmp_path / "r" / name
    made = {"onnx/model.onnx": fp32, "onnx/model_fp16.onnx": fp16, "onnx/model_int8.onnx": q["model_int8.onnx"],
            "onnx/model_uint8.onnx": q["model_uint8.onnx"], "onnx/model_quantized.onnx": q["model_uint8.onnx"],
            "config.json": b'{"model_type": "depth_anything"}\n',
            "preprocessor_config.json": json.dumps({"image_mean": [0.485, 0.456, 0.406],
                                                    "image_std": [0.229, 0.224, 0.225]}).encode()}
    files = {p: made.get(p, hub.placeholder(repo, p)) for p in entry["files"]}
    assert set(made) <= set(entry["files"])  # every file the product opens is published
    commit = hub.full_commit(repo, entry["revision"])
    cache = tmp_path / "hub"
    hub.lay_out(cache, repo, commit, files)
    clip = _clip(tmp_path / "clip.mp4")
    for variant, file, kind in (("auto", "onnx/model.onnx", 1), ("int8", "onnx/model_int8.onnx", 3),
                                ("uint8", "onnx/model_quantized.onnx", 2), ("fp16", "onnx/model_fp16.onnx", 10)):
        out = tmp_path / f"gb_{variant}"
        proc = run_cli("decompose", clip, "--out", out, "--estimator", "depth-anything-v2-small",
                       "--estimator-option", f"variant={variant}", env=_env(cache))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert events(proc.stdout)[-1]["event"] == "done"
        fr = contract.read_frame(contract.frame_path(out, 1), validate=True)
        assert fr.meta["models"] == {**fr.meta["models"], f"{repo}/{file}": commit}
        loaded = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / commit / file
        assert kind in _weight_types(loaded.resolve())  # int8: signed 8-bit weights (issue 26)
        assert "shift is unknown" in fr.meta["relative_depth"]


def test_video_depth_anything_small_first_download(tmp_path):
    """The published repository (the .pth checkpoint only) plus the export docs/models.md
    describes, placed where it says, fixed to 4 frames of 56 x 98 (a replica)."""
    repo = "depth-anything/Video-Depth-Anything-Small"
    entry = PUB[repo]
    assert entry["revision"] and len(entry["revision"]) == 40
    cache = tmp_path / "hub"
    hub.lay_out(cache, repo, entry["revision"], {p: hub.placeholder(repo, p) for p in entry["files"]})
    msg = run_cli("decompose", _clip(tmp_path / "c0.mp4"), "--out", tmp_path / "none", "--estimator",
                  "video-depth-anything-small", env=_env(cache))
    assert msg.returncode == 1 and "no ONNX export of it is published" in msg.stdout + msg.stderr
    export = odu.export_video_replica(tmp_path / "model.onnx", 56, 98, frames=4, fixed=True)
    hub.lay_out(cache, repo, "local", {"onnx/model.onnx": export})  # docs/models.md: snapshots/local, refs/main
    clip = _clip(tmp_path / "clip.mp4", 72, 128, n=6)
    proc = run_cli("decompose", clip, "--out", tmp_path / "gb", "--estimator", "video-depth-anything-small",
                   env=_env(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    man = json.loads((tmp_path / "gb" / "manifest.json").read_text())
    assert man["depth_windows"]["window"] == 4 and man["estimator"]["settings"]["graph_size"] == [56, 98]
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 6), validate=True)
    assert fr.shape == (72, 128) and fr.meta["models"][f"{repo}/onnx/model.onnx"] == "local"


def test_clip_vit_large_patch14_336_first_download(tmp_path):
    """CMMD with the paper's CLIP laid out as downloaded: pytorch_model.bin of a whole
    CLIPModel (config ``model_type: clip``), no safetensors, tf_model.h5 beside it."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    repo = "openai/clip-vit-large-patch14-336"
    entry = PUB[repo]
    assert "pytorch_model.bin" in entry["files"] and not [p for p in entry["files"] if p.endswith(".safetensors")]
    sub = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, projection_dim=16)
    cfg = CLIPConfig(text_config=dict(sub, vocab_size=100, max_position_embeddings=16),
                     vision_config=dict(sub, image_size=32, patch_size=8), projection_dim=16)
    torch.manual_seed(0)
    bin_path = tmp_path / "pytorch_model.bin"
    torch.save(CLIPModel(cfg).state_dict(), bin_path)
    proc_dir = tmp_path / "proc"
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(proc_dir)
    made = {"pytorch_model.bin": bin_path, "config.json": cfg.to_json_string().encode(),
            "preprocessor_config.json": proc_dir / "preprocessor_config.json"}
    cache = tmp_path / "hub"
    snap = hub.lay_out(cache, repo, hub.full_commit(repo, entry["revision"]),
                       {p: made.get(p, hub.placeholder(repo, p)) for p in entry["files"]})
    a, b = _clip(tmp_path / "a.mp4"), _clip(tmp_path / "b.mp4", n=4)
    proc = run_cli("metrics", a, b, "--clip", snap, env=_env(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert np.isfinite(out["cmmd"]) and out["cmmd"] >= 0


def test_marigold_first_download(tmp_path):
    """The three Marigold repositories with their published layout, the fp16 weight copies
    present as placeholders (a full ``hf download`` has them; loading one would fail), the
    appearance model declaring upstream's ``MarigoldIIDPipeline``; decompose offline."""
    pytest.importorskip("diffusers")
    from test_marigold import _build

    cache = tmp_path / "hub"
    for kind, repo, extra in (("depth", "prs-eth/marigold-depth-v1-1", {}),
                              ("normals", "prs-eth/marigold-normals-v1-1", {"scheduler": "lcm"}),
                              ("intrinsics", "prs-eth/marigold-iid-appearance-v1-1", {"n_targets": 2})):
        folder = _build(kind, tmp_path / "build", **extra)
        made = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
        listed = PUB[repo]["files"]
        # the replica has the published names (transformers 5 also writes tokenizer.json, which the
        # published repositories, saved with older transformers, lack: it is left out of the cache)
        assert set(made) - {"tokenizer/tokenizer.json"} <= set(listed), sorted(set(made) - set(listed))
        tok = tmp_path / "build" / f"_tok_{kind}"  # the tiny vocabulary the replica's tokenizer was made from
        made.update({"tokenizer/vocab.json": tok / "vocab.json", "tokenizer/merges.txt": tok / "merges.txt"})
        if kind == "intrinsics":
            index = json.loads((folder / "model_index.json").read_text())
            made["model_index.json"] = json.dumps(dict(index, _class_name="MarigoldIIDPipeline")).encode()
        hub.lay_out(cache, repo, hub.full_commit(repo, None), {p: made.get(p, hub.placeholder(repo, p))
                                                              for p in listed})
    clip = _clip(tmp_path / "clip.mp4", 24, 32, n=2)
    proc = run_cli("decompose", clip, "--out", tmp_path / "gb", "--estimator", "marigold",
                   "--estimator-option", "device=cpu", "--estimator-option", "processing_resolution=16",
                   "--processing-resolution", "32", env=_env(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    fr = contract.read_frame(contract.frame_path(tmp_path / "gb", 2), validate=True)
    assert set(fr.meta["models"]) >= {"prs-eth/marigold-depth-v1-1", "prs-eth/marigold-normals-v1-1",
                                      "prs-eth/marigold-iid-appearance-v1-1"}
    assert fr.meta["provenance"]["albedo"] == "estimated"


#: the provider lists onnxruntime reports: a CPU build, a macOS build (CoreML first), onnxruntime-gpu
PROVIDER_LISTS = {"cpu": ["CPUExecutionProvider"],
                  "coreml": ["CoreMLExecutionProvider", "CPUExecutionProvider"],
                  "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}


def _downloaded(repo, spec_key):
    """The published files ``python -m backend models download KEY`` (and the add-on's
    download) fetches: the model spec's patterns over the hub's listing."""
    from fnmatch import fnmatch

    from backend.model_store import find_specs

    (spec,) = find_specs([spec_key])
    return sorted(p for p in PUB[repo]["files"] if any(fnmatch(p, a) for a in spec.allow))


@pytest.mark.parametrize("platform", sorted(PROVIDER_LISTS))
def test_every_onnx_model_on_every_provider_list(tmp_path, monkeypatch, platform):
    """Issue 37: ``variant="auto"`` on a CPU build, a CoreML-first (macOS) and a CUDA-first
    build, offline, for every ONNX model: with only what the download / ``--with-models``
    / the readiness check provide (the fp32 file), every platform loads fp32 and is ready;
    with the whole repository downloaded (fp16 present), a GPU-first list takes fp16.
    onnxruntime here is a CPU build: the GPU provider lists are what a Mac's or a CUDA
    build reports (patched in), and the session itself runs on the CPU (onnxruntime
    skips a provider it lacks)."""
    import onnxruntime

    from backend import catalog
    from backend.estimators.onnx_depth import MODELS, DepthAnythingEstimator
    from backend.estimators.video_depth import VIDEO_MODELS, VideoDepthAnythingEstimator

    assert set(MODELS) | set(VIDEO_MODELS) == {"depth-anything-v2-small", "video-depth-anything-small"}
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: list(PROVIDER_LISTS[platform]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gpu = platform != "cpu"
    rgb = np.random.default_rng(0).random((56, 84, 3), dtype=np.float32)

    # Depth Anything V2 Small: what the download fetches, then the whole repository
    key, repo = "depth-anything-v2-small", "onnx-community/depth-anything-v2-small"
    spec = MODELS[key]
    fetched = _downloaded(repo, key)
    assert fetched == sorted([spec.files["fp32"], *spec.extra_files])  # = what --with-models bundles
    fp32 = odu.export_replica(tmp_path / "r" / "model.onnx", 56, 84)
    fp16 = odu.export_replica(tmp_path / "r" / "model_fp16.onnx", 56, 84, fp16=True)
    made = {spec.files["fp32"]: fp32, spec.files["fp16"]: fp16}
    commit = hub.full_commit(repo, PUB[repo]["revision"])
    for layout, files in (("downloaded", fetched), ("whole repository", sorted(PUB[repo]["files"]))):
        cache = tmp_path / layout.replace(" ", "_")
        hub.lay_out(cache, repo, commit, {p: made.get(p, hub.placeholder(repo, p)) for p in files})
        assert catalog.readiness("estimator", key, cache_dir=cache) is None
        est = DepthAnythingEstimator(cache_dir=cache, materials="none")
        want = "fp16" if gpu and layout == "whole repository" else "fp32"
        assert (est.providers[0], est.variant) == (PROVIDER_LISTS[platform][0], want), layout
        assert est.input_dtype == (np.float16 if want == "fp16" else np.float32)
        assert est.predict(rgb).depth.shape == (56, 84)

    # Video Depth Anything Small: the export docs/models.md describes (fp32 only), on every platform
    vrepo = VIDEO_MODELS["video-depth-anything-small"].repo_id
    cache = tmp_path / "video"
    hub.lay_out(cache, vrepo, "local", {"onnx/model.onnx": odu.export_video_replica(
        tmp_path / "v.onnx", 56, 98, frames=4, fixed=True)})
    assert catalog.readiness("estimator", "video-depth-anything-small", cache_dir=cache) is None
    vest = VideoDepthAnythingEstimator(cache_dir=cache, materials="none")
    assert (vest.providers[0], vest.variant) == (PROVIDER_LISTS[platform][0], "fp32")
    assert vest.predict(rgb).depth.shape == (56, 84)


def test_cuda_device_with_a_cpu_onnxruntime_falls_back_with_one_warning(tmp_path):
    """Issue 37 item 2: Device = CUDA (natural for the torch models) with the CPU build of
    onnxruntime this machine has: the decompose runs on the CPU, with one warning."""
    import onnxruntime

    assert "CUDAExecutionProvider" not in onnxruntime.get_available_providers()
    repo = "onnx-community/depth-anything-v2-small"
    cache = tmp_path / "hub"
    hub.lay_out(cache, repo, hub.full_commit(repo, PUB[repo]["revision"]),
                {"onnx/model.onnx": odu.export_replica(tmp_path / "m.onnx", 56, 84), "config.json": b"{}\n"})
    out = tmp_path / "gb"
    proc = run_cli("decompose", _clip(tmp_path / "clip.mp4"), "--out", out, "--estimator",
                   "depth-anything-v2-small", "--estimator-option", "device=cuda", env=_env(cache))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ev = events(proc.stdout)
    warns = [e["message"] for e in ev if e["event"] == "warning" and "device" in e["message"]]
    assert len(warns) == 1 and "'cuda'" in warns[0] and "on the CPU" in warns[0], warns
    assert ev[-1]["event"] == "done" and len(list(out.glob("gbuffer_*.exr"))) == 3
