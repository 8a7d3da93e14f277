"""The G-buffer contract: bit-exact OpenEXR round trip, header, docs, Blender 5.0 / 4.5 sockets."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest

from backend import contract
from backend.jobs.decompose import decompose
from bpy_util import REPO_ROOT, run_bpy, venv_python
from decompose_util import register_tiny
from footage_util import gradient_rgb, write_movie
from gbuffer_util import random_frame

register_tiny()

EXPECTED_SOCKETS = [
    ("Combined", "RGBA"), ("Alpha", "VALUE"), ("Depth", "VALUE"), ("Normal", "VECTOR"),
    ("Albedo", "RGBA"), ("Confidence", "VALUE"), ("Metallic", "VALUE"), ("Roughness", "VALUE"),
]

SOCKETS_SNIPPET = """
import bpy, sys
first = {first!r}
img = bpy.data.images.load(first)
img.source = "SEQUENCE"
ng = bpy.data.node_groups.new("contract_check", "CompositorNodeTree")
node = ng.nodes.new("CompositorNodeImage")
node.image = img
node.frame_duration = {n}
out = []
for frame in range(1, {n} + 1):
    node.frame_offset = frame - 1
    out.append([(s.name, s.type) for s in node.outputs if s.enabled])
emit_result({{"version": bpy.app.version_string, "layer": node.layer,
              "has_layers": bool(node.has_layers), "sockets": out, "source": img.source}})
