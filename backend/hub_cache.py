"""The one look-up of a model in a Hugging Face cache folder (the models folder); no network.

Also the words every "model missing" message ends with (:func:`download_hint`, naming
``python -m backend models download``; :mod:`backend.model_store` implements it).

Every loader that finds a downloaded model (Depth Anything V2 / Video Depth Anything's
ONNX files, FLUX.2 [klein]'s and Wan VACE's pipeline folders) asks here, so they agree on
which copy counts: the commit ``refs/<revision>`` names (``main`` by default), or the
commit itself when ``revision`` is one, exactly as ``huggingface_hub`` resolves it.
A snapshot no ref names (an older download the branch moved past) is never picked.

With ``huggingface_hub`` installed this is its own code:
``huggingface_hub.try_to_load_from_cache`` for one file and
``huggingface_hub.snapshot_download(local_files_only=True)`` for a whole snapshot. Without it
(the default path of the extension zip need not carry it) the same layout
(``models--<org>--<name>/refs/<revision>`` -> ``snapshots/<commit>/<path>``) is read
directly.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

_COMMIT = re.compile(r"^[0-9a-f]{40}$")

#: the command that downloads a model (named by every "model missing" message)
COMMAND = "python -m backend models download"


def download_hint(user: str) -> str:
    """The words every "model missing" message ends with, for the estimator / renderer
    (or model key) ``user``."""
    return (f"download it with `{COMMAND} {user}` or in Blender (Edit > Preferences > Add-ons > "
            f"G-Buffer Editor > Models)")


def repo_folder(cache_dir: os.PathLike, repo_id: str) -> Path:
    """``cache_dir/models--<org>--<name>`` (the folder a download of ``repo_id`` fills)."""
    return Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))


def _commit(cache_dir: os.PathLike, repo_id: str, revision: Optional[str]) -> Optional[str]:
    rev = revision or "main"
    ref = repo_folder(cache_dir, repo_id) / "refs" / rev
    try:
        return ref.read_text().strip() if ref.is_file() else (rev if _COMMIT.match(rev) else None)
    except OSError:
        return None


def cached_file(cache_dir: Optional[os.PathLike], repo_id: str, filename: str,
                revision: Optional[str] = None) -> Optional[Path]:
    """The local path of ``filename`` (repository path, e.g. ``onnx/model.onnx``) of
    ``repo_id`` in the cache folder ``cache_dir``, or ``None`` when that folder has no
    such file in the snapshot ``revision`` (branch, default ``main``, or commit) names.
    Never touches the network."""
    if cache_dir is None or not Path(cache_dir).is_dir():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        commit = _commit(cache_dir, repo_id, revision)
        path = repo_folder(cache_dir, repo_id) / "snapshots" / commit / filename if commit else None
        return path if path is not None and path.is_file() else None
    hit = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir), revision=revision)
    return Path(hit) if isinstance(hit, str) and os.path.isfile(hit) else None


def cached_snapshot(cache_dir: Optional[os.PathLike], repo_id: str,
                    revision: Optional[str] = None) -> Optional[Path]:
    """The snapshot folder of ``repo_id`` that ``revision`` (default ``main``) names in the
    cache folder ``cache_dir``, or ``None``. Never touches the network."""
    if cache_dir is None or not Path(cache_dir).is_dir():
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        commit = _commit(cache_dir, repo_id, revision)
        snap = repo_folder(cache_dir, repo_id) / "snapshots" / commit if commit else None
        return snap if snap is not None and snap.is_dir() else None
    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache_dir), revision=revision,
                                      local_files_only=True))
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError and kin: not in this folder
        return None
