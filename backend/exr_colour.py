"""Colour spaces stated in OpenEXR headers: ``chromaticities`` and ``colorInteropID``.

OpenEXR's standard ``chromaticities`` attribute gives the CIE xy of the red, green,
blue primaries and the white point of a file's RGB (absent: Rec.709 / D65). Blender 5
tags every pass (one part per pass) with ``colorInteropID``, the Color Interop Forum
identifier OpenColorIO 2.5 also uses (``lin_rec709_scene`` for scene-linear Rec.709,
``lin_ap1_scene`` ACEScg, ``lin_ap0_scene`` ACES2065-1, ``data`` for non-colour
passes). This module

* reads a file's stated space (:func:`stated_space`),
* converts from it (:func:`conversion_matrix`: primaries -> XYZ -> primaries with a
  Bradford white-point adaptation, the matrices OpenColorIO's ACES configs use),
* finds a space in an OpenColorIO config by interop ID, names or matrix
  (:func:`find_space`),
* builds the attributes our writers put on colour and data passes
  (:func:`colour_attributes`).

All matrices are ``3 x 3`` float64 acting on column RGB vectors (``out = M @ rgb``).
This module never imports ``bpy``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

#: interop ID -> CIE xy of (red, green, blue, white) as OpenEXR's ``chromaticities`` stores them
PRIMARIES: Dict[str, Tuple[float, ...]] = {
    "lin_rec709_scene": (0.64, 0.33, 0.30, 0.60, 0.15, 0.06, 0.3127, 0.3290),
    "lin_ap1_scene": (0.713, 0.293, 0.165, 0.830, 0.128, 0.044, 0.32168, 0.33767),
    "lin_ap0_scene": (0.7347, 0.2653, 0.0, 1.0, 0.0001, -0.0770, 0.32168, 0.33767),
    "lin_p3d65_scene": (0.680, 0.320, 0.265, 0.690, 0.150, 0.060, 0.3127, 0.3290),
    "lin_rec2020_scene": (0.708, 0.292, 0.170, 0.797, 0.131, 0.046, 0.3127, 0.3290),
}
#: interop ID -> names and aliases common OpenColorIO configs give that space
#: (the built-in CG/studio configs, the ACES 1.x configs, Blender's)
NAMES: Dict[str, Tuple[str, ...]] = {
    "lin_rec709_scene": ("Linear Rec.709 (sRGB)", "lin_rec709", "lin_rec709_srgb", "Utility - Linear - sRGB",
                         "lin_srgb", "Linear Rec.709", "Linear", "linear rec.709"),
    "lin_ap1_scene": ("ACEScg", "lin_ap1", "ACES - ACEScg", "ACES AP1"),
    "lin_ap0_scene": ("ACES2065-1", "lin_ap0", "ACES - ACES2065-1", "ACES AP0"),
    "lin_p3d65_scene": ("Linear P3-D65", "lin_p3d65", "Utility - Linear - P3-D65"),
    "lin_rec2020_scene": ("Linear Rec.2020", "lin_rec2020", "Utility - Linear - Rec.2020"),
}
#: human names used in messages
LABELS = {"lin_rec709_scene": "scene-linear Rec.709", "lin_ap1_scene": "ACEScg (AP1)",
          "lin_ap0_scene": "ACES2065-1 (AP0)", "lin_p3d65_scene": "scene-linear P3-D65",
          "lin_rec2020_scene": "scene-linear Rec.2020"}
DATA_ID = "data"
#: how close two chromaticities must be (CIE xy) to name the same space
CHROMA_TOL = 2e-3

_BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])


def rgb_to_xyz(chroma: Sequence[float]) -> np.ndarray:
    """``3 x 3`` RGB -> CIE XYZ matrix of the primaries ``chroma`` (8 floats, as
    OpenEXR's ``chromaticities``), white mapped to ``Y = 1`` (SMPTE RP 177)."""
    rx, ry, gx, gy, bx, by, wx, wy = map(float, chroma)
    prim = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in ((rx, ry), (gx, gy), (bx, by))]).T
    white = np.array([wx / wy, 1.0, (1 - wx - wy) / wy])
    return prim * np.linalg.solve(prim, white)[None, :]


