"""The repository's one-commit shortcuts: each table write, index operation and import as a
transaction of one operation (``repo.upsert(...)`` is ``with repo.transaction() as tx:
tx.upsert(...)``), plus index listing and search at a ref.

:class:`TableWrites` is mixed into :class:`~trimerge.lineage.repository.Repository`; it needs
only ``transaction``, ``tables``, ``default_ref``, ``table_version`` and ``open_table_version`` of
it, and keeps the facade's own module about opening, refs, history and reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from trimerge.lineage.commit import Commit
from trimerge.lineage.storage.lazyimport import lazy_module
from trimerge.lineage.tables.maintenance import MAINTENANCE

if TYPE_CHECKING:
    import lance
    import pyarrow as pa

    from trimerge.lineage.commit import TableVersion
    from trimerge.lineage.transaction import Transaction

    from trimerge.lineage.tables import indices as indices_module
else:  # what annotations name, imported on first use (typing.get_type_hints)
    pa = lazy_module("pyarrow")
    indices_module = lazy_module("trimerge.lineage.tables.indices")


def listed(value: Any, single: type = str) -> list[Any]:
    """``value`` as a list for a default commit message (whatever it is: checking it is the writer's job)."""
    if isinstance(value, single):
        return [str(value)] if single is str else [value]
    import pyarrow as pa

    return list(value) if isinstance(value, (list, tuple, pa.Schema)) else []


class TableWrites:
    """One-commit writes, index operations and import (see the module docstring)."""

    if TYPE_CHECKING:  # what these shortcuts use of the Repository they are mixed into
        def transaction(self, branch: str | None = None, *, actor: str | None = None, message: str | None = None,
                        metadata: Mapping[str, str] | None = None) -> Transaction: ...

        def tables(self, ref: str | None = None) -> list[str]: ...

        def default_ref(self, ref: str | None) -> str: ...

        def table_version(self, table: str, ref: str | None = None) -> TableVersion: ...

        def open_table_version(self, tv: TableVersion) -> lance.LanceDataset: ...

        def _split_address(self, table: str, ref: str | None) -> tuple[str, str | None]: ...

    def _write(self, operation: str, default_message: str, *args: Any, branch: str | None, actor: str | None,
               message: str | None) -> Commit:
        """One transaction running one operation: the body of every one-commit shortcut below."""
        with self.transaction(branch, actor=actor, message=message or default_message) as tx:
            getattr(tx, operation)(*args)
        return tx.commit

    def create_table(self, name: str, data: Any, primary_key: str | Sequence[str], *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Create a table from a pyarrow Table or polars DataFrame; one commit."""
        return self._write("create_table", f"Create table {name}", name, data, primary_key,
                           branch=branch, actor=actor, message=message)

    def append(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Insert rows whose keys are new; an existing key is an error."""
        return self._write("append", f"Append to {table}", table, data, branch=branch, actor=actor, message=message)

    def upsert(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Insert new keys, update existing ones (rows with identical values are left alone)."""
        return self._write("upsert", f"Upsert into {table}", table, data, branch=branch, actor=actor, message=message)

    def update(self, table: str, data: Any, write: str = "auto", *, branch: str | None = None,
               actor: str | None = None, message: str | None = None) -> Commit:
        """Change some columns of existing rows (``data``: the key plus the columns to change);
        ``write``: ``auto``, ``columns`` or ``rows`` (see :meth:`Transaction.update`)."""
        return self._write("update", f"Update {table}", table, data, write, branch=branch, actor=actor,
                           message=message)

    def overwrite(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
                  message: str | None = None) -> Commit:
        """Replace a table's content."""
        return self._write("overwrite", f"Overwrite {table}", table, data, branch=branch, actor=actor, message=message)

    def delete(self, table: str, where: str, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Delete the rows matching a SQL predicate (text compared with a date or timestamp column
        is read as one: ``date < '2001-01-01'``, see :mod:`trimerge.lineage.tables.filtercasts`)."""
        return self._write("delete", f"Delete from {table} where {where}", table, where,
                           branch=branch, actor=actor, message=message)

    def delete_keys(self, table: str, keys: Any, *, branch: str | None = None, actor: str | None = None,
                    message: str | None = None) -> Commit:
        """Delete rows by primary key (``keys``: a table with the key columns)."""
        return self._write("delete_keys", f"Delete keys from {table}", table, keys,
                           branch=branch, actor=actor, message=message)

    def drop_table(self, table: str, *, branch: str | None = None, actor: str | None = None,
                   message: str | None = None) -> Commit:
        """Remove a table from the branch (its history stays readable)."""
        return self._write("drop_table", f"Drop table {table}", table, branch=branch, actor=actor, message=message)

    def compact(self, table: str, *, branch: str | None = None, actor: str | None = None,
                message: str | None = None) -> Commit | None:
        """Compact a table's fragments (same content, fewer files): a maintenance commit."""
        return self.optimize(table, branch=branch, actor=actor, message=message or f"Compact {table}")

    def optimize(self, table: str | None = None, *, branch: str | None = None, actor: str | None = None,
                 message: str | None = None) -> Commit | None:
        """Compact ``table`` (default: every table) and add its unindexed rows to its indices, as one
        maintenance commit (None: nothing to do). Rows do not change: diffs show none."""
        names = [table] if table is not None else self.tables(self.default_ref(branch))
        with self.transaction(branch, actor=actor, message=message or f"Optimize {', '.join(names) or 'nothing'}",
                              metadata={MAINTENANCE: "optimize"}) as tx:
            for name in names:
                tx.optimize(name)
        return tx.commit

    def add_columns(self, table: str, fields: Any, *,
                    branch: str | None = None, actor: str | None = None, message: str | None = None) -> Commit:
        """Add nullable columns: pyarrow fields (existing rows get nulls), or a table of key +
        new columns whose values fill those rows, writing only the new columns
        (see :meth:`Transaction.add_columns`)."""
        import pyarrow as pa

        from trimerge.lineage.tables.conversion import field_name

        given = listed(fields, single=pa.Field) if isinstance(fields, (pa.Field, pa.Schema, list, tuple)) else \
            [str(c) for c in (fields.column_names if isinstance(fields, pa.Table) else getattr(fields, "columns", []))]
        names = [field_name(f) if isinstance(f, pa.Field) else str(f) for f in given]
        return self._write("add_columns", f"Add column(s) {', '.join(names)} to {table}", table, fields,
                           branch=branch, actor=actor, message=message)

    def set_derived(self, table: str, column: str, inputs: Sequence[str] | None = None, *, branch: str | None = None,
                    actor: str | None = None, message: str | None = None) -> Commit:
        """Declare ``column`` computed from ``inputs`` (None: no longer derived); one commit. Merges
        then report rows whose derived value and inputs come from different sides
        (:mod:`trimerge.lineage.gates.derived`)."""
        shown = ", ".join(map(str, listed(inputs))) or "nothing"
        return self._write("set_derived", f"Declare {table}.{column} derived from {shown}",
                           table, column, inputs, branch=branch, actor=actor, message=message)

    def derived(self, table: str, ref: str | None = None) -> dict[str, tuple[str, ...]]:
        """The derived-column declarations of ``table`` at ``ref``: column -> input columns."""
        from trimerge.lineage.gates.derived import as_dict

        return as_dict(self.table_version(table, ref).derived)

    def drop_columns(self, table: str, columns: Sequence[str], *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Drop non-key columns."""
        return self._write("drop_columns", f"Drop column(s) {', '.join(map(str, listed(columns)))} from {table}", table, columns,
                           branch=branch, actor=actor, message=message)

    def alter_column(self, table: str, column: str, data_type: pa.DataType, *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Widen a column's type (e.g. int32 to int64, float32 to float64)."""
        return self._write("alter_column", f"Widen {table}.{column} to {data_type}", table, column, data_type,
                           branch=branch, actor=actor, message=message)

    # ------------------------------------------------------------------ indices, search, import
    def create_index(self, table: str, column: str, kind: str, *, name: str | None = None, replace: bool = False,
                     branch: str | None = None, actor: str | None = None, message: str | None = None,
                     progress: Callable[[str, str], None] | None = None, **params: Any) -> Commit:
        """Build a Lance index on ``column`` as one commit (see :meth:`Transaction.create_index`,
        also for ``progress``)."""
        with self.transaction(branch, actor=actor, message=message or f"Create {kind} index on {table}.{column}") as tx:
            tx.create_index(table, column, kind, name=name, replace=replace, progress=progress, **params)
        return tx.commit

    def drop_index(self, table: str, name: str, *, branch: str | None = None, actor: str | None = None,
                   message: str | None = None) -> Commit:
        """Drop a table's index by name; one commit."""
        return self._write("drop_index", f"Drop index {name} of {table}", table, name,
                           branch=branch, actor=actor, message=message)

    def optimize_indices(self, table: str, *, branch: str | None = None, actor: str | None = None,
                         message: str | None = None,
                         progress: Callable[[str, str], None] | None = None) -> Commit | None:
        """Add the rows written since the last build to a table's indices (no retraining); None if
        every row is indexed already. ``progress`` as :meth:`Transaction.optimize_indices` has it."""
        return self._write("optimize_indices", f"Optimize indices of {table}", table, progress,
                           branch=branch, actor=actor, message=message)

    def indices(self, table: str, ref: str | None = None) -> list[indices_module.IndexInfo]:
        """The indices of ``table`` at ``ref`` (default: the current branch), each with its
        definition and how many rows it covers."""
        from trimerge.lineage.tables.indices import list_indices

        tv = self.table_version(table, ref)
        return list_indices(self.open_table_version(tv), tv)

    def search(self, table: str, *, ref: str | None = None, vector: Any = None, column: str | None = None,
               text: str | None = None, k: int = 10, where: str | None = None, columns: Sequence[str] | None = None,
               **options: Any) -> pa.Table:
        """Nearest rows to ``vector`` or best matches of ``text`` in ``table`` at ``ref``: an Arrow
        table with the key columns, ``columns`` and ``_distance`` (vector) or ``_score`` (text).
        ``where`` is a prefilter (the top ``k`` among matching rows)."""
        from trimerge.lineage.tables.search import search

        table, ref = self._split_address(table, ref)
        tv = self.table_version(table, ref)
        return search(self.open_table_version(tv), tv.primary_key, vector=vector, column=column, text=text, k=k,
                      where=where, columns=columns, **options)

    def import_table(self, name: str, source: str, primary_key: str | Sequence[str], *, version: int | None = None,
                     storage_options: Mapping[str, str] | None = None, branch: str | None = None,
                     actor: str | None = None, message: str | None = None,
                     progress: Callable[[str, str], None] | None = None) -> Commit:
        """Bring an existing Lance dataset in as table ``name`` without copying its data files
        (Lance shallow clone); the source is never written to or deleted from. ``progress`` as
        :meth:`Transaction.import_table` has it (the key check is the long step)."""
        with self.transaction(branch, actor=actor, message=message or f"Import {source} as {name}") as tx:
            tx.import_table(name, source, primary_key, version=version, storage_options=storage_options,
                            progress=progress)
        return tx.commit

