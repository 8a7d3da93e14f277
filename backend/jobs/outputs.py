"""Earlier outputs in a job's output folder: what is ours, what is stale, what may go.

Re-running a job into a folder it already wrote resumes it: a frame whose file carries
the current settings hash *and* the fingerprint of the input it was computed from
(:mod:`backend.jobs.fingerprint`) is kept. Everything else in the folder falls into one
of these cases, decided by :func:`check_previous_outputs` before anything is written:

* **Ours, stale** (written with other settings, or from an input that changed since):
  refused, naming the frames and the cause, unless ``overwrite``; then exactly those
  frames, their companions (e.g. ``preview/restyle_NNNN.png``), the folder-level
  extras (``preview.mp4``) and a stale ``manifest.json`` are removed. Frames that are
  current stay, with or without ``overwrite``.
* **Not ours**: a file is ours only when its name is one the job writes
  (``gbuffer_NNNN.exr``, ``restyle_NNNN.exr``, ``preview/restyle_NNNN.png``,
  ``preview.mp4``, ``manifest.json``) *and* its SHA-256 is the one recorded in the
  folder's ``manifest.json`` when it was written (a frame written in the last moments
  before a hard kill, not yet recorded, is recognised by the settings stamp in its own
  header instead; an unrecorded companion beside such a frame likewise). A file with one
  of our names that is not ours (the user's ``preview.mp4``, an edited frame, a plain
  EXR) is never replaced or removed, with or without ``overwrite``: the job refuses,
  naming it. This holds for current frames too: a recorded frame or preview whose bytes
  changed since (an edit in place with our header kept, a file cut short) is the user's,
  so a plain resume refuses it as well (docs/reliability.md, "the one rule"); checksums
  are re-computed only for files whose identity (:func:`stat_key`) changed since they
  were last verified. A ``manifest.json`` this product did not write is refused the same way.
  Names the manifest lists that are not ours (``notes.txt``, a clip backup) are never
  even looked at.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from .. import contract, events
from ..errors import JobError
from ..input_files import is_special_file_error, load_json, native_path, refuse_special
from .fingerprint import file_sha256

#: the ``producer`` field of every manifest this product writes
PRODUCER = "gbuffer-editor"
#: top-level manifest field: output file (relative path) -> the file's identity when its
#: checksum was last verified (see :func:`stat_key`), so a resume re-hashes only files
#: whose identity changed
STATS = "output_stats"


def stat_key(p: Path) -> Dict[str, int]:
    """``{"size", "mtime_ns", "ctime_ns", "ino"}`` of ``p`` (the fields of the manifest's
    ``inputs`` cache): changes whenever the file is written, replaced or touched
    (restoring the old mtime changes the ctime).

    Raises:
        OSError: ``p`` cannot be stat'ed.
    """
    st = Path(p).stat()
    return {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns), "ctime_ns": int(st.st_ctime_ns),
            "ino": int(st.st_ino)}


def frame_prefix(path_for: Callable[[int], Path]) -> Optional[str]:
    """The file-name prefix of a job's frames (``gbuffer_``, ``restyle_``) from its
    ``path_for`` (frame number -> path), or ``None`` when it does not follow
    ``<prefix><number>.exr``."""
    m = contract._FRAME_RE.match(Path(path_for(1)).name)
    return m.group("prefix") if m else None


def read_own_manifest(out: Path) -> Dict[str, Any]:
    """``manifest.json`` of ``out`` when this product wrote it; ``{}`` when absent.

    Ours: a JSON object with ``producer`` = :data:`PRODUCER`, or (older versions) with
    ``job`` and ``settings_hash``.

    Raises:
        JobError: the file is unreadable, not JSON, or not ours (naming it); it is
            never replaced.
    """
    p = Path(out) / "manifest.json"
    if not p.exists() and not p.is_symlink():
        return {}
    why = None
    try:
        data = load_json(p, "the output folder's manifest")  # a FIFO: InputError, never waited on
    except (OSError, ValueError) as e:
        if is_special_file_error(e):
            raise
        data, why = None, f"not readable as JSON: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    if why is None and not (isinstance(data, dict) and (
            data.get("producer") == PRODUCER or ("job" in data and "settings_hash" in data))):
        why = "not written by this product"
    if why is not None or p.is_symlink():
        raise JobError(f"output folder {out} holds a manifest.json this product did not write ({p}: "
                       f"{why or 'a symbolic link'}); it is never replaced: move it away or choose "
                       f"another --out", file=p)
    return data


def _entries(old: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    """Frame number -> entry of a manifest's ``frames`` list (anything malformed is skipped)."""
    out: Dict[int, Dict[str, Any]] = {}
    frames = old.get("frames")
    for e in frames if isinstance(frames, list) else ():
        try:
            if isinstance(e, dict):
                out[int(e["frame"])] = e
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _safe(fn, *a):
    try:
        return fn(*a)
    except Exception:  # noqa: BLE001 - unreadable: unknown
        return None


