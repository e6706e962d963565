"""Notebooks show the rows: a table diff's HTML lists its first changed rows with before → after
cells, a diff's HTML adds them under its counts, and every table result has a polars twin."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.display import HTML_DIFF_ROWS
from trimerge.merge import merge


@pytest.fixture
def changed(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("p", pa.table({"sku": [f"s{i:03}" for i in range(100)], "price": [float(i) for i in range(100)]}),
                      primary_key="sku")
    repo.branches.create("f", from_ref="main")
    repo.upsert("p", pa.table({"sku": [f"s{i:03}" for i in range(0, 60, 2)] + ["new<b>"],
                               "price": [i + 0.5 for i in range(0, 60, 2)] + [9.0]}), branch="f")
    repo.delete("p", "sku = 's001'", branch="f")
    repo.upsert("p", pa.table({"sku": ["s000"], "price": [-1.0]}))
    return repo


def test_table_diff_html_shows_first_rows_with_before_and_after(changed):
    td = diff("main...f", repo=changed).tables["p"]
    html = td._repr_html_()
    assert "<caption>p: modified +1 -1 ~30</caption>" in html
    assert "<td>s000</td><td>update</td><td>price: 0.0 → 0.5</td>" in html
    assert "<td>s001</td><td>delete</td><td>- price=1.0</td>" in html
    assert html.count("<tr>") == 1 + HTML_DIFF_ROWS and f"… {32 - HTML_DIFF_ROWS} more" in html
    assert "new<b>" not in html  # values are escaped (and this key sorts last: not shown)


def test_diff_html_has_counts_and_rows(changed):
    html = diff("main...f", repo=changed)._repr_html_()
    assert "<th>cells_changed</th>" in html and "price: 2.0 → 2.5" in html


def test_polars_twins(changed):
    d = diff("main...f", repo=changed)
    rows = d.tables["p"].rows_polars()
    assert isinstance(rows, pl.DataFrame) and rows.height == 32 and rows.columns[:2] == ["sku", "change"]
    assert d.tables["p"].rows_polars("changed").equals(pl.from_arrow(d.tables["p"].rows("changed")))
    assert isinstance(d.stat_polars(), pl.DataFrame) and d.stat_polars()["table"].to_list() == ["p"]
    result = merge("f", "main", repo=changed, dry_run=True)
    conflicts = result.conflicts_polars()
    assert conflicts.height == 1 and conflicts["kind"][0] == "row.update_update"
