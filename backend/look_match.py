"""Look matching to reference footage (stage 2 of sim-to-real, offline, no weights).

Method: **Monge-Kantorovich linear colour transfer** (Pitié & Kokaram, "The linear
Monge-Kantorovitch linear colour mapping for example-based colour transfer", CVMP 2007)
in a **log space** of scene-linear Rec.709: ``z = log2(rgb + EPS)`` per channel,
``EPS = 1/256``. Both colour distributions are summarised by their mean ``mu`` and 3x3
covariance ``C`` in that space; the map

    T = Cs^-1/2 (Cs^1/2 Cr Cs^1/2)^1/2 Cs^-1/2,     z' = T (z - mu_s) + mu_r

is the optimal-transport map between the two Gaussians, so it moves the source
statistics exactly onto the reference's (mean and covariance) while keeping the
ordering of colours. The result goes back with ``rgb' = 2**z' - EPS`` (clipped at 0),
so input and output are scene-linear ``float32``.

Stability over time: the reference statistics are accumulated once, streaming the
reference (a movie, an image folder or a single image) frame by frame at a reduced
size (never the whole clip in memory); the source statistics are estimated **once per
shot** (restyle: from the first frame it renders, saved next to the outputs so a
resumed run uses the same map), and the same transform is then applied to every frame.

Distance: the 2-Wasserstein distance between the Gaussians fitted to two colour
distributions (same log space), :func:`gaussian_w2`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from .errors import InputError

EPS = 1.0 / 256.0
#: frames of the reference are decoded with this long side (pixels)
REF_SIZE = 256
#: at most this many sample pixels per frame enter the statistics
SAMPLES = 20000


class LookMatchError(InputError):
    """An unreadable or empty reference."""


def to_log(rgb: np.ndarray) -> np.ndarray:
    """Scene-linear ``... x 3`` -> ``N x 3`` float64 ``log2(max(rgb, 0) + EPS)``."""
    x = np.asarray(rgb, dtype=np.float64).reshape(-1, 3)
    return np.log2(np.maximum(x, 0.0) + EPS)


def from_log(z: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_log` (clipped at 0), float32."""
    return np.maximum(np.exp2(z) - EPS, 0.0).astype(np.float32)


def _sample(rgb: np.ndarray, n: int = SAMPLES) -> np.ndarray:
    z = to_log(rgb)
    if len(z) > n:
        step = len(z) / n
        z = z[(np.arange(n) * step).astype(np.int64)]
    return z


@dataclass
class ColourStats:
    """Mean ``(3,)`` and covariance ``(3, 3)`` of ``log2(rgb + EPS)`` (float64), pixel count."""

    mean: np.ndarray
    cov: np.ndarray
    count: int

    @classmethod
    def of(cls, rgb: np.ndarray) -> "ColourStats":
        """Statistics of one image (``H x W x 3`` scene-linear)."""
        acc = _Accumulator()
        acc.add(rgb)
        return acc.stats()

    def to_dict(self) -> Dict[str, object]:
        return {"mean": [float(v) for v in self.mean],
                "cov": [[float(v) for v in row] for row in self.cov], "count": int(self.count)}

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "ColourStats":
        return cls(np.asarray(d["mean"], np.float64), np.asarray(d["cov"], np.float64), int(d["count"]))

    def linear_means(self) -> np.ndarray:
        """Per-channel means in scene-linear (of the log-space mean: a geometric mean)."""
        return from_log(self.mean[None])[0]


class _Accumulator:
    def __init__(self):
        self.n = 0
        self.s = np.zeros(3)
        self.ss = np.zeros((3, 3))

    def add(self, rgb: np.ndarray) -> None:
        z = _sample(rgb)
        self.n += len(z)
        self.s += z.sum(0)
        self.ss += z.T @ z

    def stats(self) -> ColourStats:
        mu = self.s / self.n
        cov = self.ss / self.n - np.outer(mu, mu)
        return ColourStats(mu, (cov + cov.T) / 2, self.n)


def reference_stats(path: os.PathLike, max_frames: Optional[int] = None) -> ColourStats:
    """Stream a reference (movie, image folder, sequence pattern or image) into :class:`ColourStats`.

    Frames are decoded at long side :data:`REF_SIZE` (scene-linear, :mod:`backend.footage`);
    only running sums are kept, so memory does not grow with the clip.

    Raises:
        LookMatchError: missing, unreadable or empty reference (one line naming it).
    """
    from .footage import FootageError, open_footage
    acc = _Accumulator()
    try:
        with open_footage(path, max_size=REF_SIZE) as foot:
            for i, fr in enumerate(foot):
                if max_frames is not None and i >= max_frames:
                    break
                acc.add(fr.rgb)
    except FootageError as e:
        raise LookMatchError(f"look reference {os.fspath(path)}: {str(e).splitlines()[0]}") from e
    if acc.n == 0:
        raise LookMatchError(f"look reference {os.fspath(path)}: no frames")
    return acc.stats()


def _sqrtm(c: np.ndarray, inv: bool = False) -> np.ndarray:
    w, v = np.linalg.eigh((c + c.T) / 2)
    w = np.maximum(w, 1e-8)
    return (v * (w ** (-0.5 if inv else 0.5))) @ v.T


def mk_transform(src: ColourStats, ref: ColourStats) -> np.ndarray:
    """The 3x3 Monge-Kantorovich matrix ``T`` mapping ``src``'s Gaussian onto ``ref``'s."""
    cs = src.cov + 1e-6 * np.eye(3)
    cr = ref.cov + 1e-6 * np.eye(3)
    a = _sqrtm(cs)
    ai = _sqrtm(cs, inv=True)
    return ai @ _sqrtm(a @ cr @ a) @ ai


def gaussian_w2(a: ColourStats, b: ColourStats) -> float:
    """2-Wasserstein distance between the Gaussians of two :class:`ColourStats` (log2 units)."""
    sb = _sqrtm(b.cov)
    cross = _sqrtm(sb @ a.cov @ sb)
    d2 = float(np.sum((a.mean - b.mean) ** 2) + np.trace(a.cov + b.cov - 2 * cross))
    return float(np.sqrt(max(d2, 0.0)))


@dataclass
class LookMatch:
    """A fixed transform: ``apply`` maps scene-linear ``H x W x 3`` -> same shape float32."""

    src: ColourStats
    ref: ColourStats

    def __post_init__(self):
        self.matrix = mk_transform(self.src, self.ref)

    def apply(self, rgb: np.ndarray) -> np.ndarray:
        """Apply the transform; ``rgb``: ``H x W x 3`` scene-linear; returns float32, >= 0, finite."""
        z = to_log(rgb)
        out = (z - self.src.mean) @ self.matrix.T + self.ref.mean
        return from_log(np.clip(out, -30.0, 20.0)).reshape(np.shape(rgb))

    def to_dict(self) -> Dict[str, object]:
        return {"method": "monge-kantorovich-linear-log2", "source": self.src.to_dict(),
                "reference": self.ref.to_dict()}

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "LookMatch":
        return cls(ColourStats.from_dict(d["source"]), ColourStats.from_dict(d["reference"]))
