"""Every ``bash`` and ``python`` block of README.md and of the documentation (``docs/*.md``) runs as
written, in an empty directory.

Pages run in a fixed order — README.md, then ``docs/`` by file name — and each page's blocks in the
order they appear. Every block stands on its own: it starts in an empty directory, so a page reads
(and runs) top to bottom and any block can be copied alone.

Not run: the set-up blocks (they install the project and run this very suite; ``.ci/run`` runs
them), blocks preceded by ``<!-- not run: REASON -->`` (they need a bucket or a CI runner), and a
block that repeats one already collected word for word (README's quickstart examples are repeated
in docs/getting-started.md): it runs once, under its first page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]*?) -->\n)?```(?P<lang>bash|python)\n(?P<body>.*?)```", re.S)


def blocks(pages: list[Path] = PAGES) -> list:
    found, seen = [], {}
    for page in pages:
        text = page.read_text()
        name = page.relative_to(ROOT).as_posix()
        for m in BLOCK.finditer(text):
            line = text[:m.start()].count("\n") + 1
            where = f"{name}:line{line}"
            skip = m["reason"] or ("the set-up commands (.ci/run runs them)" if "pip install" in m["body"] else None)
            if not skip and m["body"] in seen:
                skip = f"the same block as {seen[m['body']]}, run there"
            seen.setdefault(m["body"], where)
            marks = [pytest.mark.skip(reason=skip)] if skip else []
            found.append(pytest.param(m["lang"], m["body"], id=f"{where}-{m['lang']}", marks=marks))
    return found


def test_the_readme_has_runnable_blocks():
    runnable = [p for p in blocks([README]) if not p.marks]
    assert len(runnable) >= 2


def test_every_docs_page_has_its_blocks_collected():
    """The block pattern sees every fence a page opens with ``bash`` or ``python``: none is missed."""
    for page in PAGES:
        text = page.read_text()
        opened = len(re.findall(r"^```(?:bash|python)$", text, re.M))
        assert opened == len(blocks([page])), page


@pytest.mark.parametrize("lang, body", blocks())
def test_readme_block_runs_as_written(lang, body, tmp_path):
    argv = ["bash", "-euo", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
    res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr
