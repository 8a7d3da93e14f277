"""The public API's argument checks: one line naming the argument, as the CLI's.

Every public function of ``docs/api.md`` (:class:`backend.decomposer.Decomposer` and its
``frame``, :func:`backend.jobs.decompose.decompose`, :func:`backend.jobs.restyle.restyle`,
the contract I/O) checks its arguments here before anything is read, computed or written,
so a wrong type is :class:`ArgumentError` (an :class:`~backend.errors.InputError`, hence
a ``ValueError``, and a ``TypeError``) rather than an ``AttributeError`` deep inside,
and a bad value leaves no state behind (issue 36, item 5). The command line's parser
gives the same values, so the same checks run for both.

* whole numbers are ``int`` (numpy integers too), never ``bool``, ``float`` or text
  (``'64'``, ``'６４'``);
* real numbers are ``int``/``float``, finite;
* paths are ``str`` / ``os.PathLike`` (``bytes`` are decoded with the file system's
  encoding, ``surrogateescape``), never empty;
* ``cancel`` is ``None``, a ``threading.Event`` (anything with ``is_set()``) or a callable
  returning true to cancel; ``progress`` is ``None``, a callable or a text stream;
* pixels are real numbers (no complex, object, text or bool arrays), finite (NaN/Inf
  refused naming the frame, as the CLI refuses NaN EXR input), alpha in [0, 1].
"""
from __future__ import annotations

import argparse
import numbers
import os
import re
from typing import Any, Callable, Mapping, Optional

import numpy as np

from .errors import InputError


#: largest whole number any argument or option takes (a 64-bit integer)
INT64_MAX = (1 << 63) - 1


class ArgumentError(InputError, TypeError):
    """A public function's argument of the wrong type or value (one line naming it).
    Both a ``ValueError`` (the CLI's exit code 2) and a ``TypeError``."""


def _got(value: Any) -> str:
    text = short_repr(value)
    return f"{text} ({type(value).__name__})"


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 60 characters; a huge integer as its digit count (its
    ``repr`` can fail past Python's digit limit, and a 700-digit line helps nobody)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        return f"<a {len(str(abs(value))) if abs(value).bit_length() < 10000 else 'many'}-digit integer>"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text


def whole_number(name: str, value: Any, *, minimum: Optional[int] = None, none: bool = True) -> Optional[int]:
    """``value`` as ``int``: an ``int`` or numpy integer (not ``bool``), ``>= minimum``.

    Raises:
        ArgumentError: anything else (text such as ``'64'`` included), naming ``name``.
    """
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{name} must be a whole number (int), got {_got(value)}")
    value = int(value)
    if abs(value) > INT64_MAX:  # a 700-digit number was an OverflowError deep inside (issue 36)
        raise ArgumentError(f"{name} must be a whole number within +-{INT64_MAX}, got {_got(value)}")
    if minimum is not None and value < minimum:
        raise ArgumentError(f"{name} must be >= {minimum}, got {value}")
    return value


def real_number(name: str, value: Any, *, none: bool = False) -> Optional[float]:
    """``value`` as a finite ``float`` (an ``int``/``float``/numpy number, not ``bool``).

    Raises:
        ArgumentError: text, ``bool``, complex, NaN or infinity, naming ``name``.
    """
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{name} must be a number, got {_got(value)}")
    try:
        value = float(value)
    except OverflowError:  # an int past 1.8e308 (issue 36)
        raise ArgumentError(f"{name} must be finite, got {_got(value)}") from None
    if not np.isfinite(value):
        raise ArgumentError(f"{name} must be finite, got {value}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` as ``bool`` (``True``/``False`` or a numpy bool; not ``0``/``1`` or text)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{name} must be True or False, got {_got(value)}")
    return bool(value)


def text(name: str, value: Any, *, none: bool = False) -> Optional[str]:
    """``value`` if it is a ``str`` (``None`` when allowed)."""
    if value is None and none:
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"{name} must be text (str), got {_got(value)}")
    return value


def path(name: str, value: Any, *, none: bool = False) -> Optional[str]:
    """``value`` as a ``str`` path: ``str``/``os.PathLike``; ``bytes`` decoded with the file
    system encoding (``os.fsdecode``: undecodable bytes kept as surrogates). Blank refused.

    Raises:
        ArgumentError: another type, or an empty/blank path, naming ``name``.
    """
    if value is None and none:
        return None
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise ArgumentError(f"{name} must be a path (str or os.PathLike), got {_got(value)}")
    try:
        p = os.fsdecode(os.fspath(value))
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"{name} must be a path (str or os.PathLike), got {_got(value)}: {e}") from None
    if not p.strip():
        raise ArgumentError(f"{name} {p!r}: an empty path (an empty shell variable?); name a file or folder")
    if "\0" in p:
        raise ArgumentError(f"{name} {p!r}: a path cannot contain a NUL character")
    return p


def instance(name: str, value: Any, cls: type) -> Any:
    """``value`` if it is a ``cls`` (``ArgumentError`` naming ``name`` otherwise)."""
    if not isinstance(value, cls):
        raise ArgumentError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
    return value


