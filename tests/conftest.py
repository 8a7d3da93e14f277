"""Shared test setup (foundation, issue 2).

At import time, before anything can import ``bpy``:

* ``BLENDER_USER_RESOURCES`` and ``XDG_CACHE_HOME`` point to a fresh temp folder, so
  no test reads or writes the developer's Blender configuration or caches;
* ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1``: tests never download models.

Fixtures: ``repo_root``, ``shared_dir`` (the read-only ``../shared`` next to the repo),
``footage`` (``footage("boat")`` -> path of ``shared/footage/boat.mp4``), ``blender_python``
(the interpreter running the tests, which has ``bpy``) and ``installed_extension`` (see
``tests/test_extension_install.py``).

Marking: tests that import ``bpy`` (directly, or through modules that do) get
``@pytest.mark.blender`` (or ``pytestmark = pytest.mark.blender``); `./dev test` runs
them under bpy 5.0.1 and again under bpy 4.5. Import ``bpy`` inside the test or
fixture, or at module top in a module whose tests are all marked.
"""
import os
import sys
import tempfile
from pathlib import Path

import pytest

_TMP_ROOT = tempfile.mkdtemp(prefix="gbuffer_tests_")
for _var, _sub in (("BLENDER_USER_RESOURCES", "blender_user"), ("XDG_CACHE_HOME", "xdg_cache")):
    os.environ[_var] = os.path.join(_TMP_ROOT, _sub)
    os.makedirs(os.environ[_var], exist_ok=True)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # `import bpy_util` from any test module.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # `import backend` from any test module.

FOOTAGE_NAMES = ("boat", "bikes", "dolphins", "phone_office")


#: environment variable naming the shared data folder (``GBUFFER_SHARED`` is an alias)
SHARED_ENV = "GBUFFER_SHARED_DIR"
SHARED_SKIP = "shared data folder not found"


def _shared_dir():
    env = os.environ.get(SHARED_ENV) or os.environ.get("GBUFFER_SHARED")
    return Path(env) if env else REPO_ROOT.parent / "shared"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A loud banner when tests were skipped because the shared data (real footage) is
    missing: they stay skippable (CI without the data is not red) but never silently."""
    missing = [r for r in terminalreporter.stats.get("skipped", [])
               if SHARED_SKIP in _skip_reason(r) or "footage not found" in _skip_reason(r)]
    if not missing:
        return
    tr = terminalreporter
    tr.write_sep("!", "{} test(s) SKIPPED: shared data missing".format(len(missing)), red=True, bold=True)
    tr.write_line("{} test(s) on real footage did not run: the shared data folder {} was not found "
                  "(or lacks footage/*.mp4).".format(len(missing), _shared_dir()))
    tr.write_line("Point at it with {}=/path/to/shared (the folder holding footage/), "
                  "or place it at ../shared next to the repository.".format(SHARED_ENV))


_EXIT_STATUS = [0]


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS[0] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """bpy 4.5 as a module hangs at interpreter exit while any UI class (a Panel, a
    header draw function) is still registered. After pytest has finished everything
    else, leave with ``os._exit`` and pytest's exit status when bpy < 5.0 was imported."""
    bpy = sys.modules.get("bpy")
    if bpy is not None and getattr(getattr(bpy, "app", None), "version", (5,)) < (5, 0, 0):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[0])


@pytest.fixture(scope="session")
def repo_root():
    """The repository root (the folder with ``blender_manifest.toml``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir():
    """``../shared`` next to the repository (override: ``GBUFFER_SHARED_DIR``); read-only.

    Skips with a reason when the folder is absent (e.g. a clone without the footage).
    """
    path = _shared_dir()
    if not path.is_dir():
        pytest.skip("{}: {} (set {})".format(SHARED_SKIP, path, SHARED_ENV))
    return path


@pytest.fixture(scope="session")
def footage(shared_dir):
    """``footage(name)`` -> Path of ``shared/footage/<name>.mp4`` (name in FOOTAGE_NAMES).

    Raises ``ValueError`` for an unknown name; skips when the file is missing.
    """
    def _get(name):
        if name not in FOOTAGE_NAMES:
            raise ValueError("unknown footage {!r}; one of {}".format(name, FOOTAGE_NAMES))
        path = shared_dir / "footage" / (name + ".mp4")
        if not path.is_file():
            pytest.skip("footage not found: {}".format(path))
        return path
    return _get


@pytest.fixture(scope="session")
def blender_python():
    """The Python running the tests: it has ``bpy`` (5.0.1 in .venv, 4.5 in .venv45)."""
    return sys.executable


@pytest.fixture(scope="session")
def extension_zip(tmp_path_factory):
    """Path of the linux-x64 extension zip, built once per session by ``./dev build``'s code
    (tools/build_extension.py) with the running interpreter's bpy ``blender_ext.py``.

    Downloads the pinned wheels into ``wheels/`` on first use (network); later sessions
    reuse them.
    """
    from tools_util import tool_module

    build_extension = tool_module("build_extension")
    out = tmp_path_factory.mktemp("dist")
    (zip_path,) = build_extension.build(["linux-x64"], out)
    return zip_path
