"""``decompose --mesh``: the shot's fused surface (:mod:`backend.multiview.tsdf`) written
as PLY after a camera-tracked run, and a ``mesh`` entry in the manifest."""
from __future__ import annotations

from pathlib import Path

from .. import contract, events


def check_mesh_path(mesh, cameras) -> None:
    """Refuse ``--mesh`` without ``--cameras``, a non-PLY path, or an existing file (before the run)."""
    if cameras is None:
        raise ValueError("--mesh needs --cameras: the mesh is fused from measured depth")
    if Path(mesh).suffix.lower() != ".ply":
        raise ValueError(f"--mesh {mesh}: expected a .ply path")
    if Path(mesh).exists():
        raise FileExistsError(f"--mesh {mesh}: exists; the mesh is never written over a file")


def write_mesh(result, mv, path) -> None:
    """Mesh of the shot's fused surface to ``path`` (PLY), and a ``mesh`` entry in the
    manifest; a warning when no frame was fused (all resumed, or none measured)."""
    from ..multiview.tsdf import write_ply

    fusion = mv.fusion
    if fusion is None or fusion.frames == 0:
        events.warning(f"--mesh {path}: no frame was measured in this run (resumed or single-image "
                       "frames are not fused); no mesh written", file=str(path))
        return
    verts, faces = fusion.mesh()
    write_ply(path, verts, faces, comment="G-Buffer Editor fused surface, cameras' world")
    man = result.manifest
    man["mesh"] = {"path": str(path), "vertices": int(len(verts)), "faces": int(len(faces)),
                   "frames_fused": fusion.frames, "voxel": fusion.voxel, "units": mv.units,
                   "world": "the cameras' world (Blender convention for Track & Solve JSON)"}
    contract.write_manifest(result.out_dir, man)
