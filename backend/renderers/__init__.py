"""Renderers (G-buffers + prompt -> frames) behind one registry; see :mod:`.base`."""
from .base import (DEFAULT_RENDERER, Renderer, available_renderers, get_renderer, read_prompt,
                   register_renderer, renderer_class)

__all__ = ["DEFAULT_RENDERER", "Renderer", "available_renderers", "get_renderer", "read_prompt",
           "register_renderer", "renderer_class"]

