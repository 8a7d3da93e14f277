"""The embedded renderer: deferred, physically based relighting of G-buffers (CPU, numpy).

Input: a contract :class:`~backend.contract.GBufferFrame` (possibly edited) and a prompt
parsed by :mod:`.prompt` into looks (:mod:`.looks`). Output: ``H x W x 3`` float32
scene-linear Rec.709 RGB, finite, >= 0. Deterministic: no randomness except
hash-based patterns seeded by the frame index; the same inputs give bit-identical
output.

Method (details and sources in ``docs/restyle.md`` and :mod:`.shading`):

1. **Source shading** (intrinsic image model ``I = A * S``): ``S_src = Combined /
   max(Albedo, 0.02)`` per channel (clipped to ``[0, 8]``). Its high-frequency part
   ``D = lum(S_src) / lowpass(lum(S_src))`` is the texture/contact-shadow detail of the
   footage; being a ratio it is unchanged by a global or smooth albedo edit.
2. **Surface edits from the look:** rain (darker albedo, lower roughness, puddles on
   up-facing surfaces), snow (white albedo on up-facing surfaces).
3. **Light rig** in camera space: key directional light (GGX / Cook-Torrance specular,
   Lambert or Burley diffuse, Blender Principled metallic workflow: ``F0 = mix(0.04,
   albedo, metallic)``, diffuse ``*= 1 - metallic``, ``alpha = roughness^2``), a fill
   light (diffuse), a hemisphere ambient from ``normal.y``, and an analytic environment
   specular reflecting the hemisphere -- on glossy surfaces (roughness < 0.45) the
   relit frame itself, by screen-space reflections (:func:`_reflect_frame`).
4. **Relight** (ratio-image relighting): ``shading = (1 - k) * E_rig * D + k * S_src *
   tint`` where ``k = source_light`` and ``tint`` is the look's mean irradiance over
   daylight's; ``out = albedo * (1 - metallic) * shading + specular``.
   With ``k > 0`` the ``k`` part reproduces the source pixel (it divides by the same
   albedo it multiplies), so an albedo edit shows with weight ``1 - k`` -- unless the
   unedited frame is passed as ``reference`` (then ``S_src = Combined / A_reference``
   and edits act fully), or ``source_light=0``.
5. **Media in screen space from depth:** underwater (downwelling filter, caustics on
   up-facing surfaces, per-channel Beer-Lambert direct attenuation plus veiling light,
   depth-growing blur) and fog (Koschmieder with uniform + exponential height fog and
   forward in-scattering of the key light).
6. **Post:** saturation, tint, exposure.

Depth: metric depth is used in metres. Relative depth (``meta['depth_kind'] ==
'relative'``, mapped onto ``[depth_near, depth_far]``) is normalised to ``[0, 1]`` and
multiplied by each medium's ``*_extent_m`` (fog 150 m, water 20 m), so that the far
plane always sits at the same optical depth and a look reads the same on any clip.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ..contract import ContractError, GBufferFrame, surface_mask
from ..imaging import resize
from . import shading as sh
from .base import Renderer, read_prompt
from .looks import DAYLIGHT, LookParams, average_irradiance, build_params
# falling rain and snow live in .particles; re-exported here for tests and tools
from .particles import (RAIN_LAYERS, RAIN_SLANT, SNOW_LAYERS, SNOW_SHUTTER_S,  # noqa: F401
                        _box_cover, _falling, _hash01, _ParticleLayer, _rain_streaks, _snowflakes)
from .prompt import Look
# snow cover and wet surfaces live in .surfaces; re-exported here for tests and tools
from .surfaces import SNOW_ALBEDO, _depth_up, _surface_edits, snow_cover, snow_cover_of  # noqa: F401

F32 = np.float32
#: bump when the shading code changes the output for the same parameters (resume hash)
RENDER_VERSION = 5
#: version of the differential plate (issue 39; in the resume hash of runs with no look or a reference)
PLATE_VERSION = 1
ALBEDO_EPS = 0.02
MAX_SOURCE_SHADING = 8.0
#: detail is faded where log-depth departs from its local mean (by half at 1/this)
DETAIL_DEPTH_GATE = 25.0
#: nearest scene distance (metres) at which caustics are placed on relative depth
CAUSTIC_NEAR_M = 1.0
#: opacity of falling snowflakes over the frame; kept low so falling snow
#: does not flicker more than the footage (flicker metric, issue 28)
SNOWFALL_GAIN = 0.15


@dataclass
class RenderLayers:
    """Intermediate layers of one embedded render (all float32, scene-linear).

    Attributes:
        rgb: H x W x 3 final output (>= 0, finite), straight (not premultiplied) colour.
        surface: 3 x H x W (channel-first) lit surfaces before media and post (sky
            pixels: the source sky times the look's sky gain).
        diffuse: 3 x H x W diffuse part of ``surface`` (0 on sky pixels).
        specular: 3 x H x W specular part of ``surface`` (key GGX + environment).
        transmittance: 3 x H x W medium transmittance (fog x water), 1 = clear.
        sky: H x W bool, pixels with no surface.
        distance_m: H x W distance along the ray used by fog, in (look) metres.
    """

    rgb: np.ndarray
    surface: np.ndarray
    diffuse: np.ndarray
    specular: np.ndarray
    transmittance: np.ndarray
    sky: np.ndarray
    distance_m: np.ndarray


@lru_cache(maxsize=64)
def _params_for_looks(looks: Tuple[Look, ...], overrides: tuple) -> LookParams:
    return build_params(looks, **dict(overrides))


def _hg(cos_t: np.ndarray, g: float) -> np.ndarray:
    """Henyey-Greenstein phase relative to isotropic (1 = isotropic)."""
    g2 = g * g
    d = F32(1.0 + g2) - F32(2.0 * g) * cos_t
    return F32(1.0 - g2) / (d * np.sqrt(d))


class EmbeddedRenderer(Renderer):
    """Deferred PBR relighting + atmosphere on CPU (numpy only).

    Args:
        fov_y_deg: vertical field of view used when ``frame.meta['intrinsics']`` is
            missing (degrees).
        **overrides: any :class:`~.looks.LookParams` field, applied after the looks
            (e.g. ``source_light=0.0``, ``burley=True``, ``exposure=1.2``).

    Raises:
        TypeError: an override that is not a LookParams field.
    """

    name = "embedded"
    #: only the looks vocabulary (:mod:`.prompt`); other words are refused
    free_text_prompt = False
    #: :meth:`render` accepts ``reference=`` (the unedited G-buffer frame)
    accepts_reference = True

    def __init__(self, *, fov_y_deg: float = sh.DEFAULT_FOV_Y_DEG, **overrides):
        fields = set(LookParams.__dataclass_fields__)
        bad = sorted(set(overrides) - fields)
        if bad:
            raise TypeError(f"EmbeddedRenderer: unknown option(s) {bad}; "
                            f"known: fov_y_deg, {', '.join(sorted(fields))}")
        self.fov_y_deg = float(fov_y_deg)
        sh.tune_allocator()
        self.overrides = {k: (tuple(v) if isinstance(v, (list, tuple)) else v)
                          for k, v in overrides.items()}
        #: the shot's lighting (:class:`.differential.PlateLighting`), set once per shot by
        #: the restyle job; ``None``: estimated from each frame that has edits
        self.plate_lighting = None
        #: lights added to the plate (:mod:`.lights`' rig), ``None``: none
        self.light_rig = None

    # -- public API -----------------------------------------------------------------
    def params(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> LookParams:
        """Look parameters for ``prompt`` (``looks``: its :func:`.base.read_prompt`,
        ``None``: parse it here), with this renderer's overrides applied.

        Raises:
            PromptError: ``looks`` is ``None`` and the prompt is outside the vocabulary.
        """
        looks = read_prompt(prompt, self) if looks is None else tuple(looks)
        return _params_for_looks(looks, tuple(sorted(self.overrides.items())))

    def settings(self) -> Dict[str, object]:
        return {"name": self.name, "version": RENDER_VERSION, "fov_y_deg": self.fov_y_deg,
                "overrides": {k: list(v) if isinstance(v, tuple) else v
                              for k, v in sorted(self.overrides.items())}}

    def describe(self, prompt: str, looks: Optional[Sequence[Look]] = None) -> Dict[str, object]:
        """The parsed looks and the full parameter set (for metadata); see
        :meth:`.base.Renderer.describe`. No look and no overrides: ``params`` is
        ``{"plate": PLATE_VERSION}`` (the edited plate only, issue 39: no shader number
        is used, and the restyle job's resume hash tells it from the old relight)."""
        looks = read_prompt(prompt, self) if looks is None else tuple(looks)
        if not looks and not self.overrides:
            params = {"plate": PLATE_VERSION}
        else:
            lp = self.params(prompt, looks)
            params = {**lp.to_json(), **_revisions(lp)}
        return {"prompt": prompt, "looks": [lk.to_json() for lk in looks], "params": params}

    def render(self, frame: GBufferFrame, prompt: str, *, frame_index: int = 0,
               time_s: float = 0.0, prev: Optional[np.ndarray] = None,
               looks: Optional[Sequence[Look]] = None,
               reference: Optional[GBufferFrame] = None) -> np.ndarray:
        """Re-render one frame; see the module docstring for the method.

        Args:
            frame_index, time_s, looks: as in :meth:`.base.Renderer.render`
                (``prev`` is not used: the embedded renderer is not temporal).
            reference: the *unedited* G-buffer frame the edited ``frame`` came from.
                When given, the source shading is ``Combined / reference.albedo``, so
                albedo edits act at full strength even with ``source_light > 0``.

        Returns:
            H x W x 3 float32 scene-linear Rec.709, finite, >= 0.

        Raises:
            PromptError: prompt outside the vocabulary.
            ContractError: arrays of the wrong shape (also for ``reference``).
        """
        looks = read_prompt(prompt, self) if looks is None else tuple(looks)
        if not looks and not self.overrides:  # no look: the edited (and lit) plate only
            return self.render_layers(frame, None, frame_index=frame_index, reference=reference).rgb
        return self.render_layers(frame, self.params(prompt, looks), frame_index=frame_index,
                                  time_s=time_s, reference=reference).rgb

    # -- the plate (issue 39: differential re-rendering) ------------------------------
    def _edited_plate(self, frame: GBufferFrame, reference: Optional[GBufferFrame], view, intr) -> np.ndarray:
        """Step 0: the footage with the edits acting through their difference
        (:func:`.differential.differential_plate`), 3 x H x W straight colour."""
        from .differential import differential_plate, estimate_plate_lighting

        def lighting():
            if self.plate_lighting is None:  # no shot estimate: this frame's own
                return estimate_plate_lighting([reference if reference is not None else frame])
            return self.plate_lighting

        h, w = frame.shape
        depth = np.asarray(frame.depth, dtype=F32)
        sky = _distances(frame, DAYLIGHT, np.ones((h, w), F32)).sky
        k = sh.intrinsics_for(h, w, intr, self.fov_y_deg)

        def ssr(rough):  # the frame itself, for glossy edits (None: nothing glossy)
            plate = _straight_colour(frame.combined)
            return _reflect_frame(None, None, view, DAYLIGHT, depth, rough, sky, (plate, plate), k, parts=True)

        plate, _mask = differential_plate(frame, reference, lighting, view, ssr)
        return plate

    def _add_lights(self, plate: np.ndarray, frame: GBufferFrame, frame_index: int, intr,
                    look: Optional[tuple] = None) -> np.ndarray:
        """Lights placed by the artist (``self.light_rig``) added to ``plate`` (3 x H x W):
        the one place the renderer calls :func:`.lights.light_contribution` (``frame_number``
        = the G-buffer frame number, ``frame_index + 1`` as the restyle job passes ``n - 1``).
        No look: onto the edited plate. Under a look, ``look = (albedo, roughness, metallic,
        transmittance)``: on the look's surfaces (wet, snow), times the medium's
        transmittance, before the look's post (:func:`.lights.light_under_look`). Clamped
        at 0. No rig: ``plate`` as it is."""
        if self.light_rig is None:
            return plate
        from .lights import light_contribution, light_under_look

        k = sh.intrinsics_for(*frame.shape, intr, self.fov_y_deg)
        if look is not None:
            return light_under_look(plate, frame, self.light_rig, frame_index + 1, k, *look)
        add = light_contribution(frame, self.light_rig, frame_number=frame_index + 1, intrinsics=k)
        return np.maximum(plate + sh.chw(add), F32(0.0))

    # -- implementation ---------------------------------------------------------------
    def render_layers(self, frame: GBufferFrame, prompt: Union[str, LookParams, None], *,
                      frame_index: int = 0, time_s: float = 0.0,
                      reference: Optional[GBufferFrame] = None) -> RenderLayers:
        """Render and return the intermediate layers (see :class:`RenderLayers`).

        ``prompt`` may be a prompt string, ready :class:`~.looks.LookParams`, or ``None``
        (or a prompt with no look, and no overrides): the edited plate only (step 0, no
        look, no post); ``reference`` as in :meth:`render`.

        Longer than ~80 lines on purpose: it is the module docstring's method, steps
        1-6 in order, reading top to bottom; each step's arithmetic is already in its
        own function, and splitting the sequence would only pass a dozen intermediate
        arrays between them.
        """
        _check_shapes(frame, reference)
        h, w = frame.shape
        meta = frame.meta or {}
        intr = meta.get("intrinsics")
        planar, ray_len, view = sh.camera_rays(h, w, intr, self.fov_y_deg)
        one = F32(1.0)

        # --- 0. the plate: the footage, edits acting through their difference, lights ------
        plate = self._edited_plate(frame, reference, view, intr)
        if prompt is None or (isinstance(prompt, str) and not read_prompt(prompt, self) and not self.overrides):
            plate = self._add_lights(plate, frame, frame_index, intr)  # LIGHTS HOOK, no look (issue 39)
            return _plate_layers(plate, frame, ray_len)
        p = prompt if isinstance(prompt, LookParams) else self.params(prompt)
        reference = None  # the plate carries the edits now: the looks shade it as it is

        src = plate
        albedo = np.clip(sh.chw(frame.albedo), 0.0, 1.0)
        normal = sh.chw(frame.normal)
        rough = np.clip(np.asarray(frame.roughness, dtype=F32), 0.0, 1.0)
        metal = np.clip(np.asarray(frame.metallic, dtype=F32), 0.0, 1.0)
        depth = np.asarray(frame.depth, dtype=F32)
        d = _distances(frame, p, ray_len)

        # --- source shading (intrinsic model I = A S) and its detail ratio ----------------
        src_albedo = albedo if reference is None else np.clip(sh.chw(reference.albedo), 0.0, 1.0)
        s_src = src / np.maximum(src_albedo, F32(ALBEDO_EPS))
        np.clip(s_src, 0.0, MAX_SOURCE_SHADING, out=s_src)
        detail = _detail_ratio(s_src, depth, p.detail) if p.detail > 0 else None

        # --- surfaces, BRDF inputs -------------------------------------------------------------
        ny = normal[1]
        guide = sh.luminance(sh.chw(frame.combined[..., :3])) if p.snow > 0 else None  # the footage
        ny_depth = _depth_up(depth, sh.intrinsics_for(h, w, intr, self.fov_y_deg), guide) if p.snow > 0 else None
        albedo, rough, metal, cover = _surface_edits(p, albedo, rough, metal, ny, ny_depth, guide)
        if cover is not None and detail is not None:
            # fresh snow buries the ground's texture: keep only 30 % of the footage's
            # detail under full cover (it also carried the footage's noise onto bright snow)
            detail = detail + (F32(1.0) - detail) * (cover * F32(0.7))
        n_dot_v = np.maximum(normal[0] * view[0] + normal[1] * view[1] + normal[2] * view[2],
                             F32(1e-4))
        alpha = rough * rough
        # the key light's angular size widens the lobe (Karis 2013); it also keeps a
        # roughness-0 highlight finite
        alpha = np.sqrt(alpha * alpha + F32(p.key_softness * p.key_softness))
        f0 = F32(0.04) + (albedo - F32(0.04)) * metal
        diff_col = albedo * (one - metal)

        # --- light rig -----------------------------------------------------------------------
        key_dir = sh.normalize3(p.key_dir)
        lam, spec_k = sh.directional_light(normal, view, n_dot_v, f0, alpha, key_dir,
                                           roughness=rough, burley=p.burley)
        lf = _water_light_filter(p)  # downwelling attenuation under water, else 1
        key_rgb = sh.col(np.asarray(p.key_color) * p.key_intensity * lf)
        key_term = lam
        if p.water > 0 and p.caustics > 0:
            fx = sh.intrinsics_for(h, w, intr, self.fov_y_deg)[0]
            key_term = lam * _caustic_gain(p, planar, d, n_dot_v, ny, fx, time_s)
        sky_c = sh.col(np.asarray(p.sky_color) * lf)
        gnd_c = sh.col(np.asarray(p.ground_color) * lf)
        irr = key_rgb * key_term
        irr += sh.hemisphere(ny, sky_c, gnd_c)
        if p.fill_intensity > 0:
            fill = np.maximum(sh.dot3(normal, sh.normalize3(p.fill_dir)), F32(0.0))
            irr += sh.col(np.asarray(p.fill_color) * p.fill_intensity * lf) * fill
        if detail is not None:
            irr *= detail

        # --- relight: new light x detail, blended with the source's own shading ------------
        k = min(max(p.source_light, 0.0), 1.0)
        if k > 0:
            tint = (np.asarray(average_irradiance(p)) / np.asarray(average_irradiance(DAYLIGHT))) * lf
            shading = irr * F32(1.0 - k) + s_src * sh.col(tint * k)
        else:
            shading = irr
        diffuse = diff_col * shading
        del diff_col, s_src, src_albedo, detail, alpha, lam, key_term, irr  # freed early (issue 37: 4K memory)
        ref_y = F32(2.0) * n_dot_v * ny - view[1]  # y of the mirror direction
        env = sh.hemisphere(ref_y, sky_c, gnd_c)

        sky = d.sky
        sky_rgb = src * sh.col(p.sky_gain)
        if p.sky_fill_amount > 0:
            a = p.sky_fill_amount
            sky_rgb = sky_rgb * F32(1.0 - a) + sh.col(np.asarray(p.sky_fill) * a)
        del src, plate
        n_dot_v_env = n_dot_v
        if p.reflections > 0:
            # glossy surfaces reflect the relit frame itself, not only the sky/ground
            # hemisphere: screen-space reflections replace the hemisphere where they hit
            env, n_dot_v_env = _reflect_frame(env, n_dot_v, view, p, depth, rough, sky,
                                              (sky_rgb, _plate(diffuse, albedo, shading, metal)),
                                              sh.intrinsics_for(h, w, intr, self.fov_y_deg))
        specular = spec_k * key_rgb + sh.env_specular(f0, n_dot_v_env, rough, env, metallic=metal)
        surface = np.where(sky, sky_rgb, diffuse + specular)
        if sky.any():
            diffuse[:, sky] = 0.0
            specular[:, sky] = 0.0

        # free the shading inputs the media step no longer needs (issue 37: 4K memory);
        # the added lights (issue 39) still shade the look's surfaces
        lit_surfaces = (albedo, rough, metal) if self.light_rig is not None else None
        del albedo, normal, rough, metal, f0, spec_k, shading, env, ref_y, sky_rgb
        del n_dot_v, n_dot_v_env, ny_depth, cover

        # --- media and post ------------------------------------------------------------------
        out = surface
        trans = np.ones((3, h, w), dtype=F32)
        level = float(np.mean(average_irradiance(p)) / np.mean(average_irradiance(DAYLIGHT)))
        if p.water > 0:
            out, t_water = _underwater(out, p, d, lf, level)
            trans = trans * t_water
        dist_fog = d.ray_unit * d.fog_scale
        if p.fog_tau > 0:
            out, t_fog = _fog(out, p, planar, ray_len, view, dist_fog, lf, key_dir)
            trans = trans * t_fog
        # LIGHTS HOOK under a look (issue 39): the look re-lit the plate's own light; the
        # added lights shine on the look's surfaces, through its media, then its post
        if lit_surfaces is not None:
            out = self._add_lights(out, frame, frame_index, intr, look=(*lit_surfaces, trans))
        if p.rain_streaks > 0:
            streaks = _rain_streaks(h, w, frame_index, time_s)
            out = out + sh.col(np.asarray(p.fog_color) * 0.25 * p.rain_streaks * level) * streaks
        if p.snowfall > 0:
            flakes = _snowflakes(h, w, frame_index, time_s)
            # flakes are snow lit by the look's light, laid "over" the frame (partly transparent)
            flake = sh.col(np.asarray(SNOW_ALBEDO) * 1.3 * level)
            opacity = SNOWFALL_GAIN * min(p.snowfall, 1.0) * (0.5 + 0.5 * min(level, 1.0))  # fainter in less light
            out = out + (flake - out) * (flakes * F32(opacity))
        rgb = _post(out, p)
        return RenderLayers(rgb=rgb, surface=surface, diffuse=diffuse, specular=specular,
                            transmittance=trans, sky=sky, distance_m=dist_fog.astype(F32))


# --------------------------------------------------------------------------- steps


def _plate_layers(plate: np.ndarray, frame: GBufferFrame, ray_len: np.ndarray) -> RenderLayers:
    """:class:`RenderLayers` of the plate alone (no look): rgb = the plate (H x W x 3,
    NaN -> 0, >= 0), all of it diffuse, clear medium."""
    h, w = frame.shape
    d = _distances(frame, DAYLIGHT, ray_len)
    rgb = sh.hwc(plate)
    np.fmax(rgb, F32(0.0), out=rgb)
    return RenderLayers(rgb=rgb, surface=plate, diffuse=plate, specular=np.zeros_like(plate),
                        transmittance=np.ones((3, h, w), dtype=F32), sky=d.sky,
                        distance_m=(d.ray_unit * d.fog_scale).astype(F32))


#: revisions of parts of the shader that changed since RENDER_VERSION 5: each enters a
#: look's parameters (and so the resume hash) only when that part is in use, so folders of
#: looks that did not change still resume and the others re-render
#: (night: the flat-frame tone curve; caustics: flattened on steep depth; snow: guided cover)
LOOK_REVISIONS = {"night": 2, "caustics": 2, "snow": 2}


def _revisions(p: LookParams) -> Dict[str, int]:
    """The :data:`LOOK_REVISIONS` of the parts ``p`` uses, as ``{"<part>_revision": n}``."""
    used = {"night": p.night_gamma != 1.0, "caustics": p.caustics > 0, "snow": p.snow > 0}
    return {f"{k}_revision": v for k, v in LOOK_REVISIONS.items() if used[k]}


def _check_shapes(frame: GBufferFrame, reference: Optional[GBufferFrame]) -> None:
    h, w = frame.shape
    for name, arr, c in (("Combined", frame.combined, (3, 4)), ("Normal", frame.normal, (3,)),
                         ("Albedo", frame.albedo, (3,))):
        if arr.ndim != 3 or arr.shape[:2] != (h, w) or arr.shape[2] not in c:
            raise ContractError(f"pass {name}: shape {arr.shape} does not match depth {(h, w)}")
    for name, arr in (("Metallic", frame.metallic), ("Roughness", frame.roughness)):
        if arr.shape != (h, w):
            raise ContractError(f"pass {name}: shape {arr.shape} does not match depth {(h, w)}")
    if reference is not None and reference.albedo.shape != frame.albedo.shape:
        raise ContractError(f"reference pass Albedo: shape {reference.albedo.shape} does not "
                            f"match the frame's {frame.albedo.shape}")


def _straight_colour(comb: np.ndarray) -> np.ndarray:
    """Combined (premultiplied, EXR convention) -> straight RGB, 3 x H x W."""
    from .differential import straight

    return straight(comb)


@dataclass
class _Distances:
    """Sky mask and distances (H x W float32).

    ``unit``: planar depth in metres (metric) or normalised to [0, 1] (relative);
    ``ray_unit``: the same along the ray; ``fog_scale``/``water_scale`` turn ``unit``
    into metres for each medium (1 for metric depth, the look's extent otherwise).
    """

    sky: np.ndarray
    unit: np.ndarray
    ray_unit: np.ndarray
    fog_scale: np.float32
    water_scale: np.float32


def _distances(frame: GBufferFrame, p: LookParams, ray_len: np.ndarray) -> _Distances:
    meta = frame.meta or {}
    depth = np.asarray(frame.depth, dtype=F32)
    kind = str(meta.get("depth_kind", "relative"))
    near = float(meta.get("depth_near", np.min(depth)))
    far = float(meta.get("depth_far", np.max(depth)))
    if not far > near:
        far = near + 1.0
    if frame.confidence is not None:
        sky = ~surface_mask(frame)
    else:
        sky = depth >= F32(far * (1.0 - 1e-4))
    if kind == "metric":
        unit = np.maximum(depth, F32(0.0))  # metres
        fog_scale = water_scale = F32(1.0)
    else:
        unit = np.clip((depth - F32(near)) * F32(1.0 / (far - near)), 0.0, 1.0)
        unit[sky] = 1.0
        fog_scale, water_scale = F32(p.fog_extent_m), F32(p.water_extent_m)
    return _Distances(sky, unit, unit * ray_len, fog_scale, water_scale)


#: guided-filter ``eps`` on log shading: steps with a log contrast well above
#: ``sqrt(eps)`` (hard cast shadows, ~x3) go to the base, smaller ones stay detail
DETAIL_EDGE_EPS = 0.05


def _detail_ratio(s_src: np.ndarray, depth: np.ndarray, strength: float) -> np.ndarray:
    """High-frequency shading detail ``lum(S) / base(lum(S))`` in [0.33, 3] (H x W).

    ``base`` is an edge-preserving smoothing of log-luminance: a self-guided filter (He,
    Sun & Tang, "Guided Image Filtering", ECCV 2010; computed on a grid ``w / 320``
    coarser and its linear coefficients upsampled, the "fast guided filter" of He & Sun
    2015). Where the window holds a strong step (a hard cast shadow's edge) the base
    follows the step, so the ratio stays near 1 on both sides: a plain low-pass put a
    dark rim inside every cast shadow and a bright one outside it, which read as an
    outlined sticker once a look dims the sun (rain, snow, overcast). Texture, creases and
    soft contact shadows (log contrast below ``sqrt(DETAIL_EDGE_EPS)``) stay in the detail.

    Faded toward 1 where log-depth departs from its local mean, i.e. at depth
    discontinuities (objects against the background, the horizon against the sky),
    where the ratio would otherwise halo.
    """
    import cv2

    one = F32(1.0)
    h, w = depth.shape
    lum = sh.luminance(s_src)
    log_lum = np.log(np.maximum(lum, F32(1e-3)))
    logd = np.log(np.maximum(depth, F32(1e-3)))
    scale = max(2, int(round(w / 320)))
    if h < 2 * scale or w < 2 * scale:
        return np.ones((h, w), dtype=F32)
    hl, wl = h // scale, w // scale
    small = [resize(np.ascontiguousarray(a[: hl * scale, : wl * scale]), (wl, hl), "area")
             for a in (log_lum, logd)]
    k = (5, 5)

    def box(a):
        return cv2.boxFilter(a, -1, k, borderType=cv2.BORDER_REPLICATE)

    g = small[0]
    mean = box(g)
    var = np.maximum(box(g * g) - mean * mean, F32(0.0))
    coef_a = var / (var + F32(DETAIL_EDGE_EPS))
    coef_b = mean - coef_a * mean
    coef = np.stack([box(coef_a), box(coef_b), box(small[1])])
    coef = sh.upsample(coef, h, w)
    base = coef[0] * log_lum + coef[1]
    x = np.abs(logd - coef[2]) * F32(DETAIL_DEPTH_GATE)
    gate = one / (one + x * x)
    detail = np.exp(np.clip(log_lum - base, -1.1, 1.1))
    np.minimum(detail, F32(3.0), out=detail)
    np.maximum(detail, F32(0.33), out=detail)
    detail -= one
    detail *= gate
    detail += one
    if strength != 1.0:
        detail = np.power(detail, F32(strength))
    return detail


#: surfaces rougher than this reflect only the hemisphere (no screen-space reflection)
SSR_MAX_ROUGHNESS = 0.45
#: screen-space reflections are traced on a grid whose long side is about this many pixels
SSR_GRID = 320
#: Gaussian sigma (fraction of the long side) smoothing the depth the mirror normals come from
SSR_NORMAL_SMOOTH = 1.0 / 160


def _reflect_frame(env: np.ndarray, n_dot_v: np.ndarray, view: np.ndarray, p: LookParams,
                   depth: np.ndarray, rough: np.ndarray, sky: np.ndarray, radiance: tuple,
                   intr: tuple, parts: bool = False):
    """What glossy pixels reflect, and at which angle.

    ``radiance`` is ``(sky colour, diffuse)`` (3 x H x W each): the relit frame without
    specular is the sky colour on sky pixels and the diffuse elsewhere, built only when
    something is glossy. Screen-space reflections of it are
    blended over the hemisphere ``env`` by hit weight x glossiness
    (``1 - smoothstep(0.1, SSR_MAX_ROUGHNESS, roughness)``) x ``p.reflections``;
    rougher surfaces see a blurred copy. The mirror directions, and the ``n.v`` of the
    Fresnel term on glossy pixels, come from normals of the depth buffer being traced,
    so reflection, geometry and Fresnel agree. Traced on a grid of about ``SSR_GRID``
    pixels (long side), upsampled bilinearly.

    Returns:
        ``(env 3 x H x W, n_dot_v H x W)`` for :func:`~.shading.env_specular`; with
        ``parts`` (``env``, ``n_dot_v`` unused) the pieces ``(reflected colour 3 x H x W,
        weight H x W, n.v of the depth normals H x W)``, or ``None`` when nothing is glossy.
    """
    if float(rough.min()) >= SSR_MAX_ROUGHNESS:  # nothing glossy (the usual estimate)
        return None if parts else (env, n_dot_v)
    gloss = F32(1.0) - sh.smoothstep(0.1, SSR_MAX_ROUGHNESS, rough)
    gloss[sky] = 0.0
    if not (gloss > 0).any():
        return None if parts else (env, n_dot_v)
    radiance = np.where(sky, radiance[0], radiance[1])
    h, w = depth.shape
    k = max(1, int(round(max(h, w) / SSR_GRID)))
    hl, wl = max(1, h // k), max(1, w // k)

    def small(a):
        return resize(np.ascontiguousarray(a, dtype=F32), (wl, hl), "area")

    from ..geometry import normals_from_depth

    d_l = small(depth)
    g_l = small(gloss)
    rad_l = np.stack([small(c) for c in radiance])
    fx, fy, cx, cy = intr
    sx, sy = wl / w, hl / h
    intr_l = (fx * sx, fy * sy, cx * sx, cy * sy)
    # mirror directions from the normals of the depth buffer being traced: estimated
    # normals a few degrees off that geometry (typical on footage) send most rays out
    # of the frame instead of onto the surfaces the depth says are there
    # ... from a smoothed copy: depth upsampled from an estimator's grid (192 px for the
    # embedded one) is piecewise planar, and its normals turned a mirror into blocks
    sigma = max(1.0, SSR_NORMAL_SMOOTH * max(hl, wl))
    import cv2

    d_s = cv2.GaussianBlur(d_l, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE)
    n_l = np.ascontiguousarray(np.moveaxis(normals_from_depth(d_s, intr_l), -1, 0), dtype=F32)
    if min(hl, wl) > 4:  # one-sided differences at the border: take the inner neighbours'
        n_l[:, 0], n_l[:, -1] = n_l[:, 1], n_l[:, -2]
        n_l[:, :, 0], n_l[:, :, -1] = n_l[:, :, 1], n_l[:, :, -2]
    col, wgt = sh.screen_space_reflection(d_l, n_l, rad_l, intr_l, g_l > 0)
    if min(hl, wl) > 8:
        # soften where rays start / stop finding a hit: a hard found / not-found boundary
        # drew the grid's and the depth's steps as stepped contours in a mirror
        import cv2

        traced = (g_l > 0).astype(F32)
        k = (3, 3)
        acc = cv2.blur(traced, k)
        wsum = cv2.blur(wgt, k)
        col = np.stack([cv2.blur(c * wgt, k) for c in col]) / np.maximum(wsum, F32(1e-6))
        wgt = np.where(acc > 0, wsum / np.maximum(acc, F32(1e-6)), F32(0.0)) * (traced > 0)
    # rough-ish surfaces see a blurred reflection
    blur = sh.lowpass(col, scale=1, radius=2) if min(hl, wl) > 8 else col
    r_l = small(rough)
    t = np.clip(r_l / F32(SSR_MAX_ROUGHNESS), 0.0, 1.0)
    col = col + (blur - col) * t
    # screen-space data is least reliable at the frame border (one-sided depth
    # differences, clipped relative depth): fade out over the outer 4 %
    yy = np.minimum(np.arange(hl), np.arange(hl)[::-1]).astype(F32) / F32(max(1.0, 0.04 * hl))
    xx = np.minimum(np.arange(wl), np.arange(wl)[::-1]).astype(F32) / F32(max(1.0, 0.04 * wl))
    edge = np.minimum(np.clip(yy, 0, 1)[:, None], np.clip(xx, 0, 1)[None, :])
    wgt = wgt * g_l * edge * F32(min(max(p.reflections, 0.0), 1.0))
    col = sh.upsample(col, h, w)
    wgt = sh.upsample(wgt, h, w)
    n_full = sh.upsample(n_l, h, w)
    nv_depth = np.maximum(n_full[0] * view[0] + n_full[1] * view[1] + n_full[2] * view[2], F32(1e-4))
    if parts:
        return col, wgt, nv_depth
    nv = n_dot_v + (nv_depth - n_dot_v) * wgt  # where a reflection was found
    return env + (col - env) * wgt, nv


def _plate(diffuse, albedo, shading, metal) -> np.ndarray:
    """What glossy surfaces reflect: the relit plate, ``albedo x shading`` ignoring the
    metallic edit. The diffuse part of a metallic pixel is 0, so a Metallic-1 edit over
    a whole region reflected black wherever its rays hit that region (a chrome frame was
    mostly black, issue 28); a metal seen in a metal shows the plate instead."""
    if float(metal.max()) <= 0.0:
        return diffuse
    return albedo * shading


def _water_light_filter(p: LookParams) -> np.ndarray:
    """RGB factor (3,) of light reaching ``water_depth_m`` below the surface (1 above water)."""
    if p.water <= 0:
        return np.ones(3)
    return (1.0 - p.water) + p.water * np.exp(-0.7 * np.asarray(p.water_atten) * p.water_depth_m)


#: caustics: the ratio of the depth's per-row step to the normals' footprint over which
#: the pattern's z coordinate slides to the camera-plane height (see _caustic_gain)
CAUSTIC_RAMP = (3.0, 6.0)


def _step_length(px: np.ndarray, pz: np.ndarray, axis: int) -> np.ndarray:
    """Metres the scene point (``px``, ``pz``) moves per pixel along ``axis`` (central
    differences, one-sided at the frame's edges), H x W float32."""
    return np.hypot(np.gradient(px, axis=axis), np.gradient(pz, axis=axis)).astype(F32)


def _caustic_gain(p: LookParams, planar, d: _Distances, n_dot_v, ny, fx: float,
                  time_s: float) -> np.ndarray:
    """Caustics on up-facing surfaces as a key-light factor (H x W, >= 0, mean ~1).

    The pattern (:func:`.shading.caustics`) is projected from above: it is a function
    of each pixel's horizontal scene position (camera-space x, z in metres, from depth)
    on a plane ``water_depth_m`` below the surface. It is faded toward 1 (plain light)
    with distance (scattering), with the water depth, at grazing angles, on surfaces
    not facing up (``smoothstep(0.2, 0.9, n_y)``), and where one pixel covers more than a
    quarter of the pattern's shortest wavelength (it would alias). Relative depth puts
    the nearest surface at 0 m; the pattern's positions start at
    :data:`CAUSTIC_NEAR_M` so the bottom rows are not one stretched blob.
    """
    import cv2

    dist_w = d.ray_unit * d.water_scale
    pos_d = d.unit * d.water_scale + F32(CAUSTIC_NEAR_M)
    up = sh.smoothstep(0.2, 0.9, ny)
    footprint = (dist_w + F32(CAUSTIC_NEAR_M)) * F32(1.0 / fx) / np.maximum(n_dot_v, F32(0.05))
    px, pz = planar[0] * pos_d, planar[2] * pos_d
    # where the depth recedes much faster per pixel than the normals say (the estimated
    # depth of a dolphin's back ramps like the floor behind it), (x, z) squeezed the web
    # into thin horizontal lines across the bodies: there the pattern's second coordinate
    # slides to the camera-plane height y, whose per-pixel step is the normals' footprint
    # (a smooth blend of coordinates warps the web, it does not cut it)
    ramp = _step_length(px, pz, 0) / np.maximum(footprint, F32(1e-6))
    slide = sh.smoothstep(CAUSTIC_RAMP[0], CAUSTIC_RAMP[1], ramp)
    # ... but not on the floor itself (estimated n_y >= 0.85: the sand on dolphins.mp4 is
    # 0.87-0.91, the bodies 0.04-0.57), where the squeeze is the floor's perspective
    slide = slide * (F32(1.0) - sh.smoothstep(0.7, 0.85, ny))
    slide = cv2.GaussianBlur(slide, (0, 0), max(2.0, planar.shape[2] / 120.0))
    py = planar[1] * pos_d
    lam_min = sh.CAUSTIC_WAVELENGTHS[0]
    fade = np.exp(dist_w * F32(-1.0 / 8.0)) * np.clip(
        F32(1.0) - footprint * F32(1.0 / (0.5 * lam_min)), 0.0, 1.0)
    fade = fade * np.sqrt(n_dot_v)
    depth_fade = math.exp(-p.water_depth_m / 10.0)
    weight = np.minimum(F32(1.4 * p.caustics * p.water * depth_fade) * up * fade, F32(0.9))
    gain = np.ones_like(weight)
    lit = weight > 0.01
    if lit.any():
        c = sh.caustics(px[lit], pz[lit], time_s, depth_m=p.water_depth_m)
        sl = slide[lit]
        on = sl > 0.01
        if on.any():
            c2 = sh.caustics(px[lit][on], py[lit][on], time_s, depth_m=p.water_depth_m)
            c[on] = c[on] + (c2 - c[on]) * sl[on]
        gain[lit] = F32(1.0) + weight[lit] * (c - F32(1.0))
    return gain


def _underwater(out: np.ndarray, p: LookParams, d: _Distances, lf: np.ndarray, level: float):
    """Akkaynak-Treibitz water: ``J e^{-c d} + B_inf (1 - e^{-b d})``, then depth blur.

    Returns ``(image, direct transmittance 3 x H x W)``.
    """
    one = F32(1.0)
    dw = d.ray_unit * d.water_scale
    t_direct = np.exp(sh.col(-np.asarray(p.water_atten)) * dw)
    t_back = np.exp(sh.col(-np.asarray(p.water_back_atten)) * dw)
    veil = sh.col(np.asarray(p.water_back) * level * 1.5 * lf / max(float(np.max(lf)), 1e-3))
    wat = F32(p.water)
    underwater = veil + (out - veil) * t_direct + veil * (t_direct - t_back)
    out = out + (underwater - out) * wat if p.water < 1 else underwater
    if p.water_blur > 0:
        w = out.shape[-1]
        blurred = sh.lowpass(out, scale=max(2, int(round(w / 160))), radius=1)
        wb = F32(p.water_blur * p.water) * (one - np.exp(dw * F32(-1.0 / 7.0)))
        out = out + (blurred - out) * wb
    return out, one - wat + wat * t_direct


def _fog(out: np.ndarray, p: LookParams, planar, ray_len, view, dist_fog, lf, key_dir):
    """Koschmieder with uniform + exponential height fog and sun in-scattering.

    Returns ``(image, transmittance H x W)``.
    """
    beta = p.fog_tau / p.fog_extent_m
    dir_y = planar[1] / ray_len
    falloff = 1.0 / max(p.fog_falloff_frac * p.fog_extent_m, 1e-3)
    tau_h = sh.height_fog_optical_depth(dist_fog, dir_y, beta, falloff)
    tau = F32(beta * (1.0 - p.fog_height)) * dist_fog + F32(p.fog_height) * tau_h
    t_fog = np.exp(-tau).astype(F32)
    amb = (np.asarray(p.sky_color) + np.asarray(p.ground_color)) * 0.5 * lf
    key_plain = np.asarray(p.key_color) * p.key_intensity * lf
    air = sh.col(np.asarray(p.fog_color) * (amb * 1.6 + key_plain * 0.35))
    if p.fog_sun > 0:
        cos_t = -sh.dot3(view, key_dir)
        glow = _hg(cos_t, 0.6) * F32(0.1 * p.fog_sun)
        air = air + sh.col(key_plain) * glow
    return sh.koschmieder(out, t_fog, air), t_fog


#: day for night keeps the subject readable: the tone curve is steepened (up to
#: NIGHT_MAX_GAMMA) until the frame's 99th-percentile luminance sits at least this far
#: above its log-average. An overcast look (rain) under a weak moon key is flat (p99 1.38x
#: the log-average on dolphins.mp4), and the plain curve left its highlights at 85/255.
NIGHT_MIN_CONTRAST = 2.0
NIGHT_MAX_GAMMA = 2.3


def _night_gamma(gamma: float, contrast: float) -> float:
    """The night curve's exponent: ``gamma``, or steeper where the frame's p99 / log-average
    luminance ``contrast`` raised to it stays under :data:`NIGHT_MIN_CONTRAST`."""
    if contrast <= 1.0 + 1e-3:
        return gamma
    need = math.log(NIGHT_MIN_CONTRAST) / math.log(contrast)
    return float(min(max(gamma, need), max(gamma, NIGHT_MAX_GAMMA)))


def _post(out: np.ndarray, p: LookParams) -> np.ndarray:
    """Saturation, tint, exposure, the night tone curve; -> H x W x 3, NaN -> 0,
    clipped to [0, 1e4]."""
    if p.saturation != 1.0:
        lum = sh.luminance(out)
        out = lum + (out - lum) * F32(p.saturation)
    out = out * sh.col(np.asarray(p.tint) * p.exposure)
    if p.night_gamma != 1.0:
        # day-for-night curve on luminance around the frame's log-average (hue and
        # saturation kept): L -> L (L / (pivot Lavg))^(g - 1)
        lum = np.maximum(sh.luminance(out), F32(1e-5))
        log_avg = float(np.exp(np.mean(np.log(lum[::4, ::4]), dtype=np.float64)))
        gamma = _night_gamma(p.night_gamma, float(np.percentile(lum[::4, ::4], 99)) / log_avg)
        gain = np.power(lum * F32(1.0 / (p.night_pivot * log_avg)), F32(gamma - 1.0))
        out = out * np.minimum(gain, F32(3.0))
    rgb = sh.hwc(out)
    np.fmax(rgb, F32(0.0), out=rgb)  # fmax maps NaN to 0
    np.minimum(rgb, F32(1e4), out=rgb)
    return rgb
