"""Three-way merge of two commits of a repository, at table, schema, row and cell level.

The lakeFS three-way table is applied at every level. Per table, with base B, ours O (the
destination) and theirs T (the source):

* table level: a table changed on one side only is taken from that side without touching data
  (the destination's commit points at the source's Lance version); added on one side → added;
  dropped on one side and unchanged on the other → dropped; dropped vs modified → conflict
  ``table.drop_modify``; added on both → merged row by row against an empty base if keys and
  schemas agree, else ``table.add_add``.
* schema: columns are matched by name; additions, drops and widenings of one side are applied;
  the same column added or changed differently on both sides is ``schema.column``; dropped on
  one side while the other changed values in it is ``schema.drop_modify``; a changed primary key
  is ``schema.primary_key``.
* rows (by primary key) and cells: from the two diffs B→O and B→T (costs follow the change):
  changed on one side → taken; changed alike → kept; deleted on both → deleted; deleted vs
  changed → ``row.delete_modify``; inserted on both with different values →
  ``row.insert_insert``; updated on both → merged cell by cell, and the same cell changed
  differently is ``row.update_update``.

Strategies (``source-wins`` / ``dest-wins``, globally or per table) resolve conflicts; without
one, a merge with conflicts publishes nothing. The result is applied to the destination branch in
one transaction: one merge commit whose parents are (destination tip, source tip).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

import polars as pl
import pyarrow as pa

from trimerge.diff.engine import TableDiff, Snapshot
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import (
    ConcurrentWriteError,
    InvalidOperationError,
    ReadOnlyRefError,
    RefSyntaxError,
    TrimergeError,
)
from trimerge.lineage.repository import Ref, Repository
from trimerge.lineage.tables import is_widening, plain_type
from trimerge.merge.resolutions import Resolution, Resolutions

Strategy = Literal["source-wins", "dest-wins"]
Granularity = Literal["cell", "row", "table"]
STRATEGIES = ("source-wins", "dest-wins")
GRANULARITIES = ("cell", "row", "table")


class MergeConflictError(TrimergeError):
    """The merge has conflicts and no strategy resolves them; nothing was published.

    ``result`` carries every conflict (``result.conflicts``, ``result.report(...)``)."""

    exit_code = 1

    def __init__(self, result: "MergeResult"):
        n = len(result.conflicts)
        tables = sorted({c.table for c in result.conflicts})
        super().__init__(f"merge of {result.source_ref!r} into {result.dest!r} has {n} conflict(s) in "
                         f"{', '.join(tables)}; nothing was published (use --strategy or resolve)")
        self.result = result


class MergeBaseError(TrimergeError):
    """Several merge bases disagree about a table (a criss-cross history)."""


@dataclass(frozen=True)
class Conflict:
    """One conflict: ``kind`` is e.g. ``row.update_update``; ``key`` the primary key (dict) for
    row conflicts; ``columns`` the conflicting columns; ``base``/``ours``/``theirs`` the values
    (dicts of column → value; None where the row or table is absent)."""

    kind: str
    table: str
    key: Mapping[str, Any] | None = None
    columns: tuple[str, ...] = ()
    base: Mapping[str, Any] | None = None
    ours: Mapping[str, Any] | None = None
    theirs: Mapping[str, Any] | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "table": self.table, "key": _jsonable(self.key), "columns": list(self.columns),
                "base": _jsonable(self.base), "ours": _jsonable(self.ours), "theirs": _jsonable(self.theirs),
                "message": self.message}

    def value_lines(self, width: int = 40) -> list[str]:
        """One line per conflicting column: its value in base, dest (``ours``) and source (``theirs``),
        each cut to ``width`` characters; ``(no row)`` where that side has no such row."""
        def shown(side: Mapping[str, Any] | None, column: str) -> str:
            if side is None:
                return "(no row)"
            text = repr(side.get(column))
            return text if len(text) <= width else text[:width - 1] + "…"

        if not (self.base or self.ours or self.theirs):
            return []
        columns = self.columns or tuple(dict.fromkeys(
            c for side in (self.base, self.ours, self.theirs) if side for c in side if c not in (self.key or {})))
        return [f"{c}: base {shown(self.base, c)}, dest {shown(self.ours, c)}, source {shown(self.theirs, c)}"
                for c in columns[:8]]

    def describe(self) -> str:
        where = self.table
        if self.key:
            where += "[" + ", ".join(f"{k}={v!r}" for k, v in self.key.items()) + "]"
        cols = f" columns {', '.join(self.columns)}" if self.columns else ""
        return f"{self.kind} in {where}{cols}" + (f": {self.message}" if self.message else "")


@dataclass
class TableMergeStats:
    """What the merge did to one table."""

    action: str = "unchanged"  # unchanged | kept | taken | added | dropped | merged | conflict
    rows_from_source: int = 0  # rows inserted, updated or deleted on dest because of the source
    converged: int = 0  # rows changed alike on both sides
    cells_merged: int = 0  # cells taken from the source inside rows both sides updated
    conflicts: int = 0
    resolved: int = 0  # conflicts resolved by the strategy
    schema_changes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class MergeResult:
    """Outcome of :func:`merge` (also of :func:`revert` and :func:`cherry_pick`)."""

    status: Literal["merged", "up-to-date", "conflicts"]
    source_ref: str
    dest: str
    source: Commit
    dest_commit: Commit
    base: list[Commit]
    commit: Commit | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    stats: dict[str, TableMergeStats] = field(default_factory=dict)
    dry_run: bool = False
    strategy: Any = None
    granularity: str = "cell"

    @property
    def has_conflicts(self) -> bool:
        return bool(self.conflicts)

    def conflicts_table(self) -> pa.Table:
        """One row per conflicting cell (``row.update_update``), row or table; values as JSON text."""
        rows = []
        for c in self.conflicts:
            cells = c.columns if c.kind == "row.update_update" and c.columns else [None]
            for col in cells:
                pick = (lambda d: None if d is None else {col: d.get(col)}) if col else (lambda d: d)
                rows.append({"kind": c.kind, "table": c.table,
                             "key": json.dumps(_jsonable(c.key), sort_keys=True) if c.key is not None else None,
                             "column": col, "columns": list(c.columns),
                             "base": _json_text(pick(c.base)), "ours": _json_text(pick(c.ours)),
                             "theirs": _json_text(pick(c.theirs)), "message": c.message})
        schema = pa.schema([("kind", pa.string()), ("table", pa.string()), ("key", pa.string()),
                            ("column", pa.string()), ("columns", pa.list_(pa.string())), ("base", pa.string()),
                            ("ours", pa.string()), ("theirs", pa.string()), ("message", pa.string())])
        return pa.Table.from_pylist(rows, schema=schema)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "source": {"ref": self.source_ref, "commit": self.source.id},
            "dest": {"branch": self.dest, "commit": self.dest_commit.id},
            "base": [b.id for b in self.base],
            "commit": self.commit.id if self.commit else None,
            "dry_run": self.dry_run,
            "strategy": self.strategy,
            "granularity": self.granularity,
            "stats": {n: s.to_json() for n, s in sorted(self.stats.items())},
            "conflicts": [c.to_json() for c in self.conflicts],
        }

    def report(self, fmt: str = "markdown") -> str:
        """Render the result for CI: ``junit``, ``sarif``, ``markdown``, ``json`` or ``github``."""
        from trimerge.merge.reports import render

        return render(self, fmt)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def _json_text(v: Any) -> str | None:
    return None if v is None else json.dumps(_jsonable(v), sort_keys=True)


def _same(x: Any, y: Any) -> bool:
    """Null-safe value equality with NaN equal to NaN (the diff engine's semantics)."""
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (x != x and y != y)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return x == y


def _strategy_for(strategy: Any, table: str) -> Strategy | None:
    if strategy is None or isinstance(strategy, str):
        return strategy
    return strategy.get(table, strategy.get("*"))


def _validate_options(strategy: Any, granularity: str) -> None:
    values = [strategy] if strategy is None or isinstance(strategy, str) else list(strategy.values())
    for s in values:
        if s is not None and s not in STRATEGIES:
            raise InvalidOperationError(f"unknown strategy {s!r} (use {', '.join(STRATEGIES)})")
    if granularity not in GRANULARITIES:
        raise InvalidOperationError(f"unknown granularity {granularity!r} (use {', '.join(GRANULARITIES)})")


# ------------------------------------------------------------------------------------------ planning
@dataclass
class _TablePlan:
    """What to do to dest's table ``name``."""

    name: str
    stats: TableMergeStats
    set_to: TableVersion | None = None  # point dest at this version (no data written)
    drop: bool = False
    add_columns: list[pa.Field] = field(default_factory=list)
    widen: list[tuple[str, pa.DataType]] = field(default_factory=list)
    drop_columns: list[str] = field(default_factory=list)
    upserts: list[dict[str, Any]] = field(default_factory=list)  # full rows in the merged schema
    upsert_tables: list[pa.Table] = field(default_factory=list)  # same, columnar (bulk path)
    deletes: list[dict[str, Any]] = field(default_factory=list)  # key dicts
    merged_schema: pa.Schema | None = None
    # Where dest's current rows for the upserts and deletes are: (row id, key) pairs, when known for
    # every one of them. Lets the apply remove rows by id and append, instead of joining on keys.
    restore_columns: list[str] = field(default_factory=list)  # re-added columns filled from the source
    restore_from: TableVersion | None = None
    dest_row_ids: list[int] = field(default_factory=list)
    dest_row_keys: list[pa.Table] = field(default_factory=list)
    ids_complete: bool = True

    @property
    def writes(self) -> bool:
        return bool(self.add_columns or self.widen or self.drop_columns or self.upserts or self.upsert_tables
                    or self.deletes)


class _ThreeWay:
    def __init__(self, repo: Repository, base: Commit | None, ours: Commit, theirs: Commit, *, strategy: Any,
                 granularity: str, base_tables: Mapping[str, TableVersion] | None = None, engine: str = "local",
                 spark: Any = None, resolutions: Resolutions | None = None):
        self.resolutions = resolutions if resolutions is not None else Resolutions()
        self.engine = engine
        self.spark = spark
        self.repo = repo
        self.base = base
        self.ours = ours
        self.theirs = theirs
        self.strategy = strategy
        self.granularity = granularity
        self.base_tables = dict(base_tables if base_tables is not None else (base.tables if base else {}))
        self.conflicts: list[Conflict] = []
        self.plans: dict[str, _TablePlan] = {}

    def run(self) -> None:
        names = sorted(self.base_tables.keys() | self.ours.tables.keys() | self.theirs.tables.keys())
        for name in names:
            self.plans[name] = self._table(name)

    def _conflict(self, plan: _TablePlan, conflict: Conflict, resolvable: bool = True) -> Strategy | None:
        """Record a conflict; return the strategy that resolves it (None: stays a conflict). A
        resolution given for a table or schema conflict (``ours``/``theirs``) comes first."""
        if conflict.key is None and resolvable:
            found = self.resolutions.find(conflict.kind, conflict.table, None, None)
            if found is not None:
                if found.resolution not in ("ours", "theirs"):
                    raise InvalidOperationError(f"{found.describe()}: a {conflict.kind} conflict is resolved by "
                                                "'ours' or 'theirs' only")
                self.resolutions.applied += 1
                return "dest-wins" if found.resolution == "ours" else "source-wins"
        strategy = _strategy_for(self.strategy, plan.name) if resolvable else None
        if strategy is None:
            self.conflicts.append(conflict)
            plan.stats.conflicts += 1
        else:
            plan.stats.resolved += 1
        return strategy

    def _table_conflict(self, plan: _TablePlan, conflict: Conflict, theirs: TableVersion | None) -> _TablePlan:
        """A conflict about a whole table: source-wins takes the source's table (or its drop),
        dest-wins keeps dest's."""
        s = self._conflict(plan, conflict)
        if s == "source-wins":
            if theirs is None:
                plan.drop, plan.stats.action = True, "dropped"
            else:
                plan.set_to, plan.stats.action = theirs, "taken"
        else:
            plan.stats.action = "kept" if s == "dest-wins" else "conflict"
        return plan

    def _diff(self, name: str, before: TableVersion | None, after: TableVersion | None) -> TableDiff:
        td = TableDiff(name, Snapshot(self.repo, before), Snapshot(self.repo, after))
        if self.engine != "local" and td.storage_status != "unchanged":
            from trimerge.diff import spark as sp

            if self.engine == "spark" or sp.estimate_rows(td) > sp.spark_threshold():
                self.spark = self.spark or sp.get_spark()
                td.use_spark(self.spark)
        return td

    # -- table level
    def _table(self, name: str) -> _TablePlan:
        b, o, t = self.base_tables.get(name), self.ours.tables.get(name), self.theirs.tables.get(name)
        plan = _TablePlan(name, TableMergeStats())
        loc = lambda tv: tv.location if tv else None  # noqa: E731
        if loc(o) == loc(t):
            if loc(o) == loc(b):
                plan.stats.action = "unchanged"
            else:
                plan.stats.action = "dropped" if o is None else "kept"
            return plan
        if loc(t) == loc(b):
            plan.stats.action = "kept"  # only dest changed
            return plan
        if b is None:
            if o is None:  # added on the source only
                plan.set_to, plan.stats.action = t, "added"
                plan.stats.rows_from_source = self.repo.open_table_version(t).count_rows()
                return plan
            return self._add_add(plan, o, t)
        if o is not None and loc(o) == loc(b):
            # Only the source changed it (or dropped it): take the source's table as is.
            if t is None:
                plan.drop, plan.stats.action = True, "dropped"
            else:
                plan.set_to, plan.stats.action = t, "taken"
                plan.stats.rows_from_source = self._diff(name, b, t).counts.rows_changed
            return plan
        if o is None and t is None:
            plan.stats.action = "dropped"
            return plan
        if o is None or t is None:
            return self._drop_modify(plan, b, o, t)
        if self.granularity == "table":
            d_o, d_t = self._diff(name, b, o), self._diff(name, b, t)
            if not d_o.changed:
                plan.set_to, plan.stats.action = t, "taken"
                return plan
            if not d_t.changed:
                plan.stats.action = "kept"
                return plan
            return self._table_conflict(plan, Conflict("table.update_update", name, message="changed on both sides"), t)
        return self._merge_rows(plan, b, o, t)

    def _drop_modify(self, plan: _TablePlan, b: TableVersion, o: TableVersion | None, t: TableVersion | None) -> _TablePlan:
        survivor = o or t
        if not self._diff(plan.name, b, survivor).changed:
            # Dropped on one side, unchanged on the other: dropped.
            plan.drop = o is not None
            plan.stats.action = "dropped"
            return plan
        return self._table_conflict(plan, Conflict("table.drop_modify", plan.name,
                                                   message=f"dropped on {'dest' if o is None else 'source'}, "
                                                           f"modified on {'source' if o is None else 'dest'}"), t)

    def _add_add(self, plan: _TablePlan, o: TableVersion, t: TableVersion) -> _TablePlan:
        so = self.repo.open_table_version(o).schema
        st = self.repo.open_table_version(t).schema
        same_schema = [(f.name, f.type) for f in so] == [(f.name, f.type) for f in st] or \
            {(f.name, f.type) for f in so} == {(f.name, f.type) for f in st}
        if o.primary_key != t.primary_key or not same_schema:
            return self._table_conflict(plan, Conflict("table.add_add", plan.name,
                                                       message="added on both sides with different keys or schemas"), t)
        return self._merge_rows(plan, None, o, t)

    # -- schema
    def _merge_schema(self, plan: _TablePlan, b: TableVersion | None, o: TableVersion, t: TableVersion,
                      d_o: TableDiff, d_t: TableDiff) -> pa.Schema | None:
        """The merged schema (None when the primary key conflicts); records schema changes to
        apply to dest in ``plan``."""
        so = self.repo.open_table_version(o).schema
        st = self.repo.open_table_version(t).schema
        sb = self.repo.open_table_version(b).schema if b else None
        keys = {"base": b.primary_key if b else None, "dest": o.primary_key, "source": t.primary_key}
        converged = o.primary_key == t.primary_key and sb is not None and all(k in sb.names for k in o.primary_key)
        if b is not None and (o.primary_key != b.primary_key or t.primary_key != b.primary_key) and not converged:
            moved = (set(b.primary_key) ^ set(o.primary_key)) | (set(b.primary_key) ^ set(t.primary_key))
            self._table_conflict(plan, Conflict("schema.primary_key", plan.name, columns=tuple(sorted(moved)),
                                                message=f"primary key changed ({keys})"), t)
            return None
        retyped = sorted(k for k in o.primary_key if k in st.names and k in so.names and
                         (plain_type(so.field(k).type) != plain_type(st.field(k).type) or
                          (sb is not None and k in sb.names and
                           plain_type(sb.field(k).type) != plain_type(so.field(k).type))))
        if retyped:
            self._table_conflict(plan, Conflict("schema.primary_key", plan.name, columns=tuple(retyped),
                                                message="type of key column(s) changed"), t)
            return None
        fields: list[pa.Field] = list(so)
        names_o = set(so.names)
        changed_o = _changed_columns(d_o)
        changed_t = _changed_columns(d_t)
        for f in st:
            if f.name in names_o:
                g = so.field(f.name)
                if g.type == f.type and g.nullable == f.nullable:
                    continue
                bt = sb.field(f.name).type if sb is not None and f.name in sb.names else None
                if bt is not None and g.type == bt and is_widening(bt, f.type):
                    plan.widen.append((f.name, f.type))  # widened on the source only
                    fields[so.get_field_index(f.name)] = g.with_type(f.type)
                    plan.stats.schema_changes.append(f"widen {f.name} to {f.type}")
                elif bt is not None and f.type == bt and is_widening(bt, g.type):
                    continue  # widened on dest only
                elif g.type == f.type:
                    continue  # only nullability differs on a column both have: keep dest's
                else:
                    s = self._conflict(plan, Conflict("schema.column", plan.name, columns=(f.name,),
                                                      base={"type": str(bt)} if bt else None,
                                                      ours={"type": str(g.type)}, theirs={"type": str(f.type)},
                                                      message="column type changed differently"))
                    # source-wins widens dest's column when that is lossless; otherwise dest's type
                    # stays and the source's values are cast into it.
                    if s == "source-wins" and is_widening(g.type, f.type):
                        plan.widen.append((f.name, f.type))
                        fields[so.get_field_index(f.name)] = g.with_type(f.type)
                        plan.stats.schema_changes.append(f"widen {f.name} to {f.type}")
            elif sb is not None and f.name in sb.names:
                # Dest dropped it; the source kept it.
                if f.name in changed_t:
                    s = self._conflict(plan, Conflict("schema.drop_modify", plan.name, columns=(f.name,),
                                                      message="dropped on dest, values changed on source"))
                    if s == "source-wins":
                        plan.add_columns.append(f.with_nullable(True))
                        plan.restore_columns.append(f.name)
                        plan.restore_from = t
                        fields.append(f.with_nullable(True))
                        plan.stats.schema_changes.append(f"restore {f.name}")
            else:
                plan.add_columns.append(f.with_nullable(True))
                fields.append(f.with_nullable(True))
                plan.stats.schema_changes.append(f"add {f.name}")
        for g in so:
            if g.name in st.names or sb is None or g.name not in sb.names:
                continue
            # The source dropped it; dest kept it.
            if g.name in changed_o:
                s = self._conflict(plan, Conflict("schema.drop_modify", plan.name, columns=(g.name,),
                                                  message="dropped on source, values changed on dest"))
                if s != "source-wins":
                    continue
            if g.name in o.primary_key:
                continue
            plan.drop_columns.append(g.name)
            fields = [x for x in fields if x.name != g.name]
            plan.stats.schema_changes.append(f"drop {g.name}")
        return pa.schema(fields)

    # -- rows and cells
    def _merge_rows(self, plan: _TablePlan, b: TableVersion | None, o: TableVersion, t: TableVersion) -> _TablePlan:
        name = plan.name
        d_o, d_t = self._diff(name, b, o), self._diff(name, b, t)
        if b is not None and not d_o.changed:
            plan.set_to, plan.stats.action = t, "taken"  # dest rewrote it without changing it
            plan.stats.rows_from_source = d_t.counts.rows_changed
            return plan
        if b is not None and not d_t.changed:
            plan.stats.action = "kept"
            return plan
        merged = self._merge_schema(plan, b, o, t, d_o, d_t)
        if merged is None:
            return plan
        plan.merged_schema = merged
        key = list(o.primary_key)
        ro, rt = d_o.rows_with_row_ids(), d_t.rows_with_row_ids()
        if not rt.num_rows:
            plan.stats.action = "merged" if plan.add_columns or plan.drop_columns or plan.widen else "kept"
            return plan
        pt = pl.from_arrow(rt)
        if ro.num_rows:
            keys_o = pl.from_arrow(ro.select(key))
            only_t = pt.join(keys_o, on=key, how="anti")
            both_t = pt.join(keys_o, on=key, how="semi")
        else:
            only_t, both_t = pt, pt.clear()
        # Changed on the source only: take the source's row (bulk, columnar).
        self._take_source_rows(plan, only_t, key, merged)
        if both_t.height:
            both_o = pl.from_arrow(ro).join(both_t.select(key), on=key, how="semi")
            self._merge_overlap(plan, key, both_o, both_t, merged)
        plan.stats.action = "merged"
        return plan

    def _take_source_rows(self, plan: _TablePlan, rows: pl.DataFrame, key: list[str], merged: pa.Schema) -> None:
        if not rows.height:
            return
        deletes = rows.filter(pl.col("change") == "delete")
        if deletes.height:
            plan.deletes.extend(deletes.select(key).to_dicts())
        # Dest still holds the base image of every row only the source changed: its base row id.
        existing = rows.filter(pl.col("change") != "insert")
        if existing.height:
            if existing["_before_rowid"].null_count():
                plan.ids_complete = False
            else:
                plan.dest_row_ids.extend(existing["_before_rowid"].to_list())
                plan.dest_row_keys.append(existing.select(key).to_arrow())
        keep = rows.filter(pl.col("change") != "delete")
        if keep.height:
            # Dest's row is the base image (only the source changed it): start from it and overlay the
            # source's columns, so columns the source lacks (dropped there, kept here) keep their values.
            after_fields = _struct_fields(keep, "after")
            before_fields = _struct_fields(keep, "before")
            cols = []
            for f in merged:
                if f.name in key:
                    continue
                if f.name in after_fields:
                    cols.append(pl.col("after").struct.field(f.name).alias(f.name))
                elif f.name in before_fields:
                    cols.append(pl.col("before").struct.field(f.name).alias(f.name))
            rows_t = keep.select(*key, *cols).to_arrow()
            base_t = keep.select(*key, *[pl.col("before").struct.field(n).alias(n) for n in before_fields]).to_arrow() \
                if before_fields else None
            plan.upsert_tables.append(_conform_rows(rows_t, merged, fallback=base_t))
        plan.stats.rows_from_source += rows.height

    def _merge_overlap(self, plan: _TablePlan, key: list[str], ro: pl.DataFrame, rt: pl.DataFrame,
                       merged: pa.Schema) -> None:
        """Keys changed on both sides: row- or cell-level three-way decisions."""
        ours = {tuple(r[k] for k in key): r for r in ro.to_dicts()}
        value_columns = [f.name for f in merged if f.name not in key]
        for r_t in rt.to_dicts():
            k = tuple(r_t[c] for c in key)
            r_o = ours[k]
            kd = dict(zip(key, k))
            co, ct = r_o["change"], r_t["change"]
            before = r_o["before"] or r_t["before"]
            after_o, after_t = r_o["after"], r_t["after"]
            if co == "delete" and ct == "delete":
                plan.stats.converged += 1
                continue
            if co == "delete" or ct == "delete":
                if self._resolve_row(plan, "row.delete_modify", kd, None, before, after_o, after_t, merged,
                                     r_o["_after_rowid"], value_columns):
                    continue
                s = self._conflict(plan, Conflict("row.delete_modify", plan.name, kd, (), before, after_o, after_t,
                                                  message=f"deleted on {'dest' if co == 'delete' else 'source'}, "
                                                          f"changed on {'source' if co == 'delete' else 'dest'}"))
                if s == "source-wins":
                    self._apply_row(plan, kd, after_t, ct == "delete", r_o["_after_rowid"],
                                    None if co == "delete" else _row(kd, after_o, value_columns))
                continue
            full_o = _row(kd, after_o, value_columns)
            full_t = _row(kd, after_t, value_columns)
            differing = [c for c in value_columns if not _same(full_o.get(c), full_t.get(c))]
            if not differing:
                plan.stats.converged += 1  # changed alike
                continue
            if co == "insert" or ct == "insert" or self.granularity == "row":
                kind = "row.insert_insert" if co == "insert" and ct == "insert" else "row.update_update"
                cells = differing if kind == "row.update_update" else None
                if self._resolve_row(plan, kind, kd, cells, before, after_o, after_t, merged, r_o["_after_rowid"],
                                     value_columns):
                    continue
                s = self._conflict(plan, Conflict(kind, plan.name, kd, tuple(differing),
                                                  _pick(before, differing), _pick(after_o, differing),
                                                  _pick(after_t, differing)))
                if s == "source-wins":
                    self._apply_row(plan, kd, after_t, False, r_o["_after_rowid"], full_o)
                continue
            # Cell level: take the source's cell where only the source changed it.
            changed_o = set(r_o["changed_columns"] or [])
            changed_t = set(r_t["changed_columns"] or [])
            row = dict(full_o)
            conflict_cols = []
            taken = 0
            for c in differing:
                if c in changed_t and c not in changed_o:
                    row[c] = full_t.get(c)
                    taken += 1
                elif c in changed_t and c in changed_o:
                    picked = self._resolve_cell(plan, kd, c, before, full_o, full_t, merged)
                    if picked is _UNRESOLVED:
                        conflict_cols.append(c)
                    elif not _same(picked, full_o.get(c)):
                        row[c] = picked
                        taken += 1
            if conflict_cols:
                s = self._conflict(plan, Conflict("row.update_update", plan.name, kd, tuple(conflict_cols),
                                                  _pick(before, conflict_cols), _pick(after_o, conflict_cols),
                                                  _pick(after_t, conflict_cols)))
                if s == "source-wins":
                    for c in conflict_cols:
                        row[c] = full_t.get(c)
                        taken += 1
            if taken:
                plan.upserts.append(row)
                self._dest_row(plan, kd, r_o["_after_rowid"])
                plan.stats.cells_merged += taken
                plan.stats.rows_from_source += 1

    # -- resolutions given by hand (before strategies)
    def _resolve_cell(self, plan: _TablePlan, key: dict, column: str, before: Mapping[str, Any] | None,
                      full_o: Mapping[str, Any], full_t: Mapping[str, Any], merged: pa.Schema) -> Any:
        """The value a resolution picks for one conflicting cell, or ``_UNRESOLVED``."""
        found = self.resolutions.find("row.update_update", plan.name, _json_text(key), column)
        if found is None:
            return _UNRESOLVED
        self.resolutions.applied += 1
        if found.resolution == "ours":
            return full_o.get(column)
        if found.resolution == "theirs":
            return full_t.get(column)
        if found.resolution == "base":
            return (before or {}).get(column)
        if column not in found.value:
            raise InvalidOperationError(f"{found.describe()}: 'value' has no {column!r} (give {{{column!r}: ...}})")
        return _typed(found, column, found.value[column], merged)

    def _resolve_row(self, plan: _TablePlan, kind: str, key: dict, cells: Sequence[str] | None,
                     before: Mapping[str, Any] | None, after_o: Mapping[str, Any] | None,
                     after_t: Mapping[str, Any] | None, merged: pa.Schema, dest_row_id: int | None,
                     value_columns: Sequence[str]) -> bool:
        """Apply resolutions to a row-level conflict; False (nothing applied) unless every cell of it
        is resolved. ``cells``: per-column resolutions (row-granularity updates), else one for the row."""
        key_text = _json_text(key)
        full_o = None if after_o is None else _row(key, after_o, value_columns)
        if cells:
            found = [self.resolutions.find(kind, plan.name, key_text, c) for c in cells]
            if any(f is None for f in found):
                return False
            row = dict(full_o or _row(key, before, value_columns))
            for c in cells:
                row[c] = self._resolve_cell(plan, key, c, before, full_o or {}, _row(key, after_t, value_columns),
                                            merged) if kind == "row.update_update" else row[c]
            plan.upserts.append(row)
            self._dest_row(plan, key, dest_row_id)
            plan.stats.rows_from_source += 1
            return True
        found = self.resolutions.find(kind, plan.name, key_text, None)
        if found is None:
            return False
        self.resolutions.applied += 1
        if found.resolution == "ours":
            return True  # dest's row (or its absence) stays
        if found.resolution == "theirs":
            self._apply_row(plan, key, after_t, after_t is None, dest_row_id, full_o)
            return True
        chosen = before if found.resolution == "base" else {
            c: _typed(found, c, v, merged) for c, v in found.value.items() if c not in key}
        if found.resolution == "value":
            unknown = [c for c in chosen if c not in value_columns]
            if unknown:
                raise InvalidOperationError(f"{found.describe()}: no column(s) {unknown} in {plan.name}")
        self._apply_row(plan, key, chosen, chosen is None, dest_row_id, full_o)
        return True

    def _apply_row(self, plan: _TablePlan, key: dict, after: Mapping[str, Any] | None, delete: bool,
                   dest_row_id: int | None, dest_row: Mapping[str, Any] | None = None) -> None:
        """Take the source's version of a row; columns the source lacks keep dest's values."""
        if delete or after is None:
            plan.deletes.append(key)
        else:
            plan.upserts.append({**(dest_row or {}), **key, **after})
        self._dest_row(plan, key, dest_row_id)
        plan.stats.rows_from_source += 1

    @staticmethod
    def _dest_row(plan: _TablePlan, key: dict, dest_row_id: int | None) -> None:
        """Remember where dest's current row for ``key`` is (None: dest has no such row)."""
        if dest_row_id is not None:
            plan.dest_row_ids.append(dest_row_id)
            plan.dest_row_keys.append(pa.Table.from_pylist([key]))


def _changed_columns(d: TableDiff) -> set[str]:
    """Columns whose values a side changed: updated cells, and non-null values of inserted rows."""
    rows = d.rows()
    if not rows.num_rows:
        return set()
    out: set[str] = set()
    for cols in rows.column("changed_columns").to_pylist():
        out.update(cols or [])
    frame = pl.from_arrow(rows.select(["change", "after"]))
    inserts = frame.filter(pl.col("change") == "insert")
    if inserts.height and isinstance(inserts.schema["after"], pl.Struct):
        values = inserts.select(pl.col("after").struct.unnest())
        out.update(c for c in values.columns if values[c].null_count() < values.height)
    return out


_UNRESOLVED = object()


def _typed(found: Resolution, column: str, value: Any, merged: pa.Schema) -> Any:
    """A hand-given value, checked against the column's type (a clear error naming the conflict)."""
    if column not in merged.names:
        raise InvalidOperationError(f"{found.describe()}: the table has no column {column!r}")
    if value is None:
        return None
    try:
        return pa.array([value], type=merged.field(column).type)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        raise InvalidOperationError(f"{found.describe()}: value {value!r} does not fit column {column!r} "
                                    f"({merged.field(column).type})") from None


def _row(key: dict, values: Mapping[str, Any] | None, columns: Sequence[str]) -> dict[str, Any]:
    row = dict(key)
    for c in columns:
        row[c] = (values or {}).get(c)
    return row


def _pick(values: Mapping[str, Any] | None, columns: Iterable[str]) -> dict[str, Any] | None:
    if values is None:
        return None
    return {c: values.get(c) for c in columns}


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def _struct_fields(frame: pl.DataFrame, column: str) -> list[str]:
    dtype = frame.schema[column]
    return [f.name for f in dtype.fields] if isinstance(dtype, pl.Struct) else []


def _conform_rows(table: pa.Table, schema: pa.Schema, fallback: pa.Table | None = None) -> pa.Table:
    """Rows in ``schema``: missing columns null, types cast. A column whose values cannot be cast
    (a type conflict the destination keeps) takes ``fallback``'s values (dest's current ones)."""
    cols = []
    for f in schema:
        if f.name in table.column_names:
            try:
                cols.append(table.column(f.name).cast(f.type))
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
        if fallback is not None and f.name in fallback.column_names:
            try:
                cols.append(fallback.column(f.name).cast(f.type))
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
        cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=_nullable(schema))


