"""Deferred shading maths for the embedded renderer (numpy only, float32, vectorised).

Conventions (same as :mod:`backend.contract`):

* Camera space, OpenGL: +X right, +Y up, +Z toward the camera; the camera looks
  down -Z. Normals are unit ``H x W x 3`` float32.
* Depth is planar (along the camera axis). A pixel's position is
  ``P = depth * r`` where ``r = ((x + 0.5 - cx) / fx, -(y + 0.5 - cy) / fy, -1)``.
* Colours are scene-linear Rec.709, float32, ``H x W x 3``.
* Directions of lights point *from the surface toward the light* (unit, camera space).

Sources of the models:

* GGX / Trowbridge-Reitz NDF, height-correlated Smith visibility and Schlick
  Fresnel: Walter et al., "Microfacet Models for Refraction through Rough
  Surfaces" (EGSR 2007); Heitz, "Understanding the Masking-Shadowing Function"
  (JCGT 2014); Karis, "Real Shading in Unreal Engine 4" (SIGGRAPH 2013);
  Blender Principled BSDF metallic workflow (F0 = mix(0.04, base, metallic),
  alpha = roughness^2).
* Burley diffuse: Burley, "Physically-Based Shading at Disney" (SIGGRAPH 2012).
* Environment specular (split-sum analytic fit): Fdez-Agüera, "A Multiple-Scattering
  Microfacet Model for Real-Time Image-based Lighting" (JCGT 2019), roughness-
  dependent Fresnel term.
* Fog: Koschmieder's law L = L0 exp(-beta d) + L_air (1 - exp(-beta d)); exponential
  height fog optical depth integrated analytically along the view ray (Quilez,
  "Better fog", 2010; Wenzel, "Real-time atmospheric effects in games", 2006).
* Underwater: Akkaynak & Treibitz, "A Revised Underwater Image Formation Model"
  (CVPR 2018) - per-channel direct attenuation + backscatter (veiling light);
  Jerlov water types for the coefficients (red attenuates fastest).
"""
from __future__ import annotations

import math
import os
import sys
from functools import lru_cache
from typing import Optional, Sequence, Tuple

import numpy as np

# linear_to_srgb: the one sRGB transfer (backend.colour); also importable from here
from ..colour import linear_to_srgb  # noqa: F401
from ..imaging import resize

F32 = np.float32
#: vertical field of view assumed when a frame carries no intrinsics (degrees)
DEFAULT_FOV_Y_DEG = 50.0
#: Rec.709 luminance weights
LUMA = (0.2126, 0.7152, 0.0722)

# Layout: the shader works channel-first (``3 x H x W``): numpy broadcasts a colour
# (``3 x 1 x 1``) or a scalar field (``H x W``) over it with long contiguous inner
# loops, which is ~20x faster than broadcasting over a trailing axis of size 3.


_ALLOCATOR_TUNED = False


