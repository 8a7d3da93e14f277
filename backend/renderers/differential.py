"""Differential re-rendering: material edits act through their difference on the plate.

The plate is the footage (the G-buffer's ``Combined``). An edit of the passes changes
the plate only by what the edit changes in a render (Debevec, "Rendering Synthetic
Objects into Real Scenes", SIGGRAPH 1998: ``out = plate + render(edited) -
render(original)``), so every error of the estimated passes cancels wherever nothing
was edited, and a frame with no edits is the footage itself.

Per edited pixel (``d = albedo (1 - metallic)``, the diffuse colour; ``S(n)`` the plate's
shading, :class:`PlateLighting`; ``Spec`` the environment specular under the same
lighting plus screen-space reflections of the frame itself)::

    plate_diffuse = plate - min(Spec(original), SPEC_SHARE_MAX plate)
    out = plate
        + plate_diffuse (d_edit / d_orig - 1)          albedo / metallic: a ratio
        + d_edit (S(n_edit) - S(n_orig))                normal: the irradiance difference
        + Spec(edited) - Spec(original)                 roughness / metallic / normal
    (where d_orig < ALBEDO_FLOOR the ratio term is d_edit S(n) - d_orig S(n))

Pixels the edit did not touch are returned bit-exact. What is *not* modelled (and would
physically change): a glossy unedited neighbour reflecting the edited surface, shadows
or inter-reflections the edit casts on unedited pixels.

The plate's lighting, :class:`PlateLighting`, is estimated once per shot: an order-2
spherical-harmonic fit (Ramamoorthi & Hanrahan, "An Efficient Representation for
Irradiance Environment Maps", SIGGRAPH 2001) of the plate's shading ``Combined /
Albedo`` as a function of the normal, over surface pixels of a few frames. It is
exported as ``plate_lighting.json`` (coefficients) and an equirectangular radiance map
(:meth:`PlateLighting.equirect`) the add-on turns into a Blender World.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..contract import GBufferFrame, surface_mask
from . import shading as sh

F32 = np.float32
#: below this diffuse colour (per channel) an albedo ratio is not trusted: difference form
ALBEDO_FLOOR = 0.02
#: the plate's shading is fitted on at most about this many pixels per frame
FIT_SAMPLES = 20000
#: the plate's specular part estimated from the original passes is taken as at most this
#: share of the plate: estimated passes come from an intrinsic model (``I = A S``) that
#: puts nearly all of the plate in the diffuse, and a specular term from an estimated
#: roughness under a 9-coefficient environment is not trusted further (dolphins.mp4: up to
#: a third of a dark body, so an albedo x0.5 left 0.66 of the footage)
SPEC_SHARE_MAX = 0.25
#: frames of a shot the lighting is estimated from (evenly spaced)
FIT_FRAMES = 5
#: weight of the smoothness prior per sample (the basis functions are O(0.3-1))
FIT_RIDGE = 0.003
#: cosine-lobe convolution per SH band (Ramamoorthi & Hanrahan 2001): E_lm = A_l L_lm
SH_BAND_A = (math.pi, 2.0 * math.pi / 3.0, math.pi / 4.0)
#: smoothing of band 2 when the radiance is recovered from irradiance (Sloan's Hanning
#: window, "Stupid SH tricks" 2008): deconvolution multiplies band 2 by 4 and rings
SH_WINDOW = (1.0, 0.85, 0.5)
PASSES_COMPARED = ("albedo", "normal", "roughness", "metallic")


def sh_basis(n: np.ndarray) -> np.ndarray:
    """The 9 real SH basis functions (bands 0-2) of unit directions ``n`` (3 x ...),
    camera space -> 9 x ... float32 (Ramamoorthi & Hanrahan 2001's order and constants)."""
    x, y, z = (np.asarray(c, dtype=F32) for c in n)
    return np.stack([np.full_like(x, 0.282095), F32(0.488603) * y, F32(0.488603) * z, F32(0.488603) * x,
                     F32(1.092548) * x * y, F32(1.092548) * y * z, F32(0.315392) * (F32(3.0) * z * z - F32(1.0)),
                     F32(1.092548) * x * z, F32(0.546274) * (x * x - y * y)])


def _band(i: int) -> int:
    return 0 if i == 0 else (1 if i < 4 else 2)


@dataclass
class PlateLighting:
    """The plate's lighting as SH coefficients of its shading (camera space, OpenGL).

    Attributes:
        shading_sh: 9 x 3 float, coefficients of ``S(n) = Combined / Albedo`` (the
            cosine-convolved irradiance over pi: a white Lambert surface with normal
            ``n`` shows ``S(n)``), scene-linear Rec.709.
        frames: the frame numbers it was fitted on.
        samples: pixels used; ``rms``: RMS residual of the fit (shading units).
    """

    shading_sh: np.ndarray
    frames: List[int] = field(default_factory=list)
    samples: int = 0
    rms: float = 0.0

    def shading(self, normal: np.ndarray) -> np.ndarray:
        """``S(n)``, 3 x H x W float32 (>= 0) for unit normals ``normal`` (3 x H x W)."""
        b = sh_basis(normal)
        c = np.asarray(self.shading_sh, dtype=F32)
        out = np.tensordot(c.T, b, axes=1).astype(F32)
        return np.maximum(out, F32(0.0))

    def radiance_sh(self) -> np.ndarray:
        """9 x 3 SH coefficients of the radiance ``L(w)`` (deconvolved: ``L = pi S_lm /
        A_l``, band 2 windowed by :data:`SH_WINDOW`)."""
        k = np.array([math.pi / SH_BAND_A[_band(i)] * SH_WINDOW[_band(i)] for i in range(9)])
        return np.asarray(self.shading_sh, dtype=np.float64) * k[:, None]

    def radiance(self, direction: np.ndarray) -> np.ndarray:
        """Radiance arriving from unit ``direction`` (3 x ...), 3 x ... float32, >= 0."""
        b = sh_basis(direction)
        out = np.tensordot(self.radiance_sh().T.astype(F32), b, axes=1).astype(F32)
        return np.maximum(out, F32(0.0))

    def equirect(self, width: int = 256) -> np.ndarray:
        """Radiance as an equirectangular map in Blender's world (``H x W x 3`` float32,
        ``H = width // 2``, scene-linear). Blender world axes from camera space: the
        camera looks along world +Y, world +Z is camera +Y (up): ``(x, y, z)_world =
        (x_c, -z_c, y_c)``. Column ``u`` is Blender's equirect longitude (``-pi`` at the
        left edge, world -X at the centre... as Blender's Environment Texture maps it:
        ``u = atan2(dir.y, -dir.x) / 2 pi + 0.5``), row 0 the zenith."""
        h = max(2, width // 2)
        u = (np.arange(width) + 0.5) / width
        v = (np.arange(h) + 0.5) / h
        phi = (u - 0.5) * 2.0 * math.pi
        theta = v * math.pi
        st = np.sin(theta)[:, None]
        wx = -np.cos(phi)[None, :] * st
        wy = np.sin(phi)[None, :] * st
        wz = np.cos(theta)[:, None] * np.ones((1, width))
        cam = np.stack([wx, wz, -wy]).astype(F32)  # world -> camera: (x, z_w, -y_w)
        return sh.hwc(self.radiance(cam))

    def to_json(self) -> Dict[str, object]:
        return {"format": "gbuffer-plate-lighting-1",
                "space": "camera (OpenGL: +X right, +Y up, +Z toward the camera)",
                "shading_sh": [[round(float(v), 7) for v in row] for row in np.asarray(self.shading_sh)],
                "radiance_sh": [[round(float(v), 7) for v in row] for row in self.radiance_sh()],
                "sh_order": "Y00, Y1-1(y), Y10(z), Y11(x), Y2-2(xy), Y2-1(yz), Y20, Y21(xz), Y22",
                "frames": list(self.frames), "samples": int(self.samples), "rms": round(float(self.rms), 6)}

    @classmethod
    def from_json(cls, doc: Dict[str, object]) -> "PlateLighting":
        """Inverse of :meth:`to_json`. Raises ValueError for a malformed document."""
        c = np.asarray(doc.get("shading_sh"), dtype=np.float64)
        if c.shape != (9, 3) or not np.all(np.isfinite(c)):
            raise ValueError("plate lighting: shading_sh must be 9 x 3 finite numbers")
        return cls(c, [int(x) for x in doc.get("frames", [])], int(doc.get("samples", 0)),
                   float(doc.get("rms", 0.0)))

    def write(self, folder, width: int = 256) -> Tuple[str, str]:
        """Write ``plate_lighting.json`` and ``plate_lighting.exr`` (equirect radiance,
        RGB float32) into ``folder`` atomically; returns their paths."""
        from pathlib import Path

        from ..contract import atomic_path
        from ..jobs.writers import write_bytes_atomic, write_rgba_exr

        folder = Path(folder)
        js = folder / "plate_lighting.json"
        exr = folder / "plate_lighting.exr"
        write_bytes_atomic(js, (json.dumps(self.to_json(), indent=1) + "\n").encode())
        # a unique temporary name (contract.atomic_path): farm chunks of one shot write it at once
        with atomic_path(exr) as tmp:
            write_rgba_exr(tmp, self.equirect(width), None, {})
        return str(js), str(exr)


def straight(comb: np.ndarray) -> np.ndarray:
    """Combined (premultiplied) -> straight RGB, 3 x H x W float32."""
    if comb.shape[2] == 4 and float(comb[..., 3].min()) < 1.0:
        a = comb[..., 3:4]
        return sh.chw(np.where(a > 1e-4, comb[..., :3] / np.maximum(a, F32(1e-4)), F32(0.0)))
    return sh.chw(comb[..., :3])


def estimate_plate_lighting(frames: Sequence[GBufferFrame], numbers: Sequence[int] = ()) -> PlateLighting:
    """Fit :class:`PlateLighting` to the shading of ``frames`` (the *unedited* passes).

    Least squares with a small ridge (the back hemisphere is never seen), one
    reweighting pass dropping the worst 10 % of residuals (cast shadows, specular
    highlights). Pixels used: surfaces (Confidence), albedo luminance >= 0.03, the
    plate below 0.95 in every channel (not clipped), on a regular grid of about
    :data:`FIT_SAMPLES` per frame. A shot with no usable pixel gets a uniform white
    shading of the plate's mean level.
    """
    rows, vals = [], []
    for f in frames:
        h, w = f.shape
        step = max(1, int(math.sqrt(h * w / FIT_SAMPLES)))
        src = straight(f.combined)[:, ::step, ::step]
        alb = np.clip(sh.chw(f.albedo)[:, ::step, ::step], 0.0, 1.0)
        n = sh.chw(f.normal)[:, ::step, ::step]
        ok = surface_mask(f)[::step, ::step] & (sh.luminance(alb) >= 0.03) & (src.max(0) < 0.95)
        ok &= np.all(np.isfinite(n), axis=0)
        if not ok.any():
            continue
        s = src[:, ok] / np.maximum(alb[:, ok], F32(ALBEDO_FLOOR))
        rows.append(sh_basis(n[:, ok]).T.astype(np.float64))
        vals.append(np.clip(s, 0.0, 8.0).T.astype(np.float64))
    if not rows:
        level = float(np.mean([straight(f.combined).mean() for f in frames])) if frames else 0.5
        c = np.zeros((9, 3))
        c[0] = level / 0.282095
        return PlateLighting(c, list(numbers), 0, 0.0)
    a = np.concatenate(rows)
    b = np.concatenate(vals)
    wgt = np.ones(len(a))
    for _ in range(2):
        aw = a * wgt[:, None]
        ata = aw.T @ a
        # smoothness prior (Tikhonov, l^2 (l + 1)^2 per band, the DC term free): the
        # footage sees only normals facing the camera, so the back hemisphere and the
        # higher bands are otherwise free to ring (a fit without it swung from -9 to +9)
        lam = FIT_RIDGE * float(wgt.sum())
        pen = np.diag([0.0] + [4.0] * 3 + [36.0] * 5)
        c = np.linalg.solve(ata + lam * pen, aw.T @ b)
        res = np.abs(a @ c - b).mean(1)
        wgt = (res <= np.quantile(res, 0.9)).astype(np.float64)
    rms = float(np.sqrt(np.mean((a @ c - b)[wgt > 0] ** 2)))
    return PlateLighting(c, list(numbers), int(len(a)), rms)


def edited_mask(frame: GBufferFrame, reference: GBufferFrame) -> np.ndarray:
    """``H x W`` bool: pixels where any of albedo, normal, roughness, metallic differs
    between the (edited) ``frame`` and the unedited ``reference`` by more than half-float
    rounding (1e-3 relative)."""
    m = np.zeros(frame.shape, bool)
    for name in PASSES_COMPARED:
        a = np.asarray(getattr(frame, name), dtype=F32)
        b = np.asarray(getattr(reference, name), dtype=F32)
        d = np.abs(a - b) > F32(1e-3) * np.maximum(np.abs(b), F32(1.0))
        m |= d.any(-1) if d.ndim == 3 else d
    return m


def differential_plate(frame: GBufferFrame, reference: Optional[GBufferFrame], lighting,
                       view: np.ndarray, ssr) -> Tuple[np.ndarray, np.ndarray]:
    """The edited plate (module docstring), 3 x H x W float32 >= 0, and the edited mask.

    Args:
        frame: the edited G-buffer frame (its Combined is the plate).
        reference: the unedited frame (``None``: nothing is known to be edited, the plate
            is returned as it is).
        lighting: the shot's :class:`PlateLighting`, or a function returning it (called
            only when something was edited).
        view: 3 x H x W unit vectors surface -> camera (:func:`.shading.camera_rays`).
        ssr: ``roughness H x W -> (colour 3 x H x W, weight H x W, n.v H x W) or None``,
            the screen-space reflection of the plate (``EmbeddedRenderer``'s), or ``None``.
    """
    plate = straight(frame.combined)
    if reference is None:
        return plate, np.zeros(frame.shape, bool)
    mask = edited_mask(frame, reference)
    if not mask.any():
        return plate, mask
    if callable(lighting):  # estimated only when something was edited
        lighting = lighting()
    sel = (slice(None), mask)  # everything but the reflections is per pixel: edited pixels only
    p = plate[sel]
    specs, shades = [], []
    for f in (reference, frame):
        a = np.clip(np.asarray(f.albedo, dtype=F32)[mask].T, 0.0, 1.0)
        m = np.clip(np.asarray(f.metallic, dtype=F32)[mask], 0.0, 1.0)
        specs.append(_specular_at(lighting, f, view, ssr, mask))
        shades.append((a * (F32(1.0) - m), lighting.shading(np.asarray(f.normal, dtype=F32)[mask].T)))
    (d_o, s_o), (d_e, s_e) = shades
    p_diff = p - np.minimum(specs[0], F32(SPEC_SHARE_MAX) * p)
    ok = d_o >= F32(ALBEDO_FLOOR)
    ratio = np.where(ok, p_diff * (d_e / np.maximum(d_o, F32(ALBEDO_FLOOR)) - F32(1.0)), (d_e - d_o) * s_o)
    delta = ratio + d_e * (s_e - s_o) + (specs[1] - specs[0])
    out = plate.copy()
    out[sel] = np.maximum(p + delta, F32(0.0))
    return out, mask


def _specular_at(lighting: PlateLighting, f: GBufferFrame, view: np.ndarray, ssr, mask) -> np.ndarray:
    """Environment specular of frame ``f``'s passes at the ``mask`` pixels (3 x N) under
    the plate's lighting: GGX split-sum (:func:`.shading.env_specular`) of the SH radiance
    in the mirror direction, widened toward the cosine-convolved shading with roughness;
    where ``ssr(roughness H x W)`` finds the frame itself in the mirror direction (traced
    over the whole frame: rays land anywhere), that reflection replaces it."""
    a = np.clip(np.asarray(f.albedo, dtype=F32)[mask].T, 0.0, 1.0)
    n = np.asarray(f.normal, dtype=F32)[mask].T
    r = np.clip(np.asarray(f.roughness, dtype=F32)[mask], 0.0, 1.0)
    m = np.clip(np.asarray(f.metallic, dtype=F32)[mask], 0.0, 1.0)
    v = view[:, mask]
    n_dot_v = np.maximum((n * v).sum(0), F32(1e-4))
    refl = F32(2.0) * n_dot_v * n - v
    env = lighting.radiance(refl)
    env = env + (lighting.shading(refl) - env) * r
    hit = ssr(np.clip(np.asarray(f.roughness, dtype=F32), 0.0, 1.0)) if ssr is not None else None
    if hit is not None:
        col, wgt, nv_depth = hit
        w = wgt[mask]
        env = env + (col[:, mask] - env) * w
        n_dot_v = n_dot_v + (nv_depth[mask] - n_dot_v) * w
    f0 = F32(0.04) + (a - F32(0.04)) * m
    return sh.env_specular(f0, n_dot_v, r, env, metallic=m)
