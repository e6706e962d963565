"""What a merge does to one of dest's tables: the plan that the fold builds and the publish applies."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from trimerge.lineage.commit import TableVersion
from trimerge.merge.result import TableMergeStats


@dataclass
class TablePlan:
    """The edits to dest's table ``name``.

    Either a whole-table step (``set_to`` another table version, or ``drop``), or schema edits
    followed by row edits: ``upserts`` (full rows in ``merged_schema``) and ``deletes`` (key
    tables). ``dest_row_ids``/``dest_row_keys`` say where dest's current rows for those keys are,
    when known for every one of them (``ids_complete``): the publish then removes rows by id and
    appends, instead of joining on keys."""

    name: str
    stats: TableMergeStats = field(default_factory=TableMergeStats)
    set_to: TableVersion | None = None  # point dest at this version (no data written)
    drop: bool = False
    add_columns: list[pa.Field] = field(default_factory=list)
    widen: list[tuple[str, pa.DataType]] = field(default_factory=list)
    drop_columns: list[str] = field(default_factory=list)
    restore_columns: list[str] = field(default_factory=list)  # re-added columns filled from the source
    restore_from: TableVersion | None = None
    merged_schema: pa.Schema | None = None
    upserts: list[pa.Table] = field(default_factory=list)
    deletes: list[pa.Table] = field(default_factory=list)
    dest_row_ids: list[pa.Array] = field(default_factory=list)
    dest_row_keys: list[pa.Table] = field(default_factory=list)
    ids_complete: bool = True

    @property
    def writes(self) -> bool:
        return bool(self.add_columns or self.widen or self.drop_columns or self.upserts or self.deletes)

    def replace(self, ids: pa.Array, keys: pa.Table) -> None:
        """Remember that dest's rows ``ids`` (holding ``keys``) are replaced or deleted."""
        if ids.null_count:
            self.ids_complete = False
        elif len(ids):
            self.dest_row_ids.append(ids.cast(pa.uint64()))
            self.dest_row_keys.append(keys)


def nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def conform_rows(table: pa.Table, schema: pa.Schema, fallback: pa.Table | None = None) -> pa.Table:
    """Rows in ``schema``: missing columns null, types cast. A column whose values cannot be cast
    (a type conflict the destination keeps) takes ``fallback``'s values (dest's current ones)."""
    cols = []
    for f in schema:
        for source in (table, fallback):
            if source is not None and f.name in source.column_names:
                try:
                    cols.append(source.column(f.name).cast(f.type))
                    break
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    continue
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=nullable(schema))
