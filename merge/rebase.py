"""Rebase: replay a branch's own commits on top of another ref, then move the branch once.

Each commit on ``branch`` since its merge base with ``onto`` (first-parent order) is replayed as a
cherry-pick (:func:`trimerge.merge.cherry_pick`), keeping its message, actor and metadata and
recording the id it was replayed from (``rebase.replayed_from``). The replays are built off to the
side, on a hidden temporary branch (:mod:`trimerge.lineage.safety.temporaries`) that starts at ``onto``;
only when every one of them succeeded does ``branch`` move — one compare-and-swap under its
lease, recorded in the reflog first — so a crash leaves it either where it was or rebased, never between, and
``trimerge branch reset BRANCH BRANCH@{1}`` undoes a rebase. A conflict in any replay (after
strategies and resolutions) publishes nothing and names the commit being replayed. A temporary
branch left by a crash is removed by the next read-write open or rebase.

Data checks that gate ``branch`` (:mod:`trimerge.lineage.gates.checks`) run on the rebased result — the
last replay, still on the temporary branch — before ``branch`` moves, as a merge's checks run
before it publishes: a failing check raises :class:`RebaseCheckError` and nothing moves;
``checks=False`` skips them and the reflog entry of the move says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from trimerge.lineage.gates.checks import TIMEOUT_SETTING, CheckResult, judging
from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import ConcurrentWriteError, InvalidOperationError, TrimergeError
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.history.protection import Protection, refuse
from trimerge.lineage.repository import Repository
from trimerge.lineage.safety.temporaries import TemporaryBranch
from trimerge.lineage.safety.temporaries import sweep as sweep_temporaries
from trimerge.merge.checkdelta import run_gated
from trimerge.merge.engine import cherry_pick
from trimerge.merge.result import Conflict, MergeCheckError, MergeConflictError, MergeResult

__all__ = ["RebaseCheckError", "RebaseConflictError", "RebaseResult", "rebase"]


@dataclass
class RebaseResult:
    """Outcome of :func:`rebase`: ``status`` is ``rebased``, ``up-to-date``, ``conflicts`` or
    ``check_failed`` (a data check gating the branch fails on the rebased result)."""

    status: str
    branch: str
    onto: str
    old_tip: str
    new_tip: str
    replayed: list[tuple[str, str]] = field(default_factory=list)  # (original commit, its replay)
    dropped: list[str] = field(default_factory=list)  # commits whose change onto had already
    skipped_merges: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    conflict_commit: str | None = None  # the commit whose replay conflicted
    replay_result: MergeResult | None = None
    dry_run: bool = False
    checks: list[CheckResult] = field(default_factory=list)  # the checks gating the branch, run on the result
    checks_skipped: list[str] = field(default_factory=list)  # names of gating checks checks=False skipped

    @property
    def has_conflicts(self) -> bool:
        return self.status == "conflicts"

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (what ``--json`` prints)."""
        return {"status": self.status, "branch": self.branch, "onto": self.onto, "old_tip": self.old_tip,
                "new_tip": self.new_tip, "replayed": [{"from": a, "to": b} for a, b in self.replayed],
                "dropped": self.dropped, "skipped_merges": self.skipped_merges,
                "conflict_commit": self.conflict_commit, "conflicts": [c.to_json() for c in self.conflicts],
                "dry_run": self.dry_run, "checks": [c.to_json() for c in self.checks],
                "checks_skipped": self.checks_skipped}


class RebaseConflictError(MergeConflictError):
    """A replay of the rebase conflicts; nothing was published. ``rebase_result`` names the commit."""

    def __init__(self, result: RebaseResult):
        super().__init__(result.replay_result)
        self.rebase_result = result
        self.args = (f"rebase of {result.branch!r} onto {result.onto!r}: replaying commit "
                     f"{result.conflict_commit[:10]} has {len(result.conflicts)} conflict(s); nothing was published "
                     "(pass strategy= or resolutions= with a 'commit' column)",)

    def __str__(self) -> str:
        return self.args[0]


