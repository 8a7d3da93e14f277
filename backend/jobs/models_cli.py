"""``python -m backend models [list | download NAME... | verify [NAME...] | remove NAME...]``:
the optional models in the models folder (:mod:`backend.model_store`).

``list`` (the default) prints each model with its licence, published size, whether it is
in the models folder, its size on disk and whether the estimator / renderer that uses it
can run; ``download`` fetches models (a progress bar on a terminal, ``progress`` events in
MB otherwise: the add-on's Preferences > Models runs this); ``verify`` re-hashes the
downloaded files against the hub's checksums (exit 1 when one differs); ``remove`` deletes
a model's folder. NAME: a model key (``depth-anything-v2-small``, ``marigold_depth``), a
repository id, or an estimator / renderer name (``marigold``: its three models). This is
the only subcommand that reaches the network (``download`` only); the others never do.
"""
from __future__ import annotations

import argparse
import sys

from .. import events


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``models`` subcommand."""
    p = subparsers.add_parser(
        "models", help="list, download, verify or remove the optional models",
        description="The optional models (Depth Anything V2, Marigold, ControlNet, FLUX.2 [klein], Wan VACE) "
                    "in the models folder (a Hugging Face cache: --models-dir, else GBUFFER_EDITOR_MODEL_DIR, "
                    "HF_HUB_CACHE or huggingface_hub's default). NAME: a model key, a repository id, or an "
                    "estimator / renderer name. Only 'download' uses the network.")
    p.add_argument("action", nargs="?", default="list", choices=("list", "download", "verify", "remove"))
    p.add_argument("names", nargs="*", metavar="NAME", help="models (verify: default all downloaded ones)")
    p.add_argument("--models-dir", default=None, metavar="DIR", help="the models folder (a Hugging Face cache)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..catalog import models_folder
    from ..model_store import find_specs, listing

    cache = models_folder(args.models_dir)
    if args.action in ("download", "remove") and not args.names:
        raise ValueError(f"models {args.action}: name at least one model (python -m backend models lists them)")
    if args.action == "list":
        rows = listing(cache)
        _print_table(rows, cache)
        events.emit({"event": "models", "folder": str(cache), "models": rows})
        return 0
    specs = find_specs(args.names) if args.names else None
    if cache is None:
        raise ValueError("no models folder: pass --models-dir DIR or set HF_HUB_CACHE")
    return {"download": _download, "verify": _verify, "remove": _remove}[args.action](specs, cache)


def _print_table(rows, cache) -> None:
    from ..model_store import human_size

    sys.stderr.write(f"models folder: {cache}\n")
    for r in rows:
        have = human_size(r["bytes"]) if r["present"] else "missing"
        pub = ", ".join(x for x in (r["licence"], r["size"]) if x)
        ready = "ready" if r["ready"] is None else r["ready"].splitlines()[0].split(": ", 1)[-1]
        sys.stderr.write(f"  {r['key']:26s} {have:>10s}  {r['used_by']:27s} {pub:28s} {ready}\n")


def _download(specs, cache) -> int:
    from ..model_store import download, progress_events

    for s in specs:
        sys.stderr.write(f"downloading {s.label} ({s.repo_id}) into {cache}\n")
        snap = download(s, cache, progress=progress_events(events.emit))
        events.emit({"event": "downloaded", "key": s.key, "path": str(snap)})
    events.emit({"event": "done", "path": str(cache), "models": [s.key for s in specs]})
    return 0


def _verify(specs, cache) -> int:
    from ..model_store import model_specs, model_status, verify

    if specs is None:
        specs = [s for s in model_specs() if s.repo_id and model_status(s, cache)[0]]
    failed = 0
    for s in specs:
        res = verify(s, cache)
        ok = not res["bad"]
        failed += not ok
        sys.stderr.write(f"  {s.key}: {res['checked']} files checked, "
                         + ("all match the hub's checksums" if ok else "differ: " + ", ".join(res["bad"])
                            + f" (remove it and run: python -m backend models download {s.key})") + "\n")
        events.emit({"event": "verified", **res})
    if failed:
        events.emit({"event": "error", "message": f"{failed} model(s) differ from the hub's checksums",
                     "frame": None, "file": None})
        return 1
    return 0


def _remove(specs, cache) -> int:
    from ..model_store import human_size, remove

    for s in specs:
        n = remove(s, cache)
        sys.stderr.write(f"  {s.key}: " + (f"removed, {human_size(n)} freed\n" if n else "not in the models folder\n"))
        events.emit({"event": "removed", "key": s.key, "bytes": n})
    return 0
