"""Issue 37: ``python -m backend models`` (list with readiness and sizes, verify against the
hub's checksums, remove, download), the one Hugging Face cache look-up every loader uses
(:mod:`backend.hub_cache`), and the "model missing" messages naming the command. The
models folders are laid out exactly as ``huggingface_hub`` leaves a download
(tests/hub_cache_util.py, the published file lists of tests/fixtures/hub_files.json)."""
from __future__ import annotations

import os
import sys

import pytest

import hub_cache_util as hub
from cli_util import cli_env, events, run_cli

DA = "onnx-community/depth-anything-v2-small"
OLD, NEW = "a" * 40, "f" * 40  # refs/main names OLD; NEW sorts last and is newer on disk


def _da_cache(root, onnx=b"not a real model, but a blob named by its sha256\n"):
    """Depth Anything V2 Small as ``models download`` leaves it (fp32 file + configs)."""
    files = {"onnx/model.onnx": onnx, "config.json": b'{"model_type": "depth_anything"}\n',
             "preprocessor_config.json": b'{"image_mean": [0.485, 0.456, 0.406]}\n'}
    hub.lay_out(root, DA, hub.full_commit(DA, hub.published()[DA]["revision"]), files)
    return root


def _two_snapshots(cache, repo, files=("model_index.json",)):
    """``repo`` with two snapshots: OLD (what refs/main names) and NEW (an unrelated later
    one, e.g. a download of another branch); returns the OLD snapshot."""
    for commit in (NEW, OLD):
        hub.lay_out(cache, repo, commit, {f: f"{{\"commit\": \"{commit}\"}}\n".encode() for f in files},
                    branch=None)
    (cache / ("models--" + repo.replace("/", "--")) / "refs").mkdir()
    (cache / ("models--" + repo.replace("/", "--")) / "refs" / "main").write_text(OLD)
    return cache / ("models--" + repo.replace("/", "--")) / "snapshots" / OLD


@pytest.mark.parametrize("with_hub", [True, False], ids=["huggingface_hub", "without"])
def test_one_cache_lookup_follows_refs_main(tmp_path, monkeypatch, with_hub):
    """onnx_depth, flux2_klein and wan_vace find the snapshot refs/main names, never the
    alphabetically (or most recently) last one, with huggingface_hub and without it."""
    from backend import hub_cache
    from backend.renderers import flux2_klein, wan_vace

    if not with_hub:
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    cache = tmp_path / "hub"
    for repo in (flux2_klein.DEFAULT_MODEL, wan_vace.DEFAULT_MODEL, DA):
        old = _two_snapshots(cache, repo, ("model_index.json", "onnx/model.onnx"))
        assert hub_cache.cached_snapshot(cache, repo) == old
        assert hub_cache.cached_file(cache, repo, "onnx/model.onnx") == old / "onnx/model.onnx"
        assert hub_cache.cached_snapshot(cache, repo, revision=NEW).name == NEW  # a commit asked for
        assert hub_cache.cached_file(cache, repo, "missing.json") is None
    assert flux2_klein._snapshot(flux2_klein.DEFAULT_MODEL, cache).name == OLD
    assert wan_vace.resolve_model(wan_vace.DEFAULT_MODEL, cache, local=True).name == OLD
    assert hub_cache.cached_snapshot(tmp_path / "nothing", DA) is None
    # no ref names a snapshot (a hand-copied folder): not picked by guessing
    (cache / ("models--" + DA.replace("/", "--")) / "refs" / "main").unlink()
    assert hub_cache.cached_snapshot(cache, DA) is None
    with pytest.raises(wan_vace.ModelNotAvailable, match="python -m backend models download wan-vace"):
        wan_vace.resolve_model("Wan-AI/not-here", cache, local=True)


