"""Importing this module registers the built-in renderers (lazy: heavy imports happen on use)."""
from .base import register_renderer


def _embedded(**kw):
    from .embedded import EmbeddedRenderer

    return EmbeddedRenderer(**kw)


def _controlnet(**kw):
    from .controlnet import ControlNetRenderer

    return ControlNetRenderer(**kw)


register_renderer("embedded", _embedded)
register_renderer("controlnet", _controlnet)