# ------------------------------------------------------------------------------------------ public API
def _resolve_inputs(source: Any, dest: Any, repo: Repository | None) -> tuple[Repository, str, str]:
    for r in (source, dest):
        if isinstance(r, Ref):
            if repo is not None and r.repo.uri != repo.uri:
                raise InvalidOperationError("source and dest belong to different repositories")
            repo = r.repo
    if repo is None:
        raise InvalidOperationError("merge needs repo=... or refs that carry their repository (repo.ref(...))")
    src = source.expr if isinstance(source, Ref) else source
    dst = dest.expr if isinstance(dest, Ref) else dest
    for r in (src, dst):
        if not isinstance(r, str):
            raise RefSyntaxError(f"a ref must be text or a Ref, not {type(r).__name__}")
    dst = repo.default_ref(dst)  # HEAD: the current branch
    if not repo.branches.exists(dst):
        if repo.tags.get_or_none(dst):
            raise ReadOnlyRefError(f"merge destination {dst!r} is a tag; merge into a branch")
        repo.resolve(dst)  # raises for unknown refs
        raise ReadOnlyRefError(f"merge destination {dst!r} is not a branch")
    return repo, src, dst


def _pick_base(repo: Repository, bases: list[Commit]) -> tuple[Commit | None, dict[str, TableVersion]]:
    """One base, or with several (criss-cross) a virtual base where they all agree per table."""
    if not bases:
        return None, {}
    if len(bases) == 1:
        return bases[0], dict(bases[0].tables)
    tables: dict[str, TableVersion] = {}
    names = set().union(*(b.tables.keys() for b in bases))
    for name in sorted(names):
        locs = {b.tables[name].location if name in b.tables else None for b in bases}
        if len(locs) > 1:
            raise MergeBaseError(
                f"the merge bases {', '.join(repo.short_id(b.id) for b in bases)} disagree on table {name!r} "
                "(criss-cross history); merge one base into the other first, then retry")
        if None not in locs:
            tables[name] = bases[0].tables[name]
    return bases[0], tables


