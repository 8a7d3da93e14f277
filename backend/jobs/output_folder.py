"""The output folder's safety: it may not be, contain or lie inside an input, and it is
created (or refused) before anything is written. Part of the job runner (:mod:`backend.jobs.runner`).
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Sequence

from ..errors import JobError


def _real(p: os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.abspath(os.fspath(p))))


def _is_within(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def _stat(p: Path):
    try:
        return os.stat(p)
    except (OSError, ValueError):
        return None


def _within_by_identity(child: Path, parent: Path) -> bool:
    """``child`` is ``parent`` or lies inside it, by folder identity (``st_dev``/``st_ino``,
    :func:`os.path.samestat`): ``child`` or one of its existing parents *is* ``parent``.
    Catches what path strings miss: a bind mount or other alias of the same folder."""
    pst = _stat(parent)
    if pst is None:
        return False
    for q in (child, *child.parents):
        st = _stat(q)
        if st is not None and os.path.samestat(st, pst):
            return True
    return False


def overlaps(out: os.PathLike, src: os.PathLike) -> bool:
    """Whether folder ``out`` is, contains or lies inside ``src`` (file or folder): by path
    after resolving symlinks, and by identity (:func:`_within_by_identity`: bind mounts,
    aliases). ``out`` need not exist yet (its existing parents are compared)."""
    out, src = _real(out), _real(src)
    if out == src or _is_within(src, out) or _is_within(out, src):
        return True
    return _within_by_identity(out, src) or _within_by_identity(src, out)


def check_output_safe(out_dir: os.PathLike, inputs: Sequence[os.PathLike]) -> Path:
    """Refuse an output folder that would write into or over an input.

    Refused: ``out_dir`` equal to an input, an input (file or folder) inside
    ``out_dir``, or ``out_dir`` inside an input folder (e.g. an image-sequence folder);
    an empty or blank ``out_dir`` (the current folder, by accident). Symlinks are resolved
    first, and folders are also compared by identity (``os.path.samestat`` of the output
    folder and each of its parents against the input): a bind-mount alias of the footage
    folder is the footage folder.

    Returns:
        The resolved output folder.

    Raises:
        JobError: naming both paths.
    """
    if isinstance(out_dir, (str, bytes)) and not out_dir.strip():  # Path("") is the current folder
        raise JobError(f"output folder {out_dir!r}: an empty path (an empty shell variable?); choose an --out")
    out = _real(out_dir)
    for inp in inputs:
        if inp is None:
            continue
        src = Path(os.fspath(inp))
        if not src.exists() and ("%" in src.name or "#" in src.name):  # a sequence pattern: guard its folder
            src = src.parent
        if overlaps(out, src):
            raise JobError(
                f"refusing to write into or over the input: output folder {out} "
                f"overlaps input {_real(src)}; choose another --out", file=out)
    return out


def prepare_output_dir(out_dir: os.PathLike) -> Path:
    """Create ``out_dir`` (and parents) and prove it is writable with a probe file.

    Raises:
        JobError: the folder cannot be created or written (read-only, not a folder,
            full disk), naming it.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise JobError(f"output folder {out} is a file, not a folder; choose another --out", file=out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe_", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise JobError(f"output folder {out} is not writable ({_oserror_text(e)})", file=out) from e
    return out


def _oserror_text(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if e.errno == errno.EFBIG:
        return "file too large for the file system or size limit"
    return e.strerror or str(e)