def tune_allocator() -> bool:
    """Keep freed large blocks in the heap (glibc ``mallopt``), once per process.

    The shader allocates dozens of frame-sized temporaries per frame; glibc serves
    blocks above its mmap threshold with fresh ``mmap`` pages that the kernel must
    zero-fill on first touch, which cost ~30-50 % of a 960x540 frame in page faults.
    Raising the mmap threshold to 32 MiB (the glibc maximum) and the trim threshold
    makes them reuse heap memory instead. No-op off glibc, inside Blender (``bpy``
    imported: Blender's process is left alone) or when ``GBUFFER_NO_MALLOPT`` is set.
    Returns True when applied.
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED or os.environ.get("GBUFFER_NO_MALLOPT") or "bpy" in sys.modules:
        return _ALLOCATOR_TUNED
    _ALLOCATOR_TUNED = True
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        if not name or not sys.platform.startswith("linux"):
            return False
        libc = ctypes.CDLL(name)
        m_trim, m_top_pad, m_mmap = -1, -2, -3
        ok = libc.mallopt(m_mmap, 32 * 1024 * 1024)
        libc.mallopt(m_trim, 512 * 1024 * 1024)
        libc.mallopt(m_top_pad, 64 * 1024 * 1024)
        return bool(ok)
    except (OSError, AttributeError):
        return False


def col(v: Sequence[float]) -> np.ndarray:
    """A float32 colour / direction as ``3 x 1 x 1`` (broadcasts over ``3 x H x W``)."""
    return np.asarray(v, dtype=F32).reshape(3, 1, 1)


def normalize3(v: Sequence[float]) -> Tuple[float, float, float]:
    """Unit 3-vector as a tuple of Python floats."""
    a = np.asarray(v, dtype=np.float64).reshape(3)
    a = a / max(float(np.linalg.norm(a)), 1e-12)
    return (float(a[0]), float(a[1]), float(a[2]))


def chw(img: np.ndarray) -> np.ndarray:
    """``H x W x C`` -> contiguous float32 ``C x H x W``."""
    return np.ascontiguousarray(np.moveaxis(np.asarray(img, dtype=F32), -1, 0))


def hwc(img: np.ndarray) -> np.ndarray:
    """``C x H x W`` -> contiguous float32 ``H x W x C`` (``np.stack`` of the planes is
    ~8x faster than a transposed copy)."""
    return np.stack([np.asarray(c, dtype=F32) for c in img], axis=-1)


def dot3(v: np.ndarray, d: Sequence[float]) -> np.ndarray:
    """``3 x H x W`` field dotted with a constant 3-vector -> ``H x W``."""
    return v[0] * F32(d[0]) + v[1] * F32(d[1]) + v[2] * F32(d[2])


def intrinsics_for(h: int, w: int, intrinsics: Optional[Sequence[float]] = None,
                   fov_y_deg: float = DEFAULT_FOV_Y_DEG) -> Tuple[float, float, float, float]:
    """``(fx, fy, cx, cy)`` in pixels: the given ones, or a pinhole with ``fov_y_deg``."""
    if intrinsics is not None and len(intrinsics) == 4 and all(
            math.isfinite(float(x)) for x in intrinsics) and float(intrinsics[0]) > 0:
        return tuple(float(x) for x in intrinsics)  # type: ignore[return-value]
    f = 0.5 * h / math.tan(math.radians(fov_y_deg) * 0.5)
    return (f, f, 0.5 * w, 0.5 * h)


@lru_cache(maxsize=8)
def _rays_cached(h: int, w: int, k: Tuple[float, float, float, float]):
    fx, fy, cx, cy = k
    x = ((np.arange(w, dtype=F32) + F32(0.5) - F32(cx)) / F32(fx)).astype(F32)
    y = (-(np.arange(h, dtype=F32) + F32(0.5) - F32(cy)) / F32(fy)).astype(F32)
    planar = np.empty((3, h, w), dtype=F32)
    planar[0] = x[None, :]
    planar[1] = y[:, None]
    planar[2] = -1.0
    length = np.sqrt(x[None, :] ** 2 + y[:, None] ** 2 + F32(1.0)).astype(F32)
    view = (-planar / length).astype(F32)  # unit, surface -> camera
    for a in (planar, length, view):
        a.setflags(write=False)
    return planar, length, view


def camera_rays(h: int, w: int, intrinsics: Optional[Sequence[float]] = None,
                fov_y_deg: float = DEFAULT_FOV_Y_DEG):
    """Per-pixel camera rays (cached per size and intrinsics; read-only arrays).

    Returns:
        ``(planar, length, view)``: ``planar`` 3 x H x W ray with z = -1 (so that
        ``P = depth * planar``), ``length`` H x W = ``|planar|`` (planar depth ->
        distance along the ray), ``view`` 3 x H x W unit vector from the surface
        toward the camera. All float32, channel-first.
    """
    return _rays_cached(int(h), int(w), intrinsics_for(h, w, intrinsics, fov_y_deg))


def luminance(rgb: np.ndarray) -> np.ndarray:
    """Rec.709 luminance of a ``3 x H x W`` image -> ``H x W`` float32."""
    return rgb[0] * F32(LUMA[0]) + rgb[1] * F32(LUMA[1]) + rgb[2] * F32(LUMA[2])


def smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    """Hermite smoothstep of ``x`` between ``e0`` and ``e1`` (float32)."""
    t = np.clip((x - F32(e0)) * F32(1.0 / (e1 - e0)), 0.0, 1.0)
    return t * t * (F32(3.0) - F32(2.0) * t)


def schlick_fresnel(f0: np.ndarray, cos_theta: np.ndarray) -> np.ndarray:
    """Schlick's Fresnel ``F0 + (1 - F0)(1 - cos)^5``; ``f0`` 3 x H x W (or 3 x 1 x 1),
    ``cos_theta`` H x W -> 3 x H x W."""
    m = np.clip(F32(1.0) - cos_theta, 0.0, 1.0)
    m2 = m * m
    m5 = m2 * m2 * m
    return f0 + (F32(1.0) - f0) * m5


def ggx_d(n_dot_h: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """GGX normal distribution ``a^2 / (pi ((n.h)^2 (a^2 - 1) + 1)^2)`` (``alpha`` = roughness^2)."""
    a2 = alpha * alpha
    d = n_dot_h * n_dot_h * (a2 - F32(1.0)) + F32(1.0)
    return a2 / (F32(math.pi) * d * d)


def smith_vis(n_dot_l: np.ndarray, n_dot_v: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Height-correlated Smith visibility ``G / (4 n.l n.v)`` for GGX (Heitz 2014)."""
    a2 = alpha * alpha
    one_m = F32(1.0) - a2
    gv = n_dot_l * np.sqrt(n_dot_v * n_dot_v * one_m + a2)
    gl = n_dot_v * np.sqrt(n_dot_l * n_dot_l * one_m + a2)
    return F32(0.5) / np.maximum(gv + gl, F32(1e-6))


