"""What a merge returns: its conflicts, per-table statistics and the published commit.

Shared by every step of the merge (classify → resolve → apply) and by the reports; depends on
nothing but the commit type, so results can be built and rendered in tests without a repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, cast

import pyarrow as pa

from trimerge.lineage.storage.lazyimport import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:  # what annotations name, imported on first use (typing.get_type_hints)
    pl = lazy_module("polars")

from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import InvalidOperationError, TrimergeError
from trimerge.lineage.storage.jsonvalues import jsonable as jsonable  # used here, and by reports

Strategy = Literal["source-wins", "dest-wins"]
Granularity = Literal["cell", "row", "table"]
STRATEGIES = ("source-wins", "dest-wins")
GRANULARITIES = ("cell", "row", "table")
MAX_CONFLICTS = 100_000  # conflicts a MergeResult holds by default (a conflicts file gets all)


class MergeConflictError(TrimergeError):
    """The merge has conflicts that neither a resolution nor a strategy resolves; nothing was published.

    ``result`` carries every unresolved conflict (``result.conflicts``, ``result.report(...)``)."""

    exit_code = 1

    def __init__(self, result: "MergeResult"):
        n = result.conflicts_total
        tables = sorted({c.table for c in result.conflicts} | {t for t, s in result.stats.items() if s.conflicts})
        super().__init__(f"merge of {result.source_ref!r} into {result.dest_ref!r} has {n} conflict(s) in "
                         f"{', '.join(tables)}; nothing was published (pass strategy= or resolutions=, or see .result.conflicts)")
        self.result = result

    # A notebook (IPython) shows the conflicts, not a traceback through the merge engine: it calls
    # _render_traceback_ on a raised exception and _repr_pretty_/_repr_html_ on one shown as a value.
    # str() stays one line: the CLI prints it as its error.
    def _render_traceback_(self) -> list[str]:
        from trimerge.lineage.display import merge_conflict_lines

        return merge_conflict_lines(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        from trimerge.lineage.display import merge_conflict_lines

        printer.text("MergeConflictError(...)" if cycle else "\n".join(merge_conflict_lines(self)))

    def _repr_html_(self) -> str:
        """The error's line, then the result's view: per-table statistics and the first conflicts."""
        from html import escape

        from trimerge.lineage.display import merge_result_html

        return f"<p><b>{type(self).__name__}</b>: {escape(str(self))}</p>" + merge_result_html(self.result)


class MergeCheckError(TrimergeError):
    """A data check that gates the destination failed on the merge's result; nothing was published.

    ``result`` carries every check run (``result.checks``: name, table, failing_rows, sample_keys)."""

    exit_code = 1

    def __init__(self, result: "MergeResult"):
        failed = [c for c in result.checks if not c.passed]
        shown = "; ".join(c.describe() for c in failed[:3]) + (f"; … {len(failed) - 3} more" if len(failed) > 3 else "")
        super().__init__(f"merge of {result.source_ref!r} into {result.dest_ref!r} fails {len(failed)} check(s): "
                         f"{shown}; nothing was published (fix the data on the source, or pass checks=False)")
        self.result = result


class MergeBaseError(TrimergeError):
    """Kept for compatibility: criss-cross histories (several merge bases that disagree) now merge
    through a virtual base, as git's recursive strategy does, and no longer raise this."""


