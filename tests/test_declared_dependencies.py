"""Every module the package imports is declared by the install that reaches it (issue 50).

A test suite run on a machine where some other project left a package behind passes while a fresh
install fails (pandas once supplied PySpark's Arrow path this way). These tests read the package's
own imports and pyproject's declarations, so a missing declaration fails here, on any machine;
``.ci/run`` adds the other half, a fresh virtual environment.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ["trimerge", "lineage", "diff", "merge"]

#: Modules that run only with an extra installed, and which extra (they say so when it is missing).
OPTIONAL_ROOMS = {
    "trimerge/serve/": "serve",
    "trimerge/pages/": "serve",
    "trimerge/agents/": "serve",
    "diff/spark": "spark",
    "merge/spark": "spark",
}


#: Extras for working on trimerge, not for using it: they never count as bringing a code path's needs.
DEVELOPER_EXTRAS = {"test", "test-fast", "docs", "bench"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extras_of(requirement: str) -> set[str]:
    found = re.match(r"[^\[]*\[([^\]]*)\]", requirement)
    return {e.strip() for e in found.group(1).split(",")} if found else set()


def _declared(extra: str | None) -> dict[str, str]:
    """{distribution name: requirement} of the core install, or of ``trimerge[extra]`` beyond it
    (self-references such as ``trimerge[test-fast]`` followed)."""
    project = _pyproject()["project"]
    if extra is None:
        return {_name(r): r for r in project["dependencies"]}
    out: dict[str, str] = {}
    for r in project["optional-dependencies"][extra]:
        if _name(r) == "trimerge":
            for inner in _extras_of(r):
                out.update(_declared(inner))
        else:
            out[_name(r)] = r
    return out


@cache
def _module_to_distribution() -> dict[str, str]:
    """Top-level import name -> installed distribution, read from each distribution's file list."""
    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"].lower().replace("_", "-")
        for f in dist.files or []:
            parts = f.parts
            if len(parts) >= 2 and parts[1] == "__init__.py" and not parts[0].endswith(".dist-info"):
                found.setdefault(parts[0], name)
            elif len(parts) == 1 and f.suffix in (".py", ".so", ".pyd") and not parts[0].startswith("_"):
                found.setdefault(parts[0].split(".")[0], name)
    return found


def _imports() -> list[tuple[str, str, bool]]:
    """(top-level module, file relative to the root, imported at module level) for every absolute
    import of a third-party module in the package (type-checking-only imports left out)."""
    out = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text())
            type_only = {id(n) for stmt in ast.walk(tree) if isinstance(stmt, ast.If)
                         and "TYPE_CHECKING" in ast.unparse(stmt.test) for n in ast.walk(stmt)}
            top_level = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if id(node) in type_only:
                    continue
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "trimerge":
                        out.append((top, rel, id(node) in top_level))
    return out


def _room_extra(rel: str) -> str | None:
    return next((extra for prefix, extra in OPTIONAL_ROOMS.items() if rel.startswith(prefix)), None)


def test_every_import_is_declared_where_it_runs():
    mapping = _module_to_distribution()
    core = _declared(None)
    every_extra = {e: _declared(e) for e in _pyproject()["project"]["optional-dependencies"]}
    undeclared = []
    for module, rel, at_module_level in _imports():
        dist = mapping.get(module)
        assert dist is not None, f"{rel} imports {module!r}, which no installed distribution provides"
        room = _room_extra(rel)
        if at_module_level:
            # A module-level import runs whenever its module loads: core, or the extra of its room.
            allowed = set(core) | (set(every_extra[room]) if room else set())
        else:
            # A lazy import runs on one code path, which a user's extra must bring (not the test's).
            allowed = set(core).union(*(every_extra[e] for e in every_extra if e not in DEVELOPER_EXTRAS))
        if dist not in allowed:
            undeclared.append(f"{rel}: {module} ({dist})")
    assert not undeclared, "imported but not declared in pyproject.toml: " + "; ".join(sorted(set(undeclared)))


def test_the_test_extra_installs_every_other_extra():
    """The suite exercises every code path, so ``[test]`` brings what every extra brings."""
    extras = _pyproject()["project"]["optional-dependencies"]
    test = _declared("test")
    for extra in extras:
        if extra in DEVELOPER_EXTRAS:
            continue
        missing = {d: r for d, r in _declared(extra).items() if d not in test}
        assert not missing, f"[test] lacks what [{extra}] installs: {sorted(missing)}"


@pytest.mark.parametrize("extra", ["spark", "test"])
def test_pyspark_comes_with_what_its_arrow_path_needs(extra):
    """PySpark imports pandas on its Arrow paths (mapInArrow, toArrow), which the Spark engine uses;
    plain ``pyspark`` does not install pandas, ``pyspark[sql]`` does."""
    requirement = _declared(extra)["pyspark"]
    assert "sql" in _extras_of(requirement), f"[{extra}] declares {requirement!r}, not pyspark[sql]"
    try:
        needs = md.requires("pyspark") or []
    except md.PackageNotFoundError:
        pytest.skip("pyspark not installed here")
    sql_needs = {_name(r) for r in needs if re.search(r"extra\s*==\s*['\"]sql['\"]", r)}
    assert "pandas" in sql_needs
    for dist in sql_needs:
        md.version(dist)  # installed: the fresh environment .ci/run creates installed [test]
