"""Our frames in Blender (issue 38): every pass on one Image node, and Blender's Vector
Blur driven by our Vector pass on a restyled clip.

Runs in bpy 5.0.1 (.venv) and bpy 4.5 (.venv45): `./dev test` runs ``blender`` tests in both.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.blender

bpy = pytest.importorskip("bpy")

import studio_blender_util as sb  # noqa: E402
from backend import contract, decompose, restyle, temporal  # noqa: E402
from footage_util import write_movie  # noqa: E402
from test_studio_passes import _texture  # noqa: E402

SPEED = 6  # pixels per frame, to the right


@pytest.fixture(scope="module")
def pan(tmp_path_factory):
    """A 4-frame pan (content moving 6 px right per frame), decomposed with the Vector and
    Position passes, and restyled ("dense fog")."""
    d = tmp_path_factory.mktemp("pan")
    big = _texture(160, 200)
    frames = [(np.clip(big[40:136, 40 - SPEED * i:40 - SPEED * i + 128], 0, 1) * 255 + 0.5).astype(np.uint8)
              for i in range(4)]
    clip = write_movie(d / "pan.mp4", frames, rate=24, options={"crf": "1"})
    decompose(clip, d / "gb", estimator="embedded", passes="vector,position")
    restyle(d / "gb", d / "fog", prompt="dense fog")
    return d


def test_every_pass_on_one_image_node(pan):
    sc, tree = sb.new_scene("studio_sockets", 128, 96)
    try:
        node = sb.image_node(tree, contract.frame_path(pan / "gb", 2))
        got = sb.sockets(node)
        want = {k: v[2] for k, v in contract.PASSES.items()}
        want.update(Vector="VECTOR", Position="VECTOR")
        assert {k: got.get(k) for k in want} == want, got
        assert node.image.type == "MULTILAYER"
    finally:
        bpy.data.scenes.remove(sc)


def _box_x(img, n):
    import cv2

    return cv2.filter2D(img, -1, np.ones((1, n), np.float32) / n, borderType=cv2.BORDER_REPLICATE)


def test_vector_blur_with_our_motion_pass_on_a_restyled_clip(pan, tmp_path):
    """Blender's Vector Blur (shutter 0.5) on restyled frame 2, fed with the G-buffer's
    Depth and Vector: the result matches a horizontal box blur of 0.5 x 6 = 3 px (the
    motion over the shutter), far better than a vertical one or no blur."""
    sc, tree = sb.new_scene("studio_vecblur", 128, 96)
    try:
        out_path = sorted((pan / "fog").rglob("restyle_0002.exr"))[0]
        img = sb.image_node(tree, out_path)
        gb = sb.image_node(tree, contract.frame_path(pan / "gb", 2))
        vb = sb.vector_blur(tree, img.outputs["Image"], gb.outputs["Depth"], gb.outputs["Vector"])
        tree.links.new(vb.outputs[0], sb.output_socket(tree))
        sb.render_to_exr(sc, tmp_path / "blurred.exr")
    finally:
        bpy.data.scenes.remove(sc)
    chans, _ = contract.read_channels(tmp_path / "blurred.exr")
    got = np.stack([chans[c] for c in "RGB"], -1).astype(np.float32)
    src_chans, _ = contract.read_channels(out_path)
    src = np.stack([src_chans[c] for c in "RGB"], -1).astype(np.float32)
    inner = (slice(10, -10), slice(16, -16))
    import cv2

    err = {name: float(np.abs(got - ref)[inner].mean()) for name, ref in {
        "3 px horizontal": _box_x(src, 3), "3 px vertical": cv2.filter2D(
            src, -1, np.ones((3, 1), np.float32) / 3, borderType=cv2.BORDER_REPLICATE), "none": src}.items()}
    # the flow's own warping error on the same frames: how well the motion is known
    f1 = contract.read_frame(contract.frame_path(pan / "gb", 1)).combined[..., :3]
    f2 = contract.read_frame(contract.frame_path(pan / "gb", 2)).combined[..., :3]
    b = temporal.optical_flow(f2, f1)
    warp_err = float(np.abs(temporal.warp(f1, b) - f2)[inner].mean())
    print(f"\nVector Blur vs references (mean abs, linear): {err}; flow warping error {warp_err:.2e} "
          f"(source frame values {float(f2[inner].mean()):.3f} mean)")
    assert err["3 px horizontal"] < 0.35 * err["none"]
    assert err["3 px horizontal"] < 0.35 * err["3 px vertical"]


@pytest.fixture(scope="module")
def nuke_folder(pan):
    decompose(pan / "pan.mp4", pan / "nk", estimator="embedded", frames="1-2", layout="nuke",
              passes="position")
    return pan / "nk"


def test_nuke_layout_shows_every_pass_on_one_image_node(nuke_folder):
    """``--layout nuke`` (R G B A, depth.Z, normal.XYZ, albedo.RGB ... in one part): every
    pass is a socket of one Image node, the beauty as Combined."""
    pan = nuke_folder.parent
    sc, tree = sb.new_scene("studio_nuke", 128, 96)
    try:
        got = sb.sockets(sb.image_node(tree, contract.frame_path(pan / "nk", 2)))
    finally:
        bpy.data.scenes.remove(sc)
    assert got == {"Combined": "RGBA", "Alpha": "VALUE", "depth": "VALUE", "normal": "VECTOR", "albedo": "RGBA",
                   "metallic": "VALUE", "roughness": "VALUE", "confidence": "VALUE", "position": "VECTOR"}, got


def test_blender_50_reads_an_acescg_gbuffer_as_the_right_colour(tmp_path):
    """A G-buffer written with ``--working-space acescg`` (colour passes stated
    lin_ap1_scene): Blender 5.0 converts on load, so its compositor output equals the
    Rec.709 reference. Blender 4.x does not read colorInteropID (docs: use rec709 there)."""
    if not sb.IS_50:
        pytest.skip("Blender 4.x ignores colorInteropID; the ACEScg working space is for 5.0 and later")
    from test_studio_colour import _plate, _reference

    _plate(tmp_path / "plate", "lin_ap1_scene", chroma=True, interop_attr=True)
    decompose(tmp_path / "plate", tmp_path / "gb", estimator="embedded", working_space="acescg")
    sc, tree = sb.new_scene("studio_acescg", 64, 48)
    try:
        node = sb.image_node(tree, contract.frame_path(tmp_path / "gb", 1001))
        tree.links.new(node.outputs["Combined"], sb.output_socket(tree))
        sb.render_to_exr(sc, tmp_path / "out.exr")
    finally:
        bpy.data.scenes.remove(sc)
    chans, _ = contract.read_channels(tmp_path / "out.exr")
    got = np.stack([chans[c] for c in "RGB"], -1).astype(np.float32)
    assert float(np.abs(got - _reference()).max()) < 3e-3


def test_addon_wires_a_nuke_layout_folder_through_the_material_edits(nuke_folder):
    """The add-on's compositor setup finds every pass of a ``--layout nuke`` folder (its
    sockets are lower-case: ``depth``, ``normal`` ...) and wires it into the edits frame."""
    import blender_workflow_util as util

    util.enable_addon()
    sc = bpy.data.scenes.new("studio_wiring")
    try:
        from gbuffer_editor.addon import compositor

        node = compositor.setup_gbuffer(sc, nuke_folder, "Depth")
        tree = compositor.find_tree(sc)
        for name in contract.PASSES:
            r_in = compositor.find_node(tree, "in", name)
            links = r_in.inputs[0].links
            assert links and links[0].from_node == node, name
            assert links[0].from_socket.name in (name, name.lower()), name
    finally:
        bpy.data.scenes.remove(sc)
        util.disable_addon()