def test_models_list_verify_remove(tmp_path):
    cache = _da_cache(tmp_path / "hub")
    env = cli_env(HF_HUB_CACHE=str(cache))
    proc = run_cli("models", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {r["key"]: r for r in events(proc.stdout)[-1]["models"]}
    da = rows["depth-anything-v2-small"]
    assert da["present"] and da["ready"] is None and da["licence"] == "Apache-2.0" and da["size"] == "99 MB"
    assert da["bytes"] > 100 and da["path"].endswith(hub.full_commit(DA, hub.published()[DA]["revision"]))
    assert not rows["marigold_depth"]["present"] and "python -m backend models download marigold" in \
        rows["marigold_depth"]["ready"]
    assert "depth-anything-v2-small" in proc.stderr and "ready" in proc.stderr  # the table

    proc = run_cli("models", "verify", env=env)
    assert proc.returncode == 0, proc.stderr
    (v,) = [e for e in events(proc.stdout) if e["event"] == "verified"]
    assert v["key"] == "depth-anything-v2-small" and v["checked"] == 3 and v["bad"] == []
    # a blob changed on disk (a truncated copy, bit rot): named, exit 1
    blob = (cache / f"models--{DA.replace('/', '--')}" / "snapshots" / v["snapshot"].rsplit("/", 1)[-1]
            / "onnx/model.onnx").resolve()
    blob.write_bytes(blob.read_bytes()[:10])
    proc = run_cli("models", "verify", "depth-anything-v2-small", env=env)
    assert proc.returncode == 1
    (v,) = [e for e in events(proc.stdout) if e["event"] == "verified"]
    assert v["bad"] == ["onnx/model.onnx"] and "python -m backend models download depth-anything-v2-small" \
        in proc.stderr

    proc = run_cli("models", "remove", "depth-anything-v2-small", env=env)
    assert proc.returncode == 0 and [e["bytes"] > 0 for e in events(proc.stdout)] == [True]
    assert not (cache / f"models--{DA.replace('/', '--')}").exists()
    rows = {r["key"]: r for r in events(run_cli("models", "list", env=env).stdout)[-1]["models"]}
    assert not rows["depth-anything-v2-small"]["present"]
    # bad names: one line, exit 2
    proc = run_cli("models", "remove", "no-such-model", env=env)
    assert proc.returncode == 2 and "unknown model 'no-such-model'" in proc.stderr


def test_download_is_the_one_online_command(tmp_path):
    """The CLI keeps every job offline (HF_HUB_OFFLINE=1) but not ``models download``: with a
    hub that refuses the connection it reports the hub, not "downloads are off"; with
    HF_HUB_OFFLINE set by the user it says so. Both one line, exit 1, nothing kept."""
    env = cli_env(HF_HUB_CACHE=str(tmp_path / "hub"), HF_ENDPOINT="http://127.0.0.1:9")
    env.pop("HF_HUB_OFFLINE")
    env.pop("TRANSFORMERS_OFFLINE", None)
    proc = run_cli("models", "download", "depth-anything-v2-small", env=env, timeout=120)
    assert proc.returncode == 1
    (err,) = [e for e in events(proc.stdout) if e["event"] == "error"]
    assert "cannot reach the model hub" in err["message"] and "Traceback" not in proc.stderr
    env["HF_HUB_OFFLINE"] = "1"
    proc = run_cli("models", "download", "depth-anything-v2-small", env=env, timeout=120)
    assert proc.returncode == 1 and "HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set" in proc.stderr
    assert not list((tmp_path / "hub").rglob("*.onnx"))


def test_model_missing_messages_name_the_command(tmp_path):
    """Every "model missing" message names ``python -m backend models download NAME``."""
    pytest.importorskip("onnxruntime")
    from backend.estimators.onnx_depth import DepthAnythingEstimator, DepthModelError
    from backend.renderers.flux2_klein import Flux2KleinRenderer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with pytest.raises(DepthModelError, match="python -m backend models download depth-anything-v2-small"):
        DepthAnythingEstimator(cache_dir=tmp_path / "empty", local_files_only=True)
    with pytest.raises(Exception, match="python -m backend models download flux2-klein"):
        Flux2KleinRenderer(models_dir=str(tmp_path)).model_folder()
    from backend.catalog import readiness

    assert "python -m backend models download depth-anything-v2-small" in readiness(
        "estimator", "depth-anything-v2-small", cache_dir=tmp_path)


def test_progress_events_are_the_workers_protocol():
    """``models download`` reports MB as the add-on's worker reads progress."""
    from backend.model_store import progress_events

    got = []
    report = progress_events(got.append)
    report(3 * 2**20, 10 * 2**20)
    (ev,) = got
    assert ev["event"] == "progress" and (ev["done"], ev["total"]) == (3, 10) and ev["fps"] > 0
