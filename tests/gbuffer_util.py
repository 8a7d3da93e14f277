"""Test-only G-buffer fixtures: synthetic frames and small contract sequences on disk.

* :func:`random_frame`: a valid :class:`~backend.contract.GBufferFrame` of random values
  (every pass and the full header), for round trips.
* :func:`sphere_frames`: the analytic sphere-on-a-plane scene
  (:func:`backend.renderers.synthetic.sphere_scene`), the sphere moving right each frame.
* :func:`flat_frames`: frames with known constant passes (depth ``5 + number`` m, normal
  +Z, ...) whose values survive a trip through Blender's compositor exactly.
* :func:`write_sequence`: frames -> ``gbuffer_0001.exr ...`` (+ optional manifest).
* :func:`make_gbuffers`: the restyle tests' standard input folder (sphere frames at
  24 fps, with a manifest).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, List, Optional

import numpy as np

from backend import contract
from backend.renderers.synthetic import sphere_scene


def random_frame(h: int = 7, w: int = 9, seed: int = 0) -> contract.GBufferFrame:
    """Random passes (unit normals, depth 0.1..50.1 m, values in range) and a full header."""
    rng = np.random.default_rng(seed)
    n = rng.normal(size=(h, w, 3)).astype(np.float32)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return contract.GBufferFrame(
        combined=rng.random((h, w, 4)).astype(np.float32) * 3,
        depth=(0.1 + rng.random((h, w)) * 50).astype(np.float32),
        normal=n,
        albedo=rng.random((h, w, 3)).astype(np.float32),
        metallic=rng.random((h, w)).astype(np.float32),
        roughness=rng.random((h, w)).astype(np.float32),
        confidence=rng.random((h, w)).astype(np.float32),
        meta=contract.make_meta(estimator="test", models={"m": "rev1"}, depth_kind="metric",
                                depth_near=0.1, depth_far=50.1, source="/x/y.mp4", frame_index=4,
                                timestamp=0.5, intrinsics=(10, 10, 4.5, 3.5)),
    )


def sphere_frames(h: int, w: int, n: int = 2, *, kind: str = "relative", x0: float = -0.6,
                  step: float = 0.3, fps: Optional[float] = None) -> List[contract.GBufferFrame]:
    """``n`` sphere-scene frames; the sphere's centre x is ``x0 + step * i``. With ``fps``,
    each header also records ``timestamp = i / fps`` and ``frame_index = i``."""
    frames = []
    for i in range(n):
        f = sphere_scene(h, w, depth_kind=kind, sphere_center=(x0 + step * i, 1.0, -6.0))
        if fps:
            f.meta["timestamp"] = i / fps
            f.meta["frame_index"] = i
        frames.append(f)
    return frames


def flat_frames(h: int, w: int, n: int = 3) -> List[contract.GBufferFrame]:
    """``n`` frames numbered 1..n with known values: Combined random (seed = number) with
    alpha 1, Depth ``5 + number`` m, Normal +Z, Albedo 0.5, Metallic 0, Roughness 0.7,
    Confidence 1; header ``estimator="test"``, ``frame_index = number - 1``."""
    frames = []
    for num in range(1, n + 1):
        rgb = np.random.default_rng(num).random((h, w, 3), dtype=np.float32)
        frames.append(contract.GBufferFrame(
            combined=np.concatenate([rgb, np.ones((h, w, 1), np.float32)], -1),
            depth=np.full((h, w), 5.0 + num, np.float32),
            normal=np.dstack([np.zeros((h, w)), np.zeros((h, w)), np.ones((h, w))]).astype(np.float32),
            albedo=np.full((h, w, 3), 0.5, np.float32),
            metallic=np.zeros((h, w), np.float32),
            roughness=np.full((h, w), 0.7, np.float32),
            confidence=np.ones((h, w), np.float32),
            meta=contract.make_meta(estimator="test", frame_index=num - 1),
        ))
    return frames


def write_sequence(folder: Path, frames: Iterable[contract.GBufferFrame], *, first: int = 1,
                   manifest: Optional[dict] = None) -> Path:
    """Write ``frames`` as ``folder/gbuffer_NNNN.exr`` from number ``first``; with
    ``manifest``, also ``manifest.json``. Returns ``folder`` (created if missing)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        contract.write_frame(contract.frame_path(folder, first + i), f)
    if manifest is not None:
        contract.write_manifest(folder, manifest)
    return folder


def make_gbuffers(folder: Path, n: int = 3, h: int = 48, w: int = 64, kind: str = "relative") -> Path:
    """The restyle tests' input: ``n`` sphere frames (moving right, 24 fps) and a manifest."""
    return decompose_manifest(write_sequence(folder, sphere_frames(h, w, n, kind=kind, fps=24.0)))


def decompose_manifest(folder: Path) -> Path:
    """Write ``folder/manifest.json`` as decompose writes it for the frames on disk (job,
    24 fps source, each frame listed with its size: restyle takes them as the unedited
    passes, issue 39). Returns ``folder``."""
    rows = [{"frame": k, "file": p.name, "bytes": p.stat().st_size}
            for k, p in sorted(contract.list_frames(folder).items())]
    contract.write_manifest(folder, {"job": "decompose", "source": {"fps": "24"}, "frames": rows})
    return folder