def burley_factor(n_dot_l, n_dot_v, l_dot_h, roughness) -> np.ndarray:
    """Burley (Disney) diffuse retro-reflection factor multiplying Lambert (H x W)."""
    fd90 = F32(0.5) + F32(2.0) * roughness * l_dot_h * l_dot_h

    def f(c):
        m = np.clip(F32(1.0) - c, 0.0, 1.0)
        m2 = m * m
        return F32(1.0) + (fd90 - F32(1.0)) * m2 * m2 * m

    return f(n_dot_l) * f(n_dot_v)


def directional_light(normal: np.ndarray, view: np.ndarray, n_dot_v: np.ndarray,
                      f0: np.ndarray, alpha: np.ndarray, light_dir: Sequence[float],
                      *, roughness: Optional[np.ndarray] = None, burley: bool = False):
    """Diffuse and specular response to one unit-intensity white directional light.

    Cook-Torrance ``D * Vis * F`` with GGX D, height-correlated Smith Vis and Schlick F.
    Half-vector dot products come from ``n.l``, ``n.v`` and ``l.v`` without building the
    half vector: ``n.h = (n.l + n.v) / |l + v|``, ``v.h = (1 + l.v) / |l + v|``.

    Args:
        normal, view: 3 x H x W unit vectors; ``n_dot_v``: H x W clamped to >= 1e-4.
        f0: 3 x H x W specular reflectance at normal incidence.
        alpha: H x W GGX alpha (roughness^2, already clamped away from 0).
        light_dir: unit 3-vector toward the light.
        roughness, burley: use the Burley diffuse factor (needs ``roughness``).

    Returns:
        ``(lambert, specular)``: H x W cosine term ``max(n.l, 0)`` (times the Burley
        factor when asked) and 3 x H x W specular radiance per unit light irradiance.
    """
    n_dot_l = np.maximum(dot3(normal, light_dir), F32(0.0))
    l_dot_v = dot3(view, light_dir)
    inv_len = F32(1.0) / np.sqrt(np.maximum(F32(2.0) + F32(2.0) * l_dot_v, F32(1e-6)))
    n_dot_h = np.clip((n_dot_l + n_dot_v) * inv_len, 0.0, 1.0)
    v_dot_h = np.clip((F32(1.0) + l_dot_v) * inv_len, 0.0, 1.0)
    dv = ggx_d(n_dot_h, alpha) * smith_vis(n_dot_l, n_dot_v, alpha) * n_dot_l
    spec = schlick_fresnel(f0, v_dot_h) * dv
    lam = n_dot_l
    if burley and roughness is not None:
        lam = lam * burley_factor(n_dot_l, n_dot_v, v_dot_h, roughness)
    return lam, spec