def _restore_columns(repo: Repository, tx: Any, name: str, plan: _TablePlan) -> None:
    """Fill columns dest had dropped with the source's values for every row (a rare, whole-table
    write: a drop/modify conflict resolved in favour of the source)."""
    key = list(plan.restore_from.primary_key)
    source = pl.from_arrow(repo.open_table_version(plan.restore_from).to_table(columns=key + plan.restore_columns))
    current = pl.from_arrow(tx.read(name)).drop(plan.restore_columns)
    schema = tx.schema(name)
    filled = current.join(source, on=key, how="left").select(schema.names).to_arrow()
    tx.overwrite(name, _conform_rows(filled, schema).cast(schema))
    plan.ids_complete = False  # every row was rewritten: row ids changed


def _publish(repo: Repository, plans: Mapping[str, _TablePlan], dest: str, dest_tip: Commit,
             extra_parents: Sequence[str], refers: Sequence[str], actor: str | None, message: str, metadata: Mapping[str, str] | None) -> Commit:
    tx = repo.transaction(dest, actor=actor, message=message, metadata=metadata)
    tx.begin()
    try:
        if tx.base.id != dest_tip.id:
            raise ConcurrentWriteError(f"branch {dest!r} moved while merging; refresh and retry")
        for commit_id in refers:
            tx.refer(commit_id)
        for name, plan in sorted(plans.items()):
            if plan.drop:
                tx.drop_table(name)
            elif plan.set_to is not None:
                tx.set_table(name, plan.set_to)
            if not plan.writes:
                continue
            if plan.drop_columns:
                tx.drop_columns(name, plan.drop_columns)
            for col, dtype in plan.widen:
                tx.alter_column(name, col, dtype)
            if plan.add_columns:
                tx.add_columns(name, [f.with_nullable(True) for f in plan.add_columns])
            if plan.restore_columns:
                _restore_columns(repo, tx, name, plan)
            parts = list(plan.upsert_tables)
            if plan.upserts:
                merged = plan.merged_schema
                dicts = [{f.name: r.get(f.name) for f in merged} for r in plan.upserts]
                parts.append(_conform_rows(pa.Table.from_pylist(dicts, schema=_nullable(merged)), merged))
            schema = tx.schema(name)
            rows = pa.concat_tables([_conform_rows(p, schema) for p in parts]).cast(schema) if parts else None
            if plan.ids_complete and plan.dest_row_keys:
                keys = pa.concat_tables([k.cast(pa.schema([schema.field(c) for c in k.column_names]))
                                         for k in plan.dest_row_keys])
                if tx.replace_rows(name, plan.dest_row_ids, keys, rows if rows is not None else schema.empty_table()):
                    continue
            if plan.deletes:
                tx.delete_keys(name, pa.Table.from_pylist(plan.deletes))
            if rows is not None:
                tx.upsert(name, rows)
        for p in extra_parents:
            tx.add_parent(p)
        if not extra_parents and not tx.has_changes:
            tx.abort()
            return None
        return tx.publish()
    except BaseException:
        tx.abort()
        raise


