"""Developer entry points in a clone that is not next to ``shared/``: ``./dev demo`` fails
at once naming the fix, and the pytest summary says loudly how many real-footage tests
were skipped for missing shared data (conftest ``pytest_terminal_summary``)."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("GBUFFER_SHARED_DIR", "GBUFFER_SHARED")}
    env.update(extra)
    return env


def _clone_without_shared(tmp_path) -> Path:
    """A bare copy of ``dev`` + ``tools/demo.py`` (no .venv) in a folder with no ``../shared``."""
    repo = tmp_path / "clone" / "repo"
    (repo / "tools").mkdir(parents=True)
    shutil.copy2(ROOT / "dev", repo / "dev")
    shutil.copy2(ROOT / "tools" / "demo.py", repo / "tools" / "demo.py")
    for name in ("requirements.txt", "constraints.txt"):
        shutil.copy2(ROOT / name, repo / name)
    return repo


def test_demo_checks_clip_before_setup(tmp_path):
    repo = _clone_without_shared(tmp_path)
    r = subprocess.run(["bash", str(repo / "dev"), "demo"], capture_output=True, text=True, timeout=120,
                       env=_env(PYTHON=sys.executable, PIP_NO_INDEX="1"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert not (repo / ".venv").exists(), "the venv was set up before the clip was checked"
    expected = tmp_path / "clone" / "shared" / "footage" / "boat.mp4"
    assert f"clip not found: {expected}" in r.stderr
    assert "--clip PATH" in r.stderr and "GBUFFER_SHARED_DIR" in r.stderr

    # the variable (and its older alias) moves the default clip
    for var in ("GBUFFER_SHARED_DIR", "GBUFFER_SHARED"):
        elsewhere = tmp_path / f"data_{var}"
        r = subprocess.run(["bash", str(repo / "dev"), "demo"], capture_output=True, text=True, timeout=120,
                           env=_env(PYTHON=sys.executable, PIP_NO_INDEX="1", **{var: str(elsewhere)}))
        assert r.returncode == 2 and f"clip not found: {elsewhere / 'footage' / 'boat.mp4'}" in r.stderr
        assert not (repo / ".venv").exists()


def _run_pytest(folder: Path, shared: Path):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
                          capture_output=True, text=True, timeout=120, cwd=folder,
                          env=_env(GBUFFER_SHARED_DIR=str(shared)))


def test_missing_shared_data_banner(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy2(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_uses_footage.py").write_text(textwrap.dedent("""
        def test_a(footage):
            assert footage("boat").exists()

        def test_b(shared_dir):
            assert shared_dir.is_dir()

        def test_c(footage):
            assert footage("bikes").exists()

        def test_plain():
            pass
    """))
    missing = tmp_path / "no_such_shared"
    r = _run_pytest(suite, missing)
    assert r.returncode == 0, r.stdout + r.stderr  # skippable: no red CI without the data
    assert "3 test(s) SKIPPED: shared data missing" in r.stdout
    assert str(missing) in r.stdout and "GBUFFER_SHARED_DIR=/path/to/shared" in r.stdout

    present = tmp_path / "shared"
    (present / "footage").mkdir(parents=True)
    for name in ("boat", "bikes"):
        (present / "footage" / f"{name}.mp4").write_bytes(b"x")
    r = _run_pytest(suite, present)
    assert r.returncode == 0 and "SKIPPED: shared data missing" not in r.stdout, r.stdout
