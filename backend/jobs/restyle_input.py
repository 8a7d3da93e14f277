"""Restyle's G-buffer input, checked as seriously as decompose checks footage.

Before a restyle writes anything (:func:`check_input`):

* **A folder another job is writing is refused**: a decompose (or restyle) job running
  in the G-buffer folder holds a shared ``flock`` on its ``.gbuffer_running.lock``
  (:class:`backend.jobs.runner._RunLock`); restyling it then would render part of a shot
  and call it complete (third hostile trial).
* **Each frame's header must match its name and the folder**: a header
  ``gbuffer/frame_number`` other than the number in the file name (files renamed or
  swapped) and a ``gbuffer/settings_hash`` other than the folder's (``manifest.json``,
  else the first frame's: a frame of another decompose run mixed in) are refused, naming
  the file. Frames without these attributes (other exporters, older versions) pass.
* **Nothing is written into the footage**: the output folder may not be, contain or lie
  inside the source footage the folder was decomposed from (its manifest's
  ``source.path`` and ``source.real_path``, and the frames' header ``gbuffer/source`` /
  ``gbuffer/source_real_path``: a deleted manifest or a repointed symlink changes nothing),
  compared by path and by folder identity (bind mounts), as for decompose itself
  (:func:`footage_candidates`, :func:`backend.jobs.output_folder.check_output_safe`).
* **An incomplete input is carried through**: a G-buffer folder whose manifest says
  ``complete: false`` gives a ``warning`` naming it and its missing frames, and the
  restyle's manifest says ``input_complete: false`` and ``complete: false``
  (:func:`input_changed` re-checks at the end: a job that started writing the folder
  meanwhile, or frames added or removed, count the same).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from .. import contract, events
from ..errors import JobError
from .runner import RUN_LOCK, _RunLock, check_output_safe

#: jobs whose manifest ``source.path`` is footage (export-scene's source is a .blend)
FOOTAGE_JOBS = ("decompose",)


def being_written(folder: os.PathLike) -> bool:
    """Another job holds ``folder``'s run lock right now (it is writing frames into it)."""
    return _RunLock(Path(folder)).others_running()


def footage_of(gb_manifest: Mapping[str, Any]) -> Optional[str]:
    """The source footage a decompose folder was made from (movie, image, sequence folder
    or pattern), from its manifest; ``None`` when not recorded or not a decompose folder."""
    src = gb_manifest.get("source")
    if gb_manifest.get("job") not in FOOTAGE_JOBS or not isinstance(src, dict):
        return None
    path = src.get("path")
    return path if isinstance(path, str) and path else None


def footage_candidates(gb_manifest: Mapping[str, Any], files: Mapping[int, Path]) -> List[str]:
    """Every path that names the footage a G-buffer folder was decomposed from: the
    manifest's ``source.path`` and ``source.real_path`` (symlinks resolved at decompose
    time: the link may point elsewhere now), and, also when ``manifest.json`` is gone, the
    first frame's header ``gbuffer/source`` and ``gbuffer/source_real_path``.
    Each is also taken with symlinks resolved now."""
    found: List[str] = []
    path = footage_of(gb_manifest)
    if path is not None:
        found.append(path)
        real = gb_manifest["source"].get("real_path")
        if isinstance(real, str) and real:
            found.append(real)
    for n in sorted(files)[:1]:
        try:
            meta = contract.read_meta(files[n])
        except Exception:  # noqa: BLE001 - unreadable: reading the frame reports it
            continue
        for v in (meta.get("source"), meta.get("source_real_path")):
            if isinstance(v, str) and v:
                found.append(v)
    out: List[str] = []
    for p in found + [os.path.realpath(p) for p in found]:
        if p not in out:
            out.append(p)
    return out


def check_headers(files: Mapping[int, Path], gb_manifest: Mapping[str, Any], folder: Path,
                  what: str = "G-buffer frame") -> None:
    """Each frame's header against its file name and the folder's settings hash.

    Raises:
        JobError: naming the file, its number and what its header says.
    """
    folder_hash = gb_manifest.get("settings_hash")
    where = f"{folder / 'manifest.json'}" if folder_hash else None
    for n, p in files.items():
        try:
            meta = contract.read_meta(p)
        except Exception:  # noqa: BLE001 - unreadable: reading the frame reports it
            continue
        stamped = meta.get("frame_number")
        if isinstance(stamped, (int, float, str)) and str(stamped).lstrip("-").isdigit() and int(stamped) != n:
            raise JobError(f"{p} ({what} {n}): its header says it is frame {int(stamped)} "
                           f"(gbuffer/frame_number): the files were renamed or swapped; give each file "
                           f"its own name back (or decompose again)", frame=n, file=p)
        shash = meta.get("settings_hash")
        if shash is None:
            continue
        if folder_hash is None:
            folder_hash, where = str(shash), f"{p.name}, the first frame"
        elif str(shash) != str(folder_hash):
            raise JobError(f"{p} ({what} {n}) was written with other decompose settings (settings hash "
                           f"{shash}) than the rest of {folder} ({folder_hash}, {where}): frames of two "
                           f"decompose runs are mixed in one folder; restyle refuses to render them as one shot",
                           frame=n, file=p)


