"""The main job, end to end, through headless Blender (bpy) on a real clip.

Run by ``./dev demo`` (which first sets up ``.venv`` when missing)::

    ./dev demo [--clip ../shared/footage/boat.mp4] [--frames 1-8] [--processing-resolution N] [--out demo_output]

Steps, each with the add-on's own operators in a background Blender session:

1. register the add-on from this checkout (as Blender would, package ``gbuffer_editor``);
2. ``gbuffer.import_footage``: scene range, fps, resolution, compositor setup;
3. ``gbuffer.decompose``: the embedded estimator in a worker process -> G-buffer EXRs;
4. ``gbuffer.restyle`` with "dense fog" and with "underwater" -> EXR + PNG + MP4;
5. a contact sheet (source, the five passes, both restyles) for a few frames.

Prints where the outputs are and the frames per second measured for each stage.
Blender's user folder and caches go to a temporary folder, never the home folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: environment variable naming the shared data folder (``footage/``, ``groundtruth/``);
#: ``GBUFFER_SHARED`` is accepted as an alias
SHARED_ENV = "GBUFFER_SHARED_DIR"


def shared_dir() -> Path:
    """The shared data folder: ``$GBUFFER_SHARED_DIR`` (alias ``$GBUFFER_SHARED``), else
    ``../shared`` next to the repository."""
    env = os.environ.get(SHARED_ENV) or os.environ.get("GBUFFER_SHARED")
    return Path(env) if env else ROOT.parent / "shared"


DEFAULT_CLIP = shared_dir() / "footage" / "boat.mp4"
PROMPTS = ("dense fog", "underwater")


def _isolate_blender() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gbuffer_demo_blender_"))
    os.environ.setdefault("BLENDER_USER_RESOURCES", str(tmp / "user"))
    os.environ.setdefault("XDG_CACHE_HOME", str(tmp / "cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load_addon():
    """Import this checkout as the package ``gbuffer_editor`` and register it."""
    from source_package import import_checkout

    package = import_checkout()
    package.register()
    return package


def _count_frames(folder: Path, pattern: str) -> int:
    return len(list(folder.glob(pattern)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="G-Buffer Editor demo: import, decompose, restyle, contact sheet")
    ap.add_argument("--clip", default=str(DEFAULT_CLIP), help="movie or image sequence (default: shared boat.mp4)")
    ap.add_argument("--frames", default="1-8", help="source frames A-B, 1-based (default 1-8)")
    ap.add_argument("--processing-resolution", "--max-size", dest="processing_resolution", type=int, default=None,
                    metavar="N", help="long side in pixels the estimator computes at (0: full size; default: the "
                                      "sidebar's, 768, which the embedded estimator caps to 192); the G-buffers "
                                      "are always full size")
    ap.add_argument("--out", default=str(ROOT / "demo_output"), help="output folder (default demo_output/)")
    ap.add_argument("--sheet-frames", type=int, default=3, help="frames on the contact sheet")
    ap.add_argument("--check-clip", action="store_true",
                    help="only check that the clip exists (./dev demo runs this before setting up .venv)")
    args = ap.parse_args(argv)

    clip = Path(args.clip).resolve()
    if not clip.exists():
        print(f"demo: clip not found: {clip}; pass --clip PATH (a movie or image sequence) or set "
              f"{SHARED_ENV} to the shared data folder holding footage/boat.mp4 "
              f"(default: ../shared next to the repository)", file=sys.stderr)
        return 2
    if args.check_clip:
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    first, last = (int(x) for x in args.frames.split("-"))

    _isolate_blender()
    import bpy

    load_addon()
    scene = bpy.context.scene
    s = scene.gbuffer_editor
    s.output_dir = str(out) + os.sep
    timings = {}

    t0 = time.perf_counter()
    r = bpy.ops.gbuffer.import_footage(filepath=str(clip))
    if r != {"FINISHED"}:
        print(f"demo: import failed: {s.status}", file=sys.stderr)
        return 1
    timings["import"] = time.perf_counter() - t0
    scene.frame_start = scene.frame_start + first - 1
    scene.frame_end = min(scene.frame_end, scene.frame_start + (last - first))
    n = scene.frame_end - scene.frame_start + 1
    if args.processing_resolution is not None:
        s.processing_resolution = args.processing_resolution
    s.estimator = "embedded"

    def run_stage(label: str, op, result_attr: str) -> Path:
        """Run a (blocking, background-mode) operator; time it; return the folder it wrote."""
        t0 = time.perf_counter()
        r = op()
        timings[label] = (n, time.perf_counter() - t0)
        if r != {"FINISHED"} or not getattr(s, result_attr):
            raise RuntimeError(f"{label} failed: {s.status}")
        return Path(getattr(s, result_attr))

    results = {}
    try:
        gb_dir = run_stage("decompose", bpy.ops.gbuffer.decompose, "gbuffer_dir")
        for prompt in PROMPTS:
            s.prompt = prompt
            s.renderer = "embedded"
            results[prompt] = run_stage(f"restyle '{prompt}'", bpy.ops.gbuffer.restyle, "result_dir")
    except RuntimeError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1

    sheet = make_contact_sheet(gb_dir, results, out / "contact_sheet.png", args.sheet_frames)
    blend = out / "demo.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))

    print("\nG-Buffer Editor demo")
    print(f"  clip:          {clip} (frames {first}-{first + n - 1})")
    print(f"  G-buffers:     {gb_dir}  ({_count_frames(gb_dir, 'gbuffer_*.exr')} multilayer EXR)")
    for prompt, d in results.items():
        mp4 = sorted(d.glob("*.mp4"))
        print(f"  {repr(prompt) + ':':<15}{d}  ({_count_frames(d, 'restyle_*.exr')} EXR, {_count_frames(d, 'preview/*.png')} PNG"
              f"{', ' + mp4[0].name if mp4 else ''})")
    print(f"  contact sheet: {sheet}")
    print(f"  .blend:        {blend}")
    print("\n  stage                    frames   seconds   fps (end to end, incl. worker start-up)")
    for stage, v in timings.items():
        if isinstance(v, tuple):
            k, sec = v
            print(f"  {stage:<24} {k:>6} {sec:>9.2f} {k / sec:>8.2f}")
    (out / "demo_timings.json").write_text(json.dumps(
        {k: ({"frames": v[0], "seconds": v[1], "fps": v[0] / v[1]} if isinstance(v, tuple) else {"seconds": v})
         for k, v in timings.items()}, indent=2))
    return 0


def make_contact_sheet(gb_dir: Path, results: dict, path: Path, n_frames: int) -> Path:
    """Source, the five passes and each restyle, for ``n_frames`` frames spread over the clip."""
    import numpy as np

    # the backend of the registered package: one copy in this process
    from gbuffer_editor.backend import contract, preview
    from gbuffer_editor.backend.jobs.restyle import preview_path

    frames = contract.list_frames(gb_dir)
    nums = list(frames)
    pick = [nums[round(i)] for i in np.linspace(0, len(nums) - 1, min(n_frames, len(nums)))]
    rows = []
    for num in pick:
        fr = contract.read_frame(frames[num])
        enc = preview.encode_frame_passes(fr)
        row = [enc["Combined"], enc["Depth"], enc["Normal"], enc["Albedo"], enc["Metallic"], enc["Roughness"]]
        for d in results.values():
            png = preview_path(d, num)
            if not png.exists():
                raise FileNotFoundError(f"no restyle preview for frame {num}: {png}")
            from PIL import Image

            row.append(np.asarray(Image.open(png).convert("RGB")))
        rows.append(row)
    labels = ["source", "depth", "normal", "albedo", "metallic", "roughness"] + [f"'{p}'" for p in results]
    preview.save_png(path, preview.contact_sheet(rows, labels))
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    rc = main()
    bpy_mod = sys.modules.get("bpy")
    if bpy_mod is not None and bpy_mod.app.version < (5, 0, 0):
        # bpy 4.x as a module can crash while tearing down registered UI classes at
        # interpreter exit; the job is done and flushed, so leave without that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
