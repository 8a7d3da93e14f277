"""One benchmark command: speed, memory and quality, side by side.

Usage::

    .venv/bin/python benchmarks/run.py [--out benchmarks/results] [--quick] [--skip-marigold]

Prints a markdown table, writes ``results.json``, ``results.md`` and PNG plots into
``--out``. Every job runs in a fresh child process (``benchmarks/_child.py``) so its
peak RSS (``ru_maxrss``) is its own. Machines are noisy: compare ratios measured in
the same run (embedded decompose vs a full-size Marigold architecture; EXR write vs a
raw write of the same bytes), not absolute numbers across machines.

Sections:

* decompose and restyle (embedded, CPU) fps + peak RSS at 960x540 and 1920x1080,
  on ``../shared/footage/dolphins.mp4`` (real 960x540 footage; upscaled for 1080p);
* memory against clip length: 16 vs 250 frames of ``bikes.mp4`` (must stay flat);
* the EXR ceiling: contract EXR write throughput vs raw disk write of the same bytes;
* Marigold size: the same decompose pipeline code (``backend.estimators.marigold``)
  with a full-size Stable-Diffusion-2-class UNet + VAE (published config sizes,
  random weights), 1 and 4 denoising steps at 768 px, on CPU (and CUDA if present);
* quality: the embedded model's evaluation (``training/evaluate.py`` results) and
  temporal flicker on the shared clips with and without stabilisation.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the shared data folder: GBUFFER_SHARED_DIR (GBUFFER_SHARED is an older alias)
SHARED = Path(os.environ.get("GBUFFER_SHARED_DIR") or os.environ.get("GBUFFER_SHARED") or ROOT.parent / "shared")
FOOTAGE = SHARED / "footage"


def _child(spec: dict) -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "_child.py"), json.dumps(spec)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({spec['job']}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _make_clip(src: Path, dst: Path, size: tuple, n: int) -> Path:
    """Re-encode ``n`` frames of ``src`` at ``size`` (w, h) to an H.264 mp4 (real pixels, resized)."""
    import av

    from backend.imaging import resize

    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        st = out.add_stream("libx264", rate=24)
        st.width, st.height = size
        st.pix_fmt = "yuv420p"
        st.options = {"crf": "18", "preset": "veryfast"}
        k = 0
        while k < n:
            for fr in inp.decode(video=0):
                img = resize(fr.to_ndarray(format="rgb24"), size, "cubic")
                for pkt in st.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    out.mux(pkt)
                k += 1
                if k >= n:
                    break
            inp.seek(0)
        for pkt in st.encode():
            out.mux(pkt)
    return dst


def bench_speed(tmp: Path, quick: bool) -> list:
    rows = []
    n = 8 if quick else 24
    clips = {
        "960x540": _make_clip(FOOTAGE / "dolphins.mp4", tmp / "d540.mp4", (960, 540), n),
        "1920x1080": _make_clip(FOOTAGE / "dolphins.mp4", tmp / "d1080.mp4", (1920, 1080), max(4, n // 3)),
    }
    for res, clip in clips.items():
        gb = tmp / f"gb_{res}"
        d = _child({"job": "decompose", "input": str(clip), "out": str(gb), "max_size": None})
        rows.append({"stage": "decompose", "resolution": res, **d})
        for prompt in ("dense fog", "underwater"):
            r = _child({"job": "restyle", "input": str(gb), "out": str(tmp / f"rs_{res}_{prompt[:3]}"),
                        "prompt": prompt})
            rows.append({"stage": f"restyle '{prompt}'", "resolution": res, **r})
    return rows


def bench_memory_vs_length(tmp: Path, quick: bool) -> list:
    rows = []
    for frames in ("1-16", "1-250") if not quick else ("1-8", "1-48"):
        d = _child({"job": "decompose", "input": str(FOOTAGE / "bikes.mp4"), "out": str(tmp / f"len_{frames}"),
                    "frames": frames, "max_size": None})
        rows.append({"frames_requested": frames, **d})
    return rows


def bench_exr_ceiling(tmp: Path, n: int = 12) -> dict:
    """Contract EXR write throughput vs raw ``write`` of the same uncompressed bytes (960x540)."""
    from backend import contract

    h, w = 540, 960
    # Smooth, image-like content (random noise would be an unfair worst case for ZIP).
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = (np.sin(xx / 37.0) * np.cos(yy / 23.0) * 0.5 + 0.5).astype(np.float32)
    n_ = np.dstack([np.zeros_like(base), np.zeros_like(base), np.ones_like(base)])
    fr = contract.GBufferFrame(
        combined=np.dstack([base, base * 0.8, base * 0.6, np.ones_like(base)]),
        depth=1.0 + 50.0 * base, normal=n_, albedo=np.dstack([base] * 3) * 0.9,
        metallic=(base > 0.9).astype(np.float32), roughness=0.3 + 0.4 * base,
        confidence=np.ones_like(base), meta=contract.make_meta(estimator="bench"))
    raw = b"".join(a.astype(contract.PASSES[k][1]).tobytes() for k, a in fr.arrays().items())
    d = tmp / "exr"
    d.mkdir()
    t0 = time.perf_counter()
    for i in range(n):
        contract.write_frame(contract.frame_path(d, i + 1), fr, validate=False)
    t_exr = time.perf_counter() - t0
    sizes = sum(p.stat().st_size for p in d.glob("*.exr"))
    t0 = time.perf_counter()
    for i in range(n):
        with open(d / f"raw_{i}.bin", "wb") as f:
            f.write(raw)
    t_raw = time.perf_counter() - t0
    return {
        "frame": "960x540, 7 passes (15 channels)",
        "raw_bytes_per_frame": len(raw),
        "exr_bytes_per_frame": sizes / n,
        "exr_fps": n / t_exr,
        "exr_mb_s_uncompressed_equiv": len(raw) * n / t_exr / 1e6,
        "raw_mb_s": len(raw) * n / t_raw / 1e6,
        "exr_vs_raw_ratio": t_raw / t_exr,
    }


def _local_tokenizer(folder: Path):
    """A CLIP tokenizer from a tiny vocabulary written here (no download); only the
    empty prompt is ever tokenised."""
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "a</w>": 2, "a": 3}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)


def _build_full_size_marigold(dst: Path) -> Path:
    """Save a MarigoldDepthPipeline with SD-2 sized UNet/VAE and random weights.

    UNet: SD 2.x config (block_out (320, 640, 1280, 1280), attention heads (5, 10, 20, 20),
    cross-attention 1024, linear projection) with Marigold's 8 input channels; VAE: the SD
    AutoencoderKL config (128, 256, 512, 512). The CLIP text encoder is only run once for an
    empty prompt, so a small one with the right hidden size (1024) stands in.
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, MarigoldDepthPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=96, in_channels=8, out_channels=4, layers_per_block=2,
        block_out_channels=(320, 640, 1280, 1280), attention_head_dim=(5, 10, 20, 20),
        cross_attention_dim=1024, use_linear_projection=True,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
                        block_out_channels=(128, 256, 512, 512),
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
    te = CLIPTextModel(CLIPTextConfig(hidden_size=1024, intermediate_size=1024, num_hidden_layers=1,
                                      num_attention_heads=8, vocab_size=1000, max_position_embeddings=77,
                                      projection_dim=1024, bos_token_id=0, eos_token_id=1, pad_token_id=1))
    tok = _local_tokenizer(dst.parent / "tok")
    sched = DDIMScheduler(prediction_type="v_prediction", timestep_spacing="trailing", clip_sample=False,
                          beta_schedule="scaled_linear", set_alpha_to_one=False)
    pipe = MarigoldDepthPipeline(unet=unet, vae=vae, scheduler=sched, text_encoder=te, tokenizer=tok,
                                 prediction_type="depth", scale_invariant=True, shift_invariant=True,
                                 default_denoising_steps=1, default_processing_resolution=768)
    pipe.save_pretrained(dst, safe_serialization=True)
    n_unet = sum(p.numel() for p in unet.parameters())
    n_vae = sum(p.numel() for p in vae.parameters())
    (dst / "bench_params.json").write_text(json.dumps({"unet": n_unet, "vae": n_vae}))
    return dst


