"""Base class of the backend's "bad input" errors (exit code 2 on the command line)."""
from __future__ import annotations

import os
from typing import Optional


class InputError(ValueError):
    """Bad input or arguments; the message is one line naming the file (and frame).

    Attributes:
        frame: 1-based frame number concerned (``--frames`` / ``gbuffer_NNNN.exr``
            numbering), or ``None`` when not frame-specific.
        file: the file or folder concerned, or ``None``.

    The CLI copies both into its JSON ``error`` event.
    """

    def __init__(self, message: str = "", *, frame: Optional[int] = None,
                 file: Optional[os.PathLike] = None):
        super().__init__(message)
        self.frame = frame
        self.file = None if file is None else str(file)
