"""Export a trained checkpoint to the shipped files and check ONNX against torch.

Usage::

    python -m training.export_onnx training/runs/main/best.pt [--out backend/model/weights]

Writes (atomically) into ``--out``:

* ``embedded.onnx``: inference graph, opset 17, input ``image`` (``1 x 3 x H x W``
  float32, see :mod:`backend.model.encoding`), dynamic H/W; outputs in
  :data:`backend.model.net.OUTPUT_NAMES` order; BatchNorm folded into convs by
  onnxruntime at load time;
* ``embedded.safetensors``: the torch state dict (source for fine-tuning; load with
  :func:`load_safetensors`);
* ``embedded.json``: architecture config, input encoding, stride, outputs, training
  data and run summary, git hash, and the ONNX-vs-torch check result.

The check runs both on two random-content inputs (odd sizes) and fails with exit code 1
if any output differs by more than :data:`TOLERANCE` (max abs).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from backend.model import encoding
from backend.model.net import OUTPUT_NAMES, ExportWrapper, GBufNet, NetConfig, count_params

#: max abs difference allowed between torch (fp32, eval) and onnxruntime outputs
TOLERANCE = 1e-3
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "backend" / "model" / "weights"


def load_checkpoint(path) -> tuple:
    ck = torch.load(path, map_location="cpu", weights_only=False)
    cfg = NetConfig(**ck.get("config", {}))
    net = GBufNet(cfg)
    net.load_state_dict(ck["model"])
    net.eval()
    return net, ck


def load_safetensors(path) -> GBufNet:
    """Build :class:`GBufNet` from ``embedded.safetensors`` + its sibling ``embedded.json``."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg = json.loads(path.with_suffix(".json").read_text())["net_config"]
    net = GBufNet(NetConfig(**cfg))
    net.load_state_dict(load_file(str(path)))
    net.eval()
    return net


def export_onnx(net: GBufNet, path: Path, opset: int = 17) -> None:
    wrapper = ExportWrapper(net).eval()
    x = torch.randn(1, 3, 96, 128)
    tmp = path.with_name(".tmp_" + path.name)
    torch.onnx.export(
        wrapper, (x,), str(tmp), input_names=["image"], output_names=list(OUTPUT_NAMES),
        dynamic_axes={"image": {2: "height", 3: "width"}, **{k: {2: "height", 3: "width"} for k in OUTPUT_NAMES}},
        opset_version=opset, dynamo=False, do_constant_folding=True,
    )
    os.replace(tmp, path)


def check_onnx(net: GBufNet, onnx_path: Path, sizes=((37, 53), (120, 161))) -> float:
    """Max abs difference over all outputs between torch and onnxruntime."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst = 0.0
    for h, w in sizes:
        x = rng.normal(0, 1, (1, 3, h, w)).astype(np.float32)
        with torch.no_grad():
            t = net(torch.from_numpy(x))
        o = sess.run(list(OUTPUT_NAMES), {"image": x})
        for name, arr in zip(OUTPUT_NAMES, o):
            assert arr.shape == tuple(t[name].shape), (name, arr.shape, t[name].shape)
            worst = max(worst, float(np.abs(arr - t[name].numpy()).max()))
    return worst


def git_hash() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                                       text=True, stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--data-note", default="", help="free text on the training data for embedded.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    net, ck = load_checkpoint(args.checkpoint)

    from safetensors.torch import save_file

    onnx_path = out / "embedded.onnx"
    export_onnx(net, onnx_path)
    st_tmp = out / ".tmp_embedded.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(st_tmp))
    os.chmod(st_tmp, 0o644)
    os.replace(st_tmp, out / "embedded.safetensors")
    diff = check_onnx(net, onnx_path)
    sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    state = ck.get("state", {})
    cfg = {
        "name": "gbuffer_editor/embedded",
        "arch": "GBufNet (residual U-Net, CoordConv input, global context, 4 heads)",
        "net_config": net.config.to_dict(),
        "params": count_params(net),
        "input": {
            "name": "image", "layout": "N x 3 x H x W float32, any H, W >= 1",
            "encoding": "scene-linear RGB x auto-exposure gain (97th luminance percentile -> "
                        f"{encoding.EXPOSURE_TARGET}), clip [0,1], sRGB OETF, (x - {encoding.INPUT_MEAN}) / "
                        f"{encoding.INPUT_STD}",
            "mean": encoding.INPUT_MEAN, "std": encoding.INPUT_STD,
            "exposure_percentile": encoding.EXPOSURE_PERCENTILE, "exposure_target": encoding.EXPOSURE_TARGET,
        },
        "stride": encoding.STRIDE,
        "outputs": {
            "disparity": "relative inverse depth >= 0, affine-invariant", "normal": "unit camera-space OpenGL",
            "albedo": "linear 0..1", "metallic": "0..1", "roughness": "0..1", "sky": "probability 0..1",
        },
        "onnx": {"file": "embedded.onnx", "opset": 17, "sha256": sha,
                 "max_abs_diff_vs_torch": diff, "tolerance": TOLERANCE},
        "training": {
            "checkpoint": str(args.checkpoint), "steps": state.get("step"),
            "wall_s": round(float(state.get("elapsed", 0.0)), 1),
            "best_val": state.get("best_val"), "args": ck.get("args", {}),
            "data": args.data_note,
        },
        "git": git_hash(),
    }
    tmp = out / ".tmp_embedded.json"
    tmp.write_text(json.dumps(cfg, indent=2))
    os.replace(tmp, out / "embedded.json")
    sizes = {p.name: p.stat().st_size for p in out.glob("embedded.*")}
    print(json.dumps({"max_abs_diff": diff, "tolerance": TOLERANCE, "sha256": sha[:16], "sizes": sizes}))
    if diff > TOLERANCE:
        print(f"ONNX output differs from torch by {diff} > {TOLERANCE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
