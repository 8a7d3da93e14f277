#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Export a .blend file's frames to contract G-buffers with the ``bpy`` module (no Blender UI).

Usage::

    .venv/bin/python tools/scene_export.py FILE.blend --out DIR [--frames 1-10,15]
        [--scene NAME] [--res WxH] [--samples S] [--denoise] [--motion-blur-steps N]
        [--threads T]

Runs :func:`addon.scene.export.export_scene_gbuffers` of this checkout (imported as the
extension package, :mod:`source_package`); writes ``gbuffer_NNNN.exr`` and
``manifest.json``. The file is opened, never saved. Exit 0 on success, 1 with a one-line
reason on failure. Inside Blender use ``blender -b FILE.blend --command gbuffer_editor
export-scene ...`` instead.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from source_package import checkout_module  # noqa: E402


def _parse_frames(spec: str, scene) -> List[int]:
    """``"1-10,15"`` -> frame numbers; empty: the scene's frame range."""
    if not spec:
        return list(range(scene.frame_start, scene.frame_end + 1))
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tools/scene_export.py", description=__doc__.split("\n")[0])
    p.add_argument("blend")
    p.add_argument("--out", required=True)
    p.add_argument("--frames", default="", help="e.g. 1-10,15 (default: the scene's range)")
    p.add_argument("--scene", default=None)
    p.add_argument("--res", default=None, help="WIDTHxHEIGHT (default: the scene's)")
    p.add_argument("--samples", type=int, default=None)
    p.add_argument("--denoise", action="store_true")
    p.add_argument("--motion-blur-steps", type=int, default=1)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args(argv)
    import bpy

    export = checkout_module("addon.scene.export")
    try:
        if not os.path.isfile(a.blend):
            raise export.ExportError(f"{a.blend}: no such .blend file")
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(a.blend))
        scene = bpy.data.scenes[a.scene] if a.scene else bpy.context.scene
        res = tuple(int(v) for v in a.res.lower().split("x")) if a.res else None
        paths = export.export_scene_gbuffers(
            scene, a.out, _parse_frames(a.frames, scene), resolution=res, samples=a.samples,
            denoise=True if a.denoise else None, threads=a.threads, motion_blur_steps=a.motion_blur_steps,
            progress=lambda d, n, pth: print(f"{d}/{n} {pth}", flush=True))
    except (export.ExportError, KeyError, ValueError, RuntimeError) as e:
        print(f"error: {a.blend}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(paths)} frames to {a.out}")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # bpy 4.x as a module can hang tearing down at interpreter exit
