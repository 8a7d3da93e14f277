"""Looks as data: the parameters of the embedded renderer and how each look sets them.

:class:`LookParams` holds every number the shader in :mod:`.embedded` uses (light rig,
surface changes, participating media, post). :func:`build_params` starts from
daylight and applies the parsed looks (:mod:`.prompt`) in :data:`.prompt.LOOK_ORDER`.

Units: directions are unit camera-space vectors (OpenGL) pointing toward the light;
colours are scene-linear Rec.709; intensities are irradiance multipliers (a surface
facing the key light with albedo 1 reflects ``key_intensity * key_color``).
Media coefficients are per metre for metric depth; for relative depth the frame's
depth range is mapped onto ``*_extent_m`` metres first (see docs/restyle.md).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Dict, Iterable, Tuple

from .prompt import Look

Vec = Tuple[float, float, float]


def _norm(v: Vec) -> Vec:
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return tuple(x / n for x in v)  # type: ignore[return-value]


def _mix(a, b, t: float):
    if isinstance(a, tuple):
        return tuple(x + (y - x) * t for x, y in zip(a, b))
    return a + (b - a) * t


@dataclass(frozen=True)
class LookParams:
    """All parameters of the embedded shader (defaults = neutral daylight relight)."""

    # light rig (camera space)
    key_dir: Vec = _norm((-0.35, 0.8, 0.45))
    key_color: Vec = (1.0, 0.96, 0.9)
    key_intensity: float = 1.3
    key_softness: float = 0.02   # GGX alpha floor from the light's angular size (sun 0.02)
    fill_dir: Vec = _norm((0.6, 0.15, 0.8))
    fill_color: Vec = (0.75, 0.85, 1.0)
    fill_intensity: float = 0.2
    sky_color: Vec = (0.40, 0.46, 0.56)      # hemisphere ambient, up
    ground_color: Vec = (0.20, 0.18, 0.16)   # hemisphere ambient, down
    burley: bool = False
    # how much of the source frame's own shading (Combined / Albedo) is kept, 0..1
    source_light: float = 0.5
    # exponent on the source's high-frequency shading detail ratio (0 = none)
    detail: float = 1.0
    # sky / background pixels: source sky times this gain, blended toward sky_fill
    sky_gain: Vec = (1.0, 1.0, 1.0)
    sky_fill: Vec = (0.0, 0.0, 0.0)
    sky_fill_amount: float = 0.0
    # surfaces
    albedo_gain: Vec = (1.0, 1.0, 1.0)
    wetness: float = 0.0          # 0..1: darker albedo, low roughness, sky reflections
    reflections: float = 1.0      # screen-space reflections on glossy surfaces (0 = off)
    snow: float = 0.0             # 0..1.5: white cover on up-facing surfaces
    # fog (Koschmieder + exponential height fog)
    fog_tau: float = 0.0          # optical depth at fog_extent_m (uniform part)
    fog_extent_m: float = 150.0   # relative depth range maps onto this many metres
    fog_height: float = 0.5       # share of fog density that is height fog
    fog_falloff_frac: float = 0.08  # height-fog scale height as a fraction of extent
    fog_color: Vec = (0.80, 0.82, 0.85)
    fog_sun: float = 0.35         # forward in-scattering of the key light
    # underwater (Akkaynak & Treibitz 2018)
    water: float = 0.0            # 0..1 blend of the water medium
    water_atten: Vec = (0.42, 0.075, 0.05)   # per metre, direct signal (R fastest)
    water_back: Vec = (0.006, 0.10, 0.19)    # veiling light colour B_inf
    water_back_atten: Vec = (0.30, 0.055, 0.04)  # per metre, backscatter build-up
    water_extent_m: float = 20.0
    water_depth_m: float = 4.0    # depth below the surface (downwelling filter)
    caustics: float = 0.0
    water_blur: float = 0.0
    # falling rain / snow overlays (screen space, animated)
    rain_streaks: float = 0.0
    snowfall: float = 0.0
    # post
    exposure: float = 1.0
    saturation: float = 1.0
    tint: Vec = (1.0, 1.0, 1.0)
    # day-for-night tone curve on luminance (1 = off): L -> L (L / (pivot Lavg))^(gamma - 1)
    # around the frame's log-average luminance Lavg (Reinhard et al. 2002's "key"):
    # shadows go down, highlights up, so the subject stays readable in a darker frame
    night_gamma: float = 1.0
    night_pivot: float = 1.0

    def to_json(self) -> Dict[str, object]:
        """JSON-serialisable dict (rounded for stable hashes)."""
        out = {}
        for k, v in asdict(self).items():
            if isinstance(v, (tuple, list)):
                out[k] = [round(float(x), 6) for x in v]
            elif isinstance(v, bool):
                out[k] = v
            else:
                out[k] = round(float(v), 6)
        return out


DAYLIGHT = LookParams()
DAYLIGHT_WATER_BACK = DAYLIGHT.water_back


def _golden_hour(p: LookParams, s: float) -> LookParams:
    t = min(s, 1.5)
    return replace(
        p,
        key_dir=_norm(_mix(p.key_dir, (0.85, 0.16, 0.3), min(t, 1.0))),
        # the sun low in the sky, ~3500 K, on the yellow side: an orange-red key (and a
        # saturation boost) turned grey dolphins salmon pink, so the hue leans to yellow
        key_color=_mix(p.key_color, (1.0, 0.74, 0.42), t / 1.5 + 0.33 * min(t, 1.0)),
        key_intensity=_mix(p.key_intensity, 1.7, min(t, 1.0)),
        # the dusk sky and the fill are blue without magenta (green never the lowest
        # channel): with a green-poor sky and tint, grey surfaces turned salmon pink
        sky_color=_mix(p.sky_color, (0.33, 0.36, 0.45), t),
        ground_color=_mix(p.ground_color, (0.22, 0.14, 0.09), t),
        fill_color=_mix(p.fill_color, (0.55, 0.66, 0.95), t),
        sky_gain=_mix(p.sky_gain, (1.35, 0.82, 0.52), t),
        fog_color=_mix(p.fog_color, (0.95, 0.75, 0.55), t),
        fog_sun=_mix(p.fog_sun, 0.8, min(t, 1.0)),
        fog_tau=p.fog_tau + 0.25 * t,
        tint=_mix(p.tint, (1.05, 1.0, 0.9), t),
        saturation=p.saturation,
    )


def _overcast(p: LookParams, s: float) -> LookParams:
    t = min(s, 1.5)
    u = min(t, 1.0)
    return replace(
        p,
        key_dir=_norm(_mix(p.key_dir, (0.0, 1.0, 0.25), u)),
        key_intensity=p.key_intensity * (1.0 - 0.8 * u),
        key_softness=_mix(p.key_softness, 0.6, u),  # the "key" is now the bright cloud deck
        sky_color=_mix(p.sky_color, (0.78, 0.8, 0.83), u),
        ground_color=_mix(p.ground_color, (0.3, 0.3, 0.3), u),
        source_light=p.source_light * (1.0 - 0.5 * u),
        sky_gain=_mix(p.sky_gain, (0.9, 0.92, 0.95), u),
        sky_fill=(0.72, 0.74, 0.77),
        sky_fill_amount=max(p.sky_fill_amount, 0.6 * u),
        fog_tau=p.fog_tau + 0.5 * t,
        fog_color=_mix(p.fog_color, (0.75, 0.77, 0.8), u),
        saturation=p.saturation * (1.0 - 0.3 * u),
        exposure=p.exposure * (1.0 - 0.1 * t),
    )


def _night(p: LookParams, s: float) -> LookParams:
    """Day for night, as graded in post (e.g. Hurkman, *Color Correction Handbook*, ch.
    "Day for night"; the Blender Studio / ACES day-for-night practice): about 1.5-2.5
    stops down overall, a cool (blue) moonlight key, the sky darkened the most (it is
    the giveaway), shadows and mid-tones pushed down more than the highlights (a tone
    curve, :attr:`LookParams.night_gamma`), which stay bright so the subject reads;
    colour desaturated toward blue (the Purkinje shift of scotopic vision)."""
    t = min(s, 2.0)
    u = min(t, 1.0)
    moon = (0.55, 0.68, 1.0)
    q = replace(
        p,
        key_dir=_norm(_mix(p.key_dir, (-0.3, 0.85, 0.3), u)),
        key_color=_mix(p.key_color, moon, u),
        fill_intensity=p.fill_intensity * (1.0 - 0.5 * u),
        sky_color=_mix(p.sky_color, (0.25, 0.35, 0.7), u),
        ground_color=_mix(p.ground_color, (0.1, 0.12, 0.2), u),
        fog_color=_mix(p.fog_color, (0.45, 0.55, 0.8), u),
        fog_sun=p.fog_sun * (1.0 - 0.7 * u),
        saturation=p.saturation * (1.0 - 0.45 * u),
        tint=_mix(p.tint, (0.85, 0.95, 1.2), u),
        night_gamma=p.night_gamma * (1.0 + NIGHT_GAMMA * u),
        # caustics focus the direct (key) light; at night the light is mostly diffuse sky
        # and the tone curve would push the web's bright folds into flicker: halve them
        caustics=p.caustics * (1.0 - 0.5 * u),
    )
    # the rig's mean irradiance goes to `level` x what the earlier looks built (1.5 stops
    # down at strength 1, ~2.4 at "dark"/"deep" night words), whatever their key was
    level = (1.0 - (1.0 - NIGHT_LEVEL) * u) * (0.6 ** max(t - 1.0, 0.0))
    k = level * _level(p) / max(_level(q), 1e-6)
    return replace(
        q,
        key_intensity=q.key_intensity * k,
        fill_intensity=q.fill_intensity * k,
        sky_color=tuple(c * k for c in q.sky_color),
        ground_color=tuple(c * k for c in q.ground_color),
        # the sky is the giveaway of day for night: darkened most
        sky_gain=tuple(g * level * 0.5 for g in _mix(p.sky_gain, (0.35, 0.45, 1.0), u)),
        sky_fill=tuple(c * level for c in (0.05, 0.07, 0.15)),
    )


#: night: mean irradiance of the rig relative to the look it darkens (strength 1)
NIGHT_LEVEL = 0.34
#: night: exponent added to the tone curve at strength 1 (see LookParams.night_gamma)
NIGHT_GAMMA = 0.65


def _level(p: LookParams) -> float:
    return sum(average_irradiance(p)) / 3.0


def _rain(p: LookParams, s: float) -> LookParams:
    p = _overcast(p, min(s, 1.5))  # rain hides the sun (and its mirror glints in puddles)
    return replace(
        p,
        wetness=min(1.0, 0.6 * s + 0.2),
        rain_streaks=min(1.5, s),
        fog_tau=p.fog_tau + 0.3 * s,
        fog_color=_mix(p.fog_color, (0.7, 0.73, 0.78), 0.5),
    )


def _snow(p: LookParams, s: float) -> LookParams:
    p = _overcast(p, 0.5 * min(s, 1.5))
    return replace(
        p,
        snow=min(1.5, s),
        snowfall=min(1.5, s),
        key_color=_mix(p.key_color, (0.92, 0.96, 1.0), 0.5),
        fog_tau=p.fog_tau + 0.4 * s,
        fog_color=_mix(p.fog_color, (0.86, 0.89, 0.93), 0.6),
        tint=_mix(p.tint, (0.98, 0.99, 1.0), min(s, 1.0)),
    )


def _underwater(p: LookParams, s: float) -> LookParams:
    murk = max(s - 1.0, 0.0)  # "murky", "deep": more turbid, greener
    lvl = sum(p.sky_color) / sum(DAYLIGHT.sky_color)
    turb = 1.0 + 1.2 * murk
    return replace(
        p,
        water=1.0 if s >= 0.5 else 2.0 * s,
        water_atten=(0.42 * s ** 0.5 * turb, 0.075 * turb, 0.05 * turb ** 1.3),
        water_back=_mix(DAYLIGHT_WATER_BACK, (0.03, 0.14, 0.11), min(murk, 1.0)),
        water_back_atten=(0.30 * turb, 0.06 * turb, 0.045 * turb),
        water_depth_m=3.0 + 3.0 * s,
        key_dir=_norm((0.1, 1.0, 0.25)),
        key_intensity=p.key_intensity * 1.0,
        # keep the light level set by earlier looks (night stays dark under water)
        sky_color=_mix(p.sky_color, tuple(c * lvl for c in (0.55, 0.75, 0.8)), 0.7),
        ground_color=_mix(p.ground_color, tuple(c * lvl for c in (0.1, 0.2, 0.22)), 0.7),
        exposure=p.exposure * 0.85,
        source_light=p.source_light * 0.8,
        caustics=0.9 / turb,
        water_blur=min(1.0, 0.5 * s),
        fog_sun=0.0,
    )


def _fog(p: LookParams, s: float) -> LookParams:
    return replace(
        p,
        fog_tau=p.fog_tau + 2.0 * s ** 1.25,
        key_intensity=p.key_intensity * (1.0 - 0.25 * min(s, 1.5)),
        sky_color=_mix(p.sky_color, (0.62, 0.65, 0.7), min(s, 1.0) * 0.5),
        source_light=p.source_light * (1.0 - 0.2 * min(s, 1.0)),
        saturation=p.saturation * (1.0 - 0.1 * min(s, 1.5)),
    )


def _relight(p: LookParams, s: float) -> LookParams:
    """The renderer's own daylight rig over the plate (what an empty prompt did before
    issue 39): half the source's shading kept at strength 1, none at 2."""
    return replace(p, source_light=min(max(1.0 - 0.5 * s, 0.0), 1.0))


