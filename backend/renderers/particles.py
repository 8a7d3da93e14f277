"""Falling rain and snow for the embedded renderer: screen-space particle layers.

Hash-based and deterministic (the same frame index or time gives the same pattern);
sizes in units of the frame height, so a clip shows the same streaks and flakes at any
resolution; coverage box-filtered (no stair steps). See docs/restyle.md ("Looks").
Moved out of :mod:`.embedded` unchanged (issue 28), which re-exports these names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

F32 = np.float32


def _hash01(*keys: np.ndarray, seed: int = 0) -> np.ndarray:
    """Deterministic hash of integer arrays to float32 in ``[0, 1)`` (uint32
    multiply-xorshift, wraps modulo 2^32 on every platform)."""
    with np.errstate(over="ignore"):
        x = np.full(np.broadcast(*keys).shape, np.uint32(seed * 0x9E3779B1 & 0xFFFFFFFF), dtype=np.uint32)
        for i, k in enumerate(keys):
            x ^= (np.asarray(k).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32) * np.uint32(
                (0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)[i % 3])
            x ^= x >> np.uint32(15)
            x *= np.uint32(0x2C1B3C6D)
            x ^= x >> np.uint32(12)
            x *= np.uint32(0x297A2D39)
            x ^= x >> np.uint32(15)
    return (x >> np.uint32(8)).astype(F32) * F32(1.0 / (1 << 24))


@dataclass(frozen=True)
class _ParticleLayer:
    """One depth layer of falling particles, sized in units of the frame height.

    ``cell``: column spacing; ``width``: particle width; ``length``: particle length
    along the fall (a streak; equal to ``width`` for a round flake); ``period``: spacing
    of particles along a column; ``speed``: fall speed (frame heights per second);
    ``density``: fraction of slots that hold a particle; ``opacity``: its brightness.
    """

    cell: float
    width: float
    length: float
    period: float
    speed: float
    density: float
    opacity: float


#: rain: three layers (near, mid, far); streaks are long, thin, fast (motion blur)
RAIN_LAYERS = (
    _ParticleLayer(cell=0.045, width=0.0030, length=0.16, period=0.55, speed=2.6, density=0.45, opacity=0.8),
    _ParticleLayer(cell=0.022, width=0.0018, length=0.09, period=0.38, speed=1.9, density=0.45, opacity=0.55),
    _ParticleLayer(cell=0.011, width=0.0011, length=0.05, period=0.24, speed=1.3, density=0.45, opacity=0.35),
)
RAIN_SLANT = 0.16  # tan of the angle from vertical
#: snow: a 180-degree shutter at 24 fps (1/48 s) smears each flake along its fall
SNOW_SHUTTER_S = 1.0 / 48.0


def _snow_layer(cell, width, period, speed, density, opacity):
    # motion blur: the flake's disc swept over the shutter time (length = width + path)
    return _ParticleLayer(cell=cell, width=width, length=width + speed * SNOW_SHUTTER_S,
                          period=period, speed=speed, density=density, opacity=opacity)


#: snow: round flakes in three depth layers, sized and sped by distance (parallax: the
#: near layer's flakes are the largest and cross the frame fastest, ~2 s per frame
#: height, the far layer's the smallest and slowest), swaying, motion-blurred
SNOW_LAYERS = (
    _snow_layer(cell=0.06, width=0.010, period=0.09, speed=0.45, density=0.45, opacity=1.0),
    _snow_layer(cell=0.035, width=0.006, period=0.06, speed=0.22, density=0.45, opacity=0.8),
    _snow_layer(cell=0.02, width=0.0035, period=0.04, speed=0.10, density=0.45, opacity=0.6),
)


def _box_cover(d_px: np.ndarray, width_px: float) -> np.ndarray:
    """Fraction of a 1-pixel box around each pixel centre covered by a band of width
    ``width_px`` whose centre is ``d_px`` pixels away (exact box-filter anti-aliasing:
    a band thinner than a pixel covers part of it, never aliases to a full pixel)."""
    half = F32(0.5 * width_px)
    lo = np.maximum(d_px - F32(0.5), -half)
    hi = np.minimum(d_px + F32(0.5), half)
    return np.maximum(hi - lo, F32(0.0))


def _falling(h: int, w: int, frame_index: int, time_s: float, layers, *, slant: float,
             sway: float = 0.0, round_particles: bool = False) -> np.ndarray:
    """Falling particles, coverage in ``[0, 1]`` (H x W float32), hash-based, deterministic.

    Built at full resolution in coordinates normalised by the frame height, so the same
    clip at 480x270 and at 1920x1080 shows the same streaks (sizes scale with the
    resolution). Each layer splits the (slanted) frame into columns ``cell`` wide; along a
    column, slots ``period`` long each hold at most one particle (hashed presence, phase,
    sideways jitter and speed). Cross-section coverage is box-filtered (:func:`_box_cover`)
    and streak ends fade over a pixel, so nothing is aliased into stair steps. The pattern
    moves with ``time_s`` (or the frame index at 24 fps when 0); ``sway`` (in frame
    heights) adds a slow sideways drift (snow).
    """
    t = time_s if time_s else frame_index / 24.0
    if sway and slant:
        raise ValueError("_falling: sway needs slant 0 (the sparse pass needs rows of constant drift)")
    inv_h = F32(1.0 / h)
    norm = 1.0 / math.sqrt(1.0 + slant * slant)
    yc = (np.arange(h, dtype=F32) + F32(0.5)) * inv_h          # row centres, frame-height units
    out = np.zeros((h, w), dtype=F32)
    px = F32(h)  # frame-height units -> pixels
    for li, L in enumerate(layers):
        # rotated coordinates: v along the fall, u across it (distances kept); on a row, u
        # is linear in x: u = (x_c - y_c slant) norm + drift(row)
        drift = (F32(sway * (1.0 - 0.3 * li)) * np.sin(yc * F32(9.0) + F32(t * 1.3 + li)) if sway
                 else np.zeros(h, F32))
        corners = [(xx - yy * slant) * norm + dd for xx in (0.0, w / h) for yy, dd in
                   ((float(yc[0]), float(drift.min())), (float(yc[-1]), float(drift.max())),
                    (float(yc[0]), float(drift.max())), (float(yc[-1]), float(drift.min())))]
        c0 = int(math.floor(min(corners) / L.cell)) - 1
        cols = np.arange(c0, int(math.floor(max(corners) / L.cell)) + 2)
        centre = ((cols + F32(0.5) + (_hash01(cols, seed=37 + li) - F32(0.5)) * F32(0.6))
                  * F32(L.cell)).astype(F32)
        # only the pixels a column's particles can cover: a few around each column's line
        # on each row (sparse; the rest of the frame is never touched)
        width_px = max(L.width * h, 1e-3)
        # pixel i (centre at index i) meets the band when |i - x_line| < half, in x pixels
        half = (0.5 * width_px + 0.5) / norm
        x_line = ((centre[None, :] - drift[:, None]) / F32(norm) + yc[:, None] * F32(slant)) * px - F32(0.5)
        xs = (np.ceil(x_line - F32(half)).astype(np.int32)[..., None]
              + np.arange(int(math.floor(2 * half)) + 2, dtype=np.int32))
        ys = np.broadcast_to(np.arange(h, dtype=np.int32)[:, None, None], xs.shape)
        ks = np.broadcast_to(np.arange(cols.size, dtype=np.int32)[None, :, None], xs.shape)
        ok = (xs >= 0) & (xs < w)
        xs, ys, ks = xs[ok], ys[ok], ks[ok]
        uu = ((xs.astype(F32) + F32(0.5)) * inv_h - yc[ys] * F32(slant)) * F32(norm) + drift[ys]
        own = np.floor(uu * F32(1.0 / L.cell)).astype(np.int32) - c0 == ks  # the pixel's own column
        across = _box_cover((uu - centre[ks]) * px, width_px)
        keep = own & (across > 0)
        if not keep.any():
            continue
        xs, ys, ks, across = xs[keep], ys[keep], ks[keep], across[keep]
        idx = ys.astype(np.int64) * w + xs
        ci = ks
        v = (yc[ys] + (xs.astype(F32) + F32(0.5)) * inv_h * F32(slant)) * F32(norm)
        c_idx = ci
        col_h = _hash01(cols, seed=11 + li)[c_idx]
        speed = F32(L.speed) * (F32(0.8) + F32(0.4) * col_h)
        vv = v * F32(1.0 / L.period) - speed * F32(t / L.period) + col_h * F32(13.0)
        slot = np.floor(vv)
        s = vv - slot  # position inside the slot, 0..1 (0 = head)
        si = slot.astype(np.int32)
        s0 = int(si.min())
        si -= s0
        slots = np.arange(s0, s0 + int(si.max()) + 1)
        present = (_hash01(cols[:, None], slots[None, :], seed=23 + li) < F32(L.density))[c_idx, si]
        along_px = s * F32(L.period) * px          # pixels behind the head
        len_px = max(L.length * h, 1.0)
        if round_particles:
            # a disc swept along the fall (length >= width): the same light spread over
            # the longer path, so its brightness is width / length
            r = F32(0.5 * len_px)
            along = _box_cover(along_px - r, float(2 * r)) * F32(min(1.0, L.width / max(L.length, 1e-9)))
        else:
            # bright head fading toward the tail; both ends anti-aliased over a pixel
            ramp = F32(1.0) - np.clip(along_px * F32(1.0 / len_px), 0.0, 1.0)
            along = np.clip(along_px + F32(0.5), 0.0, 1.0) * ramp
        out.reshape(-1)[idx] += across * along * present * F32(L.opacity)  # idx unique per layer
    np.minimum(out, F32(1.0), out=out)
    return out


def _rain_streaks(h: int, w: int, frame_index: int, time_s: float) -> np.ndarray:
    """Fast, slightly slanted rain streaks in three depth layers (see :func:`_falling`)."""
    return _falling(h, w, frame_index, time_s, RAIN_LAYERS, slant=RAIN_SLANT)


def _snowflakes(h: int, w: int, frame_index: int, time_s: float) -> np.ndarray:
    """Slow, swaying round snowflakes in three depth layers (see :func:`_falling`)."""
    import cv2

    flakes = _falling(h, w, frame_index, time_s, SNOW_LAYERS, slant=0.0, sway=0.01,
                      round_particles=True)
    # soften the box-filtered rectangles into round, slightly defocused flakes (a
    # Gaussian of 0.15 % of the frame height: 0.8 px at 540 rows)
    return cv2.GaussianBlur(flakes, (0, 0), max(0.3, 0.0015 * h), borderType=cv2.BORDER_REFLECT)
