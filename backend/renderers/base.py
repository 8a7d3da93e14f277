"""Renderer interface and registry (forward rendering: G-buffers + prompt -> frames)."""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from ..contract import GBufferFrame
from ..registry import Registry


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


#: the renderer registry; built-ins load their modules only when created
RENDERERS = Registry("renderer", __package__, {
    "embedded": ".embedded:EmbeddedRenderer",
    "controlnet": ".controlnet:ControlNetRenderer",
})


def register_renderer(name: str, factory: Callable[..., Renderer]) -> None:
    """Register ``factory(**options) -> Renderer`` under ``name``."""
    RENDERERS.register(name, factory)


def available_renderers() -> list:
    """Names of registered renderers."""
    return RENDERERS.names()


def get_renderer(name: str, **options) -> Renderer:
    """Instantiate a registered renderer.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    return RENDERERS.create(name, **options)
