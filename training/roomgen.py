"""Analytic indoor scenes (numpy ray casting) with exact G-buffers: supplementary data.

Why: the real-depth test sets (NYU, Open3D) are indoor rooms; this adds many cheap,
exactly labelled Manhattan-world layouts next to the Cycles-rendered procedural
frames (``training/procedural_scenes.py``). It is a renderer, not a path tracer:

* geometry: a room box (floor, ceiling, 4 walls; 3-9 m), 2-13 yawed boxes
  (furniture) standing on the floor or against walls, spheres, vertical cylinders
  (poles), and with p=0.6 a door/window opening in a wall through which a farther
  backdrop is seen;
* materials: photographs shipped with scikit-image (brick, grass, gravel, coffee,
  ...), procedural stripes/noise/tiles and plain paints as albedo (linearised,
  tinted, 0.03..0.9), random metallic (p=0.15) and roughness;
* lighting: hemispherical ambient + 1-3 point lights with hard shadows
  (shadow rays) + Lambert diffuse and Blinn-Phong specular (metals tinted),
  optional warm/cool light colour; 2x2 supersampling.

Camera: OpenGL convention (looks down -Z, +Y up), vertical FOV 40-70 deg, height
0.6-1.9 m, pitch -35..+10 deg, roll +-4 deg. Outputs :class:`GBufferFrame` with
metric planar depth, camera-space normals and Confidence 1 (no sky indoors).

``--kinect`` (RGB-D-capture style, closer to NYU / Open3D): camera 0.2-1.5 m in front
of a wall looking into the room (yaw +-35 deg; 25 % random), height 1.0-1.7 m, pitch
-30..0 deg, horizontal FOV 55-65 deg; light low-saturation wall paint; wood-plank, tile
or carpet floors; tables/chairs on thin legs; windows / glass doors (p=0.85, 40 % floor
to ceiling) onto photographed exteriors 1.5-25 m beyond the wall, 2-10x brighter than
the room; sunlight (p=0.65) whose shadow rays must leave through the opening.

``python -m training.roomgen OUT_DIR --count N --start K [--kinect]`` writes contract EXRs.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

from backend.colour import srgb_to_linear
from backend.contract import GBufferFrame, frame_path, make_meta, write_frame
from backend.imaging import resize

_TEXTURES = None
EPS = 1e-4


def _textures():
    global _TEXTURES
    if _TEXTURES is None:
        from .data import skimage_photo

        texs = []
        for n in ("astronaut", "brick", "camera", "cat", "coffee", "coins", "grass", "gravel", "rocket",
                  "text", "page", "moon", "horse", "hubble_deep_field", "immunohistochemistry", "clock",
                  "checkerboard", "retina", "cell", "chelsea"):
            try:
                im = skimage_photo(n, (256, 256))
            except Exception:
                continue
            texs.append(srgb_to_linear(im))
        _TEXTURES = texs
    return _TEXTURES


def _smooth_noise(rng, grid: tuple, size: int) -> np.ndarray:
    """Uniform random ``grid`` (rows, cols) upsampled bicubically to ``size x size`` float32."""
    return resize(rng.random(grid).astype(np.float32), (size, size), "cubic")


def _proc_texture(rng) -> np.ndarray:
    """Procedural 256x256 linear texture: fractal noise, stripes (wood), tiles, or paint."""
    kind = rng.integers(0, 4)
    base = _paint(rng)
    if kind == 0:  # fractal noise
        n = np.zeros((256, 256), np.float32)
        for o in range(5):
            s = 4 * 2 ** o
            n += _smooth_noise(rng, (s, s), 256) / 2 ** o
        n = (n - n.min()) / max(np.ptp(n), 1e-6)
        other = _paint(rng)
        return base * n[..., None] + other * (1 - n[..., None])
    if kind == 1:  # wood-like stripes
        y = np.linspace(0, 1, 256, dtype=np.float32)[:, None]
        x = np.linspace(0, 1, 256, dtype=np.float32)[None]
        warp = _smooth_noise(rng, (8, 8), 256)
        v = 0.5 + 0.5 * np.sin((y * rng.uniform(10, 40) + warp * 3 + 0 * x) * np.pi)
        return base * (0.6 + 0.4 * v[..., None])
    if kind == 2:  # tiles
        k = int(rng.integers(2, 9))
        yy, xx = np.mgrid[0:256, 0:256]
        t = ((yy * k // 256) + (xx * k // 256)) % 2
        grout = ((yy * k) % 256 < 8) | ((xx * k) % 256 < 8)
        other = _paint(rng)
        img = np.where(t[..., None] == 1, base, other if rng.random() < 0.5 else base * 0.8)
        return np.where(grout[..., None], base * 0.4, img).astype(np.float32)
    # paint with low-frequency variation
    n = _smooth_noise(rng, (4, 4), 256)
    return base * (0.9 + 0.2 * n[..., None])


def _paint(rng) -> np.ndarray:
    """Mostly desaturated paint colour (walls, furniture), linear."""
    g = rng.uniform(0.05, 0.85)
    hue = rng.uniform(0.05, 0.9, 3)
    sat = rng.uniform(0.0, 0.5) ** 1.5
    return (g * (1 - sat) + hue * sat).astype(np.float32)


def _material(rng, paint_bias=0.3) -> dict:
    r = rng.random()
    if r < paint_bias:
        tex = _proc_texture(rng) if rng.random() < 0.3 else np.broadcast_to(_paint(rng), (2, 2, 3)).copy()
    elif r < paint_bias + 0.35:
        tex = _proc_texture(rng)
    else:
        texs = _textures()
        tex = texs[int(rng.integers(0, len(texs)))]
        if rng.random() < 0.7:
            tex = tex * rng.uniform(0.5, 1.5, 3).astype(np.float32)
    tex = np.clip(tex * rng.uniform(0.6, 1.2), 0.03, 0.9).astype(np.float32)
    metal = rng.random() < 0.15
    return {"tex": tex, "scale": float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))),
            "metallic": float(rng.uniform(0.7, 1.0) if metal else rng.uniform(0.0, 0.1) * (rng.random() < 0.3)),
            "roughness": float(rng.uniform(0.15, 0.6) if metal else rng.uniform(0.2, 1.0)),
            "rot": float(rng.uniform(0, 2 * np.pi))}


def _rot_y(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], np.float32)


def _wall_paint(rng) -> dict:
    """Kinect style: mostly light, low-saturation wall paint (real rooms)."""
    m = _material(rng, 1.0)
    base = np.clip(rng.uniform(0.35, 0.85) * np.exp(rng.normal(0, 0.06, 3)), 0.03, 0.9).astype(np.float32)
    n = _smooth_noise(rng, (4, 4), 64)
    m["tex"] = np.clip(base * (0.93 + 0.14 * n[..., None]), 0.03, 0.9).astype(np.float32)
    m["metallic"], m["roughness"] = 0.0, float(rng.uniform(0.6, 1.0))
    return m


def _floor_material(rng) -> dict:
    """Kinect style: wood planks, tiles, carpet/concrete noise, or a photograph."""
    m = _material(rng, 0.0)
    r = rng.random()
    if r < 0.4:  # wood planks: warm stripes along one axis, per-plank tint
        y = np.arange(256, dtype=np.float32)[:, None]
        x = np.arange(256, dtype=np.float32)[None]
        k = int(rng.integers(3, 9))
        plank = (x * k // 256).astype(np.int64)
        tint = 0.8 + 0.4 * rng.random(k + 1).astype(np.float32)
        warp = _smooth_noise(rng, (16, 4), 256)
        grain = 0.75 + 0.25 * np.sin((x * rng.uniform(0.2, 0.6) + warp * 6 + y * 0.02) * np.pi)
        base = np.array([0.45, 0.25, 0.12], np.float32) * rng.uniform(0.4, 1.3) * np.exp(rng.normal(0, 0.1, 3))
        tex = base * (tint[plank] * grain)[..., None]
        tex = np.where(((x * k) % 256 < 3)[..., None], tex * 0.5, tex)
    elif r < 0.65:  # tiles
        tex = _proc_texture(np.random.default_rng(int(rng.integers(1 << 30))))
        k = int(rng.integers(2, 7))
        yy, xx = np.mgrid[0:256, 0:256]
        grout = ((yy * k) % 256 < 5) | ((xx * k) % 256 < 5)
        tex = np.where(grout[..., None], tex * 0.6 + 0.2, tex)
    elif r < 0.85:  # carpet / concrete
        g = rng.uniform(0.1, 0.6) * np.exp(rng.normal(0, 0.15, 3))
        n = rng.random((256, 256)).astype(np.float32) * 0.3 + 0.85
        tex = g * cv2.GaussianBlur(n, (0, 0), 1.5)[..., None]
    else:
        tex = m["tex"]
    m["tex"] = np.clip(tex, 0.03, 0.9).astype(np.float32)
    m["scale"] = float(rng.uniform(1.0, 4.0))
    m["rot"] = float(rng.choice([0.0, np.pi / 2]))
    return m


class Scene:
    def __init__(self, rng, kinect: bool = False):
        self.rng = rng
        self.kinect = kinect
        lo = 3.5 if kinect else 3.0
        W, D, Hh = rng.uniform(lo, 9), rng.uniform(lo, 9), rng.uniform(2.3, 3.3)
        self.room = np.array([W / 2, Hh, D / 2], np.float32)  # x in [-W/2, W/2], y in [0, H], z in [-D/2, D/2]
        self.room_mats = [_material(rng, 0.55) for _ in range(6)]  # -x, +x, floor, ceiling, -z, +z
        self.room_mats[3]["tex"] = np.clip(self.room_mats[3]["tex"] * 0 + rng.uniform(0.5, 0.9), 0, 0.9)
        if kinect:
            wall = _wall_paint(rng)
            for i in (0, 1, 4, 5):
                self.room_mats[i] = wall if rng.random() < 0.7 else (
                    _wall_paint(rng) if rng.random() < 0.6 else _material(rng, 0.55))
            self.room_mats[2] = _floor_material(rng)
        self.boxes, self.spheres, self.cyls = [], [], []
        for _ in range(int(rng.integers(2, 14))):
            hx, hy, hz = rng.uniform(0.15, 1.2), rng.uniform(0.1, 1.1), rng.uniform(0.15, 0.8)
            yaw = 0.0 if rng.random() < 0.6 else rng.uniform(0, np.pi)
            if rng.random() < 0.5:  # against a wall
                side = rng.integers(0, 4)
                cx = rng.uniform(-W / 2 + hx, W / 2 - hx) if side < 2 else (-1) ** side * (W / 2 - hz - 0.01)
                cz = (-1) ** side * (D / 2 - hz - 0.01) if side < 2 else rng.uniform(-D / 2 + hx, D / 2 - hx)
                if side >= 2:
                    yaw = np.pi / 2
            else:
                cx, cz = rng.uniform(-W / 2, W / 2), rng.uniform(-D / 2, D / 2)
            cy = hy if rng.random() < 0.85 else rng.uniform(hy, Hh - hy)  # on floor or shelf-like
            self.boxes.append({"c": np.array([cx, cy, cz], np.float32), "h": np.array([hx, hy, hz], np.float32),
                               "R": _rot_y(yaw), "m": _material(rng)})
        for _ in range(int(rng.integers(0, 3))):
            r = rng.uniform(0.1, 0.5)
            self.spheres.append({"c": np.array([rng.uniform(-W / 2, W / 2), r if rng.random() < 0.5
                                                else rng.uniform(r, 2), rng.uniform(-D / 2, D / 2)], np.float32),
                                 "r": r, "m": _material(rng)})
        for _ in range(int(rng.integers(0, 3))):
            self.cyls.append({"c": np.array([rng.uniform(-W / 2, W / 2), 0, rng.uniform(-D / 2, D / 2)], np.float32),
                              "r": rng.uniform(0.04, 0.4), "h": rng.uniform(0.5, Hh), "m": _material(rng)})
        if kinect:  # tables / chairs: a top on four thin legs
            for _ in range(int(rng.integers(0, 3))):
                hx, hz = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.6)
                top = rng.uniform(0.4, 1.0)
                cx, cz = rng.uniform(-W / 2 + hx, W / 2 - hx), rng.uniform(-D / 2 + hz, D / 2 - hz)
                R = _rot_y(rng.uniform(0, np.pi))
                m, leg = _material(rng), rng.uniform(0.015, 0.04)
                self.boxes.append({"c": np.array([cx, top, cz], np.float32),
                                   "h": np.array([hx, rng.uniform(0.015, 0.04), hz], np.float32), "R": R, "m": m})
                for sx in (-1, 1):
                    for sz in (-1, 1):
                        c = np.array([cx, 0, cz], np.float32) + R @ np.array([sx * (hx - leg), 0, sz * (hz - leg)],
                                                                             np.float32)
                        c[1] = top / 2
                        self.boxes.append({"c": c, "h": np.array([leg, top / 2, leg], np.float32), "R": R, "m": m})
        self.opening = None
        if rng.random() < (0.85 if kinect else 0.6):  # door / window in one wall, backdrop behind it
            wall = int(rng.integers(0, 4))  # 0:-x 1:+x 2:-z 3:+z
            along = W if wall >= 2 else D
            w = rng.uniform(0.6, min(3.5 if kinect else 2.5, along * 0.8))
            c = rng.uniform(-along / 2 + w / 2, along / 2 - w / 2)
            y0 = 0.0 if rng.random() < 0.5 else rng.uniform(0.5, 1.2)
            y1 = rng.uniform(min(Hh, y0 + 1.0), Hh)
            if kinect and rng.random() < 0.4:  # floor-to-ceiling glass
                y0, y1 = 0.0, float(Hh) - rng.uniform(0.0, 0.3)
            if kinect:  # outdoors: photographs (brick, grass, gravel ...) at larger scale, farther
                mo = _material(rng, 0.0)
                mo["scale"] = float(np.exp(rng.uniform(np.log(1.0), np.log(6.0))))
                self.opening = {"wall": wall, "c": c, "w": w, "y0": y0, "y1": y1,
                                "far": float(np.exp(rng.uniform(np.log(1.5), np.log(25.0)))), "m": mo}
            else:
                self.opening = {"wall": wall, "c": c, "w": w, "y0": y0, "y1": y1,
                                "far": rng.uniform(1.5, 12.0), "m": _material(rng, 0.2)}
        # lights
        self.lights = []
        for _ in range(int(rng.integers(1, 4))):
            col = np.array([1.0, 1.0, 1.0], np.float32) * np.exp(rng.normal(0, 0.12, 3)).astype(np.float32)
            self.lights.append({"p": np.array([rng.uniform(-W / 2 + 0.3, W / 2 - 0.3), Hh - rng.uniform(0.05, 0.8),
                                               rng.uniform(-D / 2 + 0.3, D / 2 - 0.3)], np.float32),
                                "I": col * rng.uniform(4, 30)})
        self.ambient = rng.uniform(0.01, 0.25) * np.exp(rng.normal(0, 0.1, 3)).astype(np.float32)
        # small objects on top of furniture
        for b in list(self.boxes):
            if rng.random() < 0.4 and b["c"][1] + b["h"][1] < Hh - 0.6:
                hx, hy, hz = rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.3)
                top = b["c"][1] + b["h"][1]
                off = (rng.uniform(-1, 1, 3) * np.maximum(b["h"] - 0.3, 0)).astype(np.float32)
                c = b["c"] + b["R"] @ np.array([off[0], 0, off[2]], np.float32)
                self.boxes.append({"c": np.array([c[0], top + hy, c[2]], np.float32),
                                   "h": np.array([hx, hy, hz], np.float32),
                                   "R": _rot_y(rng.uniform(0, np.pi)), "m": _material(rng)})

    # ---------------------------------------------------------------- ray casting
    def cast(self, o, d, shadow=False):
        """o, d: N x 3 world. Returns ``(t, normal, obj)``: hit distance (N,), world normal (N x 3) and object index (N,)."""
        N = d.shape[0]
        inv = 1.0 / np.where(np.abs(d) < 1e-9, 1e-9, d)
        # room (inside): exit distance per axis
        lo = np.array([-self.room[0], 0.0, -self.room[2]], np.float32)
        hi = self.room
        t1, t2 = (lo - o) * inv, (hi - o) * inv
        tm = np.maximum(t1, t2)
        ax = np.argmin(tm, 1)
        t = tm[np.arange(N), ax]
        sgn = np.sign(d[np.arange(N), ax])
        nrm = np.zeros((N, 3), np.float32)
        nrm[np.arange(N), ax] = -sgn
        obj = np.where(ax == 0, np.where(sgn < 0, 0, 1), np.where(ax == 1, np.where(sgn < 0, 2, 3),
                                                                  np.where(sgn < 0, 4, 5)))
        if self.opening is not None and not shadow:
            op = self.opening
            wall_obj = {0: 0, 1: 1, 2: 4, 3: 5}[op["wall"]]
            p = o + d * t[:, None]
            along = p[:, 2] if op["wall"] < 2 else p[:, 0]
            inside = (obj == wall_obj) & (np.abs(along - op["c"]) < op["w"] / 2) & (p[:, 1] > op["y0"]) & (p[:, 1] < op["y1"])
            if inside.any():
                a = 0 if op["wall"] < 2 else 2
                sign = -1.0 if op["wall"] in (0, 2) else 1.0
                plane = sign * (self.room[a] + op["far"])
                tb = (plane - o[inside, a]) * inv[inside, a]
                t[inside] = tb
                nn = np.zeros((int(inside.sum()), 3), np.float32)
                nn[:, a] = -sign
                nrm[inside] = nn
                obj[inside] = 6
        objs = 7
        for b in self.boxes:
            R = b["R"]
            ol = (o - b["c"]) @ R
            dl = d @ R
            invl = 1.0 / np.where(np.abs(dl) < 1e-9, 1e-9, dl)
            a1, a2 = (-b["h"] - ol) * invl, (b["h"] - ol) * invl
            tn = np.minimum(a1, a2)
            tnear = tn.max(1)
            tfar = np.maximum(a1, a2).min(1)
            hit = (tnear <= tfar) & (tnear > EPS) & (tnear < t)
            if hit.any():
                axl = np.argmax(tn[hit], 1)
                nl = np.zeros((int(hit.sum()), 3), np.float32)
                nl[np.arange(len(axl)), axl] = -np.sign(dl[hit][np.arange(len(axl)), axl])
                t[hit] = tnear[hit]
                nrm[hit] = nl @ R.T
                obj[hit] = objs
            objs += 1
        for s in self.spheres:
            oc = o - s["c"]
            bq = (oc * d).sum(1)
            cq = (oc * oc).sum(1) - s["r"] ** 2
            disc = bq * bq - cq
            ts = -bq - np.sqrt(np.maximum(disc, 0))
            hit = (disc > 0) & (ts > EPS) & (ts < t)
            if hit.any():
                t[hit] = ts[hit]
                nrm[hit] = (o[hit] + d[hit] * ts[hit, None] - s["c"]) / s["r"]
                obj[hit] = objs
            objs += 1
        for c in self.cyls:
            oc = (o - c["c"])[:, [0, 2]]
            dd = d[:, [0, 2]]
            A = (dd * dd).sum(1) + 1e-12
            B = (oc * dd).sum(1)
            C = (oc * oc).sum(1) - c["r"] ** 2
            disc = B * B - A * C
            tc = (-B - np.sqrt(np.maximum(disc, 0))) / A
            yh = o[:, 1] + d[:, 1] * tc
            hit = (disc > 0) & (tc > EPS) & (tc < t) & (yh > 0) & (yh < c["h"])
            if hit.any():
                t[hit] = tc[hit]
                pn = oc[hit] + dd[hit] * tc[hit, None]
                nn = np.zeros((int(hit.sum()), 3), np.float32)
                nn[:, 0], nn[:, 2] = pn[:, 0] / c["r"], pn[:, 1] / c["r"]
                nrm[hit] = nn
                obj[hit] = objs
            objs += 1
        return t, nrm, obj

    def materials(self):
        ms = list(self.room_mats) + [self.opening["m"] if self.opening else self.room_mats[0]]
        ms += [b["m"] for b in self.boxes] + [s["m"] for s in self.spheres] + [c["m"] for c in self.cyls]
        return ms


def _reflectance(n, light_dir, view, alb, met, rou) -> np.ndarray:
    """``N x 3`` reflectance of surface points lit from ``light_dir`` (``N x 3`` or ``1 x 3``,
    unit, towards the light) seen along ``view``: Lambert (x3) on the non-metal part plus a
    normalised Blinn-Phong lobe (shininess ``2 / roughness^4``) with F0 0.04 (dielectric) or
    the albedo (metal)."""
    hv = light_dir + view
    hv /= np.maximum(np.linalg.norm(hv, axis=1, keepdims=True), 1e-6)
    shin = 2.0 / np.maximum(rou ** 4, 1e-3)
    spec = np.clip((n * hv).sum(1), 0, 1) ** np.minimum(shin, 2000) * (shin + 2) / 8.0
    f0 = 0.04 * (1 - met)[:, None] + alb * met[:, None]
    return alb * (1 - met)[:, None] / np.pi * 3.0 + f0 * spec[:, None]


def _shade_albedo(p, n, obj, mats):
    """Triplanar texture lookup: albedo, metallic, roughness per hit point."""
    N = p.shape[0]
    alb = np.zeros((N, 3), np.float32)
    met = np.zeros(N, np.float32)
    rou = np.zeros(N, np.float32)
    an = np.abs(n)
    dom = np.argmax(an, 1)
    u = np.where(dom == 0, p[:, 2], p[:, 0])
    v = np.where(dom == 1, p[:, 2], p[:, 1])
    for i in np.unique(obj):
        sel = obj == i
        m = mats[int(i)]
        tex = m["tex"]
        th, tw = tex.shape[:2]
        c, s = np.cos(m["rot"]), np.sin(m["rot"])
        uu = (c * u[sel] - s * v[sel]) / m["scale"]
        vv = (s * u[sel] + c * v[sel]) / m["scale"]
        xi = (np.floor(uu * tw).astype(np.int64)) % tw
        yi = (np.floor(-vv * th).astype(np.int64)) % th
        alb[sel] = tex[yi, xi]
        met[sel] = m["metallic"]
        rou[sel] = m["roughness"]
    return alb, met, rou


def _kinect_camera(rng, W, D, Hh):
    """Hand-held RGB-D style: 0.2-1.5 m in front of a wall, looking into the room (+-35 deg)."""
    if rng.random() < 0.25:
        pos = np.array([rng.uniform(-W / 2 + 0.4, W / 2 - 0.4), 0, rng.uniform(-D / 2 + 0.4, D / 2 - 0.4)])
        yaw = rng.uniform(0, 2 * np.pi)
    else:
        side = int(rng.integers(0, 4))  # wall behind the camera: 0:-x 1:+x 2:-z 3:+z
        inward = [(1, 0), (-1, 0), (0, 1), (0, -1)][side]
        dist = rng.uniform(0.2, 1.5)
        if side < 2:
            pos = np.array([-inward[0] * (W / 2 - min(dist, W / 2 - 0.3)), 0,
                            rng.uniform(-D / 2 + 0.4, D / 2 - 0.4)])
        else:
            pos = np.array([rng.uniform(-W / 2 + 0.4, W / 2 - 0.4), 0,
                            -inward[1] * (D / 2 - min(dist, D / 2 - 0.3))])
        yaw = np.arctan2(-inward[0], -inward[1]) + np.radians(rng.uniform(-35, 35))
    pos[1] = rng.uniform(1.0, min(1.7, Hh - 0.3))
    return pos.astype(np.float32), yaw, np.radians(rng.uniform(-30, 0)), np.radians(rng.uniform(-3, 3))


def render_room(h: int = 144, w: int = 192, seed: int = 0, ss: int = 2, kinect: bool = False) -> GBufferFrame:
    """One analytic indoor frame (see module doc) as a :class:`GBufferFrame`.

    ``kinect``: RGB-D-capture style (module doc): camera near a wall looking into the
    room, height 1.0-1.7 m, pitch -30..0 deg, horizontal FOV 55-65 deg; light paint walls,
    wood/tile/carpet floors, tables on legs, large windows onto a bright, far exterior
    (photographs), and sunlight entering through the window."""
    rng = np.random.default_rng(seed)
    for _attempt in range(20):
        sc = Scene(rng, kinect=kinect)
        W, Hh, D = sc.room * np.array([2, 1, 2])
        if kinect:
            cam, k_yaw, k_pitch, k_roll = _kinect_camera(rng, W, D, Hh)
        else:
            cam = np.array([rng.uniform(-W / 2 + 0.4, W / 2 - 0.4), rng.uniform(0.6, min(1.9, Hh - 0.3)),
                            rng.uniform(-D / 2 + 0.4, D / 2 - 0.4)], np.float32)
        inside = any(np.all(np.abs((cam - b["c"]) @ b["R"]) < b["h"] + 0.2) for b in sc.boxes) or \
            any(np.linalg.norm(cam - s["c"]) < s["r"] + 0.2 for s in sc.spheres) or \
            any(np.linalg.norm((cam - c["c"])[[0, 2]]) < c["r"] + 0.2 for c in sc.cyls)
        if not inside:
            break
    if kinect:
        yaw, pitch, roll = k_yaw, k_pitch, k_roll
    else:
        yaw, pitch, roll = rng.uniform(0, 2 * np.pi), np.radians(rng.uniform(-35, 10)), np.radians(rng.uniform(-4, 4))
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    Ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]], np.float32)
    Rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]], np.float32)
    Rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]], np.float32)
    R = Ry @ Rx @ Rz  # camera -> world
    H2, W2 = h * ss, w * ss
    if kinect:  # horizontal FOV
        fy = 0.5 * W2 / np.tan(np.radians(rng.uniform(55, 65)) / 2)
    else:
        fov = np.radians(rng.uniform(40, 70))
        fy = 0.5 * H2 / np.tan(fov / 2)
    ys, xs = np.mgrid[0:H2, 0:W2].astype(np.float32)
    dc = np.stack([(xs + 0.5 - W2 / 2) / fy, -(ys + 0.5 - H2 / 2) / fy, -np.ones_like(xs)], -1).reshape(-1, 3)
    dw = dc @ R.T
    dn = dw / np.linalg.norm(dw, axis=1, keepdims=True)
    o = np.broadcast_to(cam, dn.shape)
    t, n, obj = sc.cast(o, dn)
    p = o + dn * t[:, None]
    mats = sc.materials()
    alb, met, rou = _shade_albedo(p, n, obj, mats)
    # lighting
    rad = alb * sc.ambient * (0.6 + 0.4 * np.clip(n[:, 1], -1, 1))[:, None]
    view = -dn
    for L in sc.lights:
        lv = L["p"] - p
        dist = np.linalg.norm(lv, axis=1)
        ld = lv / dist[:, None]
        ndl = np.clip((n * ld).sum(1), 0, None)
        po = p + n * 1e-3
        ts, _, _ = sc.cast(po, ld, shadow=True)
        lit = (ts >= dist - 1e-3) & (ndl > 0)
        e = (L["I"][None] * (ndl * lit / np.maximum(dist ** 2, 0.3))[:, None])
        rad += e * _reflectance(n, ld, view, alb, met, rou)
    if kinect and sc.opening is not None:
        ext = obj == 6
        if rng.random() < 0.65:  # sunlight through the opening: lit where a ray toward the sun exits through it
            op = sc.opening
            a = 0 if op["wall"] < 2 else 2
            out_dir = np.zeros(3, np.float32)
            out_dir[a] = -1.0 if op["wall"] in (0, 2) else 1.0
            az, el = np.radians(rng.uniform(-55, 55)), np.radians(rng.uniform(15, 55))
            side = np.zeros(3, np.float32)
            side[2 - a] = 1.0
            sd = out_dir * np.cos(el) * np.cos(az) + side * np.cos(el) * np.sin(az) + np.array([0, np.sin(el), 0])
            sd = (sd / np.linalg.norm(sd)).astype(np.float32)
            ndl = np.clip(n @ sd, 0, None)
            cand = (ndl > 0) & ~ext
            if cand.any():
                _, _, so = sc.cast(p[cand] + n[cand] * 1e-3, np.broadcast_to(sd, (int(cand.sum()), 3)).copy())
                lit = np.zeros(len(p), bool)
                lit[np.flatnonzero(cand)[so == 6]] = True
                sun = np.array([1.0, 0.93, 0.8], np.float32) * rng.uniform(2.0, 10.0)
                e = sun[None] * (ndl * lit)[:, None]
                rad += e * _reflectance(n, sd[None], view, alb, met, rou)
        if ext.any() and (~ext).any():  # the outside is much brighter than the room
            lum_in = float(np.median(rad[~ext].mean(1)))
            lum_alb = float(np.median(alb[ext].mean(1))) + 1e-4
            rad[ext] = alb[ext] * (lum_in / lum_alb) * rng.uniform(2.0, 10.0) * \
                np.exp(rng.normal(0, 0.05, 3)).astype(np.float32)
    elif sc.opening is not None:  # the outside is brighter
        rad[obj == 6] *= rng.uniform(1.0, 6.0)
    depth = (-(p - cam) @ R)[:, 2]
    n_cam = n @ R
    def down(a, c):
        a = a.reshape((H2, W2, c) if c > 1 else (H2, W2))
        return resize(a, (w, h), "area") if ss > 1 else a
    rgb = down(rad.astype(np.float32), 3)
    nn = down(n_cam.astype(np.float32), 3)
    nn /= np.maximum(np.linalg.norm(nn, axis=-1, keepdims=True), 1e-6)
    dep = down(depth.astype(np.float32), 1)
    fx = fy / ss
    return GBufferFrame(
        combined=np.concatenate([np.maximum(rgb, 0), np.ones((h, w, 1), np.float32)], -1),
        depth=np.maximum(dep, 1e-3), normal=nn.astype(np.float32),
        albedo=np.clip(down(alb, 3), 0, 1), metallic=np.clip(down(met, 1), 0, 1),
        roughness=np.clip(down(rou, 1), 0, 1), confidence=np.ones((h, w), np.float32),
        meta=make_meta(estimator="roomgen", depth_kind="metric", depth_near=float(dep.min()),
                       depth_far=float(dep.max()), intrinsics=(fx, fx, w / 2, h / 2),
                       extra={"seed": int(seed)}),
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--size", type=int, nargs=2, default=[144, 192], metavar=("H", "W"))
    ap.add_argument("--kinect", action="store_true", help="RGB-D capture style rooms (see render_room)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(args.start, args.start + args.count):
        p = frame_path(out, i + 1)
        if p.exists():
            continue  # resumable
        write_frame(p, render_room(*args.size, seed=i, kinect=args.kinect), validate=True)


if __name__ == "__main__":
    main()
