"""Snapshot diff of every table between two refs, at a cost that follows the change.

For each table the engine first finds *candidate rows* — rows that may differ — from Lance
metadata alone, then joins the candidates of both sides by primary key and compares values
column by column (metadata over-reports: no-op rewrites, moved rows; values decide).

The candidate plan (shared with the Spark engine, which executes the same plan on executors) is
made by :mod:`trimerge.diff.planner`; this module is the local executor. Candidate finders,
cheapest first:

* ``delta``: both versions lie on one Lance lineage (same Lance branch, or one branch forked
  from the other exactly at the other version): Lance's row-version metadata (``ds.delta()``,
  stable row ids) names inserted, updated and deleted rows; before-images come from ``_take_rows``.
* ``fragments``: same dataset, any two versions (e.g. across branches after a merge): fragments
  whose data files and deletion file are identical (paths resolved through base paths, since
  fragment ids collide across branches) are skipped; fragments sharing data files but not their
  deletion vector contribute only the rows whose deletion state differs; the rest is read.
* ``full``: unrelated datasets (a table created independently on two branches): both read.

Why skipping is exact: a skipped row is the same physical live row on both sides, and a key is unique
in each snapshot, so that key appears nowhere else on either side.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Literal, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff import aligned
from trimerge.diff.aligned import with_classified
from trimerge.diff import columns as column_pairs
from trimerge.diff.counting import DiffCounts, count_changes, count_rows, sum_counts
from trimerge.diff.delta import read_deltas
from trimerge.diff.images import BeforeImages, restrict_rows
from trimerge.diff.narrowrows import rows_of_changed_columns, rows_through_pairs
from trimerge.diff.schemas import SchemaChange, index_changes, schema_changes
from trimerge.diff.rules import AFTER_ROWID, BEFORE_ROWID, classify, project_rows
from trimerge.diff.reads import ROWID, scan, schema_with_row_ids, take_all
from trimerge.diff.planner import (
    CandidatePlan,
    PlanAssumptionError,
    Snapshot,
    plan_candidates,
    only_on_each_side,
    stable_row_ids,
)
from trimerge.diff.spill import CandidateBuffer, ChangedRows, ordered_map
from trimerge.diff.spill import memory_budget as memory_budget_bytes
from trimerge.diff.where import restrict_where
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import InvalidOperationError, TableNotFoundError, resource_exhausted

log = logging.getLogger("trimerge.diff")
#: The plan to fall back to when a plan's metadata promised rows the data does not hold.
FALLBACK = {"delta": "fragments", "fragments": "full"}

ROW_META_COLUMNS = ("_rowid", "_rowaddr", "_row_created_at_version", "_row_last_updated_at_version")
#: Columns of :meth:`TableDiff.rows` besides the key.
DIFF_COLUMNS = ("change", "changed_columns", "before", "after")
Status = Literal["added", "dropped", "modified", "unchanged"]
Progress = Callable[[str, str], None]


@dataclass
class DiffPlan:
    """What the metadata said before any row was read."""

    method: Literal["none", "delta", "fragments", "full", "added", "dropped", "spark"]
    fragments_skipped: int = 0
    fragments_deletion_only: int = 0
    fragments_columns_only: int = 0  # same rows on both sides, only some columns read
    fragments_read: int = 0
    rows_planned: int = 0  # upper bound of candidate rows (before + after)
    fallback_from: str | None = None  # a cheaper plan that was tried first and found inconsistent

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class TableDiff:
    """The difference of one table between two snapshots."""

    def __init__(self, name: str, before: Snapshot, after: Snapshot, memory_budget: int | None = None, *,
                 method: str = "auto", verify: bool = False, where: str | None = None,
                 where_sides: tuple[bool, bool] = (True, True)):
        self.name = name
        self.where, self.where_sides = where, where_sides  # rows whose images match it (trimerge.diff.where)
        self.method = method  # the plan asked for (see trimerge.diff.planner.PLAN_CHOICES)
        self.verify = verify  # cross-check the planned rows against the brute-force diff
        self._fallback_from: str | None = None
        self.before_snapshot = before
        self.after_snapshot = after
        self._memory_budget = memory_budget_bytes(memory_budget)
        self._changed: ChangedRows | None = None
        self._rows: pa.Table | None = None
        self._counts: DiffCounts | None = None
        self._tally: DiffCounts | None = None  # counts of spilled rows, taken as they were classified
        #: Count without building the changed rows (a caller that likely needs only the counts, e.g.
        #: a merge that will start from the source's table); rows asked later are built then.
        self.count_first = False
        #: Deleted rows' ``before`` images hold their key only (other values null) — for a merge,
        #: which takes a deleted key's base values from the other side's diff (:mod:`trimerge.diff.images`).
        self.key_only_deletes = False
        self.within_keys: pa.Table | None = None  # set by only_keys()
        #: Of a diff made by :meth:`only_keys`: True when the whole diff is known to have rows.
        self.whole_changed: bool | None = None
        self._index_changes: list[dict[str, Any]] | None = None
        self._pairs = ""  # how the read under way takes a delta plan's row-id pairs (see _collected)
        self._paired: DiffCounts | None = None
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
        self._candidate_plan: CandidatePlan | None = None
        self.engine: Literal["local", "spark"] = "local"
        self.spark_changes: Any = None  # on Spark: the changed rows, kept on executors (diff.spark.changes)
        self._spark: Any = None

    @property
    def candidate_plan(self) -> CandidatePlan:
        """This table's candidate plan (metadata only; made once, shared by both engines and the
        engine choice)."""
        if self._candidate_plan is None:
            self._candidate_plan = plan_candidates(self.before_snapshot, self.after_snapshot, self.method)
        return self._candidate_plan

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
    def index_changes(self) -> list[dict[str, Any]]:
        """Indices added, dropped or redefined between the two versions (index-only commits change
        no rows: they show here, not in :attr:`counts`)."""
        if self.storage_status != "modified":
            return []
        if self._index_changes is None:
            self._index_changes = index_changes(self.before_snapshot, self.after_snapshot)
        return self._index_changes

    @property
    def counts(self) -> DiffCounts:
        whole = self.where is None  # a filtered diff counts its filtered rows
        if self._counts is None and self._changed is None and self.engine == "spark" and whole and \
                self.storage_status != "unchanged":
            from trimerge.diff.spark import spark_counts

            per_change = spark_counts(self, self._spark)
            rows = {change: per_change.get(change, (0, 0))[0] for change in ("insert", "delete", "update")}
            self._counts = DiffCounts(inserted=rows["insert"], deleted=rows["delete"], updated=rows["update"],
                                      cells_changed=sum(cells for _, cells in per_change.values()))
        if self._counts is None and self._changed is None and self.engine == "local" and not self.verify and whole \
                and self.storage_status == "modified" and self.candidate_plan.column_pairs and self.within_keys is None:
            self._counts = self._counts_through_columns()
        if self._counts is None and self._changed is None and self.count_first and self.engine == "local" \
                and not self.verify and whole and self.storage_status == "modified":
            self._counts = self._compute(count_only=True)
        if self._counts is None:
            changed = self._changed_rows()
            # Spilled rows were counted bucket by bucket as they were classified; else one pass.
            self._counts = self._tally if self._tally is not None else count_rows(changed.batches())
        return self._counts

    def only_keys(self, keys: pa.Table) -> "TableDiff":
        """This diff restricted to the rows of ``keys`` (a table of the key columns), reading whole
        images only for them where the plan allows (a merge needs dest's rows only for the keys the
        source changed). Its :attr:`whole_changed` says, when known, that the whole diff has rows."""
        td = TableDiff(self.name, self.before_snapshot, self.after_snapshot, self._memory_budget, method=self.method,
                       verify=self.verify)
        td.within_keys = keys.select(list(self.primary_key))
        return td

    def rows_through_columns(self) -> tuple[list[pa.Table], ChangedRows] | None:
        """The changed rows split in two, for a caller that needs full images only of some rows
        (a merge taking a backfill): (each column pair's rows, whose ``before``/``after`` images
        hold only the columns that pair read; every other changed row, with full images). None
        when the plan has no column pairs (or does not hold: use :meth:`rows_with_row_ids`).
        :meth:`complete` gives the full images of pair rows."""
        if self.engine != "local" or self.storage_status != "modified" or self.where is not None \
                or not self.candidate_plan.column_pairs:
            return None
        narrow: list[pa.Table] = []
        try:
            rest = self._classify_candidates(narrow)
        except PlanAssumptionError:
            return None
        return narrow, rest

    def complete(self, narrow: pa.Table) -> pa.Table:
        """Rows of :meth:`rows_through_columns`'s pairs with full images (as
        :meth:`rows_with_row_ids`): taken by row id from both snapshots and classified again."""
        key, common, added = self.compared_columns()
        schemas = self._side_schemas()
        sides: list[list[pa.Table]] = [[], []]
        ids = column_pairs.row_ids(narrow)
        for side, t in take_all([(self.before_snapshot, ids[0]), (self.after_snapshot, ids[1])]):
            sides[side].append(t)
        before, after = (pa.concat_tables(parts, promote_options="permissive") if parts else schemas[i].empty_table()
                         for i, parts in enumerate(sides))
        columns = [[c for c in s.names if c not in key and c != ROWID] for s in schemas]
        return classify(before, after, key, common, added, columns[0], columns[1])

    def _counts_through_columns(self) -> DiffCounts | None:
        """Counts of a fragment plan with column pairs, reading each pair's changed columns only
        (no full images: :meth:`rows` takes those when asked)."""
        narrow: list[pa.Table] = []
        try:
            rest = self._classify_candidates(narrow)
        except PlanAssumptionError:
            return None
        return count_rows([*rest.batches(), *(b for t in narrow for b in t.to_batches())])

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

    def rows(self, columns: str | Sequence[str] | None = "all") -> pa.Table:
        """Changed rows: key columns, ``change`` (insert/delete/update), ``changed_columns``,
        and ``before`` / ``after`` structs of the values (null for insert / delete); ``columns``:
        ``"all"``, ``"changed"`` (columns that changed in some row: a backfill costs its column) or names."""
        if isinstance(columns, str) and columns == "changed":
            return rows_of_changed_columns(self)
        if isinstance(columns, str) and columns != "all":
            raise InvalidOperationError(f"rows(columns=...) takes 'all', 'changed' or a list of names, not {columns!r}")
        if self._changed is None and self.engine == "local" and not self.verify:  # column pairs: no join, no spill
            self._changed = rows_through_pairs(self)
        rows = self.rows_with_row_ids().drop_columns([BEFORE_ROWID, AFTER_ROWID])
        return rows if columns is None or isinstance(columns, str) else project_rows(rows, columns)

    def rows_polars(self, columns: str | Sequence[str] | None = "all") -> pl.DataFrame:
        """:meth:`rows` as a polars DataFrame (no copy): what a notebook shows as a table."""
        return pl.from_arrow(self.rows(columns))  # type: ignore[return-value]

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
                t = project_rows(t, columns)
            yield from t.to_batches()

    def row_buckets(self, key_types: pl.Schema, buckets: int) -> Iterator[pa.Table] | None:
        """:meth:`rows_with_row_ids` one key-hash bucket at a time (cut as
        :func:`trimerge.diff.spill.split_by_bucket` cuts with ``key_types``), when the diff
        spilled its rows in such buckets; None otherwise (e.g. the rows are in memory)."""
        if self._rows is not None:
            return None
        return self._changed_rows().buckets(key_types, buckets)

    def rows_with_row_ids_schema(self) -> pa.Schema:
        """The schema of :meth:`rows_with_row_ids`, without reading any rows."""
        return self._empty_rows().schema if self._changed is None else self._changed.schema

    @property
    def spilled(self) -> bool:
        """True if the diff outgrew the memory budget and its rows live in a temporary file."""
        return self._changed_rows().table is None

    def _changed_rows(self) -> ChangedRows:
        clash = sorted(set(self.primary_key) & set(DIFF_COLUMNS))
        if clash:
            raise InvalidOperationError(f"table {self.name}: key column(s) {clash} share a name with the diff's own "
                                        f"columns ({', '.join(DIFF_COLUMNS)}); rename them to diff this table")
        if self._changed is None:
            if self.engine == "spark" and self.storage_status != "unchanged":
                from trimerge.diff.spark import spark_rows

                self._changed = ChangedRows.in_memory(spark_rows(self, self._spark, self._empty_rows().schema))
                self.plan = DiffPlan("spark")
            else:
                self._changed = self._compute()
            if self.within_keys is not None:
                self._changed, outside = restrict_rows(self._changed, self.within_keys, self.primary_key)
                self.whole_changed = True if outside else self.whole_changed
            if self.verify and self.storage_status != "unchanged":
                from trimerge.diff.verify import check_table

                check_table(self, self._changed.materialize(self.primary_key).drop_columns([BEFORE_ROWID, AFTER_ROWID]))
            if self.where is not None:
                self._changed, self._tally = restrict_where(self._changed, self.where, self.primary_key,
                                                            self.where_sides, self), None  # recount what is kept
        return self._changed

    def _empty_rows(self) -> pa.Table:
        """No rows, in the schema of :meth:`rows_with_row_ids`. A side the table is missing from
        borrows the other side's schema: an added table's rows carry a typed, all-null ``before``."""
        key, common, added = self.compared_columns()
        b_schema = (self.before_snapshot if self.before_snapshot.tv else self.after_snapshot).schema
        a_schema = (self.after_snapshot if self.after_snapshot.tv else self.before_snapshot).schema
        return classify(b_schema.empty_table(), a_schema.empty_table(), key, common, added,
                        [c for c in b_schema.names if c not in key], [c for c in a_schema.names if c not in key])

    def stale_rows(self) -> pa.Table:
        """Keys of updated rows whose derived columns did not change although an input they are
        computed from did (declarations of the after side: :meth:`Repository.set_derived`)."""
        from trimerge.lineage.gates.derived import as_dict, stale_in_diff

        tv = self.after_snapshot.tv
        declared = as_dict(tv.derived) if tv is not None else {}
        key = list(self.primary_key)
        if not declared or self.storage_status != "modified":
            return self.rows_with_row_ids_schema().empty_table().select(key)
        parts = []
        for batch in self.iter_batches(columns=[]):
            frame = pl.from_arrow(pa.Table.from_batches([batch]).select([*key, "change", "changed_columns"]))
            found = frame.filter((pl.col("change") == "update") & stale_in_diff(declared, pl.col("changed_columns")))
            parts.append(found.select(key).to_arrow())
        return pa.concat_tables(parts) if parts else self.rows_with_row_ids_schema().empty_table().select(key)

    def summary(self) -> dict[str, Any]:
        counts = self.counts.to_json() if self.storage_status != "unchanged" else DiffCounts().to_json()
        by_column = self.counts.by_column if self.storage_status != "unchanged" else {}
        out = {"table": self.name, "status": self.status, **counts, "columns": dict(sorted(by_column.items())),
               "schema_changes": [s.to_json() for s in self.schema_changes], "index_changes": self.index_changes,
               "plan": self.plan.to_json()}
        if self.after_snapshot.tv is not None and self.after_snapshot.tv.derived:
            out["stale"] = self.stale_rows().num_rows  # only tables that declare derived columns
        return out

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
        return schema_with_row_ids(sb), schema_with_row_ids(sa)

    def _collect(self, out: CandidateBuffer, narrow: list[pa.Table] | None = None) -> None:
        """Feed the rows that may have changed into ``out`` (side 0: before, 1: after) and record the plan."""
        b, a = self.before_snapshot, self.after_snapshot
        plan = self.candidate_plan
        if plan.method == "none":
            return
        if plan.method == "delta":
            self._delta_candidates(plan.common_version, out)
            return
        if plan.method in ("added", "dropped", "full"):
            pushed = {"filter": f"({self.where}\n)"} if self.where is not None and plan.method != "full" else {}  # one image a row
            for side, snap, fragments in ((0, b, plan.read_before), (1, a, plan.read_after)):
                if fragments:
                    for t in scan(snap, **pushed):
                        out.add(side, t)
            self.plan = DiffPlan(plan.method, fragments_read=len(plan.read_before) + len(plan.read_after),
                                 rows_planned=sum(out.rows))
            return
        self._fragment_candidates(plan, out, narrow)

    def _delta_candidates(self, common: int, out: CandidateBuffer) -> None:
        """Rows changed on either side since the common version. Rows older than it share stable
        row ids on both sides, so a row touched on one side only is fetched from the other by id."""
        try:
            self._read_deltas(common, out)
        except (OSError, ValueError) as exc:  # e.g. a version the delta starts from was cleaned up
            pool = " (Lance's memory pool ran out: see LANCE_MEM_POOL_SIZE)" if resource_exhausted(exc) else ""
            raise PlanAssumptionError(f"Lance cannot read the delta since version {common}{pool}: {exc}") from exc

    def _read_deltas(self, common: int, out: CandidateBuffer) -> None:
        b, a = self.before_snapshot, self.after_snapshot

        def images() -> BeforeImages:
            return BeforeImages(self.primary_key, self._side_schemas()[0], key_only_deletes=self.key_only_deletes,
                                only_keys=self.within_keys)

        seen = images()
        in_place = bool(self._pairs) and self.within_keys is None and aligned.applies(b, common)
        if in_place and self._pairs == "count":
            self._paired = aligned.count_aligned(b, a, common, *self.compared_columns(), out)
            done = self._paired is not None
        else:
            done = in_place and aligned.classify_aligned(b, a, common, *self.compared_columns(), out, seen)
        if not done:
            out.clear()  # streams that did not line up leave a part: the usual read, from the start
            seen = images()
            read_deltas(b, a, common, out.add, seen)
        self.whole_changed = seen.whole_changed
        self.plan = DiffPlan("delta", rows_planned=sum(out.rows))

    def _fragment_candidates(self, plan: CandidatePlan, out: CandidateBuffer, narrow: list[pa.Table] | None = None) -> None:
        """Candidates of the fragment plan. ``narrow``: collect each column pair's classification
        (read through its changed columns only) there instead of taking its rows' full images."""
        b, a = self.before_snapshot, self.after_snapshot
        report = DiffPlan("fragments", fragments_skipped=plan.skipped, fragments_deletion_only=len(plan.deletion_pairs),
                          fragments_columns_only=len(plan.column_pairs),
                          fragments_read=len(plan.read_before) + len(plan.read_after))
        ids_b: list[pa.Array] = []
        ids_a: list[pa.Array] = []
        gone_b: list[pa.Array] = []  # rows deleted on the after side

        def deleted_on_one_side(pair: tuple[Any, Any]) -> tuple[pa.Array, pa.Array]:
            return only_on_each_side(stable_row_ids(b, pair[0]), stable_row_ids(a, pair[1]))

        for only_b, only_a in ordered_map(deleted_on_one_side, plan.deletion_pairs):  # Lance and numpy let go of the GIL
            ids_b.append(only_b)
            gone_b.append(only_b)
            ids_a.append(only_a)
        key, common, added = self.compared_columns()
        for pair in plan.column_pairs:
            rows = column_pairs.compare_pair(b, a, pair, key, common, added)
            if narrow is not None:
                # Only a row on both sides of the pair is known to hold a key found nowhere else;
                # a row on one side (deleted there) may have moved: it joins the other candidates.
                updated = pc.equal(rows.column("change"), "update")
                every = pc.all(updated).as_py() is not False  # a backfill: every row, no copy
                narrow.append(rows if every else rows.filter(updated))
                rows = rows.slice(0, 0) if every else rows.filter(pc.invert(updated))
            pb, pa_ = column_pairs.row_ids(rows)
            ids_b.append(pb)
            ids_a.append(pa_)
        # The after side's rows first: their keys tell which rows deleted there are deletes.
        images = BeforeImages(key, self._side_schemas()[0], key_only_deletes=self.key_only_deletes,
                              only_keys=self.within_keys)
        for side, snap, fragments in ((0, b, plan.read_before), (1, a, plan.read_after)):
            for frag in fragments:
                for t in images.watch(scan(snap, fragments=[frag]), side):
                    out.add(side, t)
        every = lambda parts: pa.concat_arrays(parts) if parts else pa.array([], pa.uint64())  # noqa: E731
        for _, t in take_all([(a, images.only_wanted(a, every(ids_a)))]):
            for seen in images.watch([t]):
                out.add(1, seen)
        fetch_b, key_only = images.split(b, every(ids_b), every(gone_b), before_changed=True)
        if key_only is not None:
            out.add(0, key_only)
        for _, t in take_all([(b, fetch_b)]):
            out.add(0, t)
        report.rows_planned = sum(out.rows)
        self.plan = report

    # -- classification
    def _compute(self, count_only: bool = False) -> Any:
        """Classify the candidates of the plan (``count_only``: only count them, see
        :meth:`count_first`); if its metadata promised something the data does not hold (a row id
        that is gone, a version Lance cannot read), log it and run the next exact plan instead —
        never a wrong answer, never a crash."""
        while True:
            try:
                return self._count_candidates() if count_only else self._classify_candidates()
            except PlanAssumptionError as exc:
                tried = self.candidate_plan.method
                if tried not in FALLBACK:
                    raise RuntimeError(f"table {self.name}: {exc}") from exc
                log.warning("table %s: the %s plan does not hold (%s); using the %s plan", self.name, tried, exc,
                            FALLBACK[tried])
                self._candidate_plan = plan_candidates(self.before_snapshot, self.after_snapshot, FALLBACK[tried])
                self.plan = DiffPlan(self._candidate_plan.method)
                self._fallback_from = tried

    @contextmanager
    def _collected(self, narrow: list[pa.Table] | None = None,
                   pairs: str = "") -> Iterator[tuple[CandidateBuffer, tuple, Any]]:
        """The plan's candidates in a buffer, with both sides' schemas and the classification of one
        (before, after) pair of them. ``pairs``: a delta plan's rows paired by stable row id are
        compared in place (:mod:`trimerge.diff.aligned`) — ``"classify"``: into the buffer as rows
        classified already; ``"count"``: into :attr:`_paired`'s counts."""
        key, common, added = self.compared_columns()
        schemas = self._side_schemas()
        key_schema = pl.from_arrow(schemas[1].empty_table().select(key)).schema
        buffer = CandidateBuffer(key, key_schema, self._memory_budget)
        try:
            self._pairs = pairs
            self._collect(buffer, narrow)
            columns = [[c for c in s.names if c not in key and c != ROWID] for s in schemas]

            def run(pair: tuple[pa.Table, pa.Table]) -> pa.Table:
                return classify(pair[0], pair[1], key, common, added, before_columns=columns[0],
                                after_columns=columns[1])

            yield buffer, schemas, run
        finally:
            buffer.close()
            self.plan.fallback_from = self._fallback_from

    def _classify_candidates(self, narrow: list[pa.Table] | None = None) -> ChangedRows:
        key = list(self.primary_key)
        with self._collected(narrow, pairs="classify") as (buffer, schemas, run):
            if not buffer.spilled:
                return ChangedRows.in_memory(with_classified(run(buffer.tables(schemas)), buffer.classified(), key))
            tallies: list[DiffCounts] = []

            def run_and_count(bucket: tuple[pa.Table, pa.Table, list[pa.Table]]) -> pa.Table:
                rows = with_classified(run(bucket[:2]), bucket[2], key)
                tallies.append(count_rows(rows.to_batches()))  # counted while in hand, not in a second pass
                return rows

            changed = ChangedRows.from_buckets(ordered_map(run_and_count, buffer.buckets_with_classified(schemas)),
                                               self, buffer.key_types)
            if narrow is None:
                self._tally = sum_counts(tallies)
            return changed

    def _count_candidates(self) -> DiffCounts:
        key, common, added = self.compared_columns()

        def count(pair: tuple[pa.Table, pa.Table]) -> DiffCounts:
            return count_changes(pair[0], pair[1], key, common, added)

        self._paired = None
        with self._collected(pairs="count") as (buffer, schemas, _run):
            keyed = count(buffer.tables(schemas)) if not buffer.spilled else \
                sum_counts(ordered_map(count, buffer.bucket_tables(schemas)))
            return sum_counts([keyed, *([self._paired] if self._paired is not None else [])])
