"""The three-way table at table level, and the planning of each table's merge.

Per table, with base B, ours O (the destination) and theirs T (the source): changed on one side
only → taken from that side without touching data (dest points at the source's Lance version;
a source that moved the table's storage alone, with the same content, gives nothing to take);
added on one side → added; dropped on one side and unchanged on the other → dropped; dropped vs
modified → ``table.drop_modify``; added on both → merged row by row against an empty base if keys
and schemas agree, else ``table.add_add``; changed on both → schema merge
(:mod:`trimerge.merge.schema`), then every changed key classified once
(:mod:`trimerge.merge.classify`) and folded into row edits (:mod:`trimerge.merge.rows`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import polars as pl
import pyarrow as pa

from trimerge.diff.engine import TableDiff
from trimerge.diff.planner import Snapshot, choose_engine, spark_at_hand
from trimerge.diff.reads import RowCache
from trimerge.diff.spill import SPILL_BUCKETS, CandidateBuffer, ordered_map, split_by_bucket
from trimerge.diff.verify import verify_requested
from trimerge.lineage.tables import arrowtypes
from trimerge.lineage.gates import derived as derived_decl
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.repository import Repository
from trimerge.merge import sourceside
from trimerge.merge.classify import classify
from trimerge.merge.edits import TablePlan
from trimerge.merge.publish import release_memory
from trimerge.merge.indices import definitions, merge_definitions
from trimerge.merge.resolve import BASE, OURS, THEIRS, Resolver
from trimerge.merge.result import Conflict
from trimerge.merge.rows import fold, take_source_columns
from trimerge.merge.schema import merge_schema
from trimerge.merge.spark import SparkFold

Tables = Mapping[str, TableVersion]


def _location(tv: TableVersion | None) -> tuple[str, str, int] | None:
    return tv.location if tv else None


def same_content(repo: Repository, name: str, a: TableVersion | None, b: TableVersion | None,
                 d: TableDiff | None = None) -> bool:
    """Whether two versions of table ``name`` hold the same content — rows, schema and key, index
    definitions, derived declarations and checks — however they are stored (a rewrite, a
    compaction, the same change made twice). ``d``: the diff from ``a`` to ``b``, if at hand."""
    if a is None or b is None:
        return a is b
    if (a.primary_key, a.derived, a.checks) != (b.primary_key, b.derived, b.checks):
        return False
    if a.location == b.location and a.index_params == b.index_params:
        return True
    if definitions(repo.open_table_version, a) != definitions(repo.open_table_version, b):
        return False
    d = d or TableDiff(name, Snapshot(repo, a, RowCache()), Snapshot(repo, b))
    return not d.changed


class ThreeWay:
    """Plans the merge of every table of ``ours`` (dest) and ``theirs`` (source) against ``base``.

    ``base_is_scratch``: the base tables are a virtual base that is never published, so no
    table may be set to them (their values are copied instead)."""

    def __init__(self, repo: Repository, base: Tables, ours: Tables, theirs: Tables, *, resolver: Resolver,
                 granularity: str, engine: str = "local", spark: Any = None, base_is_scratch: bool = False,
                 max_conflicts: int | None = None, verify: bool | None = None,
                 progress: Callable[[str, str], None] | None = None):
        self.repo = repo
        self._bases: dict[tuple[str, TableVersion | None], Snapshot] = {}
        self.progress = progress  # (table, "start" | "done") around each table's plan
        self.verify = verify_requested(verify)  # every diff checked against the brute-force one
        self.base, self.ours, self.theirs = dict(base), dict(ours), dict(theirs)
        self.resolver = resolver
        self.granularity = granularity
        self.engine = engine
        self.spark = spark
        self.base_is_scratch = base_is_scratch
        self.conflicts: list[Conflict] = []  # all of them, except a Spark fold's past max_conflicts
        self.max_conflicts = max_conflicts
        self.plans: dict[str, TablePlan] = {}
        self.spark_folds: dict[str, SparkFold] = {}

    def run(self) -> dict[str, TablePlan]:
        for name in sorted(self.base.keys() | self.ours.keys() | self.theirs.keys()):
            if self.progress is not None:
                self.progress(name, "start")
            self.plans[name] = self.table(name)
            if self.progress is not None:
                self.progress(name, "done")
        return self.plans

    def all_conflicts(self) -> Iterator[Conflict]:
        """Every conflict, also those a Spark fold keeps on its executors past ``max_conflicts``."""
        yield from (c for c in self.conflicts if c.table not in self.spark_folds or not c.kind.startswith("row."))
        for executed in self.spark_folds.values():
            yield from executed.conflicts()

    def close(self) -> None:
        """Free what Spark folds keep on executors."""
        for executed in self.spark_folds.values():
            executed.close()

    def diff(self, name: str, before: TableVersion | None, after: TableVersion | None) -> TableDiff:
        """A table's diff; the diffs from one base share its snapshot, so the base rows both read
        by row id (those of keys both sides changed) are read once."""
        if (name, before) not in self._bases:
            self._bases[(name, before)] = Snapshot(self.repo, before, RowCache())
        td = TableDiff(name, self._bases[(name, before)], Snapshot(self.repo, after), verify=self.verify)
        td.key_only_deletes = True  # a deleted key's base values, where needed, are in the other diff
        if self.engine != "local" and choose_engine(self.engine, td.candidate_plan,
                                                     at_hand=spark_at_hand(self.spark)) == "spark":
            from trimerge.diff.spark import get_spark

            self.spark = self.spark or get_spark()
            td.use_spark(self.spark)
        return td

    # -- conflicts about whole tables
    def report(self, plan: TablePlan, conflict: Conflict) -> None:
        self.conflicts.append(conflict)

    def table_conflict(self, plan: TablePlan, conflict: Conflict) -> TablePlan:
        """Settle a conflict about a whole table: dest's table, the source's, or the base's."""
        name = plan.name
        decision = self.resolver.decide_table(conflict)
        if decision is None:
            self.conflicts.append(conflict)
            plan.stats.conflicts += 1
            plan.stats.action = "conflict"
            return plan
        if decision.by == "strategy":
            plan.stats.resolved += 1
        return self.take(plan, {OURS: self.ours, THEIRS: self.theirs, BASE: self.base}[decision.choice].get(name),
                         decision.choice)

    def take(self, plan: TablePlan, tv: TableVersion | None, side: str) -> TablePlan:
        """Make dest's table ``tv`` (None: no table) without touching data."""
        current = self.ours.get(plan.name)
        if _location(tv) == _location(current):
            plan.stats.action = "kept"
        elif tv is None:
            plan.drop, plan.stats.action = True, "dropped"
        else:
            if side == BASE and self.base_is_scratch:
                raise InvalidOperationError(f"table {plan.name}: going back to the merge base is not possible when "
                                            "the base is virtual (a criss-cross history); resolve with ours or theirs")
            plan.set_to, plan.stats.action = tv, "taken"
        return plan

    # -- table level
    def table(self, name: str) -> TablePlan:
        b, o, t = self.base.get(name), self.ours.get(name), self.theirs.get(name)
        plan = TablePlan(name)
        declared = self.merge_derived(plan, b, o, t)
        plan.declared = declared or {}
        plan = self.table_plan(name, plan)
        if declared is not None and plan.stats.action != "conflict" and not plan.drop:
            declared = self.declarable(declared, plan, o)
            if declared != derived_decl.as_dict((plan.set_to or o).derived):
                plan.derived = declared
        if o is not None and t is not None and len({_location(b), _location(o), _location(t)}) == 3 \
                and not plan.drop and plan.stats.action != "conflict":
            self.merge_indices(plan, b, o, t)
        return plan

    def declarable(self, declared: dict[str, tuple[str, ...]], plan: TablePlan,
                   o: TableVersion | None) -> dict[str, tuple[str, ...]]:
        """``declared`` without the declarations that name a column the merged table lacks (one
        side declared it, the other dropped a column it names): no merge records a declaration
        no write could make — dropping a column drops the declarations that name it."""
        if not declared:
            return declared
        schema = plan.merged_schema or self.repo.open_table_version(plan.set_to or o).schema
        columns = set(schema.names)
        return {c: i for c, i in declared.items() if c in columns and columns.issuperset(i)}

    def merge_indices(self, plan: TablePlan, b: TableVersion | None, o: TableVersion, t: TableVersion) -> None:
        """Both sides changed the table: merge their index definitions (see :mod:`trimerge.merge.indices`)."""
        defs = [definitions(self.repo.open_table_version, tv) for tv in (b, o, t)]
        if not (defs[0] or defs[1] or defs[2]):
            return
        wanted, changes = merge_definitions(plan.name, *defs, lambda c: self.decide_column(plan, c))
        if wanted is None:
            plan.stats.action = "conflict"
            return
        plan.indices = wanted
        plan.stats.schema_changes = [*plan.stats.schema_changes, *changes]

    def merge_derived(self, plan: TablePlan, b: TableVersion | None, o: TableVersion | None,
                      t: TableVersion | None) -> dict[str, tuple[str, ...]] | None:
        """The three-way merge of the table's derived-column declarations (None: the table is not
        on both sides, or they conflict unresolved — a ``derived.update_update`` conflict)."""
        if o is None or t is None:
            return None

        def decide(column: str, base: Any, ours: Any, theirs: Any) -> str | None:
            shown = [{"inputs": list(v)} if v is not None else None for v in (base, ours, theirs)]
            return self.decide_column(plan, Conflict(
                "derived.update_update", plan.name, columns=(column,), base=shown[0], ours=shown[1], theirs=shown[2],
                message=f"derived column {column!r} declared differently on both sides"))

        merged, changes = derived_decl.merge_declarations(
            *[derived_decl.as_dict(tv.derived if tv else ()) for tv in (b, o, t)], decide)
        plan.stats.schema_changes = [*plan.stats.schema_changes, *changes]
        return merged

    def same_indices(self, a: TableVersion | None, b: TableVersion | None) -> bool:
        return definitions(self.repo.open_table_version, a) == definitions(self.repo.open_table_version, b)

    def table_plan(self, name: str, plan: TablePlan | None = None) -> TablePlan:
        b, o, t = self.base.get(name), self.ours.get(name), self.theirs.get(name)
        plan = plan or TablePlan(name)
        if _location(o) == _location(t):
            plan.stats.action = "unchanged" if _location(o) == _location(b) else "dropped" if o is None else "kept"
            return plan
        if _location(t) == _location(b):
            plan.stats.action = "kept"  # only dest changed
            return plan
        if b is None:
            if o is None:  # added on the source only
                plan.set_to, plan.stats.action = t, "added"
                plan.stats.rows_from_source = self.repo.open_table_version(t).count_rows()
                return plan
            return self.add_add(plan, o, t)
        if o is not None and _location(o) == _location(b):
            # Only the source changed it (or dropped it): take the source's table as is.
            if t is None:
                plan.drop, plan.stats.action = True, "dropped"
                return plan
            d_t = self.diff(name, b, t)
            if same_content(self.repo, name, b, t, d_t):
                plan.stats.action = "kept"  # the source moved its storage alone: nothing to take
                return plan
            plan.set_to, plan.stats.action = t, "taken"
            plan.stats.rows_from_source = d_t.counts.rows_changed
            return plan
        if o is None and t is None:
            plan.stats.action = "dropped"
            return plan
        if o is None or t is None:
            return self.drop_modify(plan, b, o, t)
        if self.granularity == "table":
            if not self.diff(name, b, o).changed:
                # Dest changed no rows. When the source changed none either (the same rows as dest
                # in another Lance version), taking its table would publish a change of storage
                # alone; index definitions are merged apart (merge_indices).
                if not self.diff(name, b, t).changed:
                    plan.stats.action = "kept"
                    return plan
                return self.take(plan, t, THEIRS)
            if not self.diff(name, b, t).changed or not self.diff(name, o, t).changed:
                plan.stats.action = "kept"  # the source changed nothing, or both made the same change
                return plan
            return self.table_conflict(plan, Conflict("table.update_update", name, message="changed on both sides"))
        return self.merge_rows(plan, b, o, t)

    def drop_modify(self, plan: TablePlan, b: TableVersion, o: TableVersion | None, t: TableVersion | None) -> TablePlan:
        if not self.diff(plan.name, b, o or t).changed:
            plan.drop = o is not None  # dropped on one side, unchanged on the other: dropped
            plan.stats.action = "dropped"
            return plan
        side = ("dest", "source") if o is None else ("source", "dest")
        return self.table_conflict(plan, Conflict("table.drop_modify", plan.name,
                                                  message=f"dropped on {side[0]}, modified on {side[1]}"))

    def add_add(self, plan: TablePlan, o: TableVersion, t: TableVersion) -> TablePlan:
        so = self.repo.open_table_version(o).schema
        st = self.repo.open_table_version(t).schema
        same_schema = {(f.name, f.type) for f in so} == {(f.name, f.type) for f in st}
        if o.primary_key != t.primary_key or not same_schema:
            return self.table_conflict(plan, Conflict("table.add_add", plan.name,
                                                      message="added on both sides with different keys or schemas"))
        return self.merge_rows(plan, None, o, t)

    # -- schema, then rows
    def merge_rows(self, plan: TablePlan, b: TableVersion | None, o: TableVersion, t: TableVersion) -> TablePlan:
        name = plan.name
        d_o, d_t = self.diff(name, b, o), self.diff(name, b, t)
        d_t.count_first = b is not None and sourceside.likely(d_o, d_t)
        if d_o.engine == d_t.engine == "spark":  # both counted (and their rows kept) by one Spark job
            from trimerge.diff.spark import count_together

            count_together([d_o, d_t], self.spark)
        ours = dest_rows(d_o, d_t)  # the rows the fold reads: dest's, of the keys the source changed
        source_rows_same = b is not None and not d_t.changed
        if source_rows_same and self.same_indices(b, t):
            plan.stats.action = "kept"  # the source only rewrote it: nothing to take, not even its storage
            return plan
        if b is not None and not dest_changed(ours, d_o) and self.same_indices(b, o):
            plan.set_to, plan.stats.action = t, "taken"  # dest rewrote it without changing it
            plan.stats.rows_from_source = d_t.counts.rows_changed
            return plan
        if source_rows_same:
            plan.stats.action = "kept"
            return plan
        sb = self.repo.open_table_version(b).schema if b else None
        so, st = self.repo.open_table_version(o).schema, self.repo.open_table_version(t).schema
        # Which columns each side changed matters only for a column the other side dropped: each
        # answer is a pass over a whole diff, so it is read only then.
        base_names = set(sb.names) if sb is not None else set()
        changed_o = changed_columns(d_o) if base_names - set(st.names) else set()
        changed_t = changed_columns(d_t) if base_names - set(so.names) else set()
        schema = merge_schema(name, sb, so, st, b.primary_key if b else None, o.primary_key, t.primary_key,
                              changed_o, changed_t, lambda c: self.decide_column(plan, c))
        if schema.table_conflict is not None:
            return self.table_conflict(plan, schema.table_conflict)
        if schema.to_base:
            return self.take(plan, b, BASE)
        plan.merged_schema = schema.schema
        plan.add_columns, plan.widen, plan.drop_columns = schema.add_columns, schema.widen, schema.drop_columns
        plan.restore_columns, plan.restore_from = schema.restore_columns, t if schema.restore_columns else None
        plan.stats.schema_changes = schema.changes
        if not d_t.counts.rows_changed:
            plan.stats.action = "merged" if plan.add_columns or plan.drop_columns or plan.widen else "kept"
            return plan
        if "spark" in (d_o.engine, d_t.engine) and not plan.restore_columns:  # restoring rewrites every row id
            self.spark_fold(plan, d_o, d_t, o.primary_key, schema.schema)
        elif sourceside.pays(d_o, d_t) and sourceside.applies(plan, d_o, d_t, schema.schema):
            # The source changed far more than dest: start from its table, write dest's keys onto it.
            sourceside.merge_onto_source(plan, d_o, d_t, o.primary_key, schema.schema, self.granularity,
                                         self.resolver, lambda c: self.report(plan, c))
        else:
            plan.by_columns = True
            plan.dest_rows = self.repo.open_table_version(o).count_rows()
            release_memory()  # what reading both diffs left in the heaps: before the fold and the commit
            self.fold_buckets(plan, self.narrowed_rows(plan, ours, d_t, o.primary_key, schema.schema),
                              o.primary_key, schema.schema)
        plan.stats.action = "merged"
        return plan

    def fold_buckets(self, plan: TablePlan, pairs: Iterator[tuple[pa.Table, pa.Table]], key: Sequence[str],
                     merged: pa.Schema) -> None:
        """Classify and fold each (ours, theirs) pair of rows (key-hash buckets of a large merge),
        side by side on a few threads. Each bucket folds into a plan of its own, added to ``plan``
        in bucket order, so the result and the order of conflicts do not depend on the threads.
        Hand resolutions are looked up (and marked used) by one thread: those folds run in turn."""
        def work(pair: tuple[pa.Table, pa.Table]) -> tuple[Any, TablePlan | None, list[Conflict]]:
            classified = classify(pair[0], pair[1], key, merged, self.granularity, plan.restore_columns)
            if self.resolver.by_hand:
                return classified, None, []
            part, found = plan.part(), []
            fold(part, classified, self.resolver, merged, found.append)
            return None, part, found

        for classified, part, found in ordered_map(work, pairs):
            if part is None:
                fold(plan, classified, self.resolver, merged, lambda c: self.report(plan, c))
                continue
            plan.absorb(part)
            for conflict in found:
                self.report(plan, conflict)

    def narrowed_rows(self, plan: TablePlan, ours: TableDiff, theirs: TableDiff, key: Sequence[str],
                      merged: pa.Schema) -> Iterator[tuple[pa.Table, pa.Table]]:
        """:func:`paired_rows`, except that the source's column writes (rows of its diff read
        through their changed columns only, :meth:`TableDiff.rows_through_columns`) on keys dest
        did not change go straight to ``plan`` as column updates: their other columns are never
        read. Only the rest, with full images, goes to the fold."""
        split = None if ours.spilled else theirs.rows_through_columns()
        if split is None or split[1].table is None:
            yield from paired_rows(ours, theirs, key, merged)
            return
        narrow, rest = split
        ours_rows = ours.rows_with_row_ids()
        keys_o = arrowtypes.to_polars(ours_rows.select(list(key)))
        full = [rest.table]
        for table in narrow:
            rows = arrowtypes.to_polars(table)
            # Updates of keys dest did not change: a mask from a join against dest's keys (few),
            # not a join of the pair's rows (a backfill's: every row) against themselves.
            dest_keys = rows.select(key).with_row_index("\x01at").join(keys_o, on=list(key), how="semi",
                                                                         nulls_equal=True)["\x01at"]
            mask = (rows["change"] == "update").to_numpy(writable=True)
            mask[dest_keys.to_numpy()] = False
            direct = rows.filter(pl.Series(mask)) if not mask.all() else rows
            others = rows.filter(pl.Series(~mask)) if mask.any() else rows
            if direct.height and not take_source_columns(plan, direct, list(key), merged):
                others = rows
            if others.height:
                full.append(theirs.complete(others.select("_before_rowid", "_after_rowid").to_arrow()))
        yield ours_rows, pa.concat_tables(full, promote_options="permissive")

    def spark_fold(self, plan: TablePlan, d_o: TableDiff, d_t: TableDiff, key: Sequence[str],
                   merged: pa.Schema) -> None:
        """The fold of one table run by Spark executors; its rows are written at publish."""
        fold_ = SparkFold(self.spark, d_o, d_t, key, merged, self.granularity, self.resolver)
        self.spark_folds[plan.name] = fold_
        room = None if self.max_conflicts is None else max(0, self.max_conflicts - len(self.conflicts))
        fold_.run(plan, lambda c: self.report(plan, c), room)
        plan.executed = fold_

    def decide_column(self, plan: TablePlan, conflict: Conflict) -> str | None:
        """A column conflict: recorded if unresolved; the choice that settles it otherwise."""
        decision = self.resolver.decide_table(conflict)
        if decision is None:
            self.conflicts.append(conflict)
            plan.stats.conflicts += 1
            return None
        if decision.by == "strategy":
            plan.stats.resolved += 1
        return decision.choice


