"""Transactions: a multi-table write to one branch that becomes visible as one commit, or not at all.

A transaction holds the branch's lease from ``begin`` until it publishes or aborts. Before its first
physical effect on a Lance branch it records an *intent* (``intents/<ulid>.json``: which Lance
branches it touches and, once known, the commit it will publish), so a crash at any point can be
completed or rolled back by :mod:`trimerge.lineage.safety.recovery`. Lance versions it writes are
invisible until :func:`trimerge.lineage.history.refs.publish` swaps the branch document.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import pyarrow as pa
from ulid import ULID

from trimerge.lineage.gates import derived
from trimerge.lineage.tables import indices
from trimerge.lineage.tables import keyed
from trimerge.lineage.tables import maintenance
from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.safety.boundary import guard_class, machine_failure
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import (
    AlreadyExistsError,
    BranchNotFoundError,
    InvalidOperationError,
    PrimaryKeyError,
    ReadOnlyRefError,
    TableNotFoundError,
    TrimergeError,
)
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.tables.filters import check_filter, prepare_filter
from trimerge.lineage.tables.rowwrites import FragmentWrites
from trimerge.lineage.tables.upkeepwrites import UpkeepWrites
from trimerge.lineage.storage.lease import Lease
from trimerge.lineage.history.names import SCHEMA_LOCK_BRANCH, is_branch_name, validate_table_name
from trimerge.lineage.history.refs import Branch, now, publish
from trimerge.lineage.safety.recovery import intent_key
from trimerge.lineage.history.protection import check_request_merge, refuse_direct_write

if TYPE_CHECKING:
    import lance
    from trimerge.lineage.hosts import TransactionHost
else:  # what annotations name, imported on first use (typing.get_type_hints)
    from trimerge.lineage.storage.lazyimport import lazy_module

    lance = lazy_module("lance")


class Transaction(FragmentWrites, UpkeepWrites):
    """A write to one branch that publishes exactly one commit on success.

    The branch is locked from ``__enter__`` until the commit is published or rolled back, so
    concurrent writers queue up (each on top of the previous one) or get a retryable
    :class:`ConcurrentWriteError` after ``lock_timeout`` seconds."""

    scratch = False  # see ScratchTransaction
    repo: "TransactionHost"  # what it uses of the repository (lineage/hosts.py)

    def __init__(self, repo: "TransactionHost", branch: str, *, actor: str, message: str | None,
                 metadata: Mapping[str, str] | None):
        self.repo = repo
        self.branch_name = branch
        self.actor = actor
        self.message = message
        self.metadata = dict(metadata or {})
        self.ulid = str(ULID())
        self.commit: Commit | None = None
        self._lock: Lease | None = None
        self._schema_lock: Lease | None = None
        self._intent_version: Any = None
        self._branch: Branch | None = None
        self._base: Commit | None = None
        self._tables: dict[str, TableVersion] = {}
        self._touched: dict[tuple[str, str], dict[str, Any]] = {}
        self._ops: list[str] = []
        #: Publish even when nothing changed: the replay of a commit that started empty (as git).
        self.keep_empty = False
        self._extra_parents: list[str] = []
        self._refers: list[str] = []  # existing commits whose data this write reuses (gc keeps them)
        self._heads: dict[str, lance.LanceDataset | None] = {}  # the dataset object each write left
        self._built_on: dict[str, int] = {}  # the Lance version the pending write of a table builds on

    # -- lifecycle
    def __enter__(self) -> "Transaction":
        self.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.publish()
        else:
            self.abort()

    def begin(self) -> None:
        repo = self.repo
        if not is_branch_name(self.branch_name):
            self._refuse()
        refuse_direct_write(self)  # a protected branch takes merges only (lineage/history/protection.py)
        self._lock = repo.lock_branch(self.branch_name, f"transaction {self.ulid}")
        try:
            self._branch = repo.refs.branch(self.branch_name)  # read under the lease: the tip to build on
            if self._branch is None:
                self._refuse()
            self._base = repo.commit(self._branch.commit_id)
            self._tables = dict(self._base.tables)
        except BaseException:
            self._lock.release(untouched=True)
            raise

    def _refuse(self) -> None:
        """The clear error for a write to something that is not a branch."""
        repo = self.repo
        if repo.tags.get_or_none(self.branch_name):
            raise ReadOnlyRefError(f"{self.branch_name!r} is a tag; writes go to branches")
        try:
            repo.resolve(self.branch_name)
        except TrimergeError:
            raise BranchNotFoundError(f"no branch {self.branch_name!r}") from None
        raise ReadOnlyRefError(f"{self.branch_name!r} is not a branch; writes go to branches")

    def _save_intent(self, commit: Commit | None = None) -> None:
        doc = {
            "ulid": self.ulid, "branch": self.branch_name, "lock_token": self._lock.token,
            "base": self._base.id, "actor": self.actor, "message": self.message or "",
            "touched": list(self._touched.values()), "refers": list(self._refers),
        }
        if self.scratch:
            doc["scratch"] = True
        if commit is not None:
            doc["commit"] = commit.to_json()
        self._lock.renew_if_due()
        self._intent_version = self.repo.docs.write(intent_key(self.ulid), doc, self._intent_version)

    def _require_open(self) -> None:
        if self._lock is None or not self._lock.held:
            raise InvalidOperationError("the transaction is not active (use it inside a 'with' block)")

    # -- state
    @property
    def base(self) -> Commit:
        """The branch tip this transaction writes on top of."""
        self._require_open()
        return self._base

    @property
    def has_changes(self) -> bool:
        return bool(self._ops)

    def tables(self) -> list[str]:
        """Tables as this transaction sees them so far."""
        return sorted(self._tables)

    def read(self, table: str, **kwargs: Any) -> pa.Table:
        """Read a table including this transaction's own writes."""
        tv = self._table(table)
        return self.repo.table_store.open_version(tv).to_table(**kwargs)

    def schema(self, name: str) -> pa.Schema:
        """A table's schema as this transaction sees it."""
        tv = self._table(name)
        return self.repo.table_store.open_version(tv).schema

    def indices(self, table: str) -> list[indices.IndexInfo]:
        """A table's indices as this transaction sees them so far."""
        tv = self._table(table)
        return indices.list_indices(self.repo.table_store.open_version(tv), tv)

    def _table(self, name: str) -> TableVersion:
        try:
            return self._tables[name]
        except KeyError:
            raise TableNotFoundError(f"no table {name!r} on branch {self.branch_name!r}") from None

    def _touch(self, key: tuple[str, str], **info: Any) -> None:
        if key not in self._touched:
            self._touched[key] = {"dataset": key[0], "lance_branch": key[1], **info}
            self._save_intent()  # before any physical effect on that Lance branch

    def _writable(self, name: str) -> lance.LanceDataset:
        """The latest of this branch's own Lance branch of ``name``, forking it on first write."""
        store = self.repo.table_store
        tv = self._table(name)
        if tv.owner != self._branch.id:
            fork = f"f-{str(ULID()).lower()}"
            self._touch((tv.dataset, fork), created_fork=True, expected_version=None)
            crashpoint("before_fork")
            ds = store.fork(tv, fork)
            # pylance reads a fork's delta only from its own first version (the fork point).
            self._tables[name] = replace(tv, lance_branch=fork, owner=self._branch.id, delta_since=tv.version)
            self._built_on[name] = ds.version
            return ds
        self._touch((tv.dataset, tv.lance_branch), expected_version=tv.version)
        ds = store.writable_head(tv)
        self._built_on[name] = ds.version
        return ds

    def _written(self, name: str, ds_version: int, ds: lance.LanceDataset | None = None, *,
                 row_level: bool = True) -> None:
        """Record the version a write made. ``row_level``: Lance's row-version metadata names every
        row the write changed (appends, upserts, deletes, row replacements, compaction — not
        overwrites or schema changes, whose changed values keep their old row versions)."""
        tv = self._tables[name]
        built_on = self._built_on.pop(name, tv.version)
        if ds_version == tv.version:
            since = tv.delta_since
        elif not row_level:
            since = ds_version
        elif built_on == tv.version:
            since = tv.version if tv.delta_since is None else tv.delta_since
        else:
            # The head was rolled back to the committed content (a restore after a revert or a
            # failed write): rows brought back keep old row versions, so the chain starts here.
            since = built_on
        self._tables[name] = replace(tv, version=ds_version, delta_since=since)
        self._heads[name] = ds
        crashpoint(f"after_write_{len(self._ops)}")

    def _latest_version(self, name: str) -> int:
        return self.repo.table_store.latest_version(self._tables[name])

    # -- operations
    def _new_table(self, name: str, primary_key: Any, what: str) -> tuple[str, ...]:
        self._require_open()
        validate_table_name(name)
        if name in self._tables:
            raise AlreadyExistsError(f"table {name!r} exists already on branch {self.branch_name!r}")
        return tbl.parse_primary_key(primary_key, f"{what} {name}")

    def create_table(self, name: str, data: Any, primary_key: str | Sequence[str]) -> None:
        """Create a table (a new Lance dataset with stable row ids and the key declared in its schema)."""
        pk = self._new_table(name, primary_key, "create table")
        table = tbl.to_arrow(data)
        schema = tbl.schema_with_primary_key(table.schema, pk)
        tbl.check_primary_key(table, pk, f"create table {name}")
        table = table.cast(schema)
        dataset = f"{name}-{str(ULID()).lower()}"
        self._touch((dataset, "main"), created_dataset=True)
        ds = self.repo.table_store.create(dataset, table, schema)
        self._tables[name] = TableVersion(dataset, "main", ds.version, self._branch.id, pk, delta_since=ds.version)
        self._ops.append(f"create {name}")
        self._written(name, ds.version)

    def import_table(self, name: str, source: str, primary_key: str | Sequence[str], *, version: int | None = None,
                     storage_options: Mapping[str, str] | None = None,
                     progress: Callable[[str, str], None] | None = None) -> None:
        """Add table ``name`` referencing an existing Lance dataset's data files without copying
        them (see :mod:`trimerge.lineage.tables.importing`); the source is checked before any effect.
        ``progress`` (the shape of ``diff(progress=)``) hears ``(name, "start")``, ``(name, "keys")``
        after each batch of up to 1,048,576 key rows checked, ``(name, "duplicates")`` before the
        duplicate check of keys not stored in order, ``(name, "clone")`` and ``(name, "done")``."""
        from trimerge.lineage.tables import importing

        pk = self._new_table(name, primary_key, "import")
        if storage_options is None and importing.same_store(source, self.repo.table_store):
            storage_options = self.repo.table_store.options
        if progress is not None:
            progress(name, "start")
        source_ds = importing.open_source(source, pk, version=version, storage_options=storage_options,
                                          progress=progress, name=name)
        dataset = f"{name}-{str(ULID()).lower()}"
        if progress is not None:
            progress(name, "clone")
        self._touch((dataset, "main"), created_dataset=True)
        ds = importing.clone(source_ds, pk, self.repo.table_store, dataset)
        self._tables[name] = TableVersion(dataset, "main", ds.version, self._branch.id, pk, delta_since=ds.version)
        self._ops.append(f"import {name}")
        self._written(name, ds.version)
        self._heads.pop(name, None)  # no upkeep: an import writes nothing but the clone's manifest
        if progress is not None:
            progress(name, "done")

    def _incoming(self, name: str, data: Any, what: str, *,
                  fill_nullable: bool = False) -> tuple[lance.LanceDataset, pa.Table, tuple[str, ...]]:
        tv = self._table(name)
        table = tbl.to_arrow(data)
        tbl.check_primary_key(table, tv.primary_key, f"{what} {name}")
        # An owned Lance branch's head is normally the committed version, so one open serves both
        # the schema check and the write. Input is checked before the first effect (intent, fork,
        # healing), so a rejected write leaves the repository as it was.
        store = self.repo.table_store
        head = store.clean_head(tv) if tv.owner == self._branch.id else None
        schema = head.schema if head is not None else store.open_version(tv).schema
        table = tbl.conform(table, schema, f"{what} {name}", fill_nullable=fill_nullable)
        if head is not None:
            self._touch((tv.dataset, tv.lance_branch), expected_version=tv.version)
            self._built_on[name] = head.version
            return head, table, tv.primary_key
        return self._writable(name), table, tv.primary_key

    def append(self, name: str, data: Any) -> None:
        """Insert rows; keys that exist already are an error. Columns ``data`` lacks that the
        table lets be null are filled with nulls (as SQL's ``INSERT`` of some columns)."""
        self._require_open()
        ds, table, pk = self._incoming(name, data, "append to", fill_nullable=True)
        if table.num_rows:
            # Keys checked first, rows then written as new fragments: no join of the input in
            # Lance's fixed memory pool, whose exhaustion would read as "keys exist" (issue 55).
            found = keyed.existing_keys(ds, table, pk)
            if found.num_rows:
                shown = ", ".join(str(tuple(r.values()) if len(pk) > 1 else r[pk[0]]) for r in found.to_pylist())
                raise PrimaryKeyError(f"append to {name}: key(s) exist already (e.g. {shown}); use upsert")
            return self._apply_keyed(name, ds, keyed.KeyedEdit(rows=table), f"append {name}")
        self._ops.append(f"append {name}")
        self._written(name, ds.version, ds)  # Lance writes move the dataset object to the new version

    def upsert(self, name: str, data: Any) -> None:
        """Insert new keys and update existing rows whose values differ."""
        self._require_open()
        ds, table, pk = self._incoming(name, data, "upsert into")
        edit = keyed.plan_upsert(ds, table, pk) if table.num_rows else None
        if edit is not None:
            return self._apply_keyed(name, ds, edit, f"upsert {name}")
        if table.num_rows:
            keyed.upsert_by_join(ds, table, pk)
        self._ops.append(f"upsert {name}")
        self._written(name, ds.version, ds)

    def update(self, name: str, data: Any, write: str = "auto") -> None:
        """Change some columns of existing rows: ``data`` holds the key columns and the columns to
        change; the other columns keep their values. Every key must exist. ``write="auto"``: per
        fragment, the changed columns are written as a new column file, or the touched rows are
        rewritten whole, whichever writes less (:mod:`trimerge.lineage.tables.columnwrites`);
        ``"columns"`` / ``"rows"`` force one way."""
        from trimerge.lineage.tables import columnwrites

        self._require_open()
        tv = self._table(name)
        table, plan = columnwrites.prepare_update(self.repo.table_store.open_version(tv), data, tv.primary_key,
                                                  name, write)
        if plan is None:  # no rows: nothing to write, still one operation
            self.upsert(name, table)
            return
        pk = list(tv.primary_key)
        if plan.by_fragment:
            self.write_table(name, f"update {name}", lambda ds: columnwrites.write_columns(ds, table, plan, pk))
        if len(plan.row_positions):
            ids = pa.array(plan.row_ids[plan.row_positions], pa.uint64())
            changes = table.take(pa.array(plan.row_positions, pa.int64()))
            rows = columnwrites.rows_with_changes(self.dataset(name), ids, changes)
            self.replace_located(name, plan.addresses[plan.row_positions], rows, f"update {name}")

    def overwrite(self, name: str, data: Any) -> None:
        """Replace a table's rows (the schema may change; the primary key stays)."""
        self._require_open()
        tv = self._table(name)
        table = tbl.to_arrow(data)
        schema = tbl.schema_with_primary_key(tbl.strip_field_metadata(table.schema), tv.primary_key)
        tbl.check_primary_key(table, tv.primary_key, f"overwrite {name}")
        ds = self._writable(name)
        import lance

        out = lance.write_dataset(table.cast(schema), ds, schema=schema, mode="overwrite",
                                  storage_options=self.repo.table_store.options)
        self._ops.append(f"overwrite {name}")
        self._written(name, out.version if out is not None else self._latest_version(name), row_level=False)

    def delete(self, name: str, where: str) -> None:
        """Delete the rows matching ``where``; one naming whole keys costs what :meth:`delete_keys` does."""
        self._require_open()
        check_filter(where, f"delete from {name}: the 'where' predicate")
        snapshot = self.repo.table_store.open_version(tv := self._table(name))
        where = prepare_filter(snapshot, where, f"delete from {name}")  # text compared with dates typed
        ds = self._writable(name)
        from trimerge.lineage.tables.keyfilter import pinned_keys  # sqlglot: loaded by deletes only

        keys = pinned_keys(where, snapshot.schema, tv.primary_key)
        edit = keyed.plan_delete(ds, keys, tv.primary_key) if keys is not None else None
        if edit is not None:  # `id = 7`, `id IN (...)`: looked up through the key index
            return self._apply_keyed(name, ds, edit, f"delete {name}")
        try:
            ds.delete(where)
        except (OSError, ValueError) as exc:
            limit = machine_failure(exc)  # Lance's memory pool or the disk, not the predicate
            if limit is not None:
                raise limit from exc
            raise InvalidOperationError(f"delete from {name}: bad predicate {where!r}: {str(exc).splitlines()[0]}") from None
        self._ops.append(f"delete {name}")
        self._written(name, ds.version, ds)

    def delete_keys(self, name: str, keys: Any) -> None:
        """Delete the rows whose primary key appears in ``keys`` (a table of the key columns)."""
        self._require_open()
        tv = self._table(name)
        pk = list(tv.primary_key)
        table = tbl.distinct_keys(tbl.to_arrow(keys), self.repo.table_store.open_version(tv).schema, pk,
                                  f"delete keys from {name}")
        ds = self._writable(name)
        edit = keyed.plan_delete(ds, table, pk) if table.num_rows else None
        if edit is not None:
            return self._apply_keyed(name, ds, edit, f"delete {name}")
        if table.num_rows:
            ds.merge_insert(pk).when_matched_delete().execute(table)
        self._ops.append(f"delete {name}")
        self._written(name, ds.version, ds)

    def drop_table(self, name: str) -> None:
        """Remove the table from the branch."""
        self._require_open()
        self._table(name)
        del self._tables[name]
        self._ops.append(f"drop {name}")

    def _schema_change(self) -> None:
        if self._schema_lock is None:
            self._schema_lock = self.repo.lock_branch(SCHEMA_LOCK_BRANCH, f"schema change {self.ulid}",
                                                      what="another schema change")

    def _schema_changed(self) -> None:
        """A schema change was written (the lock is kept until the commit is published)."""

    def add_columns(self, name: str, fields: Any) -> None:
        """Add nullable columns. ``fields``: pyarrow fields (every row gets nulls; metadata only),
        or a table (pyarrow, polars, pandas) of key columns + new columns whose values fill the
        rows of those keys — only the new columns are written (other rows get nulls). Every key
        of such a table must be stored, once."""
        from trimerge.lineage.tables import columnwrites

        self._require_open()
        tv = self._table(name)
        fields, data, plan = columnwrites.prepare_fill(self.repo.table_store.open_version(tv), fields,
                                                       tv.primary_key, name)
        self._schema_change()
        # Row-level for the delta plan: a new name is null in every row no later write touched, and
        # an added column counts as changed only where it is not null. (A name dropped earlier
        # cannot lie inside the chain: drops end it.) Filled values are a column write, which
        # refreshes the row versions of the rows it fills.
        self.write_table(name, f"add columns {name}", lambda ds: ds.add_columns(fields))
        if plan is not None and plan.by_fragment:
            pk = list(tv.primary_key)
            self.write_table(name, f"fill columns {name}", lambda ds: columnwrites.write_columns(ds, data, plan, pk))
        self._schema_changed()

    def drop_columns(self, name: str, columns: Sequence[str]) -> None:
        """Drop columns that are not part of the primary key."""
        self._require_open()
        tv = self._table(name)
        columns = tbl.checked_dropped_columns(self.repo.table_store.open_version(tv).schema, columns, tv.primary_key, name)
        self._schema_change()
        self.write_table(name, f"drop columns {name}", lambda ds: ds.drop_columns(columns), row_level=False)
        self._schema_changed()
        derived.declare(self, name, derived.without_columns(derived.as_dict(self._tables[name].derived), columns))

    def set_derived(self, table: str, column: str, inputs: Sequence[str] | None = None) -> None:
        """Declare ``column`` of ``table`` computed from ``inputs`` (None or []: no longer derived).
        Versioned table state, merged three-way; see :mod:`trimerge.lineage.gates.derived`."""
        self._require_open()
        tv = self._table(table)
        derived.declare(self, table, derived.checked(table, self.dataset(table).schema.names, tv.primary_key,
                                                     derived.as_dict(tv.derived), column, inputs))

    def set_derived_declarations(self, table: str, declarations: Mapping[str, Sequence[str]]) -> None:
        """Make ``declarations`` (column -> inputs) the table's derived columns (used by merges)."""
        derived.declare(self, table, declarations)

    def alter_column(self, name: str, column: str, data_type: pa.DataType) -> None:
        """Widen a column's type; narrowing or unrelated changes are refused."""
        self._require_open()
        if not tbl.checked_widening(self.repo.table_store.open_version(self._table(name)).schema, column, data_type, name):
            return
        self._schema_change()
        indices.around_column_rewrite(self, name, column, f"alter {name}.{column}",
                                      lambda ds: ds.alter_columns({"path": column, "data_type": data_type}))
        self._schema_changed()

    # -- the narrow interface of index and upkeep operations (trimerge.lineage.tables.indices.TableWriter)
    def dataset(self, table: str) -> "lance.LanceDataset":
        """``table`` as this transaction has it so far (read-only use)."""
        return self.repo.table_store.open_version(self._table(table))

    def table_version(self, table: str) -> TableVersion:
        return self._table(table)

    def set_index_params(self, table: str, params: tuple[tuple[str, str], ...]) -> None:
        self._tables[table] = replace(self._table(table), index_params=params)

    def foreign_fragments(self, table: str) -> list[int]:
        return self.repo.table_store.foreign_fragment_ids(self.dataset(table))

    def write_table(self, name: str, op: str, change: Callable[["lance.LanceDataset"], Any], *,
                    row_level: bool = True) -> None:
        """Apply ``change`` to this branch's writable head of ``name`` (forked on the first write)
        and record the version it leaves; ``row_level`` as in :meth:`_written`."""
        self._require_open()
        ds = self._writable(name)
        before = ds.version
        change(ds)
        version = self._latest_version(name)
        if version != before:  # e.g. a compaction that found nothing to do writes no version
            self._ops.append(op)
            self._written(name, version, row_level=row_level)

    def set_table(self, name: str, tv: TableVersion) -> None:
        """Point ``name`` at an existing table version without writing (used by merges)."""
        self._require_open()
        validate_table_name(name)
        self._tables[name] = tv
        self._ops.append(f"set {name}")

    def add_parent(self, commit_id: str) -> None:
        """Make the published commit a merge commit with this extra parent."""
        self._extra_parents.append(commit_id)
        self.refer(commit_id)
        self._ops.append(f"parent {commit_id[:10]}")

    def refer(self, commit_id: str) -> None:
        """Declare that this write reuses data of ``commit_id`` (a commit the branch may not reach,
        e.g. a cherry-picked one): gc keeps it while the write is in flight, and the publish is
        refused if gc has condemned it."""
        self._require_open()
        if commit_id not in self._refers:
            self._refers.append(commit_id)
            if self._touched:
                self._save_intent()

    # -- end
    def publish(self) -> Commit | None:
        """Publish the commit (nothing to publish: no commit). Called on a clean ``with`` exit."""
        self._require_open()
        repo = self.repo
        try:
            if not self._ops and not self.keep_empty:
                self.abort()
                return None
            if not self.scratch:  # the repository's upkeep of every table written (compaction, indices)
                maintenance.upkeep(self, [n for n in self._heads if n in self._tables],
                                   maintenance.Policy.from_settings(self.repo.settings.get))
            commit = repo.commits.build(
                parents=[self._base.id, *self._extra_parents], actor=self.actor,
                message=self.message or "; ".join(self._ops), metadata=self.metadata,
                branch=self.branch_name, tables=self._tables, ulid=self.ulid, created_at=now(),
            )
            # The planned commit in the intent and the commit object: both before the branch moves.
            repo.docs.together(lambda: self._save_intent(commit), lambda: repo.commits.put(commit))
            crashpoint("intent_planned")
            repo.reclaimed.check(self._refers)  # after the intent names them: see trimerge.lineage.safety.gc
            check_request_merge(self)  # a merge of a request, into a branch requiring reviews (protection.py)
            crashpoint("before_publish")
            publish(repo.commits, repo.refs, self._branch, commit, stored=True)
            crashpoint("after_publish")
            self.commit = commit
            repo.docs.together(lambda: repo.docs.delete(intent_key(self.ulid)), self._release)
            for name, ds in self._heads.items():
                if ds is not None and name in commit.tables:
                    repo.table_store.remember_head(commit.tables[name], ds)
            return commit
        except BaseException:
            if self.commit is None:
                self.abort()
            raise
        finally:
            self._release()

    def abort(self) -> None:
        """Undo every physical write of this transaction and release the branch."""
        if self._lock is None or not self._lock.held:
            return
        repo = self.repo
        untouched = False
        try:
            undone = repo.recovery.undo_writes(self._touched.values(), self._base)
            if self._intent_version is not None:
                repo.docs.delete(intent_key(self.ulid))
            untouched = not undone  # the write failed before its first change: leave no trace at all
        finally:
            self._release(untouched=untouched)

    def _release(self, untouched: bool = False) -> None:
        """Release the leases; ``untouched`` (nothing was written) puts them back byte for byte."""
        for lock in (self._lock, self._schema_lock):
            if lock is not None:
                lock.release(untouched=untouched)


guard_class(Transaction, extra=("__enter__", "__exit__"))  # the API's edge (lineage/safety/boundary.py)
