"""The fold: classified keys → decided conflicts → one set of row edits, vectorised.

Per key both sides changed, each conflicting cell (or conflicting row) gets a choice from the
:class:`Resolver`; every value column's final value is then one expression over the flattened
sides (take the source's cell, or the chosen side's, or keep dest's), and only rows whose final
values differ from dest's are written. Python touches rows one by one only for conflicts that
stay unresolved (to report them) and for resolutions given by hand.
"""

from __future__ import annotations

from typing import Any, Callable

import polars as pl
import pyarrow as pa

from trimerge.diff.rules import same_values
from trimerge.lineage.gates.derived import stale_mask
from trimerge.merge.classify import (CELLS, CONVERGED, DELETE_MODIFY, INSERT_INSERT, STALE, UPDATE_UPDATE, Classified,
                                     col, struct_fields)
from trimerge.merge.edits import RowSpool, TablePlan, conform_rows
from trimerge.merge.resolve import BASE, THEIRS, VALUE, Resolver, cell_value, given_row
from trimerge.merge.result import Conflict, json_text

Report = Callable[[Conflict], None]
_KIND = {DELETE_MODIFY: "row.delete_modify", INSERT_INSERT: "row.insert_insert", UPDATE_UPDATE: "row.update_update",
         CELLS: "row.update_update", STALE: "row.stale_derived"}


def fold(plan: TablePlan, cl: Classified, resolver: Resolver, merged: pa.Schema, report: Report) -> None:
    """Add the row edits of one table to ``plan``; unresolved conflicts go to ``report``."""
    take_source_rows(plan, cl.source_only, cl.key, merged)
    ov = cl.overlap
    if not ov.height:
        return
    plan.stats.converged += ov.filter(pl.col("\x01op") == CONVERGED).height
    ov = _mark_stale(plan, cl, ov, resolver)
    _fold_cells(plan, cl, ov.filter(pl.col("\x01op").is_in([CELLS, UPDATE_UPDATE])), resolver, merged, report)
    _fold_rows(plan, cl, ov.filter(pl.col("\x01op").is_in([DELETE_MODIFY, INSERT_INSERT, STALE])), resolver, merged,
               report)


def _mark_stale(plan: TablePlan, cl: Classified, ov: pl.DataFrame, resolver: Resolver) -> pl.DataFrame:
    """Find the cell merges that would take a derived column's value from one side and one of its
    inputs from the other side's change (by the table's default choice for conflicting cells):
    report their keys, or (``on_stale="conflict"``) make them row conflicts."""
    if not plan.declared or not ov.height:
        return ov
    default, _by = resolver.default(plan.name)
    conflicting = pl.col("\x01conflict_cols")

    def from_source(c: str) -> pl.Expr:
        return pl.col("\x01take_cols").list.contains(c) | (conflicting.list.contains(c) & pl.lit(default == THEIRS))

    def from_dest(c: str) -> pl.Expr:
        return (pl.col("\x01changed_o").list.contains(c).fill_null(False) & ~from_source(c)
                & ~(conflicting.list.contains(c) & pl.lit(default in (BASE, VALUE))))

    stale = (pl.col("\x01op") == CELLS) & stale_mask(plan.declared, from_source, from_dest, cl.value_columns)
    found = ov.filter(stale)
    if not found.height:
        return ov
    plan.stats.stale += found.height
    if resolver.on_stale == "conflict":
        return ov.with_columns(pl.when(stale).then(pl.lit(STALE)).otherwise(pl.col("\x01op")).alias("\x01op"))
    plan.stale.append(found.select(cl.key).to_arrow())
    return ov


