"""Image sequences by name: ``%04d`` / ``####`` patterns, the frame number in a file name
(signed: ``shot_-0002`` is -2), and the files of a sequence. Part of :mod:`backend.footage`.
"""
from __future__ import annotations

import collections
import os
import re
from pathlib import Path
from typing import List, Optional, Sequence

from .frames import FootageError, IMAGE_EXTS, _warn_once


_PATTERN_RE = re.compile(r"%0?\d*d|#+")


def frame_pattern(name: str) -> Optional["re.Match"]:
    """The frame-number placeholder of a sequence pattern's file name: its *last* ``%04d``
    / ``%d`` or run of ``#`` (``take #1_####.png`` -> ``####``), or ``None``."""
    found = None
    for found in _PATTERN_RE.finditer(name):
        pass
    return found


def is_sequence_pattern(path: os.PathLike) -> bool:
    """``path`` is a frame pattern (``shot_####.png``, ``shot_%04d.png``) rather than a file
    or folder: nothing exists at that path and its name holds a placeholder. A file or
    folder whose name merely contains ``#``, ``%`` or ``@`` (``clip #1.mp4``,
    ``100%done.mp4``, ``gb #1``) is taken as itself."""
    p = Path(path)
    return not p.exists() and frame_pattern(p.name) is not None


#: the frame number in a file's stem: its last run of digits, negative when a ``-`` sits
#: right before it at the start of the stem or after a separator (``shot_-0002`` is -2;
#: ``shot-0002`` is 2: there the dash is the separator)
_NUMBER_RE = re.compile(r"((?<![^_.\s])-)?(\d+)(?!.*\d)")


def _natural_number(name: str) -> Optional[int]:
    m = _NUMBER_RE.search(name)
    if not m:
        return None
    return -int(m.group(2)) if m.group(1) else int(m.group(2))


def sequence_numbers(files: Sequence[str]) -> List[int]:
    """Source frame numbers of an image sequence's files (sorted as :func:`_sequence_files`
    sorts them: by number, then name): the last number in each file's stem
    (``shot_1001.png`` -> 1001, gaps kept) when every file has one, they are distinct and
    none is negative; otherwise ``1..N`` in that order, with a ``warning`` saying so
    (G-buffer frame numbers are >= 0: ``shot_-0002.png ... shot_0001.png`` become 1-4)."""
    nums = [_natural_number(Path(f).stem) for f in files]
    negative = [n for n in nums if n is not None and n < 0]
    if len(files) > 1 and (None in nums or len(set(nums)) != len(nums) or negative):
        if None in nums:
            why = f"{Path(files[nums.index(None)]).name} has no number"
        elif len(set(nums)) != len(nums):
            counts = collections.Counter(nums)
            dup = next(n for n in nums if counts[n] > 1)
            names = [Path(f).name for f, n in zip(files, nums) if n == dup][:2]
            why = f"{' and '.join(names)} both have number {dup}"
        else:
            first = Path(files[nums.index(negative[0])]).name
            why = (f"{len(negative)} of them carry a negative number, e.g. {first}; G-buffer frame numbers "
                   f"are 0 or more")
        order = "by the numbers in their names" + (" (a file without one counts as 0)" if None in nums else "") \
            + (", then by name" if len(set(nums)) != len(nums) else "")
        _warn_once("numbers", f"{Path(files[0]).parent}: frame numbers cannot be taken from the file names "
                   f"({why}); the {len(files)} files are numbered 1-{len(files)} in order {order}: "
                   f"{Path(files[0]).name} is frame 1, {Path(files[-1]).name} is frame {len(files)}",
                   files[0])
        return list(range(1, len(files) + 1))
    if len(files) == 1 and (nums[0] is None or nums[0] < 0):
        return [1]
    return [int(n) for n in nums]


def _sequence_files(path: str) -> List[str]:
    """Files of an image sequence given as a folder or a ``%04d`` / ``####`` pattern."""
    p = Path(path)
    if p.is_dir():
        # entries that are not readable files (a dangling symbolic link...) are kept: the
        # reader skips them with a warning, and the job lists them as missing frames
        files = [str(q) for q in p.iterdir() if q.suffix.lower() in IMAGE_EXTS and not q.name.startswith(".")]
        if not files:
            raise FootageError(f"{path}: folder contains no images ({', '.join(sorted(IMAGE_EXTS))})",
                               file=path)
        exts = {Path(f).suffix.lower() for f in files}
        if len(exts) > 1:
            raise FootageError(f"{path}: folder mixes image types {sorted(exts)}; use a pattern "
                               "like name_####.png to pick one sequence", file=path)
    else:
        name = p.name
        m = frame_pattern(name)
        if not m:
            raise FootageError(f"{path}: not a folder or a frame pattern", file=path)
        rx = re.compile("^" + re.escape(name[: m.start()]) + r"(-?\d+)" + re.escape(name[m.end():]) + "$")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise FootageError(f"{path}: folder {parent} does not exist", file=path)
        files = [str(parent / q) for q in os.listdir(parent) if rx.match(q)]
        if not files:
            raise FootageError(f"{path}: no files match the pattern", file=path)
    return sorted(files, key=lambda f: (_natural_number(Path(f).stem) or 0, f))
