"""Checksums of files: what a job computed from (inputs) and what it wrote (outputs).

* :func:`file_sha256`: SHA-256 of a file's bytes (hex, 64 digits).
* :class:`InputFingerprints`: per input file, a content fingerprint (the first 16 hex
  digits of its SHA-256), cached in the output folder's ``manifest.json`` under
  ``inputs`` by file identity (device, inode, size, modification and change time in
  ns). A file whose identity is unchanged is not read again; a file that was replaced,
  edited or merely touched is re-hashed, so touching a file (same bytes) changes
  nothing and a replaced file (other bytes, even with the old size and mtime restored:
  its inode or ctime differ) is seen.

A frame's output records the fingerprint of what it was computed from (manifest entry
``input`` and the frame file's header); :mod:`backend.jobs.runner` compares it on resume.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

#: hex digits kept of an input file's SHA-256
INPUT_DIGITS = 16


def file_sha256(path: os.PathLike) -> str:
    """SHA-256 of the file's bytes, 64 hex digits.

    Raises:
        OSError: the file cannot be read.
    """
    from ..input_files import open_regular

    h = hashlib.sha256()
    with open_regular(path) as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def _identity(st: os.stat_result) -> Dict[str, int]:
    return {"dev": int(st.st_dev), "ino": int(st.st_ino), "size": int(st.st_size),
            "mtime_ns": int(st.st_mtime_ns), "ctime_ns": int(st.st_ctime_ns)}


def file_identity(path: os.PathLike) -> Dict[str, int]:
    """Device, inode, size, modification and change time (ns) of ``path``: changes when the
    file is replaced (moved over), rewritten or touched.

    Raises:
        OSError: the file cannot be stat'ed.
    """
    return _identity(os.stat(path))


class InputFingerprints:
    """Content fingerprints of input files, with a stat-keyed cache.

    Args:
        cache: the ``inputs`` mapping of an earlier ``manifest.json`` (absolute path ->
            identity fields + ``sha256``); malformed entries are ignored. The object
            :attr:`cache` is updated in place and is meant to be stored back in the
            manifest.
    """

    def __init__(self, cache: Optional[Dict[str, Any]] = None):
        self.cache: Dict[str, Dict[str, Any]] = {}
        for k, v in (cache or {}).items() if isinstance(cache, dict) else ():
            if isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str):
                self.cache[k] = dict(v)

    def of(self, path: os.PathLike) -> str:
        """Fingerprint (16 hex digits of SHA-256) of the file ``path``.

        Raises:
            OSError: the file cannot be read.
        """
        key = os.path.abspath(os.fspath(path))
        st = os.stat(key)
        ident = _identity(st)
        old = self.cache.get(key)
        if old is not None and all(old.get(k) == v for k, v in ident.items()):
            return old["sha256"][:INPUT_DIGITS]
        digest = file_sha256(key)
        ident["sha256"] = digest
        self.cache[key] = ident
        return digest[:INPUT_DIGITS]

    def combined(self, paths: Iterable[os.PathLike]) -> str:
        """One fingerprint for several files (e.g. a frame and its reference frame)."""
        parts = [self.of(p) for p in paths]
        if len(parts) == 1:
            return parts[0]
        return hashlib.sha256(":".join(parts).encode()).hexdigest()[:INPUT_DIGITS]


def describe_change(path: os.PathLike, was: Optional[str], now: Optional[str]) -> str:
    """``"<path> changed (content <was> -> <now>)"`` for messages."""
    return f"{Path(path)} changed since (content {was or '?'} -> {now or '?'})"
