"""Sky detection on real footage: which pixels show no surface (issue 33).

The G-buffer contract marks pixels with no surface by ``Confidence = 0`` (depth = the
frame's far value, normal = (0, 0, 1)). The embedded network's sky head was trained on
synthetic scenes and almost never fires on real footage, so :class:`Decomposer`
(:mod:`backend.decomposer`) adds this detector's mask to the estimator's.

It uses evidence a sky has and water, white walls and blown-out windows lack, on the
frame at a working size (long side :data:`WORK_SIZE`):

1. **Candidates**: low texture (local mean of the luma gradient, sRGB-encoded values),
   bright for the frame, not foliage-green, not a colour no sky has (saturated and
   neither blue nor warm).
2. **Sky touches the top**: a candidate region counts only when it touches the top
   border of the frame, or lies next to accepted sky across a *thin* structure (up to
   :data:`BRIDGE_FRACTION` of the frame width: struts, cables, a coaster's track) with a
   similar colour. Enclosed bright, low-texture holes in the sky (clouds, sun glare)
   join it.
3. **Sky is brighter than the ground**: the accepted region's median luma must reach
   the 90th luma percentile of the rest of the frame (:data:`BRIGHTER_THAN_REST`; deep
   water seen from below, a dark blue wall, a red bus fail this); a region that is mostly clipped white (an
   over-exposed window) is no evidence of sky; a grey, colourless region must lie in the
   upper half of the frame, must not reach its bottom (a white van roof filmed from
   above does) and must cover :data:`NEUTRAL_MIN_AREA` of it.

No temporal smoothing: each frame is decided on its own (measured stability: consecutive
masks' IoU 0.97-0.98 on boat, 0.84-0.92 on the lake clip, whose camera dips under water).

The mask is upsampled to the frame and refined there: pixels within a few pixels of
the boundary take the class of the nearer colour model (sky vs. the adjacent ground),
which puts the edge on the image edge.

Only numpy and OpenCV (both on the default path, no torch). Tuned on ``boat.mp4`` and
the shared negatives (``bikes``, ``dolphins``, ``phone_office``); held-out clips and the
measurement: ``benchmarks/sky_eval.py``. Known miss: a clear blue sky behind a bright
structure (the held-out roller coaster) fails check 3 and is not marked at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .colour import linear_to_srgb

#: long side (px) at which the sky is detected
WORK_SIZE = 480
#: local texture (mean |grad luma| of sRGB values in a 7x7 window, per pixel) below which a
#: pixel may be sky
TEXTURE_MAX = 0.018
#: a candidate's luma must reach this fraction of the frame's 90th luma percentile
REL_BRIGHTNESS = 0.55
#: and this much in absolute terms (sRGB luma): sky at dusk still emits light
ABS_BRIGHTNESS = 0.22
#: thin structures up to this fraction of the frame width are bridged
BRIDGE_FRACTION = 0.035
#: colour difference (CIE Lab, Delta E 76) below which regions across a bridge match
BRIDGE_DELTA_E = 22.0
#: the accepted sky's median luma must reach this times the 90th luma percentile of the rest
#: of the frame: sky is the brightest large thing in daylight and at dusk (deep water seen
#: from below, a red bus, are not)
BRIGHTER_THAN_REST = 1.0
#: a grey (colourless) sky must cover at least this share of the frame (a small bright grey
#: patch at the top is as likely a wall)
NEUTRAL_MIN_AREA = 0.06
#: a region whose pixels are mostly clipped (any channel >= 0.985 in sRGB) is no evidence
CLIPPED_MAX_SHARE = 0.5
#: smallest sky region, as a fraction of the working frame's pixels
MIN_AREA = 0.004


@dataclass
class SkyResult:
    """One frame's sky mask.

    Attributes:
        mask: ``H x W`` bool at the frame size, True where the pixel shows sky.
        fraction: share of the frame marked sky, in [0, 1].
        reason: one line on what decided (``"sky"``, or why a candidate was rejected).
    """

    mask: np.ndarray
    fraction: float
    reason: str


def _work(rgb_linear: np.ndarray) -> Tuple[np.ndarray, float]:
    """sRGB-encoded float32 frame at the working size and the scale factor (work / full)."""
    import cv2

    h, w = rgb_linear.shape[:2]
    s = min(1.0, WORK_SIZE / float(max(h, w)))
    img = np.clip(np.asarray(rgb_linear, np.float32), 0.0, 1.0)
    if s < 1.0:
        img = cv2.resize(img, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    return linear_to_srgb(img).astype(np.float32), s


def _features(srgb: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(luma, texture, lab)`` of an sRGB float frame."""
    import cv2

    y = (0.2126 * srgb[..., 0] + 0.7152 * srgb[..., 1] + 0.0722 * srgb[..., 2]).astype(np.float32)
    gx = cv2.Sobel(y, cv2.CV_32F, 1, 0, ksize=3) / 8.0
    gy = cv2.Sobel(y, cv2.CV_32F, 0, 1, ksize=3) / 8.0
    tex = cv2.blur(np.sqrt(gx * gx + gy * gy), (7, 7))
    lab = cv2.cvtColor(srgb, cv2.COLOR_RGB2LAB)
    return y, tex, lab


