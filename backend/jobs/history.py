"""Temporal history across a resume (``decompose --stabilize``): what a resumed run cannot
make equal to one uninterrupted run, said instead of hidden.

Under temporal stabilisation each frame carries the history of the frames before it. A
resume keeps the frames whose settings and input match (their files are seeded from, so
an interrupted run resumes byte-identically). But when this run *computes* a frame that
comes before frames it *keeps* (``--frames 11-20`` then the whole shot; a changed source
frame; a missing frame restored), the kept frames were stabilised against a history this
run did not give them, and the frames computed after them continue from them. Those frames
are named in one ``warning`` and in the manifest's ``temporal_history_stale`` (frame
ranges); the folder is then not what one uninterrupted run gives. Deleting the named frames
and running again makes it so (docs/reliability.md, resume rule 6).
"""
from __future__ import annotations

from typing import Iterable, List

from .. import contract, events
from .parts import ranges


def stale_history(written: Iterable[int], skipped: Iterable[int]) -> List[int]:
    """Frames whose temporal history differs from one uninterrupted run: kept (skipped)
    frames after the first frame computed in this run, and computed frames after the first
    of those (they continue from them). Sorted; empty when the run is a plain resume
    (every kept frame comes before every computed one) or computed nothing."""
    written, skipped = sorted(written), sorted(skipped)
    if not written:
        return []
    kept = [n for n in skipped if n > written[0]]
    if not kept:
        return []
    return sorted(kept + [n for n in written if n > kept[0]])


def note_stale_history(result, stabilize: bool, write_manifest: bool = True) -> List[int]:
    """Warn (and record ``temporal_history_stale`` in the manifest) when this decompose run
    left frames with a temporal history other than one uninterrupted run's; returns them."""
    if not stabilize:
        return []
    stale = stale_history(result.written, result.skipped)
    if not stale:
        return []
    kept = [n for n in stale if n in set(result.skipped)]
    events.warning(
        f"--stabilize: frames {ranges(kept)} were kept from an earlier run, but frames before them were computed "
        f"in this one ({ranges([n for n in result.written if n < kept[0]])}): their temporal history changed, so "
        f"frames {ranges(stale)} are not what one uninterrupted run gives (manifest temporal_history_stale); "
        f"delete those frames and run again to get it", frame=kept[0], file=result.out_dir)
    if write_manifest and isinstance(result.manifest, dict):
        result.manifest["temporal_history_stale"] = ranges(stale)
        contract.write_manifest(result.out_dir, result.manifest)
    return stale