class Ledger:
    """What the old manifest says we wrote, and checks against the files on disk."""

    def __init__(self, out: Path, old: Dict[str, Any], path_for: Callable[[int], Path],
                 read_hash: Optional[Callable[[Path], Optional[str]]]):
        self.out, self.old, self.path_for, self.read_hash = Path(out), old, path_for, read_hash
        self.entries = _entries(old)
        stats = old.get(STATS)
        #: verified identities; updated in place (``old`` keeps them for the run's manifest)
        self.stats: Dict[str, Dict[str, int]] = stats if isinstance(stats, dict) else {}
        if isinstance(old, dict) and old and not isinstance(stats, dict):
            old[STATS] = self.stats
        outs = old.get("outputs")
        self.outputs: Dict[str, str] = dict(outs) if isinstance(outs, dict) else {}
        for e in self.entries.values():
            comp = e.get("companions")
            if isinstance(comp, dict):
                self.outputs.update({k: v for k, v in comp.items() if isinstance(v, str)})

    def frames_on_disk(self) -> Dict[int, Path]:
        """Frame number -> file of every file with one of this job's frame names."""
        found: Dict[int, Path] = {}
        prefix = frame_prefix(self.path_for)
        folder = Path(self.path_for(1)).parent
        if prefix is not None and folder.is_dir():
            found.update(contract.list_frames(folder, prefix))
        for n in self.entries:  # other name schemes: exactly the job's name for that number
            p = Path(self.path_for(n))
            if n not in found and p.is_file():
                found[n] = p
        for n, p in list(found.items()):  # e.g. gbuffer_01.exr beside gbuffer_0001.exr
            if Path(self.path_for(n)).name != p.name:
                del found[n]
        return dict(sorted(found.items()))

    def stored_hash(self, n: int, p: Path) -> Optional[str]:
        stored = _safe(self.read_hash, p) if self.read_hash is not None else None
        return stored if stored is not None else self.entries.get(n, {}).get("settings_hash")

    def frame_is_ours(self, n: int, p: Path) -> bool:
        """Recorded with a checksum that matches; or (not recorded: a hard kill came
        before the manifest was written) stamped with a settings hash in its header."""
        rec = self.entries.get(n, {}).get("sha256")
        if isinstance(rec, str):
            return _safe(file_sha256, p) == rec
        if self.read_hash is None or _safe(self.read_hash, p) is None:
            return False
        # a copy of one of our frames under another number (second fresh-eyes trial: cp
        # restyle_1002.exr restyle_1003.exr was removed by --overwrite) is the user's file
        stamped = _safe(_stamped_number, p)
        return stamped is None or stamped == n

    def changed_since(self, p: Path, recorded: Optional[str]) -> bool:
        """``p`` exists, a checksum was recorded for it, and its bytes are no longer those
        (hashed only when its identity changed since the last check: :func:`stat_key`)."""
        if not isinstance(recorded, str):
            return False
        rel = _rel(self.out, p)
        key = _safe(stat_key, p)
        if key is not None and self.stats.get(rel) == key:
            return False
        if _safe(file_sha256, p) != recorded:
            return True
        if key is not None:
            self.stats[rel] = key  # touched or copied back: the same bytes, ours
        return False

    def frame_changed(self, n: int, p: Path) -> bool:
        """Frame ``n``'s file ``p`` is not the one recorded for it (edited, cut, replaced)."""
        return self.changed_since(p, self.entries.get(n, {}).get("sha256"))

    def file_is_ours(self, p: Path, frame: Optional[int] = None) -> bool:
        """A companion or extra file: its recorded checksum matches (a companion not yet
        recorded beside a frame that is ours counts too: a hard kill's leftover)."""
        rel = _rel(self.out, p)
        rec = self.outputs.get(rel)
        if isinstance(rec, str):
            return _safe(file_sha256, p) == rec
        if frame is not None:
            fp = Path(self.path_for(frame))
            return fp.is_file() and self.frame_is_ours(frame, fp) and frame not in self.entries
        return False


