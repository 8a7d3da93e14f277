"""Channel layouts of a frame file: ``gbuffer`` (the default) and ``nuke`` (opt-in).

``gbuffer`` (``docs/gbuffer-contract.md``): one part per pass, ``GBuffer.<Pass>.<Chan>``;
Blender shows each pass on the Image node's ``GBuffer`` layer.

``nuke`` (``decompose --layout nuke``): one part, channels named so that Nuke's EXR
reader (Foundry's published mapping, ``ExrChannelNameToNuke.cpp`` of the NDK examples:
a name splits at its periods into layer and channel, ``R``/``G``/``B``/``A`` become
``red``/``green``/``blue``/``alpha``, characters that are not letters or digits in a
layer become ``_``) keeps every pass in a layer of its own with no Shuffle, Blender's
Image node shows every pass (unlayered ``R G B A`` as ``Combined``), and OpenImageIO
takes ``depth.Z`` as the depth channel (it takes the first channel named ``Z`` or
``*.Z`` in the file's sorted order: the layer names are lower case so ``depth`` sorts
before ``normal`` and ``position``)::

    R G B A                      -> Nuke rgba.red/green/blue/alpha   (Blender: Combined)
    depth.Z                      -> depth.Z   planar depth (not Nuke ScanlineRender's 1/z)
    normal.X normal.Y normal.Z   -> normal.X/Y/Z
    albedo.R albedo.G albedo.B   -> albedo.red/green/blue
    metallic.V roughness.V confidence.V
    position.X position.Y position.Z              (with --passes position)
    backward.u backward.v forward.u forward.v     (with --passes vector: Nuke's motion
        layers, pixels, +v up: forward = Blender Vector.ZW, backward = -Vector.XY)

Readers (:func:`backend.contract.read_frame`) accept both layouts, and folders written
before either. This module never imports ``bpy``.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

LAYOUTS = ("gbuffer", "nuke")
DEFAULT = "gbuffer"

#: pass -> channel names in the ``nuke`` layout (Vector: see :func:`nuke_channels`)
NUKE: Dict[str, Tuple[str, ...]] = {
    "Combined": ("R", "G", "B", "A"),
    "Depth": ("depth.Z",),
    "Normal": ("normal.X", "normal.Y", "normal.Z"),
    "Albedo": ("albedo.R", "albedo.G", "albedo.B"),
    "Metallic": ("metallic.V",),
    "Roughness": ("roughness.V",),
    "Confidence": ("confidence.V",),
    "Position": ("position.X", "position.Y", "position.Z"),
}
_MOTION = ("backward.u", "backward.v", "forward.u", "forward.v")


def check(layout: Optional[str]) -> str:
    """The layout name (``None``: the default).

    Raises:
        ValueError: an unknown layout (one line naming the choices).
    """
    name = DEFAULT if layout is None else str(layout).strip().lower()
    if name not in LAYOUTS:
        raise ValueError(f"--layout {layout!r}: choose from {', '.join(LAYOUTS)}")
    return name


def nuke_channels(name: str, arr: np.ndarray) -> Dict[str, np.ndarray]:
    """Channel name -> ``H x W`` plane of pass ``name`` in the ``nuke`` layout (the array
    as the contract holds it; its on-disk dtype is the caller's)."""
    if name == "Vector":
        return {"backward.u": -arr[..., 0], "backward.v": -arr[..., 1],
                "forward.u": arr[..., 2], "forward.v": arr[..., 3]}
    names = NUKE[name]
    if len(names) == 1:
        return {names[0]: arr}
    return {n: arr[..., i] for i, n in enumerate(names)}


def find_nuke(chans: Dict[str, np.ndarray], name: str) -> Optional[np.ndarray]:
    """Pass ``name`` from a ``nuke``-layout file's channels as ``float32`` (``H x W`` or
    ``H x W x C``), or ``None`` when absent."""
    if name == "Vector":
        if not all(c in chans for c in _MOTION):
            return None
        b_u, b_v, f_u, f_v = (chans[c].astype(np.float32) for c in _MOTION)
        return np.stack([-b_u, -b_v, f_u, f_v], -1)
    names = NUKE.get(name)
    if names is None or not all(c in chans for c in names):
        return None
    planes = [chans[c].astype(np.float32) for c in names]
    return planes[0] if len(planes) == 1 else np.stack(planes, -1)

