"""Display encodings of G-buffer passes and contact sheets (8-bit sRGB PNG).

Only for looking at results: nothing here feeds back into the contract.

Encodings (all return ``H x W x 3`` ``uint8`` sRGB):

* colour passes (Combined, Albedo, renders): scene-linear Rec.709 -> sRGB transfer
  (IEC 61966-2-1), clipped to [0, 1];
* Depth: log depth normalised by its 2nd..98th percentile, OpenCV's TURBO
  colour map (near = red, far = blue); "no surface" pixels (Confidence 0) black;
* Normal: the usual normal-map colours, ``rgb = n * 0.5 + 0.5`` (camera space,
  OpenGL: +X right = red, +Y up = green, +Z toward the camera = blue);
* Metallic, Roughness, Confidence: grey levels, 0 = black, 1 = white.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from .colour import linear_to_srgb
from .imaging import resize


def _u8(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def encode_colour(rgb_linear: np.ndarray) -> np.ndarray:
    """``H x W x 3(+)`` scene-linear -> ``H x W x 3`` uint8 sRGB."""
    return _u8(linear_to_srgb(np.clip(rgb_linear[..., :3], 0.0, None)))


def encode_depth(depth: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
    """``H x W`` depth (> 0) -> TURBO-coloured log depth (near red); ``mask`` True = surface."""
    import cv2

    nearness = -np.log(np.maximum(depth, 1e-6))  # log depth: readable from 1 m to 1 km alike
    valid = mask if mask is not None and mask.any() else np.ones(depth.shape, bool)
    lo, hi = np.percentile(nearness[valid], [2, 98])
    t = np.clip((nearness - lo) / max(hi - lo, 1e-12), 0, 1)
    bgr = cv2.applyColorMap(_u8(t), cv2.COLORMAP_TURBO)
    rgb = bgr[..., ::-1].copy()
    if mask is not None:
        rgb[~mask] = 0
    return rgb


def encode_normal(normal: np.ndarray) -> np.ndarray:
    """``H x W x 3`` unit camera-space normals -> normal-map colours."""
    return _u8(normal * 0.5 + 0.5)


def encode_value(v: np.ndarray) -> np.ndarray:
    """``H x W`` value in [0, 1] -> grey."""
    g = _u8(v)
    return np.repeat(g[..., None], 3, axis=-1)


def encode_frame_passes(frame) -> dict:
    """All passes of a :class:`backend.contract.GBufferFrame`, display-encoded, by pass name."""
    mask = frame.confidence > 0 if frame.confidence is not None else None
    return {
        "Combined": encode_colour(frame.combined),
        "Depth": encode_depth(frame.depth, mask),
        "Normal": encode_normal(frame.normal),
        "Albedo": encode_colour(frame.albedo),
        "Metallic": encode_value(frame.metallic),
        "Roughness": encode_value(frame.roughness),
    }


def contact_sheet(rows: Sequence[Sequence[np.ndarray]], labels: Sequence[str],
                  tile_width: int = 240, pad: int = 4, label_height: int = 18,
                  row_labels: Optional[Sequence[str]] = None) -> np.ndarray:
    """Grid of ``uint8`` RGB tiles, one row per frame, with column labels on top.

    Args:
        rows: rows of ``H x W x 3`` uint8 images. Cells are ``tile_width`` wide and as
            high as the first tile at that width; each tile is resized to fit its cell
            keeping its aspect ratio, centred on the grey background (so rows of
            different aspect ratios stay aligned and undistorted).
        labels: one label per column.
        row_labels: optional text drawn at the top-left of each row's first tile.

    Returns:
        ``H x W x 3`` uint8 image.

    Raises:
        ValueError: empty input, a row whose length differs from ``labels``, or
            ``row_labels`` of another length than ``rows``.
    """
    import cv2

    if not rows:
        raise ValueError("contact_sheet: no rows")
    if row_labels is not None and len(row_labels) != len(rows):
        raise ValueError(f"contact_sheet: {len(row_labels)} row labels for {len(rows)} rows")
    ncol = len(labels)
    h0, w0 = rows[0][0].shape[:2]
    th = max(1, round(tile_width * h0 / w0))
    sheet_h = label_height + len(rows) * (th + pad) + pad
    sheet_w = ncol * (tile_width + pad) + pad
    sheet = np.full((sheet_h, sheet_w, 3), 24, np.uint8)
    for c, lab in enumerate(labels):
        x = pad + c * (tile_width + pad)
        cv2.putText(sheet, lab, (x + 2, label_height - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                    (235, 235, 235), 1, cv2.LINE_AA)
    for r, row in enumerate(rows):
        if len(row) != ncol:
            raise ValueError(f"contact_sheet: row {r} has {len(row)} tiles, expected {ncol}")
        y = label_height + pad + r * (th + pad)
        for c, tile in enumerate(row):
            h, w = tile.shape[:2]
            f = min(tile_width / w, th / h)
            tw, tth = max(1, min(tile_width, round(w * f))), max(1, min(th, round(h * f)))
            x = pad + c * (tile_width + pad) + (tile_width - tw) // 2
            yy = y + (th - tth) // 2
            sheet[yy:yy + tth, x:x + tw] = resize(tile, (tw, tth), "area")
        if row_labels is not None:  # white on a dark outline: readable on any tile
            for colour, thick in (((0, 0, 0), 3), ((255, 255, 255), 1)):
                cv2.putText(sheet, str(row_labels[r]), (pad + 4, y + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                            colour, thick, cv2.LINE_AA)
    return sheet


def save_png(path, rgb_u8: np.ndarray) -> None:
    """Write an ``H x W x 3`` uint8 sRGB image as PNG (Pillow)."""
    from PIL import Image

    Image.fromarray(rgb_u8).save(str(path))


__all__: List[str] = ["encode_colour", "encode_depth", "encode_normal", "encode_value",
                      "encode_frame_passes", "contact_sheet", "save_png"]