class RebaseCheckError(MergeCheckError):
    """A data check gating the branch fails on the rebased result; the branch did not move.
    ``result`` (and ``rebase_result``) is the :class:`RebaseResult`, with ``checks``."""

    def __init__(self, result: RebaseResult):
        failed = result.failed_checks
        shown = "; ".join(c.describe() for c in failed[:3]) + (f"; … {len(failed) - 3} more" if len(failed) > 3 else "")
        TrimergeError.__init__(self, f"rebase of {result.branch!r} onto {result.onto!r} fails {len(failed)} check(s): "
                                     f"{shown}; nothing was published (fix the data, or pass checks=False)")
        self.result: Any = result
        self.rebase_result = result


def _gate(repo: Repository, name: str, tip: str, enabled: bool, result: RebaseResult) -> bool:
    """Run the checks gating branch ``name`` on commit ``tip`` (the rebased result); whether all passed."""
    tables = repo.commit(tip).tables
    protected = Protection(repo).names()
    gating = judging(repo.commit(result.old_tip).tables, tables, name, protected)  # a gate it removes judges it too
    if not gating:
        return True
    if not enabled:
        result.checks_skipped = [c.name for c in gating]
        return True
    # Row-local checks run on the rows the rebase wrote when the result is known to pass them.
    result.checks = run_gated(repo, gating, lambda t: repo.open_table_version(tables[t]), tables,
                              repo.settings.get(TIMEOUT_SETTING), record=False)
    return not result.failed_checks


def _commits_to_replay(repo: Repository, tip: str, onto: str) -> list[Commit]:
    """First-parent commits from ``tip`` back to (not including) the first one ``onto`` reaches, oldest first."""
    out = []
    current = repo.commit(tip)
    while not repo.is_ancestor(current.id, onto):
        out.append(current)
        if not current.parents:
            break
        current = repo.commit(current.parents[0])
    return out[::-1]


def _split_resolutions(resolutions: Any, commits: list[Commit]) -> dict[str, Any]:
    """Resolutions per replayed commit: rows whose ``commit`` (an id or a prefix) names it; without a
    ``commit`` column, the table serves a single replay."""
    if resolutions is None:
        return {}
    from trimerge.lineage.tables.conversion import to_arrow

    table = resolutions if isinstance(resolutions, pa.Table) else to_arrow(resolutions)
    if "commit" not in table.column_names:
        if len(commits) > 1:
            raise InvalidOperationError("resolutions= of a rebase replaying several commits needs a 'commit' "
                                        "column naming the commit each row resolves")
        return {c.id: table for c in commits}
    ids = [str(v or "").strip().lower() for v in table.column("commit").to_pylist()]
    rest = table.drop_columns(["commit"])
    out: dict[str, Any] = {}
    for c in commits:
        rows = [i for i, v in enumerate(ids) if v and c.id.startswith(v)]
        if rows:
            out[c.id] = rest.take(rows)
    unknown = sorted({v for v in ids if not any(c.id.startswith(v) for c in commits if v)})
    if unknown:
        raise InvalidOperationError(f"resolutions= name commit(s) the rebase does not replay: {', '.join(unknown)}")
    return out


