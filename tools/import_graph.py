"""Import graph of the repository's own modules, and its cycles.

Usage: ``python tools/import_graph.py [--module-level]`` prints every cycle (strongly
connected component of more than one module) and every import against the layer order
(:data:`LAYERS`), and exits 1 when there is one. By default every
``import`` statement counts, at module level or inside a function: a cycle hidden in
a function-level import is still a cycle between two files. ``--module-level`` counts
only imports executed when the module is imported.

The extension's root package is named ``gbuffer_editor`` here; modules are keyed by
their dotted path from the repository root (``backend.jobs.runner``,
``operators.decompose``, ``__init__`` for the root package).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
#: top-level folders whose modules are in the graph
PACKAGES = ("backend", "addon", "operators", "panels", "training", "tools", "benchmarks")
#: the product's layers, lowest first: a module imports only from its own layer or below
#: (``panels`` -> ``operators`` -> ``addon`` -> ``backend``; the root ``__init__``
#: registers them all). ``training``, ``tools`` and ``benchmarks`` are outside the product.
LAYERS = ("backend", "addon", "operators", "panels", "__init__")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1] or ["__init__"]
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(current: str, is_pkg: bool, level: int, target: Optional[str]) -> str:
    """Absolute dotted name of a (possibly relative) import in module ``current``."""
    if level == 0:
        return target or ""
    base = current.split(".") if current != "__init__" else []
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(path: Path, module_level_only: bool = False, known: Optional[Set[str]] = None) -> Set[str]:
    """Dotted names ``path`` imports. ``from pkg import name`` counts as importing the
    module ``pkg.name`` when that is one of ``known``, else ``pkg`` itself."""
    known = known or set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    cur, pkg = module_name(path), _is_package(path)
    found: Set[str] = set()
    nodes: Iterable[ast.AST]
    if module_level_only:
        nodes = [n for n in tree.body]
        # imports inside module-level try/if blocks run at import time too
        extra = []
        for n in tree.body:
            if isinstance(n, (ast.Try, ast.If)):
                extra.extend(ast.walk(n))
        nodes = list(nodes) + extra
    else:
        nodes = ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(cur, pkg, node.level, node.module)
            for a in node.names:  # `from . import x` imports submodule x
                sub = f"{mod}.{a.name}" if mod else a.name
                found.add(sub if sub in known else mod)
    return found


def graph(module_level_only: bool = False) -> Dict[str, Set[str]]:
    files = [ROOT / "__init__.py"] + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
                                      if ".venv" not in p.parts]
    mods = {module_name(p): p for p in files if p.exists()}
    g: Dict[str, Set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for imp in imports_of(path, module_level_only, set(mods)):
            # the extension imported by its installed name counts as the repository root
            for prefix in ("gbuffer_editor.", "bl_ext.user_default.gbuffer_editor."):
                if imp.startswith(prefix):
                    imp = imp[len(prefix):]
            if imp in mods and imp != name:
                deps.add(imp)
        g[name] = deps
    return g


def cycles(g: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def layer_of(module: str) -> Optional[int]:
    """Index of ``module``'s layer in :data:`LAYERS`, ``None`` outside the product."""
    top = module.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def layer_violations(g: Dict[str, Set[str]]) -> List[Tuple[str, str]]:
    """``(importer, imported)`` pairs where a product module imports from a higher layer."""
    out = []
    for mod in sorted(g):
        own = layer_of(mod)
        if own is None:
            continue
        for dep in sorted(g[mod]):
            theirs = layer_of(dep)
            if theirs is None or theirs > own:
                out.append((mod, dep))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    g = graph(module_level_only="--module-level" in argv)
    found = cycles(g)
    for comp in found:
        print("cycle: " + " <-> ".join(comp))
    bad = layer_violations(g)
    for mod, dep in bad:
        print(f"layer: {mod} imports {dep} (order: {' <- '.join(LAYERS)})")
    print(f"{len(found)} import cycle(s), {len(bad)} import(s) against the layer order")
    return 1 if found or bad else 0


if __name__ == "__main__":
    sys.exit(main())
