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

from functools import lru_cache
from typing import Sequence, cast

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
    return cast(pl.Series, pl.from_arrow(pa.ListArray.from_arrays(pa.array(offsets), values))).alias(alias)


def classify(before: pa.Table, after: pa.Table, key: Sequence[str], common: Sequence[str], added: Sequence[str],
             before_columns: Sequence[str], after_columns: Sequence[str]) -> pa.Table:
    """Join candidate rows by key and compare values null-safely (floats exactly).

    A key on both sides with equal compared values is no change (a moved or rewritten row)."""
    names = (tuple(key), tuple(common), tuple(added), tuple(before_columns), tuple(after_columns))
    if before.num_rows == 0 and after.num_rows == 0:
        # Unchanged tables ask this often; the answer depends only on the schemas and names.
        return _classified_empty(before.schema, after.schema, names)
    return _plan(before.schema, after.schema, names).run(before, after)


def classify_aligned(before: pa.Table, after: pa.Table, key: Sequence[str], common: Sequence[str],
                     added: Sequence[str], before_columns: Sequence[str], after_columns: Sequence[str]) -> pa.Table:
    """:func:`classify` of rows paired by position: row ``i`` of ``before`` and of ``after`` are one
    row (the same stable row id) with the same key, as the caller has checked. The same rows and
    schema as :func:`classify` gives for them, in their order, without a join."""
    names = (tuple(key), tuple(common), tuple(added), tuple(before_columns), tuple(after_columns))
    assert before.num_rows == after.num_rows, "rows paired by position"
    empty = _classified_empty(before.schema, after.schema, names)
    if before.num_rows == 0:
        return empty
    return _plan(before.schema, after.schema, names).run_aligned(before, after, empty.schema)


def _repeated(texts: list[str], n: int) -> pa.Array:
    """``texts`` ``n`` times over (``n * len(texts)`` strings), built from buffers, not one by one."""
    pieces = [t.encode() for t in texts]
    lengths = np.tile(np.array([len(p) for p in pieces], dtype=np.int32), n)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), pa.py_buffer(b"".join(pieces) * n))


@lru_cache(maxsize=256)
def _classified_empty(before: pa.Schema, after: pa.Schema, names: tuple[tuple[str, ...], ...]) -> pa.Table:
    return _plan(before, after, names).run(before.empty_table(), after.empty_table())


@lru_cache(maxsize=256)
def _plan(before: pa.Schema, after: pa.Schema, names: tuple[tuple[str, ...], ...]) -> "_ClassifyPlan":
    return _ClassifyPlan(before, after, *names)


