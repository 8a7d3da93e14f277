"""Renderer interface and registry (forward rendering: G-buffers + prompt -> frames)."""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from ..contract import GBufferFrame


class Renderer:
    """Base class. Subclasses set ``name`` and implement :meth:`render`."""

    name = "base"

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0,
               time_s: float = 0.0, prev: Optional[np.ndarray] = None) -> np.ndarray:
        """Re-render one frame.

        Args:
            frame: contract G-buffers (possibly edited).
            prompt: free text; the embedded renderer parses it into looks.
            frame_index, time_s: for animated effects (caustics, rain).
            prev: previous output (``H x W x 3`` float32) for temporal methods.

        Returns:
            ``H x W x 3`` float32 scene-linear Rec.709 RGB, finite, >= 0.
        """
        raise NotImplementedError

    def settings(self) -> Dict[str, object]:
        """JSON-serialisable settings that affect the output (used in the resume hash)."""
        return {"name": self.name}


_REGISTRY: Dict[str, Callable[..., Renderer]] = {}


def register_renderer(name: str, factory: Callable[..., Renderer]) -> None:
    """Register ``factory(**options) -> Renderer`` under ``name``."""
    _REGISTRY[name] = factory


def available_renderers() -> list:
    """Names of registered renderers."""
    from . import _load_builtin  # noqa: F401

    return sorted(_REGISTRY)


def get_renderer(name: str, **options) -> Renderer:
    """Instantiate a registered renderer.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    from . import _load_builtin  # noqa: F401

    if name not in _REGISTRY:
        raise KeyError(f"unknown renderer {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](**options)
