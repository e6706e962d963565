"""The classification rules of a diff, in one place, expressed for both engines.

* **Same value**: null-safe (null equals null, never a value), floats exact with NaN equal to NaN,
  lists and structs element by element; across a widening, compared in the after side's type.
  Polars' ``eq_missing`` and Spark's ``eqNullSafe`` both implement exactly this.
* **Change**: a key on both sides is an ``update`` (kept only if some compared value differs),
  only after is an ``insert``, only before a ``delete``.

:func:`same_values`/:func:`change_kind` build polars expressions (the local engine and the merge);
:func:`same_values_spark`/:func:`change_kind_spark` build the Spark columns. ``tests/test_spark.py``
checks that both give the same answers on the values where engines usually disagree.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from trimerge.lineage.tables import arrowtypes
from trimerge.lineage.tables.conversion import plain_type

ROWID = "_rowid"
BEFORE_ROWID, AFTER_ROWID = "_before_rowid", "_after_rowid"


def same_values(lhs: pl.Expr, rhs: pl.Expr, lhs_type: pl.DataType | None = None,
                rhs_type: pl.DataType | None = None) -> pl.Expr:
    """Whether ``lhs`` and ``rhs`` hold the same value. Columns of different types (across a
    widening) are compared in ``rhs``'s type; values that do not convert compare as null."""
    if lhs_type is not None and rhs_type is not None and lhs_type != rhs_type:
        lhs = lhs.cast(rhs_type, strict=False)
    return lhs.eq_missing(rhs)


def change_kind(in_before: pl.Expr, in_after: pl.Expr) -> pl.Expr:
    return (pl.when(in_before & in_after).then(pl.lit("update")).when(in_after).then(pl.lit("insert"))
            .otherwise(pl.lit("delete")))


def same_values_spark(lhs, rhs, lhs_type=None, rhs_type=None):
    """:func:`same_values` for Spark columns (types are Spark data types)."""
    if lhs_type is not None and rhs_type is not None and lhs_type != rhs_type:
        lhs = lhs.cast(rhs_type)
    return lhs.eqNullSafe(rhs)


def change_kind_spark(in_before, in_after):
    from pyspark.sql import functions as F

    return F.when(in_before & in_after, F.lit("update")).when(in_after, F.lit("insert")).otherwise(F.lit("delete"))


def names_where(flags: pl.DataFrame, names: Sequence[str], n: int, alias: str = "changed_columns") -> pl.Series:
    """Per row (``n`` rows), the names whose boolean flag column is set, in column order — a list
    column built in bulk rather than row by row."""
    if not names or n == 0:
        return pl.Series(alias, [[]] * n, dtype=pl.List(pl.String))
    matrix = flags.fill_null(False).to_numpy().astype(bool, copy=False)
    _rows, cols = np.nonzero(matrix)  # row-major: each row's columns in order
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(matrix.sum(axis=1), out=offsets[1:])
    values = pa.array(list(names), pa.string()).take(pa.array(cols, pa.int64()))
    return pl.from_arrow(pa.ListArray.from_arrays(pa.array(offsets), values)).alias(alias)


