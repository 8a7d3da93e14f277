"""Restyle job and CLI: outputs, metadata, previews, resume, cancel, safety, errors."""
import io
import json
import shutil
import signal
import time

import numpy as np
import pytest

from backend import contract
from backend.jobs.restyle import (MP4_NAME, output_path, preview_path, read_rgba_exr, restyle)
from backend.jobs.runner import JobError
from backend.renderers.embedded import EmbeddedRenderer
from backend.renderers.prompt import PromptError
from backend.renderers.synthetic import sphere_scene
from cli_util import events, last_event, run_cli, start_cli
from gbuffer_util import decompose_manifest, make_gbuffers

F32 = np.float32


@pytest.fixture
def gb(tmp_path):
    return make_gbuffers(tmp_path / "gb")


def test_outputs_metadata_and_previews(gb, tmp_path):
    out = tmp_path / "out"
    s = io.StringIO()
    res = restyle(gb, out, "dense fog", stream=s)
    assert sorted(res.written) == [1, 2, 3]
    ev = events(s)
    assert ev[0]["event"] == "start" and ev[-1]["event"] == "done"
    assert [e["frame"] for e in ev if e["event"] == "progress"] == [1, 2, 3]
    import OpenEXR

    for n in (1, 2, 3):
        p = output_path(out, n)
        assert p.name == f"restyle_{n:04d}.exr"
        with OpenEXR.File(str(p), separate_channels=True) as f:
            assert len(f.parts) == 1
            assert set(f.channels()) == {"R", "G", "B", "A"}
        with OpenEXR.File(str(p)) as f:
            hdr = dict(f.header())
        assert hdr["restyle/prompt"] == "dense fog"
        assert json.loads(hdr["restyle/looks"]) == [{"name": "fog", "strength": 1.6}]
        assert hdr["restyle/settings_hash"] == res.settings_hash
        assert hdr["restyle/source_frame"] == f"gbuffer_{n:04d}.exr"
        # the EXR holds the renderer's output (half precision)
        frame = contract.read_frame(contract.frame_path(gb, n))
        # the header records the camera the renderer used: the G-buffer's intrinsics, not its
        # unused fallback field of view
        rec = json.loads(hdr["restyle/renderer"])
        assert rec["camera"] == "gbuffer intrinsics" and rec["fov_y_deg"] is None
        np.testing.assert_allclose(rec["intrinsics"], frame.meta["intrinsics"])
        want = EmbeddedRenderer().render(frame, "dense fog", frame_index=n - 1, time_s=(n - 1) / 24)
        np.testing.assert_allclose(read_rgba_exr(p), want, rtol=2e-3, atol=1e-3)
        png = preview_path(out, n)
        import cv2

        img = cv2.imread(str(png))
        assert img.shape == (48, 64, 3) and img.std() > 1
    man = contract.read_manifest(out)
    assert man["job"] == "restyle" and man["complete"] is True
    assert man["prompt"] == "dense fog" and man["looks"] == [{"name": "fog", "strength": 1.6}]
    assert man["look_params"]["fog_tau"] > 0
    assert man["renderer"]["name"] == "embedded"
    assert man["preview_mp4"] == MP4_NAME
    assert "output" in man["flicker"] and man["flicker"]["output"] >= 0
    import av

    with av.open(str(out / MP4_NAME)) as c:
        vs = c.streams.video[0]
        frames = [fr.to_ndarray(format="rgb24") for fr in c.decode(vs)]
        assert vs.codec_context.name == "h264" and vs.codec_context.pix_fmt == "yuv420p"
    assert len(frames) == 3 and frames[0].shape == (48, 64, 3)


def test_odd_size_mp4_is_padded(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=2, h=35, w=51)
    out = tmp_path / "out"
    restyle(gb, out, "underwater", stream=io.StringIO())
    import av

    with av.open(str(out / MP4_NAME)) as c:
        frames = [fr.to_ndarray(format="rgb24") for fr in c.decode(video=0)]
    assert len(frames) == 2 and frames[0].shape == (36, 52, 3)
    assert read_rgba_exr(output_path(out, 1)).shape == (35, 51, 3)


