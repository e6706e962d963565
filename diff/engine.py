"""Snapshot diff of every table between two refs, at a cost that follows the change.

For each table the engine first finds *candidate rows* — rows that may differ — from Lance
metadata alone, then joins the candidates of both sides by primary key and compares values
column by column (metadata over-reports: no-op rewrites, moved rows; values decide).

Candidate finders, cheapest first:

* ``delta``: both versions lie on one Lance lineage (same Lance branch, or one branch forked
  from the other exactly at the other version): Lance's row-version metadata (``ds.delta()``,
  stable row ids) names inserted, updated and deleted rows; before-images come from ``_take_rows``.
* ``fragments``: same dataset, any two versions (e.g. across branches after a merge): fragments
  whose data files and deletion file are identical (paths resolved through base paths, since
  fragment ids collide across branches) are skipped; fragments sharing data files but not their
  deletion vector contribute only the rows whose deletion state differs; the rest is read.
* ``full``: unrelated datasets (a table created independently on two branches): both read.

Why skipping is exact: a skipped row is the same physical live row on both sides, and since a
key is unique within each snapshot, that key appears nowhere else on either side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence

import lance
import polars as pl
import pyarrow as pa

from trimerge.diff.equality import names_where, same_values
from trimerge.diff.spill import CandidateBuffer, ChangedRows
from trimerge.diff.spill import memory_budget as memory_budget_bytes
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import InvalidOperationError, RefSyntaxError, TableNotFoundError
from trimerge.lineage.repository import Repository
from trimerge.lineage.tables import plain_type

ROW_META_COLUMNS = ("_rowid", "_rowaddr", "_row_created_at_version", "_row_last_updated_at_version")
ROWID = "_rowid"
BEFORE_ROWID, AFTER_ROWID = "_before_rowid", "_after_rowid"
Status = Literal["added", "dropped", "modified", "unchanged"]
Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class SchemaChange:
    """One column-level schema difference."""

    kind: Literal["added", "dropped", "type_changed", "nullability_changed", "primary_key_changed"]
    column: str
    before: str | None = None
    after: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "column": self.column, "before": self.before, "after": self.after}


@dataclass
class DiffCounts:
    inserted: int = 0
    deleted: int = 0
    updated: int = 0
    cells_changed: int = 0

    @property
    def rows_changed(self) -> int:
        return self.inserted + self.deleted + self.updated

    def to_json(self) -> dict[str, int]:
        return {"inserted": self.inserted, "deleted": self.deleted, "updated": self.updated,
                "cells_changed": self.cells_changed}


@dataclass
class DiffPlan:
    """What the metadata said before any row was read."""

    method: Literal["none", "delta", "fragments", "full", "added", "dropped", "spark"]
    fragments_skipped: int = 0
    fragments_deletion_only: int = 0
    fragments_read: int = 0
    rows_planned: int = 0  # upper bound of candidate rows (before + after)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def schema_changes(before: pa.Schema | None, after: pa.Schema | None,
                   key_before: Sequence[str] = (), key_after: Sequence[str] = ()) -> list[SchemaChange]:
    """Column-level differences between two schemas (field metadata ignored)."""
    if before is None or after is None:
        return []
    out: list[SchemaChange] = []
    for f in after:
        if f.name not in before.names:
            out.append(SchemaChange("added", f.name, None, str(f.type)))
        else:
            g = before.field(f.name)
            if g.type != f.type:  # string -> large_string too: merges and reverts must keep a widening
                out.append(SchemaChange("type_changed", f.name, str(g.type), str(f.type)))
            elif g.nullable != f.nullable and f.name not in key_after:
                out.append(SchemaChange("nullability_changed", f.name, str(g.nullable), str(f.nullable)))
    for g in before:
        if g.name not in after.names:
            out.append(SchemaChange("dropped", g.name, str(g.type), None))
    if tuple(key_before) != tuple(key_after):
        out.append(SchemaChange("primary_key_changed", ",".join(key_after), ",".join(key_before), ",".join(key_after)))
    return out


class Snapshot:
    """One table at one commit, opened lazily."""

    def __init__(self, repo: Repository, tv: TableVersion | None):
        self.repo = repo
        self.tv = tv
        self._ds: lance.LanceDataset | None = None

    @property
    def ds(self) -> lance.LanceDataset:
        if self._ds is None:
            self._ds = self.repo.open_table_version(self.tv)
        return self._ds

    @property
    def schema(self) -> pa.Schema | None:
        return self.ds.schema if self.tv else None

    @property
    def root(self) -> str:
        """Folder of this Lance branch (where its own files live)."""
        return self.repo.table_store.branch_folder(self.tv)


def _lineage(repo: Repository, tv: TableVersion) -> list[tuple[str, int]]:
    """(Lance branch, version) from ``tv`` up through the branches it was forked from to ``main``."""
    chain = [(tv.lance_branch, tv.version)]
    forks = repo.table_store.forks(tv.dataset) if tv.lance_branch != "main" else {}
    while chain[-1][0] != "main" and len(chain) <= len(forks):
        info = forks.get(chain[-1][0])
        if not info:
            return chain
        chain.append((info.get("parent_branch") or "main", int(info["parent_version"])))
    return chain


def fragment_files(snap: Snapshot) -> dict[tuple[str, ...], tuple[Any, str | None]]:
    """Map each fragment's resolved data-file paths to (fragment, resolved deletion-file path)."""
    bases = {k: v.path for k, v in snap.ds.base_paths().items()}
    out = {}
    for frag in snap.ds.get_fragments():
        meta = frag.metadata  # attributes, not to_json(): that serializes every inline row id
        if meta.overlays:
            key = (f"overlay:{snap.root}:{frag.fragment_id}",)  # never matches: read in full
        else:
            key = tuple(sorted(f"{bases[d.base_id] if d.base_id is not None else snap.root}/data/{d.path}"
                               for d in meta.files))
        dfile = meta.deletion_file
        dpath = None
        if dfile:
            base = bases[dfile.base_id] if dfile.base_id is not None else snap.root
            dpath = f"{base}/{frag.deletion_file()}"
        out[key] = (frag, dpath)
    return out