def _stamped_number(p: Path) -> Optional[int]:
    """The frame number our header stamped into frame file ``p`` (decompose:
    ``gbuffer/frame_number``; restyle: the number in ``restyle/source_frame``), or None."""
    import re

    import OpenEXR

    def text(v):
        return v.decode() if isinstance(v, bytes) else v

    refuse_special(p, "the frame file")
    with OpenEXR.File(native_path(p), header_only=True) as f:  # the header reads only while open
        h = f.header()
        number, source = text(h.get(contract.HEADER_PREFIX + "frame_number")), text(h.get("restyle/source_frame"))
    if number is not None:
        return int(json.loads(number)) if isinstance(number, str) else int(number)
    v = source
    m = re.search(r"(\d+)\.exr$", v or "")
    return int(m.group(1)) if m else None


def _rel(out: Path, p: Path) -> str:
    """``p`` relative to ``out`` (symlinks and relative paths resolved), POSIX style."""
    import os

    p = Path(p)  # the name itself, not where a symbolic link points
    return Path(os.path.relpath(os.path.join(os.path.realpath(p.parent), p.name), os.path.realpath(out))).as_posix()


def _names(paths) -> str:
    names = [str(p) for p in paths]
    return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")


def check_previous_outputs(
    out: Path,
    shash: str,
    old_manifest: Dict[str, Any],
    *,
    job: str,
    path_for: Callable[[int], Path],
    read_hash: Optional[Callable[[Path], Optional[str]]] = None,
    overwrite: bool = False,
    companions: Optional[Callable[[int], Sequence[Path]]] = None,
    extra_outputs: Sequence[Path] = (),
    read_input: Optional[Callable[[Path], Optional[str]]] = None,
    input_for: Optional[Callable[[int], Optional[str]]] = None,
    numbers: Optional[Sequence[int]] = None,
) -> List[Path]:
    """Refuse (or, with ``overwrite``, clear) earlier outputs that are stale; always
    refuse to write over files that are not ours (see the module docstring).

    Args:
        out: the output folder (exists).
        shash: the current settings hash.
        old_manifest: ``manifest.json`` of ``out`` as read by :func:`read_own_manifest`.
        job: the job's name (``decompose``, ``restyle``).
        path_for: frame number -> output path.
        read_hash: reads the settings hash stored in a frame file (None if it has none).
        overwrite: remove our stale outputs instead of refusing.
        companions: frame number -> further files written for that frame (previews).
        extra_outputs: folder-level files written from all frames (e.g. ``preview.mp4``).
        read_input: reads the input fingerprint stored in a frame file (None if none).
        input_for: frame number -> fingerprint of its current input (None: unknown).
        numbers: the frame numbers this run will write (their companions are checked).

    Returns:
        The files removed (empty when nothing was stale).

    Raises:
        JobError: stale frames and no ``overwrite``; a file with one of our names that
            we did not write; ``out`` holds another job's output; a file cannot be removed.
    """
    out = Path(out)
    other_job = old_manifest.get("job")
    if other_job and other_job != job and old_manifest.get("frames"):
        raise JobError(f"output folder {out} holds the output of a {other_job} run "
                       f"({out / 'manifest.json'}); choose another --out", file=out)
    book = Ledger(out, old_manifest, path_for, read_hash)
    on_disk = book.frames_on_disk()
    by_settings, by_input, legacy = _sort_stale(book, on_disk, shash, read_input, input_for)
    stale = dict(by_settings)
    stale.update({n: v[0] for n, v in by_input.items()})
    foreign = _foreign_files(book, on_disk, stale, companions, extra_outputs, numbers)
    if foreign:
        raise JobError(
            f"output folder {out} holds {len(foreign)} file(s) with names {job} writes that it did not "
            f"write or that were changed since ({_names(_rel(out, p) for p in foreign)}): they are "
            f"never replaced or removed, even with --overwrite; move them away (a frame moved away or "
            f"deleted is computed again) or choose another --out",
            file=foreign[0])
    if legacy:
        events.warning(f"{legacy} {job} frame(s) in {out} carry no input fingerprint (written by an older "
                       f"version): they are kept without checking that their input is unchanged", file=out)
    if not stale:
        return []
    if not overwrite:
        _refuse_stale(out, job, by_settings, by_input, len(on_disk))
    victims: List[Path] = list(stale.values())
    for n in stale:
        victims += [Path(c) for c in (companions(n) if companions else ())]
    victims += [Path(x) for x in extra_outputs]
    if old_manifest and old_manifest.get("settings_hash") != shash and by_settings:
        victims.append(out / "manifest.json")
    removed = []
    for p in victims:
        try:
            if p.is_file():
                p.unlink()
                removed.append(p)
        except OSError as e:
            raise JobError(f"--overwrite: cannot remove {p}: {e.strerror or e}", file=p) from e
    sys.stderr.write(f"note: --overwrite: removed {len(stale)} stale {job} frame(s) from {out} "
                     f"({len(removed)} file(s) in all)\n")
    sys.stderr.flush()
    return removed