def changed_columns(d: TableDiff) -> set[str]:
    """Columns whose values a side changed: updated cells, and non-null values of inserted rows."""
    out: set[str] = set()
    for batch in d.iter_batches(max_rows=1 << 20, columns=None):
        rows = pa.Table.from_batches([batch])
        out.update(pl.from_arrow(rows.column("changed_columns")).explode().drop_nulls().unique().to_list())
        frame = pl.from_arrow(rows.select(["change", "after"]))
        inserts = frame.filter(pl.col("change") == "insert")
        if inserts.height and isinstance(inserts.schema["after"], pl.Struct):
            values = inserts.select(pl.col("after").struct.unnest())
            out.update(c for c in values.columns if values[c].null_count() < values.height)
    return out


def paired_rows(ours: TableDiff, theirs: TableDiff, key: Sequence[str],
                merged: pa.Schema) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The rows of both diffs (with row ids) in pairs that hold every row of the keys they name:
    all at once when both diffs fit in memory, else per key-hash bucket from disk — the merge's
    memory then follows one bucket, not the change."""
    if not (ours.spilled or theirs.spilled):
        yield from in_slices(ours.rows_with_row_ids(), theirs.rows_with_row_ids())
        return
    key_types = pl.from_arrow(merged.empty_table().select(list(key))).schema
    sides = [_buckets(d, key, key_types) for d in (ours, theirs)]
    if sides[0] is not None and sides[1] is not None:  # the spilled diff's buckets, read once
        yield from zip(sides[0], sides[1])
        return
    buckets = CandidateBuffer(key, key_types, budget=0)  # partition everything: budget 0 spills at once
    try:
        empty = []
        for side, d in enumerate((ours, theirs)):
            for batch in d.iter_batches(max_rows=1 << 18, row_ids=True):
                buckets.add(side, pa.Table.from_batches([batch]))
            empty.append(d.rows_with_row_ids_schema())
        if not buckets.spilled:  # nothing at all was added
            yield tuple(s.empty_table() for s in empty)  # type: ignore[misc]
            return
        yield from buckets.bucket_tables((empty[0], empty[1]))
    finally:
        buckets.close()



#: The source's changed rows are folded this many at a time against dest's (when dest's are at
#: most as many): what the fold holds at once is a slice of the change, not the change.
FOLD_ROWS = 1 << 17


def in_slices(ours: pa.Table, theirs: pa.Table) -> Iterator[tuple[pa.Table, pa.Table]]:
    """(``ours``, a slice of ``theirs``) pairs that together hold every row of ``theirs`` once. A
    slice is a complete pair: the fold reads dest's rows only for the keys the source changed, and
    each such key is in one slice (keys are unique in a diff)."""
    if ours.num_rows > FOLD_ROWS or theirs.num_rows <= FOLD_ROWS:
        yield ours, theirs  # a large dest change is converted and joined once
        return
    for start in range(0, theirs.num_rows, FOLD_ROWS):
        yield ours, theirs.slice(start, FOLD_ROWS)


#: Dest's diff is read only for the keys the source changed when the source changed at most this
#: many rows (their keys are held in memory); past it the whole diff is read, as the source-side
#: plan and key-hash buckets need.
DEST_KEYS_LIMIT = 200_000


def dest_rows(d_o: TableDiff, d_t: TableDiff) -> TableDiff:
    """Dest's diff as the fold reads it. The fold classifies only the keys the source changed, so
    with a small local source diff not read through column pairs, dest's diff is restricted to those keys
    (:meth:`TableDiff.only_keys`): the base images of dest's other changed rows are never read
    (they were ~40% of a small merge's reads on SF1). Otherwise ``d_o`` itself."""
    if "spark" in (d_o.engine, d_t.engine) or d_t.count_first or d_o.before_snapshot.tv is None or \
            d_o.primary_key != d_t.primary_key:
        return d_o
    key = list(d_o.primary_key)
    so, st = d_o.after_snapshot.schema, d_t.after_snapshot.schema
    if any(so.field(k).type != st.field(k).type for k in key):
        return d_o
    # A source read through column pairs (a backfill) reaches the fold as narrow rows: asking its
    # keys here (or ``spilled``) would read and spill its whole rows just to restrict dest's few.
    if d_t.candidate_plan.column_pairs or d_t.counts.rows_changed > DEST_KEYS_LIMIT or d_t.spilled:
        return d_o
    return d_o.only_keys(d_t.rows_with_row_ids().select(key))


def dest_changed(ours: TableDiff, d_o: TableDiff) -> bool:
    """Whether dest's diff ``d_o`` has rows, asked of :func:`dest_rows`' diff first: a change
    among the source's keys, or an insert or delete seen in the keys it read, settles it without
    reading the rest."""
    if ours is d_o:
        return d_o.changed
    return ours.changed or bool(ours.whole_changed) or d_o.changed


def _buckets(d: TableDiff, key: Sequence[str], key_types: pl.Schema) -> Iterator[pa.Table] | None:
    """The rows (with row ids) of ``d`` in the key-hash buckets spilled diffs use: read from its
    spill file bucket by bucket, or cut in memory; None if ``d`` spilled in other buckets."""
    spilled = d.row_buckets(key_types, SPILL_BUCKETS)
    if spilled is not None or d.spilled:
        return spilled
    rows = d.rows_with_row_ids()
    parts = dict(split_by_bucket(rows, key, key_types, SPILL_BUCKETS))
    return (parts.get(b, rows.slice(0, 0)) for b in range(SPILL_BUCKETS))