def _run(repo: Repository, *, source_ref: str, dest: str, theirs: Commit, base: Commit | None,
         base_tables: dict[str, TableVersion] | None, bases: list[Commit], strategy: Any, granularity: str,
         dry_run: bool, actor: str | None, message: str, metadata: Mapping[str, str] | None,
         merge_commit: bool, engine: str = "local", spark: Any = None, resolutions: Any = None) -> MergeResult:
    _validate_options(strategy, granularity)
    given = resolutions if isinstance(resolutions, Resolutions) else Resolutions.from_data(resolutions)
    if engine not in ("local", "spark", "auto"):
        raise InvalidOperationError(f"unknown engine {engine!r} (use local, spark or auto)")
    ours = repo.resolve(dest)
    if isinstance(strategy, Mapping):
        known = set(ours.tables) | set(theirs.tables) | set((base_tables if base_tables is not None else
                                                              base.tables if base is not None else {}))
        unknown = sorted(t for t in strategy if t != "*" and t not in known)
        if unknown:
            raise InvalidOperationError(f"--strategy names no table of this merge: {', '.join(unknown)} "
                                        f"(tables: {', '.join(sorted(known)) or 'none'})")
    three = _ThreeWay(repo, base, ours, theirs, strategy=strategy, granularity=granularity, base_tables=base_tables,
                      engine=engine, spark=spark, resolutions=given)
    three.run()
    unused = given.unused()
    if unused:
        shown = "; ".join(r.describe() for r in unused[:5]) + (f"; … {len(unused) - 5} more" if len(unused) > 5 else "")
        raise InvalidOperationError(f"{len(unused)} resolution(s) match no conflict of this merge: {shown}")
    result = MergeResult(status="merged", source_ref=source_ref, dest=dest, source=theirs, dest_commit=ours,
                         base=bases, conflicts=three.conflicts, stats={n: p.stats for n, p in three.plans.items()},
                         dry_run=dry_run, strategy=strategy, granularity=granularity)
    if three.conflicts:
        result.status = "conflicts"
        if not dry_run:
            raise MergeConflictError(result)
        return result
    if dry_run:
        return result
    meta = {"merge.resolved_by_hand": str(given.applied),
            "merge.resolved_by_strategy": str(sum(p.stats.resolved for p in three.plans.values())),
            "merge.source": source_ref, "merge.source_commit": theirs.id,
            "merge.base": ",".join(b.id for b in bases), "merge.granularity": granularity,
            **({"merge.strategy": json.dumps(strategy) if not isinstance(strategy, str) else strategy} if strategy else {}),
            **(metadata or {})}
    refers = [c.id for c in (theirs, base) if c is not None]  # the source and base data it may reuse
    result.commit = _publish(repo, three.plans, dest, ours, [theirs.id] if merge_commit else [], refers, actor,
                             message, meta)
    if result.commit is None:
        result.status = "up-to-date"
    return result


