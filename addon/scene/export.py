"""Export exact G-buffers of any Blender scene with Cycles (bpy side).

Usage (inside Blender, through the extension package)::

    from bl_ext.user_default.gbuffer_editor.addon.scene.export import export_scene_gbuffers
    paths = export_scene_gbuffers(bpy.context.scene, "/tmp/gb", frames=range(1, 11))

From a shell with the ``bpy`` module: ``tools/scene_export.py``.

Each frame is rendered once with Cycles to a temporary multilayer EXR
(Combined, Depth, Normal, Mist and our shader AOVs), converted by
:mod:`.passes` and written as a contract frame
(:func:`backend.contract.write_frame`), listed in the folder's ``manifest.json``
(:class:`ExportManifest`):

* ``Combined``: the rendered frame, scene-linear Rec.709 RGBA (the view
  transform is not applied; EXR keeps scene-linear values).
* ``Depth``: Cycles' planar depth along the camera axis, in metres
  (Blender units times ``scene.unit_settings.scale_length``); ``depth_kind``
  is ``metric``.
* ``Normal``: camera-space unit normals, OpenGL convention.
* ``Albedo``/``Metallic``/``Roughness``: Principled BSDF inputs through shader
  AOVs (see :mod:`.material_aov` for the fallback of other shaders).
* ``Confidence``: pixel coverage by a surface; 0 for sky / background.

Every setting, pass, AOV, node and the current frame touched during export are
restored afterwards, so the .blend is unchanged. Works with bpy 4.5 and 5.0.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import bpy
import numpy as np

from ...backend import contract
from . import passes as _passes
from .material_aov import AOVS, DEFAULT_ALBEDO, DEFAULT_METALLIC, DEFAULT_ROUGHNESS, MaterialAOVs

#: ``job`` of a scene export's ``manifest.json``
MANIFEST_JOB = "scene_export"


class ExportError(RuntimeError):
    """The scene cannot be exported (no camera, render failed, ...)."""


class _Saved:
    """Records attribute values and restores them in reverse order."""

    def __init__(self):
        self._items: List[Tuple[object, str, object]] = []

    def set(self, obj, attr: str, value) -> None:
        if obj is None or not hasattr(obj, attr):
            return
        old = getattr(obj, attr)
        if hasattr(old, "__len__") and not isinstance(old, str):
            old = tuple(old)
        self._items.append((obj, attr, old))
        setattr(obj, attr, value)

    def restore(self) -> None:
        for obj, attr, old in reversed(self._items):
            try:
                setattr(obj, attr, old)
            except (AttributeError, TypeError, ValueError):
                pass
        self._items.clear()


def camera_intrinsics(scene, camera=None) -> Optional[Tuple[float, float, float, float]]:
    """Pinhole intrinsics ``(fx, fy, cx, cy)`` in pixels of the rendered frame.

    Pixel coordinates: x right, y down, origin at the top-left corner of the
    top-left pixel (pixel centres at ``i + 0.5``). Accounts for sensor fit, lens
    shift and pixel aspect. Returns ``None`` for non-perspective cameras.
    """
    cam = (camera or scene.camera).data
    if cam.type != "PERSP":
        return None
    r = scene.render
    w = r.resolution_x * r.resolution_percentage / 100.0
    h = r.resolution_y * r.resolution_percentage / 100.0
    w, h = float(int(w)), float(int(h))
    ax, ay = r.pixel_aspect_x, r.pixel_aspect_y
    fit = cam.sensor_fit
    if fit == "AUTO":
        fit = "HORIZONTAL" if w * ax >= h * ay else "VERTICAL"
    if fit == "HORIZONTAL":
        fx = cam.lens / cam.sensor_width * w
        fy = fx * ax / ay
    else:
        sensor = cam.sensor_height if cam.sensor_fit == "VERTICAL" else cam.sensor_width
        fy = cam.lens / sensor * h
        fx = fy * ay / ax
    size = max(w * ax, h * ay)
    cx = w / 2.0 - cam.shift_x * size / ax
    cy = h / 2.0 + cam.shift_y * size / ay
    return float(fx), float(fy), float(cx), float(cy)


def _rotation(matrix_world) -> np.ndarray:
    m = np.array([list(row) for row in matrix_world], dtype=np.float64)[:3, :3]
    return m / np.linalg.norm(m, axis=0, keepdims=True)


def _subframe_offsets(steps: int, shutter: float) -> List[float]:
    """Sub-frame time offsets (frames) centred on the frame, spanning the shutter."""
    if steps <= 1:
        return [0.0]
    return [shutter * ((k + 0.5) / steps - 0.5) for k in range(steps)]


class GBufferRenderer:
    """Context manager that prepares a scene for G-buffer rendering and restores it.

    Args:
        scene: the ``bpy.types.Scene``.
        camera: camera object to render from (default ``scene.camera``).
        view_layer: view layer to render (default: the first enabled one).
        resolution: ``(width, height)`` override; default the scene's render size.
        samples: Cycles samples (default: keep the scene's).
        denoise: enable/disable Cycles denoising (OpenImageDenoise on CPU);
            ``None`` keeps the scene's setting.
        threads: fixed CPU thread count (``None``: Blender's automatic choice).
        seed: Cycles seed (``None`` keeps the scene's).
        persistent_data: keep Cycles scene data between renders (faster clips
            where only the camera moves).

    Raises:
        ExportError: no camera.
    """

    def __init__(self, scene, *, camera=None, view_layer=None, resolution=None, samples=None,
                 denoise=None, threads=None, seed=None, persistent_data=False):
        self.scene = scene
        self.camera = camera or scene.camera
        # without an explicit camera, follow the scene's camera-binding timeline markers
        # (as F12 does); an explicit camera stays active for every frame
        self._follow_markers = camera is None
        if self.camera is None or self.camera.type != "CAMERA":
            raise ExportError(f"scene {scene.name!r} has no camera to render from")
        if view_layer is None:
            enabled = [vl for vl in scene.view_layers if vl.use] or list(scene.view_layers)
            view_layer = enabled[0]
        elif isinstance(view_layer, str):
            view_layer = scene.view_layers[view_layer]
        self.view_layer = view_layer
        self.resolution = resolution
        self.samples = samples
        self.denoise = denoise
        self.threads = threads
        self.seed = seed
        self.persistent_data = bool(persistent_data)
        self._saved = _Saved()
        self._aovs = None
        self._tmp = None
        self._temp_world = None
        self._frame = None

    # -- setup / teardown -------------------------------------------------------------
    def __enter__(self):
        s, r, sv = self.scene, self.scene.render, self._saved
        self._frame = (s.frame_current, s.frame_subframe)
        try:
            sv.set(s, "camera", self.camera)
            sv.set(r, "engine", "CYCLES")
            if self.resolution is not None:
                sv.set(r, "resolution_x", int(self.resolution[0]))
                sv.set(r, "resolution_y", int(self.resolution[1]))
                sv.set(r, "resolution_percentage", 100)
            for attr, val in (("use_compositing", False), ("use_sequencer", False), ("use_border", False),
                              ("use_motion_blur", False), ("use_file_extension", True),
                              ("use_persistent_data", self.persistent_data)):
                sv.set(r, attr, val)
            if self.threads is not None:
                sv.set(r, "threads_mode", "FIXED")
                sv.set(r, "threads", int(self.threads))
            c = s.cycles
            sv.set(c, "device", "CPU")
            if self.samples is not None:
                sv.set(c, "samples", int(self.samples))
            if self.denoise is not None:
                sv.set(c, "use_denoising", bool(self.denoise))
                if self.denoise:
                    import _cycles
                    if getattr(_cycles, "with_openimagedenoise", False):
                        sv.set(c, "denoiser", "OPENIMAGEDENOISE")
            if self.seed is not None:
                sv.set(c, "seed", int(self.seed))
                sv.set(c, "use_animated_seed", False)
            self._set_image_settings()
            for vl in s.view_layers:
                sv.set(vl, "use", vl == self.view_layer)
            vl = self.view_layer
            for attr in ("use_pass_combined", "use_pass_z", "use_pass_normal", "use_pass_mist"):
                sv.set(vl, attr, True)
            if s.world is None:
                self._temp_world = bpy.data.worlds.new("_gbx_black_world")
                self._temp_world.color = (0.0, 0.0, 0.0)
                sv.set(s, "world", self._temp_world)
            mist = s.world.mist_settings
            sv.set(mist, "start", 0.0)
            sv.set(mist, "depth", _passes.MIST_DEPTH)
            sv.set(mist, "falloff", "LINEAR")
            self._aovs = MaterialAOVs(s, vl).__enter__()
            self._tmp = tempfile.mkdtemp(prefix="gbx_render_")
            sv.set(r, "filepath", os.path.join(self._tmp, "pass"))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _set_image_settings(self) -> None:
        im = self.scene.render.image_settings
        self._im_saved = {k: getattr(im, k) for k in ("media_type", "file_format", "color_depth", "exr_codec")
                          if hasattr(im, k)}
        if hasattr(im, "media_type"):  # bpy >= 5.0
            im.media_type = "MULTI_LAYER_IMAGE"
        im.file_format = "OPEN_EXR_MULTILAYER"
        im.color_depth = "32"
        im.exr_codec = "ZIP"

    def _restore_image_settings(self) -> None:
        im = self.scene.render.image_settings
        for k in ("media_type", "file_format", "color_depth", "exr_codec"):
            if k in getattr(self, "_im_saved", {}):
                try:
                    setattr(im, k, self._im_saved[k])
                except (TypeError, ValueError):
                    pass

    def __exit__(self, *exc):
        if self._aovs is not None:
            self._aovs.__exit__(None, None, None)
            self._aovs = None
        self._saved.restore()
        self._restore_image_settings()
        if self._temp_world is not None:
            bpy.data.worlds.remove(self._temp_world)
            self._temp_world = None
        if self._frame is not None:
            self.scene.frame_set(self._frame[0], subframe=self._frame[1])
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        return False

    # -- rendering ----------------------------------------------------------------------
    def _set_time(self, t: float) -> None:
        frame = math.floor(t)
        self.scene.frame_set(int(frame), subframe=float(t - frame))
        cam = self.scene.camera  # frame_set applies camera markers
        if self._follow_markers and cam is not None and cam.type == "CAMERA":
            self.camera = cam
        elif cam != self.camera:
            self.scene.camera = self.camera

    def render_passes(self, time: float) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """Render at scene time ``time`` (frames, fractional allowed).

        Returns:
            ``(channels, cam_rotation)``: the multilayer EXR channels
            (name -> float32 ``H x W``) and the camera's ``3 x 3`` world rotation.

        Raises:
            ExportError: Cycles wrote no file.
        """
        self._set_time(time)
        out = os.path.join(self._tmp, "pass.exr")
        if os.path.exists(out):
            os.unlink(out)
        bpy.ops.render.render(write_still=True, scene=self.scene.name, layer=self.view_layer.name)
        if not os.path.exists(out):
            raise ExportError(f"Cycles wrote no output for frame {time} of scene {self.scene.name!r}")
        chans, _ = contract.read_channels(out)
        rot = _rotation(self.camera.matrix_world)
        return chans, rot

    def render_frame(self, frame: int, *, motion_blur_steps: int = 1, shutter: Optional[float] = None,
                     frame_index: Optional[int] = None, meta_extra: Optional[dict] = None) -> contract.GBufferFrame:
        """Render one contract frame.

        Args:
            frame: scene frame number.
            motion_blur_steps: N >= 1; N > 1 renders N sub-frames spread over the
                shutter (centred on ``frame``) and averages their Combined passes in
                linear light; the other passes come from the sub-frame nearest the
                centre (exactly the frame for odd N).
            shutter: shutter length in frames (default ``scene.render.motion_blur_shutter``).
            frame_index: ``meta['frame_index']`` (default ``frame - frame_start``).
            meta_extra: further header attributes.

        Returns:
            :class:`backend.contract.GBufferFrame` (validated).
        """
        s = self.scene
        steps = max(1, int(motion_blur_steps))
        shutter = s.render.motion_blur_shutter if shutter is None else float(shutter)
        offsets = _subframe_offsets(steps, shutter)
        centre = min(range(steps), key=lambda k: abs(offsets[k]))
        acc = None
        gb_chans = rot = None
        for k, off in enumerate(offsets):
            chans, r = self.render_passes(frame + off)
            comb = _passes.find_pass(chans, "Combined", ("R", "G", "B", "A"))
            acc = comb.astype(np.float64) if acc is None else acc + comb
            if k == centre:
                gb_chans, rot = chans, r
        combined = (acc / steps).astype(np.float32)
        aov_names = tuple(name for name, _ in AOVS)
        g = _passes.passes_to_gbuffers(
            gb_chans, rot, unit_scale=s.unit_settings.scale_length, aov_names=aov_names,
            default_surface=(DEFAULT_ALBEDO, DEFAULT_METALLIC, DEFAULT_ROUGHNESS), combined=combined)
        # the camera matrix at the frame centre (re-evaluated after the last sub-frame)
        self._set_time(frame + offsets[centre])
        cam = self.camera
        fps = s.render.fps / s.render.fps_base
        extra = {
            "camera_matrix_world": [list(map(float, row)) for row in cam.matrix_world],
            "camera_type": cam.data.type,
            "clip_start": float(cam.data.clip_start),
            "clip_end": float(cam.data.clip_end),
            "scene_frame": int(frame),
            "motion_blur_steps": steps,
            "samples": int(s.cycles.samples),
            "unit_scale": float(s.unit_settings.scale_length),
        }
        # exact values of the 3D scene: every pass is measured (rendered, not estimated)
        extra["provenance"] = {k: "measured" for k in
                               ("depth", "normal", "albedo", "metallic", "roughness", "confidence")}
        extra["pass_models"] = {k: f"Blender {bpy.app.version_string} scene (Cycles passes)"
                                for k in extra["provenance"]}
        if meta_extra:
            extra.update(meta_extra)
        meta = contract.make_meta(
            estimator="scene",
            models={"blender": bpy.app.version_string},
            depth_kind="metric",
            depth_near=g["depth_near"],
            depth_far=g["depth_far"],
            source=bpy.data.filepath or f"<scene {s.name}>",
            frame_index=int(frame - s.frame_start) if frame_index is None else int(frame_index),
            timestamp=float((frame - s.frame_start) / fps),
            source_colorspace="scene_linear",
            intrinsics=camera_intrinsics(s, cam),
            extra=extra,
        )
        f = contract.GBufferFrame(
            combined=g["combined"], depth=g["depth"], normal=g["normal"], albedo=g["albedo"],
            metallic=g["metallic"], roughness=g["roughness"], confidence=g["confidence"], meta=meta)
        f.validate()
        return f


class ExportManifest:
    """The ``manifest.json`` of a scene export, rewritten after every frame.

    Same frame as the backend jobs' manifests (:func:`backend.contract.write_manifest`):

    * ``job``: ``"scene_export"``; ``contract_version``; ``passes``;
    * ``settings``: scene, .blend, camera, view layer, rendered ``resolution``
      ``[width, height]``, Cycles ``samples`` and ``denoise``, ``motion_blur_steps``,
      Blender version, ``lights`` (the names of the lights that render: they lit the plate);
    * ``frames``: one row per file, by scene frame: ``frame``, ``file``, ``depth_near``,
      ``depth_far``, ``intrinsics`` (``[fx, fy, cx, cy]`` in pixels, ``None`` for
      non-perspective cameras), ``camera_matrix_world``, ``timestamp``;
    * ``complete``: every requested frame is in ``frames``.

    Rows of an earlier scene export into the same folder stay unless re-rendered, so a
    cancelled export leaves a manifest listing exactly the files on disk.

    Args:
        out_dir: the export folder.
        renderer: the entered :class:`GBufferRenderer` (its scene settings are recorded).
        frames: the scene frames requested.
        motion_blur_steps: sub-frames per frame.
    """

    def __init__(self, out_dir: os.PathLike, renderer: "GBufferRenderer", frames: Iterable[int],
                 motion_blur_steps: int = 1):
        self.out_dir = Path(out_dir)
        self.wanted = {int(f) for f in frames}
        try:
            old = contract.read_manifest(self.out_dir)
        except ValueError:  # unreadable JSON: start afresh
            old = {}
        self.rows = ({int(e["frame"]): e for e in old.get("frames", []) if "frame" in e}
                     if old.get("job") == MANIFEST_JOB else {})
        s, r = renderer.scene, renderer.scene.render
        self.head = {
            "job": MANIFEST_JOB,
            "passes": list(contract.PASSES),
            "settings": {
                "scene": s.name,
                "blend": bpy.data.filepath,
                "camera": renderer.camera.name,
                "view_layer": renderer.view_layer.name,
                "resolution": [r.resolution_x * r.resolution_percentage // 100,
                               r.resolution_y * r.resolution_percentage // 100],
                "samples": int(s.cycles.samples),
                "denoise": bool(s.cycles.use_denoising),
                "motion_blur_steps": int(motion_blur_steps),
                "blender": bpy.app.version_string,
                # the lights that render these frames: they are in the plate (a relight
                # with Scene Lights skips them, issue 39)
                "lights": sorted(ob.name for ob in s.objects if ob.type == "LIGHT" and not ob.hide_render
                                 and ob.visible_get(view_layer=renderer.view_layer)),
            },
        }

    def add(self, scene_frame: int, path: os.PathLike, meta: Dict) -> Path:
        """Record the file ``path`` of ``scene_frame`` (``meta``: its decoded header);
        rewrite the manifest and return its path."""
        self.rows[int(scene_frame)] = {
            "frame": int(scene_frame),
            "file": Path(path).name,
            "depth_near": meta.get("depth_near"),
            "depth_far": meta.get("depth_far"),
            "intrinsics": meta.get("intrinsics"),
            "camera_matrix_world": meta.get("camera_matrix_world"),
            "timestamp": meta.get("timestamp"),
        }
        return contract.write_manifest(self.out_dir, dict(
            self.head, frames=[self.rows[k] for k in sorted(self.rows)], complete=self.wanted <= set(self.rows)))


def export_scene_gbuffers(
    scene,
    out_dir: os.PathLike,
    frames: Optional[Iterable[int]] = None,
    *,
    motion_blur_steps: int = 1,
    skip_existing: bool = False,
    progress: Optional[Callable[[int, int, Path], None]] = None,
    **render_options,
) -> List[Path]:
    """Render ``frames`` of ``scene`` to contract G-buffer files in ``out_dir``.

    Args:
        scene: ``bpy.types.Scene`` with a camera.
        out_dir: output folder (created); files ``gbuffer_NNNN.exr`` numbered by
            scene frame. Existing files are replaced atomically, or kept when
            ``skip_existing``.
        frames: scene frame numbers (default ``frame_start..frame_end``).
        render_options: :class:`GBufferRenderer`'s keyword options (``camera``,
            ``view_layer``, ``resolution``, ``samples``, ``denoise``, ``threads``,
            ``seed``, ``persistent_data``); another name is a ``TypeError``.
        motion_blur_steps: sub-frames averaged per frame (see
            :meth:`GBufferRenderer.render_frame`).
        progress: called as ``progress(done, total, path)`` after each frame.

    Returns:
        The written (or kept) paths, in frame order.

    Raises:
        ExportError: no camera, or a render failed (message names scene and frame).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = list(range(scene.frame_start, scene.frame_end + 1) if frames is None else frames)
    paths = []
    with GBufferRenderer(scene, **render_options) as gr:
        manifest = ExportManifest(out_dir, gr, frames, motion_blur_steps)
        for i, fr in enumerate(frames):
            path = contract.frame_path(out_dir, int(fr))
            try:
                if skip_existing and path.exists():
                    meta = contract.read_meta(path)
                else:
                    frame = gr.render_frame(int(fr), motion_blur_steps=motion_blur_steps)
                    contract.write_frame(path, frame)
                    meta = frame.meta
            except (contract.ContractError, _passes.PassError) as e:
                raise ExportError(f"scene {scene.name!r} frame {fr}: {e}") from e
            manifest.add(fr, path, meta)
            paths.append(path)
            if progress is not None:
                progress(i + 1, len(frames), path)
    return paths