def test_resume_skips_and_settings_change_rerenders(gb, tmp_path):
    out = tmp_path / "out"
    restyle(gb, out, "fog", stream=io.StringIO())
    mtimes = {n: output_path(out, n).stat().st_mtime_ns for n in (1, 2, 3)}
    s = io.StringIO()
    res = restyle(gb, out, "fog", stream=s)
    assert res.written == [] and sorted(res.skipped) == [1, 2, 3]
    assert all(e.get("skipped") for e in events(s) if e["event"] == "progress")
    assert {n: output_path(out, n).stat().st_mtime_ns for n in (1, 2, 3)} == mtimes
    # editing one input frame changes its fingerprint (issue 16: per frame, by content):
    # that frame is stale, so the same folder is refused without overwrite (naming it),
    # and only that frame re-renders with it; the valid frames 1 and 3 are kept
    f = contract.read_frame(contract.frame_path(gb, 2))
    f.albedo = np.clip(f.albedo * 1.5, 0, 1).astype(F32)
    time.sleep(0.01)
    contract.write_frame(contract.frame_path(gb, 2), f)
    with pytest.raises(JobError, match=r"input of 1 restyle frame.*frames 2;.*--overwrite"):
        restyle(gb, out, "fog", stream=io.StringIO())
    res = restyle(gb, out, "fog", stream=io.StringIO(), overwrite=True)
    assert sorted(res.written) == [2] and sorted(res.skipped) == [1, 3]
    assert {n: output_path(out, n).stat().st_mtime_ns for n in (1, 3)} == {n: mtimes[n] for n in (1, 3)}
    # another prompt re-renders too
    res = restyle(gb, out, "snow", stream=io.StringIO(), overwrite=True)
    assert sorted(res.written) == [1, 2, 3]
    assert contract.read_manifest(out)["prompt"] == "snow"


def test_frame_range(gb, tmp_path):
    out = tmp_path / "out"
    res = restyle(gb, out, "night", frames="2-3", stream=io.StringIO())
    assert sorted(res.written) == [2, 3]
    assert not output_path(out, 1).exists()
    with pytest.raises(ValueError, match="starts past the end: .* has frames 1-3"):
        restyle(gb, tmp_path / "o2", "night", frames="7-9", stream=io.StringIO())


def test_refuses_to_overwrite_input(gb, tmp_path):
    before = sorted(p.name for p in gb.iterdir())
    with pytest.raises(JobError, match="refusing"):
        restyle(gb, gb, "fog", stream=io.StringIO())
    with pytest.raises(JobError, match="refusing"):
        restyle(gb, gb / "sub", "fog", stream=io.StringIO())
    assert sorted(p.name for p in gb.iterdir()) == before


def test_bad_prompt_fails_before_writing(gb, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(PromptError, match="--renderer controlnet"):
        restyle(gb, out, "a cyberpunk city", stream=io.StringIO())
    assert not out.exists() or not any(out.iterdir())


def test_corrupt_input_names_file_and_frame(gb, tmp_path):
    bad = contract.frame_path(gb, 2)
    bad.write_bytes(b"not an exr")
    out = tmp_path / "out"
    with pytest.raises(JobError) as ei:
        restyle(gb, out, "fog", stream=io.StringIO())
    assert ei.value.frame == 2 and "gbuffer_0002.exr" in str(ei.value)
    assert output_path(out, 1).exists() and not output_path(out, 2).exists()
    assert not list(out.glob(".tmp*"))


def test_cli_success_and_errors(gb, tmp_path):
    out = tmp_path / "cli_out"
    r = run_cli("restyle", gb, "--prompt", "light fog at golden hour", "--out", out, "--no-mp4")
    assert r.returncode == 0, r.stderr
    lines = events(r.stdout)
    assert lines[-1]["event"] == "done" and lines[-1]["written"] == 3
    assert not (out / MP4_NAME).exists() and output_path(out, 3).exists()
    r = run_cli("restyle", gb, "--prompt", "cyberpunk neon", "--out", tmp_path / "x")
    assert r.returncode == 2
    err = last_event(r.stdout)
    assert err["event"] == "error" and "controlnet" in err["message"] and "cyberpunk" in err["message"]
    r = run_cli("restyle", gb, "--prompt", "fog", "--out", gb)
    assert r.returncode == 1 and "refusing" in r.stderr
    r = run_cli("restyle", gb, "--prompt", "fog", "--out", tmp_path / "y", "--renderer", "nope")
    assert r.returncode == 2 and "unknown renderer" in r.stderr
    r = run_cli("restyle", gb, "--prompt", "fog", "--out", tmp_path / "z", "--option", "source_light=0.0",
                "--device", "cpu", "--frames", "1")
    assert r.returncode == 0, r.stderr
    assert "ignored" in r.stderr
    man = contract.read_manifest(tmp_path / "z")
    assert man["renderer"]["settings"]["overrides"] == {"source_light": 0.0}


def test_cli_cancel_keeps_only_complete_frames(tmp_path):
    # big enough frames that the job cannot finish between the first progress line and
    # the signal (~40 ms per frame, ~1.5 s for the rest)
    gb = make_gbuffers(tmp_path / "gb", n=40, h=176, w=240)
    out = tmp_path / "out"
    p = start_cli("restyle", gb, "--prompt", "underwater", "--out", out)
    for line in p.stdout:
        if json.loads(line).get("event") == "progress":
            break
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=120)
    assert p.returncode == 130
    assert last_event(rest)["event"] == "cancelled"
    done = sorted(out.glob("restyle_*.exr"))
    assert 1 <= len(done) < 40
    for f in done:
        assert read_rgba_exr(f).shape == (176, 240, 3)
    assert not list(out.glob(".tmp*"))
    # resume finishes the rest without redoing the complete ones
    res = restyle(gb, out, "underwater", stream=io.StringIO(), mp4=False, flicker=False)
    assert len(res.skipped) == len(done) and len(res.written) == 40 - len(done)