"""


@pytest.fixture(scope="module")
def gbuffer_seq(tmp_path_factory):
    """A 3-frame contract sequence written by the decompose job (tiny test estimator)."""
    d = tmp_path_factory.mktemp("contract")
    frames = []
    for t in range(3):
        f = gradient_rgb(24, 40, t)
        f[:4] = 255  # sky band -> Confidence 0
        frames.append(f)
    src = write_movie(d / "src.mp4", frames, options={"crf": "1"})
    out = d / "gbuf"
    decompose(src, out, estimator="tiny", max_size=None, stream=io.StringIO())
    return out


def test_openexr_round_trip_is_bit_exact(tmp_path):
    import OpenEXR

    fr = random_frame()
    p = contract.write_frame(contract.frame_path(tmp_path, 5), fr)
    assert p.name == "gbuffer_0005.exr"
    with OpenEXR.File(str(p), separate_channels=True) as f:  # one part per pass (issue 38)
        chans = {k: np.asarray(v.pixels) for part in f.parts for k, v in part.channels.items()}
        assert [part.name() for part in f.parts] == [f"GBuffer.{n}" for n in fr.arrays()]
    with OpenEXR.File(str(p), header_only=True) as f:
        hdr = dict(f.header())  # copy: the file object's header is gone after close
    want = {}
    for name, arr in fr.arrays().items():
        suffixes, dtype, _ = contract.PASSES[name]
        arr = arr if arr.ndim == 3 else arr[..., None]
        for i, s in enumerate(suffixes):
            want[f"GBuffer.{name}.{s}"] = arr[..., i].astype(dtype)
    assert set(chans) == set(want)
    for k, v in want.items():
        assert chans[k].dtype == v.dtype, k
        np.testing.assert_array_equal(chans[k].view(np.uint8), v.view(np.uint8), err_msg=k)  # bits
    assert hdr["compression"] == OpenEXR.ZIP_COMPRESSION and hdr["type"] == OpenEXR.scanlineimage
    assert hdr["gbuffer/contract_version"] == "1.0" and hdr["gbuffer/depth_kind"] == "metric"
    back = contract.read_frame(p)
    np.testing.assert_array_equal(back.depth, fr.depth)  # float32 passes exact
    np.testing.assert_array_equal(back.normal, fr.normal.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(back.albedo, fr.albedo.astype(np.float16).astype(np.float32))
    assert back.meta["models"] == {"m": "rev1"} and back.meta["intrinsics"] == [10, 10, 4.5, 3.5]
    # writing the read frame again gives identical pixels
    p2 = contract.write_frame(tmp_path / "again_0001.exr", back)
    c2, _ = contract.read_channels(p2)
    for k in want:
        np.testing.assert_array_equal(c2[k].view(np.uint8), chans[k].view(np.uint8))


def test_frame_size_and_meta_from_the_header(tmp_path):
    p = contract.write_frame(contract.frame_path(tmp_path, 1), random_frame(h=7, w=9))
    assert contract.frame_size(p) == (9, 7)  # (width, height)
    assert contract.read_meta(p)["estimator"] == "test"
    bad = tmp_path / "gbuffer_0002.exr"
    bad.write_bytes(b"not an exr")
    with pytest.raises(contract.ContractError, match="gbuffer_0002.exr"):
        contract.frame_size(bad)

def test_decompose_output_header_and_sky(gbuffer_seq):
    files = contract.list_frames(gbuffer_seq)
    assert list(files) == [1, 2, 3]
    for n, p in files.items():
        fr = contract.read_frame(p, validate=True)
        m = fr.meta
        for key in ("contract_version", "estimator", "models", "depth_kind", "depth_near", "depth_far",
                    "source", "frame_index", "timestamp", "source_colorspace", "intrinsics"):
            assert key in m, key
        assert m["contract_version"] == "1.0" and m["frame_index"] == n - 1
        sky = fr.confidence == 0
        assert sky.any() and (~sky).any()
        assert np.all(fr.depth[sky] == m["depth_far"])
        assert np.all(fr.normal[sky] == np.float32(contract.SKY_NORMAL))
    man = contract.read_manifest(gbuffer_seq)
    assert man["contract_version"] == contract.CONTRACT_VERSION and man["complete"]


def test_doc_matches_contract_module():
    doc = (REPO_ROOT / "docs" / "gbuffer-contract.md").read_text(encoding="utf-8")
    assert f"version {contract.CONTRACT_VERSION}" in doc.splitlines()[0]
    rows = re.findall(r"^\| `(\w+)` \| `([A-Z ]+)` \| (half|float) \| `(\w+)`", doc, re.M)
    table = {name: (tuple(ch.split()), {"half": np.float16, "float": np.float32}[d], sock)
             for name, ch, d, sock in rows}
    assert table == {k: (v[0], v[1], v[2]) for k, v in contract.PASSES.items()}
    assert f"`RELATIVE_NEAR = {contract.RELATIVE_NEAR:g}`" in doc
    assert f"`RELATIVE_FAR = {contract.RELATIVE_FAR:g}`" in doc
    assert f"`{contract.FILE_PREFIX}NNNN.exr`" in doc


def _check_sockets(res, n):
    assert res["layer"] == contract.LAYER and res["has_layers"] and res["source"] == "SEQUENCE"
    assert len(res["sockets"]) == n
    for socks in res["sockets"]:
        assert [tuple(s) for s in socks] == EXPECTED_SOCKETS


@pytest.mark.blender
def test_blender_image_node_sockets_in_process(gbuffer_seq):
    import bpy

    first = str(contract.frame_path(gbuffer_seq, 1))
    img = bpy.data.images.load(first, check_existing=False)
    img.source = "SEQUENCE"
    ng = bpy.data.node_groups.new("contract_check", "CompositorNodeTree")
    try:
        node = ng.nodes.new("CompositorNodeImage")
        node.image = img
        node.frame_duration = 3
        assert node.layer == contract.LAYER
        assert [(s.name, s.type) for s in node.outputs if s.enabled] == EXPECTED_SOCKETS
    finally:
        bpy.data.node_groups.remove(ng)
        bpy.data.images.remove(img)


@pytest.mark.parametrize("venv,version", [(".venv", "5.0"), (".venv45", "4.5")])
def test_blender_image_node_sockets_subprocess(gbuffer_seq, venv, version):
    py = venv_python(venv)
    if not py.exists():
        pytest.skip(f"{py} not installed")
    first = str(contract.frame_path(gbuffer_seq, 1))
    res = run_bpy(SOCKETS_SNIPPET.format(first=first, n=3), python=py, timeout=300)
    assert res["version"].startswith(version)
    _check_sockets(res, 3)
