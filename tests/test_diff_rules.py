"""``diff.rules.classify`` on its own: the rules, and that its per-schema plans (built once and
reused) never answer for another pair of schemas."""

from __future__ import annotations

import math

import pyarrow as pa

from trimerge.diff.rules import classify


def side(ids, xs, id_type=pa.int64(), x_type=pa.float64(), rowids=None) -> pa.Table:
    t = pa.table({"id": pa.array(ids, id_type), "x": pa.array(xs, x_type)})
    return t if rowids is None else t.append_column("_rowid", pa.array(rowids, pa.uint64()))


def run(before: pa.Table, after: pa.Table, common=("x",), added=()) -> pa.Table:
    return classify(before, after, ["id"], list(common), list(added), [c for c in before.column_names if c not in
                    ("id", "_rowid")], [c for c in after.column_names if c not in ("id", "_rowid")])


def test_updates_inserts_deletes_and_unchanged_rows():
    out = run(side([1, 2, 3, 4], [1.0, math.nan, None, 4.0], rowids=[0, 1, 2, 3]),
              side([2, 3, 4, 5], [math.nan, None, 4.5, 5.0], rowids=[9, 8, 7, 6])).to_pylist()
    # NaN equals NaN and null equals null: keys 2 and 3 are unchanged.
    assert [(r["id"], r["change"], r["changed_columns"]) for r in out] == [
        (1, "delete", []), (4, "update", ["x"]), (5, "insert", [])]  # changed columns name updates' cells
    assert [(r["_before_rowid"], r["_after_rowid"]) for r in out] == [(0, None), (3, 7), (None, 6)]
    assert out[1]["before"] == {"x": 4.0} and out[1]["after"] == {"x": 4.5} and out[0]["after"] is None


def test_a_plan_is_never_reused_for_other_types():
    """Same names, other types (a widened key, a widened value): each pair gets its own answer."""
    narrow = run(side([1], [1.0], id_type=pa.int32(), x_type=pa.float32()), side([1], [2.0]))
    wide = run(side([1], [1.0]), side([1], [2.0]))
    assert narrow.schema.field("before").type == pa.struct([("x", pa.float32())])
    assert wide.schema.field("before").type == pa.struct([("x", pa.float64())])
    assert narrow.column("id").to_pylist() == wide.column("id").to_pylist() == [1]
    # Across the widening the value compares in the after side's type: 1.5 as float32 is 1.5.
    assert run(side([1], [1.5], x_type=pa.float32()), side([1], [1.5])).num_rows == 0


def test_empty_inputs_answer_in_the_schema_of_rows():
    """The cached answer for no rows has exactly the schema a real answer has."""
    before, after = side([1], [1.0], rowids=[0]), side([1], [2.0], rowids=[0])
    full = run(before, after)
    empty = run(before.slice(0, 0), after.slice(0, 0))
    assert empty.num_rows == 0 and empty.schema == full.schema
    assert run(before.slice(0, 0), after.slice(0, 0)) is empty  # asked again: the same immutable table
    assert run(before.slice(0, 0), after).column("change").to_pylist() == ["insert"]


def test_added_columns_and_no_compared_columns():
    before, after = pa.table({"id": [1, 2]}), pa.table({"id": [2, 3], "y": [None, 7]})
    out = run(before, after, common=(), added=("y",)).to_pylist()
    # Key 2 gained a column that is null there: no change; key 3 is new.
    assert [(r["id"], r["change"], r["changed_columns"]) for r in out] == [(1, "delete", []), (3, "insert", [])]
    only_keys = classify(before, pa.table({"id": [2, 3]}), ["id"], [], [], [], []).to_pylist()
    assert [(r["id"], r["change"], r["changed_columns"]) for r in only_keys] == [(1, "delete", []), (3, "insert", [])]