def stable_row_ids(snap: Snapshot, frag: Any) -> pa.Array:
    """The stable row ids of one fragment of a snapshot."""
    t = snap.ds.scanner(columns=[], with_row_id=True, fragments=[frag]).to_table()
    return t.column("_rowid").combine_chunks()


def _with_ids(table: pa.Table, ids: pa.Array) -> pa.Table:
    return table.append_column(ROWID, ids.cast(pa.uint64()))


def _empty_with_ids(schema: pa.Schema) -> pa.Table:
    return _with_ids(schema.empty_table(), pa.array([], pa.uint64()))


def _conform(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Batches read with ``_rowid`` (and maybe other row metadata) as a candidate table: the
    columns of ``schema`` in its order and types."""
    return pa.Table.from_batches(batches).select(schema.names).cast(schema)


SCAN_BATCH_ROWS = 131072


def _scan(snap: Snapshot, **kwargs: Any) -> Iterator[pa.Table]:
    """Rows of ``snap`` (optionally of some ``fragments``) with their stable row id as the last
    column, in slices of about ``SCAN_BATCH_ROWS`` rows so a large read never sits in memory whole."""
    schema = _empty_with_ids(snap.ds.schema).schema
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in snap.ds.scanner(with_row_id=True, batch_size=16384, **kwargs).to_batches():
        pending.append(batch)
        size += batch.num_rows
        if size >= SCAN_BATCH_ROWS:
            yield _conform(pending, schema)
            pending, size = [], 0
    if pending:
        yield _conform(pending, schema)


def _take(snap: Snapshot, row_ids: pa.Array, columns: list[str]) -> pa.Table:
    """Rows by stable row id (in that order), with the ids as the last column."""
    if len(row_ids) == 0:
        return _empty_with_ids(snap.ds.schema.empty_table().select(columns).schema)
    rows = snap.ds._take_rows(row_ids, columns=columns)
    if rows.num_rows != len(row_ids):
        raise RuntimeError(f"{snap.tv.dataset}: {len(row_ids) - rows.num_rows} row id(s) not found")
    return _with_ids(rows, row_ids)


TAKE_CHUNK_ROWS = 1024
DENSE_TAKE_FRACTION = 0.2  # above this share of a table, one scan beats reading rows one by one


def _scan_ids(snap: Snapshot, sorted_ids: pa.Array) -> Iterator[pa.Table]:
    """The rows with these (sorted) stable row ids, by one filtered scan of the table."""
    import numpy as np

    wanted = sorted_ids.to_numpy()
    found = 0
    for t in _scan(snap):
        rid = t.column(ROWID).to_numpy()
        pos = np.minimum(np.searchsorted(wanted, rid), len(wanted) - 1)
        hit = wanted[pos] == rid
        found += int(hit.sum())
        if hit.any():
            yield t.filter(pa.array(hit))
    if found != len(wanted):
        raise RuntimeError(f"{snap.tv.dataset}: {len(wanted) - found} row id(s) not found")


def _take_all(requests: Sequence[tuple[Snapshot, pa.Array]]) -> Iterator[tuple[int, pa.Table]]:
    """Every snapshot's rows by stable row id (all columns) as ``(request index, rows)`` slices.

    Scattered reads are CPU-bound decoding of one compressed chunk per row and column; a single
    ``_take_rows`` call keeps about one core busy, so ids are sorted (neighbours share chunks) and
    split into slices that run on a small thread pool (pylance releases the GIL)."""
    import pyarrow.compute as pc
    from concurrent.futures import ThreadPoolExecutor

    jobs: list[tuple[int, Snapshot, pa.Array]] = []
    for i, (snap, ids) in enumerate(requests):
        ids = ids.take(pc.sort_indices(ids)) if len(ids) > 1 else ids
        if len(ids) >= DENSE_TAKE_FRACTION * snap.ds.count_rows():
            yield from ((i, t) for t in _scan_ids(snap, ids))
            continue
        for start in range(0, len(ids), TAKE_CHUNK_ROWS):
            jobs.append((i, snap, ids.slice(start, TAKE_CHUNK_ROWS)))
    if not jobs:
        return
    with ThreadPoolExecutor(max(1, min(4, len(jobs)))) as pool:
        for (i, _, _), rows in zip(jobs, pool.map(lambda job: _take(job[1], job[2], job[1].ds.schema.names), jobs)):
            yield i, rows


def set_minus(a: pa.Array, b: pa.Array) -> pa.Array:
    """Row ids in ``a`` and not in ``b``, sorted and unique. Sorted numpy sets: Arrow's hash-based
    ``is_in`` / ``unique`` took gigabytes at tens of millions of ids."""
    import numpy as np

    def ids(x: pa.Array) -> "np.ndarray":
        values = x.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
        if len(values) > 1 and not (values[1:] > values[:-1]).all():  # a fragment's ids usually are sorted
            values = np.sort(values)  # sort, then drop repeats: numpy's unique hashes, many times slower
            values = values[np.r_[True, values[1:] != values[:-1]]]
        return values

    left, right = ids(a), ids(b)
    if len(right):
        pos = np.minimum(np.searchsorted(right, left), len(right) - 1)
        left = left[right[pos] != left]
    return pa.array(left, pa.uint64())


class TableDiff:
    """The difference of one table between two snapshots."""

    def __init__(self, name: str, before: Snapshot, after: Snapshot, memory_budget: int | None = None):
        self.name = name
        self.before_snapshot = before
        self.after_snapshot = after
        self._memory_budget = memory_budget_bytes(memory_budget)
        self._changed: ChangedRows | None = None
        self._rows: pa.Table | None = None
        self._counts: DiffCounts | None = None
        if before.tv is None and after.tv is None:
            raise TableNotFoundError(f"no table {name!r} on either side")
        if before.tv is None:
            self.storage_status: Status = "added"
        elif after.tv is None:
            self.storage_status = "dropped"
        elif before.tv.location == after.tv.location:
            self.storage_status = "unchanged"
        else:
            self.storage_status = "modified"
        self.plan = DiffPlan(method="none" if self.storage_status == "unchanged" else self.storage_status)  # refined by _collect
        self.engine: Literal["local", "spark"] = "local"
        self._spark: Any = None

    def use_spark(self, spark: Any) -> None:
        """Compute this table's rows on Spark (same schema and rows as the local engine)."""
        self.engine, self._spark = "spark", spark

    def to_spark(self, spark: Any = None) -> Any:
        """The changed rows as a Spark DataFrame. On the Spark engine nothing is collected on the driver."""
        from trimerge.diff import spark as sp

        session = spark or self._spark or sp.get_spark()
        if self.engine == "spark" and self.storage_status != "unchanged":
            return sp.spark_frame(self, session)
        return session.createDataFrame(self.rows())

    # -- public
    @property
    def primary_key(self) -> tuple[str, ...]:
        return (self.after_snapshot.tv or self.before_snapshot.tv).primary_key

    @property
    def before_version(self) -> TableVersion | None:
        return self.before_snapshot.tv

    @property
    def after_version(self) -> TableVersion | None:
        return self.after_snapshot.tv

    @property
    def schema_changes(self) -> list[SchemaChange]:
        if self.storage_status != "modified":
            return []
        return schema_changes(self.before_snapshot.schema, self.after_snapshot.schema, self.before_snapshot.tv.primary_key,
                              self.after_snapshot.tv.primary_key)

    @property
    def counts(self) -> DiffCounts:
        if self._counts is None:
            import pyarrow.compute as pc

            c = DiffCounts()
            for batch in self._changed_rows().batches():  # one pass, streamed when spilled
                per_change = {v["values"]: v["counts"] for v in pc.value_counts(batch.column("change")).to_pylist()}
                c.inserted += per_change.get("insert", 0)
                c.deleted += per_change.get("delete", 0)
                c.updated += per_change.get("update", 0)
                c.cells_changed += int(pc.sum(pc.list_value_length(batch.column("changed_columns"))).as_py() or 0)
            self._counts = c
        return self._counts

    @property
    def status(self) -> Status:
        """``added``, ``dropped``, ``modified`` or ``unchanged``. A table whose Lance version moved
        but whose rows and schema are equal (a no-op rewrite) is ``unchanged``: telling that apart
        compares the candidate rows. :attr:`storage_status` is the verdict of versions alone."""
        if self.storage_status == "modified" and not self.changed:
            return "unchanged"
        return self.storage_status

    @property
    def changed(self) -> bool:
        """True if rows or the schema differ (a modified table can turn out to have no real change)."""
        if self.storage_status in ("added", "dropped"):
            return True
        if self.storage_status == "unchanged":
            return False
        return bool(self.schema_changes) or self.counts.rows_changed > 0

    def rows(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Changed rows: key columns, ``change`` (insert/delete/update), ``changed_columns``,
        and ``before`` / ``after`` structs of the non-key values (null for insert / delete)."""
        rows = self.rows_with_row_ids().drop_columns([BEFORE_ROWID, AFTER_ROWID])
        return rows if columns is None else _project(rows, columns)

    def rows_with_row_ids(self) -> pa.Table:
        """:meth:`rows` plus each side's stable row id of the row (``_before_rowid``,
        ``_after_rowid``; null where the row is absent) — what a merge needs to rewrite rows in place."""
        if self._rows is None:
            self._rows = self._changed_rows().materialize(self.primary_key)
        return self._rows

    def head(self, n: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The first ``n`` changed rows by key (as :meth:`rows`), without materializing the rest: a
        spilled diff streams in bucket order, so the smallest keys are kept while streaming."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidOperationError(f"head(n) takes a non-negative whole number, not {n!r}")
        if not self.spilled:
            return self.rows(columns).slice(0, n)
        key = [(k, "ascending") for k in self.primary_key]
        best = None
        for batch in self.iter_batches(columns=columns):
            t = pa.Table.from_batches([batch])
            best = (t if best is None else pa.concat_tables([best, t])).sort_by(key).slice(0, n)
        return best if best is not None else self.rows(columns).slice(0, 0)

    def iter_batches(self, max_rows: int = 65536, columns: Sequence[str] | None = None,
                     row_ids: bool = False) -> Iterator[pa.RecordBatch]:
        """The rows of :meth:`rows` in batches, in bounded memory: a diff larger than the memory
        budget is classified per key-hash bucket on disk and streamed back from there (then the
        order is by key within each bucket rather than globally). ``row_ids``: with the columns of
        :meth:`rows_with_row_ids`."""
        if self._rows is not None:
            source: Iterator[pa.RecordBatch] = iter(self._rows.to_batches(max_chunksize=max_rows))
        else:
            source = self._changed_rows().batches(max_rows)
        for batch in source:
            t = pa.Table.from_batches([batch])
            if not row_ids:
                t = t.drop_columns([BEFORE_ROWID, AFTER_ROWID])
            if columns is not None:
                t = _project(t, columns)
            yield from t.to_batches()

    def rows_with_row_ids_schema(self) -> pa.Schema:
        """The schema of :meth:`rows_with_row_ids`, without reading the rows of a spilled diff."""
        return self._changed_rows().schema

    @property
    def spilled(self) -> bool:
        """True if the diff outgrew the memory budget and its rows live in a temporary file."""
        return self._changed_rows().table is None

    def _changed_rows(self) -> ChangedRows:
        if self._changed is None:
            if self.engine == "spark" and self.storage_status != "unchanged":
                from trimerge.diff.spark import spark_rows

                rows = spark_rows(self, self._spark)
                n = rows.num_rows
                self._changed = ChangedRows.in_memory(rows.append_column(
                    BEFORE_ROWID, pa.nulls(n, pa.uint64())).append_column(AFTER_ROWID, pa.nulls(n, pa.uint64())))
                self.plan = DiffPlan("spark")
            else:
                self._changed = self._compute()
        return self._changed

    def summary(self) -> dict[str, Any]:
        counts = self.counts.to_json() if self.storage_status != "unchanged" else DiffCounts().to_json()
        return {"table": self.name, "status": self.status, **counts,
                "schema_changes": [s.to_json() for s in self.schema_changes], "plan": self.plan.to_json()}

    def __repr__(self) -> str:
        return f"TableDiff({self.name!r}, storage_status={self.storage_status!r})"

    # -- candidates
    def compared_columns(self) -> tuple[list[str], list[str], list[str]]:
        """(key, columns on both sides, columns only after) — the columns whose values are compared."""
        key = list(self.primary_key)
        before = [n for n in (self.before_snapshot.schema.names if self.before_snapshot.tv else []) if n not in key]
        after = [n for n in (self.after_snapshot.schema.names if self.after_snapshot.tv else []) if n not in key]
        common = [c for c in after if c in before]
        added = [c for c in after if c not in before]
        return key, common, added

    def _side_schemas(self) -> tuple[pa.Schema, pa.Schema]:
        """Each side's candidate schema (columns + stable row id); a missing side borrows the other's."""
        b, a = self.before_snapshot, self.after_snapshot
        sb = b.ds.schema if b.tv else a.ds.schema
        sa = a.ds.schema if a.tv else b.ds.schema
        return tuple(_empty_with_ids(s).schema for s in (sb, sa))  # type: ignore[return-value]

    def _collect(self, out: CandidateBuffer) -> None:
        """Feed the rows that may have changed into ``out`` (side 0: before, 1: after) and record the plan."""
        b, a = self.before_snapshot, self.after_snapshot
        if self.storage_status == "unchanged":
            return
        if self.storage_status in ("added", "dropped"):
            side, snap = (1, a) if self.storage_status == "added" else (0, b)
            for t in _scan(snap):
                out.add(side, t)
            self.plan = DiffPlan(self.storage_status, fragments_read=len(snap.ds.get_fragments()), rows_planned=out.rows[side])
            return
        if b.tv.dataset != a.tv.dataset:
            for side, snap in ((0, b), (1, a)):
                for t in _scan(snap):
                    out.add(side, t)
            self.plan = DiffPlan("full", fragments_read=len(b.ds.get_fragments()) + len(a.ds.get_fragments()),
                                 rows_planned=sum(out.rows))
            return
        common = self._common_version()
        if common is not None:
            self._delta_candidates(common, out)
        else:
            self._fragment_candidates(out)

    def _common_version(self) -> int | None:
        """The latest version ``p`` both sides descend from along Lance lineage (a branch and the
        branches it was forked from, at their fork points), so both can be described by ``delta``
        from ``p``: the first Lance branch both lineages pass through, at the earlier position."""
        b, a = self.before_snapshot, self.after_snapshot
        lineage_b, lineage_a = _lineage(b.repo, b.tv), _lineage(b.repo, a.tv)
        on_a = dict(lineage_a)
        for branch, version in lineage_b:
            if branch in on_a:
                common = min(version, on_a[branch])
                # pylance reads a delta only from versions in the branch's own tree, which starts at
                # its fork point: deeper lineages fall back to the fragment plan.
                first = max(lin[1][1] if len(lin) > 1 else 0 for lin in (lineage_b, lineage_a))
                return common if common >= first else None
        return None

    @staticmethod
    def _changes_since(snap: Snapshot, version: int) -> tuple[Iterator[pa.Table], Callable[[], pa.Array], pa.Array]:
        """(rows updated or inserted, ids of rows updated — complete once the rows were consumed —,
        ids of rows deleted) on ``snap``'s lineage since ``version``, streamed.

        Updated rows are read by ``delta`` from the new fragments they were written to
        (contiguous), which is far cheaper than fetching them by id."""
        schema = _empty_with_ids(snap.ds.schema).schema
        if snap.tv.version == version:
            return iter(()), lambda: pa.array([], pa.uint64()), pa.array([], pa.uint64())
        # pylance reads delta rows from the object's checked-out version: snap.ds is pinned at its version.
        delta = snap.ds.delta(begin_version=version, end_version=snap.tv.version)
        deleted = delta.get_deleted_row_ids().read_all().column(ROWID).combine_chunks().cast(pa.uint64())
        updated_ids: list[pa.Array] = []

        def rows() -> Iterator[pa.Table]:
            for batch in delta.get_updated_rows():
                t = _conform([batch], schema)
                updated_ids.append(t.column(ROWID).combine_chunks())
                yield t
            for batch in delta.get_inserted_rows():
                yield _conform([batch], schema)

        def ids() -> pa.Array:
            return pa.concat_arrays(updated_ids) if updated_ids else pa.array([], pa.uint64())

        return rows(), ids, deleted

    def _delta_candidates(self, common: int, out: CandidateBuffer) -> None:
        """Rows changed on either side since the common version. Rows older than it share stable
        row ids on both sides, so a row touched on one side only is fetched from the other by id."""
        b, a = self.before_snapshot, self.after_snapshot
        rows_b, ids_b, del_b = self._changes_since(b, common)
        rows_a, ids_a, del_a = self._changes_since(a, common)
        for side, parts in ((0, rows_b), (1, rows_a)):
            for t in parts:
                out.add(side, t)
        upd_b, upd_a = ids_b(), ids_a()
        # A row touched on one side only is fetched from the other: (touched on a) - (touched on b)
        # is read from b and vice versa.
        touched_b, touched_a = pa.concat_arrays([upd_b, del_b]), pa.concat_arrays([upd_a, del_a])
        fetch_b, fetch_a = set_minus(touched_a, touched_b), set_minus(touched_b, touched_a)
        for side, t in _take_all([(b, fetch_b), (a, fetch_a)]):
            out.add(side, t)
        self.plan = DiffPlan("delta", rows_planned=sum(out.rows))

    def _fragment_candidates(self, out: CandidateBuffer) -> None:
        b, a = self.before_snapshot, self.after_snapshot
        fb, fa = fragment_files(b), fragment_files(a)
        plan = DiffPlan("fragments")
        ids_b: list[pa.Array] = []
        ids_a: list[pa.Array] = []
        for files in fb.keys() | fa.keys():
            in_b, in_a = fb.get(files), fa.get(files)
            if in_b and in_a:
                if in_b[1] == in_a[1]:
                    plan.fragments_skipped += 1
                    continue
                plan.fragments_deletion_only += 1
                rb, ra = stable_row_ids(b, in_b[0]), stable_row_ids(a, in_a[0])
                ids_b.append(set_minus(rb, ra))
                ids_a.append(set_minus(ra, rb))
            else:
                plan.fragments_read += 1
                side, snap, frag = (0, b, in_b[0]) if in_b else (1, a, in_a[0])
                for t in _scan(snap, fragments=[frag]):
                    out.add(side, t)
        empty = pa.array([], pa.uint64())
        for side, t in _take_all([(b, pa.concat_arrays(ids_b) if ids_b else empty),
                                  (a, pa.concat_arrays(ids_a) if ids_a else empty)]):
            out.add(side, t)
        plan.rows_planned = sum(out.rows)
        self.plan = plan

    # -- classification
    def _compute(self) -> ChangedRows:
        key, common, added = self.compared_columns()
        schemas = self._side_schemas()
        key_schema = pl.from_arrow(schemas[1].empty_table().select(key)).schema
        buffer = CandidateBuffer(key, key_schema, self._memory_budget)
        try:
            self._collect(buffer)
            columns = [[c for c in s.names if c not in key and c != ROWID] for s in schemas]

            def run(before: pa.Table, after: pa.Table) -> pa.Table:
                return classify(before, after, key, common, added, before_columns=columns[0],
                                after_columns=columns[1])

            if not buffer.spilled:
                return ChangedRows.in_memory(run(*buffer.tables(schemas)))
            return ChangedRows.from_buckets((run(tb, ta) for tb, ta in buffer.bucket_tables(schemas)), self)
        finally:
            buffer.close()


def _project(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Keep only some value columns inside the before/after structs (key columns always stay).
    A table with none of ``columns`` keeps no ``before`` / ``after`` at all."""
    import pyarrow.compute as pc

    out = rows
    for side in ("before", "after"):
        if side not in rows.column_names:
            continue
        col = rows.column(side)
        t = col.type
        keep = [t.field(i).name for i in range(t.num_fields) if t.field(i).name in columns]
        if not keep:
            out = out.drop_columns([side])
            continue
        arrays = [pc.struct_field(col, t.get_field_index(n)) for n in keep]
        struct = pc.make_struct(*arrays, field_names=keep)
        struct = pc.if_else(pc.is_null(col), pa.scalar(None, struct.type), struct)
        out = out.set_column(out.schema.get_field_index(side), side, struct)
    return out


def classify(before: pa.Table, after: pa.Table, key: Sequence[str], common: Sequence[str], added: Sequence[str],
             before_columns: Sequence[str], after_columns: Sequence[str]) -> pa.Table:
    """Join candidate rows by key and compare values null-safely (floats exactly).

    A key on both sides with equal compared values is no change (a moved or rewritten row)."""
    key = list(key)
    id_b = [ROWID] if ROWID in before.column_names else []
    id_a = [ROWID] if ROWID in after.column_names else []
    b = pl.from_arrow(before.select(key + list(before_columns) + id_b))
    a = pl.from_arrow(after.select(key + list(after_columns) + id_a))
    if not id_b:
        b = b.with_columns(pl.lit(None, dtype=pl.UInt64).alias(ROWID))
    if not id_a:
        a = a.with_columns(pl.lit(None, dtype=pl.UInt64).alias(ROWID))
    b = b.rename({ROWID: BEFORE_ROWID})
    a = a.rename({ROWID: AFTER_ROWID})
    assert isinstance(b, pl.DataFrame) and isinstance(a, pl.DataFrame)
    # Key columns may differ in type across a widening; compare in the after side's types.
    for k in key:
        if b.schema[k] != a.schema[k]:
            b = b.with_columns(pl.col(k).cast(a.schema[k]))
    b = b.rename({c: f"b\x00{c}" for c in before_columns}).with_columns(pl.lit(True).alias("\x00in_b"))
    a = a.rename({c: f"a\x00{c}" for c in after_columns}).with_columns(pl.lit(True).alias("\x00in_a"))
    j = b.join(a, on=key, how="full", coalesce=True, nulls_equal=True)
    in_b = pl.col("\x00in_b").fill_null(False)
    in_a = pl.col("\x00in_a").fill_null(False)
    compared = list(common) + list(added)
    differs = []
    for c in common:
        differs.append(~same_values(pl.col(f"b\x00{c}"), pl.col(f"a\x00{c}"), j.schema[f"b\x00{c}"],
                                    j.schema[f"a\x00{c}"]))
    differs += [pl.col(f"a\x00{c}").is_not_null() for c in added]
    both = in_b & in_a
    j = j.with_columns(
        pl.when(both).then(pl.lit("update")).when(in_a).then(pl.lit("insert")).otherwise(pl.lit("delete"))
        .alias("change"),
        *[(both & d).alias(f"\x00ne{i}") for i, d in enumerate(differs)],
    )
    flags = [f"\x00ne{i}" for i in range(len(compared))]
    if flags:
        j = j.filter((pl.col("change") != "update") | pl.any_horizontal(flags))
    else:
        j = j.filter(pl.col("change") != "update")
    j = j.with_columns(names_where(j.select(flags), compared, j.height))

    def side(prefix: str, cols: Sequence[str], present: pl.Expr) -> pl.Expr:
        if not cols:
            return pl.lit(None).alias("_")
        return pl.when(present).then(pl.struct([pl.col(f"{prefix}\x00{c}").alias(c) for c in cols])).otherwise(None)

    out = j.select(
        *[pl.col(k) for k in key],
        pl.col("change"),
        pl.col("changed_columns"),
        side("b", before_columns, in_b).alias("before"),
        side("a", after_columns, in_a).alias("after"),
        pl.col(BEFORE_ROWID).cast(pl.UInt64),
        pl.col(AFTER_ROWID).cast(pl.UInt64),
    ).sort(key)
    table = out.to_arrow()
    schema = pa.schema([f.with_type(plain_type(_large_to_plain(f.type))) for f in table.schema])
    return table.cast(schema)


def _large_to_plain(t: pa.DataType) -> pa.DataType:
    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.list_(_large_to_plain(t.value_type))
    if pa.types.is_list(t):
        return pa.list_(_large_to_plain(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_large_to_plain(f.type)) for f in t])
    return t