@dataclass(frozen=True)
class Conflict:
    """One conflict: ``kind`` is e.g. ``row.update_update``; ``key`` the primary key (dict) for
    row conflicts; ``columns`` the conflicting columns; ``base``/``ours``/``theirs`` the values
    (dicts of column → value; None where the row or table is absent). ``ours`` is the dest's side,
    ``theirs`` the source's."""

    kind: str
    table: str
    key: Mapping[str, Any] | None = None
    columns: tuple[str, ...] = ()
    base: Mapping[str, Any] | None = None
    ours: Mapping[str, Any] | None = None
    theirs: Mapping[str, Any] | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "table": self.table, "key": jsonable(self.key), "columns": list(self.columns),
                "base": jsonable(self.base), "ours": jsonable(self.ours), "theirs": jsonable(self.theirs),
                "message": self.message}

    def value_lines(self, width: int = 40) -> list[str]:
        """One line per conflicting column: its value in base, dest (``ours``) and source (``theirs``),
        each cut to ``width`` characters; ``(no row)`` where that side has no such row."""
        def shown(side: Mapping[str, Any] | None, column: str) -> str:
            if side is None:
                return "(no row)"
            text = json.dumps(side.get(column), default=str, ensure_ascii=False)  # as jsonl writes it, no repr
            return text if len(text) <= width else text[:width - 1] + "…"

        if not (self.base or self.ours or self.theirs):
            return []
        columns = self.columns or tuple(dict.fromkeys(
            c for side in (self.base, self.ours, self.theirs) if side for c in side if c not in (self.key or {})))
        return [f"{c}: base {shown(self.base, c)}, dest {shown(self.ours, c)}, source {shown(self.theirs, c)}"
                for c in columns[:8]]

    def __repr__(self) -> str:
        """Short: kind, table, key and columns, never the values (``trimerge.lineage.display``)."""
        from trimerge.lineage.display import conflict_repr

        return conflict_repr(self)

    def _repr_html_(self) -> str:
        """Notebook view: one row with base, dest and source values (cut)."""
        from trimerge.lineage.display import conflict_html

        return conflict_html(self)

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
    conflicts: int = 0  # conflicts left unresolved
    resolved: int = 0  # conflicts resolved by the strategy
    schema_changes: list[str] = field(default_factory=list)
    stale: int = 0  # rows whose derived value and inputs come from different sides (lineage.derived)
    #: How the rows were merged: ``dest`` (the source's changes written into dest's table) or
    #: ``source`` (dest's changes written onto the source's table, :mod:`trimerge.merge.sourceside`).
    plan: str = "dest"

    def to_json(self) -> dict[str, Any]:
        """The report's stable keys (stale rows are listed apart: ``MergeResult.stale``; the plan
        is how, not what)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("stale", "plan")}


@dataclass
class MergeResult:
    """Outcome of :func:`merge` (also of :func:`revert` and :func:`cherry_pick`).

    Source and dest are described alike: ``source_ref``/``source_commit`` and
    ``dest_ref``/``dest_commit`` (``dest_ref`` is always a branch). ``source`` and ``dest`` are
    the older names of ``source_commit`` and ``dest_ref``."""

    status: Literal["merged", "up-to-date", "conflicts", "check_failed", "fast-forward"]
    source_ref: str
    source_commit: Commit
    dest_ref: str
    dest_commit: Commit
    base: list[Commit]
    commit: Commit | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    stats: dict[str, TableMergeStats] = field(default_factory=dict)
    dry_run: bool = False
    strategy: Any = None
    granularity: str = "cell"
    virtual_base: bool = False  # several merge bases were merged into a virtual one first
    #: Per table, the keys of rows whose derived column's value comes from one side while an input
    #: it is computed from comes from the other's change (see trimerge.lineage.gates.derived); with
    #: ``on_stale="conflict"`` they are ``row.stale_derived`` conflicts instead.
    stale: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: One entry per data check run on the result (``name``, ``table``, ``failing_rows``,
    #: ``sample_keys``; see trimerge.merge.gates); status ``check_failed`` when one fails.
    checks: list[Any] = field(default_factory=list)

    @property
    def failed_checks(self) -> list[Any]:
        return [c for c in self.checks if not c.passed]

    @property
    def source(self) -> Commit:
        return self.source_commit

    @property
    def dest(self) -> str:
        return self.dest_ref

    @property
    def has_conflicts(self) -> bool:
        return bool(self.conflicts) or self.conflicts_total > 0

    @property
    def conflicts_total(self) -> int:
        """How many conflicts the merge has: :attr:`conflicts` may hold fewer (``max_conflicts``)."""
        return max(len(self.conflicts), sum(s.conflicts for s in self.stats.values()))

    def conflicts_table(self) -> pa.Table:
        """One row per conflicting cell (``row.update_update``), row or table; values as JSON text."""
        return conflicts_table(self.conflicts)

    def conflicts_polars(self) -> "pl.DataFrame":
        """:meth:`conflicts_table` as a polars DataFrame (no copy): a table in a notebook."""
        import polars as pl

        return pl.from_arrow(self.conflicts_table())  # type: ignore[return-value]

    def __repr__(self) -> str:
        """Short: status, refs, commit, conflict counts by kind and touched tables (bounded)."""
        from trimerge.lineage.display import merge_result_repr

        return merge_result_repr(self)

    def _repr_html_(self) -> str:
        """Notebook view: status, per-table statistics and the first conflicts."""
        from trimerge.lineage.display import merge_result_html

        return merge_result_html(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "source": {"ref": self.source_ref, "commit": self.source_commit.id},
            "dest": {"ref": self.dest_ref, "branch": self.dest_ref, "commit": self.dest_commit.id},
            "base": [b.id for b in self.base],
            "virtual_base": self.virtual_base,
            "commit": self.commit.id if self.commit else None,
            "dry_run": self.dry_run,
            "strategy": self.strategy,
            "granularity": self.granularity,
            "stats": {n: s.to_json() for n, s in sorted(self.stats.items())},
            "conflicts": [c.to_json() for c in self.conflicts],
            "conflicts_total": self.conflicts_total,
            "stale": {t: [{k: jsonable(v) for k, v in key.items()} for key in keys]
                      for t, keys in sorted(self.stale.items())},
            "checks": [c.to_json() for c in self.checks],
            # how each table merged row by row was written (trimerge.merge.sourceside)
            "plans": {n: s.plan for n, s in sorted(self.stats.items()) if s.action == "merged"},
        }

    def report(self, fmt: str = "markdown") -> str:
        """Render the result for CI: ``junit``, ``sarif``, ``markdown``, ``json`` or ``github``."""
        from trimerge.merge.reports import render

        return render(self, fmt)


CONFLICTS_SCHEMA = pa.schema([("kind", pa.string()), ("table", pa.string()), ("key", pa.string()),
                              ("column", pa.string()), ("columns", pa.list_(pa.string())), ("base", pa.string()),
                              ("ours", pa.string()), ("theirs", pa.string()), ("message", pa.string())])


def conflicts_table(conflicts: Iterable[Conflict]) -> pa.Table:
    """One row per conflicting cell (``row.update_update``), row or table; values as JSON text."""
    rows = []
    for c in conflicts:
        cells = c.columns if c.kind == "row.update_update" and c.columns else [None]
        for col in cells:
            pick = (lambda d: None if d is None else {col: d.get(col)}) if col else (lambda d: d)
            rows.append({"kind": c.kind, "table": c.table,
                         "key": json.dumps(jsonable(c.key), sort_keys=True) if c.key is not None else None,
                         "column": col, "columns": list(c.columns),
                         "base": json_text(pick(c.base)), "ours": json_text(pick(c.ours)),
                         "theirs": json_text(pick(c.theirs)), "message": c.message})
    return pa.Table.from_pylist(rows, schema=CONFLICTS_SCHEMA)


def json_text(v: Any) -> str | None:
    """Canonical JSON text (sorted keys) of ``v``; how conflicts and resolutions name keys and values."""
    return None if v is None else json.dumps(jsonable(v), sort_keys=True)


def strategy_for(strategy: Any, table: str) -> Strategy | None:
    """The strategy for one table: global, per table, or the ``*`` entry of a per-table mapping."""
    if strategy is None or isinstance(strategy, str):
        return cast("Strategy | None", strategy)  # checked where the merge takes its arguments
    return strategy.get(table, strategy.get("*"))


def validate_options(strategy: Any, granularity: str) -> None:
    values = [strategy] if strategy is None or isinstance(strategy, str) else list(strategy.values())
    for s in values:
        if s is not None and s not in STRATEGIES:
            raise InvalidOperationError(f"unknown strategy {s!r} (use {', '.join(STRATEGIES)})")
    if granularity not in GRANULARITIES:
        raise InvalidOperationError(f"unknown granularity {granularity!r} (use {', '.join(GRANULARITIES)})")
