"""Train GBufNet on contract EXR frames (CPU friendly, resumable).

Usage (from the repository root, with ``.venv``)::

    nice -n 5 python -m training.train --data training/data/procedural \\
        --out training/runs/main --minutes 50 --threads 2
    # continue after an interruption (same command + --resume)

* Data: every ``gbuffer_NNNN.exr`` under each ``--data`` folder (recursive); the
  folders are re-scanned every ``--rescan`` steps so frames still being rendered
  join the training set. ~8 % of files (hash of the name) are held out as the
  synthetic validation split, never trained on.
* Schedule: AdamW, cosine learning-rate decay over the *wall-time* budget
  (``--minutes``), stored in the checkpoint so ``--resume`` continues the schedule.
* Checkpoints: ``last.pt`` every ``--ckpt-every`` steps (atomic), ``best.pt`` = lowest
  loss on the held-out synthetic split at the time; at the end both are re-scored on
  the final held-out split (up to 256 frames spread over it) and the better becomes
  ``selected.pt`` (model selection never looks at real data). A ``best.pt`` left in
  ``--out`` by an earlier run is never selected.
* Validation during training uses 64 held-out frames spread evenly over all data
  folders (:func:`spread`).
* The cosine schedule runs on *wall time* (``--minutes``): the same command gives
  more steps on a faster or idle machine.
* ``--real-every N`` additionally logs real-image depth scores (NYU, Open3D) for
  monitoring only; they are written to the log, not used for selection.
* Log: ``OUT/log.jsonl`` (one JSON object per log line).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

# On a shared, oversubscribed CPU, OpenMP threads that spin-wait for each other make a
# 2-thread step 3-8x slower; passive waiting must be set before torch loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from training.losses import total_loss  # noqa: E402
from backend.model.net import GBufNet, NetConfig, count_params  # noqa: E402

from .augment import augment  # noqa: E402
from .data import FrameCache, as_float, write_toy_frames  # noqa: E402
from .metrics import SHARED_ROOT  # noqa: E402


def _atomic_save(obj, path: Path):
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def make_batch(samples, idx, hw, rng, strength=1.0, geometric=True, style_pool=None, style_p=0.0):
    xs, ts = [], []
    for i in idx:
        x, t = augment(as_float(samples[i]), hw, rng, photometric_strength=strength, geometric=geometric,
                       style_pool=style_pool, style_p=style_p)
        xs.append(x)
        ts.append(t)
    batch = {k: torch.from_numpy(np.stack([t[k] for t in ts])) for k in ts[0]}
    return torch.from_numpy(np.stack(xs)), batch


def spread(n: int, max_n: int) -> list:
    """``min(n, max_n)`` indices spread evenly over ``range(n)`` (all of them when
    ``max_n >= n``): a validation subset that samples every data folder, not just the
    first one loaded."""
    if max_n >= n:
        return list(range(n))
    return sorted({int(i) for i in np.linspace(0, n - 1, max_n).round()})


@torch.no_grad()
def validate(net, samples, hw, max_n=64):
    """Mean total loss on ``max_n`` held-out synthetic frames spread evenly over the
    split (:func:`spread`), without photometric or geometric augmentation."""
    if not samples:
        return float("nan"), {}
    net.eval()
    rng = np.random.default_rng(123)
    tot, parts_sum, n = 0.0, {}, 0
    idx = spread(len(samples), max_n)
    for j in range(0, len(idx), 8):
        x, b = make_batch(samples, idx[j:j + 8], hw, rng, strength=0.0, geometric=False)
        loss, parts = total_loss(net(x), b)
        k = len(idx[j:j + 8])
        tot += float(loss) * k
        for key, v in parts.items():
            parts_sum[key] = parts_sum.get(key, 0.0) + v * k
        n += k
    net.train()
    return tot / n, {k: v / n for k, v in parts_sum.items()}


@torch.no_grad()
def real_depth_scores(net, max_side=256):
    """AbsRel on NYU/Open3D (monitoring only)."""
    from backend.imaging import resize
    from backend.model.encoding import encode_input

    from .data import downscale
    from .metrics import depth_metrics_from_disparity, load_nyu, load_open3d

    net.eval()
    out = {}
    for name, loader in (("nyu", load_nyu), ("open3d", load_open3d)):
        try:
            ds = loader()
        except Exception:
            continue
        vals = []
        for s in ds:
            rgb = downscale(s["rgb"], max_side)
            d = net(torch.from_numpy(encode_input(rgb)))["disparity"][0, 0].numpy()
            h, w = s["depth"].shape
            d = resize(d, (w, h))
            vals.append(depth_metrics_from_disparity(d, s["depth"], s["mask"])["absrel"])
        out[name] = float(np.mean(vals))
    net.train()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=["training/data/procedural"])
    ap.add_argument("--out", default="training/runs/main")
    ap.add_argument("--minutes", type=float, default=50.0, help="wall-time budget (cosine LR over it)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0 = budget only)")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--size", type=int, nargs=2, default=[120, 160], metavar=("H", "W"))
    ap.add_argument("--max-side", type=int, default=256, help="long side of cached frames")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--val-every", type=int, default=200)
    ap.add_argument("--real-every", type=int, default=0, help="log real depth scores (monitoring only)")
    ap.add_argument("--rescan", type=int, default=300)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default="", help="initialise weights from a training checkpoint (.pt) "
                    "or exported weights (.safetensors with its .json, e.g. the shipped model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clip", type=float, default=5.0, help="gradient-norm clipping")
    ap.add_argument("--w-ssi", type=float, default=1.0, help="weight of the SSI depth loss")
    ap.add_argument("--w-mat", type=float, default=0.5, help="weight of the metallic + roughness loss")
    ap.add_argument("--fda", type=float, default=0.0,
                    help="probability of Fourier domain adaptation toward a real photograph (0 = off)")
    ap.add_argument("--fda-footage", default=str(SHARED_ROOT / "footage"),
                    help="folder of real clips for --fda (plus scikit-image photographs)")
    ap.add_argument("--toy", action="store_true", help="smoke test on generated toy frames")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.toy:
        write_toy_frames(out / "toy", n=12, h=72, w=96)
        args.data = [str(out / "toy")]

    cache = FrameCache([Path(d) for d in args.data], max_side=args.max_side)
    cache.refresh()
    if not cache.train:
        print(f"no training frames under {args.data}", file=sys.stderr)
        return 2
    if not cache.val:  # tiny sets: hold out one frame anyway
        cache.val.append(cache.train.pop())

    styles = None
    if args.fda > 0:
        from .data import style_pool

        styles = style_pool(args.fda_footage, size=tuple(args.size))
        print(f"FDA: p={args.fda}, {len(styles)} real style images", flush=True)
    cfg = NetConfig()
    net = GBufNet(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    state = {"step": 0, "elapsed": 0.0, "best_val": float("inf"), "best_step": -1}
    last = out / "last.pt"
    if args.resume and last.exists():
        ck = torch.load(last, map_location="cpu", weights_only=False)
        net.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state.update(ck["state"])
        print(f"resumed from {last} at step {state['step']}", flush=True)
    elif args.init:
        if str(args.init).endswith(".safetensors"):
            from .export_onnx import load_safetensors

            init_net = load_safetensors(args.init)
            if init_net.config.to_dict() != cfg.to_dict():
                print(f"--init {args.init}: its architecture differs from this trainer's", file=sys.stderr)
                return 2
            net.load_state_dict(init_net.state_dict())
        else:
            ck = torch.load(args.init, map_location="cpu", weights_only=False)
            net.load_state_dict(ck["model"])
    rng = np.random.default_rng(args.seed + state["step"])
    torch.manual_seed(args.seed + state["step"])
    log = open(out / "log.jsonl", "a")
    budget = args.minutes * 60.0
    hw = tuple(args.size)
    print(f"params {count_params(net)}; train {len(cache.train)} val {len(cache.val)} frames", flush=True)

    def save(path, extra=None):
        _atomic_save({"model": net.state_dict(), "opt": opt.state_dict(), "state": dict(state),
                      "config": cfg.to_dict(), "args": vars(args), **(extra or {})}, path)

    def record(rec):  # one line in log.jsonl and on stdout
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(json.dumps(rec), flush=True)

    t_start = time.time() - state["elapsed"]
    net.train()
    run_loss = None
    while True:
        state["elapsed"] = time.time() - t_start
        if state["elapsed"] >= budget or (args.max_steps and state["step"] >= args.max_steps):
            break
        frac = min(1.0, state["elapsed"] / budget)
        warm = min(1.0, (state["step"] + 1) / 100.0)
        lr = args.lr * warm * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = rng.integers(0, len(cache.train), args.batch)
        x, b = make_batch(cache.train, idx, hw, rng, style_pool=styles, style_p=args.fda)
        o = net(x)
        loss, parts = total_loss(o, b, {"ssi": args.w_ssi, "mat": args.w_mat})
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), args.clip)
        opt.step()
        state["step"] += 1
        lv = loss.item()
        run_loss = lv if run_loss is None else 0.95 * run_loss + 0.05 * lv
        step = state["step"]
        if step % 20 == 0:
            record({"step": step, "t": round(state["elapsed"], 1), "lr": lr, "loss": run_loss, **parts})
        if step % args.val_every == 0:
            v, vparts = validate(net, cache.val, hw)
            rec = {"step": step, "t": round(state["elapsed"], 1), "val": v, "val_parts": vparts,
                   "n_train": len(cache.train), "n_val": len(cache.val)}
            if args.real_every and step % args.real_every == 0:
                rec["real_absrel_monitor_only"] = real_depth_scores(net)
            if v < state["best_val"]:
                state["best_val"], state["best_step"] = v, step
                save(out / "best.pt")
            record(rec)
        if step % args.ckpt_every == 0:
            save(last)
        if step % args.rescan == 0:
            n = cache.refresh()
            if n:
                print(f"added {n} frames: train {len(cache.train)} val {len(cache.val)}", flush=True)
    cache.refresh()
    v, vparts = validate(net, cache.val, hw, max_n=256)
    save(last)
    # the held-out split grows while frames arrive: re-score best.pt on the final split
    selected = "last"
    # only a best.pt this run wrote (a stale one from an earlier run in --out is ignored)
    if state["best_step"] >= 0 and (out / "best.pt").exists():
        final_state = dict(state)
        ck = torch.load(out / "best.pt", map_location="cpu", weights_only=False)
        net.load_state_dict(ck["model"])
        vb, _ = validate(net, cache.val, hw, max_n=256)
        if vb < v:
            selected, v = "best", vb
        state.update(final_state)
    _atomic_save(torch.load(out / f"{selected}.pt", map_location="cpu", weights_only=False), out / "selected.pt")
    record({"done": True, "step": state["step"], "wall_s": round(state["elapsed"], 1), "val": v,
            "selected": selected,
            "best_val": state["best_val"], "best_step": state["best_step"],
            "n_train": len(cache.train), "n_val": len(cache.val)})
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