@dataclass
class Diff:
    """Differences of every table between two commits (``before`` → ``after``)."""

    repo: Repository
    before: Commit
    after: Commit
    tables: dict[str, TableDiff] = field(default_factory=dict)
    three_dot: bool = False

    def stat(self) -> pa.Table:
        """One row per table: status, inserted, deleted, updated, cells changed, schema changes."""
        rows = []
        for name, td in sorted(self.tables.items()):
            c = td.counts if td.storage_status != "unchanged" else DiffCounts()
            rows.append({"table": name, "status": td.status, "inserted": c.inserted, "deleted": c.deleted,
                         "updated": c.updated, "cells_changed": c.cells_changed,
                         "schema_changes": len(td.schema_changes), "method": td.plan.method})
        schema = pa.schema([("table", pa.string()), ("status", pa.string()), ("inserted", pa.int64()),
                            ("deleted", pa.int64()), ("updated", pa.int64()), ("cells_changed", pa.int64()),
                            ("schema_changes", pa.int64()), ("method", pa.string())])
        return pa.Table.from_pylist(rows, schema=schema)

    def changed_tables(self) -> list[str]:
        return [n for n, td in sorted(self.tables.items()) if td.changed]

    def to_json(self, rows: bool = False) -> dict[str, Any]:
        doc = {"before": self.before.id, "after": self.after.id,
               "tables": {n: td.summary() for n, td in sorted(self.tables.items())}}
        if rows:
            for n, td in self.tables.items():
                doc["tables"][n]["rows"] = td.rows().to_pylist() if td.storage_status != "unchanged" else []
        return doc


