"""Writes by row id and by fragment, for :class:`~trimerge.lineage.transaction.Transaction`:
replacing rows whose stable row ids are known (merges, updates), committing fragments written
elsewhere (Spark executors), and keyed edits found through the key index — each one Lance
``Update`` (deletion files, new fragments) with no key join and no scan of the table.

:class:`FragmentWrites` is a part of the transaction class (it uses the transaction's own
bookkeeping: the writable head of a table, the versions it records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa

from trimerge.lineage.tables import keyed
from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.tables.fragments import WriteTarget, delete_offsets, fragment_offsets, row_offsets

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.commit import TableVersion
    from trimerge.lineage.hosts import TableLocations


#: Row replacements of at least this many rows write the new rows beside the deletion of the old.
PARALLEL_WRITE_ROWS = 65536


class FragmentWrites:
    """Row-id and fragment writes of a transaction (see the module docstring)."""

    if TYPE_CHECKING:  # what this part uses of the Transaction it is mixed into
        repo: TableLocations
        _tables: dict[str, TableVersion]
        _ops: list[str]

        def _require_open(self) -> None: ...

        def _table(self, name: str) -> TableVersion: ...

        def _writable(self, name: str) -> lance.LanceDataset: ...

        def _written(self, name: str, ds_version: int, ds: lance.LanceDataset | None = None, *,
                     row_level: bool = True) -> None: ...

    def replace_rows(self, name: str, row_ids: Sequence[int] | pa.Array, expected_keys: pa.Table, rows: Any) -> bool:
        """Remove the rows with these stable row ids and add ``rows``, in one Lance commit — a write
        proportional to the change, with no key join and no scan of the table. The ids are first
        checked to still hold ``expected_keys`` (same order); if not, nothing is written and False is
        returned, so the caller can fall back to key-based writes."""
        from lance.fragment import write_fragments

        self._require_open()
        pk = list(self._table(name).primary_key)
        ds = self._writable(name)
        ids = row_ids.cast(pa.uint64()) if isinstance(row_ids, (pa.Array, pa.ChunkedArray)) else pa.array(row_ids, pa.uint64())
        what = f"replace rows in {name}"

        def write() -> list:
            if isinstance(rows, pa.RecordBatchReader):  # streamed: checked batch by batch as it is written
                return write_fragments(pa.RecordBatchReader.from_batches(
                    ds.schema, tbl.checked_batches(rows, ds.schema, pk, what)), ds)
            table = tbl.to_arrow(rows)
            if not table.num_rows:
                return []
            table = tbl.conform(table, ds.schema, what)
            tbl.check_primary_key(table, pk, what)
            return write_fragments(table, ds)

        if len(ids) < PARALLEL_WRITE_ROWS:
            offsets = row_offsets(ds, ids, expected_keys, pk)
            if offsets is None:
                return False
            updated, removed = delete_offsets(ds, offsets)
            new_fragments = write()
        else:
            # Many rows: the new rows are written while the old ones are found and deleted (two
            # cores). Should a key be missing, the written files are never committed (gc removes them).
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(1) as pool:
                written = pool.submit(write)
                offsets = row_offsets(ds, ids, expected_keys, pk)
                deleted = delete_offsets(ds, offsets) if offsets is not None else None
                new_fragments = written.result()
            if deleted is None:
                return False
            updated, removed = deleted
        self._commit_update(name, ds, updated, removed, new_fragments, f"replace rows {name}")
        return True

    def replace_located(self, name: str, addresses: Any, rows: pa.Table, op: str) -> None:
        """Replace the rows at ``addresses`` — found in this transaction's current version of the
        table, e.g. by :func:`trimerge.lineage.tables.columnwrites.locate` — by ``rows`` (conformed to
        the table), in one Lance commit: no second lookup of what was just located."""
        from lance.fragment import write_fragments

        self._require_open()
        ds = self._writable(name)  # a fork shares the fragments (ids and offsets) it was made from
        updated, removed = delete_offsets(ds, fragment_offsets(addresses))
        new = write_fragments(rows, ds) if rows.num_rows else []
        self._commit_update(name, ds, updated, removed, new, op)

    def write_target(self, name: str) -> WriteTarget:
        """Where fragments of ``name`` written elsewhere (Spark executors) go: this transaction's own
        Lance branch of the table (forked now if need be), at its current version. Hand what was
        written back to :meth:`commit_fragments`."""
        self._require_open()
        self._table(name)
        ds = self._writable(name)
        tv = self._tables[name]
        return WriteTarget(self.repo.dataset_path(tv), tv.lance_branch, ds.version,
                           dict(self.repo.table_store.options or {}))

    def commit_fragments(self, name: str, target: WriteTarget, *, updated: Sequence = (), removed: Sequence[int] = (),
                         new: Sequence = ()) -> None:
        """Commit fragments written against ``target`` (see :mod:`trimerge.lineage.tables.fragments`):
        fragments with new deletion files, fragments left empty, new fragments — one Lance commit."""
        self._require_open()
        ds = self._writable(name)
        if ds.version != target.version:
            raise InvalidOperationError(f"table {name}: fragments were written against version {target.version}, "
                                        f"but the transaction's table is at {ds.version}")
        self._commit_update(name, ds, list(updated), list(removed), list(new), f"replace rows {name}")

    def _commit_update(self, name: str, ds: "lance.LanceDataset", updated: list, removed: list[int], new: list,
                       op: str) -> None:
        from lance import LanceDataset, LanceOperation

        if updated or removed or new:
            ds = LanceDataset.commit(ds, LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                                               new_fragments=new), read_version=ds.version)
        self._ops.append(op)
        self._written(name, ds.version, ds)

    def _apply_keyed(self, name: str, ds: "lance.LanceDataset", edit: keyed.KeyedEdit, op: str) -> None:
        """Write a keyed edit (see :mod:`trimerge.lineage.tables.keyed`) as one Lance ``Update``."""
        from lance.fragment import write_fragments

        updated, removed = delete_offsets(ds, edit.offsets) if edit.offsets else ([], [])
        new = write_fragments(edit.rows, ds) if edit.rows is not None and edit.rows.num_rows else []
        self._commit_update(name, ds, updated, removed, new, op)

