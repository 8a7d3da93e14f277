"""Held-out evaluation scenes for measured geometry (issue 24): a seeded generator of
Cycles scenes with exact depth, normals and cameras, cached on disk, and the scores.

Scenes
------
A :class:`SceneSpec` names a *kind* ``"{scale}_{shapes}_{texture}"``:

* ``scale``: ``room`` (indoor, a floor and three walls about 9 m wide, camera 3-5 m
  from the subject) or ``outdoor`` (a 200 m ground, buildings and towers 4-14 m tall,
  camera 18-30 m from the subject, sky);
* ``shapes``: ``boxes``, ``curved`` (spheres, cones, cylinders, smooth shaded, on a
  cube) or ``mixed``;
* ``texture``: ``textured`` (high-contrast procedural noise / Voronoi, the stereo's
  easy case) or ``plain`` (flat colours: only shading and edges to match);

a camera *move* (``dolly``: sideways, fixed orientation; ``orbit``: an arc of
30-90 degrees around the subject, looking at it; ``handheld``: walking toward the
subject with rotation jitter), a *seed* (object layout, sizes, colours, texture scales,
lens 20-35 mm, move length / arc / jitter all drawn from it) and optionally a *moving*
object (a textured sphere rolling across the scene between the camera and the subject:
multi-view consistency must mark it). Renders are small (256x192, 8 frames, 16
samples, denoised): a scene takes well under a minute on a shared CPU.

Splits: :data:`TUNE` scenes are the only ones any parameter may be tuned on;
:data:`HELDOUT` scenes (other seeds, other kind/move pairings) are for reporting
only. :data:`MOVING_TUNE` / :data:`MOVING_HELDOUT` add a moving object.

Files (:func:`render_scene`, cached under :func:`cache_root`, i.e. ``$GBUFFER_EVAL_CACHE``
or ``/tmp/gbuffer_eval_scenes``, one folder per spec hash, written atomically)::

    gt/                 the scene export: gbuffer_NNNN.exr + manifest.json (exact)
    shot/shot_NNNN.png  the frames as sRGB PNG (what a user brings)
    cameras.json        our JSON, exact cameras, no depth_range
    cameras_range.json  the same with depth_range (1st/99th percentile of the points)
    colmap/             COLMAP text model, empty points3D.txt
    colmap_points/      COLMAP text model with points3D.txt (sparse GT points, 0.5 %
                        depth noise, 2 % gross outliers)
    gt.npz              depth, normal (N x H x W [x 3] float32), valid, moving (bool)
    scene.json          the spec and the generator version

:func:`score_frames` computes AbsRel, delta1, Spearman, coverage and normal error of
a decompose output against the truth, with baselines on the same pixels. Needs ``bpy``
to render; loading a cached scene and scoring do not.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

#: bump when the scenes change (invalidates the cache)
GENERATOR_VERSION = 1
SCALES = ("room", "outdoor")
SHAPES = ("boxes", "curved", "mixed")
TEXTURES = ("textured", "plain")
MOVES = ("dolly", "orbit", "handheld")
#: camera file variants of a scene: name -> (relative path, has points or a range)
CAMERA_VARIANTS = {"json": ("cameras.json", False), "json_range": ("cameras_range.json", True),
                   "colmap": ("colmap", False), "colmap_points": ("colmap_points", True)}


@dataclass(frozen=True)
class SceneSpec:
    """One evaluation scene (see module doc). ``size`` is ``(width, height)``."""

    kind: str
    move: str
    seed: int
    moving: bool = False
    n_frames: int = 8
    size: Tuple[int, int] = (256, 192)
    samples: int = 16

    def __post_init__(self):
        scale, shapes, texture = self.kind.split("_")
        if scale not in SCALES or shapes not in SHAPES or texture not in TEXTURES or self.move not in MOVES:
            raise ValueError(f"bad scene spec {self}")

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.move}-s{self.seed}" + ("-moving" if self.moving else "")

    def key(self) -> str:
        doc = json.dumps({**asdict(self), "version": GENERATOR_VERSION}, sort_keys=True)
        return self.name + "-" + hashlib.sha256(doc.encode()).hexdigest()[:10]


def _specs(rows) -> Tuple[SceneSpec, ...]:
    return tuple(SceneSpec(k, m, s, moving=mv) for k, m, s, mv in rows)


#: tune on these only
TUNE = _specs([
    ("room_boxes_textured", "orbit", 1, False), ("room_curved_textured", "dolly", 2, False),
    ("room_mixed_plain", "handheld", 3, False), ("outdoor_mixed_textured", "orbit", 4, False),
    ("outdoor_mixed_plain", "dolly", 5, False), ("room_curved_plain", "orbit", 6, False),
])
#: report on these; never tune on them
HELDOUT = _specs([
    ("room_boxes_textured", "handheld", 101, False), ("room_curved_textured", "orbit", 102, False),
    ("room_mixed_plain", "dolly", 103, False), ("outdoor_mixed_textured", "handheld", 104, False),
    ("outdoor_boxes_plain", "orbit", 105, False), ("room_mixed_textured", "orbit", 106, False),
    ("outdoor_curved_textured", "dolly", 107, False),
])
#: a moving object (multi-view consistency), tune / held-out
MOVING_TUNE = _specs([("room_boxes_textured", "dolly", 201, True)])
MOVING_HELDOUT = _specs([("room_mixed_textured", "handheld", 202, True)])
SPLITS = {"tune": TUNE, "heldout": HELDOUT, "moving_tune": MOVING_TUNE, "moving_heldout": MOVING_HELDOUT}


def cache_root() -> Path:
    """Where renders are cached (outside the repository): ``$GBUFFER_EVAL_CACHE`` or
    ``/tmp/gbuffer_eval_scenes``."""
    return Path(os.environ.get("GBUFFER_EVAL_CACHE") or Path(tempfile.gettempdir()) / "gbuffer_eval_scenes")


# ---------------------------------------------------------------------- building (bpy)
def _plain(name: str, colour):
    import bpy

    m = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        m.use_nodes = True
    p = next(n for n in m.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    p.inputs["Base Color"].default_value = (*colour, 1.0)
    p.inputs["Roughness"].default_value = 0.6
    return m


class _Builder:
    """Adds seeded objects to the current (empty) scene."""

    def __init__(self, rng: np.random.Generator, textured: bool):
        self.rng, self.textured, self.n = rng, textured, 0

    def material(self, tex_scale: float):
        from cycles_scenes import _textured

        self.n += 1
        colour = tuple(float(c) for c in self.rng.uniform(0.25, 0.95, 3))
        if not self.textured:
            return _plain(f"m{self.n}", colour)
        kind = "voronoi" if self.rng.random() < 0.4 else "noise"
        return _textured(f"m{self.n}", tex_scale * float(self.rng.uniform(0.7, 1.4)), colour, kind)

    def add(self, shape: str, loc, size, tex_scale: float = 8.0, rot_z: float = 0.0):
        """``shape`` in box / sphere / cone / cylinder; ``size`` (x, y, z) extents in metres."""
        import bpy

        sx, sy, sz = size
        if shape == "box":
            bpy.ops.mesh.primitive_cube_add(size=1.0, location=loc)
        elif shape == "sphere":
            bpy.ops.mesh.primitive_uv_sphere_add(segments=48, ring_count=24, radius=0.5, location=loc)
        elif shape == "cone":
            bpy.ops.mesh.primitive_cone_add(vertices=48, radius1=0.5, depth=1.0, location=loc)
        else:
            bpy.ops.mesh.primitive_cylinder_add(vertices=48, radius=0.5, depth=1.0, location=loc)
        ob = bpy.context.active_object
        ob.scale = (sx, sy, sz)
        ob.rotation_euler[2] = rot_z
        if shape != "box":
            bpy.ops.object.shade_smooth()
        ob.data.materials.append(self.material(tex_scale))
        return ob


def _shape_pool(shapes: str) -> List[str]:
    return {"boxes": ["box"], "curved": ["sphere", "cone", "cylinder"],
            "mixed": ["box", "sphere", "cone", "cylinder"]}[shapes]


def _room(b: _Builder, shapes: str) -> Tuple[np.ndarray, float]:
    """Floor, back and side walls, 3-4 objects. Returns (subject point, camera distance)."""
    rng = b.rng
    half = float(rng.uniform(4.2, 5.0))
    b.add("box", (0, 0, -0.05), (2 * half, 16, 0.1), 14.0)
    b.add("box", (0, 4.0, 2.5), (2 * half, 0.1, 5), 12.0)
    b.add("box", (-half, 0, 2.5), (0.1, 16, 5), 12.0)
    b.add("box", (half, 0, 2.5), (0.1, 16, 5), 12.0)
    pool = _shape_pool(shapes)
    if shapes == "curved":  # curved shapes on a cube, as the cones-on-a-cube scene
        b.add("box", (0.0, 1.2, 0.4), (1.6, 1.2, 0.8), 6.0)
        b.add(str(rng.choice(["cone", "sphere"])), (0.0, 1.2, 1.3), (0.9, 0.9, 1.0), 6.0)
    for i in range(3):
        shape = str(rng.choice(pool))
        w, h = float(rng.uniform(0.6, 1.4)), float(rng.uniform(0.5, 1.8))
        loc = (float(rng.uniform(-2.2, 2.2)), float(rng.uniform(-1.0, 2.6)), h / 2)
        b.add(shape, loc, (w, w * float(rng.uniform(0.6, 1.2)), h), 7.0, float(rng.uniform(0, math.pi)))
    return np.array([0.0, 1.0, 0.8]), float(rng.uniform(4.0, 5.0))


def _outdoor(b: _Builder, shapes: str) -> Tuple[np.ndarray, float]:
    """A large ground, 6-8 objects of 4-14 m, sky. Returns (subject point, camera distance)."""
    rng = b.rng
    b.add("box", (0, 0, -0.5), (200, 200, 1.0), 40.0)
    pool = _shape_pool(shapes)
    for i in range(int(rng.integers(6, 9))):
        shape = str(rng.choice(pool))
        w, h = float(rng.uniform(4, 10)), float(rng.uniform(4, 14))
        r = float(rng.uniform(0, 22)) if i < 4 else float(rng.uniform(25, 45))
        a = float(rng.uniform(-0.9, 0.9)) * math.pi / 2
        loc = (r * math.sin(a), 6.0 + r * math.cos(a), h / 2)
        b.add(shape, loc, (w, w * float(rng.uniform(0.6, 1.3)), h), 5.0, float(rng.uniform(0, math.pi)))
    return np.array([0.0, 8.0, 3.0]), float(rng.uniform(18.0, 30.0))


def _look_at(loc, target, jitter=(0.0, 0.0, 0.0)):
    """Blender Euler rotation of a camera at ``loc`` looking at ``target`` (+Y up), then
    rotated by ``jitter`` (pitch, yaw, roll in degrees) in its own frame."""
    from mathutils import Euler, Vector

    q = (Vector(target) - Vector(loc)).to_track_quat("-Z", "Y")
    j = Euler([math.radians(v) for v in (jitter[0], jitter[1], jitter[2])], "XYZ").to_quaternion()
    return (q @ j).to_euler()


def camera_path(move: str, rng: np.random.Generator, target: np.ndarray, dist: float, n: int,
                height: float):
    """Per frame ``(location, euler)`` of the move (see module doc)."""
    out = []
    if move == "dolly":
        length = 0.28 * dist * float(rng.uniform(0.8, 1.2))
        base = target + np.array([0.0, -dist, height - target[2]])
        rot = _look_at(base, target)
        for i in range(n):
            s = i / max(1, n - 1) - 0.5
            out.append((tuple(base + np.array([s * length, 0.0, 0.0])), rot))
    elif move == "orbit":
        arc = float(rng.uniform(30.0, 90.0))
        a0 = -arc / 2 + float(rng.uniform(-8.0, 8.0))
        for i in range(n):
            a = math.radians(a0 + arc * i / max(1, n - 1))
            loc = target + np.array([dist * math.sin(a), -dist * math.cos(a), height - target[2]])
            out.append((tuple(loc), _look_at(loc, target)))
    else:
        walk = 0.22 * dist * float(rng.uniform(0.8, 1.2))
        ph = rng.uniform(0, 2 * math.pi, 4)
        for i in range(n):
            t = i / max(1, n - 1)
            loc = target + np.array([0.03 * dist * math.sin(7 * t + ph[0]), -dist + walk * t,
                                     height - target[2] + 0.01 * dist * math.sin(11 * t + ph[1])])
            jit = (1.5 * math.sin(9 * t + ph[2]) + float(rng.normal(0, 0.3)),
                   2.0 * math.sin(5 * t + ph[3]) + float(rng.normal(0, 0.3)), float(rng.normal(0, 0.5)))
            out.append((tuple(loc), _look_at(loc, target + np.array([0, 0, 0]), jit)))
    return out


def build_scene(spec: SceneSpec):
    """A fresh bpy scene for ``spec``; returns ``(scene, moving_sphere)`` where
    ``moving_sphere`` is ``[(centre (3,), radius)] per frame`` or ``None``."""
    import bpy

    scale, shapes, texture = spec.kind.split("_")
    rng = np.random.default_rng(spec.seed)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.render.resolution_x, scene.render.resolution_y = spec.size
    scene.render.resolution_percentage = 100
    scene.frame_start, scene.frame_end = 1, spec.n_frames
    world = bpy.data.worlds.new("w")
    scene.world = world
    if bpy.app.version < (5, 0, 0):
        world.use_nodes = True
    bg = world.node_tree.nodes["Background"]
    bg.inputs["Strength"].default_value = 1.5
    bg.inputs["Color"].default_value = (0.55, 0.7, 0.95, 1.0)
    b = _Builder(rng, texture == "textured")
    target, dist = (_room if scale == "room" else _outdoor)(b, shapes)
    sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
    sun.data.energy = 4.0
    sun.rotation_euler = (math.radians(float(rng.uniform(35, 60))), math.radians(10),
                          math.radians(float(rng.uniform(0, 360))))
    scene.collection.objects.link(sun)
    cam = bpy.data.objects.new("cam", bpy.data.cameras.new("cam"))
    cam.data.lens = float(rng.uniform(20.0, 35.0))
    cam.data.clip_start = 0.05
    cam.data.clip_end = 1000.0
    scene.collection.objects.link(cam)
    scene.camera = cam
    height = float(rng.uniform(1.3, 1.8)) if scale == "room" else float(rng.uniform(1.7, 4.0))
    for i, (loc, rot) in enumerate(camera_path(spec.move, rng, target, dist, spec.n_frames, height)):
        cam.location = loc
        cam.rotation_euler = rot
        cam.keyframe_insert("location", frame=i + 1)
        cam.keyframe_insert("rotation_euler", frame=i + 1)
    moving = None
    if spec.moving:
        unit = 1.0 if scale == "room" else 4.0
        r = 0.35 * unit
        ob = b.add("sphere", (0, 0, r), (2 * r, 2 * r, 2 * r), 4.0)
        mid = target + np.array([0.0, -0.45 * dist, 0.0])
        moving = []
        for i in range(spec.n_frames):
            c = np.array([mid[0] + (-1.5 + 3.0 * i / max(1, spec.n_frames - 1)) * unit, mid[1], r])
            ob.location = tuple(c)
            ob.keyframe_insert("location", frame=i + 1)
            moving.append((c, r))
    return scene, moving


# ---------------------------------------------------------------------- files
def _sample_points(depths, valid, cams, rng, per_frame=200, noise=0.005, outliers=0.02):
    """World points from the exact depth (a stand-in for a solve's bundles): ``per_frame``
    random valid pixels per frame, ``noise`` relative depth noise, a share of gross
    outliers (a random depth 0.3-5x the true one). Returns ``(X (N x 3), image index (N,))``."""
    from backend.multiview.reproject import world_points

    xs, ids = [], []
    for i, (d, v, cam) in enumerate(zip(depths, valid, cams)):
        yy, xx = np.nonzero(v)
        pick = rng.choice(len(yy), size=min(per_frame, len(yy)), replace=False)
        z = d[yy[pick], xx[pick]] * (1 + noise * rng.standard_normal(len(pick)))
        bad = rng.random(len(pick)) < outliers
        z[bad] *= rng.uniform(0.3, 5.0, bad.sum())
        dm = np.zeros_like(d)
        dm[yy[pick], xx[pick]] = z
        X = world_points(dm, cam)[yy[pick], xx[pick]]
        xs.append(X)
        ids.append(np.full(len(pick), i))
    return np.concatenate(xs).astype(np.float64), np.concatenate(ids)


def write_points3d(folder: Path, X: np.ndarray, image_ids: np.ndarray) -> None:
    """COLMAP ``points3D.txt``: ``ID X Y Z R G B ERROR IMAGE_ID POINT2D_IDX`` (one
    observation per point: its 1-based image id)."""
    lines = ["# 3D point list with one line of data per point:",
             "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)"]
    for j, (x, i) in enumerate(zip(X, image_ids), start=1):
        lines.append(f"{j} {x[0]!r} {x[1]!r} {x[2]!r} 128 128 128 0.5 {int(i) + 1} 0")
    (folder / "points3D.txt").write_text("\n".join(lines) + "\n")


def _moving_masks(depths, cams, moving) -> np.ndarray:
    from backend.multiview.reproject import world_points

    out = np.zeros(np.shape(depths), bool)
    if moving is None:
        return out
    for i, (d, cam, (c, r)) in enumerate(zip(depths, cams, moving)):
        dist = np.linalg.norm(world_points(d, cam) - c.astype(np.float32), axis=-1)
        out[i] = np.abs(dist - r) < 0.03 * r
    return out


def _write_files(tmp: Path, spec: SceneSpec, moving) -> None:
    import cv2

    from gbuffer_editor.backend import contract as ext_contract

    from backend import contract
    from backend.colour import linear_to_srgb
    from backend.multiview.camera_files import save_cameras_json, save_colmap_text
    from backend.multiview.cameras import Camera

    man = ext_contract.read_manifest(tmp / "gt")
    shot = tmp / "shot"
    shot.mkdir(parents=True, exist_ok=True)
    cams, depths, normals, valid = {}, [], [], []
    w, h = spec.size
    for row in man["frames"]:
        fr = contract.read_frame(tmp / "gt" / row["file"])
        rgb8 = (linear_to_srgb(fr.combined[..., :3]) * 255 + 0.5).astype(np.uint8)
        cv2.imwrite(str(shot / f"shot_{row['frame']:04d}.png"), rgb8[..., ::-1])
        cams[row["frame"]] = Camera.from_c2w_opengl(np.asarray(row["camera_matrix_world"]), w, h,
                                                    *row["intrinsics"], name=str(row["frame"]))
        v = (fr.confidence > contract.NO_SURFACE) & np.isfinite(fr.depth) & (fr.depth > 0)
        depths.append(np.where(v, fr.depth, 0).astype(np.float32))
        normals.append(fr.normal.astype(np.float32))
        valid.append(v)
    order = sorted(cams)
    cam_list = [cams[k] for k in order]
    rng = np.random.default_rng(spec.seed + 7919)
    X, ids = _sample_points(depths, valid, cam_list, rng)
    z = np.concatenate([(X @ c.R.T + c.t)[:, 2] for c in cam_list])
    z = z[z > 0]
    rng_range = (float(np.percentile(z, 1)), float(np.percentile(z, 99)))
    save_cameras_json(tmp / "cameras.json", cams, units="metres")
    save_cameras_json(tmp / "cameras_range.json", cams, units="metres", depth_range=rng_range)
    named = {f"shot_{k:04d}.png": cams[k] for k in order}
    save_colmap_text(tmp / "colmap", named)
    save_colmap_text(tmp / "colmap_points", named)
    write_points3d(tmp / "colmap_points", X, ids)
    mov = _moving_masks(depths, cam_list, moving)
    np.savez_compressed(tmp / "gt.npz", depth=np.stack(depths), normal=np.stack(normals),
                        valid=np.stack(valid), moving=mov, frames=np.array(order))
    (tmp / "scene.json").write_text(json.dumps({"spec": asdict(spec), "version": GENERATOR_VERSION,
                                                "points_depth_range": rng_range}, indent=1))


def render_scene(spec: SceneSpec, root: Optional[Path] = None, force: bool = False) -> Path:
    """The scene's folder (see module doc), rendering it first unless cached. Needs bpy
    and the checkout importable as ``gbuffer_editor`` (tools/source_package.py)."""
    root = Path(root) if root is not None else cache_root()
    out = root / spec.key()
    if (out / "scene.json").exists() and not force:
        return out
    import sys

    tools = str(Path(__file__).resolve().parent.parent / "tools")
    if tools not in sys.path:
        sys.path.append(tools)
    from source_package import put_checkout_on_path

    put_checkout_on_path()
    from gbuffer_editor.addon.scene.export import export_scene_gbuffers

    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (".partial-" + spec.key())  # a finished export survives a failure after it
    if not (tmp / "gt" / "manifest.json").exists() or force:
        scene, moving = build_scene(spec)
        export_scene_gbuffers(scene, tmp / "gt", samples=spec.samples, denoise=True)
        (tmp / "moving.json").write_text(json.dumps(
            None if moving is None else [[c.tolist(), r] for c, r in moving]))
    moving = json.loads((tmp / "moving.json").read_text())
    moving = None if moving is None else [(np.array(c), r) for c, r in moving]
    _write_files(tmp, spec, moving)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def load_truth(folder: Path) -> Dict[str, np.ndarray]:
    """``gt.npz`` of a rendered scene: depth, normal, valid, moving, frames."""
    with np.load(Path(folder) / "gt.npz") as z:
        return {k: z[k] for k in z.files}


# ---------------------------------------------------------------------- scores
def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(spearmanr(a, b).statistic)


def _depth_scores(pred: np.ndarray, gt: np.ndarray) -> Dict[str, float]:
    if pred.size == 0:
        return {"absrel": float("nan"), "delta1": float("nan"), "spearman": float("nan")}
    ratio = np.maximum(pred / gt, gt / pred)
    return {"absrel": float(np.mean(np.abs(pred - gt) / gt)), "delta1": float(np.mean(ratio < 1.25)),
            "spearman": _spearman(pred, gt)}


def _baselines(gt: np.ndarray, rows: np.ndarray) -> Dict[str, Dict[str, float]]:
    """Oracle-fitted trivial depths on the same pixels: the median constant, and depth
    linear in the image row (least squares against the truth)."""
    if gt.size == 0:
        return {"constant": _depth_scores(gt, gt), "vertical": _depth_scores(gt, gt)}
    const = np.full_like(gt, np.median(gt))
    A = np.stack([rows, np.ones_like(rows)], 1)
    coef = np.linalg.lstsq(A, gt, rcond=None)[0]
    vert = np.maximum(A @ coef, 1e-3 * np.median(gt))
    return {"constant": _depth_scores(const, gt), "vertical": _depth_scores(vert, gt)}


def _angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.degrees(np.arccos(np.clip((a * b).sum(-1), -1.0, 1.0)))


def score_frame(depth, normal, confidence, gt_depth, gt_normal, valid, moving=None,
                threshold: float = 0.5) -> Dict[str, float]:
    """Scores of one frame against the truth.

    Args:
        depth, confidence: ``H x W`` float32 predicted planar depth and Confidence.
        normal: ``H x W x 3`` float32 camera-space normals (OpenGL: +Z toward the camera).
        gt_depth, gt_normal, valid: the truth and its valid (surface, not sky) mask.
        moving: ``H x W`` bool of a moving object's pixels, or ``None``.

    Returns:
        flat dict: ``conf_*`` on confident valid pixels (Confidence > threshold),
        ``all_*`` on all valid pixels, for ``pred``, ``constant`` and ``vertical``
        (absrel, delta1, spearman); ``coverage`` (share of valid pixels confident);
        ``normal_deg`` / ``facing_normal_deg`` (mean angular error over all valid
        pixels of the prediction and of a constant camera-facing normal);
        ``moving_confident`` (share of moving pixels confident) when ``moving`` is given.
    """
    conf = valid & (confidence > threshold)
    rows_img = np.broadcast_to(np.arange(gt_depth.shape[0], dtype=np.float64)[:, None], gt_depth.shape)
    out: Dict[str, float] = {"coverage": float(conf.sum() / max(1, valid.sum()))}
    for tag, m in (("conf", conf), ("all", valid)):
        g = gt_depth[m].astype(np.float64)
        for name, s in {"pred": _depth_scores(depth[m].astype(np.float64), g),
                        **_baselines(g, rows_img[m])}.items():
            for k, v in s.items():
                out[f"{tag}_{name}_{k}"] = v
    out["normal_deg"] = float(_angle_deg(normal[valid], gt_normal[valid]).mean())
    out["facing_normal_deg"] = float(_angle_deg(np.array([0, 0, 1.0], np.float32), gt_normal[valid]).mean())
    if moving is not None and moving.any():
        out["moving_confident"] = float((confidence[moving] > threshold).mean())
        out["moving_pixels"] = float(moving.mean())
    return out


def score_output(out_dir: Path, truth: Dict[str, np.ndarray], threshold: float = 0.5) -> Dict[str, float]:
    """Mean over frames of :func:`score_frame` for a decompose output folder."""
    from backend import contract

    rows = []
    for i, n in enumerate(truth["frames"]):
        fr = contract.read_frame(contract.frame_path(out_dir, int(n)))
        rows.append(score_frame(fr.depth, fr.normal, fr.confidence, truth["depth"][i], truth["normal"][i],
                                truth["valid"][i], truth["moving"][i] if truth["moving"].any() else None,
                                threshold))
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    return {k: float(np.nanmean([r[k] for r in rows])) for k in keys}


def frames_of(spec: SceneSpec) -> Sequence[int]:
    return range(1, spec.n_frames + 1)
