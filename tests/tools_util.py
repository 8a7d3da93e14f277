"""Test-only: import a script of ``tools/`` (``build_extension``, ``import_graph``, ...) as a
module without leaving ``tools/`` on ``sys.path``."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

TOOLS_DIR = str(Path(__file__).resolve().parent.parent / "tools")


def tool_module(name: str):
    """``tools/<name>.py`` imported as the top-level module ``name`` (cached after the first call)."""
    sys.path.insert(0, TOOLS_DIR)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(TOOLS_DIR)  # the first occurrence: the one inserted above
