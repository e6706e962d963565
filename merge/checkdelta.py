"""The checks of a gated merge, run on the rows the merge wrote where that gives the same verdict.

A row-local check (:mod:`trimerge.lineage.gates.checkscope`) fails a table exactly where some row
fails it on its own. If it passed on the whole table at a version ``p``
(:mod:`trimerge.lineage.gates.checkpasses`), and the result descends from ``p`` by row-level writes
only (``TableVersion.delta_since``), every row the result did not insert or update since ``p``
is a row that passed — same values, same stable row id (Lance's row-version metadata names every
row written since ``p``: :func:`trimerge.diff.delta.changes_since`). So the check's failing rows
on the result are its failing rows among the rows written since ``p``: same count, same first
keys. Deleted rows cannot fail anything.

Everything else runs on the whole result, as :func:`trimerge.lineage.gates.checks.run_all` does: a check
that is not row-local; no passing version on the result's Lance lineage, or none Lance can read a
delta from (cleaned up, a restore, an overwrite or a dropped or retyped column in between, no
stable row ids); a schema other than the passing version's; and — because those rows are read
into memory, and reading a large share whole costs more than the check's own column scan — more
than :data:`MAX_SHARE` of the table or :data:`MAX_ROWS` rows written.

After a check passes on the result (either way), that is recorded for the result's version, so
the next merge into the branch starts from there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from trimerge.diff.delta import changes_since, written_fragments
from trimerge.diff.planner import Snapshot
from trimerge.diff.reads import ROWID
from trimerge.lineage.gates.checkpasses import CheckPasses
from trimerge.lineage.gates.checks import Check, CheckResult, run_each
from trimerge.lineage.gates.checkscope import row_local
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import InvalidOperationError, TrimergeError

MAX_SHARE = 0.25  # of the table's rows written since the passing version
MAX_ROWS = 1 << 20


class CheckScopes:
    """For one merge result: what each check runs on — the whole table, or the rows written since
    a version where it passed (``CheckResult.scope``)."""

    def __init__(self, repo: Any, dataset_of: Callable[[str], Any], tables: Mapping[str, TableVersion]):
        self.repo = repo
        self.dataset_of = dataset_of
        self.tables = tables
        self.passes = CheckPasses(repo.docs)
        self._datasets: dict[str, Any] = {}
        self._written: dict[tuple[str, int], pa.Table | None] = {}
        self._fork_points: dict[tuple[str, str], tuple[str, int] | None] = {}

    def dataset(self, table: str) -> Any:
        if table not in self._datasets:
            self._datasets[table] = self.dataset_of(table)
        return self._datasets[table]

    def data(self, check: Check) -> tuple[Any, str]:
        """What ``check`` runs on — the result's table, or the rows written since it passed — and
        the scope that names it."""
        ds = self.dataset(check.table)
        if row_local(check.sql, check.table, ds.schema.names):
            since = self._passed_at(check, self.tables[check.table], ds.schema)
            if since is not None:
                rows = self._rows_written(check.table, since, ds)
                if rows is not None:
                    return rows, f"rows written since version {since}"
        return ds, "table"

    def _passed_at(self, check: Check, tv: TableVersion, schema: pa.Schema) -> int | None:
        """The latest version of the result's Lance lineage where ``check`` passed and from which
        a delta to the result is exact: on its own Lance branch, or the fork point it started from
        (pylance reads a fork's delta from no earlier version)."""
        for version in self.passes.versions(tv.dataset, tv.lance_branch, check, schema):
            if tv.delta_exact_from(version):
                return version
        if tv.lance_branch == "main" or tv.delta_since is None:
            return None
        key = (tv.dataset, tv.lance_branch)
        if key not in self._fork_points:
            try:
                self._fork_points[key] = self.repo.table_store.fork_point(*key)
            except (TrimergeError, OSError):  # forks changing under a listing: check the whole table
                self._fork_points[key] = None
        point = self._fork_points[key]
        if point is None or not tv.delta_exact_from(point[1]):
            return None
        return point[1] if point[1] in self.passes.versions(tv.dataset, point[0], check, schema) else None

    def _rows_written(self, table: str, since: int, ds: Any) -> pa.Table | None:
        """The rows the result inserted or updated since version ``since`` (None: too many to
        read, or Lance cannot read the delta)."""
        key = (table, since)
        if key not in self._written:
            self._written[key] = self._read_written(table, since, ds)
        return self._written[key]

    def _read_written(self, table: str, since: int, ds: Any) -> pa.Table | None:
        if not ds.has_stable_row_ids:  # row versions exist only with stable row ids
            return None
        snap = Snapshot(self.repo, self.tables[table])
        try:
            fragments = written_fragments(snap, since)
            bound = sum(f.metadata.physical_rows for f in fragments)
            total = sum(f.metadata.physical_rows for f in ds.get_fragments())
            if bound > MAX_ROWS or bound > MAX_SHARE * total:
                return None
            parts, _updated, _deleted = changes_since(snap, since, keep_ids=False)
            rows = [t.drop_columns([ROWID]) for t in parts]
        except Exception:  # noqa: BLE001 - e.g. version ``since`` cleaned up, a row-version column Lance
            return None  # did not keep: the whole table is always a correct answer, only slower
        return pa.concat_tables(rows).cast(ds.schema) if rows else ds.schema.empty_table()

    def record(self, checks: Sequence[Check], results: Sequence[CheckResult]) -> None:
        """Note, per table, the checks that passed on the result's version."""
        for table in sorted({c.table for c in checks}):
            passed = [c for c, r in zip(checks, results) if c.table == table and r.passed and not r.reads]
            if passed:
                self.passes.record(self.tables[table], self.dataset(table).schema, passed)


def run_gated(repo: Any, checks: Sequence[Check], dataset_of: Callable[[str], Any], tables: Mapping[str, TableVersion],
              timeout: float | None, *, record: bool) -> list[CheckResult]:
    """Run a merge's gating ``checks`` on its result (``tables``, read through ``dataset_of``),
    each on the whole table or on the rows written since it last passed (``CheckResult.scope``);
    with ``record``, note which passed."""
    for check in checks:
        if check.table not in tables:
            raise InvalidOperationError(f"check {check.name!r}: table {check.table!r} does not exist")
    scopes = CheckScopes(repo, dataset_of, tables)
    data = [scopes.data(c) for c in checks]
    # A check reading other tables reads them in the same result (and keeps its "whole result" scope).
    results = run_each(((c, d, tables[c.table].primary_key) for c, (d, _) in zip(checks, data)), timeout,
                       tables=tables, open_table=scopes.dataset)
    results = [r if r.reads else replace(r, scope=scope) for r, (_, scope) in zip(results, data)]
    if record and not repo.read_only:
        scopes.record(checks, results)
    return results
