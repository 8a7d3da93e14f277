"""Renderer interface and registry (forward rendering: G-buffers + prompt -> frames).

A renderer declares what it can do as class attributes of :class:`Renderer` (the job
reads them; nothing is probed with ``getattr``), and the prompt is parsed in one place,
:func:`read_prompt`, once per process: the restyle job parses it before the first frame
and hands the looks to :meth:`Renderer.describe` and :meth:`Renderer.render`; the
Blender add-on calls the same function to refuse a bad prompt before it starts a job.
"""
from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..contract import GBufferFrame
from .. import plugins
from ..registry import Registry
from .prompt import Look, PromptError, parse_prompt

#: the renderer a restyle uses when none is named
DEFAULT_RENDERER = "embedded"


class Renderer:
    """Base class. Subclasses set ``name`` and the capabilities below, and implement
    :meth:`render` (and :meth:`settings` when options change the output).

    Capabilities (class attributes; the defaults suit a plain free-text renderer):

    Attributes:
        name: registry name.
        free_text_prompt: ``True``: any text is a valid prompt (diffusion);
            ``False``: only the looks vocabulary of :mod:`.prompt` is, and other
            words are refused with :class:`~.prompt.PromptError` before any frame.
        accepts_reference: :meth:`render` takes ``reference=``, the unedited G-buffer
            frame the edited one came from (the job passes it only then).
        uses_previous_output: :meth:`render` uses ``prev=``, the previous frame's
            output, for temporal consistency (the job passes it in any case; this is
            for callers and UIs).
        needs_gpu: practical only on a GPU (it still runs on the CPU, slowly).
        window: ``0`` (default): :meth:`render` is called frame by frame; ``N > 0``: a
            whole-clip renderer, the job calls :meth:`render_window` on windows of up to
            ``N`` frames that overlap by :attr:`window_overlap` frames and blends the
            overlaps (:mod:`backend.jobs.restyle`). May be set per instance (an option).
        window_overlap: frames shared by neighbouring windows (``0 <= overlap < window``).
        last_info: per-frame facts about the latest :meth:`render` (JSON values,
            e.g. ``{"flicker": 0.01}``) that the job adds to that frame's manifest
            entry; empty (read-only) unless a renderer sets its own dict.
    """

    name = "base"
    free_text_prompt: bool = True
    accepts_reference: bool = False
    uses_previous_output: bool = False
    needs_gpu: bool = False
    window: int = 0
    window_overlap: int = 0
    last_info: Mapping[str, Any] = MappingProxyType({})

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0,
               time_s: float = 0.0, prev: Optional[np.ndarray] = None,
               looks: Optional[Sequence[Look]] = None) -> np.ndarray:
        """Re-render one frame.

        Args:
            frame: contract G-buffers (possibly edited).
            prompt: the text as the user typed it.
            frame_index: 0-based index of the frame in its clip (animated effects,
                temporal chaining).
            time_s: the frame's time in seconds (animated effects: rain, caustics).
            prev: previous output (``H x W x 3`` float32) for temporal methods.
            looks: ``prompt`` as parsed by :func:`read_prompt` for this renderer
                (the job passes it so the prompt is parsed once); ``None``: the
                renderer calls :func:`read_prompt` itself.

        Returns:
            ``H x W x 3`` float32 scene-linear Rec.709 RGB, finite, >= 0.
        """
        raise NotImplementedError

    def render_window(self, frames: Sequence[GBufferFrame], prompt: str, *,
                      frame_indices: Optional[Sequence[int]] = None, times_s: Optional[Sequence[float]] = None,
                      looks: Optional[Sequence[Look]] = None) -> List[np.ndarray]:
        """Re-render a window of consecutive frames at once (renderers with ``window > 0``).

        Args:
            frames: ``T`` contract frames of one size, in clip order (``T <= window``).
            frame_indices, times_s: each frame's 0-based clip index and time in seconds.
            looks: as for :meth:`render`.

        Returns:
            ``T`` arrays ``H x W x 3`` float32 scene-linear Rec.709 RGB, finite, >= 0.
        """
        raise NotImplementedError

    def settings(self) -> Dict[str, object]:
        """JSON-serialisable settings that affect the output (used in the resume hash)."""
        return {"name": self.name}

    def describe(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> Dict[str, object]:
        """Metadata of a restyle with ``prompt``, called by the job once before the first
        frame; it may load models, so that missing ones fail before any output is written.

        Args:
            looks: ``prompt`` as parsed by :func:`read_prompt` (``None``: parse it here).

        Returns:
            ``{"prompt": str, "looks": [{"name", "strength"}...], "params": JSON or None}``;
            ``params`` (every number that shapes the look) is part of the resume hash.

        Raises:
            PromptError: ``looks`` is ``None`` and the prompt is refused.
        """
        looks = read_prompt(prompt, self) if looks is None else looks
        return {"prompt": prompt, "looks": [lk.to_json() for lk in looks], "params": None}


RendererRef = Union[str, Renderer, Type[Renderer]]


def read_prompt(prompt: str, renderer: RendererRef = DEFAULT_RENDERER) -> Tuple[Look, ...]:
    """Parse a restyle prompt for ``renderer``: the one place a prompt is parsed.

    Args:
        prompt: the text (``None`` or ``""``: no look, a neutral relight).
        renderer: a registry name, a renderer, or a renderer class.

    Returns:
        The looks (:class:`~.prompt.Look` tuple sorted by :data:`.prompt.LOOK_ORDER`,
        strengths in ``[0.1, 3.0]``). For a closed-vocabulary renderer
        (``free_text_prompt = False``) they are the prompt's meaning; for a free-text
        renderer they are the looks the text happens to name (ControlNet's embedded
        init uses them), ``()`` when it names other things.

    Raises:
        PromptError: (a ``ValueError``) words outside the vocabulary of a
            closed-vocabulary renderer; the message lists the vocabulary.
        KeyError: an unknown renderer name.
        ArgumentError: a prompt that is not text, or a renderer that is no name,
            renderer or renderer class (a ``ValueError`` and a ``TypeError``).
    """
    if prompt is not None and not isinstance(prompt, str):
        from ..arguments import ArgumentError

        raise ArgumentError(f"prompt must be text (str), got {prompt!r} ({type(prompt).__name__})")
    if isinstance(renderer, str):
        cls = renderer_class(renderer)
    else:
        cls = renderer if isinstance(renderer, type) else type(renderer)
    if not hasattr(cls, "free_text_prompt"):  # read_prompt("fog", 5) was an AttributeError (issue 36)
        from ..arguments import ArgumentError

        raise ArgumentError(f"renderer must be a renderer name, renderer or renderer class, got "
                            f"{renderer!r} ({type(renderer).__name__})")
    return _parse(prompt or "", bool(cls.free_text_prompt))


@functools.lru_cache(maxsize=64)
def _parse(prompt: str, free_text: bool) -> Tuple[Look, ...]:
    if not free_text:
        return parse_prompt(prompt)
    try:
        return parse_prompt(prompt)
    except PromptError:
        return ()


# --------------------------------------------------------------------------- registry

#: the renderer registry; built-ins load their modules only when created (or their
#: class is asked for, :func:`renderer_class`)
RENDERERS = Registry("renderer", __package__, plugins.factories("renderer"))


def register_renderer(name: str, factory: Union[Callable[..., Renderer], str]) -> None:
    """Register ``factory(**options) -> Renderer`` under ``name``: a :class:`Renderer`
    subclass (its capabilities are then known without building one), a ``"module:Class"``
    path, or any callable (the :class:`Renderer` defaults are assumed)."""
    RENDERERS.register(name, factory)


def available_renderers() -> list:
    """Names of registered renderers."""
    return RENDERERS.names()


def renderer_class(name: str) -> Type[Renderer]:
    """The class of a registered renderer, to read its capabilities without building
    one (imports the renderer's module, not its models); :class:`Renderer` when the
    factory is not a class.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    f = RENDERERS.factory(name)
    return f if isinstance(f, type) and issubclass(f, Renderer) else Renderer


def get_renderer(name: str, **options) -> Renderer:
    """Instantiate a registered renderer.

    Raises:
        KeyError: unknown name (the message lists the known ones).
        TypeError, ValueError: options the renderer does not take.
    """
    return RENDERERS.create(name, **options)