def conversion_matrix(src: Sequence[float], dst: Sequence[float]) -> np.ndarray:
    """``3 x 3`` linear RGB matrix from primaries ``src`` to ``dst`` (8 floats each),
    with a Bradford adaptation between their white points."""
    def xyz(x, y):
        return np.array([x / y, 1.0, (1 - x - y) / y])

    ws, wd = xyz(src[6], src[7]), xyz(dst[6], dst[7])
    cat = np.linalg.inv(_BRADFORD) @ np.diag((_BRADFORD @ wd) / (_BRADFORD @ ws)) @ _BRADFORD
    return np.linalg.inv(rgb_to_xyz(dst)) @ cat @ rgb_to_xyz(src)


def interop_of_chroma(chroma: Sequence[float]) -> Optional[str]:
    """Interop ID of the known space with these chromaticities (within
    :data:`CHROMA_TOL`), or ``None``."""
    c = np.asarray(chroma, np.float64)
    for key, ref in PRIMARIES.items():
        if np.abs(c - np.asarray(ref)).max() <= CHROMA_TOL:
            return key
    return None


def interop_of_name(config, name: str) -> Optional[str]:
    """Interop ID of the OpenColorIO colour space ``name`` (its own, else from
    :data:`NAMES`), or ``None`` when unknown or not scene-linear."""
    cs = config.getColorSpace(name) if config is not None else None
    names = {name.strip().lower()}
    if cs is not None:
        iid = cs.getInteropID() if hasattr(cs, "getInteropID") else ""
        if iid in PRIMARIES or iid == DATA_ID:
            return iid
        names |= {cs.getName().lower(), *(a.lower() for a in cs.getAliases())}
    for key, known in NAMES.items():
        if names & {k.lower() for k in known}:
            return key
    return None


def find_space(config, interop_id: str) -> Optional[str]:
    """Name of the colour space ``interop_id`` (a key of :data:`PRIMARIES`) in an
    OpenColorIO config, or ``None``: by interop ID, then by the names of :data:`NAMES`,
    then by matrix: the scene-referred space ``aces_interchange`` reaches by the
    expected AP0 -> ``interop_id`` matrix (within 1e-3 on three test colours)."""
    spaces = list(config.getColorSpaces())
    for cs in spaces:
        if hasattr(cs, "getInteropID") and cs.getInteropID() == interop_id:
            return cs.getName()
    for n in NAMES.get(interop_id, ()):
        cs = config.getColorSpace(n)
        if cs is not None:
            return cs.getName()
    ap0 = config.getRoleColorSpace("aces_interchange")
    if not ap0 or interop_id not in PRIMARIES:
        return None
    want = conversion_matrix(PRIMARIES["lin_ap0_scene"], PRIMARIES[interop_id])
    probe = np.array([[0.18, 0.18, 0.18], [0.6, 0.2, 0.05], [0.05, 0.3, 0.7]], np.float32)
    import PyOpenColorIO as ocio

    for cs in spaces:
        if cs.getReferenceSpaceType() != ocio.REFERENCE_SPACE_SCENE or cs.isData():
            continue
        try:
            out = probe.copy()
            config.getProcessor(ap0, cs.getName()).getDefaultCPUProcessor().applyRGB(out)
        except Exception:  # noqa: BLE001 - a space the config cannot reach: not this one
            continue
        if np.abs(out - probe @ want.T).max() < 1e-3:
            return cs.getName()
    return None


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def stated_space(header: Dict[str, Any]) -> Tuple[Optional[str], Optional[Tuple[float, ...]]]:
    """The colour space an EXR part's header states: ``(interop_id, chromaticities)``.

    ``interop_id``: ``colorInteropID`` when present, else the known space of the
    ``chromaticities`` (``None`` when neither says; ``"custom"`` for chromaticities of no
    known space). ``chromaticities``: the 8 floats when present, else those of the
    interop ID when known, else ``None``.
    """
    chroma = header.get("chromaticities")
    chroma = tuple(float(c) for c in np.asarray(chroma, np.float64).ravel()[:8]) if chroma is not None else None
    iid = _text(header["colorInteropID"]).strip() if header.get("colorInteropID") else None
    if iid is None and chroma is not None:
        iid = interop_of_chroma(chroma) or "custom"
    if chroma is None and iid in PRIMARIES:
        chroma = PRIMARIES[iid]
    return iid, chroma