def test_real_footage_fog_and_underwater(tmp_path, footage):
    """Boat clip at reduced size with a crude ground-plane depth: fog veils far more than near,
    underwater turns the frame blue-green and removes red with distance."""
    from backend.footage import open_footage
    from backend.geometry import intrinsics_from_fov, normals_from_depth

    gb = tmp_path / "boat_gb"
    gb.mkdir()
    with open_footage(footage("boat"), max_size=160) as fo:
        for sf in fo:
            if sf.index >= 2:
                break
            rgb = sf.rgb
            h, w = rgb.shape[:2]
            intr = intrinsics_from_fov(w, h, 60.0)
            rows = np.arange(h, dtype=F32)[:, None] + 0.5
            hz = 0.42 * h
            metres = np.where(rows > hz + 1, np.minimum(1.5 * intr[1] / np.maximum(rows - hz, 1e-3), 150.0), 150.0)
            metres = np.broadcast_to(metres, (h, w)).astype(F32)
            depth = (1.0 + (metres - metres.min()) / (metres.max() - metres.min()) * 99.0).astype(F32)
            f = contract.GBufferFrame(
                combined=np.concatenate([rgb, np.ones((h, w, 1), F32)], -1), depth=depth,
                normal=normals_from_depth(metres, intr).astype(F32), albedo=np.clip(rgb, 0, 1),
                metallic=np.zeros((h, w), F32), roughness=np.full((h, w), 0.5, F32),
                meta=contract.make_meta(estimator="test", intrinsics=intr, timestamp=sf.pts_s))
            contract.write_frame(contract.frame_path(gb, sf.index + 1), f)
    src = contract.read_frame(contract.frame_path(gb, 1)).combined[..., :3]
    h = src.shape[0]
    top, bottom = slice(0, int(0.35 * h)), slice(int(0.8 * h), h)
    restyle(gb, tmp_path / "fog", "dense fog", stream=io.StringIO())
    fog = read_rgba_exr(output_path(tmp_path / "fog", 1))
    # contrast (std of luminance) kept near, crushed far
    lum = lambda x: x @ np.array([0.2126, 0.7152, 0.0722], F32)  # noqa: E731
    keep_far = lum(fog[top]).std() / lum(src[top]).std()
    keep_near = lum(fog[bottom]).std() / lum(src[bottom]).std()
    assert keep_far < 0.35 and keep_near > 0.6 and keep_near > 2 * keep_far
    restyle(gb, tmp_path / "uw", "underwater", stream=io.StringIO())
    uw = read_rgba_exr(output_path(tmp_path / "uw", 1))
    m = uw.reshape(-1, 3).mean(0)
    assert m[2] > m[0] * 3 and m[1] > m[0] * 3
    assert uw[top, :, 0].mean() / uw[top, :, 2].mean() < uw[bottom, :, 0].mean() / uw[bottom, :, 2].mean()