def rebase(branch: str | None, onto: str, *, repo: Repository, strategy: Any = None, resolutions: Any = None,
           dry_run: bool = False, actor: str | None = None, skip_merges: bool = False,
           checks: bool = True) -> RebaseResult:
    """Replay the commits of ``branch`` (default: the current branch) since its merge base with
    ``onto`` on top of ``onto``, then move ``branch`` to the last replay (all or nothing).

    ``strategy`` and ``resolutions`` settle conflicts as in a merge; a resolutions table may carry a
    ``commit`` column to resolve the conflicts of several replays in one run. Merge commits in the
    range are refused unless ``skip_merges``. A conflict raises :class:`RebaseConflictError` (with
    ``dry_run`` the result has status ``conflicts``); nothing is published. Data checks gating
    ``branch`` run on the rebased result before it moves: a failure raises :class:`RebaseCheckError`
    (with ``dry_run``: status ``check_failed``); ``checks=False`` skips them."""
    repo.check_writable()
    if not isinstance(checks, bool):
        raise InvalidOperationError(f"checks= takes True or False, not {checks!r}")
    name = repo.default_ref(branch)
    current = repo.branches.get(name)
    refuse(repo, name, "rebasing it (rebase other branches onto it)")
    if not isinstance(onto, str) or not onto:
        raise InvalidOperationError("rebase needs a ref to rebase onto (--onto REF)")
    target = repo.resolve(onto)
    tip = current.commit_id
    if onto == name or target.id == tip or repo.is_ancestor(tip, target.id):
        raise InvalidOperationError(f"cannot rebase {name!r} onto {onto!r}: that is the branch itself or a descendant "
                                    f"of it (to move the branch there, use 'trimerge branch reset {name} {onto}')")
    result = RebaseResult("up-to-date", name, onto, tip, tip, dry_run=dry_run)
    sweep_temporaries(repo)
    if repo.is_ancestor(target.id, tip):
        return result
    if not repo.merge_bases(tip, target.id):
        raise InvalidOperationError(f"cannot rebase {name!r} onto {onto!r}: their histories share no commit")
    todo = _commits_to_replay(repo, tip, target.id)
    merges = [c for c in todo if len(c.parents) > 1]
    if merges and not skip_merges:
        raise InvalidOperationError(f"cannot rebase {name!r}: {len(merges)} merge commit(s) in the range (first "
                                    f"{merges[0].id[:10]}); pass skip_merges=True (--skip-merges) to leave them out")
    result.skipped_merges = [c.id for c in merges]
    todo = [c for c in todo if len(c.parents) <= 1]
    given = _split_resolutions(resolutions, todo)
    temp = TemporaryBranch(repo, "rebase", f"rebase of {name}")
    try:
        temp.create(target.id)  # until remove(), the replays may cherry-pick onto it
        repo.reclaimed.check([target.id])  # after the ref names it: see trimerge.lineage.safety.gc
        for commit in todo:
            crashpoint("rebase_replay")
            try:
                picked = cherry_pick(commit.id, temp.name, repo=repo, strategy=strategy, resolutions=given.get(commit.id),
                                     actor=commit.actor, message=commit.message,
                                     metadata={**commit.metadata, "rebase.replayed_from": commit.id})
            except MergeConflictError as exc:
                result.status, result.conflicts = "conflicts", list(exc.result.conflicts)
                result.conflict_commit, result.replay_result = commit.id, exc.result
                if dry_run:
                    return result
                raise RebaseConflictError(result) from None
            if picked.commit is None:
                result.dropped.append(commit.id)  # onto has this change already
            else:
                result.replayed.append((commit.id, picked.commit.id))
        new_tip = repo.refs.branch(temp.name).commit_id
        result.status, result.new_tip = "rebased", new_tip
        if not _gate(repo, name, new_tip, checks, result):
            result.status = "check_failed"
            if dry_run:
                return result
            raise RebaseCheckError(result)
        if dry_run:
            return result
        crashpoint("rebase_replayed")
        skipped = f" (checks skipped: {', '.join(result.checks_skipped)})" if result.checks_skipped else ""
        _move(repo, name, tip, new_tip, actor or repo.default_actor(), onto, skipped)
        crashpoint("rebase_moved")
        return result
    finally:
        temp.remove()


def _move(repo: Repository, name: str, old: str, new: str, actor: str, onto: str, note: str = "") -> None:
    """Move ``name`` from ``old`` to ``new`` under its lease; retryable error if it moved meanwhile."""
    lease = repo.lock_branch(name, f"rebase {name}")
    try:
        branch = repo.refs.branch(name)
        if branch is None or branch.commit_id != old:
            raise ConcurrentWriteError(f"branch {name!r} moved during the rebase; nothing was published; retry")
        if repo.refs.move_branch(branch, new, actor=actor, reason=f"rebase: onto {onto}{note}") is None:
            raise ConcurrentWriteError(f"branch {name!r} moved during the rebase; nothing was published; retry")
    finally:
        lease.release()

