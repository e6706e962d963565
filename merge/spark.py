"""The row merge of one table on Spark: the same fold, run by executors, key bucket by key bucket.

The local merge pairs the two diffs' rows by key-hash bucket and folds each bucket
(:func:`trimerge.merge.plan.paired_rows`, :func:`~trimerge.merge.classify.classify`,
:func:`~trimerge.merge.rows.fold`). On Spark the diffs are Spark frames (:func:`spark_frame`, with
row ids), cogrouped by the same kind of bucket, and each executor runs that very classify and fold
on its buckets — so classification, the resolver's decisions and conflicts are the local merge's by
construction. What an executor's fold produces stays on the executors (persisted to their disks):
the new row images, the dest rows they replace, per-bucket statistics and the conflicts. The driver
collects only statistics, the resolutions that were used and conflicts up to a cap.

Publishing (:meth:`SparkFold.write`, inside the merge's transaction, after schema edits): executors
write the new row images as Lance fragments on the transaction's own Lance branch, find the
replaced rows' addresses and write deletion files, one task per fragment; the driver commits all of
it in one Lance ``Update`` (:meth:`Transaction.commit_fragments`) and publishes through the
transaction like any merge. Executors need trimerge installed (it runs the fold).
"""

from __future__ import annotations

import contextlib
import json
import math
import pickle
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import pyarrow as pa

from trimerge.lineage.tables.fragments import WriteTarget

if TYPE_CHECKING:
    from trimerge.diff.engine import TableDiff
    from trimerge.merge.edits import TablePlan
    from trimerge.merge.resolve import Resolver
    from trimerge.merge.result import Conflict

BUCKET_ROWS = 250_000  # changed rows per key bucket: what one executor call folds at once
RECORDS = "kind string, data binary"
ROW_BATCH = 65536
ROW_ID = "\x01row_id"  # beside the key columns in "replace" records; no column can be named so


# ------------------------------------------------------------------------------------- on executors
def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _records(kinds: list[str], data: list[bytes]) -> pa.Table:
    return pa.table({"kind": pa.array(kinds, pa.string()), "data": pa.array(data, pa.binary())})


def fold_buckets(spec: bytes) -> Callable[[pa.Table, pa.Table], pa.Table]:
    """The cogroup function: one bucket of both diffs in, the fold's records out."""

    def run(ours: pa.Table, theirs: pa.Table) -> pa.Table:
        import warnings

        from trimerge.merge.classify import classify
        from trimerge.merge.edits import TablePlan
        from trimerge.merge.rows import fold

        warnings.filterwarnings("ignore", message="lance is not fork-safe")
        name, key, merged, granularity, resolver, schemas, declared = pickle.loads(spec)
        applied_before = resolver.resolutions.applied  # the driver's count so far: report only this bucket's
        if not theirs.num_rows:  # keys only dest changed: nothing to do
            return _records([], [])
        sides = [t.select(s.names).cast(s) for t, s in zip((ours, theirs), schemas)]
        plan = TablePlan(name)
        plan.declared = declared  # derived columns: the fold finds stale rows as the driver's would
        conflicts: list[Any] = []
        fold(plan, classify(sides[0], sides[1], key, merged, granularity), resolver, merged, conflicts.append)
        if not plan.ids_complete:
            raise RuntimeError(f"table {name}: a row to replace has no row id")
        kinds, data = [], []
        for table in plan.upserts.tables():
            for batch in table.to_batches(max_chunksize=ROW_BATCH):
                kinds.append("rows")
                data.append(_ipc(pa.Table.from_batches([batch])))
        plan.upserts.close()
        if plan.dest_row_ids:
            keys = pa.concat_tables(plan.dest_row_keys, promote_options="permissive")
            kinds.append("replace")
            data.append(_ipc(keys.append_column(ROW_ID, pa.chunked_array(plan.dest_row_ids, pa.uint64()))))
        if plan.stale:
            kinds.append("stale")
            data.append(_ipc(pa.concat_tables(plan.stale, promote_options="permissive")))
        s = plan.stats
        kinds.append("stats")
        data.append(json.dumps({"rows_from_source": s.rows_from_source, "converged": s.converged,
                                "cells_merged": s.cells_merged, "conflicts": s.conflicts, "resolved": s.resolved,
                                "stale": s.stale,
                                "rows": plan.upserts.num_rows, "replaced": sum(len(i) for i in plan.dest_row_ids),
                                "used": [list(k) for k in resolver.resolutions.used_keys()],
                                "applied": resolver.resolutions.applied - applied_before}).encode())
        kinds += ["conflict"] * len(conflicts)
        data += [pickle.dumps(c) for c in conflicts]
        return _records(kinds, data)

    return run