def hemisphere(ny: np.ndarray, sky: np.ndarray, ground: np.ndarray) -> np.ndarray:
    """Hemisphere ambient ``mix(ground, sky, 0.5 + 0.5 n.y)``; colours 3 x 1 x 1 -> 3 x H x W."""
    t = F32(0.5) + F32(0.5) * ny
    return ground + (sky - ground) * t


#: metallic values at or below this are treated as 0 by :func:`env_specular`
METAL_EPS = 1e-3


def env_brdf_karis(f0: np.ndarray, n_dot_v: np.ndarray, roughness: np.ndarray) -> np.ndarray:
    """Split-sum environment BRDF, Karis's analytic fit ("Physically Based Shading on
    Mobile", 2014): ``F0 * A + B`` with ``A, B`` from roughness and ``n.v``.
    ``f0``: 3 x H x W (or 3 x 1 x 1); ``n_dot_v``, ``roughness``: H x W -> 3 x H x W."""
    r = np.asarray(roughness, dtype=F32)
    rx = r * F32(-1.0) + F32(1.0)
    ry = r * F32(-0.0275) + F32(0.0425)
    rz = r * F32(-0.572) + F32(1.04)
    rw = r * F32(0.022) + F32(-0.04)
    a004 = np.minimum(rx * rx, np.exp2(F32(-9.28) * n_dot_v)) * rx + ry
    a = a004 * F32(-1.04) + rz
    b = a004 * F32(1.04) + rw
    return f0 * a + b


def env_specular(f0: np.ndarray, n_dot_v: np.ndarray, roughness: np.ndarray,
                 env: np.ndarray, metallic: Optional[np.ndarray] = None) -> np.ndarray:
    """Analytic environment specular (split-sum fit, Fdez-Agüera 2019, simplified).

    Dielectrics: ``env * (F0 (1 - m5) + max(1 - r, F0) m5) * (1 - r)^2`` with
    ``m5 = (1 - n.v)^5``; ``max(1 - r, F0)`` is taken as ``1 - r``. The ``(1 - r)^2``
    fade keeps rough dielectrics from picking up the sky twice (their source shading
    already carries the real reflections). Metals (``metallic`` 1) use the full
    split-sum fit (:func:`env_brdf_karis`): their reflection is all they show, and the
    fade made a rough metal edit a dark blur; ``metallic`` in between blends the two.
    Everything is faded out below ``n.v = 0.15``.
    ``f0``, ``env``: 3 x H x W;
    ``n_dot_v``, ``roughness``, ``metallic``: H x W.
    """
    m = np.clip(F32(1.0) - n_dot_v, 0.0, 1.0)
    m2 = m * m
    m5 = m2 * m2 * m
    fr = np.maximum(F32(1.0) - roughness, F32(0.0))
    fr2 = fr * fr
    # horizon fade below n.v = 0.15: estimated normals are least reliable there and a
    # mirror Fresnel term turns their errors into bright lines
    fr2 = fr2 * smoothstep(0.0, 0.15, n_dot_v)
    a = (F32(1.0) - m5) * fr2
    b = fr2 * fr * m5
    brdf = f0 * a + b
    # metallic below 1e-3 (an estimator's "zero") changes the result by < 0.1 %: skip
    # the metal fit then, it costs as much as the rest of the shading
    if metallic is not None and float(np.max(metallic)) > METAL_EPS:
        metal = np.where(metallic > METAL_EPS, np.asarray(metallic, dtype=F32), F32(0.0))
        brdf = brdf + (env_brdf_karis(f0, n_dot_v, roughness) * smoothstep(0.0, 0.15, n_dot_v) - brdf) * metal
    return env * brdf