def test_alpha_is_kept_and_rgb_premultiplied(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=1)
    f = contract.read_frame(contract.frame_path(gb, 1))
    f.combined[:, :32, 3] = 0.5
    f.combined[:, :32, :3] *= 0.5  # premultiplied source
    contract.write_frame(contract.frame_path(gb, 1), f)
    out = tmp_path / "out"
    restyle(gb, out, "", stream=io.StringIO(), mp4=False)
    chans, _ = contract.read_channels(output_path(out, 1))
    np.testing.assert_allclose(chans["A"][:, :32], 0.5)
    np.testing.assert_allclose(chans["A"][:, 32:], 1.0)
    straight = EmbeddedRenderer().render(contract.read_frame(contract.frame_path(gb, 1)), "")
    np.testing.assert_allclose(chans["R"][:, :32].astype(F32), 0.5 * straight[:, :32, 0], rtol=3e-3, atol=1e-3)
    # the straight colour under alpha 0.5 is the same as the opaque render of the same pixels
    f.combined[:, :32, :3] *= 2.0
    f.combined[:, :32, 3] = 1.0
    opaque = EmbeddedRenderer().render(f, "")
    np.testing.assert_allclose(straight, opaque, rtol=1e-4, atol=1e-4)


def test_flicker_measured_in_run_equals_from_disk(gb, tmp_path):
    from backend.jobs.restyle import flicker_metric

    out = tmp_path / "out"
    restyle(gb, out, "underwater", stream=io.StringIO(), mp4=False)
    in_run = contract.read_manifest(out)["flicker"]
    from_disk = flicker_metric(out, [1, 2, 3], contract.list_frames(gb))
    assert set(in_run["per_frame"]) == {"2", "3"}
    # in-run values use the float output, disk values the half-float EXR
    assert in_run["output"] == pytest.approx(from_disk["output"], abs=2e-3)
    assert in_run["source"] == pytest.approx(from_disk["source"], abs=1e-6)
    assert from_disk["output"] > 0


def test_reference_folder(gb, tmp_path):
    edited = tmp_path / "edited"
    edited.mkdir()
    for n, p in contract.list_frames(gb).items():
        f = contract.read_frame(p)
        f.albedo = np.clip(f.albedo * 0.5, 0, 1).astype(F32)  # the artist darkened everything
        contract.write_frame(contract.frame_path(edited, n), f)
    plain = restyle(edited, tmp_path / "plain", "", stream=io.StringIO(), mp4=False)
    ref = restyle(edited, tmp_path / "ref", "", stream=io.StringIO(), mp4=False, reference_dir=gb)
    base = restyle(gb, tmp_path / "base", "", stream=io.StringIO(), mp4=False)
    assert plain.settings_hash != ref.settings_hash
    surf = contract.read_frame(contract.frame_path(gb, 1)).confidence > 0
    m = {k: read_rgba_exr(output_path(tmp_path / k, 1))[surf].mean() for k in ("plain", "ref", "base")}
    # issue 39: with the reference the edit acts through its difference (albedo x0.5: half
    # the footage's diffuse); without it nothing says the folder was edited: the footage
    assert m["ref"] < m["plain"] == pytest.approx(m["base"], rel=1e-6)
    assert 0.45 < m["ref"] / m["base"] < 0.55
    # a folder recording where it was edited from (the add-on's manifest edited_from) uses it
    contract.write_manifest(edited, {"job": "edit", "edited_from": str(gb)})
    rec = restyle(edited, tmp_path / "rec", "", stream=io.StringIO(), mp4=False)
    assert read_rgba_exr(output_path(tmp_path / "rec", 1))[surf].mean() == pytest.approx(m["ref"], rel=1e-6)
    assert contract.read_manifest(tmp_path / "rec")["input"]["reference_dir"] == str(gb.resolve())
    assert rec.settings_hash == ref.settings_hash
    # ... and says what cannot be local when that folder is gone
    contract.write_manifest(edited, {"job": "edit", "edited_from": str(tmp_path / "gone")})
    s = io.StringIO()
    restyle(edited, tmp_path / "gone_out", "", stream=s, mp4=False)
    warned = [e["message"] for e in events(s) if e["event"] == "warning"]
    assert any("cannot act locally" in w and "--reference" in w for w in warned), warned
    (edited / "manifest.json").unlink()
    # no manifest, but the frames say they were edited (the add-on's bake stamps gbuffer/edited)
    for n, p in contract.list_frames(edited).items():
        f = contract.read_frame(p)
        f.meta = dict(f.meta, edited=True)
        contract.write_frame(p, f)
    s = io.StringIO()
    restyle(edited, tmp_path / "stamped_out", "", stream=s, mp4=False)
    warned = [e["message"] for e in events(s) if e["event"] == "warning"]
    assert any("gbuffer/edited" in w and "cannot act locally" in w for w in warned), warned
    assert contract.read_manifest(tmp_path / "ref")["input"]["reference_dir"] == str(gb.resolve())
    with pytest.raises(JobError, match="refusing"):
        restyle(edited, gb / "out", "", stream=io.StringIO(), reference_dir=gb)
    r = run_cli("restyle", edited, "--prompt", "fog", "--out", tmp_path / "cli", "--reference", gb,
                "--no-mp4")
    assert r.returncode == 0, r.stderr
    contract.frame_path(gb, 3).unlink()
    with pytest.raises(JobError, match="no frame 3"):
        restyle(edited, tmp_path / "x", "", stream=io.StringIO(), reference_dir=gb)


