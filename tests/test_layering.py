"""The house rules, checked on the code's own imports (ast, function-level imports included):

* dependencies point one way: ``lineage`` ← ``diff`` ← ``merge`` ← the ``trimerge`` facade (and
  its demo) ← the CLI; a module never imports from a layer above its own;
* no module imports another module's private (``_underscore``) names;
* modules stay under 600 lines;
* the import-linter contracts in ``pyproject.toml`` (the layers, and the rooms inside lineage/) hold:
  a well-kept tool reads them, so the rule is data, not this file.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("trimerge.lineage", "trimerge.diff", "trimerge.merge", "trimerge", "trimerge.cli")
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "trimerge":
        parts = parts[1:]
    return ".".join(["trimerge", *parts]).removesuffix(".__init__")


def layer(name: str) -> str:
    for candidate in ("trimerge.lineage", "trimerge.diff", "trimerge.merge", "trimerge.cli"):
        if name == candidate or name.startswith(candidate + "."):
            return candidate
    return "trimerge"


def sources() -> list[Path]:
    return sorted(p for folder in ("lineage", "diff", "merge", "trimerge") for p in (ROOT / folder).rglob("*.py"))


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every trimerge import of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trimerge"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("trimerge")]
    return found


def test_the_sources_are_found():
    names = {module_name(p) for p in sources()}
    assert {"trimerge.lineage.repository", "trimerge.diff.engine", "trimerge.merge.engine", "trimerge.cli.app"} <= names


def test_dependencies_point_one_way():
    upward = []
    for path in sources():
        me = module_name(path)
        for target, _ in imports(path):
            if LAYERS.index(layer(target)) > LAYERS.index(layer(me)):
                upward.append(f"{me} imports {target}")
    assert not upward, "imports against the layering (lineage <- diff <- merge <- trimerge <- cli):\n" + "\n".join(upward)


def test_no_module_imports_another_modules_private_names():
    private = [f"{module_name(path)}: from {target} import {name}" for path in sources()
               for target, names in imports(path) for name in names if name.startswith("_") and not name.startswith("__")]
    assert not private, "\n".join(private)


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_under_600_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it by concern"


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout
