"""Benchmark: Depth Anything V2 Small on ONNX Runtime (CPU) beside the embedded estimator.

The published weights cannot be downloaded here, so the FULL-SIZE architecture (the
configuration of ``depth-anything/Depth-Anything-V2-Small-hf``: DINOv2-S/14 backbone, 12
layers, 384 wide, DPT head; 24.8 M parameters) is built with random weights by
``transformers``, exported to ONNX with the published export's input/output names
(``pixel_values`` -> ``predicted_depth``) into a temporary folder (about 100 MB, never kept),
optionally quantised to int8 with onnxruntime's dynamic quantisation (what the published
``model_quantized.onnx`` is), and run through the product's estimator. Speed does not depend on
the weights' values.

Each configuration runs in a fresh process (peak RSS is its own):

* ``predict``: seconds per frame of ``Estimator.predict`` on real frames of ``boat.mp4``
  downscaled so the long side is 518 px (the network input is 518 x 294), median of the
  frames after the first;
* ``decompose``: the whole decompose job on 8 frames of ``boat.mp4`` (960x540 EXR output),
  frames per second after the first frame, and the job's wall time.

Usage: ``python benchmarks/onnx_depth.py [--frames 8] [--threads 2]``. Prints a table and
writes ``benchmarks/results/onnx_depth.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
REPO_ID = "onnx-community/depth-anything-v2-small"
COMMIT = "b" * 40
SHARED = Path(os.environ.get("GBUFFER_SHARED_DIR", ROOT.parent / "shared"))


def full_size_model(seed: int = 0):
    """Depth Anything V2 Small's architecture with random weights (torch, transformers)."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

    backbone = Dinov2Config(hidden_size=384, num_attention_heads=6, num_hidden_layers=12, image_size=518,
                            patch_size=14, out_indices=[3, 6, 9, 12], reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=384,
                                 neck_hidden_sizes=[48, 96, 192, 384], fusion_hidden_size=64,
                                 head_hidden_size=32, patch_size=14, reassemble_factors=[4, 2, 1, 0.5])
    torch.manual_seed(seed)
    return DepthAnythingForDepthEstimation(config).eval()


def build_models(folder: Path, height: int, width: int) -> dict:
    """Export fp32 (and int8) into a hub-cache layout under ``folder``; returns facts."""
    import torch

    model = full_size_model()
    params = sum(p.numel() for p in model.parameters())
    onnx_fp32 = folder / "export" / "model.onnx"
    onnx_fp32.parent.mkdir(parents=True)
    t = time.perf_counter()
    torch.onnx.export(model, (torch.rand(1, 3, height, width),), str(onnx_fp32), input_names=["pixel_values"],
                      output_names=["predicted_depth"],
                      dynamic_axes={"pixel_values": {0: "batch_size", 2: "height", 3: "width"},
                                    "predicted_depth": {0: "batch_size", 1: "height", 2: "width"}},
                      opset_version=17, dynamo=False)
    export_s = time.perf_counter() - t
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx_int8 = folder / "export" / "model_quantized.onnx"
    quantize_dynamic(str(onnx_fp32), str(onnx_int8), weight_type=QuantType.QUInt8)
    cache = folder / "cache"
    snap = cache / ("models--" + REPO_ID.replace("/", "--")) / "snapshots" / COMMIT / "onnx"
    snap.mkdir(parents=True)
    os.link(onnx_fp32, snap / "model.onnx")
    os.link(onnx_int8, snap / "model_quantized.onnx")
    (snap.parents[2] / "refs").mkdir()
    (snap.parents[2] / "refs" / "main").write_text(COMMIT)
    return {"cache": str(cache), "parameters": params, "export_s": round(export_s, 1),
            "fp32_mb": round(onnx_fp32.stat().st_size / 2**20, 1),
            "int8_mb": round(onnx_int8.stat().st_size / 2**20, 1)}


