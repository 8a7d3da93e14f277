"""Training data: contract EXR frames -> in-memory samples, plus a tiny analytic scene.

``load_sample(path)`` reads one G-buffer frame (:func:`backend.contract.read_frame`)
and returns the dict used by :mod:`training.augment`; ``FrameCache`` keeps samples in
memory (float16, long side capped) and re-scans the folder for new frames, so
training can start while the procedural renderer is still writing.

``toy_frame()`` ray-casts a textured floor, back wall and sphere in numpy with exact
G-buffers; tests and smoke runs use it when no rendered data exists.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, List

import numpy as np

from backend.contract import GBufferFrame, list_frames, make_meta, read_frame
from backend.footage import fit_long_side
from backend.imaging import resize

KEYS = ("combined", "disparity", "normal", "albedo", "metallic", "roughness", "mask")


def frame_to_sample(fr: GBufferFrame, max_side: int = 256) -> Dict[str, np.ndarray]:
    """GBufferFrame -> sample dict (float32), long side downscaled to ``max_side``."""
    if fr.confidence is not None:
        mask = (fr.confidence > 0.5).astype(np.float32)
    else:
        far = float(fr.meta.get("depth_far", fr.depth.max()))
        mask = (fr.depth < far * 0.999).astype(np.float32)
    depth = np.maximum(fr.depth, 1e-4)
    disp = np.where(mask > 0, 1.0 / depth, 0.0).astype(np.float32)
    s = {
        "combined": np.maximum(np.nan_to_num(fr.combined[..., :3]), 0.0).astype(np.float32),
        "disparity": disp,
        "normal": fr.normal.astype(np.float32),
        "albedo": np.clip(fr.albedo, 0, 1).astype(np.float32),
        "metallic": np.clip(fr.metallic, 0, 1).astype(np.float32),
        "roughness": np.clip(fr.roughness, 0, 1).astype(np.float32),
        "mask": mask,
    }
    h, w = mask.shape
    if max(h, w) > max_side:
        from .augment import resize_sample

        f = max_side / max(h, w)
        s = resize_sample(s, (max(8, round(h * f)), max(8, round(w * f))))
    return s


def load_sample(path, max_side: int = 256) -> Dict[str, np.ndarray]:
    """Read a contract EXR frame as a training sample (see module doc)."""
    return frame_to_sample(read_frame(path), max_side)


def is_holdout(path) -> bool:
    """Deterministic ~8 % held-out split by file name hash (never trained on)."""
    h = hashlib.sha1(Path(path).name.encode()).digest()
    return h[0] < 21


def sample_ok(s: Dict[str, np.ndarray]) -> bool:
    """Reject degenerate frames: almost no surface, non-finite values, black images."""
    if s["mask"].mean() < 0.05:
        return False
    if not all(np.all(np.isfinite(v)) for v in s.values()):
        return False
    return float(s["combined"].max()) > 1e-6


class FrameCache:
    """Samples of every ``gbuffer_NNNN.exr`` under ``roots`` (recursively), split by
    :func:`is_holdout`; :meth:`refresh` loads frames that appeared since the last call."""

    def __init__(self, roots: List[Path], max_side: int = 256):
        self.roots = [Path(r) for r in roots]
        self.max_side = max_side
        self.train: List[dict] = []
        self.val: List[dict] = []
        self.val_paths: List[str] = []
        self._seen = set()
        self.rejected = 0

    def _paths(self):
        for r in self.roots:
            if not r.exists():
                continue
            dirs = [r] + [d for d in sorted(r.rglob("*")) if d.is_dir()]
            for d in dirs:
                for p in list_frames(d).values():
                    yield p

    def refresh(self, limit: int | None = None) -> int:
        """Load new frames; returns how many were added (bad files are skipped)."""
        added = 0
        for p in self._paths():
            key = str(p)
            if key in self._seen:
                continue
            try:
                s = load_sample(p, self.max_side)
            except Exception as e:  # a frame still being written or corrupt
                print(f"skip {p}: {e}", flush=True)
                continue
            self._seen.add(key)
            if not sample_ok(s):
                self.rejected += 1
                continue
            s = {k: v.astype(np.float16) if k != "mask" else v.astype(np.uint8) for k, v in s.items()}
            if is_holdout(p):
                self.val.append(s)
                self.val_paths.append(key)
            else:
                self.train.append(s)
            added += 1
            if limit and added >= limit:
                break
        return added


def as_float(s: dict) -> dict:
    return {k: v.astype(np.float32) for k, v in s.items()}


def toy_frame(h: int = 48, w: int = 64, seed: int = 0) -> GBufferFrame:
    """Analytic scene: floor (y = -1), back wall (z = -6), one sphere; sky above the wall.

    Camera at the origin looking down -Z, vertical FOV 50 deg, with a random tilt.
    Returns an exact :class:`GBufferFrame` (metric depth, camera-space normals,
    textured albedo, per-object metallic/roughness, Confidence 0 for sky).
    """
    rng = np.random.default_rng(seed)
    fy = 0.5 * h / np.tan(np.radians(25))
    fx = fy
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    dirs = np.stack([(xs + 0.5 - w / 2) / fx, -(ys + 0.5 - h / 2) / fy, -np.ones_like(xs)], -1)
    tilt = rng.uniform(-0.2, 0.1)
    c, s_ = np.cos(tilt), np.sin(tilt)
    R = np.array([[1, 0, 0], [0, c, -s_], [0, s_, c]], np.float32)  # camera -> world
    dw = dirs @ R.T
    t = np.full((h, w), np.inf, np.float32)
    nrm = np.zeros((h, w, 3), np.float32)
    obj = np.full((h, w), -1)
    floor_y = -rng.uniform(0.8, 1.6)
    with np.errstate(divide="ignore", invalid="ignore"):
        tf = floor_y / dw[..., 1]
    hit = (tf > 0) & (tf < t)
    t[hit], obj[hit] = tf[hit], 0
    nrm[hit] = [0, 1, 0]
    wall_z = -rng.uniform(4, 9)
    with np.errstate(divide="ignore", invalid="ignore"):
        tw = wall_z / dw[..., 2]
    hit = (tw > 0) & (tw < t) & (tw * dw[..., 1] < 2.5)
    t[hit], obj[hit] = tw[hit], 1
    nrm[hit] = [0, 0, 1]
    cen = np.array([rng.uniform(-1, 1), floor_y + 0.7, -rng.uniform(2.5, 4)], np.float32)
    rad = 0.7
    b = (dw * cen).sum(-1)
    dd = (dw * dw).sum(-1)
    disc = b * b - dd * ((cen * cen).sum() - rad * rad)
    ts = (b - np.sqrt(np.maximum(disc, 0))) / dd
    hit = (disc > 0) & (ts > 0) & (ts < t)
    t[hit], obj[hit] = ts[hit], 2
    p = dw * ts[..., None]
    nrm[hit] = ((p - cen) / rad)[hit]
    surf = obj >= 0
    pts = dw * np.where(surf, t, 0)[..., None]
    n_cam = nrm @ R  # world -> camera (R orthonormal)
    n_cam[~surf] = [0, 0, 1]
    depth_cam = (pts @ R)[..., 2] * -1.0
    far = float(depth_cam[surf].max() * 1.5) if surf.any() else 100.0
    depth = np.where(surf, depth_cam, far).astype(np.float32)
    cols = rng.uniform(0.1, 0.9, (3, 3)).astype(np.float32)
    checker = ((np.floor(pts[..., 0] * 2) + np.floor(pts[..., 2] * 2)) % 2)[..., None]
    alb = cols[np.clip(obj, 0, 2)] * np.where(obj[..., None] == 0, 0.6 + 0.4 * checker, 1.0)
    alb[~surf] = 0
    met = np.where(obj == 2, 1.0, 0.0).astype(np.float32)
    rough = np.array([0.8, 0.5, 0.2], np.float32)[np.clip(obj, 0, 2)] * surf
    sun = np.array([0.3, 0.8, 0.5], np.float32)
    sun /= np.linalg.norm(sun)
    shade = 0.2 + np.maximum((nrm * sun).sum(-1), 0)[..., None]
    sky = np.array([0.5, 0.7, 1.0], np.float32) * (0.5 + 0.5 * np.clip(dw[..., 1:2], 0, 1))
    rgb = np.where(surf[..., None], alb * shade * 2.0, sky * 3.0).astype(np.float32)
    comb = np.concatenate([rgb, np.ones((h, w, 1), np.float32)], -1)
    return GBufferFrame(
        combined=comb, depth=depth, normal=n_cam.astype(np.float32), albedo=alb.astype(np.float32),
        metallic=met * surf, roughness=rough.astype(np.float32),
        confidence=surf.astype(np.float32),
        meta=make_meta(estimator="toy", depth_kind="metric", depth_near=float(depth.min()),
                       depth_far=far, intrinsics=(fx, fy, w / 2, h / 2)),
    )


def write_toy_frames(folder, n: int = 6, h: int = 48, w: int = 64) -> List[Path]:
    """Write ``n`` toy frames as contract EXRs into ``folder``; returns the paths."""
    from backend.contract import frame_path, write_frame

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [write_frame(frame_path(folder, i + 1), toy_frame(h, w, seed=i)) for i in range(n)]


# skimage photographs of real scenes used as FDA style targets. Never
# "stereo_motorcycle": it is the Middlebury test image.
STYLE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def style_pool(footage_dir=None, every: int = 6, size: tuple = (120, 160), photos=STYLE_PHOTOS) -> List[np.ndarray]:
    """Real photographs for Fourier domain adaptation (:func:`training.augment.fda_swap`).

    Args:
        footage_dir: folder of real video clips (``*.mp4``, read with
            :func:`backend.footage.open_footage`); every ``every``-th frame is used. ``None`` or a missing folder: photographs only.
        size: ``(h, w)`` of the returned images (area-resized, aspect not kept: only
            their low frequencies are used).
        photos: scikit-image ``data`` names to add.

    Returns:
        list of ``h x w x 3`` float32 sRGB-encoded images in [0, 1]. No test-set image
        (NYU, Open3D, Middlebury) is ever part of it.
    """
    h, w = size
    out: List[np.ndarray] = []
    if footage_dir is not None and Path(footage_dir).is_dir():
        from backend.footage import open_footage
        from backend.colour import linear_to_srgb

        for clip in sorted(Path(footage_dir).glob("*.mp4")):
            with open_footage(clip) as foot:
                for fr in foot:
                    if fr.index % every == 0:
                        out.append(resize(linear_to_srgb(fr.rgb), (w, h), "area"))
    out += [skimage_photo(n, size) for n in photos]
    return out


def skimage_photo(name: str, size: tuple) -> np.ndarray:
    """``skimage.data.<name>()`` as an ``h x w x 3`` float32 sRGB-encoded image in [0, 1]
    (grey images repeated to 3 channels, alpha dropped, area-resized to ``size = (h, w)``).

    Raises:
        AttributeError: no such image in ``skimage.data``; whatever scikit-image raises
            for an image it cannot provide offline.
    """
    from skimage import data

    im = np.asarray(getattr(data, name)())
    if im.ndim == 2:
        im = np.repeat(im[..., None], 3, -1)
    im = im[..., :3].astype(np.float32)
    im = im / 255.0 if im.max() > 1.5 else im
    h, w = size
    return resize(im, (w, h), "area")


def downscale(img: np.ndarray, max_side: int) -> np.ndarray:
    """Area-downscale so the long side is at most ``max_side`` (never upscaled)."""
    h, w = img.shape[:2]
    return resize(img, fit_long_side(w, h, max_side), "area")