def merge(source: str | Ref, dest: str | Ref, *, repo: Repository | None = None,
          strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
          dry_run: bool = False, actor: str | None = None, message: str | None = None,
          metadata: Mapping[str, str] | None = None, engine: str = "auto", spark: Any = None,
          resolutions: Any = None) -> MergeResult:
    """Merge ``source`` (any ref) into branch ``dest``.

    Publishes one merge commit with parents (dest tip, source tip) — also when dest has not moved
    (never a fast-forward). Returns status ``up-to-date`` without a commit when the source is
    already contained in dest. Conflicts without a ``strategy`` raise :class:`MergeConflictError`
    (with ``dry_run=True`` they are returned with status ``conflicts``). ``engine="spark"`` computes
    the two diffs on Spark (``"auto"``: only for tables whose planned rows exceed the threshold)."""
    repo, src, dst = _resolve_inputs(source, dest, repo)
    _validate_options(strategy, granularity)
    theirs = repo.resolve(src)
    ours = repo.resolve(dst)
    bases = repo.merge_bases(theirs.id, ours.id)
    if repo.is_ancestor(theirs.id, ours.id):
        return MergeResult(status="up-to-date", source_ref=src, dest=dst, source=theirs, dest_commit=ours,
                           base=bases, dry_run=dry_run, strategy=strategy, granularity=granularity)
    base, base_tables = _pick_base(repo, bases)
    return _run(repo, source_ref=src, dest=dst, theirs=theirs, base=base, base_tables=base_tables, bases=bases,
                strategy=strategy, granularity=granularity, dry_run=dry_run, actor=actor,
                message=message or f"Merge '{src}' into '{dst}'", metadata=metadata, merge_commit=True,
                engine=engine, spark=spark, resolutions=resolutions)