def classify(before: pa.Table, after: pa.Table, key: Sequence[str], common: Sequence[str], added: Sequence[str],
             before_columns: Sequence[str], after_columns: Sequence[str]) -> pa.Table:
    """Join candidate rows by key and compare values null-safely (floats exactly).

    A key on both sides with equal compared values is no change (a moved or rewritten row)."""
    key = list(key)
    id_b = [ROWID] if ROWID in before.column_names else []
    id_a = [ROWID] if ROWID in after.column_names else []
    types = {**{f.name: f.type for f in before.schema}, **{f.name: f.type for f in after.schema}}
    b = arrowtypes.to_polars(before.select(key + list(before_columns) + id_b))  # decimal256 carried safely
    a = arrowtypes.to_polars(after.select(key + list(after_columns) + id_a))
    if not id_b:
        b = b.with_columns(pl.lit(None, dtype=pl.UInt64).alias(ROWID))
    if not id_a:
        a = a.with_columns(pl.lit(None, dtype=pl.UInt64).alias(ROWID))
    b = b.rename({ROWID: BEFORE_ROWID})
    a = a.rename({ROWID: AFTER_ROWID})
    assert isinstance(b, pl.DataFrame) and isinstance(a, pl.DataFrame)
    # Key columns may differ in type across a widening; compare in the after side's types.
    for k in key:
        if b.schema[k] != a.schema[k]:
            b = b.with_columns(pl.col(k).cast(a.schema[k]))
    b = b.rename({c: f"b\x00{c}" for c in before_columns}).with_columns(pl.lit(True).alias("\x00in_b"))
    a = a.rename({c: f"a\x00{c}" for c in after_columns}).with_columns(pl.lit(True).alias("\x00in_a"))
    j = b.join(a, on=key, how="full", coalesce=True, nulls_equal=True)
    in_b = pl.col("\x00in_b").fill_null(False)
    in_a = pl.col("\x00in_a").fill_null(False)
    compared = list(common) + list(added)
    differs = []
    for c in common:
        differs.append(~same_values(pl.col(f"b\x00{c}"), pl.col(f"a\x00{c}"), j.schema[f"b\x00{c}"],
                                    j.schema[f"a\x00{c}"]))
    differs += [pl.col(f"a\x00{c}").is_not_null() for c in added]
    both = in_b & in_a
    j = j.with_columns(
        change_kind(in_b, in_a).alias("change"),
        *[(both & d).alias(f"\x00ne{i}") for i, d in enumerate(differs)],
    )
    flags = [f"\x00ne{i}" for i in range(len(compared))]
    if flags:
        j = j.filter((pl.col("change") != "update") | pl.any_horizontal(flags))
    else:
        j = j.filter(pl.col("change") != "update")
    j = j.with_columns(names_where(j.select(flags), compared, j.height))

    def side(prefix: str, cols: Sequence[str], present: pl.Expr) -> pl.Expr:
        if not cols:
            return pl.lit(None).alias("_")
        return pl.when(present).then(pl.struct([pl.col(f"{prefix}\x00{c}").alias(c) for c in cols])).otherwise(None)

    out = j.select(
        *[pl.col(k) for k in key],
        pl.col("change"),
        pl.col("changed_columns"),
        side("b", before_columns, in_b).alias("before"),
        side("a", after_columns, in_a).alias("after"),
        pl.col(BEFORE_ROWID).cast(pl.UInt64),
        pl.col(AFTER_ROWID).cast(pl.UInt64),
    ).sort(key)
    table = out.to_arrow()
    schema = pa.schema([f.with_type(plain_type(_large_to_plain(f.type))) for f in table.schema])
    return arrowtypes.restore(table.cast(schema), types, ("before", "after"))


def _large_to_plain(t: pa.DataType) -> pa.DataType:
    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.list_(_large_to_plain(t.value_type))
    if pa.types.is_list(t):
        return pa.list_(_large_to_plain(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_large_to_plain(f.type)) for f in t])
    return t


def project_rows(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Keep only some value columns inside the before/after structs (key columns always stay).
    A table with none of ``columns`` keeps no ``before`` / ``after`` at all."""
    import pyarrow.compute as pc

    out = rows
    for side in ("before", "after"):
        if side not in rows.column_names:
            continue
        col = rows.column(side)
        t = col.type
        keep = [t.field(i).name for i in range(t.num_fields) if t.field(i).name in columns]
        if not keep:
            out = out.drop_columns([side])
            continue
        arrays = [pc.struct_field(col, t.get_field_index(n)) for n in keep]
        struct = pc.make_struct(*arrays, field_names=keep)
        struct = pc.if_else(pc.is_null(col), pa.scalar(None, struct.type), struct)
        out = out.set_column(out.schema.get_field_index(side), side, struct)
    return out
