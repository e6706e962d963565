"""What a merge does to one of dest's tables: the plan that the fold builds and the publish applies."""

from __future__ import annotations

import os
import shutil
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

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
    upserts: "RowSpool" = field(default_factory=lambda: RowSpool())
    deletes: list[pa.Table] = field(default_factory=list)
    dest_row_ids: list[pa.Array] = field(default_factory=list)
    dest_row_keys: list[pa.Table] = field(default_factory=list)
    ids_complete: bool = True
    executed: Any = None  # rows kept by Spark executors, written by them (merge.spark.SparkFold)
    indices: dict[str, tuple] | None = None  # the merged index definitions (None: dest's stay as they are)
    #: Source-only updates written as changed columns (``key + columns`` tables, see
    #: :func:`trimerge.merge.rows.take_source_rows`); set by folds whose publish can write them.
    by_columns: bool = False
    dest_rows: int = 0  # rows of dest's table (what a column file per fragment covers)
    derived: dict[str, tuple[str, ...]] | None = None  # merged declarations to record (None: as they are)
    declared: dict[str, tuple[str, ...]] = field(default_factory=dict)  # in force for the fold (stale rows)
    stale: list[pa.Table] = field(default_factory=list)  # keys of stale rows (reported)
    column_updates: dict[tuple[str, ...], "RowSpool"] = field(default_factory=dict)
    #: Row addresses, in ``set_to``'s version, of rows the ``upserts`` replace (every other
    #: located row is deleted): written with no key lookup (:mod:`trimerge.merge.sourceside`).
    located: Any = None

    @property
    def writes(self) -> bool:
        return bool(self.add_columns or self.widen or self.drop_columns or self.upserts.num_rows or self.deletes
                    or self.column_updates or (self.executed is not None and self.executed.writes)
                    or (self.located is not None and len(self.located)))

    def part(self) -> "TablePlan":
        """An empty plan with this plan's settings, for the fold of one key bucket elsewhere (a
        helper thread); :meth:`absorb` then adds what that fold found."""
        return TablePlan(self.name, by_columns=self.by_columns, dest_rows=self.dest_rows, declared=self.declared,
                         restore_columns=self.restore_columns, merged_schema=self.merged_schema)

    def absorb(self, part: "TablePlan") -> None:
        """Add the row edits and counts of a bucket's plan (:meth:`part`) to this one."""
        for name in ("rows_from_source", "converged", "cells_merged", "conflicts", "resolved", "stale"):
            setattr(self.stats, name, getattr(self.stats, name) + getattr(part.stats, name))
        for table in part.upserts.tables():
            self.upserts.append(table)
        part.upserts.close()
        for columns, spool in part.column_updates.items():
            target = self.column_updates.setdefault(columns, RowSpool())
            for table in spool.tables():
                target.append(table)
            spool.close()
        self.deletes.extend(part.deletes)
        self.dest_row_ids.extend(part.dest_row_ids)
        self.dest_row_keys.extend(part.dest_row_keys)
        self.ids_complete = self.ids_complete and part.ids_complete
        self.stale.extend(part.stale)

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


class RowSpool:
    """The rows a merge writes to one table: kept in memory up to ``budget`` bytes, then in an
    Arrow file on disk, and read back batch by batch — so a large merge's memory stays flat."""

    def __init__(self, budget: int | None = None):
        from trimerge.diff.spill import memory_budget

        self.budget = memory_budget(budget) // 4
        self.num_rows = 0
        self._tables: list[pa.Table] = []
        self._bytes = 0
        self._directory: str | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._schema: pa.Schema | None = None
        self._sealed = False  # spilled rows are written once, then only read

    def append(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self.num_rows += table.num_rows
        if self._schema is None:
            self._schema = table.schema
        table = table.cast(self._schema)
        if self._writer is not None:
            self._writer.write_table(table)
            return
        self._tables.append(table)
        self._bytes += table.nbytes
        if self._bytes > self.budget:
            from trimerge.diff.spill import spill_directory

            self._directory = spill_directory()
            weakref.finalize(self, shutil.rmtree, self._directory, True)  # as a spilled diff's files
            self._writer = pa.ipc.new_file(os.path.join(self._directory, "rows.arrow"), self._schema)
            for t in self._tables:
                self._writer.write_table(t)
            self._tables, self._bytes = [], 0

    def tables(self) -> Iterator[pa.Table]:
        """The rows, a table at a time (in memory: all of them; spilled: one record batch each)."""
        if self._directory is None:
            yield from self._tables
            return
        if not self._sealed:
            assert self._writer is not None  # made with the directory
            self._writer.close()
            self._sealed = True
        with pa.OSFile(os.path.join(self._directory, "rows.arrow")) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield pa.Table.from_batches([reader.get_batch(i)])

    def close(self) -> None:
        if self._directory:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