def _candidates(srgb: np.ndarray, y: np.ndarray, tex: np.ndarray) -> np.ndarray:
    """Pixels that may be sky: smooth, bright for the frame, of a sky colour."""
    r, g, b = srgb[..., 0], srgb[..., 1], srgb[..., 2]
    mx = np.maximum(np.maximum(r, g), b)
    mn = np.minimum(np.minimum(r, g), b)
    sat = (mx - mn) / np.maximum(mx, 1e-3)
    bright = (y >= ABS_BRIGHTNESS) & (y >= REL_BRIGHTNESS * float(np.percentile(y, 90)))
    green = (g > r + 0.02) & (g > b + 0.02)
    blue = b >= np.maximum(r, g) - 0.02
    warm = (r >= g) & (g >= b)  # dusk, haze lit by a low sun
    sky_colour = (sat < 0.25) | blue | (warm & (sat < 0.45))
    return (tex < TEXTURE_MAX) & bright & ~green & sky_colour


def _mean_lab(lab: np.ndarray, m: np.ndarray) -> np.ndarray:
    return lab[m].reshape(-1, 3).mean(axis=0)


def _grow(cand: np.ndarray, lab: np.ndarray, bridge_px: int) -> np.ndarray:
    """Candidate regions touching the top border, then those next to them across a thin gap
    with a matching colour (repeated until nothing changes)."""
    import cv2

    n, lbl, stats, _ = cv2.connectedComponentsWithStats(cand.astype(np.uint8), connectivity=8)
    min_area = MIN_AREA * cand.size
    top = set(np.unique(lbl[0][cand[0]]).tolist()) - {0}
    accepted = np.isin(lbl, [k for k in top if stats[k, cv2.CC_STAT_AREA] >= min_area])
    if not accepted.any():
        return accepted
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * bridge_px + 1, 2 * bridge_px + 1))
    done = set(np.unique(lbl[accepted]).tolist())
    for _ in range(12):
        near = cv2.dilate(accepted.astype(np.uint8), kernel) > 0
        new = [k for k in np.unique(lbl[near & cand]).tolist()
               if k and k not in done and stats[k, cv2.CC_STAT_AREA] >= min_area / 4]
        took = []
        for k in new:  # compare with the accepted sky next to it (sky brightens towards the horizon)
            comp = lbl == k
            ring = (cv2.dilate(comp.astype(np.uint8), kernel) > 0) & accepted
            side = comp & near  # both sides of the bridge only: a cloud further off does not count
            if ring.any() and np.linalg.norm(np.median(lab[side], 0) - np.median(lab[ring], 0)) < BRIDGE_DELTA_E:
                took.append(k)
        done.update(new)
        if not took:
            break
        accepted |= np.isin(lbl, took)
    return accepted


def _fill_holes(sky: np.ndarray, y: np.ndarray, tex: np.ndarray) -> np.ndarray:
    """Holes of the sky mask (not touching the border) that are at least as bright as the
    sky around them and not strongly textured: clouds, glare. Darker holes (a bird, a
    plane, a lamp post's head) stay."""
    import cv2

    inv = (~sky).astype(np.uint8)
    n, lbl, stats, _ = cv2.connectedComponentsWithStats(inv, connectivity=4)
    h, w = sky.shape
    sky_y = float(np.median(y[sky]))
    out = sky.copy()
    for k in range(1, n):
        x0, y0, bw, bh = stats[k, :4]
        if x0 == 0 or y0 == 0 or x0 + bw == w or y0 + bh == h:
            continue
        m = lbl == k
        if np.median(y[m]) >= 0.95 * sky_y and np.median(tex[m]) < 2.5 * TEXTURE_MAX:
            out |= m
    return out


