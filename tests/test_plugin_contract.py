"""Every registered estimator and renderer through the same checks (diffusers'
``PipelineTesterMixin`` idea): the plugin's facts (backend/plugins.py), a real job on tiny
inputs with a tiny replica of its models (tests/plugin_replicas.py), shapes, dtypes,
ranges, provenance, resume, cancel and bad input.

A new built-in plugin gets these checks by adding its replica to tests/plugin_replicas.py;
without one, ``test_every_plugin_has_facts_and_a_replica`` fails.
"""
import json
import threading

import numpy as np
import pytest

import plugin_replicas as replicas
from backend import catalog, contract, plugins
from backend.errors import JobCancelled
from backend.estimators.base import PROVENANCE_KINDS, PROVENANCE_PASSES, available_estimators, get_estimator
from backend.jobs.decompose import decompose
from backend.jobs.restyle import restyle
from backend.jobs.writers import read_rgba_exr
from backend.renderers import available_renderers, renderer_class
from footage_util import gradient_rgb, write_image
from gbuffer_util import sphere_frames, write_sequence

ESTIMATORS = sorted(plugins.builtins("estimator"))
RENDERERS = sorted(plugins.builtins("renderer"))
N_FRAMES = 3


def test_every_plugin_has_facts_and_a_replica():
    """Registered built-ins are exactly the plugins declared, each with a replica here."""
    assert set(ESTIMATORS) <= set(available_estimators()) and set(RENDERERS) <= set(available_renderers())
    assert set(replicas.ESTIMATORS) == set(ESTIMATORS)
    assert set(replicas.RENDERERS) == set(RENDERERS)
    for p in plugins.BUILTINS:
        assert p.kind in plugins.KINDS and p.summary and not p.summary.endswith(".") and p.licence
        assert p.needs_torch == ("torch" in p.packages) and "cpu" in p.devices


def test_catalog_and_readiness_read_the_facts(tmp_path):
    rows = {d["name"]: d for d in catalog.describe_estimators(cache_dir=tmp_path)}
    vda = rows["video-depth-anything-small"]
    assert vda["windowed"] and vda["licence"] == "Apache-2.0" and not vda["needs_torch"] and not vda["ready"]
    assert rows["embedded"]["ready"] and rows["marigold"]["needs_torch"] and "cuda" in rows["marigold"]["devices"]
    assert catalog.readiness("estimator", "embedded") is None
    why = catalog.readiness("estimator", "no-such-estimator")  # an unknown name is not ready
    assert why.startswith("unknown estimator 'no-such-estimator'; known: ") and "embedded" in why
    assert "\n" not in why
    assert catalog.readiness("renderer", "no-such-renderer").startswith("unknown renderer")
    with pytest.raises(ValueError):
        catalog.readiness("model", "embedded")


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """``replica(kind, name) -> options`` (built once per module)."""
    built = {}

    def get(kind, name):
        if (kind, name) not in built:
            table = replicas.ESTIMATORS if kind == "estimator" else replicas.RENDERERS
            built[kind, name] = table[name](tmp_path_factory.mktemp(f"{kind}_{name}"))
        return dict(built[kind, name])

    return get


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 3-frame PNG sequence at the replicas' size."""
    folder = tmp_path_factory.mktemp("clip")
    for k in range(1, N_FRAMES + 1):
        write_image(folder / f"shot_{k:04d}.png", gradient_rgb(replicas.H, replicas.W, 9 * k))
    return str(folder / "shot_####.png")


@pytest.fixture(scope="module")
def gbuffers(tmp_path_factory):
    return write_sequence(tmp_path_factory.mktemp("gb") / "gb",
                          sphere_frames(32, 48, N_FRAMES, x0=-0.6, step=0.12, fps=24))


