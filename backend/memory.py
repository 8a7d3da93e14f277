"""Process memory policy for large frames (issue 37: restyle of 4K frames under 2.5 GB).

glibc's ``malloc`` serves a request below its *dynamic* mmap threshold from its heaps,
and raises that threshold (up to 32 MB on 64-bit) each time a larger mapped block is
freed; blocks freed back into a heap stay in the process (RSS) until the top of the heap
is free. At 4K a job's half-float planes (16.6 MB) and colour strips are of that size,
and the memory they leave behind added ~130 MB to restyle's peak. Fixing the threshold
(``mallopt(M_MMAP_THRESHOLD, 1 MiB)``, which also stops the dynamic adjustment) maps
every block of 1 MiB or more on its own and returns it at ``free``. Elsewhere (macOS,
Windows, musl) nothing is done.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: ``M_MMAP_THRESHOLD`` of glibc's ``malloc.h``
_M_MMAP_THRESHOLD = -3
_done = False


def map_large_blocks(threshold: int = 1 << 20) -> bool:
    """Have glibc map (and unmap at ``free``) every block of ``threshold`` bytes or more;
    once per process. Returns whether it was set (``False`` off Linux/glibc)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _done = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return _done
