"""Semi-global aggregation of a plane-sweep cost volume.

Hirschmüller 2008, "Stereo processing by semiglobal matching and mutual information"
(TPAMI): the cost of each plane at a pixel is replaced by the sum, over scan
directions ``r``, of the cheapest path cost reaching it::

    L_r(p, d) = C(p, d) + min(L_r(p - r, d), L_r(p - r, d +- 1) + P1,
                              min_k L_r(p - r, k) + P2) - min_k L_r(p - r, k)

``P1`` penalises a one-plane step between neighbouring pixels (slanted surfaces),
``P2`` any larger jump (depth edges); ``P2`` is lowered across strong intensity
edges of the reference image (where depth edges are likely). Planes are uniform in
inverse depth, so one plane is about 1.5 px of parallax everywhere. Four
directions (left, right, up, down) are scanned; each scan is vectorised over the
other image axis.

Layout: the volume stays ``D x h x w`` (as the plane sweep builds it, one plane at a
time). The vertical scans read its ``D x w`` row slices directly; the horizontal ones
run on a per-plane transposed copy (``D x w x h``). Each step works on a ``D x N``
slice with the planes on the outer axis (plane shifts and the min over planes are
whole-row operations) into preallocated buffers. The scans stay on one thread: a step
is too small (``D x N`` floats) for two threads to gain, as the GIL hand-offs between
numpy calls cost more than the arithmetic.
"""
from __future__ import annotations

import numpy as np


def _scan(C: np.ndarray, P1: float, P2: np.ndarray, out: np.ndarray, reverse: bool, first: bool) -> None:
    """Add (``first``: write) the path costs of one direction to ``out``. ``C``, ``out``:
    ``S x D x N`` views with the scan along axis 0 and the planes on axis 1; ``P2``:
    ``S x N`` float32 (penalty for entering step ``i``)."""
    n, d, m = C.shape
    order = range(n - 1, -1, -1) if reverse else range(n)
    t = np.empty((d, m), np.float32)
    s = np.empty((d, m), np.float32)
    lo = np.empty((1, m), np.float32)
    lo_p2 = np.empty((1, m), np.float32)
    bufs = [np.empty((d, m), np.float32), np.empty((d, m), np.float32)]
    prev = None
    for k, i in enumerate(order):
        cur = out[i] if first else bufs[k % 2]
        if prev is None:
            np.copyto(cur, C[i])
        else:
            np.min(prev, axis=0, keepdims=True, out=lo)
            np.add(lo, P2[i], out=lo_p2)
            np.minimum(prev, lo_p2, out=t)
            np.add(prev, np.float32(P1), out=s)
            np.minimum(t[1:], s[:-1], out=t[1:])
            np.minimum(t[:-1], s[1:], out=t[:-1])
            np.subtract(t, lo, out=t)
            np.add(C[i], t, out=cur)
        if not first:
            out[i] += cur
        prev = cur


def _scan_pair(C: np.ndarray, P2_fwd: np.ndarray, P2_bwd: np.ndarray, P1: float, out: np.ndarray) -> None:
    """Forward + backward path costs along axis 0 of ``C`` (``S x D x N`` view), summed
    in that order into ``out`` (an ``S x D x N`` float32 view)."""
    _scan(C, P1, P2_fwd, out, reverse=False, first=True)
    _scan(C, P1, P2_bwd, out, reverse=True, first=False)


def _horizontal(vol: np.ndarray, g: np.ndarray, P1: float, P2: float, edge: float) -> np.ndarray:
    """Left-to-right + right-to-left path costs, ``D x w x h`` (transposed planes)."""
    import cv2

    volT = np.empty((vol.shape[0], vol.shape[2], vol.shape[1]), np.float32)
    for i in range(vol.shape[0]):
        cv2.transpose(vol[i], volT[i])
    dx = np.abs(np.diff(g, axis=1, prepend=g[:, :1])).T
    dx_next = np.abs(np.diff(g, axis=1, append=g[:, -1:])).T
    fwd = (P2 / (1 + dx / edge)).astype(np.float32)
    bwd = (P2 / (1 + dx_next / edge)).astype(np.float32)
    out = np.empty(volT.shape, np.float32)
    _scan_pair(volT.transpose(1, 0, 2), fwd, bwd, P1, out.transpose(1, 0, 2))  # scan along w
    return out


def _vertical(vol: np.ndarray, g: np.ndarray, P1: float, P2: float, edge: float) -> np.ndarray:
    """Top-to-bottom + bottom-to-top path costs, ``D x h x w``."""
    dy = np.abs(np.diff(g, axis=0, prepend=g[:1]))
    dy_next = np.abs(np.diff(g, axis=0, append=g[-1:]))
    fwd = (P2 / (1 + dy / edge)).astype(np.float32)
    bwd = (P2 / (1 + dy_next / edge)).astype(np.float32)
    out = np.empty(vol.shape, np.float32)
    _scan_pair(vol.transpose(1, 0, 2), fwd, bwd, P1, out.transpose(1, 0, 2))  # scan along h
    return out


def sgm_aggregate(vol: np.ndarray, guide: np.ndarray, P1: float = 0.1, P2: float = 1.0,
                  edge: float = 0.1) -> np.ndarray:
    """Semi-global aggregation (4 directions) of a cost volume.

    Args:
        vol: ``D x h x w`` float32 matching cost per plane (e.g. 1 - NCC, in [0, 2]).
        guide: ``h x w`` float32 grey reference image in about [0, 1].
        P1: penalty for a one-plane change between 4-neighbours.
        P2: penalty for a larger change; divided by ``1 + |grey step| / edge`` so depth
            may jump more freely across intensity edges.

    Returns:
        ``D x h x w`` float32 aggregated cost divided by 4 (comparable to ``vol``).
    """
    import cv2

    vol = np.ascontiguousarray(vol, np.float32)
    g = guide.astype(np.float32)
    agg = _vertical(vol, g, P1, P2, edge)
    horiz = _horizontal(vol, g, P1, P2, edge)
    tmp = np.empty(vol.shape[1:], np.float32)
    quarter = np.float32(0.25)
    for i in range(vol.shape[0]):
        cv2.transpose(horiz[i], tmp)
        np.add(agg[i], tmp, out=agg[i])
        np.multiply(agg[i], quarter, out=agg[i])
    return agg
