"""Earlier outputs in a job's output folder: refuse to mix settings, or clear them.

Re-running a job into a folder it already wrote resumes it when the settings are the
same (frames whose stored settings hash matches are skipped). When the folder holds
frames of this job written with *other* settings, writing the new frames beside them
would leave a mixed sequence (and a manifest listing only the latest run), so
:func:`check_previous_outputs` refuses, unless ``overwrite`` is set: then exactly our
own earlier outputs are removed first, i.e. the frame files with other settings (the
job's frame-name pattern, e.g. ``gbuffer_NNNN.exr``, and the files the old manifest
lists), their companions (e.g. restyle's ``preview/restyle_NNNN.png``), the job's
folder-level extras (e.g. ``preview.mp4``) and the stale ``manifest.json``. Nothing else
in the folder is touched (logs, the user's files, other jobs' outputs), and inputs
cannot be there (:func:`backend.jobs.runner.check_output_safe`). Frames written with
the current settings are kept and resumed, with or without ``overwrite``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from .. import contract
from ..errors import JobError


def frame_prefix(path_for: Callable[[int], Path]) -> Optional[str]:
    """The file-name prefix of a job's frames (``gbuffer_``, ``restyle_``) from its
    ``path_for`` (frame number -> path), or ``None`` when it does not follow
    ``<prefix><number>.exr``."""
    m = contract._FRAME_RE.match(Path(path_for(1)).name)
    return m.group("prefix") if m else None


def _stored_hash(path: Path, number: int, old_hashes: Dict[int, Any],
                 read_hash: Optional[Callable[[Path], Optional[str]]]) -> Optional[str]:
    stored = None
    if read_hash is not None:
        try:
            stored = read_hash(path)
        except Exception:  # noqa: BLE001 - unreadable: fall back to the manifest
            stored = None
    return stored if stored is not None else old_hashes.get(number)


def stale_frames(out: Path, shash: str, old_manifest: Dict[str, Any], *,
                 path_for: Callable[[int], Path],
                 read_hash: Optional[Callable[[Path], Optional[str]]] = None) -> Dict[int, Path]:
    """Frame number -> file of every existing frame of this job in ``out`` whose
    settings hash (file header via ``read_hash``, else the old manifest) is not ``shash``."""
    out = Path(out)
    found: Dict[int, Path] = {}
    prefix = frame_prefix(path_for)
    folder = Path(path_for(1)).parent
    if prefix is not None and folder.is_dir():
        found.update(contract.list_frames(folder, prefix))
    old_hashes: Dict[int, Any] = {}
    for e in old_manifest.get("frames", []) or []:
        try:
            n = int(e["frame"])
        except (KeyError, TypeError, ValueError):
            continue
        old_hashes[n] = e.get("settings_hash")
        name = e.get("file")
        # only plain file names inside the folder (a manifest is data, not a list of paths to delete)
        if isinstance(name, str) and name and Path(name).name == name and not name.startswith("."):
            p = out / name
            if p.is_file():
                found.setdefault(n, p)
    return {n: p for n, p in sorted(found.items())
            if _stored_hash(p, n, old_hashes, read_hash) != shash}


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
) -> List[Path]:
    """Refuse (or, with ``overwrite``, clear) earlier outputs written with other settings.

    Args:
        out: the output folder (exists).
        shash: the current settings hash.
        old_manifest: ``manifest.json`` of ``out`` as read (``{}`` when absent).
        job: the job's name (``decompose``, ``restyle``).
        path_for: frame number -> output path.
        read_hash: reads the settings hash stored in a frame file (None if it has none).
        overwrite: remove our earlier outputs instead of refusing.
        companions: frame number -> further files written for that frame (previews).
        extra_outputs: folder-level files written from all frames (e.g. ``preview.mp4``).

    Returns:
        The files removed (empty when nothing was stale).

    Raises:
        JobError: stale frames and no ``overwrite`` (one line naming the folder and the
            way forward); ``out`` holds another job's output; a file cannot be removed.
    """

    out = Path(out)
    other_job = old_manifest.get("job")
    if other_job and other_job != job and old_manifest.get("frames"):
        raise JobError(f"output folder {out} holds the output of a {other_job} run "
                       f"({out / 'manifest.json'}); choose another --out", file=out)
    stale = stale_frames(out, shash, old_manifest, path_for=path_for, read_hash=read_hash)
    if not stale:
        return []
    if not overwrite:
        names = [p.name for p in stale.values()]
        shown = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
        raise JobError(
            f"output folder {out} already holds {len(stale)} {job} frame(s) written with other "
            f"settings ({shown}); add --overwrite to replace that earlier output, or choose "
            f"another --out (a re-run with the same settings resumes)", file=out)
    victims: List[Path] = list(stale.values())
    for n in stale:
        victims += [Path(p) for p in (companions(n) if companions else ())]
    victims += [Path(p) for p in extra_outputs]
    if old_manifest and old_manifest.get("settings_hash") != shash:
        victims.append(out / "manifest.json")
    removed = []
    for p in victims:
        try:
            if p.is_file() or p.is_symlink():
                p.unlink()
                removed.append(p)
        except OSError as e:
            raise JobError(f"--overwrite: cannot remove {p}: {e.strerror or e}", file=p) from e
    sys.stderr.write(f"note: --overwrite: removed {len(stale)} {job} frame(s) written with other "
                     f"settings from {out} ({len(removed)} file(s) in all)\n")
    sys.stderr.flush()
    return removed
