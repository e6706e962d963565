"""The diff API: every table of two refs (``diff``), and the :class:`Diff` that holds the
per-table diffs of :mod:`trimerge.diff.engine`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Sequence

import pyarrow as pa

from trimerge.diff.engine import DiffCounts, Progress, TableDiff
from trimerge.diff.planner import PLAN_CHOICES, Snapshot, choose_engine, spark_at_hand
from trimerge.diff.verify import verify_requested
from trimerge.diff.where import check_where, plan_where
from trimerge.lineage.commit import Commit
from trimerge.lineage.storage.lazyimport import lazy_module
from trimerge.lineage.errors import InvalidOperationError, RefSyntaxError, TableNotFoundError
from trimerge.lineage.repository import Repository
from trimerge.lineage.tables.filtercasts import cast_literals
from trimerge.lineage.display import diff_html, diff_repr, table_diff_html, table_diff_repr

if TYPE_CHECKING:
    import polars as pl
else:  # what annotations name, imported on first use (typing.get_type_hints)
    pl = lazy_module("polars")



def flat_rows_polars(td: TableDiff, columns: str | Sequence[str] | None = "all") -> "pl.DataFrame":
    """The changed rows of ``td`` flat, as SQL's ``diff()`` gives them: the key columns, ``change``,
    ``changed_columns``, then ``before_<column>`` and ``after_<column>`` for each value column
    (null where the row is absent on that side), as a polars DataFrame — what a notebook shows as
    a table. ``columns`` as :meth:`TableDiff.rows` takes it. Also ``TableDiff.to_polars()``."""
    import polars as pl

    from trimerge.diff.sqlfunctions import flatten

    return pl.from_arrow(flatten(td.rows(columns)))  # type: ignore[return-value]


# Counts in a TableDiff's repr, its first rows in a notebook, its flat rows as a frame (here to keep
# the engine about diffing).
TableDiff.__repr__ = table_diff_repr  # type: ignore[method-assign]
TableDiff._repr_html_ = table_diff_html  # type: ignore[attr-defined]
TableDiff.to_polars = flat_rows_polars  # type: ignore[attr-defined]


@dataclass
class Diff:
    """Differences of every table between two commits (``before`` → ``after``)."""

    repo: Repository
    before: Commit
    after: Commit
    tables: dict[str, TableDiff] = field(default_factory=dict)
    three_dot: bool = False
    where: str | None = None  #: the filter the rows were restricted to (``diff(..., where=)``)

    def stat_polars(self) -> "pl.DataFrame":
        """:meth:`stat` as a polars DataFrame (no copy)."""
        import polars as pl

        return pl.from_arrow(self.stat())  # type: ignore[return-value]

    def stat(self) -> pa.Table:
        """One row per table: status, inserted, deleted, updated, cells changed, schema and index
        changes, the plan, and the updated rows per column (``columns``: ``"a 3, b 1"``). Tables whose
        rows were not asked for yet are only counted (:attr:`TableDiff.count_first`): a 20M-row
        full change counts in about a third of the time its rows take."""
        rows = []
        for td in self.tables.values():
            td.count_first = True
        for name, td in sorted(self.tables.items()):
            c = td.counts if td.storage_status != "unchanged" else DiffCounts()
            rows.append({"table": name, "status": td.status, "inserted": c.inserted, "deleted": c.deleted,
                         "updated": c.updated, "cells_changed": c.cells_changed,
                         "schema_changes": len(td.schema_changes), "index_changes": len(td.index_changes),
                         "method": td.plan.method,
                         "columns": ", ".join(f"{k} {v}" for k, v in sorted(c.by_column.items()))})
        schema = pa.schema([("table", pa.string()), ("status", pa.string()), ("inserted", pa.int64()),
                            ("deleted", pa.int64()), ("updated", pa.int64()), ("cells_changed", pa.int64()),
                            ("schema_changes", pa.int64()), ("index_changes", pa.int64()), ("method", pa.string()),
                            ("columns", pa.string())])
        return pa.Table.from_pylist(rows, schema=schema)

    def stat_json(self) -> list[dict[str, Any]]:
        """:meth:`stat` as JSON, one object per table in the shape of :meth:`to_json`'s tables
        (``columns`` ``{"sector": 5}``, ``schema_changes`` a list, ``plan`` an object) without their
        rows: what ``diff --stat --json`` prints, a subset of ``--json diff``. Counts only, as :meth:`stat`."""
        for td in self.tables.values():
            td.count_first = True
        return [td.summary() for _, td in sorted(self.tables.items())]

    def changed_tables(self) -> list[str]:
        """Names of the tables that differ, sorted."""
        return [n for n, td in sorted(self.tables.items()) if td.changed]

    def __repr__(self) -> str:
        """Short: the range and per-table counts of the first changed tables (computes the counts)."""
        return diff_repr(self)

    def _repr_html_(self) -> str:
        """Notebook view: one row per table with its counts (:meth:`stat`)."""
        return diff_html(self)

    def to_json(self, rows: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {"before": self.before.id, "after": self.after.id}
        if self.where is not None:
            doc["where"] = self.where
        doc["tables"] = {n: td.summary() for n, td in sorted(self.tables.items())}
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
         memory_budget: int | None = None, plan: str = "auto", verify: bool | None = None,
         where: str | None = None) -> Diff:
    """Compare two refs table by table.

    ``diff("main", "feature")`` compares the tips (two-dot, also ``"main..feature"``);
    ``diff("main...feature")`` compares the merge base of the two with ``feature`` (what a merge
    of feature would bring). ``a``/``b`` may be ``Ref`` objects or addresses ``REF::TABLE``.
    Rows are computed lazily per table (``d.tables[name].rows()``, ``.counts``).

    ``engine="spark"`` runs every changed table on Spark (``spark``: a SparkSession, default: the
    active one or a new local one); ``"auto"`` plans on the driver and uses Spark only for tables
    whose planned candidate rows exceed ``spark_threshold`` (default
    ``trimerge.diff.planner.DEFAULT_SPARK_THRESHOLD``, env ``TRIMERGE_SPARK_THRESHOLD``) — with the
    default threshold, only when Spark is at hand (``spark`` given, a session active, or
    ``TRIMERGE_SPARK_MASTER`` set): a Spark started on this machine is slower than the local engine.

    The local engine works in memory up to ``memory_budget`` bytes (default 512 MiB, env
    ``TRIMERGE_DIFF_MEMORY``; candidates spill once they pass a quarter of it, since classifying them
    in memory takes about four times their size); beyond that it partitions them by key hash into temporary files
    (under env ``TRIMERGE_SPILL_DIR``, default the system temp directory) and classifies one bucket
    at a time, so ``TableDiff.iter_batches`` and ``counts`` run in bounded memory.

    ``plan`` picks the candidate plan: ``"auto"`` (the cheapest exact one), or ``"delta"``,
    ``"fragments"``, ``"full"`` to start from that plan (one whose precondition does not hold
    falls back to the next exact one; ``TableDiff.plan.method`` says what ran). ``verify=True``
    (default: env ``TRIMERGE_VERIFY=1``) checks every table's rows against the brute-force diff
    (both sides read whole) and raises :class:`DiffVerificationError` on any difference.

    ``where`` (a SQL filter, as ``Repository.read(where=)`` takes) keeps the changed rows whose
    before or after image matches it — a row that left the filter's range is an update — and the
    counts count those; it applies to every table compared (name them with ``tables``), is
    checked and planned on each before any row is read, and runs on the changed rows only
    (:mod:`trimerge.diff.where`)."""
    from trimerge.lineage.history.address import is_address, parse_address
    from trimerge.lineage.repository import Ref

    if where is not None:
        where = check_where(where)  # the text alone: refused before any ref is resolved
        if engine == "spark":
            raise InvalidOperationError("where= runs on the local engine: use engine='local' or 'auto'")
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
    if plan not in PLAN_CHOICES:
        raise InvalidOperationError(f"unknown diff plan {plan!r} (use {', '.join(PLAN_CHOICES)})")
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
    if engine not in ("local", "spark", "auto"):
        raise InvalidOperationError(f"unknown engine {engine!r} (use local, spark or auto)")
    for name in names:
        old, new = Snapshot(repo, before.tables.get(name)), Snapshot(repo, after.tables.get(name))
        typed = None
        if where is not None:  # `date < '2001-01-01'` typed for Lance, by this table's columns
            typed = cast_literals((new if new.tv is not None else old).schema, where, f"where (table {name})")
        sides = plan_where(typed, name, old, new, named=wanted is not None) if typed is not None else (True, True)
        result.tables[name] = TableDiff(name, old, new, memory_budget=memory_budget, method=plan,
                                        verify=verify_requested(verify), where=typed, where_sides=sides)
    result.where = where
    if engine != "local" and where is None:
        at_hand = spark_at_hand(spark)
        for td in result.tables.values():
            if choose_engine(engine, td.candidate_plan, spark_threshold, at_hand) == "spark":
                from trimerge.diff.spark import get_spark

                spark = spark or get_spark()
                td.use_spark(spark)
    if progress is not None:
        for name, td in result.tables.items():
            progress(name, "start")
            if td.storage_status != "unchanged":
                td.counts
            progress(name, "done")
    return result
