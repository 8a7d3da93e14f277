"""OpenJD job templates (issue 18, part 2): backend/farm/openjd/*.yaml.

Real `openjd` CLI (openjd-cli from requirements.txt), no mocks: `openjd check` validates
every template (and refuses a broken one); `openjd run` executes the decompose+restyle job
on 10 frames of dolphins.mp4 with the plain-CLI runner (`python -m backend`) and its EXR
frames are byte-identical to `python -m backend farm local` with the same chunk/overlap
(manifests equal apart from the input folder's path and file identities). Bad input fails
in the Validate step with one line, before any chunk. The `blender -b --command
gbuffer_editor` runner runs through tests/blender_cli_shim.py (the extension's headless
command in the bpy module; no Blender executable on CI), also byte-identical.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "backend" / "farm" / "openjd"
NAMES = ("decompose.yaml", "restyle.yaml", "decompose_restyle.yaml", "scene_export.yaml")
PY = sys.executable
RES = 64
CHUNK, OVERLAP, FRAMES = 4, 2, (1, 10)


def _openjd() -> str:
    exe = Path(PY).parent / "openjd"
    found = str(exe) if exe.is_file() else shutil.which("openjd")
    if not found:
        pytest.fail("no openjd executable next to the test interpreter or on PATH: "
                    "pip install -c constraints.txt -r requirements.txt (openjd-cli)")
    return found


def _env():
    env = dict(os.environ)
    env["PATH"] = str(Path(PY).parent) + os.pathsep + env.get("PATH", "")
    return env


def _run(template, params, *extra, timeout=300):
    argv = [_openjd(), "run", str(TEMPLATES / template), *extra]
    for k, v in params.items():
        argv += ["-p", f"{k}={v}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env())


def _runner():
    return {"Python": PY, "BackendRoot": str(REPO)}


def _load(name):
    return yaml.safe_load((TEMPLATES / name).read_text())


@pytest.mark.parametrize("name", NAMES)
def test_every_template_passes_openjd_check(name):
    p = subprocess.run([_openjd(), "check", str(TEMPLATES / name)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "passes validation checks" in p.stdout
    doc = _load(name)
    assert doc["specificationVersion"] == "jobtemplate-2023-09"
    assert "extensions" not in doc  # plain 2023-09: no TASK_CHUNKING / EXPR needed on the farm


def test_a_broken_template_fails_check(tmp_path):
    text = (TEMPLATES / "decompose.yaml").read_text()
    broken = tmp_path / "broken.yaml"
    # a merge that depends on a step that does not exist
    broken.write_text(text.replace("- dependsOn: DecomposeChunks", "- dependsOn: NoSuchStep"))
    p = subprocess.run([_openjd(), "check", str(broken)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "NoSuchStep" in p.stdout + p.stderr, p.stdout + p.stderr
    # a shell `}}` inside a step script is an unterminated format string for OpenJD
    broken.write_text(text.replace('b=$GB_LAST', 'b=${GB_LAST}}', 1))
    p = subprocess.run([_openjd(), "check", str(broken)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "failed checks" in p.stdout + p.stderr, p.stdout + p.stderr


def test_chunk_steps_and_dependencies():
    """The chunked frame parameter is a RANGE_EXPR over chunk starts; merges depend on the
    chunks; restyle waits for the decompose merge; the single-job templates share the
    combined template's step scripts."""
    combined = {s["name"]: s for s in _load("decompose_restyle.yaml")["steps"]}
    deps = {n: [d["dependsOn"] for d in s.get("dependencies", [])] for n, s in combined.items()}
    assert deps == {"Validate": [], "DecomposeAnchors": ["Validate"], "DecomposeChunks": ["DecomposeAnchors"],
                    "DecomposeMerge": ["DecomposeChunks"], "RestyleChunks": ["DecomposeMerge"],
                    "RestyleMerge": ["RestyleChunks"]}
    anchors = combined["DecomposeAnchors"]["script"]["embeddedFiles"][0]["data"]
    assert 'farm anchors "$GB_INPUT" --out "$GB_GBUFFER_DIR"' in anchors and '"$GB_FIRST-$GB_LAST"' in anchors
    assert "parameterSpace" not in combined["DecomposeAnchors"]  # one task, before every chunk
    assert '--depth-anchors "$GB_GBUFFER_DIR/.gbuffer_depth_anchors.npz"' in \
        combined["DecomposeChunks"]["script"]["embeddedFiles"][0]["data"]
    for step in ("DecomposeChunks", "RestyleChunks"):
        (tp,) = combined[step]["parameterSpace"]["taskParameterDefinitions"]
        assert tp == {"name": "ChunkStart", "type": "INT",
                      "range": "{{Param.FirstFrame}}-{{Param.LastFrame}}:{{Param.ChunkSize}}"}
        script = combined[step]["script"]["embeddedFiles"][0]["data"]
        assert '--warmup "$GB_OVERLAP" --manifest-part' in script
        assert "--command gbuffer_editor" in script and "-m backend --json" in script
    dec = {s["name"]: s for s in _load("decompose.yaml")["steps"]}
    rs = {s["name"]: s for s in _load("restyle.yaml")["steps"]}
    assert list(dec) == ["Validate", "DecomposeAnchors", "DecomposeChunks", "DecomposeMerge"]
    assert list(rs) == ["Validate", "RestyleChunks", "RestyleMerge"]
    for single in (dec, rs):
        for name, step in single.items():
            if name != "Validate":
                assert step["script"] == combined[name]["script"], name
    assert dec["Validate"] == combined["Validate"]
    assert rs["RestyleChunks"]["dependencies"] == [{"dependsOn": "Validate"}]
    rs_script = combined["RestyleChunks"]["script"]["embeddedFiles"][0]["data"]
    assert 'restyle "$GB_GBUFFER_DIR" --no-edits' in rs_script  # the edit bake is not chunk-aware
    scene = {s["name"]: s for s in _load("scene_export.yaml")["steps"]}
    assert "--command gbuffer_editor export-scene" in scene["ExportChunks"]["script"]["embeddedFiles"][0]["data"]