def child(spec: dict) -> dict:
    """One configuration, in this (fresh) process."""
    import numpy as np

    from backend.estimators import get_estimator
    from backend.footage import fit_long_side, open_footage
    from backend.imaging import resize

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HUB_CACHE"] = spec["cache"]
    opts = dict(spec.get("options", {}))
    t = time.perf_counter()
    est = get_estimator(spec["estimator"], **opts)
    load_s = time.perf_counter() - t
    times = []
    with open_footage(spec["clip"]) as src:
        for i, sf in enumerate(src):
            if i >= spec["frames"]:
                break
            h, w = sf.rgb.shape[:2]
            pw, ph = fit_long_side(w, h, spec["resolution"])
            small = resize(sf.rgb, (pw, ph), "area")
            t = time.perf_counter()
            est.predict(small)
            times.append(time.perf_counter() - t)
    out = {"load_s": load_s, "predict_s": float(np.median(times[1:])) if len(times) > 1 else times[0],
           "predict_first_s": times[0], "processing_size": [pw, ph]}
    if spec.get("decompose"):
        from backend.jobs.decompose import decompose

        stamps = []

        def tap(ev):
            if ev.get("event") == "progress":
                stamps.append(time.perf_counter())

        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            decompose(spec["clip"], Path(tmp) / "gb", frames=f"1-{spec['frames']}", estimator=spec["estimator"],
                      estimator_options=opts, processing_resolution=spec["resolution"], progress=tap)
            out["decompose_wall_s"] = time.perf_counter() - t
        out["decompose_steady_fps"] = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM`` (reset by exec, unlike
    ``ru_maxrss``, which Linux carries over from the parent that held the exported model)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_child(spec: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clip", default=str(SHARED / "footage" / "boat.mp4"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    from backend.estimators.onnx_depth import network_size
    from backend.footage import fit_long_side, open_footage

    with open_footage(args.clip) as src:
        w, h = src.info.width, src.info.height
    pw, ph = fit_long_side(w, h, 518)
    nh, nw = network_size(ph, pw)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        facts = build_models(Path(tmp), nh, nw)
        base = {"clip": args.clip, "frames": args.frames, "cache": facts["cache"]}
        configs = [
            ("embedded (192 px)", {"estimator": "embedded", "resolution": 192, "options": {"threads": args.threads}}),
            ("depth-anything-v2-small fp32, depth only", {"estimator": "depth-anything-v2-small", "resolution": 518,
             "options": {"threads": args.threads, "materials": "none", "variant": "fp32", "fit": "frame"}}),
            # the file built above is model_quantized.onnx (unsigned 8-bit weights): variant uint8 since
            # issue 26 (int8 is model_int8.onnx, signed); fit=frame: the 294 x 518 network these rows measured
            ("depth-anything-v2-small int8, depth only", {"estimator": "depth-anything-v2-small", "resolution": 518,
             "options": {"threads": args.threads, "materials": "none", "variant": "uint8", "fit": "frame"}}),
            ("depth-anything-v2-small fp32 + embedded materials", {"estimator": "depth-anything-v2-small",
             "resolution": 518, "options": {"threads": args.threads, "variant": "fp32", "fit": "frame"}}),
        ]
        for label, cfg in configs:
            spec = dict(base, **cfg, decompose=True)
            res = run_child(spec)
            res.update(label=label, estimator=cfg["estimator"], options=cfg["options"])
            rows.append(res)
            print(f"  {label}: {res['predict_s']:.3f} s/frame", flush=True)
    report = {
        "what": "Depth Anything V2 Small, full-size architecture with random weights, exported to ONNX and run "
                "by onnxruntime on the CPU, beside the embedded estimator; boat.mp4 frames",
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "load_average_1_5_15_min_at_end": [round(v, 2) for v in os.getloadavg()]},
        "clip": {"path": args.clip, "size": [w, h]},
        "network_input": [nh, nw],
        "model": {k: v for k, v in facts.items() if k != "cache"},
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "onnx_depth.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nclip {w}x{h}, {args.frames} frames, {args.threads} onnxruntime threads; network input {nw}x{nh}; "
          f"{facts['parameters'] / 1e6:.1f} M parameters, ONNX fp32 {facts['fp32_mb']} MB, int8 {facts['int8_mb']} MB\n")
    print("| estimator | processing size | s/frame (predict) | first frame | load | decompose fps (steady) "
          "| decompose wall | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['processing_size'][0]}x{r['processing_size'][1]} | {r['predict_s']:.3f} | "
              f"{r['predict_first_s']:.2f} s | {r['load_s']:.2f} s | {r['decompose_steady_fps']:.2f} | "
              f"{r['decompose_wall_s']:.1f} s | {r['peak_rss_mb']:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