def _cancel_after_first_frame():
    stop = threading.Event()

    def progress(ev):
        if ev.get("event") == "progress":
            stop.set()

    return stop, progress


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_contract(name, replica, clip, tmp_path):
    opts = replica("estimator", name)
    info = plugins.info("estimator", name)
    est = get_estimator(name, device="cpu", **opts)
    assert type(est).windowed is info.windowed and est.settings()["name"] == name
    json.dumps(est.settings())  # part of the resume hash
    # a real job: shapes, dtypes, ranges (the contract reader validates them), provenance
    out = tmp_path / "gb"
    res = decompose(clip, out, estimator=name, estimator_options=opts, device="cpu")
    assert res.written == list(range(1, N_FRAMES + 1))
    man = json.loads((out / "manifest.json").read_text())
    assert man["estimator"]["name"] == name
    for n in res.written:
        fr = contract.read_frame(contract.frame_path(out, n), validate=True)
        assert fr.shape == (replicas.H, replicas.W) and fr.meta["estimator"] == name
        for a in (fr.depth, fr.normal, fr.albedo, fr.metallic, fr.roughness):
            assert a.dtype == np.float32 and np.all(np.isfinite(a))
        assert fr.depth.min() > 0
        assert 0 <= fr.albedo.min() and fr.albedo.max() <= 1 and 0 <= fr.metallic.min() <= fr.metallic.max() <= 1
        length = np.linalg.norm(fr.normal, axis=-1)
        assert np.allclose(length, 1, atol=2e-3)
        entry = next(f for f in man["frames"] if f["frame"] == n)
        assert set(entry["provenance"]) <= set(PROVENANCE_PASSES)
        assert set(entry["provenance"].values()) <= set(PROVENANCE_KINDS)
    # resume: the same request recomputes nothing
    again = decompose(clip, out, estimator=name, estimator_options=opts, device="cpu")
    assert again.written == [] and again.skipped == res.written
    # cancel: stops after the frame in progress, only complete frames stay
    stop, progress = _cancel_after_first_frame()
    with pytest.raises(JobCancelled):
        decompose(clip, tmp_path / "cancelled", estimator=name, estimator_options=opts, device="cpu",
                  cancel=stop, progress=progress)
    kept = contract.list_frames(tmp_path / "cancelled")
    assert 1 <= len(kept) < N_FRAMES
    for path in kept.values():
        contract.read_frame(path, validate=True)
    # bad input: an option it does not have is one line naming it
    with pytest.raises(ValueError) as e:
        decompose(clip, tmp_path / "bad", estimator=name, estimator_options={**opts, "no_such_option": 1})
    assert "no_such_option" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", RENDERERS)
def test_renderer_contract(name, replica, gbuffers, tmp_path):
    opts = replica("renderer", name)
    if "device" in renderer_class(name).__init__.__code__.co_varnames:
        opts["device"] = "cpu"
    prompt = "dense fog"  # in the embedded vocabulary; free text for the others
    out = tmp_path / "rs"
    res = restyle(gbuffers, out, prompt, renderer=name, renderer_options=opts, mp4=False)
    assert res.written == list(range(1, N_FRAMES + 1))
    man = json.loads((out / "manifest.json").read_text())
    assert man["renderer"]["name"] == name and man["prompt"] == prompt
    json.dumps(man["renderer"]["settings"])
    for n in res.written:
        rgb = read_rgba_exr(out / f"restyle_{n:04d}.exr")
        assert rgb.shape == (32, 48, 3) and rgb.dtype == np.float32
        assert np.all(np.isfinite(rgb)) and rgb.min() >= 0
    again = restyle(gbuffers, out, prompt, renderer=name, renderer_options=opts, mp4=False)
    assert again.written == [] and again.skipped == res.written
    stop, progress = _cancel_after_first_frame()
    with pytest.raises(JobCancelled):
        restyle(gbuffers, tmp_path / "cancelled", prompt, renderer=name, renderer_options=opts, mp4=False,
                cancel=stop, progress=progress)
    kept = sorted((tmp_path / "cancelled").glob("restyle_*.exr"))
    assert 1 <= len(kept) < N_FRAMES or renderer_class(name).window > 0
    for path in kept:
        assert np.all(np.isfinite(read_rgba_exr(path)))
    with pytest.raises((TypeError, ValueError)) as e:
        restyle(gbuffers, tmp_path / "bad", prompt, renderer=name, renderer_options={**opts, "no_such_option": 1})
    assert "no_such_option" in str(e.value)


def test_the_toy_estimator_in_the_docs_runs(clip, tmp_path, monkeypatch):
    """docs/backends.md's toy estimator, as written (a class without ``__init__`` once made
    the option check fail with an IndexError), on a real 3-frame clip."""
    from pathlib import Path

    from backend.estimators.base import ESTIMATORS

    doc = (Path(__file__).resolve().parent.parent / "docs" / "backends.md").read_text()
    code = doc.split("A toy estimator")[1].split("```python")[1].split("```")[0]
    assert '"shot.mp4"' in code
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(ESTIMATORS._factories, "flat", None)  # removed again after the test
    exec(compile(code.replace('"shot.mp4"', repr(clip)), "backends.md", "exec"), {})
    man = json.loads((tmp_path / "gb_flat" / "manifest.json").read_text())
    assert [f["frame"] for f in man["frames"]] == [1, 2, 3]
    assert man["frames"][0]["provenance"]["depth"] == "estimated"
    assert man["frames"][0]["provenance"]["normal"] == "derived"