def _scripts():
    for name in NAMES:
        for step in _load(name)["steps"]:
            for f in step["script"].get("embeddedFiles", []):
                yield name, step["name"], f["data"]


def test_step_scripts_are_bash_3_2_safe():
    """Issue 29: under `set -u`, bash before 4.4 (macOS ships 3.2) treats "${a[@]}" of an
    empty array as an unbound variable, so a chunk without extra options failed there. Every
    array expansion uses ${a[@]+"${a[@]}"} (empty: nothing); arrays filled by `read -a` are
    declared first. No bash 3.2 here: this checks the scripts' text, and runs the chunk
    script's option building with the bash installed (which accepts both forms)."""
    import re

    for name, step, text in _scripts():
        assert not re.search(r'"\$\{\w+\[@\]\}"(?!\})', text.replace('+"${', '+[')), (name, step)
        for arr in re.findall(r"read -r -a (\w+)", text):
            assert f"{arr}=(); read -r -a {arr}" in text, (name, step, arr)
        assert "declare -A" not in text and "mapfile" not in text and "readarray" not in text  # bash 4 only
    combined = {s["name"]: s for s in _load("decompose_restyle.yaml")["steps"]}
    chunk = combined["DecomposeChunks"]["script"]["embeddedFiles"][0]["data"]
    body = chunk.split('echo "gbuffer-farm:')[0]  # the option building, before any exec
    env = dict(os.environ, GB_CHUNK="4", GB_LAST="10", GB_OVERLAP="2", GB_ESTIMATOR="embedded",
               GB_PROCESSING_RESOLUTION="-1", GB_DECOMPOSE_ARGS="", GB_GBUFFER_DIR="/o/gb")
    p = subprocess.run(["bash", "-c", body + '\nprintf "[%s]" ${opts[@]+"${opts[@]}"} ${extra[@]+"${extra[@]}"}',
                        "chunk", "5"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("[--frames][5-8][--warmup][2][--manifest-part][--estimator][embedded][--depth-anchors]"
                        "[/o/gb/.gbuffer_depth_anchors.npz]")


def _flat(d, p=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flat(v, f"{p}/{k}")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _flat(v, f"{p}[{i}]")
    else:
        yield p, d


def _manifest(folder: Path, gbuffer_dir: Path = None) -> dict:
    """manifest.json flattened, with the input G-buffer folder's path replaced by
    ``GB`` and the input files' filesystem identities (inode, device, times) dropped:
    what is left (sha256, sizes, settings, frames) must be equal."""
    m = json.loads((folder / "manifest.json").read_text())
    out = {}
    for k, v in _flat(m):
        if gbuffer_dir is not None:
            k = k.replace(str(gbuffer_dir), "GB")
            v = v.replace(str(gbuffer_dir), "GB") if isinstance(v, str) else v
        if k.rsplit("/", 1)[-1] in ("ctime_ns", "mtime_ns", "ino", "dev", "elapsed_s", "merged_at"):
            continue
        out[k] = v
    return out


def _exrs(folder: Path, prefix: str) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.glob(f"{prefix}*.exr"))}


@pytest.mark.slow
def test_openjd_run_decompose_restyle_equals_farm_local(footage, tmp_path):
    src = footage("dolphins")
    gb, rs = tmp_path / "gb", tmp_path / "rs"
    a, b = FRAMES
    params = dict(Input=src, GBufferDir=gb, RestyleDir=rs, FirstFrame=a, LastFrame=b, ChunkSize=CHUNK,
                  Overlap=OVERLAP, ProcessingResolution=RES, Prompt="dense fog", **_runner())
    p = _run("decompose_restyle.yaml", params)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    assert "Session ended successfully" in log and "Chunks run: 10" in log  # 1 + 1 + 3 + 1 + 3 + 1
    for chunk in ("1-4", "5-8", "9-10"):
        assert f"decompose chunk {chunk} (warmup {OVERLAP}) with the cli runner" in log
        assert f"restyle chunk {chunk} (warmup {OVERLAP}) with the cli runner" in log
    assert sorted(x.name for x in (gb / ".gbuffer_parts").iterdir()) == ["1-4.json", "5-8.json", "9-10.json"]

    # the single-machine reference: the same chunk plan in one process
    ref_gb, ref_rs = tmp_path / "ref_gb", tmp_path / "ref_rs"
    for argv in (["decompose", str(src), "--out", str(ref_gb), "--processing-resolution", str(RES)],
                 ["restyle", str(ref_gb), "--out", str(ref_rs), "--prompt", "dense fog"]):
        q = subprocess.run([PY, "-m", "backend", "--json", "farm", "local", *argv, "--frames", f"{a}-{b}",
                            "--chunk", str(CHUNK), "--overlap", str(OVERLAP)],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
        assert q.returncode == 0, q.stdout + q.stderr

    got, want = _exrs(gb, "gbuffer_"), _exrs(ref_gb, "gbuffer_")
    assert len(got) == b - a + 1 and got == want
    got, want = _exrs(rs, "restyle_"), _exrs(ref_rs, "restyle_")
    assert len(got) == b - a + 1 and got == want
    assert _manifest(gb) == _manifest(ref_gb)
    assert _manifest(rs, gb) == _manifest(ref_rs, ref_gb)
    assert (rs / "preview.mp4").stat().st_size > 0

    # a second job with other settings into the same folder is refused (restyle.yaml alone)
    p = _run("restyle.yaml", dict(GBufferDir=gb, RestyleDir=rs, FirstFrame=a, LastFrame=b, ChunkSize=CHUNK,
                                  Overlap=OVERLAP, Prompt="heavy rain", **_runner()))
    log = p.stdout + p.stderr
    # (the merged manifest.json names the first job's settings; the parts would as well)
    assert p.returncode != 0 and ("holds a restyle with other settings" in log
                                  or "another farm job with other settings" in log), log[-4000:]
    assert _exrs(rs, "restyle_") == want  # nothing replaced

    # resume a failed chunk: one task of decompose.yaml, then its merge
    (gb / "gbuffer_0006.exr").unlink()
    dparams = dict(Input=src, GBufferDir=gb, FirstFrame=a, LastFrame=b, ChunkSize=CHUNK, Overlap=OVERLAP,
                   ProcessingResolution=RES, **_runner())
    p = _run("decompose.yaml", dparams, "--step", "DecomposeChunks", "--task-param", "ChunkStart=5")
    assert p.returncode == 0 and '"written": 1, "skipped": 3' in p.stdout, (p.stdout + p.stderr)[-4000:]
    p = _run("decompose.yaml", dparams, "--step", "DecomposeMerge")
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert _exrs(gb, "gbuffer_") == _exrs(ref_gb, "gbuffer_")


@pytest.mark.parametrize("bad, message", [
    (dict(ChunkSize=2, Overlap=4), "ChunkSize 2 is below the temporal Overlap 4"),
    (dict(FirstFrame=50, LastFrame=70), "frame range 50-70 is outside"),
])
def test_bad_input_fails_at_job_start(footage, tmp_path, bad, message):
    params = dict(Input=footage("dolphins"), GBufferDir=tmp_path / "gb", RestyleDir=tmp_path / "rs",
                  FirstFrame=1, LastFrame=10, ChunkSize=4, Overlap=2, **_runner())
    params.update(bad)
    p = _run("decompose_restyle.yaml", params, timeout=120)
    log = p.stdout + p.stderr
    assert p.returncode != 0, log[-4000:]
    lines = [ln for ln in log.splitlines() if "gbuffer-farm:" in ln]
    assert len(lines) == 1 and message in lines[0], log[-4000:]
    assert "Step: Validate" not in log or "Chunks run: 0" in log
    assert not (tmp_path / "gb").exists() and not (tmp_path / "rs").exists()  # no chunk ran


def test_an_empty_frame_range_is_refused_when_the_job_is_created(footage, tmp_path):
    """FirstFrame > LastFrame: OpenJD itself cannot build the chunk parameter's range, so
    the job is never created and no step runs (the Validate step checks it too)."""
    p = _run("decompose_restyle.yaml", dict(Input=footage("dolphins"), GBufferDir=tmp_path / "gb",
                                             RestyleDir=tmp_path / "rs", FirstFrame=8, LastFrame=3, **_runner()),
             timeout=120)
    log = p.stdout + p.stderr
    assert p.returncode != 0 and "Could not generate Job" in log and "Failed to create Range" in log, log[-3000:]
    assert not (tmp_path / "gb").exists()


@pytest.mark.slow
@pytest.mark.blender
def test_openjd_run_with_the_blender_runner_equals_farm_local(footage, tmp_path):
    """Runner=blender: the chunk steps run `BLENDER -b --command gbuffer_editor decompose|restyle
    ... --warmup K --manifest-part [--no-edits]`. No Blender executable on CI, so BLENDER is
    tests/blender_cli_shim.py (the extension's registered headless command in the bpy
    module, enabled from this checkout); Blender's own argument parsing is not exercised."""
    pytest.importorskip("bpy")
    src = footage("dolphins")
    blender = tmp_path / "blender"
    blender.write_text(f'#!/bin/sh\nexec "{PY}" "{Path(__file__).resolve().parent / "blender_cli_shim.py"}" "$@"\n')
    blender.chmod(0o755)
    gb, rs = tmp_path / "gb", tmp_path / "rs"
    p = _run("decompose_restyle.yaml", dict(Input=src, GBufferDir=gb, RestyleDir=rs, FirstFrame=1, LastFrame=6,
                                            ChunkSize=3, Overlap=2, ProcessingResolution=RES, Prompt="dense fog",
                                            Runner="blender", Blender=blender, **_runner()))
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    assert "decompose chunk 4-6 (warmup 2) with the blender runner" in log
    assert '"stage": "restyle"' in log  # the headless command's own JSON events
    ref_gb, ref_rs = tmp_path / "ref_gb", tmp_path / "ref_rs"
    for argv in (["decompose", str(src), "--out", str(ref_gb), "--processing-resolution", str(RES)],
                 ["restyle", str(ref_gb), "--out", str(ref_rs), "--prompt", "dense fog"]):
        q = subprocess.run([PY, "-m", "backend", "farm", "local", *argv, "--frames", "1-6", "--chunk", "3",
                            "--overlap", "2"], capture_output=True, text=True, timeout=300, cwd=REPO)
        assert q.returncode == 0, q.stdout + q.stderr
    for mine, ref, prefix in ((gb, ref_gb, "gbuffer_"), (rs, ref_rs, "restyle_")):
        got, want = _exrs(mine, prefix), _exrs(ref, prefix)
        assert len(got) == 6 and got == want
    assert _manifest(gb)["/frames[5]/file"] == "gbuffer_0006.exr"
    assert (rs / "preview.mp4").is_file()
