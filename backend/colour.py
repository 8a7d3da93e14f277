"""Colour transforms: decoded footage -> scene-linear Rec.709.

Everything downstream of :mod:`backend.footage` works in **scene-linear Rec.709**
(Rec.709 / sRGB primaries, D65 white, linear light), ``float32``.

Default transform (no colour space named):

* 8/16-bit integer images and video are **sRGB-encoded** (Rec.709 primaries); they
  are linearised with the piecewise sRGB EOTF of IEC 61966-2-1::

      V <= 0.04045:  L = V / 12.92
      V >  0.04045:  L = ((V + 0.055) / 1.055) ** 2.4

  (Rec.709 video is treated the same way: its OETF is inverted by the display's
  sRGB/BT.1886-like EOTF, which is what an artist sees on screen.)
* OpenEXR input is already scene-linear and passes through unchanged.

When the user names a colour space (``--colorspace "ACEScg"``,
``"sRGB Encoded Rec.709 (sRGB)"``, ``"Linear P3-D65"``...), OpenColorIO converts
from it to ``Linear Rec.709 (sRGB)`` using the built-in CG config
``ocio://default`` (or the config named by ``$OCIO``). Names and aliases are those
of that config; :func:`list_colorspaces` returns them.
"""
from __future__ import annotations

import functools
import os
from typing import List, Optional

import numpy as np

#: name recorded in headers for the default transform
SRGB = "sRGB"
#: name recorded for input that is already scene-linear Rec.709 (EXR)
LINEAR = "Linear Rec.709 (sRGB)"
_OCIO_TARGET = "Linear Rec.709 (sRGB)"

_LINEAR_NAMES = {"linear", "scene_linear", "lin_rec709", "linear rec.709", LINEAR.lower()}
_SRGB_NAMES = {"srgb", "srgb_tx", "srgb encoded rec.709 (srgb)", "rec709", "rec.709"}


class ColourError(ValueError):
    """Unknown colour space or an OpenColorIO failure."""


def srgb_to_linear(v: np.ndarray) -> np.ndarray:
    """Piecewise sRGB EOTF (IEC 61966-2-1): encoded ``[0, 1]`` -> linear ``[0, 1]``.

    Args:
        v: any shape, float; values outside [0, 1] are clipped first.

    Returns:
        ``float32`` array of the same shape.
    """
    v = np.clip(np.asarray(v, dtype=np.float32), 0.0, 1.0)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    """Inverse of :func:`srgb_to_linear`: linear (clipped to [0, 1]) -> sRGB-encoded ``float32``."""
    x = np.clip(np.asarray(x, dtype=np.float32), 0.0, 1.0)
    return np.where(x <= 0.0031308, x * 12.92, 1.055 * np.power(x, 1 / 2.4) - 0.055).astype(
        np.float32
    )


@functools.lru_cache(maxsize=1)
def _ocio_config():
    import PyOpenColorIO as ocio

    path = os.environ.get("OCIO") or "ocio://default"
    try:
        return ocio.Config.CreateFromFile(path)
    except Exception as e:  # pragma: no cover - depends on the user's $OCIO
        raise ColourError(f"cannot load OpenColorIO config {path!r}: {e}") from e


def list_colorspaces() -> List[str]:
    """Colour-space names of the OpenColorIO config in use (``$OCIO`` or ``ocio://default``)."""
    return [cs.getName() for cs in _ocio_config().getColorSpaces()]


@functools.lru_cache(maxsize=16)
def _ocio_processor(name: str):
    cfg = _ocio_config()
    cs = cfg.getColorSpace(name)
    if cs is None:
        known = ", ".join(repr(n) for n in list_colorspaces())
        raise ColourError(f"unknown colour space {name!r}; OpenColorIO knows: {known}")
    return cfg.getProcessor(cs.getName(), _OCIO_TARGET).getDefaultCPUProcessor()


def canonical_name(colorspace: Optional[str], *, is_linear_file: bool = False) -> str:
    """Name recorded in headers for a source colour space.

    ``None`` means the default: :data:`LINEAR` for EXR input, else :data:`SRGB`.
    Named spaces are returned as OpenColorIO spells them (aliases resolved).

    Raises:
        ColourError: unknown name.
    """
    if colorspace is None:
        return LINEAR if is_linear_file else SRGB
    if not isinstance(colorspace, str) or not colorspace.isprintable():
        # OpenColorIO takes UTF-8 text only: bytes that are not UTF-8 (surrogates) raised a
        # TypeError (issue 36, own hostile pass)
        raise ColourError(f"unknown colour space {colorspace!r}: not printable text")
    low = colorspace.strip().lower()
    if low in _SRGB_NAMES and low != "srgb encoded rec.709 (srgb)":
        return SRGB
    if low in _LINEAR_NAMES:
        return LINEAR
    cfg = _ocio_config()
    cs = cfg.getColorSpace(colorspace)
    if cs is None:
        _ocio_processor(colorspace)  # raises with the list of names
    return cs.getName()


def to_scene_linear(
    rgb: np.ndarray, colorspace: Optional[str] = None, *, is_linear_file: bool = False
) -> np.ndarray:
    """Convert decoded pixel values to scene-linear Rec.709.

    Args:
        rgb: ``H x W x 3`` float, the decoded values (integer formats normalised to
            [0, 1]; float/EXR values as stored).
        colorspace: ``None`` for the default (sRGB EOTF, or identity when
            ``is_linear_file``), or an OpenColorIO colour-space name/alias.
        is_linear_file: the source is a float format that is already linear (EXR).

    Returns:
        ``H x W x 3`` ``float32`` scene-linear Rec.709 (not clipped for linear input).

    Raises:
        ColourError: unknown colour space.
    """
    name = canonical_name(colorspace, is_linear_file=is_linear_file)
    if name == LINEAR:
        return np.ascontiguousarray(rgb, dtype=np.float32)
    if name == SRGB:
        return srgb_to_linear(rgb)
    proc = _ocio_processor(name)
    out = np.ascontiguousarray(rgb, dtype=np.float32).copy()
    proc.applyRGB(out)
    return out