def write_rows(spec: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that writes a partition's new row images as Lance fragments."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lance.fragment import write_fragments

        from trimerge.lineage.tables.fragments import fragment_json
        from trimerge.lineage.tables.conversion import check_primary_key, conform

        target_text, key, what = json.loads(spec)
        ds = WriteTarget.from_json(target_text).open()

        def rows() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for blob in batch.column(1).to_pylist():
                    table = conform(_from_ipc(blob), ds.schema, what)
                    check_primary_key(table, key, what)
                    yield from table.to_batches()

        fragments = write_fragments(pa.RecordBatchReader.from_batches(ds.schema, rows()), ds)
        texts = fragment_json(fragments)
        if texts:
            yield pa.RecordBatch.from_pydict({"kind": ["new"] * len(texts), "data": [t.encode() for t in texts]},
                                             schema=pa.schema([("kind", pa.string()), ("data", pa.binary())]))

    return run


def row_addresses(spec: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that turns replaced rows (ids checked against their keys) into
    (fragment, offsets)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from trimerge.lineage.tables.fragments import row_offsets

        target_text, key, what = json.loads(spec)
        ds = WriteTarget.from_json(target_text).open()
        for batch in batches:
            for blob in batch.column(1).to_pylist():
                table = _from_ipc(blob)
                found = row_offsets(ds, table.column(ROW_ID), table.drop_columns([ROW_ID]), key)
                if found is None:
                    raise RuntimeError(f"{what}: rows to replace no longer hold their keys")
                yield pa.RecordBatch.from_pydict(
                    {"fragment": list(found), "offsets": [o.tobytes() for o in found.values()]},
                    schema=pa.schema([("fragment", pa.int64()), ("offsets", pa.binary())]))

    return run


def delete_rows(spec: str) -> Callable[[pa.Table], pa.Table]:
    """The grouped function that writes one fragment's deletion file."""

    def run(group: pa.Table) -> pa.Table:
        import numpy as np

        from trimerge.lineage.tables.fragments import delete_offsets, fragment_json

        target_text, _key, _what = json.loads(spec)
        ds = WriteTarget.from_json(target_text).open()
        fragment = group.column("fragment")[0].as_py()
        offsets = np.concatenate([np.frombuffer(b, dtype=np.uint32) for b in group.column("offsets").to_pylist()])
        updated, removed = delete_offsets(ds, {fragment: offsets})
        kinds = ["updated"] * len(updated) + ["removed"] * len(removed)
        data = [t.encode() for t in fragment_json(updated)] + [str(f).encode() for f in removed]
        return _records(kinds, data)

    return run


# ------------------------------------------------------------------------------------- on the driver
class SparkFold:
    """One table's row merge on Spark; see the module docstring.

    :meth:`run` folds (one Spark job; the records stay persisted on executors), :meth:`conflicts`
    streams every conflict back, :meth:`write` writes and commits through a transaction,
    :meth:`close` releases the persisted records and the pins on the diffs' versions."""

    def __init__(self, spark: Any, ours: "TableDiff", theirs: "TableDiff", key: Sequence[str], merged: pa.Schema,
                 granularity: str, resolver: "Resolver"):
        self.spark, self.ours, self.theirs = spark, ours, theirs
        self.key, self.merged, self.granularity, self.resolver = list(key), merged, granularity, resolver
        self.rows = 0  # new row images
        self.replaced = 0  # dest rows they replace or delete
        self._out: Any = None
        self._planned = 0  # planned rows of both diffs (diff.spark.small_jobs)
        self._pins = contextlib.ExitStack()

    @property
    def writes(self) -> bool:
        return bool(self.rows or self.replaced)

    def run(self, plan: "TablePlan", report: Callable[["Conflict"], None], max_conflicts: int | None) -> None:
        """Fold every changed key; add the statistics to ``plan`` and up to ``max_conflicts``
        conflicts to ``report`` (all of them: None)."""
        from trimerge.diff.spark import pinned, small_jobs

        for td in (self.ours, self.theirs):
            self._pins.enter_context(pinned(td))
        self._planned = self.ours.candidate_plan.estimated_rows + self.theirs.candidate_plan.estimated_rows
        with small_jobs(self.spark, self._planned):  # the diffs' frames, the fold and its collects
            self._fold(plan, report, max_conflicts)

    def _fold(self, plan: "TablePlan", report: Callable[["Conflict"], None], max_conflicts: int | None) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from trimerge.diff.spark import changes

        estimate = max(self.ours.candidate_plan.estimated_rows, self.theirs.candidate_plan.estimated_rows)
        buckets = max(2 * self.spark.sparkContext.defaultParallelism, math.ceil(estimate / BUCKET_ROWS))
        bucket = F.pmod(F.xxhash64(*[F.col(_quoted(k)) for k in self.key]), F.lit(buckets)).alias("\x01bucket")
        frames = [changes(td, self.spark) for td in (self.ours, self.theirs)]
        grouped = [f.select(bucket, *[F.col(_quoted(c)) for c in f.columns]).groupBy("\x01bucket") for f in frames]
        spec = pickle.dumps((plan.name, self.key, self.merged, self.granularity, self.resolver,
                             [td.rows_with_row_ids_schema() for td in (self.ours, self.theirs)], plan.declared))
        out = grouped[0].cogroup(grouped[1]).applyInArrow(fold_buckets(spec), RECORDS)
        self._out = out.persist(StorageLevel.DISK_ONLY)
        # Conflicts come back in the same job as the statistics when all of them fit in what the
        # caller asked for (conflicts <= changed keys <= planned rows); otherwise a second job
        # takes the first max_conflicts.
        together = max_conflicts != 0 and (max_conflicts is None or self._planned <= max_conflicts)
        kinds = ["stats", "stale", "conflict"] if together else ["stats", "stale"]
        records = self._out.filter(F.col("kind").isin(kinds)).collect()
        found = [r for r in records if r["kind"] == "conflict"]
        used: set[tuple] = set()
        for r in records:
            if r["kind"] == "stale":
                plan.stale.append(_from_ipc(r["data"]))
            if r["kind"] != "stats":
                continue
            s = json.loads(r["data"])
            for field in ("rows_from_source", "converged", "cells_merged", "conflicts", "resolved", "stale"):
                setattr(plan.stats, field, getattr(plan.stats, field) + s[field])
            self.rows += s["rows"]
            self.replaced += s["replaced"]
            used.update(tuple(k) for k in s["used"])
            self.resolver.resolutions.applied += s["applied"]
        self.resolver.resolutions.mark_used(used)
        if plan.stats.conflicts and max_conflicts != 0:
            if not together:
                found = self._out.filter(F.col("kind") == "conflict").limit(max_conflicts).collect()
            for r in found[:max_conflicts]:
                report(pickle.loads(r["data"]))

    def conflicts(self) -> Iterator["Conflict"]:
        """Every conflict of the fold, streamed a partition at a time."""
        from pyspark.sql import functions as F

        from trimerge.diff.spark import small_jobs

        with small_jobs(self.spark, self._planned):  # planned here; its jobs run as rows are read
            found = self._out.filter(F.col("kind") == "conflict").toLocalIterator()
        for r in found:
            yield pickle.loads(r["data"])

    def write(self, tx: Any, name: str) -> None:
        """Write the merged rows to ``name`` through ``tx``: fragments and deletion files from
        executors, one commit from here."""
        from pyspark.sql import functions as F

        from trimerge.diff.spark import small_jobs
        from trimerge.lineage.tables.fragments import fragments_from_json

        if not self.writes:
            return
        target = tx.write_target(name)
        spec = json.dumps([target.to_json(), self.key, f"merge into {name}"])
        written = self._out.filter(F.col("kind") == "rows").mapInArrow(write_rows(spec), RECORDS)
        deleted = (self._out.filter(F.col("kind") == "replace").mapInArrow(row_addresses(spec),
                                                                             "fragment long, offsets binary")
                   .groupBy("fragment").applyInArrow(delete_rows(spec), RECORDS))
        new: list[Any] = []
        updated: list[Any] = []
        removed: list[Any] = []
        with small_jobs(self.spark, self._planned):
            out = written.unionByName(deleted).collect()
        for r in out:
            text = bytes(r["data"]).decode()
            {"new": new, "updated": updated, "removed": removed}[r["kind"]].append(text)
        tx.commit_fragments(name, target, new=fragments_from_json(new), updated=fragments_from_json(updated),
                            removed=[int(f) for f in removed])

    def close(self) -> None:
        from trimerge.diff.spark import release

        if self._out is not None:
            self._out.unpersist()
            self._out = None
        for td in (self.ours, self.theirs):
            release(td)
        self._pins.close()


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
