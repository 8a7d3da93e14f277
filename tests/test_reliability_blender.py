"""Issue 16 (4), in Blender: an image sequence numbered from 1001 with a gap keeps its
numbers in the scene (frame range, clip, compositor G-buffer node) and in what Decompose
asks the backend for. Runs in bpy 5.0.1 (.venv) and 4.5 (.venv45)."""
import io
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")

import blender_workflow_util as util  # noqa: E402
from backend import contract  # noqa: E402
from decompose_util import register_tiny  # noqa: E402
from footage_util import gradient_rgb, write_image  # noqa: E402


@pytest.fixture(scope="module")
def addon():
    mod = util.enable_addon()
    yield mod
    util.disable_addon()


def test_sequence_from_1001_with_a_gap_keeps_its_numbers_in_the_scene(addon, tmp_path):
    from backend.jobs.decompose import decompose
    from gbuffer_editor.addon import compositor
    from gbuffer_editor.addon.tracking import source_frame_number
    from gbuffer_editor.operators import decompose as dec_op

    seq = tmp_path / "seq"
    seq.mkdir()
    for i, n in enumerate((1001, 1002, 1004, 1005)):
        write_image(seq / f"shot_{n}.png", gradient_rgb(24, 32, 3 * i))
    sc = bpy.context.scene
    assert bpy.ops.gbuffer.import_footage(filepath=str(seq / "shot_1001.png")) == {"FINISHED"}
    assert (sc.frame_start, sc.frame_end) == (1001, 1005)
    clip = compositor.find_node(compositor.find_tree(sc), compositor.ROLE_SOURCE).clip
    assert clip.frame_start == 1001 and source_frame_number(clip, 4) == 1004  # clip frame 4 = file 1004
    s = sc.gbuffer_editor
    s.output_dir = str(tmp_path / "runs") + "/"
    s.use_scene_range = True
    sc.frame_start = 1002
    ctl = dec_op.GBUFFER_OT_decompose.build_job(SimpleNamespace(resume=False), bpy.context)
    req = ctl.steps[0].request
    assert req.frames == "1002-1005"  # source numbers = scene frames
    assert req.input.endswith("shot_####.png")
    # the backend run the button starts (in process here, with the tests' tiny estimator)
    register_tiny()
    gb = tmp_path / "gb"
    decompose(req.input, gb, frames="1002-1005", estimator="tiny", max_size=32, progress=io.StringIO())
    assert sorted(contract.list_frames(gb)) == [1002, 1004, 1005]
    node = dec_op.wire_gbuffers(sc, gb)
    # scene frame 1002 shows gbuffer_1002.exr, 1005 shows gbuffer_1005.exr, 1003 (the gap) none
    assert node.frame_start == 1002 and node.frame_offset == 1001 and node.frame_duration == 4
    for scene_frame in (1002, 1004, 1005):
        assert scene_frame - node.frame_start + 1 + node.frame_offset == scene_frame


def test_run_history_skips_a_fifo_manifest_instead_of_hanging(addon, tmp_path):
    """Issue 36, own hostile pass: the Restyle panel's run history read each run's
    result/manifest.json with read_text(): a FIFO there froze Blender's UI."""
    import json
    import os
    import threading

    from gbuffer_editor.operators import results

    for n in (1, 2):
        d = tmp_path / f"restyle_{n:03d}" / results.RESULT_DIR
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"prompt": "fog", "frames": [], "complete": True}))
    fifo = tmp_path / "restyle_002" / results.RESULT_DIR / "manifest.json"
    fifo.unlink()
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(results.run_history(tmp_path)), daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():  # unblock the reader before failing
        with open(fifo, "w"):
            pass
        pytest.fail("run_history waited on a FIFO")
    assert [r.number for r in got[0]] == [1]