def take_source_rows(plan: TablePlan, rows: pl.DataFrame, key: list[str], merged: pa.Schema) -> None:
    """Keys only the source changed: dest still holds their base image (at the base's row id), so
    the source's row replaces it; columns the source lacks keep the base image's values. With
    ``plan.by_columns``, updated rows are written as their changed columns only (key + the union
    of the columns the source changed: the others equal dest's values already), which the publish
    writes as column files where that is cheaper (a backfill merged back writes one column)."""
    if not rows.height:
        return
    # An update that changed only columns the merged table lacks (dest dropped them and kept them
    # dropped, a drop_modify settled dest-wins) leaves dest's row as it is: rewriting it would be a
    # write that changes nothing, published as a commit that changes nothing.
    value_columns = [f.name for f in merged if f.name not in key]
    changed = pl.col("changed_columns")
    moot = ((pl.col("change") == "update") & (changed.list.len() > 0).fill_null(False)
            & ~changed.list.eval(pl.element().is_in(value_columns)).list.any().fill_null(True))
    rows = rows.filter(~moot)
    if not rows.height:
        return
    plan.stats.rows_from_source += rows.height
    deletes = rows.filter(pl.col("change") == "delete")
    if deletes.height:
        plan.deletes.append(deletes.select(key).to_arrow())
    if plan.by_columns:
        updates = rows.filter(pl.col("change") == "update")
        if updates.height and columns_pay(plan, updates) and take_source_columns(plan, updates, key, merged,
                                                                                  count=False):
            rows = rows.filter(pl.col("change") != "update")
    existing = rows.filter(pl.col("change") != "insert")
    if existing.height:
        plan.replace(existing["_before_rowid"].to_arrow(), existing.select(key).to_arrow())
    keep = rows.filter(pl.col("change") != "delete")
    if keep.height:
        after, before = struct_fields(keep, "after"), struct_fields(keep, "before")
        cols = [pl.col("after" if f.name in after else "before").struct.field(f.name).alias(f.name)
                for f in merged if f.name not in key and (f.name in after or f.name in before)]
        values = keep.select(*key, *cols).to_arrow()
        base = keep.select(*key, *[pl.col("before").struct.field(n).alias(n) for n in before]).to_arrow() \
            if before else None
        plan.upserts.append(conform_rows(values, merged, fallback=base))


#: Whole-row images in hand, the merge writes changed columns instead only when that writes at
#: most this share of the bytes: a column file covers every row of a fragment, and Lance's
#: ``update_columns`` costs more CPU per row than appending rows (measured ~1.6 µs a row).
COLUMN_SHARE = 1 / 8


def columns_pay(plan: TablePlan, updates: pl.DataFrame) -> bool:
    """Whether writing the changed columns of ``updates`` over dest's table writes at most
    :data:`COLUMN_SHARE` of what rewriting those rows whole does (sizes from the images)."""
    changed = set(updates["changed_columns"].explode().drop_nulls().unique().to_list())
    after = updates.select(pl.col("after").struct.unnest())
    row_bytes = after.estimated_size() / max(1, updates.height)
    column_bytes = after.select([c for c in after.columns if c in changed]).estimated_size() / max(1, updates.height)
    return plan.dest_rows * column_bytes <= COLUMN_SHARE * updates.height * row_bytes


