"""Render the procedural G-buffer training set with Cycles (CPU).

Usage::

    .venv/bin/python training/render_dataset.py --out training/data/procedural \
        --count 2000 --seed 0 --res 192x144

Scenes come from :mod:`training.procedural_scenes`; each scene gives one clip of
``--clip-len`` consecutive frames (a short camera move), written as contract
frames ``gbuffer_NNNN.exr`` where ``NNNN = scene_id * clip_len + k + 1``.
Frame headers carry ``depth_kind=metric``, intrinsics, the camera matrix and
``procedural`` (scene id, clip frame, layout, world, ...).

* Reproducible: scene ``i`` is built from ``numpy.random.default_rng([seed, i])``
  and rendered with Cycles seed ``i``.
* Resumable: clips whose frames all exist are skipped; a partly written clip is
  re-rendered whole (the same frames come out).
* ``Combined`` is scene-linear; per clip it is scaled by one exposure factor so
  the median luminance of the clip's first frame lands in [0.06, 0.3] (scaling
  linear light is the same as scaling every light source; recorded as
  ``exposure_scale``).
* ``--blur-fraction`` of the clips are rendered with camera motion blur: 3
  sub-frames over a 0.5-1 frame shutter averaged in linear light (G-buffers from
  the centre sub-frame); ``motion_blur_steps`` in the header says which.
* ``READY`` (JSON: count, resolution, ...) is (re)written once at least
  ``--ready-min`` frames exist.

Hold-out: training and evaluation hold frames out by the SHA-1 hash of the file name
(:func:`training.data.is_holdout`, about 8 %), per frame, not per clip.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _env():
    for var in ("BLENDER_USER_RESOURCES", "XDG_CACHE_HOME"):
        if var not in os.environ:
            os.environ[var] = tempfile.mkdtemp(prefix=f"gbx_{var.lower()}_")


def _write_json_atomic(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".json", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


class RejectedClip(Exception):
    """A clip not worth training on (black frame, camera inside geometry)."""


def clip_problem(frame) -> str:
    """Why a clip's first frame is unusable, or ``""``.

    Rejects frames that are mostly black (no light reaches the camera, or the
    camera sits inside a closed object) and frames where surfaces closer than
    0.25 m fill more than a third of the view.
    """
    import numpy as np

    lum = frame.combined[..., :3].max(-1)
    if float((lum <= 1e-7).mean()) > 0.5:
        return "mostly black"
    surf = frame.confidence > 0.5 if frame.confidence is not None else np.ones(frame.shape, bool)
    if float((surf & (frame.depth < 0.25)).mean()) > 0.33:
        return "camera against a surface"
    return ""


def key_camera_path(cam, mats) -> None:
    """Keyframe ``cam`` at frames 1..N on the matrices ``mats`` (linear in between)."""
    import bpy

    edit = bpy.context.preferences.edit
    old = edit.keyframe_new_interpolation_type
    edit.keyframe_new_interpolation_type = "LINEAR"
    try:
        cam.rotation_mode = "XYZ"
        prev = None
        for k, m in enumerate(mats):
            cam.location = m.to_translation()
            cam.rotation_euler = m.to_euler("XYZ", prev) if prev is not None else m.to_euler("XYZ")
            prev = cam.rotation_euler.copy()
            cam.keyframe_insert("location", frame=k + 1)
            cam.keyframe_insert("rotation_euler", frame=k + 1)
    finally:
        edit.keyframe_new_interpolation_type = old


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--count", type=int, required=True, help="frames 1..COUNT are attempted (rejected clips leave gaps, so fewer may exist)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--res", default="192x144", help="WIDTHxHEIGHT")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--max-bounces", type=int, default=6)
    p.add_argument("--clip-len", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-denoise", action="store_true")
    p.add_argument("--ready-min", type=int, default=600)
    p.add_argument("--blur-fraction", type=float, default=0.1,
                   help="share of clips rendered with 3 motion-blur sub-frames per frame")
    p.add_argument("--first-scene", type=int, default=0)
    p.add_argument("--kind", default=None, help="force a layout: room/outdoor/tabletop")
    p.add_argument("--camera", default="default", choices=("default", "rgbd"),
                   help="rgbd: RGB-D-capture framing of rooms (needs --kind room)")
    args = p.parse_args(argv)
    if args.camera == "rgbd" and args.kind != "room":
        p.error("--camera rgbd needs --kind room")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    _env()
    import bpy  # noqa: F401  (after the environment is set)
    import numpy as np

    from tools.source_package import checkout_module
    from training.procedural_scenes import build_scene, camera_path, clear_camera_path

    # the Blender layer imports only as part of the extension package; write the frames
    # with that package's contract module too (one copy of the backend in this process)
    GBufferRenderer = checkout_module("addon.scene.export").GBufferRenderer
    contract = checkout_module("backend.contract")

    w, h = (int(v) for v in args.res.lower().split("x"))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    cache = out / ".textures"
    cache.mkdir(exist_ok=True)
    L = args.clip_len
    n_scenes = math.ceil(args.count / L)
    scene = bpy.context.scene
    c = scene.cycles
    scene.render.engine = "CYCLES"
    c.max_bounces = args.max_bounces
    c.diffuse_bounces = c.glossy_bounces = min(3, args.max_bounces)
    c.transmission_bounces, c.transparent_max_bounces = 4, 4
    c.caustics_reflective = c.caustics_refractive = False
    c.use_adaptive_sampling = True
    c.sample_clamp_indirect = 10.0
    scene.render.film_transparent = False

    def existing() -> int:
        return len(contract.list_frames(out))

    def ready():
        n = existing()
        if n >= args.ready_min:
            _write_json_atomic(out / "READY", {
                "count": n, "resolution": [w, h], "clip_len": L, "seed": args.seed,
                "samples": args.samples, "denoise": not args.no_denoise,
                "naming": "gbuffer_{scene_id*clip_len + k + 1:04d}.exr",
                "holdout": "training.data.is_holdout (SHA-1 of the file name, ~8 %)", "updated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })

    for i in range(args.first_scene, n_scenes):
        idx = [i * L + k + 1 for k in range(L)]
        paths = [contract.frame_path(out, j) for j in idx]
        if all(p.exists() for p in paths):
            continue
        if (out / f".clip_{i:05d}.rejected").exists():
            continue
        lock = out / f".clip_{i:05d}.lock"
        try:  # another renderer process may be on this clip
            if lock.exists() and time.time() - lock.stat().st_mtime > 900:
                lock.unlink()
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        t0 = time.time()
        rng = np.random.default_rng([args.seed, i])
        try:
            info = build_scene(scene, rng, cache, kind=args.kind, camera_style=args.camera)
            if scene.world is not None and hasattr(scene.world, "cycles"):
                scene.world.cycles.sample_map_resolution = 256
            mats = camera_path(rng, info["camera"] | {"loc": tuple(info["camera"]["loc"])}, L)
            info["removed_near_camera"] = len(clear_camera_path(scene, mats))
            target = float(np.exp(rng.uniform(np.log(0.06), np.log(0.3))))
            cam = scene.camera
            key_camera_path(cam, mats)
            rng_b = np.random.default_rng([args.seed, i, 1])
            blur = rng_b.random() < args.blur_fraction
            steps, shutter = (3, float(rng_b.uniform(0.5, 1.0))) if blur else (1, 0.5)
            if blur:
                info["motion_blur_shutter"] = shutter
            t1 = time.time()
            with GBufferRenderer(scene, resolution=(w, h), samples=args.samples,
                                 denoise=not args.no_denoise, threads=args.threads, seed=i,
                                 persistent_data=True) as gr:
                scale = None
                for k, path in enumerate(paths):
                    meta = {"procedural": {"scene_id": i, "clip_frame": k, "seed": args.seed, **info}}
                    f = gr.render_frame(k + 1, frame_index=k, meta_extra=meta, motion_blur_steps=steps,
                                        shutter=shutter)
                    if scale is None:
                        bad = clip_problem(f)
                        if bad:
                            raise RejectedClip(bad)
                        rgb = f.combined[..., :3]
                        lum = rgb @ np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)
                        med = float(np.median(lum))
                        scale = float(np.clip(target / max(med, 1e-6), 1e-4, 1e4))
                    f.combined[..., :3] = np.clip(f.combined[..., :3] * scale, 0.0, 65000.0)
                    f.meta["exposure_scale"] = scale
                    contract.write_frame(path, f)
            dt = time.time() - t1
            print(json.dumps({"event": "clip", "scene_id": i, "layout": info["layout"], "world": info.get("world"),
                              "build_s": round(t1 - t0, 2), "render_s_per_frame": round(dt / L, 2),
                              "exposure_scale": round(scale, 4), "frames": existing()}), flush=True)
        except RejectedClip as e:  # e.g. camera inside an object: never retried
            (out / f".clip_{i:05d}.rejected").write_text(str(e))
            print(json.dumps({"event": "rejected", "scene_id": i, "reason": str(e)}), flush=True)
            continue
        except Exception as e:  # keep going: one bad scene must not stop the dataset
            print(json.dumps({"event": "error", "scene_id": i, "message": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        finally:
            try:
                lock.unlink()
            except OSError:
                pass
        ready()
    ready()
    print(json.dumps({"event": "done", "frames": existing()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
