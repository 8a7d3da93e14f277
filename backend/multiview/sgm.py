"""Semi-global aggregation of a plane-sweep cost volume.

Hirschmüller 2008, "Stereo processing by semiglobal matching and mutual information"
(TPAMI): the cost of each plane at a pixel is replaced by the sum, over scan
directions ``r``, of the cheapest path cost reaching it::

    L_r(p, d) = C(p, d) + min(L_r(p - r, d), L_r(p - r, d +- 1) + P1,
                              min_k L_r(p - r, k) + P2) - min_k L_r(p - r, k)

``P1`` penalises a one-plane step between neighbouring pixels (slanted surfaces),
``P2`` any larger jump (depth edges); ``P2`` is lowered across strong intensity
edges of the reference image (where depth edges are likely). Planes are uniform in
inverse depth, so one plane is about one pixel of parallax everywhere. Four
directions (left, right, up, down) are scanned; each scan is vectorised over the
other image axis.
"""
from __future__ import annotations

import numpy as np


def _scan(C: np.ndarray, P1: float, P2: np.ndarray, out: np.ndarray, reverse: bool) -> None:
    """Add the path costs of one direction to ``out``. ``C``, ``out``: ``S x N x D`` with
    the scan along axis 0; ``P2``: ``S x N x 1`` (penalty for entering step ``i``)."""
    n = C.shape[0]
    order = range(n - 1, -1, -1) if reverse else range(n)
    prev = None
    for i in order:
        if prev is None:
            cur = C[i].copy()
        else:
            m = prev.min(axis=1, keepdims=True)
            t = np.minimum(prev, m + P2[i])
            np.minimum(t[:, 1:], prev[:, :-1] + P1, out=t[:, 1:])
            np.minimum(t[:, :-1], prev[:, 1:] + P1, out=t[:, :-1])
            cur = C[i] + (t - m)
        out[i] += cur
        prev = cur


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
    g = guide.astype(np.float32)
    agg = np.zeros((vol.shape[1], vol.shape[2], vol.shape[0]), np.float32)  # h x w x D
    C = np.ascontiguousarray(vol.transpose(1, 2, 0))  # h x w x D
    # vertical scans (along h)
    dy = np.abs(np.diff(g, axis=0, prepend=g[:1]))
    dy_next = np.abs(np.diff(g, axis=0, append=g[-1:]))
    _scan(C, P1, (P2 / (1 + dy / edge))[..., None], agg, reverse=False)
    _scan(C, P1, (P2 / (1 + dy_next / edge))[..., None], agg, reverse=True)
    # horizontal scans (along w): work on the transposed layout
    Ct = np.ascontiguousarray(C.transpose(1, 0, 2))
    aggt = np.zeros_like(Ct)
    dx = np.abs(np.diff(g, axis=1, prepend=g[:, :1])).T
    dx_next = np.abs(np.diff(g, axis=1, append=g[:, -1:])).T
    _scan(Ct, P1, (P2 / (1 + dx / edge))[..., None], aggt, reverse=False)
    _scan(Ct, P1, (P2 / (1 + dx_next / edge))[..., None], aggt, reverse=True)
    agg += aggt.transpose(1, 0, 2)
    return np.ascontiguousarray(agg.transpose(2, 0, 1)) * np.float32(0.25)
