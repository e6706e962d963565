"""A diff restricted to the rows one filter selects (``diff(..., where=)``, ``trimerge diff --where``).

A changed row is kept when its before image or its after image matches the filter, so a row that
moved out of the filter's range (``price`` 15 → 9 under ``price > 10``) shows as the update it is,
and a row deleted or inserted inside the range shows too.

The filter is the one ``repo.read(where=)`` takes: checked as text (:func:`check_filter`, before
anything is read) and planned against each side's table (:func:`plan_filter`: an unknown column or
a type mismatch is refused before any row is read). A column one side lacks (added or dropped
between the two) is null in that side's images, as SQL would have it: a filter that plans on one
side only matches no image of the other.

Cost follows the change, not the table: the filter runs on the images the diff already holds (its
changed rows, batch by batch, through an in-memory Lance dataset, so the grammar and semantics are
Lance's own); the rest of the table is never read. Spilled rows stay spilled, bucket by bucket. A
table on one side only (added or dropped) has one image a row: the engine pushes the filter into
Lance's read of it (:meth:`TableDiff._collect`).
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff.spill import ChangedRows
from trimerge.lineage.errors import InvalidOperationError, lance_message
from trimerge.lineage.safety.boundary import machine_failure
from trimerge.lineage.tables.filters import check_filter, plan_filter

if TYPE_CHECKING:
    from trimerge.diff.planner import Snapshot

#: The column that carries each image's row number through the in-memory dataset.
_ROW = "_trimerge_where_row"
_names = itertools.count()
#: Lance's row metadata columns: they plan on a table but mean nothing in a diff's images.
_ROW_META = re.compile(r"(?<![\w.])_row(?:id|addr|offset|_created_at_version|_last_updated_at_version)\b", re.I)


def check_where(where: object) -> str:
    """``where`` as text if it is one filter expression within the limits, else a clear refusal."""
    return check_filter(where, "where")


def plan_where(where: str, table: str, before: "Snapshot", after: "Snapshot", *,
               named: bool = True) -> tuple[bool, bool]:
    """On which sides (before, after) of ``table`` the filter plans; refused when on neither (when
    the table was not ``named`` by the caller, the refusal says to name the tables the filter is
    for). A table unchanged between the sides is planned once."""
    meta = _ROW_META.search(where)
    if meta:
        raise InvalidOperationError(f"where: {meta.group()} names a row's place in one version, which a diff's "
                                    "images do not carry: filter on the table's columns")
    same = before.tv is not None and after.tv is not None and before.tv.location == after.tv.location
    sides, refusal = [], None
    for snap in (before, after):
        if snap.tv is None:
            sides.append(False)
            continue
        if same and sides:
            sides.append(sides[0])
            continue
        try:
            plan_filter(snap.ds, where, f"where (table {table})")
            sides.append(True)
        except InvalidOperationError as exc:
            sides.append(False)
            refusal = exc
    if not any(sides):
        hint = "" if named else " (a filter applies to every table compared: name the tables it is for)"
        raise InvalidOperationError(f"{refusal}{hint}")
    return sides[0], sides[1]


def image_matches(rows: pa.Table, side: str, where: str, key: Sequence[str]) -> pa.Array:
    """For each row of ``rows`` (a diff's rows), whether its ``side`` image (``before``/``after``)
    matches ``where`` (false where the row has no such image)."""
    mask = np.zeros(rows.num_rows, dtype=bool)
    images = rows.column(side).combine_chunks()
    present = pc.is_valid(images)
    if not rows.num_rows or not pc.any(present).as_py():
        return pa.array(mask)
    values = images.filter(present)
    columns = {k: rows.column(k).filter(present) for k in key}
    for i, field in enumerate(values.type):
        if field.name not in columns:
            columns[field.name] = values.field(i)
    row = _ROW + "_" * sum(1 for c in columns if c.startswith(_ROW))  # a name no column of the table has
    columns[row] = pc.indices_nonzero(present)
    import lance

    # One dataset in Lance's memory store (gone with the object): Lance's own grammar and semantics.
    try:
        ds = lance.write_dataset(pa.table(columns), f"memory://trimerge-where-{next(_names)}")
        mask[ds.to_table(columns=[row], filter=f"({where}\n)").column(row).to_numpy()] = True
    except (OSError, ValueError, RuntimeError) as exc:
        limit = machine_failure(exc)  # Lance's memory pool or the disk, not the filter
        if limit is not None:
            raise limit from exc
        raise InvalidOperationError(f"where: cannot apply {where[:200]!r} to the {side} images: "
                                    f"{lance_message(exc)[:300]}") from None
    return pa.array(mask)


def matching_rows(rows: pa.Table, where: str, key: Sequence[str], sides: tuple[bool, bool]) -> pa.Table:
    """The rows of ``rows`` whose before or after image matches ``where`` (on the sides it plans on)."""
    if not rows.num_rows:
        return rows
    keep = pa.array(np.zeros(rows.num_rows, dtype=bool))
    for side, planned in zip(("before", "after"), sides):
        if planned:
            keep = pc.or_(keep, image_matches(rows, side, where, key))
    return rows.filter(keep)


def restrict_where(changed: ChangedRows, where: str, key: Sequence[str], sides: tuple[bool, bool],
                   owner: object) -> ChangedRows:
    """``changed`` with only the rows :func:`matching_rows` keeps; spilled rows stay spilled, per
    bucket (in key order within each, as before), in a file that lives as long as ``owner``."""
    if changed.table is not None:
        return ChangedRows.in_memory(matching_rows(changed.table, where, key, sides))
    buckets = changed.buckets(changed.key_types, len(changed.bucket_batches)) \
        if changed.bucket_batches and changed.key_types is not None else None
    if buckets is None:  # not cut by bucket: filter the batches, in memory
        kept = [matching_rows(pa.Table.from_batches([b], changed.schema), where, key, sides)
                for b in changed.batches()]
        return ChangedRows.in_memory(pa.concat_tables(kept) if kept else changed.schema.empty_table())
    return ChangedRows.from_buckets((matching_rows(t, where, key, sides) for t in buckets), owner, changed.key_types)
