"""Paranoid mode: check a table diff's planned answer against the brute-force one.

The brute-force diff reads both snapshots whole and joins them by key (the ``full`` plan, on the
local engine); the planned diff may have skipped rows on the strength of Lance metadata. Any
difference is a bug in a shortcut, reported as :class:`DiffVerificationError` naming the plan and
the first differing key. Turned on by ``diff(..., verify=True)``, ``merge(..., verify=True)`` or
the environment variable ``TRIMERGE_VERIFY=1``.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trimerge.lineage.errors import DiffVerificationError

if TYPE_CHECKING:
    from trimerge.diff.engine import TableDiff


def verify_requested(verify: bool | None) -> bool:
    """``verify`` as asked, or ``TRIMERGE_VERIFY`` (1/true/yes) when not given."""
    if verify is not None:
        return bool(verify)
    return os.environ.get("TRIMERGE_VERIFY", "").strip().lower() in ("1", "true", "yes", "on")


def brute_force_rows(td: "TableDiff") -> pa.Table:
    """The rows of ``td`` computed by the ``full`` plan (both sides read whole, joined by key)."""
    from trimerge.diff.engine import TableDiff

    reference = TableDiff(td.name, td.before_snapshot, td.after_snapshot, method="full", verify=False)
    return reference.rows()


def check_table(td: "TableDiff", planned: pa.Table) -> None:
    """Raise :class:`DiffVerificationError` if ``planned`` (the rows of ``td``) differs from the
    brute-force diff."""
    key = list(td.primary_key)
    reference = brute_force_rows(td)
    if td.within_keys is not None:  # a diff of some keys (TableDiff.only_keys)
        from trimerge.diff.images import restrict_rows
        from trimerge.diff.spill import ChangedRows

        reference = restrict_rows(ChangedRows.in_memory(reference), td.within_keys, key)[0].table
    first = first_difference(planned, reference, key, deleted_images=not td.key_only_deletes)
    if first is not None:
        found, wanted = first[1], first[2]
        raise DiffVerificationError(
            f"diff of table {td.name!r} by the {td.candidate_plan.method} plan disagrees with the brute-force diff at key "
            f"{first[0]}: planned {found}, brute force {wanted}", table=td.name, plan=td.candidate_plan.method, key=first[0])


def first_difference(planned: pa.Table, reference: pa.Table, key: list[str], *,
                     deleted_images: bool = True) -> tuple[Any, Any, Any] | None:
    """(key, planned row, reference row) of the smallest key where the two diffs differ; None if
    equal. ``deleted_images=False``: deleted rows' ``before`` images are not compared (a diff with
    ``key_only_deletes`` holds only their keys)."""
    def by_key(t: pa.Table) -> dict[tuple, dict]:
        rows = t.to_pylist()
        if not deleted_images:
            rows = [{**r, "before": None} if r["change"] == "delete" else r for r in rows]
        return {tuple(r[k] for k in key): r for r in rows}

    p, r = by_key(planned), by_key(reference)
    for k in sorted(p.keys() | r.keys(), key=_sortable):
        a, b = p.get(k), r.get(k)
        if a is None or b is None or not same_value(a, b):
            return dict(zip(key, k)), _brief(a), _brief(b)
    return None


def _sortable(k: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in k)


def _brief(row: dict | None) -> Any:
    if row is None:
        return "no row"
    changed = sorted(row.get("changed_columns") or [])
    return f"{row['change']} {changed}" if changed else row["change"]


def same_value(x: Any, y: Any) -> bool:
    """Exact, null-safe equality with NaN equal to NaN (the diff's value semantics)."""
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same_value(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same_value(a, b) for a, b in zip(x, y))
    return x == y


def verify_history(repo: Any, progress: Any = None) -> tuple[int, list[str]]:
    """Diff every commit against its first parent, table by table, with the planned and the
    brute-force diff: (table diffs compared, problems). Tables whose data was reclaimed by gc are
    skipped. ``progress(done, total)`` is called per commit."""
    from trimerge.diff.engine import TableDiff
    from trimerge.diff.planner import Snapshot
    from trimerge.lineage.errors import DataReclaimedError, TrimergeError

    commits = [c for c in repo.all_commits() if c.parents]
    compared, problems = 0, []
    for done, commit in enumerate(commits, 1):
        parent = repo.commit(commit.parents[0])
        for name in sorted(parent.tables.keys() | commit.tables.keys()):
            td = TableDiff(name, Snapshot(repo, parent.tables.get(name)), Snapshot(repo, commit.tables.get(name)),
                           verify=True)
            if td.storage_status == "unchanged":
                continue
            try:
                td.counts
                compared += 1
            except DataReclaimedError:
                continue
            except TrimergeError as exc:
                problems.append(f"commit {commit.short_id} table {name}: {exc}")
        if progress is not None:
            progress(done, len(commits))
    return compared, problems