def take_source_columns(plan: TablePlan, updates: pl.DataFrame, key: list[str], merged: pa.Schema, *,
                        count: bool = True) -> bool:
    """Add source-only updates to ``plan.column_updates`` as key + the union of their changed
    columns (their ``after`` images need hold only those). False, and nothing added, when some
    changed column is not in the images or does not cast to the merged type (a type conflict dest
    keeps): those rows need whole-row writes with dest's values as the fallback."""
    changed = set(updates["changed_columns"].explode().drop_nulls().unique().to_list())
    after = struct_fields(updates, "after")
    columns = [f for f in merged if f.name in changed]
    if not columns or any(f.name not in after for f in columns):
        return False
    values = updates.select(*key, *[pl.col("after").struct.field(f.name).alias(f.name) for f in columns]).to_arrow()
    try:
        values = pa.table([values.column(c).cast(merged.field(c).type) for c in values.column_names],
                          schema=pa.schema([merged.field(c).with_nullable(True) for c in values.column_names]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    plan.column_updates.setdefault(tuple(values.column_names), RowSpool()).append(values)
    if count:
        plan.stats.rows_from_source += updates.height
    return True


def dest_side(plan: TablePlan, column: str) -> str:
    """Where dest's current value of ``column`` is: dest's own, except for a column dest had
    dropped and the merge restores — filled from the source for every row before the fold's
    rows are written, so the source's value is dest's value."""
    return "t" if column in plan.restore_columns else "o"


def _side(row: dict[str, Any], side: str, columns: list[str], present: bool) -> dict[str, Any] | None:
    return {c: row[col(side, c)] for c in columns} if present else None


# ------------------------------------------------------------------------------------- cell conflicts
def _fold_cells(plan: TablePlan, cl: Classified, rows: pl.DataFrame, resolver: Resolver, merged: pa.Schema,
                report: Report) -> None:
    """Keys updated on both sides: take the source's cells, settle conflicting cells, write the rows
    whose values end up different from dest's."""
    if not rows.height:
        return
    key, values = cl.key, cl.value_columns
    default, by = resolver.default(plan.name)
    conflicting = pl.col("\x01conflict_cols").list.len() > 0
    choice = {c: pl.when(pl.col("\x01conflict_cols").list.contains(c)).then(pl.lit(default, pl.String))
              .otherwise(pl.lit(None, pl.String)) for c in values}
    given: dict[str, pl.Expr] = {}
    if resolver.by_hand and rows.filter(conflicting).height:
        hand = _hand_cells(plan, cl, rows.filter(conflicting), resolver, merged)
        if hand is not None:
            rows = rows.join(hand, on=key, how="left", nulls_equal=True)
            choice = {c: pl.coalesce(pl.col(f"h\x00{c}"), choice[c]) for c in values}
            given = {c: pl.col(f"v\x00{c}") for c in values}
    rows = rows.with_columns(*[e.alias(f"ch\x00{c}") for c, e in choice.items()])
    final = []
    for c in values:
        ch = pl.col(f"ch\x00{c}")
        e = (pl.when(pl.col("\x01take_cols").list.contains(c)).then(pl.col(col("t", c)))
             .when(ch == THEIRS).then(pl.col(col("t", c))).when(ch == BASE).then(pl.col(col("b", c))))
        if c in given:
            e = e.when(ch == VALUE).then(given[c])
        final.append(e.otherwise(pl.col(col(dest_side(plan, c), c))).alias(col("f", c)))  # "f": the final value
    rows = rows.with_columns(final)
    unresolved = [(pl.col("\x01conflict_cols").list.contains(c) & pl.col(f"ch\x00{c}").is_null()).alias(f"u\x00{c}")
                  for c in values]
    moved = [(~same_values(pl.col(col("f", c)), pl.col(col(dest_side(plan, c), c)))).alias(f"m\x00{c}")
             for c in values]
    rows = rows.with_columns(unresolved + moved)
    open_rows = rows.filter(pl.any_horizontal([f"u\x00{c}" for c in values])) if values else rows.clear()
    for r in open_rows.to_dicts():
        cols = [c for c in values if r[f"u\x00{c}"]]
        report(Conflict("row.update_update", plan.name, {k: r[k] for k in key}, tuple(cols),
                        _side(r, "b", cols, r["\x01has_b"]), _side(r, "o", cols, True), _side(r, "t", cols, True)))
    plan.stats.conflicts += open_rows.height
    if by == "strategy" and values:
        hand_cols = set(rows.columns)
        by_strategy = [pl.col("\x01conflict_cols").list.contains(c) &
                       (pl.col(f"h\x00{c}").is_null() if f"h\x00{c}" in hand_cols else pl.lit(True)) for c in values]
        plan.stats.resolved += rows.filter(conflicting & ~pl.any_horizontal([f"u\x00{c}" for c in values])
                                           & pl.any_horizontal(by_strategy)).height
    written = rows.filter(pl.any_horizontal([f"m\x00{c}" for c in values])) if values else rows.clear()
    if not written.height:
        return
    plan.stats.cells_merged += int(written.select(pl.sum_horizontal([f"m\x00{c}" for c in values])).to_series().sum())
    plan.stats.rows_from_source += written.height
    plan.upserts.append(conform_rows(written.select(*key, *[pl.col(col("f", c)).alias(c) for c in values]).to_arrow(),
                                     merged))
    plan.replace(written["\x01dest_rowid"].to_arrow(), written.select(key).to_arrow())


def _hand_cells(plan: TablePlan, cl: Classified, rows: pl.DataFrame, resolver: Resolver,
                merged: pa.Schema) -> pl.DataFrame | None:
    """Choices (``h\\0c``) and given values (``v\\0c``) of the conflicting cells resolved by hand."""
    key, values = cl.key, cl.value_columns
    out: list[dict[str, Any]] = []
    for r in rows.select(*key, "\x01conflict_cols").to_dicts():
        k = {c: r[c] for c in key}
        key_text = json_text(k)
        entry: dict[str, Any] = {}
        for c in r["\x01conflict_cols"]:
            found = resolver.find("row.update_update", plan.name, key_text, c)
            if found is None:
                continue
            entry[f"h\x00{c}"] = found.resolution
            if found.resolution == VALUE:
                entry[f"v\x00{c}"] = cell_value(found, c, merged)
        if entry:
            out.append({**k, **entry})
    if not out:
        return None
    # Arrow cuts field names at NUL: cross it under plain names, then take the frame's names.
    plain = {f"h\x00{c}": f"h{i}" for i, c in enumerate(values)} | {f"v\x00{c}": f"v{i}" for i, c in enumerate(values)}
    schema = pa.schema([*(merged.field(k) for k in key), *(pa.field(f"h{i}", pa.string()) for i in range(len(values))),
                        *(pa.field(f"v{i}", merged.field(c).type) for i, c in enumerate(values))])
    table = pa.Table.from_pylist([{plain.get(n, n): v for n, v in r.items()} for r in out], schema=schema)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.rename({v: n for n, v in plain.items()}).with_columns([pl.col(k).cast(rows.schema[k]) for k in key])


# ------------------------------------------------------------------------------------- row conflicts
def _fold_rows(plan: TablePlan, cl: Classified, rows: pl.DataFrame, resolver: Resolver, merged: pa.Schema,
               report: Report) -> None:
    """Keys deleted on one side and changed on the other, or inserted on both: the whole row is
    dest's, the source's, the base's or a given one."""
    if not rows.height:
        return
    key, values = cl.key, cl.value_columns
    default, by = resolver.default(plan.name)
    rows = rows.with_columns(pl.lit(default, pl.String).alias("\x01choice"))
    given: list[dict[str, Any]] = []
    by_strategy = rows.height if by == "strategy" else 0
    if resolver.by_hand:
        picks = []
        for r in rows.select(*key, "\x01op").to_dicts():
            k = {c: r[c] for c in key}
            found = resolver.find(_KIND[r["\x01op"]], plan.name, json_text(k), None)
            picks.append(found.resolution if found else default)
            by_strategy -= found is not None and by == "strategy"
            if found is not None and found.resolution == VALUE:
                given.append({**k, **given_row(found, k, values, merged, plan.name)})
        rows = rows.with_columns(pl.Series("\x01choice", picks, dtype=pl.String))
    plan.stats.resolved += by_strategy
    for r in rows.filter(pl.col("\x01choice").is_null()).to_dicts():
        o_deleted = r["\x01change_o"] == "delete"
        message = ""
        if r["\x01op"] == DELETE_MODIFY:
            message = (f"deleted on {'dest' if o_deleted else 'source'}, "
                       f"changed on {'source' if o_deleted else 'dest'}")
        elif r["\x01op"] == STALE:
            message = "a derived column would come from one side and an input it is computed from from the other"
        cols = list(r["\x01differing"] or []) if r["\x01op"] == INSERT_INSERT else values
        report(Conflict(_KIND[r["\x01op"]], plan.name, {k: r[k] for k in key},
                        tuple(r["\x01differing"] or []) if r["\x01op"] == INSERT_INSERT else (),
                        _side(r, "b", cols, r["\x01has_b"]), _side(r, "o", cols, r["\x01has_o"]),
                        _side(r, "t", cols, r["\x01has_t"]), message))
        plan.stats.conflicts += 1
    # The chosen side's row replaces dest's; a side without the row deletes it.
    has = {THEIRS: "\x01has_t", BASE: "\x01has_b"}
    for choice, side in ((THEIRS, "t"), (BASE, "b")):
        chosen = rows.filter(pl.col("\x01choice") == choice)
        if not chosen.height:
            continue
        stays = pl.col(has[choice])
        if choice == BASE and resolver.virtual_base:
            stays = stays | (pl.col("\x01op") == INSERT_INSERT)  # base values: nulls
        gone = chosen.filter(~stays)
        if gone.height:
            plan.deletes.append(gone.select(key).to_arrow())
        kept = chosen.filter(stays)
        if kept.height:
            plan.upserts.append(conform_rows(kept.select(*key, *[pl.col(col(side, c)).alias(c) for c in values])
                                             .to_arrow(), merged))
        present = chosen.filter(pl.col("\x01has_o"))
        plan.replace(present["\x01dest_rowid"].to_arrow(), present.select(key).to_arrow())
        plan.stats.rows_from_source += chosen.height
    if given:
        chosen = rows.filter(pl.col("\x01choice") == VALUE)
        current = {tuple(r[k] for k in key): r for r in chosen.to_dicts()}
        full = []
        for g in given:
            r = current[tuple(g[k] for k in key)]
            full.append({**{c: r[col(dest_side(plan, c), c)] for c in values}, **g})
        plan.upserts.append(conform_rows(pa.Table.from_pylist(full), merged))
        present = chosen.filter(pl.col("\x01has_o"))
        plan.replace(present["\x01dest_rowid"].to_arrow(), present.select(key).to_arrow())
        plan.stats.rows_from_source += chosen.height
