"""``branch reset``: move a branch to any commit, as git's ``reset --hard`` moves a branch.

The move is one compare-and-swap of the branch document under the branch's lease, recorded in the
reflog *before* the swap (see :mod:`trimerge.lineage.history.reflog`), so a crash leaves the branch either
where it was or where it was sent, and the commits it leaves behind stay reachable from the reflog
until gc's retention passes: ``reset(name, f"{name}@{{1}}")`` undoes it.

A reset moves the branch only from the tip its target was resolved at. The target is resolved
between two reads of the branch that agree (so ``c~1`` is the parent of the tip the reset reports
as ``old``), and the branch is moved under its lease only if it is still at that tip: a commit
another writer published in between is never dropped unseen — the reset fails with the retryable
:class:`ConcurrentWriteError` instead, having changed nothing. ``expected_tip`` makes the tip the
caller itself saw the condition (git's ``update-ref REF NEW OLD``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.errors import BranchNotFoundError, ConcurrentWriteError, RefSyntaxError
from trimerge.lineage.storage.faults import crashpoint

from trimerge.lineage.history.protection import refuse

if TYPE_CHECKING:
    from trimerge.lineage.commit import Commit
    from trimerge.lineage.history.refs import Branch
    from trimerge.lineage.ports import ResetHost

__all__ = ["ResetResult", "reset", "resolved_at_tip", "unreachable_after"]


@dataclass
class ResetResult:
    """What a reset did (or, with ``dry_run``, would do)."""

    branch: str
    old: str
    new: str
    unreachable: int  # commits no branch or tag reaches any more (kept by the reflog until gc's retention)
    dry_run: bool = False

    @property
    def moved(self) -> bool:
        return self.old != self.new

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (what ``--json`` prints)."""
        return {"branch": self.branch, "old": self.old, "new": self.new, "moved": self.moved,
                "unreachable": self.unreachable, "dry_run": self.dry_run}


def unreachable_after(repo: "ResetHost", old: str, branch: str, new: str) -> int:
    """How many commits ``old`` reaches that no branch or tag would reach once ``branch`` is at ``new``."""
    tips = [new] + [b.commit_id for b in repo.branches.list(include_internal=True) if b.name != branch]
    tips += [t.commit_id for t in repo.tags.list()]
    reached = set(graphalg.iter_history(repo.commits, tips))
    return sum(1 for cid in graphalg.iter_history(repo.commits, [old]) if cid not in reached)


def reset(repo: "ResetHost", name: str, ref: str, *, actor: str | None = None, dry_run: bool = False,
          expected_tip: str | None = None) -> ResetResult:
    """Move branch ``name`` to the commit ``ref`` names (any ref expression, ``NAME@{N}`` included),
    from the tip ``ref`` was resolved at — and, when ``expected_tip`` (a commit id or any ref
    expression) is given, only if that is the commit it names.

    Bad input (no such branch, a ref that does not resolve) raises before anything is written; a
    concurrent writer holding the branch makes it wait; a branch that moved after the target was
    resolved (or is not at ``expected_tip``) fails with the retryable :class:`ConcurrentWriteError`,
    having changed nothing."""
    repo.check_writable()
    if not isinstance(ref, str) or not ref:
        raise RefSyntaxError("reset needs a ref to move the branch to")
    if expected_tip is not None and (not isinstance(expected_tip, str) or not expected_tip):
        raise RefSyntaxError("expected_tip names the commit the branch must be at: a commit id or a ref")
    repo.branches.get(name)  # BranchNotFoundError
    refuse(repo, name, "reset")
    seen, target = resolved_at_tip(repo, name, ref)
    repo.check_readable(target)
    if expected_tip is not None:
        expected = repo.resolve(expected_tip).id
        if seen.commit_id != expected:
            raise ConcurrentWriteError(f"branch {name!r} is at {seen.commit_id[:10]}, not at {expected[:10]} as "
                                       f"expected; nothing was changed; refresh and retry")
    if dry_run or seen.commit_id == target.id:
        return ResetResult(name, seen.commit_id, target.id,
                           unreachable_after(repo, seen.commit_id, name, target.id), dry_run)
    crashpoint("reset_resolved")
    lease = repo.lock_branch(name, f"reset {name}")
    who = actor or repo.default_actor()
    touched = False
    try:
        branch = repo.refs.branch(name)
        if branch is None:
            raise BranchNotFoundError(f"no branch {name!r}")
        if branch.commit_id != seen.commit_id:  # a commit published since: never dropped unseen
            raise ConcurrentWriteError(f"branch {name!r} moved from {seen.commit_id[:10]} to {branch.commit_id[:10]} "
                                       f"after {ref!r} was resolved; nothing was changed; refresh and retry")
        crashpoint("reset_locked")
        touched = True
        moved = repo.refs.move_branch(branch, target.id, actor=who, reason=f"reset: moving to {ref}")
        if moved is None:
            raise ConcurrentWriteError(f"branch {name!r} moved during the reset; refresh and retry")
        crashpoint("reset_moved")
        try:
            repo.reclaimed.check([target.id])  # after the ref names it: see trimerge.lineage.safety.gc
        except BaseException:
            repo.refs.move_branch(moved, branch.commit_id, actor=who,
                                  reason="reset: undone (its commit is reclaimed by gc)")
            raise
    finally:
        lease.release(untouched=not touched)  # a refusal leaves the lease as it found it
    return ResetResult(name, branch.commit_id, target.id, unreachable_after(repo, branch.commit_id, name, target.id))


#: How often the target is resolved again when the branch moves while it is being resolved.
RESOLVE_TRIES = 3


def resolved_at_tip(repo: "ResetHost", name: str, ref: str) -> "tuple[Branch, Commit]":
    """Branch ``name`` as read and the commit ``ref`` names, from one state of the branch: the
    branch is read before and after the resolution, and the two reads must agree, so a ref that
    depends on it (``c~1``, ``c@{1}``) names what it names from that tip. A branch that keeps
    moving meanwhile is a retryable :class:`ConcurrentWriteError`."""
    before = repo.refs.branch(name)
    for _ in range(RESOLVE_TRIES):
        target = repo.resolve(ref)
        after = repo.refs.branch(name)
        if after is None:
            raise BranchNotFoundError(f"no branch {name!r}")
        if before is not None and after.version == before.version:
            return after, target
        before = after
    raise ConcurrentWriteError(f"branch {name!r} kept moving while {ref!r} was resolved; retry")