def colour_attributes(interop_id: str = "lin_rec709_scene", *, data: bool = False) -> Dict[str, Any]:
    """Header attributes stating a part's colour space, as Blender 5 and OpenImageIO
    read them: ``colorInteropID`` (``data`` for a data pass) and ``chromaticities``
    (the working space's primaries, on data parts too: OpenEXR's default is Rec.709,
    which would be a wrong statement for an ACEScg file).

    Raises:
        KeyError: an interop ID not in :data:`PRIMARIES`.
    """
    return {"colorInteropID": DATA_ID if data else interop_id,
            "chromaticities": tuple(float(c) for c in PRIMARIES[interop_id])}


def label(interop_id: Optional[str], chroma: Optional[Sequence[float]] = None) -> str:
    """Readable name of a stated space, for messages."""
    if interop_id in LABELS:
        return f"{LABELS[interop_id]} ({interop_id})"
    if chroma is not None:
        return "chromaticities " + ", ".join(f"{c:.4f}" for c in chroma)
    return str(interop_id)


#: working spaces offered for the files' colour passes (``--working-space``)
WORKING_SPACES = {"rec709": "lin_rec709_scene", "acescg": "lin_ap1_scene"}


def working_space(name: Optional[str]) -> str:
    """Interop ID of a ``--working-space`` choice (``None``: Rec.709), or the interop ID
    itself.

    Raises:
        ValueError: an unknown choice (one line naming them).
    """
    if name is None:
        return "lin_rec709_scene"
    key = str(name).strip().lower()
    if key in WORKING_SPACES:
        return WORKING_SPACES[key]
    if key in WORKING_SPACES.values():
        return key
    raise ValueError(f"--working-space {name!r}: choose from {', '.join(WORKING_SPACES)}")


def convert_rgb(rgb: np.ndarray, src: str, dst: str) -> np.ndarray:
    """``... x 3`` float32 linear RGB from the space ``src`` to ``dst`` (interop IDs)."""
    if src == dst:
        return np.ascontiguousarray(rgb, dtype=np.float32)
    m = conversion_matrix(PRIMARIES[src], PRIMARIES[dst]).astype(np.float32)
    return np.ascontiguousarray(np.asarray(rgb, np.float32) @ m.T)


def to_working(frame, interop_id: str):
    """A shallow copy of a :class:`backend.contract.GBufferFrame` (scene-linear Rec.709)
    with its colour passes (Combined RGB, Albedo) converted to ``interop_id`` for writing;
    ``frame`` itself when that is Rec.709."""
    if interop_id == "lin_rec709_scene":
        return frame
    import dataclasses

    comb = np.concatenate([convert_rgb(frame.combined[..., :3], "lin_rec709_scene", interop_id),
                           frame.combined[..., 3:]], -1)
    return dataclasses.replace(frame, combined=comb,
                               albedo=convert_rgb(frame.albedo, "lin_rec709_scene", interop_id))


def from_stated_working(frame, header: Dict[str, Any]) -> None:
    """Bring a frame read from a file whose colour passes state another space
    (``colorInteropID`` of its first part, e.g. ``lin_ap1_scene`` from ``--working-space
    acescg``) back to scene-linear Rec.709, in place: every reader sees Rec.709."""
    iid, _ = stated_space(header)
    if iid in PRIMARIES and iid != "lin_rec709_scene":
        frame.combined = np.concatenate([convert_rgb(frame.combined[..., :3], iid, "lin_rec709_scene"),
                                         frame.combined[..., 3:]], -1)
        frame.albedo = convert_rgb(frame.albedo, iid, "lin_rec709_scene")
