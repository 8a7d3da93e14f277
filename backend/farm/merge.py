"""``python -m backend farm merge OUT``: assemble a farm job's ``manifest.json``.

Each chunk wrote ``OUT/.gbuffer_parts/A-B.json`` (:mod:`backend.jobs.parts`). The merge
reads every part, checks they share one settings hash, unions their frame entries
(keeping only frames whose file is on disk), adds the shot-level summaries a
single-machine run computes at its end (decompose: provenance, flicker of
``--stabilize``; restyle: ``preview.mp4`` from the PNG previews and the flicker metric),
and writes ``manifest.json`` atomically. ``complete`` is true when every frame of the
shot is present. The parts stay (a re-merge gives the same manifest; a re-run chunk
updates its part).

What differs from an unchunked run's ``manifest.json`` (tests/test_farm_chunks.py):
``settings.warmup`` and so ``settings_hash`` (and the per-frame ``settings_hash`` and
``sha256``, the EXR header names the hash), ``merged_from_parts``, ``output_stats``
(each file's size, times and inode), and
``frames_incomplete_entries`` when some entries lack fields (reported, with a warning).
``output.first_frame`` is the first frame of the first chunk (the shot's), not of the
last part.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import contract, events
from ..errors import JobError
from ..input_files import is_special_file_error, read_image_bgr
from ..jobs.outputs import read_own_manifest
from ..jobs.parts import PARTS_DIR, parse_ranges, ranges


def merge(out: os.PathLike, wanted: Optional[List[int]] = None) -> Dict[str, Any]:
    """Assemble ``OUT/manifest.json`` from the manifest parts.

    Args:
        out: the farm job's output folder.
        wanted: the frame numbers the job was asked for (``farm ... --frames``); default
            every frame of the shot (``shot_frames`` of the parts).

    Returns:
        The summary ``{"event": "merged", "out", "job", "parts", "frames", "expected",
        "missing", "complete", "settings_hash"}`` (``missing``: ranges of ``wanted``
        frames absent, ``""`` when none; ``complete``: the whole shot is present).

    Raises:
        JobError: no parts; parts with different settings hashes or jobs (naming them).
    """
    from ..jobs.runner import _manifest_lock

    out = Path(out)
    if not out.is_dir():
        raise JobError(f"no manifest parts in {out / PARTS_DIR}: {out} is not a folder", file=out)
    with _manifest_lock(out):  # manifest.json is only ever written under the folder's lock
        return _merge(out, wanted)


def _merge(out: Path, wanted: Optional[List[int]]) -> Dict[str, Any]:
    try:
        parts = contract.read_parts(out)
    except contract.ContractError as e:
        if is_special_file_error(e):  # a FIFO: refused as the input it is (exit 2)
            raise
        raise JobError(str(e), file=getattr(e, "file", None)) from None
    if not parts:
        raise JobError(f"no manifest parts in {out / PARTS_DIR}: nothing to merge (chunks run with "
                       f"--manifest-part write them)", file=out)
    hashes = {d.get("settings_hash") for _, d in parts}
    jobs = {d.get("job") for _, d in parts}
    if len(hashes) > 1 or len(jobs) > 1:
        desc = ", ".join(f"{f.name}: {d.get('job')} {d.get('settings_hash')}" for f, d in parts)
        raise JobError(f"the manifest parts in {out / PARTS_DIR} come from different jobs or settings ({desc}); "
                       f"one folder holds one set of settings", file=out)
    base = read_own_manifest(out)
    man = contract.assemble_parts(parts, base)
    job = man.get("job")
    frames = [e for e in man.get("frames", []) if (out / str(e.get("file", ""))).is_file()]
    man["frames"] = frames
    present = {int(e["frame"]) for e in frames}
    shot = parse_ranges(parts[-1][1].get("shot_frames")) or sorted(present)
    missing_shot = [n for n in shot if n not in present]
    want = sorted(n for n in wanted if n in set(shot)) if wanted is not None else shot
    outside = sorted(set(wanted) - set(shot)) if wanted is not None else []
    if outside:  # said, not clipped silently (fourth hostile trial)
        events.warning(f"farm merge {out}: frames {ranges(outside)} of --frames are not in the shot (frames "
                       f"{ranges(shot)}); merged the frames in it", frame=outside[0], file=out)
    missing = [n for n in want if n not in present]
    for key in ("shot_frames", "part"):
        man.pop(key, None)
    firsts = [(d.get("part") or {}).get("first") for _, d in parts]
    firsts = [f for f in firsts if isinstance(f, int)]
    if firsts and isinstance(man.get("output"), dict) and "first_frame" in man["output"]:
        # the top level is the last part's: its first_frame was its chunk's (issue 29)
        man["output"]["first_frame"] = min(firsts + ([base["output"]["first_frame"]] if isinstance(
            (base.get("output") or {}).get("first_frame"), int) else []))
    incomplete = _incomplete_entries(frames)
    if incomplete:
        man["frames_incomplete_entries"] = ranges(incomplete)
        events.warning(f"{out}: the manifest entries of frames {ranges(incomplete)} lack fields the other frames "
                       f"have (frames written just before a chunk was killed, resumed by a plain re-run); "
                       f"delete those frame files and re-run their chunks, then merge again", file=str(out))
    man["frames_expected"] = len(shot)
    man["frames_missing"] = ranges(missing_shot)
    man["merged_from_parts"] = len(parts)
    if job == "decompose":
        _decompose_summaries(man)
    elif job == "restyle":
        _restyle_summaries(out, man, sorted(present), parts)
    man["complete"] = not missing_shot
    contract.write_manifest(out, man)
    return {"event": "merged", "out": str(out), "job": job, "parts": len(parts), "frames": len(present),
            "expected": len(want), "missing": ranges(missing), "complete": not missing_shot,
            "settings_hash": man.get("settings_hash")}


#: per-frame fields measured against the previous frame (``--stabilize``): a shot's first
#: frame and the frame after a gap have none, in a run nothing interrupted (issue 36)
PAIR_FIELDS = frozenset({"flicker_raw", "flicker", "consistent_fraction"})


def _incomplete_entries(frames: List[Dict[str, Any]]) -> List[int]:
    """Frame numbers whose entry lacks a field that most entries have (fields measured
    against the previous frame, :data:`PAIR_FIELDS`, are not required)."""
    from collections import Counter

    if len(frames) < 2:
        return []
    count = Counter(k for e in frames for k in e if k not in PAIR_FIELDS)
    common = {k for k, c in count.items() if 2 * c > len(frames)}
    return [int(e["frame"]) for e in frames if not common <= set(e)]


def _decompose_summaries(man: Dict[str, Any]) -> None:
    """What :func:`backend.jobs.decompose.decompose` adds at its end, over every frame."""
    from ..jobs.decompose import flicker_summary, provenance_summary

    man.update(provenance_summary(man.get("frames", [])))
    man.update(flicker_summary(man.get("frames", [])))


def _restyle_summaries(out: Path, man: Dict[str, Any], done: List[int], parts) -> None:
    """``preview.mp4`` from the PNG previews (all frames, in order) and the flicker metric."""
    from fractions import Fraction

    from ..jobs import restyle as rs
    from ..jobs.writers import Mp4Encoder

    man.pop("preview_mp4_wanted", None)
    wanted_mp4 = any(d.get("preview_mp4_wanted") for _, d in parts)
    bad: Dict[str, List[int]] = {}
    for _, d in parts:
        for k, v in (d.get("inputs_out_of_range") or {}).items():
            bad.setdefault(k, []).extend(parse_ranges(v))
    if bad:
        man["inputs_out_of_range"] = {k: ranges(v) for k, v in bad.items()}
    outputs = man.setdefault("outputs", {})
    pngs = [rs.preview_path(out, n) for n in done if rs.preview_path(out, n).exists()]
    if wanted_mp4 and pngs and len(pngs) == len(done):
        fps = Fraction((man.get("output") or {}).get("fps") or rs.DEFAULT_FPS)
        enc = Mp4Encoder.temporary(out, fps=fps)
        try:
            for p in pngs:
                enc.add(read_image_bgr(p)[..., ::-1])
            enc.close()
            with open(enc.path, "rb") as f:
                outputs[rs.MP4_NAME] = hashlib.sha256(f.read()).hexdigest()
            contract.write_manifest(out, dict(man, complete=False))  # checksum before the file is in place
            os.chmod(enc.path, contract.default_file_mode())
            os.replace(enc.path, out / rs.MP4_NAME)
            man["preview_mp4"] = rs.MP4_NAME
        except BaseException:
            enc.discard()
            raise
    gdir = (man.get("input") or {}).get("gbuffer_dir")
    if len(done) > 1 and gdir and Path(gdir).is_dir():
        fl = rs.flicker_metric(out, done, contract.list_frames(gdir))
        if fl:
            man["flicker"] = fl
