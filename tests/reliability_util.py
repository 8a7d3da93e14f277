"""Helpers shared by the reliability tests (tests/test_reliability*.py): a tiny-estimator
decompose that prints nothing, a PNG sequence of gradients, a file's SHA-256."""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

from backend.jobs.decompose import decompose
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_image

register_tiny()


def sha256_of(p: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def tiny_decompose(src, out, **kw):
    """:func:`decompose` with the tiny test estimator at 32 px and no printed events."""
    kw.setdefault("estimator", "tiny")
    kw.setdefault("max_size", 32)
    return decompose(src, out, progress=io.StringIO(), **kw)


def write_sequence(folder: Path, numbers, h=24, w=32, name="shot_{:04d}.png") -> Path:
    """A PNG sequence ``name.format(n)`` for each ``n`` in ``numbers``, each a different gradient."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(numbers):
        write_image(folder / name.format(n), gradient_rgb(h, w, 3 * i))
    return folder
