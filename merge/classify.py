"""Classify every changed key of a table once, vectorised, into one merge operation.

Input: the rows of the two diffs base→dest (``ours``) and base→source (``theirs``). A key the
source changed and dest did not is ``source_only``; a key both changed is one of:

=================  ============================================================================
``converged``      both deleted it, or both left it with the same values
``delete_modify``  deleted on one side, changed on the other
``insert_insert``  inserted on both with different values
``update_update``  updated on both with different values, at row granularity (a row conflict)
``cells``          updated on both, at cell granularity: ``take_cols`` are the source's cells to
                   take, ``conflict_cols`` the cells both changed differently
=================  ============================================================================

Keys only dest changed need nothing and are never read here. The frames' own columns are named
with a leading ``\x01`` (``"\x01op"``, ``"\x01take_cols"``…): user columns cannot hold control
characters, so no table's column can collide with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

import polars as pl
import pyarrow as pa

from trimerge.lineage.tables import arrowtypes
from trimerge.diff.rules import names_where, same_values

SOURCE_ONLY, CONVERGED, DELETE_MODIFY, INSERT_INSERT, UPDATE_UPDATE, CELLS = (
    "source_only", "converged", "delete_modify", "insert_insert", "update_update", "cells")
#: A cell merge that would leave a derived value and its inputs from different sides, made a row
#: conflict (``on_stale="conflict"``).
STALE = "stale_derived"
#: Where the flattened values of each side live in :attr:`Classified.overlap`.
SIDES = ("o", "t", "b")


def col(side: str, column: str) -> str:
    """Name of ``side``'s value of ``column`` in the overlap frame (``o``: dest, ``t``: source, ``b``: base)."""
    return f"{side}\x00{column}"


@dataclass
class Classified:
    """One table's changed keys, by operation.

    ``source_only``: the source's diff rows for keys dest did not change. ``overlap``: one row per
    key both changed with ``op``; the key; each side's values flattened per value column (see
    :func:`col`, in the merged schema's types where they convert, so they can be written) and
    ``has_o``/``has_t``/``has_b`` (whether that side has the row); ``dest_rowid`` (dest's current
    row, if any); ``take_cols`` and ``conflict_cols`` (lists, for ``cells``) and ``differing``
    (every column whose final values differ)."""

    source_only: pl.DataFrame
    overlap: pl.DataFrame
    key: list[str]
    value_columns: list[str]


def classify(ours: pa.Table, theirs: pa.Table, key: Sequence[str], merged: pa.Schema, granularity: str,
             restored: Sequence[str] = ()) -> Classified:
    """Classify the keys of the source's changes ``theirs`` against dest's changes ``ours`` (both as
    :meth:`TableDiff.rows_with_row_ids`). ``restored``: columns dest had dropped that the merge
    brings back filled with the source's values (``schema.drop_modify`` settled ``theirs``)."""
    key = list(key)
    value_columns = [f.name for f in merged if f.name not in key]
    merged = arrowtypes.safe_schema(merged)  # decimal256 is carried as polars can hold it
    pt = arrowtypes.to_polars(theirs)
    po = arrowtypes.to_polars(ours)
    assert isinstance(pt, pl.DataFrame) and isinstance(po, pl.DataFrame)
    if not po.height:
        return Classified(pt, _empty_overlap(), key, value_columns)
    keys_o = po.select(key)
    source_only = pt.join(keys_o, on=key, how="anti", nulls_equal=True)
    both_t = pt.join(keys_o, on=key, how="semi", nulls_equal=True)
    if not both_t.height:
        return Classified(source_only, _empty_overlap(), key, value_columns)
    both_o = po.join(both_t.select(key), on=key, how="semi", nulls_equal=True)
    j = both_o.select(*key, pl.col("change").alias("\x01change_o"), pl.col("changed_columns").alias("\x01changed_o"),
                      pl.col("before").alias("\x01before_o"), pl.col("after").alias("\x01after_o"),
                      pl.col("_after_rowid").alias("\x01dest_rowid")).join(
        both_t.select(*key, pl.col("change").alias("\x01change_t"), pl.col("changed_columns").alias("\x01changed_t"),
                      pl.col("before").alias("\x01before_t"), pl.col("after").alias("\x01after_t")),
        on=key, how="inner", nulls_equal=True)
    j = _flatten(j, merged, value_columns, set(restored))
    return Classified(source_only, _operations(j, value_columns, granularity), key, value_columns)


def struct_fields(frame: pl.DataFrame, column: str) -> list[str]:
    """The field names of a struct column (none when the column is all null)."""
    dtype = frame.schema[column]
    return [f.name for f in dtype.fields] if isinstance(dtype, pl.Struct) else []


