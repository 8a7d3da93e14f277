"""Blender's own lights added to the plate: the direct light of point, spot, area and
sun lights on the frame's (edited) passes, with shadows traced in the depth buffer.

:func:`light_contribution` is what the renderer adds to the plate (the footage keeps
its own light; a light with negative power takes light away). The lights come from a
lights file (:mod:`backend.renderers.light_rig`, ``docs/lights.md``).

Units, as Cycles (checked against Cycles renders, ``docs/lights.md``): a point or spot
light of ``P`` W has radiant intensity ``P / (4 pi)`` W/sr (a spot masks that by its
cone, the smoothstep blend of Cycles' ``spot_light_attenuation``); an area light of
``P`` W is a one-sided Lambertian emitter, ``P / pi`` W/sr along its axis times the
cosine; a sun of ``S`` W/m^2 gives irradiance ``S`` on a surface facing it.

The BSDF is the renderer's (:mod:`backend.renderers.shading`): Lambert diffuse
``albedo (1 - metallic) / pi`` scaled by ``1 - E_spec`` (the dielectric layer's
directional albedo, as Cycles' Principled BSDF layers its diffuse under the coat of
specular), plus GGX specular (Smith height-correlated, Schlick Fresnel, ``F0 =
mix(0.04, albedo, metallic)``, ``alpha = roughness^2``) with a multiple-scattering
energy compensation (Fdez-Aguera 2019), as Cycles' multiscatter GGX.

Approximations (stated in ``docs/lights.md``): an area light is a grid of point
emitters over its shape sharing one soft shadow (2 x 2 shadow rays); point radius and
sun angle do not soften shadows, they only widen the specular lobe (:func:`_widened`);
shadows come from the depth buffer only (what the camera does not see casts no shadow,
see :func:`shadow_visibility`); the added light's indirect light is one screen-space
bounce (:func:`glossy_bounce`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import contract
from . import shading as sh
from .light_rig import LightRig, LightState, frame_camera

F32 = np.float32
#: screen-space shadow march: samples per ray
SHADOW_STEPS = 48
#: an occluder is assumed this thick, as a fraction of its depth (the depth buffer only
#: knows front faces)
SHADOW_THICKNESS = 0.08
#: ... or, when larger, this many times the occluder's width at that pixel: twice the
#: distance to the nearest depth edge, in metres (a sphere or a box seen face on is about
#: as deep as it is wide; see occluder_thickness)
SHADOW_WIDTH_FACTOR = 3.0
#: a depth edge: the second difference of inverse depth above this fraction of it (zero
#: on any plane, large across a silhouette)
EDGE_CURVATURE = 0.02
#: ... and the depth jumps by more than this fraction between neighbours (0: creases count)
EDGE_JUMP = 0.05
#: shadow samples along the on-screen part of the ray at (i / steps) ** this (1: even)
SHADOW_STEP_POWER = 2.0
#: march only the part of the ray that lies on screen
SHADOW_CLIP_TO_FRAME = True
#: a sample must be behind the depth buffer by more than this fraction of its depth
SHADOW_BIAS = 0.01
#: area lights: emitter grid per side (n x n point emitters over the shape)
AREA_GRID = 3
#: area lights: shadow rays per side (n x n points over the shape, averaged: soft shadows)
AREA_SHADOW_GRID = 2
#: ... each with this many march steps (four rays: half the steps of a single one each)
AREA_SHADOW_STEPS = 24
#: the shadow filter's window, as a fraction of the frame's short side (3 px at least)
SHADOW_FILTER_FRACTION = 0.015
#: ... and at least this many pixels (odd)
SHADOW_FILTER_MIN = 3
#: specular lobes widen by this times the tangent of the emitter's angular radius (_widened)
LOBE_WIDEN = 0.5
#: occluder weight from Confidence: an occluder casts no shadow at or below CONF_LO, a full
#: one at or above CONF_HI (linear in between); chosen on phone_office.mp4 (embedded
#: estimator: its window corner's wrong near depth has Confidence ~0.7, the objects 0.9+)
CONF_LO, CONF_HI = 0.75, 0.95
#: the edge-aware visibility filter (guided by the frame, He et al. 2010): radius as a
#: fraction of the frame's short side (2 px at least) and eps on the guide (sRGB-like luma)
GUIDED_FRACTION, GUIDED_EPS = 0.02, 0.004
#: roughness is clamped to at least this (a perfect mirror has no finite highlight)
MIN_ROUGHNESS = 0.03
#: the mirror ray's ground fallback ramps in as the reflected direction goes below the
#: horizon (-r.up from BELOW_LO to BELOW_HI)
BELOW_LO, BELOW_HI = -0.1, 0.2
#: the glossy bounce fades out from roughness 0 to this
GLOSSY_MAX_ROUGHNESS = 1.0
#: the bounce's reflections only hit surfaces that face the ray
SSR_FACING = True
#: the bounce is computed on a grid whose long side is at most this (see _bounce_at_scale)
BOUNCE_MAX_SIDE = 320
#: a light's effect is dropped below this irradiance (W/m^2) everywhere
EPS = 1e-12


def _emitters(st: LightState, p: np.ndarray, grid: int) -> List[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]]:
    """``(l, E, target)`` per emitter: unit directions toward the light (3 x N), the
    irradiance at normal incidence per unit colour (N), and the emitter position (3,)
    (``None`` for a sun, whose ``l`` is constant)."""
    if st.type == "sun":
        l = np.broadcast_to((-st.direction).astype(F32)[:, None], p.shape)
        return [(l, np.full(p.shape[1], st.power, F32), None)]
    if st.type in ("point", "spot"):
        pts, per = [st.position], [st.power / (4.0 * math.pi)]
    else:
        pts, per = _area_points(st, grid), None
        per = [st.power / (math.pi * len(pts))] * len(pts)
    out = []
    for q, intensity in zip(pts, per):
        d = q.astype(F32)[:, None] - p
        d2 = np.maximum((d * d).sum(0), F32(max(st.radius, 1e-4) ** 2))
        inv = F32(1.0) / np.sqrt(d2)
        l = d * inv
        e = F32(intensity) / d2
        if st.type == "spot":
            e = e * _spot_attenuation(st, l)
        elif st.type == "area":  # Lambertian emitter: cosine at the light
            e = e * np.maximum(-(l * st.direction.astype(F32)[:, None]).sum(0), F32(0.0))
        out.append((l, e.astype(F32), q))
    return out


def _widened(alpha: np.ndarray, st: LightState, p: np.ndarray, target: Optional[np.ndarray],
             grid: int) -> np.ndarray:
    """GGX ``alpha`` widened by the angle an emitter subtends (Karis 2013's sphere-light
    trick): ``min(1, alpha + LOBE_WIDEN x tan(half angle))``, the half angle being the
    point light's radius, an area light's grid cell (half its side / ``grid``) or half
    the sun's disc, over the distance. A mirror then shows a light's extent, not a dot
    (nor an area light's grid of dots). N float32."""
    if LOBE_WIDEN <= 0:
        return alpha
    if st.type == "sun":
        t = math.tan(0.5 * st.angle)
        return np.minimum(alpha + F32(LOBE_WIDEN * t), F32(1.0)) if t > 0 else alpha
    r = st.radius if st.type in ("point", "spot") else 0.5 * max(st.size, st.size_y) / grid
    if r <= 0 or target is None:
        return alpha
    d = target.astype(F32)[:, None] - p
    dist = np.sqrt(np.maximum((d * d).sum(0), F32(1e-8)))
    return np.minimum(alpha + F32(LOBE_WIDEN * r) / dist, F32(1.0))


def _spot_attenuation(st: LightState, l: np.ndarray) -> np.ndarray:
    """Cycles' ``spot_light_attenuation``: ``smoothstep((cos - cos_half) / ((1 - cos_half)
    blend))`` of the angle between the spot axis and the direction to the point."""
    cos_a = -(l * st.direction.astype(F32)[:, None]).sum(0)
    cos_half = math.cos(st.spot_size * 0.5)
    if st.spot_blend <= 0:
        return (cos_a > cos_half).astype(F32)
    x = np.clip((cos_a - F32(cos_half)) * F32(1.0 / ((1.0 - cos_half) * st.spot_blend)), 0.0, 1.0)
    return (x * x * (F32(3.0) - F32(2.0) * x)).astype(F32)


def _area_points(st: LightState, grid: int) -> List[np.ndarray]:
    """``grid x grid`` emitter positions spread evenly over the area light's shape
    (stratified cell centres; disk and ellipse by Shirley's concentric mapping)."""
    v_axis = np.cross(-st.direction, st.axis_u)
    c = (np.arange(grid) + 0.5) / grid * 2.0 - 1.0  # cell centres in [-1, 1]
    pts = []
    for a in c:
        for b in c:
            if st.shape in ("disk", "ellipse"):
                if abs(a) > abs(b):
                    r, phi = a, math.pi / 4 * (b / a)
                else:
                    r, phi = b, math.pi / 2 - math.pi / 4 * (a / b) if b != 0 else 0.0
                a2, b2 = r * math.cos(phi), r * math.sin(phi)
            else:
                a2, b2 = a, b
            pts.append(st.position + st.axis_u * (0.5 * st.size * a2) + v_axis * (0.5 * st.size_y * b2))
    return pts


#: directional albedo of the Principled BSDF's dielectric specular layer (IOR 1.5), the
#: share of light it reflects at a view cosine MU and ROUGHNESS; the diffuse underneath
#: keeps 1 - E. Measured in Cycles (bpy 5.0.1: a Principled plane, base colour black,
#: under a uniform white world; benchmarks/lights_calibration.py, "coat albedo").
COAT_MU = (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0)
COAT_ROUGHNESS = (0.0, 0.1, 0.25, 0.4, 0.6, 0.8, 1.0)
COAT_E = (
    (0.7525, 0.5719, 0.339, 0.165, 0.0892, 0.0509, 0.042, 0.04),
    (0.7131, 0.5619, 0.3376, 0.1652, 0.0894, 0.051, 0.042, 0.04),
    (0.4454, 0.3947, 0.2842, 0.156, 0.0886, 0.0515, 0.0422, 0.0399),
    (0.2685, 0.2369, 0.1834, 0.1206, 0.0785, 0.0501, 0.0415, 0.0389),
    (0.1486, 0.1301, 0.1025, 0.0742, 0.056, 0.0418, 0.0364, 0.0341),
    (0.0958, 0.0828, 0.0642, 0.0478, 0.0375, 0.0294, 0.026, 0.024),
    (0.0705, 0.0592, 0.0444, 0.0318, 0.0244, 0.0184, 0.0157, 0.0138),
)


def coat_albedo(mu: np.ndarray, rough: np.ndarray) -> np.ndarray:
    """:data:`COAT_E` interpolated bilinearly at view cosines ``mu`` and ``rough``
    (same shape, float32; clamped to the table's range)."""
    rows = np.stack([np.interp(mu, COAT_MU, r) for r in COAT_E]).astype(F32)  # R x N
    grid = np.asarray(COAT_ROUGHNESS, F32)
    r = np.clip(rough, 0.0, 1.0)
    i = np.clip(np.searchsorted(grid, r, side="right") - 1, 0, len(grid) - 2)
    t = ((r - grid[i]) / (grid[i + 1] - grid[i])).astype(F32)
    cols = np.arange(r.size)
    return rows[i, cols] * (F32(1.0) - t) + rows[i + 1, cols] * t


def _bsdf_terms(nv, albedo, f0, rough, metal) -> Tuple[np.ndarray, np.ndarray]:
    """The light-independent parts of :func:`_bsdf`, once per frame (3 x N each):
    ``kd`` = Lambert ``albedo (1 - metallic) (1 - E_spec) / pi`` (the Principled BSDF's
    diffuse under its dielectric coat, ``E_spec`` = the coat's directional albedo
    measured in Cycles, :func:`coat_albedo`) and
    ``ms`` = the multiple-scattering compensation ``1 + F0 (1 / E_ss - 1)``
    (Fdez-Aguera 2019; ``E_ss = A + B`` of the split-sum fit)."""
    e_ss = sh.env_brdf_karis(np.ones((1, 1), F32), nv, rough)
    ms = F32(1.0) + f0 * (F32(1.0) / np.maximum(e_ss, F32(0.05)) - F32(1.0))
    e_spec = coat_albedo(nv, rough)
    kd = albedo * ((F32(1.0) - metal) * (F32(1.0) - e_spec) * F32(1.0 / math.pi))
    return kd, ms


def _bsdf(n, v, nv, l, f0, alpha, kd, ms) -> np.ndarray:
    """Radiance per unit irradiance at normal incidence (3 x N): ``f(l, v) * max(n.l, 0)``
    (``kd``, ``ms`` from :func:`_bsdf_terms`)."""
    nl = np.maximum((n * l).sum(0), F32(0.0))
    h = l + v
    h = h / np.maximum(np.sqrt((h * h).sum(0)), F32(1e-6))
    nh = np.clip((n * h).sum(0), 0.0, 1.0)
    vh = np.clip((v * h).sum(0), 0.0, 1.0)
    spec = sh.schlick_fresnel(f0, vh) * (sh.ggx_d(nh, alpha) * sh.smith_vis(nl, nv, alpha) * nl)
    return kd * nl + spec * ms


def occluder_thickness(depth: np.ndarray, sky: np.ndarray, fx: float,
                       factor: Optional[float] = None) -> np.ndarray:
    """How deep the surface at each pixel is assumed to be behind its front face (H x W
    float32, the depth's units): ``factor`` x the distance to the nearest depth edge (a
    silhouette or the sky), in pixels converted to metres at that depth (``depth / fx``).

    The depth buffer only holds front faces; an object seen face on is taken to be about
    as deep as it is wide, so a sun behind a box casts the box's shadow toward the camera
    (a fixed thickness lets such rays pass behind the box). Edges: the second difference
    of ``1 / depth`` (linear in screen space on any plane) above :data:`EDGE_CURVATURE`
    of it, along rows or columns, and sky pixels.
    """
    import cv2

    factor = SHADOW_WIDTH_FACTOR if factor is None else factor
    d = np.where(sky, np.inf, depth).astype(F32)
    inv = np.where(sky, F32(0.0), F32(1.0) / np.maximum(d, F32(1e-6)))
    edge = sky.copy()
    dd = np.where(sky, F32(0.0), d)
    for ax in (0, 1):
        c = np.abs(np.diff(inv, 2, axis=ax))
        mid = inv[1:-1] if ax == 0 else inv[:, 1:-1]
        big = c > F32(EDGE_CURVATURE) * np.maximum(mid, F32(1e-9))
        if EDGE_JUMP > 0:  # a silhouette also jumps in depth; a crease (box on the floor) does not
            a = np.abs(np.diff(dd, axis=ax)) > F32(EDGE_JUMP) * np.minimum(
                dd[:-1] if ax == 0 else dd[:, :-1], dd[1:] if ax == 0 else dd[:, 1:])
            big &= (a[:-1] | a[1:]) if ax == 0 else (a[:, :-1] | a[:, 1:])
        if ax == 0:
            edge[1:-1] |= big
        else:
            edge[:, 1:-1] |= big
    dist = cv2.distanceTransform((~edge).astype(np.uint8), cv2.DIST_L2, 3)
    return (F32(factor) * dist * np.where(sky, F32(0.0), d) / F32(fx)).astype(F32)


def shadow_visibility(depth: np.ndarray, sky: np.ndarray, p: np.ndarray, pix: Tuple[np.ndarray, np.ndarray],
                      k: Tuple[float, float, float, float], target: Optional[np.ndarray],
                      direction: np.ndarray, *, steps: Optional[int] = None,
                      thickness: Optional[float] = None, bias: Optional[float] = None,
                      occluder: Optional[np.ndarray] = None,
                      weight: Optional[np.ndarray] = None) -> np.ndarray:
    """Shadows traced in the depth buffer (a screen-space ray march toward the light).

    From each point ``p`` toward the light (to ``target``, or along ``direction`` for a
    sun, as far as twice the farthest depth), clipped in front of the camera and to the
    part of the segment that is on screen, ``steps`` samples at ``((i + jitter) /
    steps) ** SHADOW_STEP_POWER`` of that part in screen space (denser near the start;
    perspective-correct depth); a sample that lies behind the depth buffer by more than
    ``bias`` x its depth and by less than the occluder's assumed depth (the larger of
    ``thickness`` x the buffer's depth and :func:`occluder_thickness`, or the step's own
    depth change) is an occluder. Samples within 2 px of the start pixel or on sky are
    ignored.

    Limits: only what the camera sees casts shadows (an occluder off screen or hidden
    behind another surface casts none); an occluder's depth is a guess from its width on
    screen, so a thin pole far in front of a wall can shadow a little too much and a deep
    object seen edge-on too little; shadows are hard (no penumbra from a light's size:
    in the relight benchmark a point radius of up to 0.1 or a sun disc of up to 2 degrees
    gives penumbrae of a few centimetres, under a pixel at 128x96, a few at full HD).

    Args:
        depth: H x W planar depth. ``sky``: H x W bool (no surface: never occludes).
        p: 3 x N camera-space points; ``pix``: their ``(row, col)`` indices.
        k: ``(fx, fy, cx, cy)``. ``target``: (3,) light position or ``None`` (sun).
        direction: (3,) unit direction from the surface toward a sun (unused with target).
        occluder: H x W :func:`occluder_thickness` (computed when ``None``; zeros: every
            occluder ``thickness`` deep, as for an estimated depth).
        weight: H x W float32 in [0, 1], how opaque each pixel is as an occluder
            (:func:`occluder_weight`: its Confidence); ``None``: 1.

    Returns:
        N float32 in [0, 1]: 1 lit, 0 in shadow (1 - the largest weight of an occluder
        on the ray; {0, 1} with ``weight`` None).
    """
    steps = SHADOW_STEPS if steps is None else steps
    thickness = SHADOW_THICKNESS if thickness is None else thickness
    bias = SHADOW_BIAS if bias is None else bias
    h, w = depth.shape
    fx, fy, cx, cy = (float(x) for x in k)
    buf = np.where(sky, np.inf, depth).astype(F32)
    if target is not None:
        end = np.broadcast_to(target.astype(F32)[:, None], p.shape)
    else:
        reach = F32(2.0 * float(np.max(depth)))
        end = p + direction.astype(F32)[:, None] * reach
    z0, z1 = -p[2], -end[2]
    znear = F32(max(1e-3, 0.05 * float(np.min(depth))))
    # clip the segment where it crosses the near plane (a light behind the camera)
    t1 = np.where(z1 < znear, (z0 - znear) / np.maximum(z0 - z1, F32(1e-9)), F32(1.0))
    e = p + (end - p) * t1
    z1 = np.maximum(-e[2], znear)
    u0, v0 = fx * p[0] / z0 + cx, cy - fy * p[1] / z0
    u1, v1 = fx * e[0] / z1 + cx, cy - fy * e[1] / z1
    iz0, iz1 = F32(1.0) / z0, F32(1.0) / z1
    r0, c0 = pix
    # the buffer padded with one ring of "no surface": samples outside the frame read it
    padded = np.full((h + 2, w + 2), np.inf, F32)
    padded[1:-1, 1:-1] = buf
    flat = padded.ravel()
    # each pixel's assumed depth: the larger of a fraction of its depth and its width
    tpad = np.zeros((h + 2, w + 2), F32)
    tpad[1:-1, 1:-1] = np.maximum(F32(thickness) * np.where(sky, F32(0.0), buf),
                                  occluder_thickness(depth, sky, fx) if occluder is None else occluder)
    tflat = tpad.ravel()
    wflat = None
    if weight is not None:
        wpad = np.zeros((h + 2, w + 2), F32)
        wpad[1:-1, 1:-1] = np.clip(weight, 0.0, 1.0)
        wflat = wpad.ravel()
    occ = np.zeros(p.shape[1], F32)
    du, dv, diz = u1 - u0, v1 - v0, iz1 - iz0
    # samples closer than 2 px to the start pixel are its own surface: skipped
    s_min = F32(2.0) / np.maximum(np.sqrt(du * du + dv * dv), F32(1e-6))
    prev_z = z0
    # per-pixel jitter of the sample positions (interleaved gradient noise, Jimenez 2014):
    # fixed steps alias into bands where a ray grazes an occluder's assumed thickness;
    # jittered, the bands become fine noise that shadow_filter() averages out
    jit = (F32(52.9829189) * np.modf(F32(0.06711056) * c0.astype(F32) + F32(0.00583715) * r0.astype(F32))[0])
    jit = np.modf(jit)[0].astype(F32)
    # the segment's part on screen (a sun's ray runs far past the frame): samples beyond it
    # read "no surface"; spend them all on screen, denser near the start (contact shadows)
    s_end = np.ones_like(du)
    for a0, da, lim in ((u0, du, w), (v0, dv, h)):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(da > 0, (lim - a0) / da, np.where(da < 0, -a0 / da, np.inf))
        s_end = np.minimum(s_end, np.clip(t, 0.0, 1.0)).astype(F32)
    if not SHADOW_CLIP_TO_FRAME:
        s_end = np.ones_like(du)
    for i in range(1, steps + 1):
        s = (F32(i - 1) + jit) * F32(1.0 / steps)
        s = s_end * (s * s if SHADOW_STEP_POWER == 2 else s ** F32(SHADOW_STEP_POWER))
        # pixel indices + 1 in the padded buffer, clipped onto its "no surface" ring
        ui = np.clip(u0 + du * s + F32(1.0), 0.0, w + 1).astype(np.int32)
        vi = np.clip(v0 + dv * s + F32(1.0), 0.0, h + 1).astype(np.int32)
        z = F32(1.0) / (iz0 + diz * s)
        vi *= w + 2
        vi += ui
        d = flat[vi]
        behind = z - d
        thick = np.maximum(tflat[vi], np.abs(z - prev_z))
        hit = (behind > F32(bias) * z) & (behind < thick) & (s >= s_min)
        if wflat is None:
            occ[hit] = 1.0
        else:
            np.maximum(occ, np.where(hit, wflat[vi], F32(0.0)), out=occ)
        prev_z = z
    return F32(1.0) - occ


def depth_trusted(frame: contract.GBufferFrame) -> bool:
    """The depth is not an estimate: the header's ``provenance.depth`` is not
    ``estimated`` (a scene export's exact depth, a measured one; no provenance: trusted)."""
    prov = (frame.meta or {}).get("provenance")
    return not (isinstance(prov, dict) and prov.get("depth") == "estimated")


def occluder_weight(frame: contract.GBufferFrame) -> Optional[np.ndarray]:
    """How opaque each pixel is as a shadow caster (H x W float32 in [0, 1]), ``None``
    when every pixel is (no Confidence pass, or Confidence >= :data:`CONF_HI` everywhere):
    ``(Confidence - CONF_LO) / (CONF_HI - CONF_LO)`` clipped, so only confident geometry
    casts hard shadows (an estimator's wrong near depth at a window corner, Confidence
    ~0.7 on phone_office.mp4, cast a shadow over the whole desk)."""
    conf = frame.confidence
    if conf is None:
        return None
    c = np.asarray(conf, F32)
    if float(c.min()) >= CONF_HI:
        return None
    return np.clip((c - F32(CONF_LO)) * F32(1.0 / (CONF_HI - CONF_LO)), 0.0, 1.0).astype(F32)


def frame_guide(frame: contract.GBufferFrame) -> np.ndarray:
    """The frame as the visibility filter's guide: luminance of the straight Combined,
    to the power 1/2.2 (H x W float32, about [0, 1])."""
    from .differential import straight

    rgb = straight(frame.combined)
    lum = F32(0.2126) * rgb[0] + F32(0.7152) * rgb[1] + F32(0.0722) * rgb[2]
    return np.power(np.clip(lum, 0.0, 4.0), F32(1.0 / 2.2)).astype(F32)


def guided_filter(guide: np.ndarray, src: np.ndarray, radius: int, eps: float) -> np.ndarray:
    """He, Sun & Tang 2010's guided filter of ``src`` by ``guide`` (both H x W float32):
    smooths ``src`` where the guide is flat and keeps its steps where the guide has an
    edge (a shadow's edge that follows an object's outline stays sharp)."""
    import cv2

    k = (2 * radius + 1, 2 * radius + 1)

    def box(a):
        return cv2.boxFilter(a, -1, k, borderType=cv2.BORDER_REFLECT)

    mg, ms = box(guide), box(src)
    var = box(guide * guide) - mg * mg
    a = (box(guide * src) - mg * ms) / (var + F32(eps))
    b = ms - a * mg
    return (box(a) * guide + box(b)).astype(F32)


def shadow_filter(vis: np.ndarray, valid: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                  shape: Tuple[int, int], guide: Optional[np.ndarray] = None) -> np.ndarray:
    """Average the jittered shadow samples of :func:`shadow_visibility` over a small
    window (normalised box filter over the ``valid`` pixels; ``SHADOW_FILTER_FRACTION`` of
    the frame's short side, at least 3 px, odd), then, with a ``guide`` (H x W, the frame:
    :func:`frame_guide`), smooth it edge-aware (:func:`guided_filter`, radius
    ``GUIDED_FRACTION`` of the short side): the stipple a depth-buffer trace leaves goes,
    edges that follow the frame's stay. Returns ``vis`` filtered (N, float32, [0, 1]),
    ``valid`` pixels only (the others keep their value)."""
    import cv2

    h, w = shape
    ksz = max(SHADOW_FILTER_MIN, int(round(min(h, w) * SHADOW_FILTER_FRACTION)) | 1)
    num = np.zeros((h, w), F32)
    den = np.zeros((h, w), F32)
    num[rows[valid], cols[valid]] = vis[valid]
    den[rows[valid], cols[valid]] = 1.0
    num = cv2.blur(num, (ksz, ksz), borderType=cv2.BORDER_CONSTANT)
    den = cv2.blur(den, (ksz, ksz), borderType=cv2.BORDER_CONSTANT)
    dense = num / np.maximum(den, F32(1e-6))
    if guide is not None:
        inside = den > 0  # pixels outside every window: no sample near, taken as lit
        dense = np.where(inside, dense, F32(1.0))
        rad = max(2, int(round(min(h, w) * GUIDED_FRACTION)))
        dense = np.clip(guided_filter(guide.astype(F32), dense.astype(F32), rad, GUIDED_EPS), 0.0, 1.0)
    out = vis.copy()
    out[valid] = dense[rows[valid], cols[valid]]
    return out


def light_contribution(frame: contract.GBufferFrame, rig: LightRig, *, frame_number: int,
                       intrinsics: Optional[Sequence[float]] = None, shadows: bool = True,
                       area_grid: Optional[int] = None, steps: Optional[int] = None,
                       bounce: bool = True) -> np.ndarray:
    """Direct light of the rig's lights at ``frame_number`` on ``frame``'s passes.

    Args:
        frame: the (edited) G-buffer frame: its depth (planar, the lights' units),
            camera-space normals, albedo, metallic, roughness and Confidence (sky pixels,
            Confidence <= ``contract.NO_SURFACE``, get nothing).
        rig: parsed lights (:func:`backend.renderers.light_rig.load_lights`).
        frame_number: the G-buffer frame number (keyframes are matched to it).
        intrinsics: ``(fx, fy, cx, cy)`` in pixels; default the header's, else a 50 degree
            vertical field of view (:func:`backend.renderers.shading.intrinsics_for`).
        shadows: trace shadows in the depth buffer (:func:`shadow_visibility`).
        area_grid: point emitters per side of an area light.
        bounce: add one glossy bounce of the added light (:func:`glossy_bounce`).

    Returns:
        ``H x W x 3`` float32 scene-linear Rec.709 radiance to ADD to the plate (negative
        where a light has negative power), finite.

    Raises:
        LightsError: a ``world`` rig on a frame without a camera, or a light behind the
            camera pointing away from it (naming the lights file, the light and the frame).
    """
    h, w = frame.shape
    k = sh.intrinsics_for(h, w, intrinsics if intrinsics is not None else frame.meta.get("intrinsics"))
    states = rig.at(frame_number, frame_camera(frame.meta) if rig.space == "world" else None)
    out = np.zeros((3, h, w), F32)
    live = [st for st in states if st.power != 0 and float(st.color.max()) > 0]
    # surface pixels with a usable depth (an edit gone wrong can leave depth <= 0)
    surf = contract.surface_mask(frame) & (np.asarray(frame.depth) > 0) & np.isfinite(frame.depth)
    if not live or not surf.any():
        return sh.hwc(out)
    planar, _length, view = sh.camera_rays(h, w, k)
    rows, cols = np.nonzero(surf)
    depth = np.asarray(frame.depth, F32)
    p = planar[:, rows, cols] * depth[rows, cols]
    v = view[:, rows, cols]
    n = np.asarray(frame.normal, F32)[rows, cols].T
    n = n / np.maximum(np.sqrt((n * n).sum(0)), F32(1e-6))
    albedo = np.clip(np.asarray(frame.albedo, F32)[rows, cols].T, 0.0, 1.0)
    metal = np.clip(np.asarray(frame.metallic, F32)[rows, cols], 0.0, 1.0)
    rough = np.clip(np.asarray(frame.roughness, F32)[rows, cols], MIN_ROUGHNESS, 1.0)
    alpha = rough * rough
    nv = np.maximum((n * v).sum(0), F32(1e-4))
    f0 = F32(0.04) * (F32(1.0) - metal) + albedo * metal
    kd, ms = _bsdf_terms(nv, albedo, f0, rough, metal)
    acc = np.zeros((3, rows.size), F32)
    # shadows from untrustworthy depth (issue 39 trial): occluders weighted by Confidence,
    # an estimated depth's surfaces taken as thin (no width-based thickness), and the
    # visibility smoothed edge-aware, guided by the frame
    trusted = depth_trusted(frame)
    occ = None
    if shadows:  # once per frame
        occ = occluder_thickness(depth, ~surf, k[0]) if trusted else np.zeros(depth.shape, F32)
    trace = dict(occluder=occ, weight=occluder_weight(frame))
    guide = None if trusted else frame_guide(frame)
    for st in live:
        shared = None  # an area light's emitters share one soft shadow (AREA_SHADOW_GRID^2 rays)
        grid = max(1, int(AREA_GRID if area_grid is None else area_grid))
        for l, e, target in _emitters(st, p, grid):
            lit = np.abs(e) > F32(EPS)  # negative power: negative irradiance
            if not lit.any():
                continue
            rad = _bsdf(n, v, nv, l, f0, _widened(alpha, st, p, target, grid), kd, ms) * e
            if shadows and st.shadow:
                if st.type == "area":
                    if shared is None:
                        shared = _area_shadow(st, depth, surf, p, (rows, cols), k,
                                              AREA_SHADOW_STEPS if steps is None else steps, trace, guide)
                    vis = shared
                else:
                    front = lit & ((n * l).sum(0) > 0)
                    vis = np.zeros(rows.size, F32)
                    if front.any():
                        vis[front] = shadow_visibility(depth, ~surf, p[:, front], (rows[front], cols[front]), k,
                                                       target, -st.direction, steps=steps, **trace)
                        vis = shadow_filter(vis, front, rows, cols, depth.shape, guide)
                rad = rad * vis
            acc += rad * st.color.astype(F32)[:, None]
    out[:, rows, cols] = acc
    if bounce:
        out += _bounce_at_scale(frame, out, k, surf)
    return sh.hwc(out)


def light_under_look(out: np.ndarray, frame: contract.GBufferFrame, rig: LightRig, frame_number: int,
                     k: Sequence[float], albedo: np.ndarray, rough: np.ndarray, metal: np.ndarray,
                     trans: np.ndarray) -> np.ndarray:
    """The added lights under a look (issue 39): ``max(out + T * L, 0)`` (3 x H x W).

    ``out`` is the look's frame after its media, before its particles and post (the
    plate's own light re-lit by the look: night darkens it); ``L`` the lights' radiance
    (:func:`light_contribution`) on the look's surfaces (``albedo`` 3 x H x W, ``rough``,
    ``metal`` H x W: wet, darker, smoother under rain, white under snow); ``T`` the
    medium's transmittance (3 x H x W: fog, water) between the surface and the camera.
    The look's post (saturation, tint, exposure, the night tone curve) then grades it
    with the rest of the frame, as a camera would: an added lamp keeps its power at night
    instead of being darkened with the plate's daylight. Not modelled: the light's
    in-scattering in fog or water (no glow or beam), the water's depth blur on it."""
    lit = dataclasses.replace(frame, albedo=sh.hwc(albedo), roughness=np.asarray(rough, F32),
                              metallic=np.asarray(metal, F32))
    add = sh.chw(light_contribution(lit, rig, frame_number=frame_number, intrinsics=tuple(k)))
    return np.maximum(out + add * trans, F32(0.0))


def _area_shadow(st: LightState, depth: np.ndarray, surf: np.ndarray, p: np.ndarray,
                 pix: Tuple[np.ndarray, np.ndarray], k, steps: Optional[int], trace: dict,
                 guide: Optional[np.ndarray] = None) -> np.ndarray:
    """An area light's visibility (N, in [0, 1]): the mean of hard shadows traced to
    ``AREA_SHADOW_GRID^2`` points spread over its shape, a penumbra of that many steps."""
    pts = _area_points(st, AREA_SHADOW_GRID)
    vis = np.zeros(p.shape[1], F32)
    for q in pts:
        front = ((q.astype(F32)[:, None] - p) * -st.direction.astype(F32)[:, None]).sum(0) > 0  # lit side
        if front.any():
            vis[front] += shadow_visibility(depth, ~surf, p[:, front], (pix[0][front], pix[1][front]), k, q,
                                            -st.direction, steps=steps, **trace)
    return shadow_filter(vis * F32(1.0 / len(pts)), np.ones(p.shape[1], bool), pix[0], pix[1], depth.shape, guide)


def _up(frame: contract.GBufferFrame) -> np.ndarray:
    """World up (Blender +Z) in camera space when the header carries a camera, else +Y."""
    c2w = frame_camera(frame.meta)
    if c2w is None:
        return np.array([0.0, 1.0, 0.0], F32)
    rot = c2w[:3, :3] / np.maximum(np.linalg.norm(c2w[:3, :3], axis=0, keepdims=True), 1e-12)
    return (rot.T @ np.array([0.0, 0.0, 1.0])).astype(F32)


def _bounce_at_scale(frame: contract.GBufferFrame, direct: np.ndarray, k: Tuple[float, float, float, float],
                     surf: np.ndarray) -> np.ndarray:
    """:func:`glossy_bounce` on every ``s``-th pixel (``s`` = the smallest integer that
    brings the long side to :data:`BOUNCE_MAX_SIDE` or less), upsampled bilinearly: the
    screen-space reflections cost most of the light's time at full HD, and the bounce is
    a small, mostly smooth part of the added light. Below that size: full resolution."""
    h, w = frame.shape
    step = int(math.ceil(max(h, w) / float(BOUNCE_MAX_SIDE)))
    if step <= 1:
        return glossy_bounce(frame, direct, k, surf)
    sl = (slice(None, None, step), slice(None, None, step))
    small = contract.GBufferFrame(
        combined=frame.combined[sl], depth=np.ascontiguousarray(frame.depth[sl]),
        normal=np.ascontiguousarray(frame.normal[sl]), albedo=np.ascontiguousarray(frame.albedo[sl]),
        metallic=np.ascontiguousarray(frame.metallic[sl]), roughness=np.ascontiguousarray(frame.roughness[sl]),
        confidence=None, meta=frame.meta)
    fx, fy, cx, cy = k
    ks = (fx / step, fy / step, (cx - 0.5) / step + 0.5, (cy - 0.5) / step + 0.5)
    hs, ws = small.shape
    # the direct light averaged over each step x step block (edges cropped to whole blocks)
    d = direct[:, : (h // step) * step, : (w // step) * step]
    d = d.reshape(3, h // step, step, w // step, step).mean(axis=(2, 4), dtype=F32)
    dsmall = np.zeros((3, hs, ws), F32)
    dsmall[:, : d.shape[1], : d.shape[2]] = d
    b = glossy_bounce(small, dsmall, ks, np.ascontiguousarray(surf[sl]))
    return sh.upsample(b, h, w) * surf


def glossy_bounce(frame: contract.GBufferFrame, direct: np.ndarray, k: Tuple[float, float, float, float],
                  surf: np.ndarray, max_roughness: Optional[float] = None) -> np.ndarray:
    """One bounce of the added light: what surfaces reflect of the light the lights add
    elsewhere in the frame (a metal sphere mirroring the newly lit floor, the side of a
    box lit by the floor).

    * Glossy: screen-space reflections (:func:`backend.renderers.shading.screen_space_reflection`)
      of ``direct`` along the mirror direction; where the ray finds nothing on screen,
      the ground's mean added radiance ``L_g`` (up-facing surface pixels) for directions
      below the horizon. Times the split-sum environment BRDF (``F0 A + B``), faded out
      from roughness 0 to ``max_roughness``.
    * Diffuse: the lower hemisphere as a uniform emitter of ``L_g``:
      ``albedo (1 - metallic) L_g (1 - n.up) / 2``.

    Limits: only what is on screen is reflected; the ground is taken as uniform; one
    bounce. Returns 3 x H x W float32 radiance to add.
    """
    max_roughness = GLOSSY_MAX_ROUGHNESS if max_roughness is None else max_roughness
    h, w = frame.shape
    normal = sh.chw(frame.normal)
    normal = normal / np.maximum(np.sqrt((normal * normal).sum(0)), F32(1e-6))
    up = _up(frame)
    ny = sh.dot3(normal, up)
    floor = surf & (ny > F32(0.7))
    l_ground = direct[:, floor].mean(1) if floor.sum() > 16 else np.zeros(3, F32)
    lg = l_ground.astype(F32)[:, None, None]
    rough = np.clip(np.asarray(frame.roughness, F32), 0.0, 1.0)
    metal = np.clip(np.asarray(frame.metallic, F32), 0.0, 1.0)
    albedo = sh.chw(np.clip(np.asarray(frame.albedo, F32), 0.0, 1.0))
    out = albedo * ((F32(1.0) - metal) * (F32(0.5) - F32(0.5) * ny) * surf) * lg
    mask = surf & (rough < F32(max_roughness))
    if not mask.any():
        return out
    colour, weight = sh.screen_space_reflection(np.asarray(frame.depth, F32), normal, direct, k, mask,
                                                facing=SSR_FACING)
    _planar, _length, view = sh.camera_rays(h, w, k)
    nv = np.maximum((normal * view).sum(0), F32(1e-4))
    r_up = F32(2.0) * nv * ny - sh.dot3(view, up)   # reflected direction . up
    # sharp lobes: the mirror ray (screen space), else the ground when it points below the
    # horizon; wide lobes: the share of a wide lobe below the horizon sees the ground
    sharp = F32(1.0) - sh.smoothstep(0.0, max_roughness, rough)
    mirror = colour * weight + (F32(1.0) - weight) * sh.smoothstep(BELOW_LO, BELOW_HI, -r_up) * lg
    wide = (F32(0.5) - F32(0.5) * np.clip(r_up, -1.0, 1.0)) * lg
    env = mirror * sharp + wide * (F32(1.0) - sharp)
    f0 = F32(0.04) * (F32(1.0) - metal) + albedo * metal
    fade = mask.astype(F32)
    return out + sh.env_brdf_karis(f0, nv, np.maximum(rough, F32(MIN_ROUGHNESS))) * env * fade