def detect_sky_small(rgb_linear: np.ndarray) -> Tuple[np.ndarray, str, float]:
    """The sky mask at the working size: ``(mask, reason, scale)`` (see the module doc)."""
    import cv2

    srgb, s = _work(rgb_linear)
    h, w = srgb.shape[:2]
    y, tex, lab = _features(srgb)
    cand = _candidates(srgb, y, tex)
    cand = cv2.morphologyEx(cand.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)) > 0
    sky = _grow(cand, lab, max(1, int(round(BRIDGE_FRACTION * w))))
    if not sky.any():
        return sky, "no smooth bright region touches the top of the frame", s
    clipped = srgb.max(axis=-1) >= 0.985
    if clipped[sky].mean() > CLIPPED_MAX_SHARE:
        return np.zeros_like(sky), "the candidate is mostly clipped white (over-exposed, no evidence of sky)", s
    rest = ~sky
    if rest.any() and np.median(y[sky]) < BRIGHTER_THAN_REST * np.percentile(y[rest], 90):
        return np.zeros_like(sky), "the candidate is darker than the bright tenth of the rest of the frame", s
    srgb_sky = srgb[sky]
    neutral = float(np.median((srgb_sky.max(-1) - srgb_sky.min(-1)) / np.maximum(srgb_sky.max(-1), 1e-3))) < 0.12
    rows = np.nonzero(sky)[0]
    if neutral and (rows.mean() > 0.5 * h or sky[-1].mean() > 0.05 or sky.mean() < NEUTRAL_MIN_AREA):
        return np.zeros_like(sky), "a grey region that is small, reaches the lower half or the bottom (a wall, a roof)", s
    sky = _fill_holes(sky, y, tex)
    return sky, "sky", s


def _refine(sky_up: np.ndarray, rgb_linear: np.ndarray, band: int) -> np.ndarray:
    """Put the upsampled mask's edge on the image edge: in a band of ``band`` px around
    it, each pixel takes the class whose local mean colour (sky / ground, just outside the
    band) is nearer. Computed on the rows and columns around the band only."""
    import cv2

    if band < 1 or not sky_up.any() or sky_up.all():
        return sky_up
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * band + 1, 2 * band + 1))
    m8 = sky_up.astype(np.uint8)
    inner = cv2.erode(m8, k) > 0
    outer = cv2.dilate(m8, k) == 0
    uncertain = ~inner & ~outer
    ys, xs = np.nonzero(uncertain)
    if not len(ys):
        return sky_up
    pad = 3 * band
    y0, y1 = max(0, ys.min() - pad), min(sky_up.shape[0], ys.max() + pad + 1)
    x0, x1 = max(0, xs.min() - pad), min(sky_up.shape[1], xs.max() + pad + 1)
    crop = np.clip(np.asarray(rgb_linear[y0:y1, x0:x1], np.float32), 0, 1)
    srgb = linear_to_srgb(crop).astype(np.float32)
    inn, out_c, unc = inner[y0:y1, x0:x1], outer[y0:y1, x0:x1], uncertain[y0:y1, x0:x1]
    win = (4 * band + 1, 4 * band + 1)

    def local_mean(mask):
        wgt = cv2.blur(mask.astype(np.float32), win)
        col = cv2.blur(srgb * mask[..., None].astype(np.float32), win)
        return col[unc] / np.maximum(wgt[unc], 1e-6)[..., None], wgt[unc] > 1e-3

    sky_c, has_s = local_mean(inn)
    gnd_c, has_g = local_mean(out_c)
    px = srgb[unc]
    nearer_sky = np.sum((px - sky_c) ** 2, axis=-1) < np.sum((px - gnd_c) ** 2, axis=-1)
    both = has_s & has_g
    res = inner.copy()
    sub = res[y0:y1, x0:x1]
    sub[unc] = np.where(both, nearer_sky, sky_up[y0:y1, x0:x1][unc])
    return res


def detect_sky(rgb_linear: np.ndarray) -> SkyResult:
    """The sky mask of one frame.

    Args:
        rgb_linear: ``H x W x 3`` float32 scene-linear Rec.709 frame (values above 1 are
            clipped for the detection).

    Returns:
        :class:`SkyResult` with an ``H x W`` bool mask at the frame size.

    Raises:
        ValueError: a frame that is not ``H x W x 3``.
    """
    import cv2

    rgb = np.asarray(rgb_linear, np.float32)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or min(rgb.shape[:2]) < 2:
        raise ValueError(f"frame must be H x W x 3 RGB, got shape {rgb.shape}")
    small, reason, s = detect_sky_small(rgb)
    H, W = rgb.shape[:2]
    if not small.any():
        return SkyResult(np.zeros((H, W), bool), 0.0, reason)
    up = cv2.resize(small.astype(np.float32), (W, H), interpolation=cv2.INTER_LINEAR) > 0.5
    band = int(round(1.5 / s)) if s < 1.0 else 1
    mask = _refine(up, rgb, band)
    return SkyResult(mask, float(mask.mean()), reason)