def _sort_stale(book: "Ledger", on_disk: Dict[int, Path], shash: str, read_input, input_for):
    """Frames on disk written with other settings (``{n: path}``), frames whose input changed
    since (``{n: (path, stored, now)}``) and the number of frames without an input record."""
    by_settings: Dict[int, Path] = {}
    by_input: Dict[int, tuple] = {}
    legacy = 0
    for n, p in on_disk.items():
        if book.stored_hash(n, p) != shash:
            by_settings[n] = p
            continue
        if input_for is None:
            continue
        stored = _safe(read_input, p) if read_input is not None else None
        if stored is None:
            stored = book.entries.get(n, {}).get("input")
        if stored is None:
            legacy += 1
            continue
        now = input_for(n)
        if now is not None and now != stored:
            by_input[n] = (p, stored, now)
    return by_settings, by_input, legacy


def _foreign_files(book: "Ledger", on_disk: Dict[int, Path], stale: Dict[int, Path], companions,
                   extra_outputs: Sequence[Path], numbers) -> List[Path]:
    """Files with our names that are not ours, or ours but changed since we wrote them."""
    out = book.out
    foreign = [p for n, p in stale.items() if not book.frame_is_ours(n, p)]
    # the one rule for user files and edits (docs/reliability.md): a recorded output whose
    # bytes changed since is the user's, even when current (third hostile trial: a plain
    # re-run recomputed an edited gbuffer_0002.exr, and the edit was gone)
    foreign += [p for n, p in on_disk.items() if n not in stale and book.frame_changed(n, p)]
    for n in sorted(set(numbers or ()) | set(on_disk)):
        for c in (companions(n) if companions else ()):
            c = Path(c)
            if not os.path.lexists(c):  # a FIFO or folder with our name is the user's too (issue 36)
                continue
            if (n in stale or n not in on_disk) and not book.file_is_ours(c, n):
                foreign.append(c)
            elif book.changed_since(c, book.outputs.get(_rel(out, c))):
                foreign.append(c)
    for x in extra_outputs:
        x = Path(x)
        if os.path.lexists(x) and not book.file_is_ours(x):
            foreign.append(x)
    return foreign


def _refuse_stale(out: Path, job: str, by_settings: Dict[int, Path], by_input: Dict[int, tuple],
                  on_disk: int) -> None:
    """Raise the refusal for stale frames when ``--overwrite`` was not given."""
    if by_settings:
        names = [p.name for p in by_settings.values()]
        shown = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
        raise JobError(
            f"output folder {out} already holds {len(by_settings)} {job} frame(s) written with other "
            f"settings ({shown}); add --overwrite to replace that earlier output, or choose "
            f"another --out (a re-run with the same settings resumes)", file=out)
    n0 = min(by_input)
    p0, was, now = by_input[n0]
    nums = sorted(by_input)
    raise JobError(
        f"the input of {len(nums)} {job} frame(s) in {out} changed since they were written "
        f"(frames {_ranges(nums)}; e.g. {p0.name} was computed from input {was}, the input of frame "
        f"{n0} is now {now}): resuming would mix frames of the old and the new input. Add --overwrite "
        f"to recompute exactly those {len(nums)} frame(s) (the {on_disk - len(nums)} frame(s) "
        f"whose input is unchanged are kept), or choose another --out", frame=n0, file=p0)


def _ranges(numbers: List[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4, 7"``."""
    out, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def stale_frames(out: Path, shash: str, old_manifest: Dict[str, Any], *,
                 path_for: Callable[[int], Path],
                 read_hash: Optional[Callable[[Path], Optional[str]]] = None) -> Dict[int, Path]:
    """Frame number -> file of every existing frame of this job in ``out`` whose
    settings hash (file header via ``read_hash``, else the old manifest) is not ``shash``."""
    book = Ledger(Path(out), old_manifest, path_for, read_hash)
    return {n: p for n, p in book.frames_on_disk().items() if book.stored_hash(n, p) != shash}
