"""The optional models: what they are, whether they are in the models folder, and
download / verify / remove (``python -m backend models``; the add-on's Preferences > Models
runs the same :func:`download` in its worker).

The models folder is a Hugging Face cache folder (:func:`backend.catalog.models_folder`):
``models--<org>--<name>/blobs/<etag>`` holds each file once, ``snapshots/<commit>/<path>``
links to it and ``refs/main`` names the commit (:mod:`backend.hub_cache` finds them).
Downloads are ``huggingface_hub.snapshot_download`` with the files each model needs
(:attr:`ModelSpec.allow`: safetensors and configs, never pickles; the fp32 ONNX file of
Depth Anything V2). Verifying re-hashes every file of the snapshot against the name
``huggingface_hub`` gave its blob: the SHA-256 the hub lists for Git LFS files (weights),
the Git blob SHA-1 for the others.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .errors import JobError
from .hub_cache import COMMAND, cached_file, cached_snapshot, download_hint, repo_folder  # noqa: F401

_PIPELINE_FILES = ("*.json", "*.txt", "*.safetensors", "tokenizer/*", "*.model")
_SD_FILES = ("model_index.json", "*/*.json", "*/*.txt", "*/diffusion_pytorch_model.safetensors",
             "*/model.safetensors", "tokenizer/*")



class ModelStoreError(JobError):
    """A model cannot be downloaded, verified or removed; ``str(e)`` is one line."""


@dataclass(frozen=True)
class ModelSpec:
    """One downloadable (or bundled) model.

    Attributes:
        key: short identifier (``python -m backend models download KEY``, the add-on's operator).
        label: name shown to users.
        repo_id: Hugging Face repository, or ``""`` for the bundled embedded model.
        used_by: which estimator / renderer needs it (``estimator 'marigold'``).
        allow: file patterns to download (safetensors only, never pickles).
        marker: a file whose presence in the snapshot means "downloaded" (default: a
            ``model_index.json`` or ``config.json``).
        licence, size, vram: shown to users (``""`` = not shown).
    """

    key: str
    label: str
    repo_id: str
    used_by: str
    allow: Tuple[str, ...] = _PIPELINE_FILES
    marker: str = ""
    licence: str = ""
    size: str = ""
    vram: str = ""

    @property
    def user(self) -> str:
        """The estimator or renderer name in :attr:`used_by` (``marigold``)."""
        return self.used_by.split("'")[1] if "'" in self.used_by else self.used_by


def model_specs() -> Tuple[ModelSpec, ...]:
    """The models the backend can use, with the repository ids the backend itself uses."""
    from .estimators import marigold as mg
    from .estimators import onnx_depth as od
    from .renderers import controlnet as cn
    from .renderers import flux2_klein as fk
    from .renderers import wan_vace as wan

    return (
        ModelSpec("embedded", "Embedded G-buffer net (bundled)", "", "estimator 'embedded'"),
        # the fp32 weights only (_SD_FILES): the estimator never loads the *.fp16.safetensors copies
        ModelSpec("marigold_depth", "Marigold Depth", mg.DEPTH_MODEL, "estimator 'marigold'", _SD_FILES,
                  licence="OpenRAIL++-M"),
        ModelSpec("marigold_normals", "Marigold Normals", mg.NORMALS_MODEL, "estimator 'marigold'", _SD_FILES,
                  licence="OpenRAIL++-M"),
        ModelSpec("marigold_iid", "Marigold Appearance (albedo, roughness, metallic)", mg.INTRINSICS_MODEL,
                  "estimator 'marigold'", _SD_FILES, licence="OpenRAIL++-M"),
        ModelSpec("sd15", "Stable Diffusion 1.5", cn.DEFAULT_BASE_MODEL, "renderer 'controlnet'", _SD_FILES),
        ModelSpec("controlnet_depth", "ControlNet Depth (SD 1.5)", cn.DEFAULT_DEPTH_MODEL, "renderer 'controlnet'"),
        ModelSpec("controlnet_normal", "ControlNet Normal (SD 1.5)", cn.DEFAULT_NORMAL_MODEL, "renderer 'controlnet'"),
        ModelSpec("flux2_klein_4b", "FLUX.2 [klein] 4B (GPU, ~13 GB VRAM; bf16)", fk.DEFAULT_MODEL,
                  "renderer 'flux2-klein'", fk.DOWNLOAD_FILES, licence="Apache-2.0", size="~16 GB"),
        ModelSpec("wan_vace_1_3b", "Wan2.1 VACE 1.3B (video restyle)", wan.DEFAULT_MODEL, "renderer 'wan-vace'",
                  licence="Apache-2.0", size="~20 GB (estimate)", vram="GPU with 8+ GB VRAM at 480p"),
        # the fp32 file: what variant="auto" loads on every provider unless the fp16 file is there too
        *(ModelSpec(m.key, f"{m.label} (ONNX)", m.repo_id, f"estimator '{m.key}'",
                    (m.files["fp32"],) + tuple(m.extra_files), marker=m.files["fp32"], licence=m.licence,
                    size=f"{m.sizes_mb['fp32']:.0f} MB") for m in od.MODELS.values()),
    )


def find_specs(names) -> List[ModelSpec]:
    """The downloadable specs ``names`` ask for: a key (``marigold_depth``), a repository
    id, or an estimator / renderer name (``marigold``: its three models).

    Raises:
        ValueError: a name that matches none (the message lists the keys).
    """
    specs = [s for s in model_specs() if s.repo_id]
    out: List[ModelSpec] = []
    for name in names:
        hit = [s for s in specs if name in (s.key, s.repo_id, s.user)]
        if not hit:
            raise ValueError(f"unknown model {name!r}; one of {', '.join(s.key for s in specs)} "
                             "(or an estimator / renderer name)")
        out += [s for s in hit if s not in out]
    return out


# ---------------------------------------------------------------------------- status


def bundled_folder() -> Path:
    """The Hugging Face cache folder a release zip carries (``./dev build --with-models``)."""
    return Path(__file__).resolve().parent.parent / "models"


def snapshot(spec: ModelSpec, cache: Optional[os.PathLike]) -> Optional[Path]:
    """The snapshot ``refs/main`` names, in ``cache`` then in the zip's own models folder,
    that holds the spec's marker (or a ``model_index.json`` / ``config.json``); ``None``."""
    markers = (spec.marker,) if spec.marker else ("model_index.json", "config.json")
    for folder in ([Path(cache)] if cache else []) + [bundled_folder()]:
        snap = cached_snapshot(folder, spec.repo_id)
        if snap is not None and any((snap / m).exists() for m in markers):
            return snap
    return None


def folder_size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (each blob once; links are not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                try:
                    total += os.path.getsize(p)
                except OSError:
                    pass
    return total


def model_status(spec: ModelSpec, cache: Optional[os.PathLike]) -> Tuple[bool, int]:
    """``(present, size in bytes)``: the bundled weights file for the embedded model, else
    the snapshot (:func:`snapshot`) and the size of its repository folder (blobs)."""
    if not spec.repo_id:
        from .estimators import embedded

        p = embedded.DEFAULT_MODEL
        return (True, p.stat().st_size) if p.exists() else (False, 0)
    snap = snapshot(spec, cache)
    return (True, folder_size(snap.parents[1])) if snap is not None else (False, 0)


def human_size(n: int) -> str:
    """``1536 -> '1.5 KB'`` (powers of 1024)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover


def listing(cache: Optional[os.PathLike]) -> List[Dict[str, object]]:
    """One dict per model: ``key, label, repo_id, used_by, licence, size`` (published),
    ``present``, ``bytes`` on disk, ``path`` (the snapshot or weights file) and ``ready``
    (the readiness of the estimator / renderer that uses it, ``None`` = ready)."""
    from .catalog import readiness

    rows = []
    for s in model_specs():
        present, n = model_status(s, cache)
        kind, _, _ = s.used_by.partition(" ")
        path = (str(snapshot(s, cache)) if present and s.repo_id else "bundled" if present else None)
        rows.append({"key": s.key, "label": s.label, "repo_id": s.repo_id, "used_by": s.used_by,
                     "licence": s.licence, "size": s.size, "present": present, "bytes": n, "path": path,
                     "ready": readiness(kind, s.user, cache_dir=cache)})
    return rows


# ---------------------------------------------------------------------------- verify / remove

_SHA256, _SHA1 = re.compile(r"^[0-9a-f]{64}$"), re.compile(r"^[0-9a-f]{40}$")


def file_digest(path: Path, algo: str, git_blob: bool = False) -> str:
    """Hex digest of a file (``git_blob``: the Git blob SHA-1, ``blob <size>\\0`` first)."""
    h = hashlib.new(algo)
    if git_blob:
        h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(spec: ModelSpec, cache: Optional[os.PathLike]) -> Dict[str, object]:
    """Re-hash every file of the model's snapshot and compare with its blob's name (the
    hub's SHA-256 for LFS files, Git blob SHA-1 for the rest).

    Returns:
        ``{"key", "snapshot", "checked": n, "bad": [repository paths that differ or are
        broken links], "unchecked": [paths not stored as hub blobs]}``.

    Raises:
        ModelStoreError: the model is not in the models folder.
    """
    snap = snapshot(spec, cache)
    if snap is None:
        raise ModelStoreError(f"{spec.label} ({spec.repo_id}) is not in the models folder {cache}: "
                              f"{download_hint(spec.key)}")
    checked, bad, unchecked = 0, [], []
    for p in sorted(snap.rglob("*")):
        if p.is_dir():
            continue
        rel = p.relative_to(snap).as_posix()
        if not p.exists():
            bad.append(rel)  # a link to a blob that is gone
            continue
        name = p.resolve().name
        if _SHA256.match(name):
            ok = file_digest(p, "sha256") == name
        elif _SHA1.match(name):
            ok = file_digest(p, "sha1", git_blob=True) == name
        else:
            unchecked.append(rel)
            continue
        checked += 1
        if not ok:
            bad.append(rel)
    return {"key": spec.key, "snapshot": str(snap), "checked": checked, "bad": bad, "unchecked": unchecked}


def remove(spec: ModelSpec, cache: os.PathLike) -> int:
    """Delete the model's folder (``models--<org>--<name>``) from the models folder
    ``cache``; returns the bytes freed (0 when it was not there). A copy bundled in the
    release zip is never touched."""
    folder = repo_folder(cache, spec.repo_id)
    if not folder.is_dir():
        return 0
    n = folder_size(folder)
    shutil.rmtree(folder)
    return n


# ---------------------------------------------------------------------------- download


def download(spec: ModelSpec, cache: os.PathLike,
             progress: Optional[Callable[[int, int], None]] = None, poll_s: float = 0.5) -> Path:
    """Download the spec's files (:attr:`ModelSpec.allow`) into the models folder ``cache``
    with ``huggingface_hub.snapshot_download``; ``progress(done_bytes, total_bytes)`` is
    called every ``poll_s`` seconds meanwhile (bytes on disk under the model's folder,
    total as the hub lists it). An interrupted download leaves only ``*.incomplete``
    blobs, which a rerun resumes. Returns the snapshot folder.

    Raises:
        ModelStoreError: ``HF_HUB_OFFLINE`` is set, ``huggingface_hub`` is missing, or the
            hub cannot be reached / the download failed (one line, naming the model).
    """
    what = f"{spec.label} ({spec.repo_id})"
    try:
        from huggingface_hub import HfApi, constants, snapshot_download
    except ImportError:
        raise ModelStoreError(f"{what}: downloading needs the huggingface_hub package, which this Python "
                              "lacks (pip install huggingface_hub)") from None
    if constants.HF_HUB_OFFLINE:
        raise ModelStoreError(f"{what}: downloads are off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set "
                              "in the environment); "
                              "unset it and run again")
    from fnmatch import fnmatch

    os.makedirs(cache, exist_ok=True)
    try:
        info = HfApi().model_info(spec.repo_id, files_metadata=True)
    except Exception as e:  # noqa: BLE001 - no network, unknown repo, gated: one line
        raise ModelStoreError(f"{what}: cannot reach the model hub ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]})") from e
    total = sum((s.size or 0) for s in info.siblings if any(fnmatch(s.rfilename, a) for a in spec.allow))
    result: Dict[str, object] = {}

    def run():
        try:
            result["path"] = snapshot_download(spec.repo_id, cache_dir=str(cache), allow_patterns=list(spec.allow))
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    folder = repo_folder(cache, spec.repo_id)
    while t.is_alive():
        t.join(poll_s)
        if progress is not None:
            progress(folder_size(folder) if folder.is_dir() else 0, total)
    if "error" in result:
        e = result["error"]
        raise ModelStoreError(f"{what}: download into {cache} failed ({type(e).__name__}: "
                              f"{' '.join(str(e).split())[:200]}); a rerun resumes it") from e
    return Path(str(result["path"]))


def progress_events(emit: Callable[[dict], None]) -> Callable[[int, int], None]:
    """A ``progress`` callback for :func:`download` that emits the CLI's ``progress``
    events in MB (``done``, ``total``, ``fps`` = MB/s, ``eta_s``)."""
    start = time.time()

    def report(done: int, total: int) -> None:
        mb, tot = done // 2**20, max(1, total // 2**20)
        rate = done / 2**20 / max(1e-3, time.time() - start)
        emit({"event": "progress", "frame": None, "done": min(mb, tot), "total": tot, "fps": round(rate, 3),
              "eta_s": round((tot - mb) / rate, 1) if rate else None})

    return report


def cached_model_file(repo_id: str, filename: str, cache: Optional[os.PathLike]) -> Optional[Path]:
    """``filename`` of ``repo_id`` in ``cache``, else in the zip's bundled models folder."""
    return cached_file(cache, repo_id, filename) or cached_file(bundled_folder(), repo_id, filename)
