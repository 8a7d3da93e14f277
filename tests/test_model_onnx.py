"""ONNX export of GBufNet matches torch (needs torch; skipped cleanly without it)."""
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from backend.model.net import OUTPUT_NAMES, GBufNet, NetConfig  # noqa: E402
from training.export_onnx import TOLERANCE, check_onnx, export_onnx  # noqa: E402

WEIGHTS = Path(__file__).resolve().parents[1] / "backend" / "model" / "weights"


def test_export_matches_torch_on_odd_sizes(tmp_path):
    torch.manual_seed(0)
    net = GBufNet(NetConfig(widths=[8, 12, 16, 20, 24], blocks=[1, 1, 1, 1, 1],
                            dec_widths=[20, 16, 12, 8], head_width=8)).eval()
    path = tmp_path / "m.onnx"
    export_onnx(net, path)
    assert check_onnx(net, path, sizes=((1, 1), (37, 53), (64, 33))) < TOLERANCE
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = sess.run(list(OUTPUT_NAMES), {"image": np.zeros((1, 3, 19, 7), np.float32)})
    assert [o.shape for o in outs] == [(1, 1, 19, 7), (1, 3, 19, 7), (1, 3, 19, 7),
                                       (1, 1, 19, 7), (1, 1, 19, 7), (1, 1, 19, 7)]


def test_shipped_safetensors_reproduces_shipped_onnx():
    from training.export_onnx import load_safetensors

    st = WEIGHTS / "embedded.safetensors"
    assert st.exists() and (WEIGHTS / "embedded.onnx").exists()
    net = load_safetensors(st)
    diff = check_onnx(net, WEIGHTS / "embedded.onnx", sizes=((45, 61),))
    assert diff < TOLERANCE
    cfg = json.loads((WEIGHTS / "embedded.json").read_text())
    assert cfg["onnx"]["max_abs_diff_vs_torch"] < cfg["onnx"]["tolerance"] == TOLERANCE
    total = sum((WEIGHTS / f).stat().st_size for f in ("embedded.onnx", "embedded.safetensors", "embedded.json"))
    assert total <= 30 * 2 ** 20
