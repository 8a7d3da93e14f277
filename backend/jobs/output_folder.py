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


def check_output_safe(out_dir: os.PathLike, inputs: Sequence[os.PathLike]) -> Path:
    """Refuse an output folder that would write into or over an input.

    Refused: ``out_dir`` equal to an input, an input (file or folder) inside
    ``out_dir``, or ``out_dir`` inside an input folder (e.g. an image-sequence folder).
    Symlinks are resolved first.

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
        src = _real(src)
        if out == src or _is_within(src, out) or _is_within(out, src):
            raise JobError(
                f"refusing to write into or over the input: output folder {out} "
                f"overlaps input {src}; choose another --out", file=out)
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