def test_mp4_streamed_in_one_run_and_rebuilt_after_a_partial_resume(tmp_path):
    """The MP4 is encoded while frames are written; when a run covers only part of the
    folder (here frames 2-3 after an earlier run of frame 1), it is rebuilt from all
    previews, so it always shows every frame in the folder, in order."""
    import av

    gb = make_gbuffers(tmp_path / "gb", n=3, h=32, w=48)
    out = tmp_path / "out"
    restyle(gb, out, "underwater", frames="1-1", stream=io.StringIO())
    res = restyle(gb, out, "underwater", stream=io.StringIO())
    assert res.skipped == [1] and res.written == [2, 3]
    with av.open(str(out / MP4_NAME)) as c:
        frames = [fr.to_ndarray(format="rgb24").astype(float) for fr in c.decode(video=0)]
    assert len(frames) == 3
    import cv2

    for n, f in zip((1, 2, 3), frames):  # each MP4 frame matches its PNG preview (lossy codec)
        png = cv2.imread(str(preview_path(out, n)))[..., ::-1].astype(float)
        assert np.abs(f - png).mean() < 6
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp")]
    # a fresh, complete run streams it: same frame count, no leftovers
    out2 = tmp_path / "out2"
    restyle(gb, out2, "underwater", stream=io.StringIO())
    with av.open(str(out2 / MP4_NAME)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 3
    assert not [p.name for p in out2.iterdir() if p.name.startswith(".tmp")]


def test_frames_of_different_sizes_are_refused_naming_the_input(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=2)
    f = sphere_scene(40, 56, sphere_center=(0.0, 1.0, -6.0))
    contract.write_frame(contract.frame_path(gb, 3), f)
    out = tmp_path / "out"
    with pytest.raises(JobError) as ei:
        restyle(gb, out, "dense fog", stream=io.StringIO())
    e = ei.value
    assert e.frame == 3 and e.file == str(contract.frame_path(gb, 3))
    assert str(e) == (f"G-buffer frame 3 ({contract.frame_path(gb, 3)}) is 56x40 but frame 1 "
                      f"({contract.frame_path(gb, 1)}) is 64x48: every frame of a sequence must have the same size")
    assert not output_path(out, 3).exists()


def test_gap_in_frame_numbers_warns(tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=5)
    contract.frame_path(gb, 2).unlink()
    contract.frame_path(gb, 4).unlink()
    decompose_manifest(gb)  # a sequence with gaps, as decompose lists it
    s = io.StringIO()
    res = restyle(gb, tmp_path / "out", "dense fog", stream=s, frames="1-5")
    assert res.written == [1, 3, 5]
    (w,) = [e for e in events(s) if e["event"] == "warning"]
    assert "has no G-buffer frame 2, 4 between 1 and 5" in w["message"] and w["frame"] == 2
    assert w["file"] == str(gb)
    # a range that avoids the gap does not warn
    s = io.StringIO()
    restyle(gb, tmp_path / "out2", "dense fog", stream=s, frames="3-3")
    assert not [e for e in events(s) if e["event"] == "warning"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_pass_is_refused(tmp_path, bad):
    gb = make_gbuffers(tmp_path / "gb", n=3)
    p = contract.frame_path(gb, 2)
    f = contract.read_frame(p)
    f.roughness[5, 7] = bad  # as an edited EXR might hold
    contract.write_frame(p, f, validate=False)
    with pytest.raises(JobError) as ei:
        restyle(gb, tmp_path / "out", "dense fog", stream=io.StringIO())
    assert str(ei.value) == f"pass Roughness of {p} (frame 2) contains NaN or Inf; fix or re-export that G-buffer frame"
    assert ei.value.frame == 2 and ei.value.file == str(p)


def test_prompt_without_a_look_word_warns(gb, tmp_path):
    """"the" or "very" are known words but name no look: the job relights the frames
    unchanged in look, and says so (fresh-eyes trial: accepted silently before)."""
    buf = io.StringIO()
    res = restyle(gb, tmp_path / "o", "the very", frames="1", stream=buf, mp4=False)
    assert res.written == [1]
    warns = [e["message"] for e in events(buf) if e["event"] == "warning"]
    assert any("prompt 'the very' names no look" in w for w in warns), warns
    buf = io.StringIO()
    restyle(gb, tmp_path / "o2", "dense fog", frames="1", stream=buf, mp4=False)
    assert not [e for e in events(buf) if e["event"] == "warning" and "names no look" in e["message"]]
    buf = io.StringIO()
    restyle(gb, tmp_path / "o3", "", frames="1", stream=buf, mp4=False)  # empty: plain relight, no warning
    assert not [e for e in events(buf) if e["event"] == "warning" and "names no look" in e["message"]]


def test_non_finite_reference_pass_is_refused(tmp_path):
    """Second fresh-eyes trial: NaN in a ``--reference`` frame rendered an all-black frame
    with no message (the same NaN in the restyled G-buffers is an error)."""
    gb = make_gbuffers(tmp_path / "gb", n=3)
    ref = make_gbuffers(tmp_path / "ref", n=3)
    p = contract.frame_path(ref, 2)
    f = contract.read_frame(p)
    f.albedo[5, 7, 1] = np.nan
    contract.write_frame(p, f, validate=False)
    with pytest.raises(JobError) as ei:
        restyle(gb, tmp_path / "out", "dense fog", reference_dir=ref, stream=io.StringIO())
    assert "pass Albedo of the reference frame" in str(ei.value) and str(p) in str(ei.value)
    assert ei.value.frame == 2 and ei.value.file == str(p)


def test_no_mp4_overwrite_does_not_list_the_removed_mp4(tmp_path):
    """Second fresh-eyes trial: ``--no-mp4 --overwrite`` after an edit removed the earlier
    preview.mp4 but the manifest still listed it (and its checksum)."""
    gb = make_gbuffers(tmp_path / "gb", n=3)
    out = tmp_path / "out"
    restyle(gb, out, "dense fog", stream=io.StringIO())
    man = contract.read_manifest(out)
    assert man["preview_mp4"] == "preview.mp4" and "preview.mp4" in man["outputs"]
    restyle(gb, out, "light rain", stream=io.StringIO(), mp4=False, overwrite=True)
    man = contract.read_manifest(out)
    assert not (out / "preview.mp4").exists()
    assert "preview_mp4" not in man and "preview.mp4" not in man["outputs"] and man["complete"] is True


def test_unknown_unedited_passes_are_warned_once_with_what_to_do(gb, tmp_path):
    """Issue 39 trial: an edited folder with no --reference and no recorded source gave
    the footage back with only 'no manifest.json (deleted?)'. Whenever the unedited passes
    are unknown, one warning says the passes are taken as unedited and what to pass."""
    def warned(folder, out):
        s = io.StringIO()
        restyle(folder, tmp_path / out, "", stream=s, mp4=False)
        return [e["message"] for e in events(s) if e["event"] == "warning"]

    said = "taken as unedited, so material edits in them have no effect"
    assert not any(said in w for w in warned(gb, "as_written"))  # decompose's folder as written
    edited = tmp_path / "edited"
    edited.mkdir()
    for n, p in contract.list_frames(gb).items():  # edited by a script, decompose's headers kept
        f = contract.read_frame(p)
        f.roughness[10:20, 10:30] = 0.05  # a box edit (changes the file size)
        contract.write_frame(contract.frame_path(edited, n), f)
    got = [w for w in warned(edited, "no_manifest") if said in w]
    assert len(got) == 1 and "--reference UNEDITED_FOLDER" in got[0] and "no manifest.json" in got[0], got
    # edited in place: the manifest's sizes no longer match
    shutil.copy(gb / "manifest.json", edited / "manifest.json")
    got = [w for w in warned(edited, "in_place") if said in w]
    assert len(got) == 1 and "is not the file decompose wrote" in got[0], got
