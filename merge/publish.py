"""Applying table plans: to dest in one transaction (the merge commit), or to a scratch
transaction that is never published (a virtual merge base)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import polars as pl
import pyarrow as pa

from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import ConcurrentWriteError
from trimerge.lineage.repository import Repository
from trimerge.lineage.storage.memory import release_freed_memory
from trimerge.merge.edits import TablePlan, conform_rows
from trimerge.merge.indices import definitions, index_edits, reconcile

UPSERT_ROWS = 1 << 20  # rows per key-joined write when row ids cannot be used


def release_memory() -> None:
    """Hand back to the system what a merge's phases freed: the C heap Lance reads into and
    pyarrow's own pool (mimalloc keeps freed pages for reuse), so the next phase's peak does not
    sit on top of the last one's (a 400k-row merge of a 1M-row table: ~550 MB peak without,
    ~480 MB with)."""
    release_freed_memory()
    pa.default_memory_pool().release_unused()


def apply_plans(repo: Repository, tx: Any, plans: Mapping[str, TablePlan]) -> None:
    """Write every plan through ``tx`` (a :class:`~trimerge.lineage.transaction.Transaction`)."""
    for name, plan in sorted(plans.items()):
        if plan.drop:
            tx.drop_table(name)
        elif plan.set_to is not None:
            tx.set_table(name, plan.set_to)
        if plan.writes:
            _apply_writes(repo, tx, name, plan)
        if plan.indices is not None and not plan.drop and not tx.scratch:  # a virtual base needs no index
            reconcile(tx, name, plan.indices)
        if plan.derived is not None and not plan.drop:
            tx.set_derived_declarations(name, plan.derived)


def changes_anything(repo: Repository, plans: Mapping[str, TablePlan], ours: Commit,
                     checks: Mapping[str, tuple[tuple[str, str], ...]]) -> bool:
    """Whether applying ``plans`` and the merged check definitions ``checks`` to ``ours`` changes
    anything — what :func:`publish` finds once it has written them, known without writing, so a
    dry run answers what the real run does."""
    for name, plan in plans.items():
        current = ours.tables.get(name)
        if plan.drop or plan.set_to is not None or plan.writes or plan.derived is not None:
            return True
        if plan.indices is not None and current is not None:
            have = definitions(repo.open_table_version, current)
            if any(index_edits(have, set(repo.open_table_version(current).schema.names), plan.indices)):
                return True
    return any(name in ours.tables and ours.tables[name].checks != record for name, record in checks.items())


def _apply_writes(repo: Repository, tx: Any, name: str, plan: TablePlan) -> None:
    if plan.drop_columns:
        tx.drop_columns(name, plan.drop_columns)
    for column, dtype in plan.widen:
        tx.alter_column(name, column, dtype)
    if plan.add_columns:
        tx.add_columns(name, [f.with_nullable(True) for f in plan.add_columns])
    if plan.restore_columns:
        _restore_columns(repo, tx, name, plan)
    if plan.executed is not None:
        plan.executed.write(tx, name)
        return
    for spool in plan.column_updates.values():  # one update per set of changed columns
        parts = list(spool.tables())
        tx.update(name, pa.concat_tables(parts) if len(parts) > 1 else parts[0])  # columns or rows, by cost
        spool.close()
    schema = tx.schema(name)
    if plan.located is not None:  # rows found where they are: replaced with no lookup
        parts = [conform_rows(part, schema).cast(schema) for part in plan.upserts.tables()]
        tx.replace_located(name, plan.located, pa.concat_tables(parts) if parts else schema.empty_table(),
                           f"merge onto {name}")
        return

    def conformed() -> Iterator[pa.Table]:
        for part in plan.upserts.tables():
            yield conform_rows(part, schema).cast(schema)

    if plan.ids_complete and plan.dest_row_keys:
        key_schema = pa.schema([schema.field(c) for c in plan.dest_row_keys[0].column_names])
        keys = pa.concat_tables([k.cast(key_schema) for k in plan.dest_row_keys])
        ids = pa.chunked_array(plan.dest_row_ids, pa.uint64())  # no copy: replace_rows reads it in slices
        rows = pa.RecordBatchReader.from_batches(schema, (b for t in conformed() for b in t.to_batches()))
        if tx.replace_rows(name, ids, keys, rows):
            return
    if plan.deletes:
        tx.delete_keys(name, pa.concat_tables(plan.deletes, promote_options="permissive"))
    for part in _batched(conformed(), UPSERT_ROWS):
        tx.upsert(name, part)


def _batched(tables: Iterator[pa.Table], max_rows: int) -> Iterator[pa.Table]:
    """Tables concatenated up to about ``max_rows`` rows each (one key-joined write per group)."""
    group: list[pa.Table] = []
    size = 0
    for t in tables:
        group.append(t)
        size += t.num_rows
        if size >= max_rows:
            yield pa.concat_tables(group)
            group, size = [], 0
    if group:
        yield pa.concat_tables(group)


def _restore_columns(repo: Repository, tx: Any, name: str, plan: TablePlan) -> None:
    """Fill columns dest had dropped with the source's values for every row (a rare, whole-table
    write: a drop/modify conflict resolved in favour of the source)."""
    key = list(plan.restore_from.primary_key)
    source = pl.from_arrow(repo.open_table_version(plan.restore_from).to_table(columns=key + plan.restore_columns))
    current = pl.from_arrow(tx.read(name)).drop(plan.restore_columns)
    schema = tx.schema(name)
    filled = current.join(source, on=key, how="left").select(schema.names).to_arrow()
    tx.overwrite(name, conform_rows(filled, schema).cast(schema))
    plan.ids_complete = False  # every row was rewritten: row ids changed


def publish(repo: Repository, plans: Mapping[str, TablePlan], dest: str, dest_tip: Commit,
            extra_parents: Sequence[str], refers: Sequence[str], actor: str | None, message: str,
            metadata: Mapping[str, str] | None, gate: Callable[[Any], None] | None = None,
            keep_empty: bool = False) -> Commit | None:
    """One commit on ``dest`` applying ``plans`` (None: nothing to publish, unless ``keep_empty``).
    Refused with a retryable error if ``dest`` moved since ``dest_tip`` was read. ``gate(tx)`` runs
    on the built result before it publishes (the merge's data checks, :mod:`trimerge.merge.gates`):
    raising aborts."""
    tx = repo.transaction(dest, actor=actor, message=message, metadata=metadata)
    tx.merging = True  # a merge may write a protected branch (lineage/history/protection.py)
    tx.begin()
    try:
        if tx.base.id != dest_tip.id:
            raise ConcurrentWriteError(f"branch {dest!r} moved while merging; refresh and retry")
        for commit_id in refers:
            tx.refer(commit_id)
        release_memory()  # what the diffs and the fold freed, before Lance's writes take theirs
        apply_plans(repo, tx, plans)
        for p in extra_parents:
            tx.add_parent(p)
        if gate is not None:
            gate(tx)
        tx.keep_empty = keep_empty
        if not extra_parents and not tx.has_changes and not keep_empty:
            tx.abort()
            return None
        return tx.publish()
    except BaseException:
        tx.abort()
        raise
