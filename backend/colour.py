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
from it to the working space using the built-in CG config ``ocio://default`` (or the
config named by ``$OCIO``). Names and aliases are those of that config;
:func:`list_colorspaces` returns them. The working space (scene-linear Rec.709,
interop ID ``lin_rec709_scene``) is found in the config by its interop ID, then by its
usual names, then by its matrix from the ``aces_interchange`` role
(:func:`working_space_name`), so a studio ACES config without the name
``Linear Rec.709 (sRGB)`` works; a config with none of them converts through
``aces_interchange`` and the published AP0 -> Rec.709 matrix (Bradford, D60 -> D65).

EXR files state their colour space with the standard ``chromaticities`` attribute
and Blender 5's ``colorInteropID``; :mod:`backend.exr_colour` reads and writes them.
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
#: interop ID (OpenColorIO 2.5 / Color Interop Forum) of the working space
WORKING_ID = "lin_rec709_scene"

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
    """``(processor, matrix)``: OpenColorIO CPU processor from ``name`` to the working
    space, and a ``3 x 3`` matrix applied after it (``None``: none)."""
    from . import exr_colour

    cfg = _ocio_config()
    cs = cfg.getColorSpace(name)
    if cs is None:
        known = ", ".join(repr(n) for n in list_colorspaces())
        raise ColourError(f"unknown colour space {name!r}; OpenColorIO knows: {known}")
    target = working_space_name()
    if target is not None:
        return cfg.getProcessor(cs.getName(), target).getDefaultCPUProcessor(), None
    ap0 = cfg.getRoleColorSpace("aces_interchange")
    if not ap0:
        raise ColourError(f"the OpenColorIO config {os.environ.get('OCIO') or 'ocio://default'} has no "
                          f"scene-linear Rec.709 colour space (interop ID {WORKING_ID}) and no "
                          "aces_interchange role to reach it through; add either to the config")
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES["lin_ap0_scene"], exr_colour.PRIMARIES[WORKING_ID])
    return cfg.getProcessor(cs.getName(), ap0).getDefaultCPUProcessor(), m


@functools.lru_cache(maxsize=1)
def working_space_name() -> Optional[str]:
    """Name of the working space (scene-linear Rec.709) in the OpenColorIO config in use,
    or ``None`` when the config has none (then :func:`to_scene_linear` goes through the
    ``aces_interchange`` role and the AP0 -> Rec.709 matrix).

    Found, in this order: the colour space whose interop ID is ``lin_rec709_scene``;
    one named or aliased as the common configs spell it (``Linear Rec.709 (sRGB)``,
    ``lin_rec709``, ``Utility - Linear - sRGB``, ``lin_srgb`` ...); the scene-referred
    colour space that ``aces_interchange`` reaches by the published AP0 -> Rec.709
    matrix (within 1e-3 on test colours).
    """
    from . import exr_colour

    return exr_colour.find_space(_ocio_config(), WORKING_ID)


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
    proc, matrix = _ocio_processor(name)
    out = np.ascontiguousarray(rgb, dtype=np.float32).copy()
    proc.applyRGB(out)
    if matrix is not None:
        out = np.ascontiguousarray(out @ matrix.T.astype(np.float32))
    return out


def named_interop(colorspace: Optional[str]) -> Optional[str]:
    """Interop ID of a ``--colorspace`` name (``lin_rec709_scene`` for the linear
    shortcuts, ``None`` for sRGB-encoded or a space without a known interop ID)."""
    if colorspace is None:
        return None
    name = canonical_name(colorspace)
    if name == LINEAR:
        return WORKING_ID
    if name == SRGB:
        return None
    from . import exr_colour

    return exr_colour.interop_of_name(_ocio_config(), name)


