"""One surface per shot: a sparse truncated signed distance volume fused from the
measured depth of every frame, and its mesh.

* **TSDF fusion** (Curless & Levoy 1996, "A volumetric method for building complex
  models from range images", SIGGRAPH; Newcombe et al. 2011, "KinectFusion", ISMAR):
  each voxel keeps a running, confidence-weighted mean of the truncated signed distance
  ``clip((z_measured - z_voxel) / trunc, -1, 1)`` along the viewing axis, positive in
  front of the surface (free space), negative behind it.
* **Sparse storage** (in the spirit of voxel hashing, Nießner et al. 2013, "Real-time 3D
  reconstruction at scale using voxel hashing", SIGGRAPH Asia): only voxels within the
  truncation band of some measured point exist, held as a sorted array of 64-bit voxel
  keys with their values. Memory grows with the observed *surface area*, not with the
  clip's length; a cap (``max_voxels``) raises a clear error instead of exhausting it.
* **Mesh** by naive surface nets (Gibson 1998, "Constrained elastic surface nets",
  MICCAI; the dual of marching cubes): one vertex per cell whose corners change sign, at
  the mean of the edge zero crossings, and one quad (two triangles) per voxel edge with a
  sign change, joining the four cells around it. Written as binary little-endian PLY
  (Blender 4.2+ imports it with ``bpy.ops.wm.ply_import``).

World coordinates are the cameras' world (the camera file's, i.e. the Blender scene of
Track & Solve), in the cameras' units.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from .cameras import Camera

_OFF = 1 << 20  # voxel index offset: indices in [-2^20, 2^20)


def _key(ijk: np.ndarray) -> np.ndarray:
    v = (ijk.astype(np.int64) + _OFF)
    return (v[..., 0] << 42) | (v[..., 1] << 21) | v[..., 2]


def _unkey(k: np.ndarray) -> np.ndarray:
    m = (1 << 21) - 1
    return np.stack([(k >> 42) & m, (k >> 21) & m, k & m], -1) - _OFF


class SparseTSDF:
    """Sparse TSDF volume (module doc).

    Args:
        voxel: voxel side in the cameras' units (> 0).
        trunc_voxels: truncation distance in voxels (the band around the surface).
        max_voxels: most voxels kept (memory: 16 bytes each).

    Raises:
        ValueError: ``voxel <= 0``.
    """

    def __init__(self, voxel: float, trunc_voxels: float = 3.0, max_voxels: int = 20_000_000):
        if not voxel > 0:
            raise ValueError(f"voxel size must be > 0, got {voxel}")
        self.voxel = float(voxel)
        self.trunc = float(trunc_voxels) * self.voxel
        self.max_voxels = int(max_voxels)
        self.keys = np.zeros(0, np.int64)
        self.tsdf = np.zeros(0, np.float32)
        self.weight = np.zeros(0, np.float32)
        self.frames = 0

    @staticmethod
    def voxel_for(depth: np.ndarray, confidence: np.ndarray, cam: Camera, threshold: float = 0.5,
                  pixels: float = 2.0) -> float:
        """A voxel size from a frame: the footprint of ``pixels`` pixels of ``cam`` at the
        median confident depth (``cam`` at ``depth``'s size)."""
        ok = (confidence >= threshold) & (depth > 0) & np.isfinite(depth)
        z = float(np.median(depth[ok])) if ok.any() else float(np.median(depth[depth > 0]))
        return pixels * z / cam.fx

    def integrate(self, depth: np.ndarray, confidence: np.ndarray, cam: Camera, *, threshold: float = 0.5,
                  max_depth: Optional[float] = None, stride: int = 1) -> None:
        """Fuse one frame.

        Args:
            depth: ``h x w`` float32 planar depth > 0 (the cameras' units), pinhole
                (undistorted) for ``cam`` at size ``w x h``.
            confidence: ``h x w`` float32 in [0, 1]; pixels below ``threshold`` are not fused.
            cam: the frame's undistorted camera at ``w x h``.
            max_depth: depths beyond this are not fused (far background).
            stride: every ``stride``-th pixel's ray allocates voxels (all pixels are read
                when updating).

        Raises:
            MemoryError: the volume would exceed ``max_voxels`` (a larger voxel is needed).
        """
        h, w = depth.shape
        ok = (confidence >= threshold) & (depth > 0) & np.isfinite(depth)
        if max_depth is not None:
            ok &= depth <= max_depth
        ys, xs = np.mgrid[0:h:stride, 0:w:stride]
        sel = ok[ys, xs]
        if not sel.any():
            return
        xs, ys = xs[sel], ys[sel]
        z = depth[ys, xs].astype(np.float64)
        rays = np.stack([(xs + 0.5 - cam.cx) / cam.fx, (ys + 0.5 - cam.cy) / cam.fy, np.ones_like(z)], -1)
        pc = rays * z[:, None]
        pw = (pc - cam.t) @ cam.R  # R^T (X_c - t)
        # allocate the band: points along each ray within +-trunc of the surface
        steps = np.arange(-self.trunc, self.trunc + 1e-9, self.voxel * 0.75)
        dirs = (rays / np.linalg.norm(rays, axis=-1, keepdims=True)) @ cam.R
        band = pw[:, None, :] + steps[None, :, None] * dirs[:, None, :]
        new = np.unique(_key(np.floor(band.reshape(-1, 3) / self.voxel)))
        self._add(new)
        self._update(depth, ok, cam)
        self.frames += 1

    def _add(self, keys: np.ndarray) -> None:
        missing = keys[~np.isin(keys, self.keys, assume_unique=True)]
        if not len(missing):
            return
        if len(self.keys) + len(missing) > self.max_voxels:
            raise MemoryError(f"the fused surface would need more than {self.max_voxels} voxels of "
                              f"{self.voxel:.4g}; use a larger voxel")
        allk = np.concatenate([self.keys, missing])
        order = np.argsort(allk, kind="stable")
        self.keys = allk[order]
        self.tsdf = np.concatenate([self.tsdf, np.zeros(len(missing), np.float32)])[order]
        self.weight = np.concatenate([self.weight, np.zeros(len(missing), np.float32)])[order]

    def centres(self, keys: Optional[np.ndarray] = None) -> np.ndarray:
        """World positions (``n x 3`` float64) of voxel centres."""
        return (_unkey(self.keys if keys is None else keys) + 0.5) * self.voxel

    def _update(self, depth: np.ndarray, ok: np.ndarray, cam: Camera, chunk: int = 2_000_000) -> None:
        h, w = depth.shape
        for s in range(0, len(self.keys), chunk):
            X = self.centres(self.keys[s:s + chunk])
            Xc = X @ cam.R.T + cam.t
            zc = Xc[:, 2]
            front = zc > 1e-9
            u = np.floor(cam.fx * Xc[:, 0] / np.where(front, zc, 1) + cam.cx).astype(np.int64)
            v = np.floor(cam.fy * Xc[:, 1] / np.where(front, zc, 1) + cam.cy).astype(np.int64)
            inside = front & (u >= 0) & (u < w) & (v >= 0) & (v < h)
            idx = np.nonzero(inside)[0]
            uu, vv = u[idx], v[idx]
            good = ok[vv, uu]
            idx, uu, vv = idx[good], uu[good], vv[good]
            sdf = depth[vv, uu] - zc[idx]
            near = sdf > -self.trunc
            idx, sdf = idx[near], sdf[near]
            val = np.clip(sdf / self.trunc, -1.0, 1.0).astype(np.float32)
            g = s + idx
            wt = self.weight[g]
            self.tsdf[g] = (self.tsdf[g] * wt + val) / (wt + 1.0)
            self.weight[g] = wt + 1.0

    def _lookup(self, ijk: np.ndarray):
        kq = _key(ijk)
        if not len(self.keys):
            return np.zeros(kq.shape, np.float32), np.zeros(kq.shape, bool)
        pos = np.clip(np.searchsorted(self.keys, kq), 0, len(self.keys) - 1)
        hit = (self.keys[pos] == kq) & (self.weight[pos] > 0)
        return np.where(hit, self.tsdf[pos], 0.0), hit

    def sample(self, X: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Trilinear TSDF at world points ``X`` (``... x 3``). Returns ``(value, ok)``;
        ``ok`` where all eight neighbouring voxels were observed."""
        g = np.asarray(X, np.float64) / self.voxel - 0.5
        i0 = np.floor(g).astype(np.int64)
        f = g - i0
        val = np.zeros(g.shape[:-1])
        ok = np.ones(g.shape[:-1], bool)
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    v, h = self._lookup(i0 + np.array([dx, dy, dz]))
                    wgt = ((f[..., 0] if dx else 1 - f[..., 0]) * (f[..., 1] if dy else 1 - f[..., 1])
                           * (f[..., 2] if dz else 1 - f[..., 2]))
                    val += wgt * v
                    ok &= h
        return val, ok

    def render(self, depth: np.ndarray, cam: Camera, search: float = 1.5, samples: int = 7,
               normals: bool = True):
        """The fused surface seen by ``cam`` near a depth estimate: per pixel, the first
        zero crossing (free space to behind) of the TSDF along the pixel's ray within
        ``+-search x trunc`` of ``depth``, linearly interpolated.

        Args:
            depth: ``h x w`` planar depth estimate (``cam`` at ``w x h``, pinhole).
            cam: the frame's undistorted camera at that size.
            normals: also the TSDF's gradient normals (else ``normal`` is ``None``).

        Returns:
            ``(depth h x w float32, normal h x w x 3 float32 OpenGL camera space, hit h x w
            bool)``; where not ``hit``, ``depth`` is the input and the normal ``(0, 0, 1)``.
        """
        h, w = depth.shape
        ys, xs = np.mgrid[0:h, 0:w]
        rays = np.stack([(xs + 0.5 - cam.cx) / cam.fx, (ys + 0.5 - cam.cy) / cam.fy, np.ones((h, w))], -1)
        offs = np.linspace(-search, search, samples) * self.trunc
        z = np.maximum(depth[..., None].astype(np.float64) + offs, 1e-6)  # h x w x s
        Xc = rays[..., None, :] * z[..., None]
        Xw = (Xc - cam.t) @ cam.R
        val, ok = self.sample(Xw)
        a, b = val[..., :-1], val[..., 1:]
        cross = ok[..., :-1] & ok[..., 1:] & (a > 0) & (b <= 0)
        hit = cross.any(-1)
        k = np.argmax(cross, -1)
        za = np.take_along_axis(z, k[..., None], -1)[..., 0]
        zb = np.take_along_axis(z, k[..., None] + 1, -1)[..., 0]
        va = np.take_along_axis(a, k[..., None], -1)[..., 0]
        vb = np.take_along_axis(b, k[..., None], -1)[..., 0]
        zs = za + (zb - za) * va / np.where(hit, va - vb, 1.0)
        out = np.where(hit, zs, depth).astype(np.float32)
        if not normals:
            return out, None, hit
        normal, good = self._normals(rays * out[..., None], cam, hit)
        hit &= good
        return np.where(hit, out, depth).astype(np.float32), normal, hit

    def _normals(self, Xc: np.ndarray, cam: Camera, hit: np.ndarray) -> np.ndarray:
        """OpenGL camera-space unit normals from the TSDF gradient (central differences
        of trilinear samples, one voxel apart) at camera points ``Xc``, and where they
        exist (all samples observed)."""
        Xw = (Xc - cam.t) @ cam.R
        grad = np.zeros(Xw.shape)
        for ax in range(3):
            e = np.zeros(3)
            e[ax] = self.voxel
            vp, okp = self.sample(Xw + e)
            vm, okm = self.sample(Xw - e)
            grad[..., ax] = np.where(okp & okm, vp - vm, 0.0)
            hit = hit & okp & okm
        ncv = grad @ cam.R.T  # world -> OpenCV camera axes
        n = np.stack([ncv[..., 0], -ncv[..., 1], -ncv[..., 2]], -1)
        length = np.linalg.norm(n, axis=-1, keepdims=True)
        good = hit & (length[..., 0] > 1e-9)
        n = np.where(good[..., None], n / np.maximum(length, 1e-12), np.array([0.0, 0.0, 1.0]))
        return n.astype(np.float32), good

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.tsdf.nbytes + self.weight.nbytes

    def mesh(self, min_weight: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
        """Surface nets mesh of the zero level (module doc).

        Returns:
            ``(vertices n x 3 float32 world, faces m x 3 int32)``; triangles wind
            counter-clockwise seen from the free-space side (outward normals toward the
            cameras).
        """
        valid = self.weight >= min_weight
        keys, vals = self.keys[valid], self.tsdf[valid]
        if not len(keys):
            return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32)
        ijk = _unkey(keys)
        corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)])

        def lookup(q):
            kq = _key(q)
            pos = np.clip(np.searchsorted(keys, kq), 0, len(keys) - 1)
            hit = keys[pos] == kq
            return np.where(hit, vals[pos], np.nan)

        # cells: one per voxel as its (0,0,0) corner
        cv = np.stack([lookup(ijk + c) for c in corners], 1)  # n x 8
        full = ~np.isnan(cv).any(1)
        active = full & (np.nanmin(cv, 1) < 0) & (np.nanmax(cv, 1) > 0)
        cells = np.nonzero(active)[0]
        cvals = cv[cells]
        pos_sum = np.zeros((len(cells), 3))
        cnt = np.zeros(len(cells))
        for a in range(8):
            for b in range(a + 1, 8):
                if np.abs(corners[a] - corners[b]).sum() != 1:
                    continue
                fa, fb = cvals[:, a], cvals[:, b]
                cross = (fa < 0) != (fb < 0)
                t = np.where(cross, fa / np.where(cross, fa - fb, 1.0), 0.0)
                p = corners[a][None, :] + t[:, None] * (corners[b] - corners[a])[None, :]
                pos_sum += np.where(cross[:, None], p, 0.0)
                cnt += cross
        verts = ((ijk[cells] + 0.5 + pos_sum / np.maximum(cnt, 1)[:, None]) * self.voxel).astype(np.float32)
        cell_keys = keys[cells]

        def cell_index(q):
            kq = _key(q)
            pos = np.clip(np.searchsorted(cell_keys, kq), 0, max(len(cell_keys) - 1, 0))
            return np.where(cell_keys[pos] == kq, pos, -1) if len(cell_keys) else np.full(len(q), -1)

        faces = []
        for axis in range(3):
            e = np.eye(3, dtype=np.int64)[axis]
            f1 = lookup(ijk + e)
            cross = ~np.isnan(f1) & ((vals < 0) != (f1 < 0))
            base = ijk[cross]
            b_ax, c_ax = [(1, 2), (2, 0), (0, 1)][axis]
            eb, ec = np.eye(3, dtype=np.int64)[b_ax], np.eye(3, dtype=np.int64)[c_ax]
            quad = np.stack([cell_index(base - eb - ec), cell_index(base - ec), cell_index(base),
                             cell_index(base - eb)], 1)
            okq = (quad >= 0).all(1)
            quad = quad[okq]
            inside_first = (vals[cross] < 0)[okq]
            quad = np.where(inside_first[:, None], quad, quad[:, ::-1])
            faces.append(np.concatenate([quad[:, [0, 1, 2]], quad[:, [0, 2, 3]]]))
        return verts, np.concatenate(faces).astype(np.int32)


def write_ply(path: os.PathLike, vertices: np.ndarray, faces: np.ndarray, comment: str = "") -> Path:
    """Binary little-endian PLY (``vertex``: float x, y, z; ``face``: uchar count, int
    indices), written atomically (a temporary file in the same folder, then renamed).

    Raises:
        FileExistsError: ``path`` exists (never written over).
    """
    path = Path(path)
    if os.path.lexists(path):  # a dangling symbolic link too (issue 36)
        raise FileExistsError(f"{path}: exists; the mesh is never written over a file")
    v = np.ascontiguousarray(vertices, "<f4")
    f = np.empty(len(faces), dtype=[("n", "u1"), ("i", "<i4", (3,))])
    f["n"], f["i"] = 3, faces
    head = ["ply", "format binary_little_endian 1.0"] + ([f"comment {comment}"] if comment else []) + [
        f"element vertex {len(v)}", "property float x", "property float y", "property float z",
        f"element face {len(f)}", "property list uchar int vertex_indices", "end_header"]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(("\n".join(head) + "\n").encode("ascii"))
            fh.write(v.tobytes())
            fh.write(f.tobytes())
        if os.path.lexists(path):
            raise FileExistsError(f"{path}: appeared while writing; the mesh is never written over a file")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
