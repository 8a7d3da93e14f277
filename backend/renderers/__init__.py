"""Renderers (G-buffers + prompt -> frames) behind one registry; see :mod:`.base`."""
from .base import Renderer, available_renderers, get_renderer, register_renderer

__all__ = ["Renderer", "available_renderers", "get_renderer", "register_renderer"]