def bench_marigold_ratio(tmp: Path, embedded_fps: float) -> list:
    import torch

    from backend.estimators.marigold import MarigoldEstimator
    from backend.footage import open_footage

    model = _build_full_size_marigold(tmp / "marigold_full")
    params = json.loads((model / "bench_params.json").read_text())
    with open_footage(FOOTAGE / "dolphins.mp4") as ft:
        rgb = next(iter(ft)).rgb
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for dev in devices:
        for steps in (1, 4):
            est = MarigoldEstimator(depth=str(model), normals=None, intrinsics=None, device=dev,
                                    num_inference_steps=steps, processing_resolution=768,
                                    local_files_only=True)
            if dev != "cpu":
                est.predict(rgb)  # warm-up (CUDA context, kernels); on the CPU it would only double the run
            t0 = time.perf_counter()
            est.predict(rgb)
            dt = time.perf_counter() - t0
            rows.append({"device": dev, "steps": steps, "processing_px": 768, "s_per_frame": dt,
                         "fps": 1.0 / dt, "embedded_over_marigold": embedded_fps * dt,
                         "unet_params_M": params["unet"] / 1e6, "vae_params_M": params["vae"] / 1e6})
    return rows


def _sequence_flicker(gb_dir: Path) -> float:
    """Mean warping error of the passes between consecutive frames (consistent pixels only)."""
    from backend import contract, temporal

    files = list(contract.list_frames(gb_dir).values())
    vals = []
    prev = None
    for p in files:
        fr = contract.read_frame(p)
        cur = {"depth": fr.depth, "normal": fr.normal, "albedo": fr.albedo,
               "metallic": fr.metallic, "roughness": fr.roughness}
        if prev is not None:
            pair = temporal.FlowPair.compute(prev[1][..., :3], fr.combined[..., :3])
            wp = temporal.warp_passes(prev[0], pair)
            f = temporal.flicker(cur, wp, pair.mask, fr.meta.get("depth_far", 100.0) - fr.meta.get("depth_near", 1.0))
            if "mean" in f:
                vals.append(f["mean"])
        prev = (cur, fr.combined)
    return float(np.mean(vals)) if vals else float("nan")