def upsample(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of ``[C x] h0 x w0`` to ``h x w`` (float32; pixel centres at
    half-integers, edges clamped: OpenCV ``INTER_LINEAR``)."""
    h0, w0 = img.shape[-2:]
    planes = np.asarray(img, dtype=F32).reshape(-1, h0, w0)
    out = np.empty((planes.shape[0], h, w), dtype=F32)
    for i, p in enumerate(planes):
        out[i] = resize(p, (w, h))
    return out.reshape(img.shape[:-2] + (h, w))


def lowpass(img: np.ndarray, scale: int = 8, radius: int = 2) -> np.ndarray:
    """Cheap wide blur of ``[C x] H x W`` (float32): box-downsample by the integer
    ``scale`` (edges cropped to a multiple), box blur of width ``2 radius + 1`` twice
    (edge-replicated), bilinear upsample back. OpenCV does each step per plane
    (``INTER_AREA``, ``blur``, ``INTER_LINEAR``) and releases the GIL."""
    import cv2

    h, w = img.shape[-2:]
    if h < scale or w < scale:
        m = np.asarray(img, dtype=F32).mean(axis=(-2, -1), keepdims=True, dtype=F32)
        return np.broadcast_to(m, img.shape).astype(F32)
    hh, ww = h // scale, w // scale
    planes = np.asarray(img, dtype=F32).reshape(-1, h, w)
    out = np.empty(planes.shape, dtype=F32)
    k = (2 * radius + 1, 2 * radius + 1)
    for i, p in enumerate(planes):
        small = resize(p[: hh * scale, : ww * scale], (ww, hh), "area")
        if radius > 0:
            small = cv2.blur(small, k, borderType=cv2.BORDER_REPLICATE)
            small = cv2.blur(small, k, borderType=cv2.BORDER_REPLICATE)
        out[i] = resize(small, (w, h))
    return out.reshape(img.shape)


def screen_space_reflection(depth: np.ndarray, normal: np.ndarray, radiance: np.ndarray,
                            intrinsics: Tuple[float, float, float, float], mask: np.ndarray, *,
                            steps: int = 32, reach: float = 8.0, thickness: float = 0.06,
                            refine: int = 5, facing: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Screen-space reflections: what a mirror at each masked pixel would see in the frame.

    A deferred renderer's standard reflection term (e.g. McGuire & Mara, "Efficient GPU
    Screen-Space Ray Tracing", JCGT 2014), here as a vectorised linear march: from the
    pixel's camera-space point ``P = depth * ray`` along the mirror direction
    ``R = d - 2 (n.d) n`` (``d`` = unit view ray), ``steps`` samples at distances
    geometrically spaced from 1 % to ``reach`` times ``|P|``; the first sample that lies
    behind the depth buffer by less than ``thickness`` times the buffer depth is the hit,
    refined by ``refine`` bisection steps toward the crossing, and ``radiance`` is sampled
    there (bilinear). Rays that leave the frame, go behind
    the camera or find nothing get weight 0; the weight fades near the frame border.

    Args:
        depth: ``H x W`` planar depth (> 0; any consistent unit, relative depth works).
        normal: ``3 x H x W`` unit camera-space normals (OpenGL).
        radiance: ``3 x H x W`` scene-linear colour to reflect.
        intrinsics: ``(fx, fy, cx, cy)`` in pixels of this ``H x W`` grid.
        mask: ``H x W`` bool, the pixels to trace (glossy surfaces).
        facing: only surfaces facing the ray are hits (a mirror cylinder's reflected ray
            grazing past its own lower surface does not hit it).

    Returns:
        ``(colour 3 x H x W, weight H x W in [0, 1])`` (float32; 0 where not traced).
    """
    h, w = depth.shape
    colour = np.zeros((3, h, w), dtype=F32)
    weight = np.zeros((h, w), dtype=F32)
    if not mask.any():
        return colour, weight
    fx, fy, cx, cy = (float(v) for v in intrinsics)
    planar, _length, _view = camera_rays(h, w, (fx, fy, cx, cy))
    dep = np.asarray(depth, dtype=F32)
    p = planar[:, mask] * dep[mask]                      # 3 x N camera-space points
    dist = np.sqrt((p * p).sum(0))
    d = p / np.maximum(dist, F32(1e-6))
    n = normal[:, mask]
    r = d - F32(2.0) * (n * d).sum(0) * n                # mirror direction
    t = np.geomspace(0.01, reach, steps).astype(F32)[:, None] * dist[None, :]   # S x N
    qx = p[0] + r[0] * t
    qy = p[1] + r[1] * t
    qz = -(p[2] + r[2] * t)                              # depth along -z, S x N
    front = qz > F32(1e-4)
    qz_safe = np.where(front, qz, F32(1.0))
    u = F32(fx) * qx / qz_safe + F32(cx)                 # continuous pixel coordinates
    v = F32(cy) - F32(fy) * qy / qz_safe
    inside = front & (u >= 0) & (u < w) & (v >= 0) & (v < h)
    ui = np.clip(u.astype(np.int32), 0, w - 1)
    vi = np.clip(v.astype(np.int32), 0, h - 1)
    scene = dep[vi, ui]
    # behind the depth buffer by less than the surface thickness, or by less than this
    # step's own advance in depth (geometric steps would otherwise skip thin hits)
    step_dz = np.abs(np.diff(qz, axis=0, prepend=qz[:1] * F32(0.99)))
    hit = inside & (qz > scene) & (qz - scene < np.maximum(F32(thickness) * scene, step_dz))
    if facing:  # a surface the ray meets from behind is its own surface curving away: no hit
        hit &= (normal[0][vi, ui] * r[0] + normal[1][vi, ui] * r[1] + normal[2][vi, ui] * r[2]) < F32(0.0)
    found = hit.any(0)
    if not found.any():
        return colour, weight
    first = np.argmax(hit, axis=0)
    cols = np.arange(first.size)
    hu = u[first, cols]
    hv = v[first, cols]
    # refine each hit between the last step in front of the depth buffer and the first
    # behind it (bisection, ``refine`` halvings): without it every pixel snaps to one of
    # the geometric steps and a mirror shows the reflected scene in stepped bands
    if refine > 0:
        sel = np.flatnonzero(found)
        f_sel = first[sel]
        t_hi = t[f_sel, sel]
        t_lo = np.where(f_sel > 0, t[np.maximum(f_sel - 1, 0), sel], F32(0.0))
        ps, rs = p[:, sel], r[:, sel]
        for _ in range(refine):
            tm = F32(0.5) * (t_lo + t_hi)
            mz = -(ps[2] + rs[2] * tm)
            mz_safe = np.maximum(mz, F32(1e-4))
            mu = F32(fx) * (ps[0] + rs[0] * tm) / mz_safe + F32(cx)
            mv = F32(cy) - F32(fy) * (ps[1] + rs[1] * tm) / mz_safe
            sc = dep[np.clip(mv.astype(np.int32), 0, h - 1), np.clip(mu.astype(np.int32), 0, w - 1)]
            behind = (mz > sc) & (mu >= 0) & (mu < w) & (mv >= 0) & (mv < h)
            t_hi = np.where(behind, tm, t_hi)
            t_lo = np.where(behind, t_lo, tm)
        hz = np.maximum(-(ps[2] + rs[2] * t_hi), F32(1e-4))
        hu, hv = hu.copy(), hv.copy()
        hu[sel] = F32(fx) * (ps[0] + rs[0] * t_hi) / hz + F32(cx)
        hv[sel] = F32(cy) - F32(fy) * (ps[1] + rs[1] * t_hi) / hz
    hu, hv = hu - F32(0.5), hv - F32(0.5)
    # bilinear sample of the radiance at the hits (edge-clamped)
    x0 = np.clip(np.floor(hu), 0, w - 1).astype(np.int32)
    y0 = np.clip(np.floor(hv), 0, h - 1).astype(np.int32)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    ax = np.clip(hu - x0, 0.0, 1.0).astype(F32)
    ay = np.clip(hv - y0, 0.0, 1.0).astype(F32)
    sampled = [(c[y0, x0] * (1 - ax) + c[y0, x1] * ax) * (1 - ay) + (c[y1, x0] * (1 - ax) + c[y1, x1] * ax) * ay
               for c in radiance]
    border = np.minimum(np.minimum(hu, w - 1 - hu) / (0.1 * w), np.minimum(hv, h - 1 - hv) / (0.1 * h))
    wgt = found * np.clip(border, 0.0, 1.0)
    for c in range(3):
        colour[c][mask] = np.where(found, sampled[c], F32(0.0))
    weight[mask] = wgt.astype(F32)
    return colour, weight


def koschmieder(radiance: np.ndarray, transmittance: np.ndarray,
                airlight: np.ndarray) -> np.ndarray:
    """``L0 * T + L_air * (1 - T)`` (Koschmieder); ``T = exp(-tau)`` given, H x W or 3 x H x W."""
    return airlight + (radiance - airlight) * transmittance


def height_fog_optical_depth(dist: np.ndarray, dir_y: np.ndarray, beta0: float,
                             falloff: float, cam_height: float = 0.0,
                             x_min: float = -1.5) -> np.ndarray:
    """Optical depth of exponential height fog ``beta(y) = beta0 exp(-falloff y)``.

    Integrated analytically along the ray from the camera (height ``cam_height``) over
    distance ``dist`` with vertical direction component ``dir_y``::

        tau = beta0 * exp(-k y_c) * dist * (1 - exp(-k dist dir_y)) / (k dist dir_y)

    with the limit ``beta0 exp(-k y_c) dist`` as ``k dist dir_y -> 0``. The exponent
    ``k dist dir_y`` is clamped to ``>= x_min`` so that rays going far below the camera
    (e.g. relative depth on a steep ground plane) see at most ``e^-x_min`` times the
    density at the camera.
    """
    beta_c = F32(beta0 * math.exp(-falloff * cam_height))
    if falloff <= 0:
        return beta_c * dist
    x = np.maximum(F32(falloff) * dist * dir_y, F32(x_min))
    small = np.abs(x) < F32(1e-3)
    xs = np.where(small, F32(1.0), x)
    ratio = np.where(small, F32(1.0) - F32(0.5) * x, -np.expm1(-xs) / xs)
    return (beta_c * dist * ratio).astype(F32)


#: caustics: the water surface is a sum of CAUSTIC_WAVES travelling sine waves with
#: directions spread by the golden angle (no preferred orientation), wavelengths
#: log-uniform in CAUSTIC_WAVELENGTHS (metres) and random phases (fixed seed)
CAUSTIC_WAVES = 14
CAUSTIC_WAVELENGTHS = (0.35, 1.6)
#: refractive index of water
WATER_IOR = 1.33
#: caustics: the waves run at this fraction of deep-water speed (calmer, steadier look)
CAUSTIC_SPEED = 0.25


@lru_cache(maxsize=1)
def _caustic_waves():
    rng = np.random.default_rng(7)
    n = CAUSTIC_WAVES
    ang = (np.arange(n) * 2.399963 + rng.uniform(0.0, 0.3, n)) % (2.0 * math.pi)
    lo, hi = CAUSTIC_WAVELENGTHS
    lam = np.exp(rng.uniform(math.log(lo), math.log(hi), n))
    phase = rng.uniform(0.0, 2.0 * math.pi, n)
    k = 2.0 * math.pi / lam
    return np.cos(ang) * k, np.sin(ang) * k, k, phase


def caustics(px: np.ndarray, pz: np.ndarray, t: float, depth_m: float = 4.0,
             strength: float = 0.8) -> np.ndarray:
    """Caustic irradiance factor (mean about 1, in ``[0, 8]``) on a horizontal plane
    ``depth_m`` metres below a wavy water surface, at horizontal scene coordinates
    ``px``, ``pz`` (metres, any shape) and time ``t`` (seconds).

    Physically based: sunlight from straight above is refracted by the surface ``h(x)``
    (Snell, index :data:`WATER_IOR`); to first order a ray entering at ``x`` lands at
    ``x + c grad h(x)`` with ``c = depth (1 - 1/n)``, and the irradiance there is the
    inverse Jacobian determinant of that map, ``1 / |det(I + c Hess h)|`` (the beam
    compression that makes caustics: Watt 1990, "Light-water interaction using backward
    beam tracing", SIGGRAPH; Stam 1996; GPU Gems ch. 2, Guardado & Sanchez-Crespo 2004).
    ``h`` is a sum of :data:`CAUSTIC_WAVES` sine waves with deep-water dispersion
    ``omega = sqrt(g k)`` (slowed by 0.35 for the look), directions spread evenly
    (golden angle), so the pattern is an irregular, isotropic web that drifts and
    changes with time instead of regular lines. Amplitudes are set so each wave's
    curvature term is ``strength / sqrt(N)``; folds (``det -> 0``) are capped at 10x.
    """
    kx, kz, k, phase = _caustic_waves()
    c = float(depth_m) * (1.0 - 1.0 / WATER_IOR)
    n = len(k)
    px = np.asarray(px, dtype=F32)
    pz = np.asarray(pz, dtype=F32)
    hxx = np.zeros(px.shape, F32)
    hzz = np.zeros(px.shape, F32)
    hxz = np.zeros(px.shape, F32)
    for i in range(n):
        omega = math.sqrt(9.81 * k[i]) * CAUSTIC_SPEED
        # a k^2 c (curvature of this wave times c): the same surface focuses more the
        # deeper the plane, up to the focal depth (beyond, the web blurs: capped)
        amp = strength / math.sqrt(n) * min(c / (4.0 * (1.0 - 1.0 / WATER_IOR)), 1.5)
        s = np.sin(px * F32(kx[i]) + pz * F32(kz[i]) + F32(phase[i] - omega * t)) * F32(amp)
        ux, uz = F32(kx[i] / k[i]), F32(kz[i] / k[i])
        hxx -= s * (ux * ux)
        hzz -= s * (uz * uz)
        hxz -= s * (ux * uz)
    det = (F32(1.0) + hxx) * (F32(1.0) + hzz) - hxz * hxz
    out = F32(1.0) / np.maximum(np.abs(det), F32(0.1))
    return np.minimum(out, F32(8.0)) * F32(1.0 / CAUSTIC_MEAN) if c > 0 else np.ones(px.shape, F32)


#: mean of the raw inverse determinant over the plane (measured on a 4096^2 sample of
#: 40 m x 40 m at t = 0): caustics redistribute light, they do not add any on average
CAUSTIC_MEAN = 1.61


_PREVIEW_LUT_SCALE = 4096.0
_PREVIEW_LUT_MAX = 8.0


@lru_cache(maxsize=1)
def _preview_lut() -> np.ndarray:
    x = np.arange(int(_PREVIEW_LUT_MAX * _PREVIEW_LUT_SCALE) + 1, dtype=np.float64) / _PREVIEW_LUT_SCALE
    y = np.where(x > 0.8, 0.8 + 0.2 * np.tanh((x - 0.8) * 5.0), x)
    y = np.clip(y, 0.0, 1.0)
    return np.round(linear_to_srgb(y) * 255.0).astype(np.uint8)


def preview_8bit(rgb: np.ndarray, exposure: float = 1.0) -> np.ndarray:
    """Scene-linear H x W x 3 -> sRGB uint8 H x W x 3 for previews.

    A soft shoulder above 0.8 (``0.8 + 0.2 * tanh((x - 0.8) / 0.2)``) keeps highlights
    from clipping hard, then the sRGB transfer; evaluated through a lookup table with
    1/4096 steps (values above 8 map to white; NaN to black). Converted in strips of
    about a million values, so a 4K frame needs no full-size temporaries (issue 37).
    """
    rgb = np.asarray(rgb)
    out = np.empty(rgb.shape, np.uint8)
    lut = _preview_lut()
    rows = max(1, (1 << 20) // max(1, int(np.prod(rgb.shape[1:]))))
    for y in range(0, rgb.shape[0], rows):
        x = np.asarray(rgb[y:y + rows], dtype=F32) * F32(exposure * _PREVIEW_LUT_SCALE)
        np.fmax(x, F32(0.0), out=x)
        np.minimum(x, F32(_PREVIEW_LUT_MAX * _PREVIEW_LUT_SCALE), out=x)
        x += F32(0.5)
        out[y:y + rows] = lut[x.astype(np.int32)]
    return out
