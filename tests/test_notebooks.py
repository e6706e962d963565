"""Notebook use: short reprs whatever the size, HTML views, every error importable from ``trimerge``,
API messages that name the API's arguments (the CLI's name its options)."""

from __future__ import annotations

import importlib
import pkgutil

import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.merge import MergeConflictError, merge

N = 20_000
LIMIT = 400  # trimerge.display.MAX_REPR


@pytest.fixture(scope="module")
def conflicted(tmp_path_factory):
    """A repository whose branch ``b`` conflicts with main on every one of N rows, plus 9 small tables."""
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("nb") / "repo")
    ids = pa.array(range(N), pa.int64())
    repo.create_table("big", pa.table({"id": ids, "v": pa.array([0] * N)}), primary_key="id")
    for i in range(9):
        repo.create_table(f"small_{i}_with_a_rather_long_table_name", pa.table({"k": [1, 2]}), primary_key="k")
    repo.branches.create("b", from_ref="main")
    repo.update("big", pa.table({"id": ids, "v": pa.array([1] * N)}), branch="b",
                message="x" * 5000)                                          # a huge commit message
    repo.update("big", pa.table({"id": ids, "v": pa.array([2] * N)}))
    with repo.transaction(branch="b") as tx:
        for i in range(9):
            tx.upsert(f"small_{i}_with_a_rather_long_table_name", pa.table({"k": [3]}))
    return repo


def test_merge_result_and_conflicts_are_short_with_20000_conflicts(conflicted):
    result = merge("b", "main", repo=conflicted, dry_run=True)
    assert result.conflicts_total == N
    text = repr(result)
    assert len(text) <= LIMIT and f"{N} conflict(s)" in text and "row.update_update" in text
    assert "big" in text
    assert len(repr(result.conflicts[0])) <= LIMIT and "big[id=" in repr(result.conflicts[0])
    html = result._repr_html_()
    assert len(html) < 50_000 and f"… {N - 50} more" in html and "<table>" in html
    assert "dest (ours)" in result.conflicts[0]._repr_html_()
    error = str(MergeConflictError(result))
    assert "strategy=" in error and "--strategy" not in error


def test_diff_commit_and_repository_reprs_are_short(conflicted):
    d = diff("main", "b", repo=conflicted)
    text = repr(d)
    assert len(text) <= LIMIT and "10 of 10 table(s) changed" in text and "… 6 more" in text
    td = repr(d.tables["big"])
    assert td.startswith("TableDiff('big': modified") and f"~{N}" in td and f"{N} cell(s)" in td
    html = d._repr_html_()  # counts of the 10 tables, then the first rows of the first 5 changed ones
    summary = html.split("</table>")[0]
    assert summary.count("<tr>") == 11 and "big" in summary
    assert len(html) < 50_000 and "… 5 more changed table(s)" in html
    commit = conflicted.resolve("b~1")
    assert len(repr(commit)) <= LIMIT and commit.id[:10] in repr(commit) and "…" in repr(commit)
    assert len(repr(conflicted)) <= LIMIT


def test_every_error_class_is_importable_from_trimerge():
    for pkg in (trimerge.lineage, trimerge.diff, trimerge.merge):
        for mod in pkgutil.iter_modules(pkg.__path__):
            if mod.name not in ("spark_job",):  # a script run by spark-submit
                importlib.import_module(f"{pkg.__name__}.{mod.name}")
    seen, todo = set(), [trimerge.TrimergeError]
    while todo:
        cls = todo.pop()
        seen.add(cls)
        todo.extend(cls.__subclasses__())
    # The web view's errors become HTTP statuses inside the server; no Python caller meets them.
    public = {c for c in seen if not c.__name__.startswith("_") and c.__module__.startswith("trimerge.")
              and not c.__module__.startswith("trimerge.pages.")}
    missing = sorted(c.__name__ for c in public if getattr(trimerge, c.__name__, None) is not c)
    assert not missing
    assert {"MergeConflictError", "TableNotFoundError", "RepositoryNotFoundError"} <= set(trimerge.__all__)


def test_api_messages_name_arguments_and_cli_messages_options(seeded, cli):
    seeded.branches.create("x", from_ref="main")
    with pytest.raises(trimerge.InvalidOperationError, match=r"^strategy= names no table of this merge: nope"):
        merge("x", "main", repo=seeded, strategy={"nope": "source-wins"})
    res = cli("-C", seeded.uri, "merge", "x", "--strategy", "nope=source-wins")
    assert res.exit_code == 2 and "--strategy names no table of this merge: nope" in res.stderr