def bench_flicker(tmp: Path, quick: bool) -> list:
    rows = []
    for clip in ("boat.mp4", "dolphins.mp4", "bikes.mp4", "phone_office.mp4"):
        frames = "1-6" if quick else "1-16"
        row = {"clip": clip}
        for stab in (False, True):
            out = tmp / f"fl_{clip}_{stab}"
            _child({"job": "decompose", "input": str(FOOTAGE / clip), "out": str(out), "frames": frames,
                    "max_size": 480, "stabilize": stab})
            row["flicker_stabilized" if stab else "flicker_raw"] = _sequence_flicker(out)
        rows.append(row)
    return rows


def machine_info() -> dict:
    import importlib.metadata as md

    libs = {}
    for name in ("numpy", "onnxruntime", "OpenEXR", "av", "opencv-python-headless", "torch", "diffusers", "bpy"):
        try:
            libs[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "libraries": libs,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def _table(rows: list, cols: list) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def _plots(res: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sp = res.get("speed", [])
    labels = [f"{r['stage']}\n{r['resolution']}" for r in sp]
    axes[0].barh(labels, [r["steady_fps"] for r in sp], color="tab:blue")
    axes[0].set_xlabel("frames per second (steady state)")
    axes[0].set_title("Embedded decompose / restyle, CPU")
    ml = res.get("memory_vs_length", [])
    axes[1].bar([r["frames_requested"] for r in ml], [r["peak_rss_mb"] for r in ml], color="tab:orange")
    axes[1].set_ylabel("peak RSS (MB)")
    axes[1].set_title("Decompose memory vs clip length")
    fig.tight_layout()
    fig.savefig(out / "speed_memory.png", dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--quick", action="store_true", help="fewer frames (smoke run)")
    ap.add_argument("--skip-marigold", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite results.md and the plots from --out/results.json without measuring")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        return write_report(json.loads((out / "results.json").read_text()), out)
    res = {"machine": machine_info()}
    tmp = Path(tempfile.mkdtemp(prefix="gbuffer_bench_"))
    t_all = time.perf_counter()
    try:
        res["speed"] = bench_speed(tmp, args.quick)
        res["memory_vs_length"] = bench_memory_vs_length(tmp, args.quick)
        res["exr_ceiling"] = bench_exr_ceiling(tmp)
        emb = next(r["steady_fps"] for r in res["speed"] if r["stage"] == "decompose" and r["resolution"] == "960x540")
        if not args.skip_marigold:
            res["marigold_size"] = bench_marigold_ratio(tmp, emb)
        res["flicker"] = bench_flicker(tmp, args.quick)
        ev = ROOT / "benchmarks" / "results" / "eval_embedded.json"
        if ev.exists():
            res["quality"] = json.loads(ev.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["bench_wall_s"] = time.perf_counter() - t_all
    return write_report(res, out)


#: targets the issues set, checked in the report: (label, row filter, minimum steady fps)
TARGETS = [
    ("embedded decompose, 960x540, >= 5 fps (issue 4)",
     lambda r: r["stage"] == "decompose" and r["resolution"] == "960x540", 5.0),
    ("embedded restyle 'dense fog', 960x540, >= 10 fps (issue 5)",
     lambda r: r["stage"] == "restyle 'dense fog'" and r["resolution"] == "960x540", 10.0),
    ("embedded restyle 'underwater', 960x540, >= 10 fps (issue 5)",
     lambda r: r["stage"] == "restyle 'underwater'" and r["resolution"] == "960x540", 10.0),
]


def write_report(res: dict, out: Path) -> int:
    """Print and write ``results.md``, ``results.json`` and the plots from measured ``res``."""

    md = ["## Benchmarks", "", f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, "
          f"Python {res['machine']['python']}; {res['machine']['date']}", "",
          "### Speed and memory (embedded, CPU, end to end incl. EXR/PNG/MP4 writing)", "",
          "steady_fps: frames after the first, from the per-frame progress events; job_fps: all "
          "frames over the whole job's wall time (model load, first frame, MP4 and metrics included).", "",
          _table([dict(r, job_fps=round(r["frames"] / r["wall_s"], 2)) for r in res["speed"]],
                 ["stage", "resolution", "frames", "steady_fps", "job_fps", "wall_s", "peak_rss_mb"]), "",
          "### Memory against clip length (bikes.mp4, 640x272)", "",
          _table(res["memory_vs_length"], ["frames_requested", "frames", "steady_fps", "peak_rss_mb"]), "",
          "### EXR ceiling", "", _table([res["exr_ceiling"]], list(res["exr_ceiling"].keys())), ""]
    if "marigold_size" in res:
        md += ["### Against a full-size Marigold architecture (same pipeline code, random weights)", "",
               _table(res["marigold_size"], ["device", "steps", "processing_px", "s_per_frame",
                                             "embedded_over_marigold", "unet_params_M", "vae_params_M"]), ""]
    md += ["### Temporal flicker (mean warping error of the passes; lower is steadier)", "",
           _table(res["flicker"], ["clip", "flicker_raw", "flicker_stabilized"]), ""]
    ml = res["memory_vs_length"]
    if len(ml) == 2:
        md += [f"Peak RSS {ml[0]['peak_rss_mb']:.0f} MB for {ml[0]['frames']} frames vs "
               f"{ml[1]['peak_rss_mb']:.0f} MB for {ml[1]['frames']} frames.", ""]
    ev = ROOT / "benchmarks" / "results" / "eval_embedded.md"
    if ev.exists():
        md += ["### Quality of the embedded model (`training/evaluate.py`; AbsRel/delta1 after scale-and-shift "
               "alignment; the real sets are tiny: differences below ~0.03 AbsRel are noise)", "",
               ev.read_text().strip(), ""]
    md += ["### Targets", "", "| target | steady fps | whole-job fps | met (steady) |", "|---|---|---|---|"]
    for label, pick, minimum in TARGETS:
        row = next((r for r in res.get("speed", []) if pick(r)), None)
        if row is not None:
            md.append(f"| {label} | {row['steady_fps']:.2f} | {row['frames'] / row['wall_s']:.2f} | "
                      f"{'yes' if row['steady_fps'] >= minimum else '**no**'} |")
    md.append("")
    text = "\n".join(md)
    print(text)
    (out / "results.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(res, indent=2, default=str))
    _plots(res, out)
    print(f"\nwrote {out / 'results.json'}, {out / 'results.md'}, {out / 'speed_memory.png'}"
          f" in {res['bench_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
