"""The merge's steps on in-memory inputs, without a repository: classification of keys, the schema
merge, and merge bases over a graph holding virtual commits."""

from __future__ import annotations

import pyarrow as pa
import pytest

from trimerge.lineage.history.graph import DictGraph, merge_bases
from trimerge.merge.classify import CELLS, CONVERGED, DELETE_MODIFY, INSERT_INSERT, UPDATE_UPDATE, classify
from trimerge.merge.schema import merge_schema
from trimerge.merge.virtual_base import WithVirtualCommits

VALUES = pa.struct([("a", pa.int64()), ("b", pa.int64())])
DIFF = pa.schema([("id", pa.int64()), ("change", pa.string()), ("changed_columns", pa.list_(pa.string())),
                  ("before", VALUES), ("after", VALUES), ("_before_rowid", pa.uint64()), ("_after_rowid", pa.uint64())])
MERGED = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])


def diff_rows(*rows) -> pa.Table:
    """Diff rows as ``(id, before, after)`` with before/after ``(a, b)`` or None."""
    out = []
    for i, before, after in rows:
        change = "insert" if before is None else "delete" if after is None else "update"
        changed = [c for n, c in enumerate("ab") if before and after and before[n] != after[n]]
        out.append({"id": i, "change": change, "changed_columns": changed,
                    "before": dict(zip("ab", before)) if before else None,
                    "after": dict(zip("ab", after)) if after else None,
                    "_before_rowid": i if before else None, "_after_rowid": 100 + i if after else None})
    return pa.Table.from_pylist(out, schema=DIFF)


#        base      dest      source    cell op        row op         take   conflict
CLASSIFY_CASES = [
    ((1, 1), (2, 1), (1, 2), CELLS, UPDATE_UPDATE, ["b"], []),
    ((1, 1), (2, 1), (3, 1), CELLS, UPDATE_UPDATE, [], ["a"]),
    ((1, 1), (2, 2), (2, 2), CONVERGED, CONVERGED, [], []),
    ((1, 1), None, (2, 1), DELETE_MODIFY, DELETE_MODIFY, [], []),
    ((1, 1), None, None, CONVERGED, CONVERGED, [], []),
    (None, (5, 5), (6, 5), INSERT_INSERT, INSERT_INSERT, [], []),
    (None, (5, 5), (5, 5), CONVERGED, CONVERGED, [], []),
]


@pytest.mark.parametrize("base,dest,source,cell_op,row_op,take,conflict", CLASSIFY_CASES)
def test_each_key_is_classified_once(base, dest, source, cell_op, row_op, take, conflict):
    ours, theirs = diff_rows((1, base, dest)), diff_rows((1, base, source))
    for granularity, op in (("cell", cell_op), ("row", row_op)):
        c = classify(ours, theirs, ["id"], MERGED, granularity)
        assert c.source_only.height == 0
        row = c.overlap.to_dicts()[0]
        assert row["\x01op"] == op, granularity
        if op == CELLS:
            assert row["\x01take_cols"] == take and row["\x01conflict_cols"] == conflict
        assert row["\x01dest_rowid"] == (101 if dest else None)


def test_keys_only_the_source_changed_are_source_only():
    c = classify(diff_rows((1, (1, 1), (2, 1))), diff_rows((1, (1, 1), (1, 2)), (2, (1, 1), (3, 3))),
                 ["id"], MERGED, "cell")
    assert c.source_only["id"].to_list() == [2]
    assert c.overlap["id"].to_list() == [1]


def test_no_dest_changes_make_everything_source_only():
    c = classify(diff_rows(), diff_rows((1, (1, 1), (1, 2))), ["id"], MERGED, "cell")
    assert c.source_only.height == 1 and c.overlap.height == 0


def _schema(**columns: pa.DataType) -> pa.Schema:
    return pa.schema([("id", pa.int64()), *columns.items()])


SCHEMA_CASES = [
    # base, dest, source → merged column types, edits, conflict kinds
    (dict(a=pa.int32()), dict(a=pa.int32()), dict(a=pa.int64()), dict(a=pa.int64()), ["widen a to int64"], []),
    (dict(a=pa.int32()), dict(a=pa.int64()), dict(a=pa.int32()), dict(a=pa.int64()), [], []),
    (dict(a=pa.int32()), dict(a=pa.int32()), dict(a=pa.int32(), c=pa.string()), dict(a=pa.int32(), c=pa.string()),
     ["add c"], []),
    (dict(a=pa.int32(), c=pa.string()), dict(a=pa.int32(), c=pa.string()), dict(a=pa.int32()), dict(a=pa.int32()),
     ["drop c"], []),
    (dict(a=pa.int32()), dict(a=pa.string()), dict(a=pa.float64()), dict(a=pa.string()), [], ["schema.column"]),
    (dict(a=pa.string()), dict(a=pa.string()), dict(a=pa.large_string()), dict(a=pa.large_string()),
     ["widen a to large_string"], []),
]


@pytest.mark.parametrize("base,dest,source,types,changes,kinds", SCHEMA_CASES)
def test_schema_merge(base, dest, source, types, changes, kinds):
    seen = []
    out = merge_schema("t", _schema(**base), _schema(**dest), _schema(**source), ("id",), ("id",), ("id",),
                       set(), set(), lambda c: seen.append(c.kind))
    assert {f.name: f.type for f in out.schema if f.name != "id"} == types
    assert out.changes == changes and seen == kinds


def test_a_moved_key_is_a_table_conflict_and_the_same_move_converges():
    s = _schema(a=pa.int64())
    moved = merge_schema("t", s, s, s, ("id",), ("a",), ("id",), set(), set(), lambda c: None)
    assert moved.schema is None and moved.table_conflict.kind == "schema.primary_key"
    same = merge_schema("t", s, s, s, ("id",), ("a",), ("a",), set(), set(), lambda c: None)
    assert same.table_conflict is None and same.schema is not None


def test_column_conflict_settled_by_base_sends_the_table_back_to_base():
    out = merge_schema("t", _schema(a=pa.int32()), _schema(a=pa.string()), _schema(a=pa.float64()),
                       ("id",), ("id",), ("id",), set(), set(), lambda c: "base")
    assert out.to_base and out.schema is None


def test_merge_bases_of_a_virtual_commit_are_those_of_its_parents():
    #   r - x - a1 - m1
    #     \   X      (criss-cross: m1 = merge(a1, b1), m2 = merge(b1, a1))
    #      y - b1 - m2
    graph = DictGraph({"r": (), "x": ("r",), "y": ("r",), "a1": ("x",), "b1": ("y",), "c": ("r",)})
    overlay = WithVirtualCommits(graph)
    v = overlay.add(["a1", "b1"])
    assert overlay.parents(v) == ("a1", "b1")
    assert overlay.generation(v) == 4
    assert merge_bases(overlay, v, "c") == ["r"]
    assert merge_bases(overlay, v, "a1") == ["a1"]