def _apply_commit(commit: str | Ref, branch: str | Ref, *, invert: bool, repo: Repository | None,
                  strategy: Any, granularity: str, dry_run: bool, actor: str | None, message: str | None,
                  metadata: Mapping[str, str] | None, resolutions: Any = None) -> MergeResult:
    """Three-way merge of one commit's change onto ``branch``: the change from the commit's first
    parent to the commit (cherry-pick), or back from the commit to its parent (revert)."""
    repo, src, dst = _resolve_inputs(commit, branch, repo)
    picked = repo.resolve(src)
    verb = "revert" if invert else "cherry-pick"
    if not picked.parents:
        raise InvalidOperationError(f"cannot {verb} the root commit")
    parent = repo.commit(picked.parents[0])
    base, theirs = (picked, parent) if invert else (parent, picked)
    default = f"{'Revert' if invert else 'Cherry-pick'} '{picked.message}' ({picked.id[:10]})"
    return _run(repo, source_ref=src, dest=dst, theirs=theirs, base=base, base_tables=None, bases=[base],
                strategy=strategy, granularity=granularity, dry_run=dry_run, actor=actor, message=message or default,
                metadata={f"{verb.replace('-', '_')}.commit": picked.id, **(metadata or {})}, merge_commit=False, resolutions=resolutions)