class _ClassifyPlan:
    """:func:`classify`'s polars expressions for one pair of schemas, built once: on the small
    inputs most diffs classify, building expressions costs more than running them."""

    def __init__(self, before: pa.Schema, after: pa.Schema, key: tuple[str, ...], common: tuple[str, ...],
                 added: tuple[str, ...], before_columns: tuple[str, ...], after_columns: tuple[str, ...]) -> None:
        self.key = list(key)
        self.types = {**{f.name: f.type for f in before}, **{f.name: f.type for f in after}}
        sides = []
        for schema, prefix, columns, row_id in ((before, "b", before_columns, BEFORE_ROWID),
                                                (after, "a", after_columns, AFTER_ROWID)):
            read = self.key + list(columns) + ([ROWID] if ROWID in schema.names else [])
            sides.append((read, arrowtypes.to_polars(schema.empty_table().select(read)).schema, prefix, columns,
                          row_id))
        a_types = sides[1][1]
        self.reads: list[list[str]] = []
        self.prepare: list[list[pl.Expr]] = []
        for read, types, prefix, columns, row_id in sides:
            # Key columns may differ in type across a widening; compare in the after side's types.
            exprs = [pl.col(k).cast(a_types[k]) if types[k] != a_types[k] else pl.col(k) for k in self.key]
            exprs += [pl.col(c).alias(f"{prefix}\x00{c}") for c in columns]
            exprs.append(pl.col(ROWID).alias(row_id) if ROWID in read else pl.lit(None, dtype=pl.UInt64).alias(row_id))
            exprs.append(pl.lit(True).alias(f"\x00in_{prefix}"))
            self.reads.append(read)
            self.prepare.append(exprs)
        b_types = sides[0][1]
        in_b = pl.col("\x00in_b").fill_null(False)
        in_a = pl.col("\x00in_a").fill_null(False)
        self.compared = list(common) + list(added)
        differs = [~same_values(pl.col(f"b\x00{c}"), pl.col(f"a\x00{c}"), b_types[c], a_types[c]) for c in common]
        differs += [pl.col(f"a\x00{c}").is_not_null() for c in added]
        both = in_b & in_a
        self.marks = [change_kind(in_b, in_a).alias("change"),
                      *[(both & d).alias(f"\x00ne{i}") for i, d in enumerate(differs)]]
        self.flags = [f"\x00ne{i}" for i in range(len(self.compared))]
        not_update = pl.col("change") != "update"
        self.keep = not_update | pl.any_horizontal(self.flags) if self.flags else not_update

        def side(prefix: str, cols: Sequence[str], present: pl.Expr) -> pl.Expr:
            if not cols:
                return pl.lit(None).alias("_")
            return pl.when(present).then(pl.struct([pl.col(f"{prefix}\x00{c}").alias(c) for c in cols])).otherwise(None)

        self.out = [*[pl.col(k) for k in self.key], pl.col("change"), pl.col("changed_columns"),
                    side("b", before_columns, in_b).alias("before"), side("a", after_columns, in_a).alias("after"),
                    pl.col(BEFORE_ROWID).cast(pl.UInt64), pl.col(AFTER_ROWID).cast(pl.UInt64)]

    def _sides(self, before: pa.Table, after: pa.Table) -> tuple[pl.DataFrame, pl.DataFrame]:
        b, a = (arrowtypes.to_polars(t.select(read)).select(exprs)
                for t, read, exprs in zip((before, after), self.reads, self.prepare))
        return b, a

    def run(self, before: pa.Table, after: pa.Table) -> pa.Table:
        b, a = self._sides(before, after)
        return self._finish(b.join(a, on=self.key, how="full", coalesce=True, nulls_equal=True), sort=True)

    def run_aligned(self, before: pa.Table, after: pa.Table, target: pa.Schema) -> pa.Table:
        """:meth:`run` for rows paired by position (row ``i`` of both sides is one row, with the
        same key): no join, and the rows stay in their order. Polars only decides which values
        differ; the rows are then set up from the input's own arrays (``target``: the schema
        :meth:`run` gives), which costs a fraction of building them in polars."""
        b, a = self._sides(before, after)
        j = pl.concat([b, a.drop(self.key)], how="horizontal")
        if not self.flags:  # nothing compared: no pair is a change
            return target.empty_table()
        flags = j.select(self.marks[1:]).fill_null(False).to_numpy().astype(bool, copy=False)
        keep: np.ndarray = np.asarray(flags.any(axis=1))
        if not keep.any():
            return target.empty_table()
        try:
            return self._aligned_rows(before, after, flags, keep, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a type only polars converts
            return self._finish(j, sort=False)

    def _aligned_rows(self, before: pa.Table, after: pa.Table, flags: np.ndarray, keep: np.ndarray,
                      target: pa.Schema) -> pa.Table:
        if not keep.all():
            mask = pa.array(keep)
            before, after, flags = before.filter(mask), after.filter(mask), flags[keep]
        n = after.num_rows
        if (flags == flags[0]).all():  # every row changed the same columns (a backfill): one pattern
            pattern = [c for c, hit in zip(self.compared, flags[0]) if hit]
            offsets = np.arange(0, len(pattern) * (n + 1), len(pattern), dtype=np.int32)
            names = _repeated(pattern, n)
        else:
            _rows, cols = np.nonzero(flags)  # row-major: each row's changed columns in order
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(flags.sum(axis=1), out=offsets[1:])
            names = pa.array(self.compared, pa.string()).take(pa.array(cols, pa.int64()))
        # One chunk a column: a table whose columns are chunked differently makes polars cut the
        # list column into slices, each converted with its whole child array (quadratic).
        columns: dict[str, pa.ChunkedArray | pa.Array] = {k: after.column(k).combine_chunks() for k in self.key}
        columns["change"] = _repeated(["update"], n)
        columns["changed_columns"] = pa.ListArray.from_arrays(pa.array(offsets), names)
        for side, table in (("before", before), ("after", after)):
            wanted = target.field(side).type
            if pa.types.is_struct(wanted):
                parts = table.select([f.name for f in wanted])
                columns[side] = pa.StructArray.from_arrays([c.combine_chunks() for c in parts.columns],
                                                           fields=list(parts.schema))
            else:
                columns[side] = pa.nulls(n, wanted)
        for name, table in ((BEFORE_ROWID, before), (AFTER_ROWID, after)):
            columns[name] = table.column(ROWID).combine_chunks() if ROWID in table.column_names else \
                pa.nulls(n, pa.uint64())
        out = pa.table([columns[f.name] for f in target], names=target.names)
        return out.cast(target)

    def _finish(self, j: pl.DataFrame, sort: bool) -> pa.Table:
        j = j.with_columns(self.marks).filter(self.keep)
        changed = names_where(j.select(self.flags), self.compared, j.height)  # numpy: ~5x a polars list expression at 12k rows
        out = j.with_columns(changed).select(self.out)
        table = (out.sort(self.key) if sort else out).to_arrow()
        return arrowtypes.restore(table.cast(_plain_schema(table.schema)), self.types, ("before", "after"))


@lru_cache(maxsize=256)
def _plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(plain_type(_large_to_plain(f.type))) for f in schema])


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