def from_stated(rgb: np.ndarray, colorspace: Optional[str], stated, path: str = "") -> tuple:
    """Scene-linear Rec.709 from a linear float file (EXR) whose header states a space.

    Args:
        rgb: ``H x W x 3`` float, as stored.
        colorspace: the user's ``--colorspace`` (``None``: none named).
        stated: ``(interop_id, chromaticities)`` of :func:`backend.exr_colour.stated_space`.
        path: the file, for messages.

    Returns:
        ``(rgb, name)``: ``H x W x 3`` ``float32`` scene-linear Rec.709 and the name of the
        space it was converted from (the config's name when it has one, else a label).

    Raises:
        ColourError: ``colorspace`` names another known space than the file states
            (e.g. an ACES2065-1 plate read with ``--colorspace "Linear Rec.709 (sRGB)"``).
    """
    from . import exr_colour

    iid, chroma = stated
    if colorspace is not None:
        named = named_interop(colorspace)
        if iid not in (None, exr_colour.DATA_ID) and named is not None and named != iid:
            raise ColourError(
                f"{path}: the file states {exr_colour.label(iid, chroma)} in its header, but --colorspace "
                f"names {colorspace!r} ({named}); leave --colorspace out to use the file's, or fix the header")
        return to_scene_linear(rgb, colorspace, is_linear_file=True), canonical_name(colorspace, is_linear_file=True)
    if iid in (None, WORKING_ID, exr_colour.DATA_ID) or chroma is None:
        return np.ascontiguousarray(rgb, dtype=np.float32), LINEAR
    m = exr_colour.conversion_matrix(chroma, exr_colour.PRIMARIES[WORKING_ID]).astype(np.float32)
    out = np.ascontiguousarray(np.asarray(rgb, np.float32) @ m.T)
    name = exr_colour.find_space(_ocio_config(), iid) if iid in exr_colour.PRIMARIES else None
    return out, name or exr_colour.label(iid, chroma)


#: AVColorTransferCharacteristic values of HDR transfers (SMPTE ST 2084 PQ, ARIB STD-B67 HLG)
VIDEO_HDR_TRC = {16: "PQ (SMPTE ST 2084)", 18: "HLG (ARIB STD-B67)"}
#: AVColorTransferCharacteristic: linear light
VIDEO_LINEAR_TRC = 8
#: AVColorPrimaries values that are not Rec.709-like -> interop ID of their linear space
VIDEO_PRIMARIES = {9: "lin_rec2020_scene", 12: "lin_p3d65_scene"}


def video_transform(trc: int, primaries: int, colorspace: Optional[str], path: str = "") -> tuple:
    """How a video stream's tagged transfer and primaries are decoded when no
    ``--colorspace`` is named.

    Args:
        trc: the stream's ``color_trc`` (AVColorTransferCharacteristic; 2 = unspecified).
        primaries: its ``color_primaries`` (AVColorPrimaries; 2 = unspecified).
        colorspace: the user's ``--colorspace`` (then it alone decides: ``(None, False, name)``).
        path: the file, for messages.

    Returns:
        ``(matrix, linear, name)``: a ``3 x 3`` float32 matrix from the stream's primaries
        to Rec.709 applied after linearising (``None`` for Rec.709-like primaries),
        whether the values are already linear (``trc`` 8), and the name recorded as
        the source colour space.

    Raises:
        ColourError: an HDR transfer (PQ, HLG) without ``--colorspace``: its display-
            referred light has no single scene-linear reading, so it is refused rather
            than decoded as sRGB.
    """
    from . import exr_colour

    if colorspace is not None:
        return None, False, canonical_name(colorspace)
    trc, primaries = int(trc or 2), int(primaries or 2)
    if trc in VIDEO_HDR_TRC:
        raise ColourError(f"{path}: the video is tagged with the HDR transfer {VIDEO_HDR_TRC[trc]}; it is not "
                          "decoded as sRGB. Name its colour space with --colorspace (an OpenColorIO space "
                          "of your config), or convert it to a scene-linear EXR sequence first")
    iid = VIDEO_PRIMARIES.get(primaries)
    linear = trc == VIDEO_LINEAR_TRC
    base = LINEAR if linear else SRGB
    if iid is None:
        return None, linear, base
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES[iid], exr_colour.PRIMARIES[WORKING_ID])
    prim = {"lin_rec2020_scene": "Rec.2020", "lin_p3d65_scene": "P3-D65"}[iid]
    return m.astype(np.float32), linear, f"{base} transfer, {prim} primaries"
