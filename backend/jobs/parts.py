"""Manifest parts: how farm chunks record their frames without any lock.

A farm chunk (``decompose|restyle ... --frames A-B --manifest-part``) never touches
``manifest.json`` and takes no ``flock`` (unreliable on the network file systems farms
use). It writes its own part, ``OUT/.gbuffer_parts/A-B.json``, atomically (a temporary
file in the same folder, then ``rename``), after its claim at start, while it runs and
at its end. A part is a manifest restricted to the chunk's frames plus::

    "part": {"first": A, "last": B, "frames": n, "missing": "ranges", "complete": bool},
    "shot_frames": "1-96"        every frame of the shot (the merge's completeness check)

One merge step (``python -m backend farm merge OUT``, :func:`backend.farm.merge.merge`)
assembles ``manifest.json`` from the parts; reading a folder with parts but no merged
manifest also works (:func:`backend.contract.read_manifest` assembles them in memory).

Folder rules, checked by :func:`folder_view` before a chunk writes anything:

* every part (and a merged ``manifest.json`` with frames) must carry the chunk's
  settings hash: two farm jobs with other settings in one folder are refused;
* a part whose range overlaps ``A-B`` without being exactly ``A-B`` means another
  chunking of the same shot: refused (frames computed with other chunk starts differ
  within the stated tolerance, never byte for byte).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .. import contract
from ..errors import JobError
from .outputs import _ranges, read_own_manifest

PARTS_DIR = contract.PARTS_DIR


def part_path(out: os.PathLike, first: int, last: int) -> Path:
    """``OUT/.gbuffer_parts/A-B.json``."""
    return Path(out) / PARTS_DIR / f"{int(first)}-{int(last)}.json"


def write_part(out: os.PathLike, first: int, last: int, data: Dict[str, Any]) -> Path:
    """Write the part of frames ``first..last`` atomically (temp file + ``os.replace``,
    fsynced). Raises ``OSError`` (full disk, unwritable folder)."""
    path = part_path(out, first, last)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = dict(data)
    doc.setdefault("contract_version", contract.CONTRACT_VERSION)
    text = json.dumps(doc, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp_{first}-{last}_", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, contract.default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def clean_part_temporaries(out: os.PathLike, first: int, last: int) -> None:
    """Remove this chunk's own part temporaries a hard kill left (other chunks' are kept)."""
    d = Path(out) / PARTS_DIR
    for p in d.glob(f".tmp_{int(first)}-{int(last)}_*") if d.is_dir() else ():
        try:
            p.unlink()
        except OSError:
            pass


def _overlaps(a: Tuple[int, int], b: Tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def input_identity(doc: Dict[str, Any]) -> Optional[str]:
    """What a job read, from its manifest (part): restyle's G-buffer (and reference)
    folder; decompose's source is in its settings already. ``None``: not stated."""
    inp = doc.get("input") if isinstance(doc, dict) else None
    if not isinstance(inp, dict) or not inp.get("gbuffer_dir"):
        return None
    return json.dumps([inp.get("gbuffer_dir"), inp.get("reference_dir")])


def folder_view(out: os.PathLike, shash: str, job: str, part: Tuple[int, int],
                identity: Optional[str] = None) -> Dict[str, Any]:
    """What a chunk writing frames ``part = (A, B)`` with settings hash ``shash`` finds in
    ``out``: the merged ``manifest.json`` (if ours) with every part assembled over it
    (:func:`backend.contract.assemble_parts`), as ``old_manifest`` for the runner.

    Raises:
        JobError: a part of another job or with other settings (naming it and both
            hashes); a part overlapping ``A-B`` with another range (another chunking);
            an unreadable part.
    """
    out = Path(out)
    base = read_own_manifest(out)
    if base.get("settings_hash") not in (None, shash):
        # a plain (non-farm) job's claim or result: it may be writing right now, and the
        # folder holds one set of settings (fresh-eyes trial: a chunk mixed into a plain run)
        raise JobError(f"output folder {out} holds a {base.get('job') or job} with other settings (settings "
                       f"hash {base.get('settings_hash')} in manifest.json; this chunk has {shash}); one folder "
                       f"holds one set of settings: choose another --out", file=out / "manifest.json")
    try:
        parts = contract.read_parts(out)
    except contract.ContractError as e:
        raise JobError(str(e), file=getattr(e, "file", None)) from None
    for f, d in parts:
        rel = f"{PARTS_DIR}/{f.name}"
        if d.get("job") not in (None, job):
            raise JobError(f"output folder {out} holds a {d.get('job')} farm job ({rel}); choose another --out",
                           file=f)
        if d.get("settings_hash") != shash:
            raise JobError(f"another farm job with other settings (settings hash {d.get('settings_hash')}, "
                           f"{rel}) wrote into {out}; this one has settings hash {shash}; one folder holds "
                           f"one set of settings: choose another --out", file=f)
        theirs = input_identity(d)
        if identity is not None and theirs is not None and theirs != identity:
            # restyle's settings do not name its input folder (second fresh-eyes trial:
            # chunks of two G-buffer folders merged into one shot)
            raise JobError(f"another farm job over other inputs ({json.loads(theirs)[0]}, {rel}) wrote into "
                           f"{out}; one folder holds one job's output: choose another --out", file=f)
        rng = d.get("part") or {}
        other = (rng.get("first"), rng.get("last"))
        if None not in other and other != tuple(part) and _overlaps(other, part):
            raise JobError(f"chunk {part[0]}-{part[1]} overlaps the part {other[0]}-{other[1]} ({rel}) of "
                           f"another chunking of this shot in {out}; use the same --chunk as that job, or "
                           f"choose another --out", file=f)
    if not parts:
        return base
    return contract.assemble_parts(parts, base)


def check_no_foreign_parts(out: os.PathLike, shash: str, job: str) -> None:
    """For a plain (non-farm) job: refuse a folder holding farm chunk parts of another job
    or with other settings (a chunk may be writing right now; no lock covers parts).

    Raises:
        JobError: naming the part and both settings hashes.
    """
    try:
        parts = contract.read_parts(out)
    except contract.ContractError as e:
        raise JobError(str(e), file=getattr(e, "file", None)) from None
    for f, d in parts:
        if d.get("job") not in (None, job) or d.get("settings_hash") != shash:
            raise JobError(f"output folder {out} holds farm chunks of a {d.get('job') or 'job'} with other "
                           f"settings ({PARTS_DIR}/{f.name}: settings hash {d.get('settings_hash')}; this job has "
                           f"{shash}); one folder holds one set of settings: choose another --out", file=f)


def ranges(numbers) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4, 7"`` (any order, duplicates dropped)."""
    return _ranges(sorted(set(int(n) for n in numbers)))


def parse_ranges(text: Optional[str]) -> list:
    """``"2-4, 7"`` -> ``[2, 3, 4, 7]`` (``""``/``None`` -> ``[]``)."""
    nums = []
    for piece in (text or "").split(","):
        piece = piece.strip()
        if not piece:
            continue
        a, _, b = piece.partition("-")
        nums.extend(range(int(a), int(b or a) + 1))
    return nums