def parse_range(spec: str) -> tuple[str, str, bool]:
    """``A...B`` (three-dot: merge base of A and B vs B) or ``A..B`` (A vs B)."""
    if "..." in spec:
        a, b = spec.split("...", 1)
        return a or "main", b or "main", True
    if ".." in spec:
        a, b = spec.split("..", 1)
        return a or "main", b or "main", False
    raise InvalidOperationError(f"not a range: {spec!r} (use A..B or A...B, or pass two refs)")


def diff(a: str, b: str | None = None, *, repo: Repository | None = None, tables: Sequence[str] | None = None,
         engine: Literal["local", "spark", "auto"] = "auto", spark: Any = None,
         spark_threshold: int | None = None, progress: Progress | None = None,
         memory_budget: int | None = None) -> Diff:
    """Compare two refs table by table.

    ``diff("main", "feature")`` compares the tips (two-dot, also ``"main..feature"``);
    ``diff("main...feature")`` compares the merge base of the two with ``feature`` (what a merge
    of feature would bring). ``a``/``b`` may be ``Ref`` objects or addresses ``REF::TABLE``.
    Rows are computed lazily per table (``d.tables[name].rows()``, ``.counts``).

    ``engine="spark"`` runs every changed table on Spark (``spark``: a SparkSession, default: the
    active one or a new local one); ``"auto"`` plans on the driver and uses Spark only for tables
    whose planned candidate rows exceed ``spark_threshold`` (default
    ``trimerge.diff.spark.DEFAULT_SPARK_THRESHOLD``, env ``TRIMERGE_SPARK_THRESHOLD``).

    The local engine holds candidate rows in memory up to ``memory_budget`` bytes (default 512 MiB,
    env ``TRIMERGE_DIFF_MEMORY``); beyond that it partitions them by key hash into temporary files
    (under env ``TRIMERGE_SPILL_DIR``, default the system temp directory) and classifies one bucket
    at a time, so ``TableDiff.iter_batches`` and ``counts`` run in bounded memory."""
    from trimerge.lineage.address import is_address, parse_address
    from trimerge.lineage.repository import Ref

    wanted = set(tables) if tables else None
    if repo is None:
        for r in (a, b):
            if isinstance(r, Ref):
                repo = r.repo
                break
    exprs = []
    if a is None:
        raise RefSyntaxError("diff needs a ref (or a range such as 'main..feature') to compare")
    for r in (a, b):
        if r is None:
            exprs.append(None)
            continue
        r = r.expr if isinstance(r, Ref) else r
        if not isinstance(r, str):
            raise RefSyntaxError(f"a ref must be text or a Ref, not {type(r).__name__}")
        if is_address(r):
            addr = parse_address(r)
            if addr.repository is not None and repo is None:
                repo = Repository.open(addr.repository, read_only=True)
            if addr.table:
                wanted = (wanted or set()) | {addr.table}
            r = addr.ref
        exprs.append(r)
    if repo is None:
        raise InvalidOperationError("diff needs repo=... (or Ref objects / addresses that carry one)")
    a_expr, b_expr = exprs
    three_dot = False
    if b_expr is None:
        a_expr, b_expr, three_dot = parse_range(a_expr)
    after = repo.resolve(b_expr)
    if three_dot:
        base = repo.merge_base(a_expr, b_expr)
        if base is None:
            raise InvalidOperationError(f"{a_expr} and {b_expr} have no common ancestor")
        before = base
    else:
        before = repo.resolve(a_expr)
    result = Diff(repo, before, after, three_dot=three_dot)
    names = sorted(before.tables.keys() | after.tables.keys())
    if wanted is not None:
        missing = wanted - set(names)
        if missing:
            raise TableNotFoundError(f"no table {', '.join(sorted(missing))} on either side")
        names = [n for n in names if n in wanted]
    for name in names:
        result.tables[name] = TableDiff(name, Snapshot(repo, before.tables.get(name)),
                                        Snapshot(repo, after.tables.get(name)), memory_budget=memory_budget)
    if engine not in ("local", "spark", "auto"):
        raise InvalidOperationError(f"unknown engine {engine!r} (use local, spark or auto)")
    if engine != "local":
        from trimerge.diff import spark as sp

        threshold = sp.spark_threshold() if spark_threshold is None else spark_threshold
        for td in result.tables.values():
            if td.storage_status == "unchanged":
                continue
            if engine == "spark" or sp.estimate_rows(td) > threshold:
                spark = spark or sp.get_spark()
                td.use_spark(spark)
    if progress is not None:
        for name, td in result.tables.items():
            progress(name, "start")
            if td.storage_status != "unchanged":
                td.counts
            progress(name, "done")
    return result
