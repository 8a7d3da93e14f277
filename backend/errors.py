"""The backend's error classes.

* :class:`InputError` (a ``ValueError``): bad input or arguments; exit code 2 on the
  command line. ``ContractError``, ``FootageError`` and ``PromptError`` are kinds of it.
* :class:`JobError` (a ``RuntimeError``): a job failed at run time; exit code 1.
* :class:`JobCancelled`: the job was cancelled; exit code 130.
"""
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


class JobError(RuntimeError):
    """A job failed. ``str(e)`` is a one-line reason naming the file and frame.

    Attributes:
        frame: output frame number, or ``None`` when not frame-specific.
        file: the file concerned (output or input), or ``None``.
    """

    def __init__(self, message: str, frame: Optional[int] = None, file: Optional[os.PathLike] = None):
        super().__init__(message)
        self.frame = frame
        self.file = None if file is None else str(file)


class JobCancelled(Exception):
    """The job was cancelled (its ``cancel`` event was set: the CLI sets it on
    SIGINT/SIGTERM); ``written`` frames are complete on disk, ``frame`` is where it stopped."""

    def __init__(self, written: int = 0, frame: Optional[int] = None):
        super().__init__(f"cancelled after {written} frame(s)")
        self.written = written
        self.frame = frame


class MissingPackagesError(RuntimeError):
    """A backend needs Python packages this interpreter does not have (exit code 1)."""


def require_packages(feature: str, *modules: str) -> None:
    """Raise :class:`MissingPackagesError` naming ``feature`` and what is missing when
    one of ``modules`` cannot be imported here; checks without importing them."""
    import importlib.util
    import sys

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingPackagesError(
            f"{feature} needs {', '.join(modules)}; this Python ({sys.executable}) lacks "
            f"{', '.join(missing)}: install them into this Python (the versions requirements.txt pins, "
            f"docs/install.md); in Blender: Preferences > Add-ons > G-Buffer Editor > Install Diffusion "
            f"Packages, or point External Python at an environment that has them")
