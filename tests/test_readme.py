"""README is the front page (issue 30): short, its links resolve, and what it says about
the prompt vocabulary and the estimator / renderer names agrees with ``--help``."""
import re
import subprocess
import sys

from cli_util import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _help(sub: str) -> str:
    p = subprocess.run([sys.executable, "-m", "backend", sub, "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _section(text: str, title: str) -> list:
    """The ``  name: ...`` entry names of a ``--help`` section (``estimators:``, ``renderers:``)."""
    block = text.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0]
    return sorted(m.group(1) for m in re.finditer(r"^  ([a-z0-9-]+): ", block, re.M))


def _readme_names(label: str) -> list:
    para = README.split(f"{label} (`--{label.lower()[:-1]}`):", 1)[1].split(".", 1)[0]
    return sorted(re.findall(r"`([a-z0-9-]+)`", para))


def _norm(word: str) -> str:
    return word.strip().replace("_", " ")


def test_readme_names_the_estimators_and_renderers_help_lists():
    assert _readme_names("Estimators") == _section(_help("decompose"), "estimators")
    assert _readme_names("Renderers") == _section(_help("restyle"), "renderers")


def _look_rows(lines) -> dict:
    """``look: {look, words...}`` from ``LOOK: a, b`` (help) or ``| LOOK | a, b |`` (README) lines."""
    rows = {}
    for line in lines:
        m = re.match(r"^(?:  |\| )([a-z ]+)(?::| \|) ([a-z ,_]+?)(?: \|)?$", line)
        if m:
            rows[_norm(m.group(1))] = {_norm(m.group(1))} | {_norm(w) for w in m.group(2).split(",")}
    return rows


def test_readme_prompt_table_agrees_with_help():
    block = _help("restyle").split("prompt words of the embedded renderer", 1)[1]
    helped = _look_rows(block.split("\n  intensity", 1)[0].splitlines()[1:])
    table = _look_rows(README.split("| look | words |\n|---|---|\n", 1)[1].split("\n\n", 1)[0].splitlines())
    assert len(helped) == 8 and table == helped  # 8: "relight" became a look (issue 39)


def test_readme_is_a_front_page_whose_links_resolve():
    assert len(README.splitlines()) < 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (REPO / link).exists()]
    assert missing == []


def test_docs_agree_on_lists_download_command_and_interpreter():
    """Issue 37: docs/api.md's example comments list what is registered; every doc that
    says how to download a model names `python -m backend models download` (not `hf
    download` / `huggingface-cli download`); README names the interpreter for the CLI."""
    import ast

    import backend

    api = (REPO / "docs" / "api.md").read_text()
    from backend import plugins

    # the built-in plugins: other tests in the same session register test estimators
    for fn, kind in (("list_estimators", "estimator"), ("list_renderers", "renderer")):
        m = re.search(rf"backend\.{fn}\(\)\s+# (\[.*\])", api)
        builtin = sorted(plugins.builtins(kind))
        assert m and ast.literal_eval(m.group(1)) == builtin, fn
        assert set(builtin) <= set(getattr(backend, fn)()), fn
    docs = {p.name: p.read_text() for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")]}
    for name, text in docs.items():
        assert "huggingface-cli download" not in text and "hf download" not in text, name
    assert "python -m backend models download" in docs["cli.md"] + docs["backends.md"]
    readme = docs["README.md"]
    assert ".venv/bin/python -m backend" in readme and "192 px" in readme
    assert "at the clip's full size" not in readme
