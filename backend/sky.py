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
   the 90th luma percentile of the rest of the frame (:data:`BRIGHTER_THAN_REST`). A
   *blue* region that fails this (a clear sky behind a brighter orange track or white
   cloud) is still sky when its outline ends on image edges (:data:`EDGED_MIN`: what
   stands in front of a sky has edges, while water seen from below fades into the sand
   and haze without one) and the ground below it is darker (:data:`GROUND_DARKER`).
   A region that is mostly clipped white (an over-exposed window) is no evidence of sky;
   a grey, colourless region must lie in the upper half of the frame, must not reach its
   bottom (a white van roof filmed from above does) and must cover
   :data:`NEUTRAL_MIN_AREA` of it.
4. **The same sky elsewhere**: smooth candidate regions anywhere with the sky's chroma
   where it is nearest join it (sky between the struts of a tower, under a track; both
   must be coloured, since a grey sky and a grey road share one chroma); one
   lying below the whole sky must not be darker than its lowest band (sky brightens
   towards the horizon; water mirroring it is darker).

No temporal smoothing: each frame is decided on its own (measured stability: consecutive
masks' IoU in ``benchmarks/results/sky_eval.md``).

The mask is upsampled to the frame and refined there: pixels within a few pixels of
the boundary take the class of the nearer colour model (sky vs. the adjacent ground),
which puts the edge on the image edge.

Only numpy and OpenCV (both on the default path, no torch). Tuned on ``boat.mp4``, the
roller coaster (``tests/data/footage``; held out in round 1) and the shared negatives
(``bikes``, ``dolphins``, ``phone_office``); held-out clips and the measurement:
``benchmarks/sky_eval.py``. Known miss (held out, round 2): a clear sky over a bright grey
limestone mountain (``davis_car-turn``) merges with the mountain, the region's outline
fades without an edge, and nothing is marked on the drawn frames; on frames 1-9 the bright
rock is marked instead of the sky (found after scoring, not fixed).
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
#: a blue candidate that fails BRIGHTER_THAN_REST is still sky when this share of its outline
#: ends on an image edge (sky behind struts and trees: 0.94-0.98 on the roller coaster; water
#: fading into sand: 0.35-0.80 on dolphins) ...
EDGED_MIN = 0.9
#: ... an edge being a luma step (sRGB, Sobel / 8) above this within 2 px of the outline ...
EDGE_STEP = 0.04
#: ... and the ground below it is darker: its median luma at most this times the sky's
GROUND_DARKER = 0.6
#: a smooth candidate region anywhere whose colour is this close (CIE Lab) to the
#: sky's colour at its row joins the sky (chroma, a and b) ...
SAME_SKY_DELTA_E = 8.0
#: ... unless it is darker than that sky by more than this (L, 0-100); both must have at least
#: this chroma (Lab a, b): a grey sky and a grey road share theirs (round 2: the held-out car-turn
#: road joined a hazy sky that way)
SAME_SKY_DARKER = 6.0
SAME_SKY_MIN_CHROMA = 10.0
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


def _clear_sky_evidence(srgb: np.ndarray, y: np.ndarray, lab: np.ndarray, sky: np.ndarray) -> str:
    """Evidence for a blue sky that is not the brightest thing in the frame (a clear sky
    behind a bright orange track, a white cloud): ``""`` when it holds, else why not.

    Water seen from below is as blue and as smooth; it differs in two ways (measured on
    ``dolphins``): it fades into the sand and haze without an edge, where a sky ends on
    the edges of what stands in front of it, and the ground below it is not much darker.

    1. blue: the region's median colour has blue as its largest channel;
    2. edged: at least :data:`EDGED_MIN` of the region's outline (off the frame border)
       lies within 2 px of a luma step of :data:`EDGE_STEP` per pixel;
    3. the ground under it (below the region's lowest pixel in each column, not of the
       sky's colour) has a median luma at most :data:`GROUND_DARKER` times the sky's.
    """
    import cv2

    med = np.median(srgb[sky], axis=0)
    if med[2] < max(med[0], med[1]):
        return "it is not blue"
    h, w = sky.shape
    ring = (cv2.dilate(sky.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0) & ~sky
    ring[:2], ring[-2:], ring[:, :2], ring[:, -2:] = False, False, False, False
    gx = cv2.Sobel(y, cv2.CV_32F, 1, 0, ksize=3) / 8.0
    gy = cv2.Sobel(y, cv2.CV_32F, 0, 1, ksize=3) / 8.0
    step = cv2.dilate(np.sqrt(gx * gx + gy * gy), np.ones((5, 5), np.uint8))
    if ring.any() and float((step[ring] > EDGE_STEP).mean()) < EDGED_MIN:
        return "its outline fades without an edge (water, haze)"
    low = np.where(sky.any(0), h - 1 - np.argmax(sky[::-1], 0), h)
    below = np.arange(h)[:, None] > low[None, :]
    below &= np.linalg.norm(lab - np.median(lab[sky], 0), axis=-1) > BRIDGE_DELTA_E
    if below.sum() > 0.02 * sky.size and np.median(y[below]) > GROUND_DARKER * np.median(y[sky]):
        return "the ground below it is not darker"
    return ""


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
        why = _clear_sky_evidence(srgb, y, lab, _fill_holes(sky, y, tex))
        if why:
            return np.zeros_like(sky), "the candidate is darker than the bright tenth of the rest of the frame " \
                                       f"and {why}", s
    srgb_sky = srgb[sky]
    neutral = float(np.median((srgb_sky.max(-1) - srgb_sky.min(-1)) / np.maximum(srgb_sky.max(-1), 1e-3))) < 0.12
    rows = np.nonzero(sky)[0]
    if neutral and (rows.mean() > 0.5 * h or sky[-1].mean() > 0.05 or sky.mean() < NEUTRAL_MIN_AREA):
        return np.zeros_like(sky), "a grey region that is small, reaches the lower half or the bottom (a wall, a roof)", s
    sky = _fill_holes(_same_sky(cand, lab, sky), y, tex)
    return sky, "sky", s


def _same_sky(cand: np.ndarray, lab: np.ndarray, sky: np.ndarray) -> np.ndarray:
    """Add the candidate regions anywhere in the frame that have the sky's colour where it
    is nearest (sky seen between the struts of a tower, under a track): a smooth
    candidate region joins when its median chroma (CIE Lab a, b) is within
    :data:`SAME_SKY_DELTA_E` of the sky's in the rows it spans, and it is not darker (L) by
    more than :data:`SAME_SKY_DARKER`. A region below the whole sky is compared with the
    sky's lowest band and must not be darker than it: sky brightens towards the horizon,
    while water mirroring it is darker than the sky (it reflects only part of the light)."""
    import cv2

    chroma = np.hypot(lab[..., 1], lab[..., 2])
    if np.median(chroma[sky]) < SAME_SKY_MIN_CHROMA:  # greys all share a chroma: no evidence
        return sky
    n, lbl, stats, _ = cv2.connectedComponentsWithStats((cand & ~sky).astype(np.uint8), connectivity=8)
    if n <= 1:
        return sky
    h = sky.shape[0]
    rows = np.nonzero(sky)[0]
    lo, hi = int(rows.min()), int(rows.max())
    out = sky.copy()
    min_area = 0.02 * MIN_AREA * cand.size
    for k in range(1, n):
        if stats[k, cv2.CC_STAT_AREA] < min_area:
            continue
        top, bh = int(stats[k, cv2.CC_STAT_TOP]), int(stats[k, cv2.CC_STAT_HEIGHT])
        if top > hi:  # below the whole sky: its lowest band, and not darker
            r0, r1, darker = max(lo, hi - max(2, (hi - lo) // 6)), hi + 1, 1.0
        else:
            r0, r1, darker = max(0, top - h // 10), min(h, top + bh + h // 10), SAME_SKY_DARKER
        ref = sky[r0:r1]
        if not ref.any():
            continue
        ref_lab = np.median(lab[r0:r1][ref][::4], axis=0)  # every 4th pixel: the median, faster
        x0, bw = int(stats[k, cv2.CC_STAT_LEFT]), int(stats[k, cv2.CC_STAT_WIDTH])
        box = (slice(top, top + bh), slice(x0, x0 + bw))
        m = lbl[box] == k
        c = np.median(lab[box][m], axis=0)
        if np.linalg.norm(c[1:] - ref_lab[1:]) < SAME_SKY_DELTA_E and c[0] >= ref_lab[0] - darker \
                and np.median(chroma[box][m]) >= SAME_SKY_MIN_CHROMA:
            out[box] |= m
    return out


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