def check_input(gbuffer_dir: Path, files: Mapping[int, Path], gb_manifest: Mapping[str, Any],
                out_dir: Path, reference_dir: Optional[Path] = None,
                ref_files: Optional[Mapping[int, Path]] = None,
                all_files: Optional[Mapping[int, Path]] = None) -> Dict[str, Any]:
    """Every check of the module docstring, before anything is written.

    Returns:
        ``{"complete": bool or None, "frames_missing": str}``: what the input folder's
        manifest says (``None``: it does not say).

    Raises:
        JobError: a folder being written, a header that contradicts its file, an output
            folder overlapping the footage.
    """
    for folder in (gbuffer_dir, reference_dir):
        if folder is not None and being_written(folder):
            raise JobError(f"G-buffer folder {folder} is being written by another job right now (it holds "
                           f"{RUN_LOCK}): restyling it now would render part of the shot; wait for that job "
                           f"to finish, then run restyle again", file=folder)
    for footage in footage_candidates(gb_manifest, files):
        try:
            check_output_safe(out_dir, [footage])
        except JobError:
            raise JobError(f"refusing to write into the footage: output folder {os.path.realpath(out_dir)} "
                           f"overlaps {footage}, the source {gbuffer_dir} was decomposed from "
                           f"({gbuffer_dir / 'manifest.json'} or its frames' gbuffer/source); choose another "
                           f"--out", file=out_dir) from None
    check_headers(files, gb_manifest, gbuffer_dir)
    if reference_dir is not None and ref_files:
        check_headers({n: p for n, p in ref_files.items() if n in files}, {}, reference_dir,
                      what="reference frame")
    if not gb_manifest and _ours(files):
        events.warning(f"G-buffer folder {gbuffer_dir} has no manifest.json (deleted?): its frames were written by "
                       f"decompose, but whether they are the whole shot cannot be checked; restyling the "
                       f"{len(files)} frame(s) on disk (input.complete: null)", file=gbuffer_dir)
    complete = gb_manifest.get("complete")
    state = {"complete": complete if isinstance(complete, bool) else None,
             "frames_missing": str(gb_manifest.get("frames_missing") or "")}
    if complete is False and not state["frames_missing"] and gb_manifest.get("shot_frames"):
        # farm chunks not merged yet: the parts say the shot's frames, their entries what is done
        from .parts import ranges

        listed = set(_listed(gb_manifest))
        state["frames_missing"] = ranges([n for n in _parse(str(gb_manifest["shot_frames"])) if n not in listed])
    gone = _listed_but_gone(gb_manifest, files if all_files is None else all_files)
    if gone:  # frames the manifest lists were deleted since: the folder is not what it says
        from .parts import ranges

        events.warning(f"G-buffer folder {gbuffer_dir}: {len(gone)} frame(s) its manifest lists are not in the "
                       f"folder any more ({ranges(gone)}, e.g. {contract.frame_path(gbuffer_dir, gone[0]).name}); "
                       f"the restyle is marked incomplete (input_complete: false)", frame=gone[0], file=gbuffer_dir)
        missing = sorted(set(gone) | set(_parse(state["frames_missing"])))
        state = {"complete": False, "frames_missing": ranges(missing)}
        complete = None  # warned already
    if complete is False:
        missing = f" (frames {state['frames_missing']} missing)" if state["frames_missing"] else ""
        # issue 37: the frames restyled are all there; say what is missing without suggesting they are not
        events.warning(f"restyled all {len(files)} frame(s) asked for; G-buffer folder {gbuffer_dir} is not "
                       f"complete{missing}: it holds part of the shot (decomposed with a frame range, cancelled "
                       f"or failed, or farm chunks not merged yet), so the restyle is marked as part of the shot "
                       f"too (input_complete: false)", file=gbuffer_dir)
    return state


def _ours(files: Mapping[int, Path]) -> bool:
    """The first frame carries our decompose's stamp (``gbuffer/settings_hash``)."""
    for n in sorted(files)[:1]:
        try:
            return contract.read_meta(files[n]).get("settings_hash") is not None
        except Exception:  # noqa: BLE001 - unreadable: reading the frame reports it
            return False
    return False


def _listed(gb_manifest: Mapping[str, Any]) -> list:
    """Frame numbers the manifest's ``frames`` entries list (malformed ones skipped)."""
    frames = gb_manifest.get("frames")
    listed = []
    for e in frames if isinstance(frames, list) else ():
        try:
            listed.append(int(e["frame"]))
        except (KeyError, TypeError, ValueError):
            continue
    return listed


def _listed_but_gone(gb_manifest: Mapping[str, Any], on_disk: Mapping[int, Path]) -> list:
    return sorted(set(_listed(gb_manifest)) - set(on_disk))


def _parse(text: str) -> list:
    from .parts import parse_ranges

    try:
        return parse_ranges(text)
    except ValueError:
        return []


def input_changed(gbuffer_dir: Path, all_files: Mapping[int, Path]) -> Optional[str]:
    """Why the input folder no longer is what the restyle started from (``None``: it is):
    a job is writing it now, or its frames were added or removed."""
    if being_written(gbuffer_dir):
        return f"a job started writing into {gbuffer_dir} while restyle ran"
    try:
        now = contract.list_frames(gbuffer_dir)
    except Exception as e:  # noqa: BLE001
        return f"{gbuffer_dir} cannot be listed any more ({e})"
    if set(now) != set(all_files):
        added, gone = sorted(set(now) - set(all_files)), sorted(set(all_files) - set(now))
        parts = ([f"frames {added[0]}..{added[-1]} ({len(added)}) appeared"] if added else []) + \
                ([f"frames {gone[0]}..{gone[-1]} ({len(gone)}) went away"] if gone else [])
        return f"{gbuffer_dir} changed while restyle ran: {', '.join(parts)}"
    return None
