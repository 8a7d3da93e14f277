"""View-dependent appearance across calibrated frames (issue 25, item 2): a textured
plane seen by three cameras. A Lambertian plane looks the same from every view
(specularity ~0, diffuse = its colour); a view-dependent sheen is measured; points
hidden in a view are not observations."""
import numpy as np
import pytest

from backend.geometry import backproject
from backend.multiview.cameras import Camera
from backend.multiview.materials import gather_observations, view_dependence

H, W, F = 48, 64, 60.0


def _cam(x):
    """OpenCV world-to-camera pose of a camera at (x, 0, 0) looking down +Z (identity R)."""
    return Camera(W, H, F, F, W / 2, H / 2, R=np.eye(3), t=-np.array([x, 0.0, 0.0]))


def _render(cam, colour_fn, depth_plane=4.0):
    """A fronto-parallel plane at Z = depth_plane seen by ``cam``: planar depth and colour."""
    depth = np.full((H, W), depth_plane, np.float32)
    pc = backproject(depth, cam.intrinsics) * np.float32([1, -1, -1])  # OpenCV camera axes
    X = pc - cam.t.astype(np.float32)  # R = I
    return depth, colour_fn(X, cam).astype(np.float32)


def _texture(X, cam):
    u = (np.floor(X[..., 0] * 0.8) + np.floor(X[..., 1] * 0.8)) % 2
    return np.stack([0.2 + 0.5 * u, 0.3 * np.ones_like(u), 0.6 - 0.4 * u], -1)


def test_lambertian_plane_has_no_specularity_and_its_colour_is_the_diffuse():
    cams = [_cam(x) for x in (-0.3, 0.0, 0.3)]
    shots = [_render(c, _texture) for c in cams]
    obs, valid = gather_observations(1, [s[1] for s in shots], [s[0] for s in shots], cams)
    assert obs.shape == (3, H, W, 3) and valid[1].all()
    assert valid[0].mean() > 0.7 and valid[2].mean() > 0.7  # the side views see most of it
    diffuse, spec, n = view_dependence(obs, valid)
    inner = n == 3
    # nearest-pixel lookups shift texture edges by up to a pixel: look away from them
    edge = np.zeros((H, W), bool)
    tex = _texture(backproject(shots[1][0], cams[1].intrinsics) * np.float32([1, -1, -1]), cams[1])[..., 0]
    edge[:, 1:] |= tex[:, 1:] != tex[:, :-1]
    edge[1:, :] |= tex[1:, :] != tex[:-1, :]
    import cv2

    edge = cv2.dilate(edge.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    far = inner & ~edge
    assert far.mean() > 0.2
    assert float(spec[far].max()) < 1e-5
    np.testing.assert_allclose(diffuse[far], shots[1][1][far], atol=1e-6)


def test_a_sheen_that_moves_with_the_view_is_measured():
    def sheen(X, cam):  # brighter where the view ray is closest to the plane normal
        c = -cam.t[0]
        return _texture(X, cam) * (1.0 + 2.0 * np.exp(-((X[..., 0] - c) ** 2) / 0.05))[..., None]

    cams = [_cam(x) for x in (-0.3, 0.0, 0.3)]
    shots = [_render(c, sheen) for c in cams]
    diffuse, spec, n = view_dependence(*gather_observations(1, [s[1] for s in shots], [s[0] for s in shots], cams))
    centre = (n == 3)
    centre[:, : W // 2 - 3] = False
    centre[:, W // 2 + 3:] = False
    assert float(np.median(spec[centre])) > 0.4  # bright in the middle view only
    # the diffuse estimate drops the sheen (within the texture's own contrast)
    assert float((diffuse[centre] @ np.float32([0.2126, 0.7152, 0.0722])).max()) < 0.6


def test_occluded_points_are_not_observations_and_bad_input_is_refused():
    cams = [_cam(x) for x in (-0.3, 0.0, 0.3)]
    shots = [_render(c, _texture) for c in cams]
    d0 = shots[0][0].copy()
    d0[:, :] = 2.0  # view 0 sees something nearer everywhere: nothing of the plane
    obs, valid = gather_observations(1, [s[1] for s in shots], [d0, shots[1][0], shots[2][0]], cams)
    assert not valid[0].any() and valid[1].all()
    _, spec, n = view_dependence(obs, valid)
    assert n.max() == 2 and float(spec.max()) == 0.0  # fewer than 3 views: no claim
    with pytest.raises(ValueError):
        gather_observations(3, [s[1] for s in shots], [s[0] for s in shots], cams)


def test_surface_patches_pool_sparse_view_dependence():
    """Two planes meeting at a crease and a depth step: three patches; a reflection seen
    in a few pixels of one patch marks the whole patch, not the others."""
    from backend.multiview.materials import region_specularity, surface_regions

    h, w = 40, 60
    depth = np.full((h, w), 4.0, np.float32)
    depth[:, 40:] = 6.0  # a depth step
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = 1.0
    normal[20:, :40] = (0.0, 0.7071, 0.7071)  # a crease at row 20 (45 degrees)
    mask = np.ones((h, w), bool)
    mask[:, 55:] = False
    lab = surface_regions(depth, normal, mask)
    assert len(set(np.unique(lab)) - {0}) == 3 and (lab[:, 55:] == 0).all()
    a, b, c = lab[5, 5], lab[30, 5], lab[5, 45]
    assert len({a, b, c}) == 3 and 0 not in (a, b, c)
    spec = np.zeros((h, w), np.float32)
    spec[2:6, 10:14] = 0.8  # 16 of the first patch's ~780 pixels
    reg = region_specularity(spec, lab, q=98)
    assert float(reg[lab == a].min()) > 0.5 and float(reg[lab == b].max()) == 0.0 == float(reg[lab == c].max())
    assert float(reg[lab == 0].max()) == 0.0
