"""Merge gates: the three-way merge of data-check definitions, and running the checks that gate
the destination on the merge's result before it publishes.

The merge builds its result as uncommitted Lance versions inside the publishing transaction
(:func:`trimerge.merge.publish.publish`); :class:`Gate` runs between applying the plans and
publishing, on ``tx.dataset(table)`` — so checks see exactly what the result would be, never a
half-published state — and a failing check aborts the transaction (:class:`MergeCheckError`). A dry
run (or a merge with conflicts, for its reports) builds the same result in a
:class:`~trimerge.lineage.scratch.ScratchTransaction` that is never published.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Mapping

from trimerge.lineage.gates.checks import TIMEOUT_SETTING, Check, as_record, judging, table_checks
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.history.protection import Protection
from trimerge.merge.checkdelta import run_gated
from trimerge.merge.result import Conflict, MergeCheckError, MergeResult
from trimerge.lineage.history.threeway import merge_by_name

CHECKS_META = "merge.checks"


def merge_checks(three: Any) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per table on both sides, the three-way merge of its check definitions (by name, like the
    schema): changed on one side → that side's; alike on both → one; differently on both → a
    ``check.update_update`` conflict, settled by a resolution or the strategy, else reported."""
    out = {}
    for name in sorted(three.ours.keys() & three.theirs.keys()):
        b, o, t = three.base.get(name), three.ours[name], three.theirs[name]
        if b is not None and b.checks == o.checks == t.checks:
            continue
        cb, co, ct = (table_checks(tv, name) for tv in (b, o, t))
        merged, _taken, _unresolved = merge_by_name(
            cb, co, ct, partial(_decide, three, name))
        out[name] = as_record(merged)
    return out


def _decide(three: Any, table: str, name: str, vb: Check | None, vo: Check | None, vt: Check | None) -> str | None:
    """The choice for a check defined differently on both sides (None: reported, dest's kept)."""
    shown = [c.to_json() if c is not None else None for c in (vb, vo, vt)]
    conflict = Conflict("check.update_update", table, columns=(name,), base=shown[0], ours=shown[1], theirs=shown[2],
                        message=f"check {name!r} defined differently on both sides")
    decision = three.resolver.decide_table(conflict)
    plan = three.plans.get(table)
    if decision is None:
        three.conflicts.append(conflict)
        if plan is not None:
            plan.stats.conflicts += 1
        return None
    if decision.by == "strategy" and plan is not None:
        plan.stats.resolved += 1
    return decision.choice


class Gate:
    """The checks of one merge into ``dest``: sets the merged definitions on the result and runs the
    checks that gate ``dest`` (``enabled=False``: skipped, and the merge commit says so)."""

    def __init__(self, repo: Any, dest: str, records: Mapping[str, tuple[tuple[str, str], ...]], enabled: bool,
                 result: MergeResult):
        self.repo = repo
        self.dest = dest
        self.records = dict(records)
        self.enabled = enabled
        self.result = result
        self._protected: set[str] | None = None
        self._hooks: list[Any] | None = None
        self._with_hooks = True  # not for the reports of a merge with conflicts: no result to judge

    def hook_gates(self) -> list[Any]:
        """The gates of the layers above that judge a merge into dest (pre-merge hooks:
        :data:`~trimerge.lineage.extensions.MERGE_GATES`), each a function of the result."""
        if self._hooks is None:
            from trimerge.lineage.extensions import MERGE_GATES

            found = [applies(self.repo, self.dest) for applies in list(MERGE_GATES.values())]
            self._hooks = [run for run in found if run is not None]
        return self._hooks

    def gating(self, tables: Mapping[str, TableVersion], before: Mapping[str, TableVersion]) -> list[Check]:
        """The checks judging the result ``tables`` of a merge into dest as it was ``before``: a
        gate the merge removes judges the merge that removes it (:func:`~trimerge.lineage.gates.checks.judging`)."""
        if self._protected is None:
            self._protected = Protection(self.repo).names()
        return judging(before, tables, self.dest, self._protected)

    def _set_records(self, tx: Any) -> dict[str, TableVersion]:
        present = set(tx.tables())
        for name, record in sorted(self.records.items()):
            if name in present and tx.table_version(name).checks != record:
                tx.set_table(name, replace(tx.table_version(name), checks=record))
        return {n: tx.table_version(n) for n in tx.tables()}

    def _run(self, tx: Any) -> bool:
        """Run the gating checks on ``tx``'s tables; whether every one passed."""
        tables = self._set_records(tx)
        checks = self.gating(tables, tx.base.tables)
        hooks = self.hook_gates() if self._with_hooks else []
        if not checks and not hooks:
            return True
        if not self.enabled:
            tx.metadata[CHECKS_META] = "skipped: " + ",".join([c.name for c in checks] + ["hooks"] * bool(hooks))
            return True
        results = run_gated(self.repo, checks, tx.dataset, tables, self.repo.settings.get(TIMEOUT_SETTING),
                            record=not tx.scratch) if checks else []
        if hooks and all(r.passed for r in results):  # a merge its checks refuse needs no hook's verdict
            for run in hooks:
                results = results + run(tables, tx.base, self.result, tx.scratch)
        self.result.checks = results
        tx.metadata[CHECKS_META] = "passed: " + ",".join(r.name for r in results)
        return all(r.passed for r in results)

    def __call__(self, tx: Any) -> None:
        """Inside the publishing transaction, after the plans are applied: a failing check raises
        :class:`MergeCheckError` (the transaction aborts: nothing is published)."""
        if not self._run(tx):
            self.result.status = "check_failed"
            raise MergeCheckError(self.result)

    def dry(self, plans: Mapping[str, Any], ours: Commit, *, conflicts: bool = False) -> None:
        """Build the result in a scratch transaction (never published) and run the checks on it:
        for a dry run, and for the reports of a merge with conflicts (where conflicting cells stay as
        dest has them). Sets ``result.checks``, and ``status`` to ``check_failed`` on a failure
        unless the merge has conflicts."""
        if not self.enabled:
            return
        tables = dict(ours.tables)  # a cheap first look, from metadata: does any check gate dest?
        for name, plan in plans.items():
            if plan.drop:
                tables.pop(name, None)
            elif plan.set_to is not None:
                tables[name] = plan.set_to
        tables.update({n: replace(tables[n], checks=r) for n, r in self.records.items() if n in tables})
        if not self.gating(tables, ours.tables) and (conflicts or not self.hook_gates()):
            return
        from trimerge.lineage.scratch import ScratchTransaction
        from trimerge.merge.publish import apply_plans

        scratch = ScratchTransaction(self.repo, ours.tables, ours, f"checks of a merge into {self.dest}")
        scratch.begin()
        try:
            try:
                apply_plans(self.repo, scratch, plans)
            except TrimergeError:
                if conflicts:  # a result that cannot be built without its conflicts settled
                    return
                raise
            self._with_hooks = not conflicts
            passed = self._run(scratch)
        finally:
            scratch.close()
        if not passed and not conflicts:
            self.result.status = "check_failed"
