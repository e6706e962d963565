"""Every ``bash`` and ``python`` block of README.md runs as written, in an empty directory.

Not run: the opening set-up block (it installs the project and runs this very suite; ``.ci/run``
runs it), and blocks preceded by ``<!-- not run: REASON -->`` (they need a bucket or a CI runner)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]*?) -->\n)?```(?P<lang>bash|python)\n(?P<body>.*?)```", re.S)


def blocks() -> list:
    found = []
    for n, m in enumerate(BLOCK.finditer(README.read_text())):
        line = README.read_text()[:m.start()].count("\n") + 1
        skip = m["reason"] or ("the set-up commands (.ci/run runs them)" if "pip install" in m["body"] else None)
        marks = [pytest.mark.skip(reason=skip)] if skip else []
        found.append(pytest.param(m["lang"], m["body"], id=f"line{line}-{m['lang']}", marks=marks))
    return found


def test_the_readme_has_runnable_blocks():
    runnable = [p for p in blocks() if not p.marks]
    assert len(runnable) >= 2


@pytest.mark.parametrize("lang, body", blocks())
def test_readme_block_runs_as_written(lang, body, tmp_path):
    argv = ["bash", "-euo", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
    res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr
