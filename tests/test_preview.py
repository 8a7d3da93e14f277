"""Display encodings and contact sheets (backend.preview)."""
import numpy as np
import pytest

from backend import preview


def test_normal_encoding_maps_camera_axes_to_colours():
    n = np.zeros((2, 3, 3), np.float32)
    n[0, :, 2] = 1.0  # toward the camera
    n[1, :, 0] = 1.0  # right
    out = preview.encode_normal(n)
    assert out.dtype == np.uint8 and out.shape == (2, 3, 3)
    assert tuple(out[0, 0]) == (128, 128, 255)
    assert tuple(out[1, 0]) == (255, 128, 128)


def test_colour_encoding_is_srgb():
    lin = np.full((1, 1, 3), 0.214041, np.float32)  # sRGB 0.5
    assert abs(int(preview.encode_colour(lin)[0, 0, 0]) - 128) <= 1


def test_depth_encoding_near_differs_from_far_and_masks_sky():
    d = np.tile(np.linspace(1, 50, 32, dtype=np.float32), (8, 1))
    mask = np.ones_like(d, bool)
    mask[:, -4:] = False
    out = preview.encode_depth(d, mask)
    assert (out[:, -4:] == 0).all()
    near, far = out[0, 0].astype(int), out[0, -6].astype(int)
    assert near[0] > near[2]  # TURBO: near (high inverse depth) is red
    assert far[2] > far[0]    # far is blue


def test_contact_sheet_layout_and_errors():
    tile = np.full((30, 40, 3), 200, np.uint8)
    sheet = preview.contact_sheet([[tile, tile], [tile, tile]], ["a", "b"], tile_width=80, pad=2, label_height=10)
    assert sheet.shape == (10 + 2 * (60 + 2) + 2, 2 * (80 + 2) + 2, 3)
    assert (sheet[12:70, 2:82] == 200).all()
    with pytest.raises(ValueError):
        preview.contact_sheet([[tile]], ["a", "b"])
    with pytest.raises(ValueError):
        preview.contact_sheet([], ["a"])
    with pytest.raises(ValueError, match="row labels"):
        preview.contact_sheet([[tile, tile]], ["a", "b"], row_labels=["x", "y"])


def test_contact_sheet_keeps_aspect_of_other_rows():
    """A wider second row is letterboxed into the cell (not stretched), centred, and its
    columns stay under the header of the first row's columns."""
    tile = np.full((30, 40, 3), 200, np.uint8)
    wide = np.full((20, 80, 3), 100, np.uint8)  # 4:1 in 80 x 60 cells -> 80 x 20, centred
    sheet = preview.contact_sheet([[tile, tile], [wide, wide]], ["a", "b"], tile_width=80, pad=2,
                                  label_height=10, row_labels=["first", "second"])
    y0 = 10 + 2 + 62  # second row's cell top
    cell = sheet[y0:y0 + 60, 84:164]  # second column
    rows_with_tile = np.where((cell == 100).all(-1).all(-1))[0]
    assert rows_with_tile.min() == 20 and rows_with_tile.max() == 39
    assert (cell[:20] == 24).all() and (cell[40:] == 24).all()
    # the row label is drawn into the first tile (white text pixels)
    assert (sheet[y0:y0 + 16, 2:82] > 150).any() and not (sheet[y0:y0 + 16, 84:164] > 150).any()