def _flatten(j: pl.DataFrame, merged: pa.Schema, value_columns: list[str], restored: set[str]) -> pl.DataFrame:
    """Each side's values as plain columns. Values are compared in their own types (``raw``) and
    kept for writing in the merged type; a source column that does not convert (a type conflict
    dest keeps) is written with dest's values."""
    fo, ft = struct_fields(j, "\x01after_o"), struct_fields(j, "\x01after_t")
    fb_o, fb_t = struct_fields(j, "\x01before_o"), struct_fields(j, "\x01before_t")
    # Whether a side holds the row follows from the change, never from its image: a table with no
    # value column left has no image at all (a null struct) for the rows it holds.
    exprs = [(pl.col("\x01change_o") != "delete").alias("\x01has_o"),
             (pl.col("\x01change_t") != "delete").alias("\x01has_t"),
             ((pl.col("\x01change_o") != "insert") | (pl.col("\x01change_t") != "insert")).alias("\x01has_b")]
    for c in value_columns:
        # A restored column holds the source's value on every row of dest before the fold writes,
        # so that is dest's value: the source's value of it is never a change against dest's.
        mine = ("\x01after_t", ft) if c in restored else ("\x01after_o", fo)
        exprs.append(pl.col(mine[0]).struct.field(c).alias(col("o", c)) if c in mine[1] else
                     pl.lit(None).alias(col("o", c)))
        # A column the source lacks (it dropped it, or dest added it) keeps dest's value there.
        exprs.append(pl.col("\x01after_t").struct.field(c).alias(col("t", c)) if c in ft else
                     pl.col("\x01after_o").struct.field(c).alias(col("t", c)) if c in fo else pl.lit(None).alias(col("t", c)))
        base = [pl.col(s).struct.field(c) for s, fields in (("\x01before_o", fb_o), ("\x01before_t", fb_t)) if c in fields]
        exprs.append(pl.coalesce(base).alias(col("b", c)) if base else pl.lit(None).alias(col("b", c)))
    flat = j.with_columns(exprs)
    types = flat.schema  # read once: each read of a frame's schema costs as much as a small operation
    # Final values differ? Compared before any cast, under the diff's equality rule.
    differ = [(pl.col("\x01has_o") & pl.col("\x01has_t") &
               ~same_values(pl.col(col("o", c)), pl.col(col("t", c)), types[col("o", c)],
                            types[col("t", c)])).alias(f"\x00d{i}") for i, c in enumerate(value_columns)]
    flat = flat.with_columns(differ)
    targets = cast(pl.DataFrame, pl.from_arrow(merged.empty_table().select(value_columns))).schema
    wanted = [(c, side, targets[c]) for c in value_columns for side in SIDES if types[col(side, c)] != targets[c]]
    try:  # usually every value converts: one operation
        return flat.with_columns([pl.col(col(side, c)).cast(target, strict=True) for c, side, target in wanted])
    except (pl.exceptions.PolarsError, pa.ArrowException):
        pass
    casts = []
    for c, side, target in wanted:
        name = col(side, c)
        try:
            flat = flat.with_columns(pl.col(name).cast(target, strict=True))
        except (pl.exceptions.PolarsError, pa.ArrowException):
            casts.append((pl.col(col("o", c)) if side == "t" else pl.lit(None)).cast(target, strict=False).alias(name))
    return flat.with_columns(casts) if casts else flat


def _operations(j: pl.DataFrame, value_columns: list[str], granularity: str) -> pl.DataFrame:
    n = j.height
    d = j.select([f"\x00d{i}" for i in range(len(value_columns))])
    j = j.with_columns(names_where(d, value_columns, n, "\x01differing"))
    changed_o = [pl.col("\x01changed_o").list.contains(c).fill_null(False) for c in value_columns]
    changed_t = [pl.col("\x01changed_t").list.contains(c).fill_null(False) for c in value_columns]
    flags = j.select(
        *[(pl.col(f"\x00d{i}") & changed_t[i] & ~changed_o[i]).alias(f"\x00take{i}") for i in range(len(value_columns))],
        *[(pl.col(f"\x00d{i}") & changed_t[i] & changed_o[i]).alias(f"\x00both{i}") for i in range(len(value_columns))])
    take = names_where(flags.select([f"\x00take{i}" for i in range(len(value_columns))]), value_columns, n, "\x01take_cols")
    both = names_where(flags.select([f"\x00both{i}" for i in range(len(value_columns))]), value_columns, n,
                       "\x01conflict_cols")
    deleted_o, deleted_t = pl.col("\x01change_o") == "delete", pl.col("\x01change_t") == "delete"
    inserted_o, inserted_t = pl.col("\x01change_o") == "insert", pl.col("\x01change_t") == "insert"
    op = (pl.when(deleted_o & deleted_t).then(pl.lit(CONVERGED))
          .when(deleted_o | deleted_t).then(pl.lit(DELETE_MODIFY))
          .when(pl.col("\x01differing").list.len() == 0).then(pl.lit(CONVERGED))
          .when(inserted_o & inserted_t).then(pl.lit(INSERT_INSERT))
          .when(inserted_o | inserted_t | pl.lit(granularity == "row")).then(pl.lit(UPDATE_UPDATE))
          .otherwise(pl.lit(CELLS)).alias("\x01op"))
    j = j.with_columns(take, both, op).drop([f"\x00d{i}" for i in range(len(value_columns))])
    # A row conflict of updates settles cell by cell too: every differing cell is in conflict.
    row_level = pl.col("\x01op") == UPDATE_UPDATE
    return j.with_columns(pl.when(row_level).then(pl.col("\x01differing")).otherwise(pl.col("\x01conflict_cols"))
                          .alias("\x01conflict_cols"),
                          pl.when(row_level).then(pl.col("\x01take_cols").list.head(0)).otherwise(pl.col("\x01take_cols"))
                          .alias("\x01take_cols"))


def _empty_overlap() -> pl.DataFrame:
    return pl.DataFrame({"\x01op": pl.Series([], dtype=pl.String)})