APPLY = {
    "relight": _relight,
    "golden_hour": _golden_hour,
    "overcast": _overcast,
    "night": _night,
    "rain": _rain,
    "snow": _snow,
    "underwater": _underwater,
    "fog": _fog,
}


def build_params(looks: Iterable[Look], base: LookParams = DAYLIGHT, **overrides) -> LookParams:
    """Apply ``looks`` (already in :data:`.prompt.LOOK_ORDER`) to ``base``.

    Args:
        looks: parsed looks.
        base: starting parameters.
        overrides: field -> value applied last (e.g. ``source_light=0.0``).

    Raises:
        KeyError: unknown look name; TypeError: unknown override field.
    """
    p = base
    for look in looks:
        p = APPLY[look.name](p, float(look.strength))
    if overrides:
        p = replace(p, **overrides)
    return p


def average_irradiance(p: LookParams) -> Tuple[float, float, float]:
    """Mean RGB irradiance of the rig over a camera-facing hemisphere (for tints)."""
    k = [p.key_intensity * c * 0.5 for c in p.key_color]
    f = [p.fill_intensity * c * 0.5 for c in p.fill_color]
    a = [0.5 * (s + g) for s, g in zip(p.sky_color, p.ground_color)]
    return tuple(x + y + z for x, y, z in zip(k, f, a))  # type: ignore[return-value]


LOOK_NAMES: Tuple[str, ...] = tuple(APPLY)
