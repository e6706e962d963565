"""`TableDiff.rows(columns=...)` and `trimerge diff --columns`: all, only the changed columns, or names."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.errors import InvalidOperationError

ROWS = 2_000


@pytest.fixture
def backfilled(tmp_path):
    """docs (id, title, body); branch `label` adds and fills `label`, then retitles id 3."""
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    ids = np.arange(ROWS)
    repo.create_table("docs", pa.table({"id": pa.array(ids, pa.int64()), "title": [f"t{i}" for i in ids],
                                        "body": [f"body {i} " * 20 for i in ids]}), primary_key="id")
    repo.branches.create("label", from_ref="main")
    repo.add_columns("docs", pa.table({"id": pa.array(ids, pa.int64()), "label": pa.array(ids % 5, pa.int32())}),
                     branch="label")
    repo.update("docs", pa.table({"id": pa.array([3], pa.int64()), "title": ["retitled"]}), branch="label")
    return repo


def test_changed_columns_hold_only_what_changed(backfilled):
    td = diff("main...label", repo=backfilled).tables["docs"]
    every = td.rows()
    assert every.equals(td.rows(columns="all"))
    assert set(every.schema.field("after").type.names) == {"title", "body", "label"}
    changed = td.rows(columns="changed")
    assert changed.num_rows == every.num_rows == ROWS
    assert set(changed.schema.field("after").type.names) == {"title", "label"}
    assert changed.column("id").to_pylist() == every.column("id").to_pylist()
    after = {r["id"]: r["after"] for r in changed.to_pylist()}
    full = {r["id"]: r["after"] for r in every.to_pylist()}
    assert after[3] == {"title": "retitled", "label": 3}
    assert all(after[i]["label"] == full[i]["label"] for i in full)
    assert {r["id"]: r["changed_columns"] for r in changed.to_pylist()} == \
        {r["id"]: r["changed_columns"] for r in every.to_pylist()}


def test_named_columns_and_bad_specs(backfilled):
    td = diff("main...label", repo=backfilled).tables["docs"]
    assert td.rows(columns=["label"]).schema.field("after").type.names == ["label"]
    with pytest.raises(InvalidOperationError, match="'all', 'changed' or a list"):
        td.rows(columns="everything")


def test_inserts_keep_every_column_under_changed(tmp_path):
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("t", pa.table({"id": [1, 2], "a": [1, 2], "b": ["x", "y"]}), primary_key="id")
    repo.branches.create("f", from_ref="main")
    repo.upsert("t", pa.table({"id": [2, 3], "a": [20, 3], "b": ["y", "z"]}), branch="f")
    rows = diff("main...f", repo=repo).tables["t"].rows(columns="changed").to_pylist()
    assert rows == [
        {"id": 2, "change": "update", "changed_columns": ["a"], "before": {"a": 2, "b": "y"}, "after": {"a": 20, "b": "y"}},
        {"id": 3, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 3, "b": "z"}},
    ]


def test_cli_columns_changed(backfilled, cli):
    path = str(backfilled.path)
    out = cli("-C", path, "diff", "main...label", "--columns", "changed", "--format", "json", ok=True)
    rows = json.loads(out.stdout)["tables"]["docs"]["rows"]
    assert len(rows) == ROWS and set(rows[0]["after"]) == {"title", "label"}
    text = cli("-C", path, "diff", "main...label", "--columns", "changed", "--limit", "2", ok=True).stdout
    assert "body" not in text
    everything = cli("-C", path, "diff", "main...label", "--columns", "all", "--format", "json", ok=True)
    assert set(json.loads(everything.stdout)["tables"]["docs"]["rows"][0]["after"]) == {"title", "body", "label"}
