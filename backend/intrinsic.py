"""Single-frame intrinsic decomposition: albedo with the light taken out, the frame's
lighting as low-order spherical harmonics, and highlight-based material cues.

numpy + OpenCV only (no torch, no scipy): runs on the default CPU path.

Method (issue 25, chosen by measurement on Cycles scenes with exact materials,
``benchmarks/materials_eval.py``):

1. **Lighting from normals** -- the irradiance of a convex Lambertian surface under
   distant light is well described by 9 spherical-harmonic coefficients of the
   normal (Ramamoorthi & Hanrahan, "An Efficient Representation for Irradiance
   Environment Maps", SIGGRAPH 2001). We fit ``E(n) = B(n) c`` per colour channel to
   the frame by iteratively reweighted least squares (Cauchy weights on the relative
   residual, so texture, highlights and shadows count less) on surface pixels;
   ``shading_sh = E(n)``.
2. **Colour Retinex on what is left** -- the residual ``log I - log E(n)`` holds log
   albedo plus what the normals cannot explain (cast shadows, interreflection). Its
   gradients are split as in colour Retinex (Land & McCann 1971; the chromaticity
   classifier of Grosse, Johnson, Adelson & Freeman, "Ground truth dataset and
   baseline evaluations for intrinsic image algorithms", ICCV 2009): a gradient is
   reflectance where the chromaticity changes or the log-luminance step is large,
   otherwise shading; the reflectance gradients are integrated by a Neumann Poisson
   solve (DCT, Simchony, Chellappa & Shao 1990).
3. **Range** -- albedo = I / shading with one global scale so the median of its
   largest channel sits at :data:`ALBEDO_MEDIAN`; brighter pixels are scaled down to a
   largest channel of 1 (hue kept, no per-channel clipping); scene-linear Rec.709.

Pixels with Confidence < 0.5 (sky) keep the source colour normalised by the same
scale and get no say in the fit. A frame without usable surface (all sky, all black,
fewer than :data:`MIN_PIXELS` lit pixels) returns the source chroma at constant
brightness with ``ok = False``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import cv2
import numpy as np

_LUMA = np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)
#: the median of the albedo's largest channel after scaling. The median, not a high
#: percentile: a frame's brightest pixels (foam, highlights) come and go, and a scale
#: anchored on them pumps the albedo's brightness (boat: 1.6 % -> 0.7 % mean
#: frame-to-frame change with the median; TUNE si-PSNR 17.00 -> 16.99 dB)
ALBEDO_MEDIAN = 0.4
#: fewer lit surface pixels than this: no decomposition (defaults, ok = False)
MIN_PIXELS = 64
#: colour Retinex thresholds (chosen on the TUNE seeds): chromaticity gradient that
#: marks a reflectance edge, and a log-luminance step that is reflectance by itself
#: (``inf``: never -- luminance-only edges cost 0.3-2.5 dB on the TUNE seeds)
CHROMA_EDGE = 0.12
LUMA_EDGE = float("inf")
#: the integrated log albedo luminance is shrunk toward its median by this factor
#: (1 = as integrated, 0 = constant brightness; see the module docstring)
LUM_CONTRAST = 0.5
#: shading is smoothed by a guided filter (guide: log luminance) of this radius, as a
#: share of the long side, and this eps (log units squared); chosen on the TUNE seeds
SHADING_RADIUS = 0.03
SHADING_EPS = 0.1
#: long side (pixels) at which the shading is estimated (then upsampled)
WORK_SIZE = 480
_EPS = 1e-4


def _cmax(a: np.ndarray) -> np.ndarray:
    """Largest of the 3 channels (faster than ``a.max(-1)`` on ``H x W x 3``)."""
    return np.maximum(np.maximum(a[..., 0], a[..., 1]), a[..., 2])


def _csum(a: np.ndarray) -> np.ndarray:
    return a[..., 0] + a[..., 1] + a[..., 2]


def sh_basis(normal: np.ndarray) -> np.ndarray:
    """Real spherical-harmonic basis up to order 2 (9 functions, unnormalised
    polynomials ``1, y, z, x, xy, yz, 3z^2-1, xz, x^2-y^2``) of unit normals.

    Args:
        normal: ``... x 3`` float32 unit camera-space normals (OpenGL: +X right, +Y up,
            +Z toward the camera).

    Returns:
        ``... x 9`` float32.
    """
    x, y, z = normal[..., 0], normal[..., 1], normal[..., 2]
    one = np.ones_like(x)
    return np.stack([one, y, z, x, x * y, y * z, 3 * z * z - 1, x * z, x * x - y * y], -1).astype(np.float32)


def fit_sh_irradiance(rgb: np.ndarray, normal: np.ndarray, mask: np.ndarray, iters: int = 5) -> Optional[np.ndarray]:
    """Fit ``rgb ~ sh_basis(normal) @ coeffs`` on ``mask`` (IRLS, Cauchy weights).

    Args:
        rgb: ``N x 3`` float32 scene-linear colours of surface pixels.
        normal: ``N x 3`` unit normals of the same pixels.
        mask: ``N`` bool, pixels allowed in the fit.
        iters: reweighting rounds.

    Returns:
        ``9 x 3`` float32 coefficients (irradiance times the mean albedo, linear units
        of the frame), or ``None`` with fewer than :data:`MIN_PIXELS` pixels.
    """
    if int(mask.sum()) < MIN_PIXELS:
        return None
    B = sh_basis(normal[mask]).astype(np.float64)
    Y = rgb[mask].astype(np.float64)
    w = np.ones(len(B))
    reg = 1e-3 * np.eye(9) * len(B)
    reg[0, 0] = 0.0
    c = None
    for _ in range(iters):
        Bw = B * w[:, None]
        c = np.linalg.solve(B.T @ Bw + reg, Bw.T @ Y)
        E = np.maximum(B @ c, _EPS)
        r = np.abs(np.log(np.maximum(Y, _EPS) / E)).mean(-1)
        s = max(float(np.median(r)), 1e-3) * 1.5
        w = 1.0 / (1.0 + (r / s) ** 2)
    return c.astype(np.float32)


def _dct2(a: np.ndarray, inverse: bool = False) -> np.ndarray:
    flag = cv2.DCT_INVERSE if inverse else 0
    return cv2.dct(a, flags=flag)


def poisson_neumann(gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """Least-squares integration of a gradient field (forward differences; ``gx[:, -1]``
    and ``gy[-1]`` ignored) with Neumann boundaries, by DCT (Simchony et al. 1990).

    Args:
        gx, gy: ``H x W`` float32 (H, W even; see :func:`integrate_gradients`).

    Returns:
        ``H x W`` float32 with zero mean.
    """
    h, w = gx.shape
    gx = gx.copy()
    gy = gy.copy()
    gx[:, -1] = 0
    gy[-1, :] = 0
    div = gx.copy()
    div[:, 1:] -= gx[:, :-1]
    div += gy
    div[1:, :] -= gy[:-1, :]
    d = _dct2(div.astype(np.float32))
    yy = np.cos(np.pi * np.arange(h) / h)[:, None]
    xx = np.cos(np.pi * np.arange(w) / w)[None, :]
    den = 2 * yy + 2 * xx - 4
    den[0, 0] = 1.0
    u = (d / den).astype(np.float32)
    u[0, 0] = 0.0
    return _dct2(u, inverse=True).astype(np.float32)


def integrate_gradients(gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """:func:`poisson_neumann` for any ``H x W`` (odd sizes padded by one replicated
    row / column: its gradients copied, the step onto it zero)."""
    h, w = gx.shape
    pad = ((0, h & 1), (0, w & 1))
    px = np.pad(np.asarray(gx, np.float32), pad, mode="edge")
    py = np.pad(np.asarray(gy, np.float32), pad, mode="edge")
    px[:, w - 1] = 0
    py[h - 1, :] = 0
    return poisson_neumann(px, py)[:h, :w]


def retinex_log_albedo(log_lum: np.ndarray, chroma: np.ndarray, surface: np.ndarray,
                       chroma_edge: float = CHROMA_EDGE, luma_edge: float = LUMA_EDGE) -> np.ndarray:
    """Colour Retinex (Grosse et al. 2009): log-luminance gradients where the chromaticity
    changes by more than ``chroma_edge`` (or the step exceeds ``luma_edge``) are
    reflectance, the rest shading; gradients across the ``surface`` border are dropped.

    Args:
        log_lum: ``H x W`` float32 log luminance (shading from normals already removed).
        chroma: ``H x W x 3`` float32 chromaticity ``I / sum(I)``.
        surface: ``H x W`` bool, pixels that belong to a surface (not sky).

    Returns:
        ``H x W`` float32 log albedo luminance up to an additive constant.
    """
    gx = np.zeros_like(log_lum)
    gy = np.zeros_like(log_lum)
    gx[:, :-1] = log_lum[:, 1:] - log_lum[:, :-1]
    gy[:-1, :] = log_lum[1:, :] - log_lum[:-1, :]
    cx = np.zeros_like(log_lum)
    cy = np.zeros_like(log_lum)
    cx[:, :-1] = _csum(np.abs(chroma[:, 1:] - chroma[:, :-1]))
    cy[:-1, :] = _csum(np.abs(chroma[1:, :] - chroma[:-1, :]))
    keep_x = (cx > chroma_edge) | (np.abs(gx) > luma_edge)
    keep_y = (cy > chroma_edge) | (np.abs(gy) > luma_edge)
    sx = np.zeros_like(surface)
    sy = np.zeros_like(surface)
    sx[:, :-1] = surface[:, 1:] & surface[:, :-1]
    sy[:-1, :] = surface[1:, :] & surface[:-1, :]
    return integrate_gradients(np.where(keep_x & sx, gx, 0).astype(np.float32),
                               np.where(keep_y & sy, gy, 0).astype(np.float32))


def highlight_mask(rgb: np.ndarray, surface: np.ndarray, ratio: float = 1.6, desat: float = 0.6,
                   radius: int = 7) -> np.ndarray:
    """Specular highlights by the dichromatic reflection model (Shafer 1985): the
    specular term adds the light's (near-white) colour, so a highlight is brighter than
    its surroundings and less saturated than the diffuse colour around it.

    Args:
        rgb: ``H x W x 3`` float32 scene-linear.
        surface: ``H x W`` bool.
        ratio: luminance over the local median (``(2 radius + 1)^2`` window) that counts.
        desat: saturation below this share of the local median saturation counts.

    Returns:
        ``H x W`` bool.
    """
    lum = rgb @ _LUMA
    mx, mn = rgb.max(-1), rgb.min(-1)
    sat = (mx - mn) / np.maximum(mx, _EPS)
    k = 2 * radius + 1
    small = lambda a: cv2.medianBlur(np.ascontiguousarray(a, np.float32), 5)
    loc_l = cv2.blur(small(lum), (k, k))
    loc_s = cv2.blur(small(sat), (k, k))
    return surface & (lum > ratio * loc_l) & (sat < desat * loc_s)


def _fill_chroma(rgb: np.ndarray, bad: np.ndarray, sigma: float = 6.0) -> np.ndarray:
    """``rgb`` with the chromaticity of ``bad`` pixels replaced by the Gaussian-weighted
    chromaticity of good neighbours (normalised convolution), luminance kept."""
    if not bad.any():
        return rgb
    lum = rgb @ _LUMA
    chroma = rgb / np.maximum(lum, _EPS)[..., None]
    good = (~bad).astype(np.float32)
    num = cv2.GaussianBlur(chroma * good[..., None], (0, 0), sigma)
    den = cv2.GaussianBlur(good, (0, 0), sigma)[..., None]
    filled = np.where(den > 1e-3, num / np.maximum(den, 1e-3), chroma)
    filled /= np.maximum(filled @ _LUMA, _EPS)[..., None]
    out = rgb.copy()
    out[bad] = (filled * lum[..., None])[bad]
    return out


def guided_filter(guide: np.ndarray, src: np.ndarray, radius: int, eps: float) -> np.ndarray:
    """Guided filter (He, Sun & Tang, "Guided Image Filtering", ECCV 2010 / TPAMI 2013)
    with a single-channel guide, by box filters.

    Args:
        guide, src: ``H x W`` float32.
        radius: box radius in pixels (window ``2 radius + 1``).
        eps: regularisation (in the guide's units squared); larger = smoother.

    Returns:
        ``H x W`` float32, edge-preserving smoothing of ``src`` along ``guide``'s edges.
    """
    k = (2 * radius + 1, 2 * radius + 1)
    box = lambda a: cv2.boxFilter(a, cv2.CV_32F, k, borderType=cv2.BORDER_REFLECT)
    g = np.ascontiguousarray(guide, np.float32)
    p = np.ascontiguousarray(src, np.float32)
    mg, mp = box(g), box(p)
    var = box(g * g) - mg * mg
    cov = box(g * p) - mg * mp
    a = cov / (var + np.float32(eps))
    b = mp - a * mg
    return box(a) * g + box(b)


@dataclass
class Intrinsics:
    """Result of :func:`decompose_frame`.

    Attributes:
        albedo: ``H x W x 3`` float32 linear Rec.709 in [0, 1].
        shading: ``H x W x 3`` float32 ``rgb / albedo`` (frame units; 0 where undefined).
        sh: ``9 x 3`` float32 SH irradiance coefficients (:func:`sh_basis` order) in the
            frame's linear units per unit albedo after the global scale, or ``None``.
        ok: False when the frame had no usable surface (defaults were returned).
        info: numbers for the manifest / logs (``lit_pixels``, ``scale``, ``method``).
    """

    albedo: np.ndarray
    shading: np.ndarray
    sh: Optional[np.ndarray]
    ok: bool
    info: dict = field(default_factory=dict)


def _fallback(rgb: np.ndarray, reason: str) -> Intrinsics:
    lum = rgb @ _LUMA
    chroma = rgb / np.maximum(lum, _EPS)[..., None]
    grey = np.float32(0.5)
    alb = np.where(lum[..., None] > _EPS, np.clip(chroma * grey, 0, 1), grey).astype(np.float32)
    return Intrinsics(alb, np.zeros_like(rgb), None, False, {"method": "default", "reason": reason})


def _sh_log_shading(rgb, normal, lit, fit_size):
    """``(sh, log_shading or None)`` of the SH step at the working size (see decompose_frame)."""
    h, w = rgb.shape[:2]
    f = min(1.0, fit_size / max(h, w))
    sz = (max(1, round(w * f)), max(1, round(h * f)))
    small = cv2.resize(rgb, sz, interpolation=cv2.INTER_AREA)
    n_s = cv2.resize(np.ascontiguousarray(normal, np.float32), sz, interpolation=cv2.INTER_AREA)
    n_s /= np.maximum(np.linalg.norm(n_s, axis=-1, keepdims=True), 1e-6)
    lum = small @ _LUMA
    m_s = cv2.resize(lit.astype(np.float32), sz, interpolation=cv2.INTER_AREA) > 0.99
    m_s = (m_s & (lum <= np.percentile(lum[m_s], 99.5) if m_s.any() else m_s)).reshape(-1)  # clipped highlights
    sh = fit_sh_irradiance(small.reshape(-1, 3), n_s.reshape(-1, 3), m_s)
    if sh is None:
        return None, None
    # the mean colour of the light is not separable from the mean albedo in one frame:
    # keep the light's colour variation across normals, make its mean grey
    tint = np.maximum(sh_basis(n_s.reshape(-1, 3)[m_s]) @ sh, _EPS).mean(0)
    E = sh_basis(normal) @ (sh * (tint.mean() / np.maximum(tint, _EPS))[None, :])
    floor = np.maximum(np.percentile(E[lit], 50, axis=0) * 0.1, _EPS)
    return sh, np.log(np.maximum(E, floor)).astype(np.float32)


def _retinex_log_shading(refl, rgb, lit, chroma_edge, luma_edge, lum_contrast, radius, eps):
    """Grey log shading of the colour Retinex step at the working size (decompose_frame)."""
    log_l = np.log(np.maximum(refl @ _LUMA, _EPS))
    chroma = rgb / np.maximum(_csum(rgb), _EPS)[..., None]
    log_a = retinex_log_albedo(log_l, chroma, lit, chroma_edge, luma_edge)
    if lum_contrast != 1.0:
        mu = float(np.median(log_a[lit]))
        log_a = mu + np.float32(lum_contrast) * (log_a - mu)
    log_s = log_l - log_a  # the part of log luminance the integrated albedo misses
    med = np.float32(np.median(log_s[lit]))
    if radius > 0:  # shading is smooth: fine texture Retinex lost goes back to the albedo
        r = max(1, int(round(radius * max(log_l.shape))))
        log_s = guided_filter(log_l, np.where(lit, log_s, med), r, eps)
    return np.where(lit, log_s, med).astype(np.float32)


@dataclass(frozen=True)
class IntrinsicOptions:
    """The method's choices and tuning (:func:`decompose_frame`'s keyword options, documented there)."""

    use_sh: bool = False
    fit_lighting: bool = False
    use_retinex: bool = True
    fit_size: int = 192
    work_size: int = WORK_SIZE
    chroma_edge: float = CHROMA_EDGE
    luma_edge: float = LUMA_EDGE
    lum_contrast: float = LUM_CONTRAST
    fix_highlights: bool = False
    shading_radius: float = SHADING_RADIUS
    shading_eps: float = SHADING_EPS


def decompose_frame(rgb: np.ndarray, normal: Optional[np.ndarray], confidence: Optional[np.ndarray] = None,
                    **options) -> Intrinsics:
    """Albedo with the light taken out, for one frame (see the module docstring).

    The shading is estimated at ``work_size`` (long side; area downscale) and upsampled
    (bilinear, in log) to divide the full-size frame.

    Args:
        rgb: ``H x W x 3`` float32 scene-linear Rec.709, >= 0 (NaN/inf treated as 0).
        normal: ``H x W x 3`` unit camera-space OpenGL normals, or ``None`` (no SH step).
        confidence: ``H x W`` in [0, 1]; < 0.5 is sky/background (excluded); ``None`` = all.
        options: the fields of :class:`IntrinsicOptions` (another name is a ``TypeError``):
        use_sh: divide by the SH irradiance (off by default: it costs 0.15-0.4 dB on the
            TUNE seeds with the embedded network's normals, and with exact normals).
        fit_lighting: fit the SH lighting (``Intrinsics.sh``) even when not dividing.
        use_retinex: the colour Retinex step.
        fit_size: long side (pixels) at which the SH lighting is fitted.
        work_size: long side (pixels) at which the shading is estimated.
        chroma_edge, luma_edge: colour Retinex thresholds (:func:`retinex_log_albedo`).
        lum_contrast: :data:`LUM_CONTRAST`.
        fix_highlights: replace the chromaticity of :func:`highlight_mask` pixels by their
            neighbours' (no measurable effect on the TUNE seeds; off).
        shading_radius, shading_eps: :data:`SHADING_RADIUS`, :data:`SHADING_EPS`.

    Returns:
        :class:`Intrinsics`; never NaN. ``ok = False`` (source chroma at albedo 0.5) when
        fewer than :data:`MIN_PIXELS` surface pixels are lit.

    Raises:
        ValueError: shapes do not match.
    """
    o = IntrinsicOptions(**options)
    rgb = np.maximum(np.nan_to_num(np.asarray(rgb, np.float32), nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an H x W x 3 frame, got {rgb.shape}")
    if normal is not None and normal.shape != rgb.shape:
        raise ValueError(f"normal {normal.shape} does not match the frame {rgb.shape}")
    h, w = rgb.shape[:2]
    surface = np.ones((h, w), bool) if confidence is None else np.asarray(confidence) >= 0.5
    lum = rgb @ _LUMA
    lit = surface & (lum > 1e-3)
    if int(lit.sum()) < MIN_PIXELS:
        return _fallback(rgb, "no lit surface")
    info = {"lit_pixels": int(lit.sum()), "method": []}
    if o.fix_highlights:
        hl = highlight_mask(rgb, surface)
        rgb = _fill_chroma(rgb, hl)
        info["highlight_fraction"] = float(hl.mean())
    f = min(1.0, o.work_size / max(h, w))
    sz = (max(1, round(w * f)), max(1, round(h * f)))
    small = cv2.resize(rgb, sz, interpolation=cv2.INTER_AREA) if f < 1 else rgb
    lit_s = cv2.resize(lit.astype(np.float32), sz, interpolation=cv2.INTER_AREA) > 0.5 if f < 1 else lit
    if int(lit_s.sum()) < MIN_PIXELS:
        return _fallback(rgb, "no lit surface")
    log_s = np.zeros(small.shape, np.float32)
    sh = None
    if normal is not None and (o.use_sh or o.fit_lighting):
        n_s = cv2.resize(np.ascontiguousarray(normal, np.float32), sz, interpolation=cv2.INTER_AREA) if f < 1 \
            else normal
        sh, log_sh = _sh_log_shading(small, n_s / np.maximum(np.linalg.norm(n_s, axis=-1, keepdims=True), 1e-6),
                                     lit_s, o.fit_size)
        if log_sh is not None and o.use_sh:
            log_s += log_sh
            info["method"].append("sh2")
    if o.use_retinex:
        log_s += _retinex_log_shading(small / np.exp(log_s), small, lit_s, o.chroma_edge, o.luma_edge,
                                      o.lum_contrast, o.shading_radius, o.shading_eps)[..., None]
        info["method"].append("colour-retinex")
    if f < 1:
        log_s = cv2.resize(log_s, (w, h), interpolation=cv2.INTER_LINEAR)
    shading = np.exp(np.clip(log_s, -20, 20))
    refl = rgb / shading
    scale = ALBEDO_MEDIAN / max(float(np.median(_cmax(refl)[lit])), 1e-8)
    albedo = refl * np.float32(scale)  # finite: rgb is, and shading >= exp(-20)
    albedo /= np.maximum(_cmax(albedo), 1.0)[..., None]  # into [0, 1] keeping the hue
    info.update(scale=scale, method="+".join(info["method"]) or "none")
    sh_out = None if sh is None else (sh / scale).astype(np.float32)
    return Intrinsics(albedo, (shading / scale).astype(np.float32), sh_out, True, info)
