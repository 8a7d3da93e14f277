"""A numpy ray-cast test scene with exact depth and cameras (multi-view tests).

A textured back wall at z = 8, a textured box front face at z = 4 and a slanted floor,
seen by cameras on a short sideways dolly with handheld-like rotation jitter (OpenCV
axes: x right, y down, z forward). Ray casting gives each frame's image and exact
planar depth.
"""
import math

import numpy as np

from backend.multiview.cameras import Camera

W, H = 240, 180
F = 200.0


def rot(ax, ay, az):
    cx, sx, cy, sy, cz, sz = math.cos(ax), math.sin(ax), math.cos(ay), math.sin(ay), math.cos(az), math.sin(az)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rz @ ry @ rx


def texture(seed, n=256):
    import cv2
    rng = np.random.default_rng(seed)
    t = sum(cv2.resize(rng.random((n // s, n // s)).astype(np.float32), (n, n), interpolation=cv2.INTER_CUBIC) / s
            for s in (1, 2, 4, 8))
    return ((t - t.min()) / (t.max() - t.min())).astype(np.float32)


# planes: (point, normal, u axis, v axis, extent (u0, u1, v0, v1), texture seed)
_PLANES = [
    (np.array([0, 0, 8.0]), np.array([0, 0, -1.0]), np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), (-8, 8, -6, 6), 1),
    (np.array([0, 0, 4.0]), np.array([0, 0, -1.0]), np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), (-1.2, 0.8, -1.0, 0.6), 2),
    (np.array([0, 1.5, 0]), np.array([0, -1.0, 0]), np.array([1.0, 0, 0]), np.array([0, 0, 1.0]), (-8, 8, 0, 8), 3),
]


def render(cam: Camera):
    """Ray-cast the scene: (grey image H x W float32, planar depth H x W float32)."""
    import cv2
    xs = (np.arange(cam.width) + 0.5 - cam.cx) / cam.fx
    ys = (np.arange(cam.height) + 0.5 - cam.cy) / cam.fy
    d_cam = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None], 1.0), -1)  # planar depth 1
    d_world = d_cam @ cam.R  # R^T d
    o = cam.center
    best = np.full((cam.height, cam.width), np.inf)
    img = np.zeros((cam.height, cam.width), np.float32)
    for p0, n, u, v, (u0, u1, v0, v1), seed in _PLANES:
        denom = d_world @ n
        with np.errstate(divide="ignore", invalid="ignore"):
            s = ((p0 - o) @ n) / denom
        X = o + s[..., None] * d_world
        pu, pv = (X - p0) @ u, (X - p0) @ v
        hit = (s > 0) & (s < best) & (pu >= u0) & (pu <= u1) & (pv >= v0) & (pv <= v1)
        tex = texture(seed)
        n_t = tex.shape[0]
        mu = ((pu - u0) / (u1 - u0) * (n_t - 1)).astype(np.float32)
        mv = ((pv - v0) / (v1 - v0) * (n_t - 1)).astype(np.float32)
        val = cv2.remap(tex, np.nan_to_num(mu), np.nan_to_num(mv), cv2.INTER_LINEAR)
        img = np.where(hit, val, img)
        best = np.where(hit, s, best)
    return img, best.astype(np.float32)  # s is planar depth since d_cam has z = 1


def dolly_cameras(n=5, dolly=0.12, jitter=0.004, seed=0):
    rng = np.random.default_rng(seed)
    cams = []
    for i in range(n):
        C = np.array([(i - n // 2) * dolly, -0.1 * (i % 2), 0.0])
        R = rot(*(rng.normal(0, jitter, 3)))
        cams.append(Camera(W, H, F, F, W / 2, H / 2, R=R, t=-R @ C, name=str(i + 1)))
    return cams




def write_shot(folder, cams, cam_file, units="metres", depth_range=(3.0, 12.0)):
    """Write the ray-cast scene seen by ``cams`` as ``folder/shot_0001.png ...`` (a tinted
    grey texture, 8-bit sRGB PNG) and the cameras as our JSON ``cam_file``; returns the exact
    planar depths, one ``H x W`` float32 array per camera."""
    import cv2

    from backend.multiview.camera_files import save_cameras_json

    folder.mkdir()
    depths = []
    for i, cam in enumerate(cams, 1):
        grey, depth = render(cam)
        rgb = np.clip(np.stack([grey, 0.8 * grey + 0.1, 0.6 * grey + 0.2], -1), 0, 1)
        cv2.imwrite(str(folder / f"shot_{i:04d}.png"), (rgb[..., ::-1] * 255 + 0.5).astype(np.uint8))
        depths.append(depth)
    save_cameras_json(cam_file, dict(enumerate(cams, 1)), units=units, depth_range=depth_range)
    return depths
