"""Test-only: a Hugging Face cache laid out exactly as ``huggingface_hub`` leaves it after a
download, from the published file lists in ``tests/fixtures/hub_files.json``.

``huggingface_hub`` (``file_download.py``) stores each file once under
``models--<org>--<name>/blobs/<etag>`` (the etag is the file's SHA-256 for Git LFS files,
the Git blob SHA-1 of the contents for the others), links ``snapshots/<commit>/<path>`` to
it with a relative symlink, and writes the commit a branch points at into ``refs/<branch>``.
:func:`lay_out` does the same with the contents a test gives (tiny replicas for the files
the product loads, short placeholders for the ones it never opens), so the real
``hf_hub_download(local_files_only=True)`` / ``snapshot_download`` resolve it offline.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, Optional, Union

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hub_files.json"
#: file suffixes the published repositories keep in Git LFS (their .gitattributes)
LFS_SUFFIXES = (".onnx", ".pth", ".bin", ".h5", ".safetensors", ".model", ".msgpack")


def published() -> Dict[str, dict]:
    """The fixture: repo id -> ``{"files": {path: size as listed}, "revision", "licence", ...}``."""
    data = json.loads(FIXTURE.read_text())
    for repo, entry in data.items():
        if isinstance(entry, dict) and "same_files_as" in entry:
            entry.setdefault("files", data[entry["same_files_as"]]["files"])
    return {k: v for k, v in data.items() if not k.startswith("_")}


def full_commit(repo_id: str, revision: Optional[str]) -> str:
    """The 40-hex commit of a listed revision (a short hash is completed deterministically:
    the fixture lists the short form the hub shows)."""
    rev = revision or ""
    if len(rev) == 40:
        return rev
    return (rev + hashlib.sha1(repo_id.encode()).hexdigest())[:40]


def etag(path: str, data: bytes) -> str:
    """The blob name ``huggingface_hub`` gives ``data``: SHA-256 for LFS files, else the Git
    blob SHA-1."""
    if path.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lay_out(cache: os.PathLike, repo_id: str, commit: str, files: Dict[str, Union[bytes, os.PathLike]],
            branch: Optional[str] = "main") -> Path:
    """Write ``files`` (repository path -> bytes or a file to copy) into ``cache`` as
    ``repo_id`` at ``commit``; ``refs/<branch>`` names the commit. Returns the snapshot."""
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    for rel, content in files.items():
        data = content if isinstance(content, bytes) else Path(content).read_bytes()
        blob = repo / "blobs" / etag(rel, data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        os.symlink(os.path.relpath(blob, link.parent), link)
    if branch:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / branch).write_text(commit)
    return snap


def placeholder(repo_id: str, path: str) -> bytes:
    """Contents for a published file the replica does not produce or the product never
    opens (its name and place matter): ``{}`` for JSON files (a loader may read them, e.g.
    a tokenizer's ``special_tokens_map.json``), else a line of text."""
    if path.endswith(".json"):
        return b"{}\n"
    return f"placeholder for {repo_id}/{path} (never loaded)\n".encode()
