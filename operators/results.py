"""Seeing results: Show Result, Play Preview, Open Folder, Open Log, and the run history.

A Restyle run lives in ``<output>/restyle_NNN/`` (``result/`` frames, ``result/preview.mp4``,
``result/manifest.json`` with the prompt, ``restyle.log``). :func:`run_history` lists the
runs, newest first, for the sidebar; :class:`GBUFFER_OT_show_result` loads one into the
compositor (result node, Viewer/backdrop) and the Image Editors; the Open operators hand
a file or folder to the system (``wm.path_open``: the default movie player for
``preview.mp4``, the file manager for a folder).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import bpy
from bpy.props import StringProperty

from ..addon import compositor
from ..backend.input_files import load_json
from . import backend_args

RESULT_DIR = "result"
PREVIEW_MP4 = "preview.mp4"
_RUN_RE = re.compile(r"^restyle_(\d+)$")


@dataclass
class Run:
    """One Restyle run folder, as the history lists it."""

    folder: Path        # restyle_NNN
    number: int
    prompt: str
    renderer: str
    frames: int
    complete: bool
    edits: tuple = ()   # passes edited in the compositor for this run (empty: none)

    @property
    def result(self) -> Path:
        return self.folder / RESULT_DIR

    @property
    def preview(self) -> Path:
        return self.result / PREVIEW_MP4

    def line(self) -> str:
        state = "" if self.complete else " (unfinished)"
        prompt = self.prompt or "(no prompt)"
        edits = f", edits: {', '.join(self.edits)}" if self.edits else ""
        return f"{self.number:03d}: {prompt} - {self.renderer}, {self.frames} frames{edits}{state}"


def _edited_passes(run_dir: Path) -> tuple:
    """The passes the compositor edited for a run (``edited_gbuffer/manifest.json``'s
    ``edited_passes``); ``()`` when the run had no edits."""
    try:
        man = load_json(run_dir / "edited_gbuffer" / "manifest.json")  # a FIFO: refused, never waited on
    except (OSError, ValueError):
        return ()
    passes = man.get("edited_passes") if isinstance(man, dict) else None
    return tuple(str(x) for x in passes) if isinstance(passes, list) else ()


#: how many runs the Restyle panel lists (the rest: "N older runs", Open Folder)
HISTORY_SHOWN = 12


def run_history(root: os.PathLike, limit: Optional[int] = None) -> List[Run]:
    """The ``restyle_NNN`` runs under ``root`` that hold a result manifest, newest first
    (all of them, or the newest ``limit``), each with the passes edited for it."""
    root = Path(root)
    runs = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for d in entries:
        m = _RUN_RE.match(d.name)
        if not m or not d.is_dir():
            continue
        try:
            man = load_json(d / RESULT_DIR / "manifest.json")
        except (OSError, ValueError):
            continue
        if not isinstance(man, dict):
            continue
        renderer = man.get("renderer") or {}
        runs.append(Run(d, int(m.group(1)), str(man.get("prompt") or ""),
                        str(renderer.get("name", "?") if isinstance(renderer, dict) else renderer),
                        len(man.get("frames") or []), bool(man.get("complete")), _edited_passes(d)))
    runs.sort(key=lambda r: -r.number)
    return runs if limit is None else runs[:limit]


def _result_dir(context, directory: str) -> Optional[Path]:
    d = directory or context.scene.gbuffer_editor.result_dir
    return Path(bpy.path.abspath(d)) if d else None


def open_path(path: os.PathLike) -> None:
    """Hand ``path`` to the system (default application / file manager).

    Raises:
        OSError: nothing could open it (Linux: no ``xdg-open``, or it found no
            application for the file type; Blender's own ``wm.path_open`` only prints a
            traceback to the console there and reports success).
    """
    import shutil
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        bpy.ops.wm.path_open(filepath=str(path))  # os.startfile / open: raise on failure
        return
    tool = shutil.which("xdg-open")
    if tool is None:
        raise OSError(f"no program to open files here (xdg-open not found); the file is {path}")
    try:
        res = subprocess.run([tool, str(path)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise OSError(f"could not open {path}: {e}") from None
    if res.returncode != 0:
        why = (res.stderr or res.stdout or "").strip().splitlines()
        raise OSError(f"no application opens {path} (xdg-open exit {res.returncode}"
                      f"{': ' + why[-1] if why else ''})")


def _open_or_report(op, path) -> set:
    try:
        open_path(path)
    except OSError as e:
        op.report({"ERROR"}, str(e))
        return {"CANCELLED"}
    return {"FINISHED"}


class GBUFFER_OT_show_result(bpy.types.Operator):
    """Load a Restyle result into the compositor (Restyle result node, backdrop) and the
    Image Editors"""

    bl_idname = "gbuffer.show_result"
    bl_label = "Show Result"
    bl_options = {"REGISTER"}

    directory: StringProperty(name="Result", subtype="DIR_PATH",
                              description="A run's result folder (empty: the last Restyle result)")

    def execute(self, context):
        folder = _result_dir(context, self.directory)
        if folder is None:
            self.report({"ERROR"}, "No Restyle result yet: run Restyle first")
            return {"CANCELLED"}
        try:
            compositor.load_result(context.scene, folder)
        except FileNotFoundError as e:
            self.report({"ERROR"}, str(e))
            return {"CANCELLED"}
        s = context.scene.gbuffer_editor
        s.result_dir = str(folder)
        s.preview_pass = compositor.RESULT_PASS
        return {"FINISHED"}


class GBUFFER_OT_play_preview(bpy.types.Operator):
    """Play the run's preview.mp4 in the system's movie player"""

    bl_idname = "gbuffer.play_preview"
    bl_label = "Play Preview"
    bl_options = {"REGISTER"}

    directory: StringProperty(name="Result", subtype="DIR_PATH",
                              description="A run's result folder (empty: the last Restyle result)")

    def execute(self, context):
        folder = _result_dir(context, self.directory)
        mp4 = folder / PREVIEW_MP4 if folder else None
        if mp4 is None or not mp4.is_file():
            self.report({"ERROR"}, f"No preview movie: {mp4 or 'run Restyle first'}")
            return {"CANCELLED"}
        return _open_or_report(self, mp4)


class GBUFFER_OT_open_path(bpy.types.Operator):
    """Open a result folder or log file with the system's file manager / editor"""

    bl_idname = "gbuffer.open_path"
    bl_label = "Open"
    bl_options = {"REGISTER"}

    path: StringProperty(name="Path", description="File or folder to open")

    def execute(self, context):
        p = Path(bpy.path.abspath(self.path)) if self.path else None
        if p is None or not p.exists():
            self.report({"ERROR"}, f"Not found: {p or '(nothing to open)'}")
            return {"CANCELLED"}
        return _open_or_report(self, p)


def history_root(context) -> Path:
    """The output folder the numbered runs are written to (what the panel shows)."""
    return backend_args.output_root(context.scene.gbuffer_editor)


classes = (GBUFFER_OT_show_result, GBUFFER_OT_play_preview, GBUFFER_OT_open_path)