def mapping(name: str, value: Any) -> dict:
    """``value`` as a ``dict`` with text keys (``None``: ``{}``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ArgumentError(f"{name} must be a dict with text keys, got {_got(value)}")
    return dict(value)


class _CallableCancel:
    """A cancel callable seen as an Event (``is_set()`` calls it)."""

    def __init__(self, fn: Callable[[], Any]):
        self._fn = fn

    def is_set(self) -> bool:
        return bool(self._fn())


def cancel(value: Any):
    """``None``, an object with ``is_set()`` (``threading.Event``), or a callable returning
    true to cancel (wrapped to answer ``is_set()``).

    Raises:
        ArgumentError: anything else (``"yes"``, ``True``), naming ``cancel``.
    """
    if value is None:
        return None
    if callable(getattr(value, "is_set", None)):
        return value
    if callable(value) and not isinstance(value, type):
        return _CallableCancel(value)
    raise ArgumentError(f"cancel must be a threading.Event or a callable returning True to cancel, "
                        f"got {_got(value)}")


def progress(value: Any):
    """``None``, a callable taking an event dict, or a text stream (``write``)."""
    if value is None or callable(value) or callable(getattr(value, "write", None)):
        return value
    raise ArgumentError(f"progress must be a callable taking an event dict or a text stream, got {_got(value)}")


def pixels(name: str, value: Any, number: Optional[int], *, channels: Optional[int]) -> np.ndarray:
    """``value`` as a float32 ``H x W x channels`` array (``channels=None``: ``H x W``),
    finite; real dtypes only (float, int, uint).

    Raises:
        ArgumentError: another dtype (complex, object, text, bool), shape or NaN/Inf, naming
            the frame.
    """
    where = f"frame {number}" if number is not None else "frame"
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - ragged lists and the like
        raise ArgumentError(f"{where}: {name} is not an array ({type(e).__name__}: {e})", frame=number) from None
    if arr.dtype.kind not in "fiu":
        raise ArgumentError(f"{where}: {name} must hold real numbers (float or int), got dtype {arr.dtype}",
                            frame=number)
    want = "H x W x 3 RGB" if channels == 3 else "H x W" if channels is None else f"H x W x {channels}"
    ok = arr.ndim == 3 and arr.shape[2] == channels if channels else arr.ndim == 2
    if not ok or min(arr.shape[:2]) < 1:
        raise ArgumentError(f"{where}: {name} must be {want}, got shape {arr.shape}", frame=number)
    arr = arr.astype(np.float32, copy=False)
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(arr.size - np.count_nonzero(finite))
        raise ArgumentError(f"{where}: {bad} NaN/Inf value(s) in {name}; fix the source render (NaN/Inf input "
                            f"is rejected, not guessed)", frame=number)
    return arr


def frame_input(rgb: Any, alpha: Any, number: Any, meta: Any):
    """:meth:`backend.decomposer.Decomposer.frame`'s arguments, checked before any state
    changes: ``(rgb float32 H x W x 3, alpha float32 H x W or None, number, meta)``.

    Raises:
        ArgumentError: naming the argument and the frame.
    """
    number = whole_number("number", number, minimum=0)
    rgb = pixels("RGB", rgb, number, channels=3)
    if alpha is not None:
        alpha = pixels("alpha", alpha, number, channels=None)
        where = "frame" if number is None else f"frame {number}"
        if alpha.shape != rgb.shape[:2]:
            raise ArgumentError(f"{where}: alpha is {alpha.shape[1]}x{alpha.shape[0]}, the RGB "
                                f"{rgb.shape[1]}x{rgb.shape[0]}", frame=number)
        if alpha.min() < 0.0 or alpha.max() > 1.0:
            raise ArgumentError(f"{where}: alpha must be in [0, 1], got {alpha.min():g}..{alpha.max():g}",
                                frame=number)
    if meta is not None and not (isinstance(meta, Mapping) and all(isinstance(k, str) for k in meta)):
        raise ArgumentError(f"meta must be a dict with text keys, got {_got(meta)}")
    return rgb, alpha, number, meta


def frames_spec(value: Any) -> Optional[str]:
    """``frames`` (``"A-B"``, ``"A-"``, ``"A"``; ``None``: every frame) must be text; the
    text is parsed by :func:`backend.jobs.decompose.parse_frames` (the CLI's words)."""
    if value is None or isinstance(value, str):
        return value
    raise ArgumentError(f"frames must be text such as '1-24' (A-B, A- or A), got {_got(value)}")


_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


def int_text(text: str, minimum: Optional[int] = None) -> int:
    """A command-line whole number in ASCII digits ``0-9`` (full-width ``６４``,
    Arabic-Indic digits and ``1_000``, which Python's ``int`` accepts, are refused; the
    same rule as ``--frames``).

    Raises:
        argparse.ArgumentTypeError: naming the text (argparse: exit 2, one line).
    """
    s = str(text).strip()
    if not _INT_RE.fullmatch(s):
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits 0-9, got {text!r}")
    v = int(s)
    if minimum is not None and v < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {v}")
    return v


def float_text(text: str) -> float:
    """A command-line number in ASCII (``1.5``, ``2e-3``), finite: ``nan``, ``inf``,
    full-width digits and ``1_0`` are refused.

    Raises:
        argparse.ArgumentTypeError: naming the text.
    """
    s = str(text).strip()
    if not _FLOAT_RE.fullmatch(s):
        raise argparse.ArgumentTypeError(f"expected a finite number in ASCII digits (e.g. 1.5), got {text!r}")
    return float(s)


def cli_int(text: str) -> int:
    """argparse ``type=`` of a whole-number option (:func:`int_text`)."""
    return int_text(text)


def cli_float(text: str) -> float:
    """argparse ``type=`` of a number option (:func:`float_text`)."""
    return float_text(text)
