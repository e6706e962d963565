"""Counting a diff: per change kind and per column, from classified rows or straight from
candidate rows when only the counts are wanted (no row images are built)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff.rules import ROWID, same_values
from trimerge.lineage.tables import arrowtypes


@dataclass
class DiffCounts:
    inserted: int = 0
    deleted: int = 0
    updated: int = 0
    cells_changed: int = 0
    #: Updated rows per changed column (not compared, not in :meth:`to_json`: see ``summary()``).
    by_column: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def rows_changed(self) -> int:
        return self.inserted + self.deleted + self.updated

    def to_json(self) -> dict[str, int]:
        return {"inserted": self.inserted, "deleted": self.deleted, "updated": self.updated,
                "cells_changed": self.cells_changed}


def sum_counts(parts: Iterable[DiffCounts]) -> DiffCounts:
    total = DiffCounts()
    for c in parts:
        total.inserted += c.inserted
        total.deleted += c.deleted
        total.updated += c.updated
        total.cells_changed += c.cells_changed
        for column, n in c.by_column.items():
            total.by_column[column] = total.by_column.get(column, 0) + n
    return total


def count_rows(batches: Iterable[pa.RecordBatch]) -> DiffCounts:
    """Counts of classified rows (as :meth:`TableDiff.rows`), batch by batch."""
    c = DiffCounts()
    for batch in batches:
        per_change = {v["values"]: v["counts"] for v in pc.value_counts(batch.column("change")).to_pylist()}
        c.inserted += per_change.get("insert", 0)
        c.deleted += per_change.get("delete", 0)
        c.updated += per_change.get("update", 0)
        c.cells_changed += int(pc.sum(pc.list_value_length(batch.column("changed_columns"))).as_py() or 0)
        for v in pc.value_counts(pc.list_flatten(batch.column("changed_columns"))).to_pylist():
            c.by_column[v["values"]] = c.by_column.get(v["values"], 0) + v["counts"]
    return c


def count_changes(before: pa.Table, after: pa.Table, key: Sequence[str], common: Sequence[str],
                  added: Sequence[str]) -> DiffCounts:
    """The counts :func:`trimerge.diff.rules.classify` gives for these candidates, by the same
    join and the same equality rule, without building the rows."""
    key = list(key)
    b = arrowtypes.to_polars(before.select(key + list(common)))
    a = arrowtypes.to_polars(after.select(key + list(common) + list(added)))
    for k in key:
        if b.schema[k] != a.schema[k]:
            b = b.with_columns(pl.col(k).cast(a.schema[k]))
    b = b.rename({c: f"b\x00{c}" for c in common}).with_columns(pl.lit(True).alias("\x00in_b"))
    a = a.rename({c: f"a\x00{c}" for c in [*common, *added]}).with_columns(pl.lit(True).alias("\x00in_a"))
    j = b.join(a, on=key, how="full", coalesce=True, nulls_equal=True)
    in_b, in_a = pl.col("\x00in_b").fill_null(False), pl.col("\x00in_a").fill_null(False)
    totals = j.select((in_a & ~in_b).sum().alias("ins"), (in_b & ~in_a).sum().alias("del")).row(0)
    c = DiffCounts(inserted=int(totals[0]), deleted=int(totals[1]))
    add_updates(c, j, common, added, in_b & in_a)
    return c


def add_updates(counts: DiffCounts, frame: pl.DataFrame, common: Sequence[str], added: Sequence[str],
                both: pl.Expr | None = None) -> None:
    """Add to ``counts`` the updated rows of ``frame`` — one row per key on both sides (where
    ``both`` holds), values as ``b\0<column>`` and ``a\0<column>`` — and their changed cells:
    a column on both sides whose values differ (the diff's equality rule), or a column only the
    after side has that is not null."""
    names = [*common, *added]
    if not names or not frame.height:
        return
    on_both = both if both is not None else pl.lit(True)
    differs = [~same_values(pl.col(f"b\x00{c}"), pl.col(f"a\x00{c}"), frame.schema[f"b\x00{c}"],
                            frame.schema[f"a\x00{c}"]) for c in common] + \
        [pl.col(f"a\x00{c}").is_not_null() for c in added]
    flags = frame.select((on_both & d).fill_null(False).alias(f"\x00ne{i}") for i, d in enumerate(differs))
    counts.updated += int(flags.select(pl.any_horizontal(pl.all()).sum()).item())
    per = flags.sum().row(0)
    counts.cells_changed += int(sum(per))
    for n, v in zip(names, per):
        if v:
            counts.by_column[n] = counts.by_column.get(n, 0) + int(v)

__all__ = ["DiffCounts", "ROWID", "add_updates", "count_changes", "count_rows", "sum_counts"]