def cherry_pick(commit: str | Ref, branch: str | Ref, *, repo: Repository | None = None,
                strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
                dry_run: bool = False, actor: str | None = None, message: str | None = None,
                metadata: Mapping[str, str] | None = None, resolutions: Any = None) -> MergeResult:
    """Apply the changes ``commit`` made (relative to its first parent) to ``branch``: a three-way
    merge with base = the commit's parent, source = the commit. Publishes a one-parent commit."""
    return _apply_commit(commit, branch, invert=False, repo=repo, strategy=strategy, granularity=granularity,
                         dry_run=dry_run, actor=actor, message=message, metadata=metadata, resolutions=resolutions)


def revert(commit: str | Ref, branch: str | Ref, *, repo: Repository | None = None,
           strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
           dry_run: bool = False, actor: str | None = None, message: str | None = None,
           metadata: Mapping[str, str] | None = None, resolutions: Any = None) -> MergeResult:
    """Undo the changes ``commit`` made, on ``branch``: a three-way merge with base = the commit,
    source = its first parent. Publishes a one-parent commit."""
    return _apply_commit(commit, branch, invert=True, repo=repo, strategy=strategy, granularity=granularity,
                         dry_run=dry_run, actor=actor, message=message, metadata=metadata, resolutions=resolutions)
