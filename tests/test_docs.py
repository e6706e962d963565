"""The documentation: README is a quickstart into ``docs/``, and the MkDocs site builds with
``mkdocs build --strict`` (broken links and anchors, pages missing from the nav, docstrings that do
not render and CLI help that click cannot load all fail it). The code blocks of both run in
``tests/test_readme.py``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SETUP = ('# trimerge\n\n```bash\npython3 -m pip install -e . && trimerge demo trimerge-demo\n'
         'python3 -m pip install -e ".[test]" && python3 -m pytest -q\n```\n')
BUILD_DEPS = ["mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_click"]


def test_readme_opens_with_the_two_setup_commands():
    assert README.read_text().startswith(SETUP)


def test_readme_is_a_quickstart():
    assert README.stat().st_size <= 20_000


def test_readme_links_into_existing_pages():
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]+)?\)", README.read_text())
    assert any(link.startswith("docs/") for link in links)
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    assert [p.name for p in DOCS.glob("*.md") if f" {p.name}" not in config] == []


def test_mkdocs_build_strict(tmp_path):
    missing = [m for m in BUILD_DEPS if importlib.util.find_spec(m.split(".")[0]) is None
               or importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the docs tools are not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert (tmp_path / "site" / "cli" / "index.html").read_text().count("trimerge merge") > 0
    assert "Repository" in (tmp_path / "site" / "api" / "index.html").read_text()
