"""``branch reset``: move a branch to any commit, as git's ``reset --hard`` moves a branch.

The move is one compare-and-swap of the branch document under the branch's lease, recorded in the
reflog *before* the swap (see :mod:`trimerge.lineage.history.reflog`), so a crash leaves the branch either
where it was or where it was sent, and the commits it leaves behind stay reachable from the reflog
until gc's retention passes: ``reset(name, f"{name}@{{1}}")`` undoes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.errors import BranchNotFoundError, ConcurrentWriteError, RefSyntaxError
from trimerge.lineage.storage.faults import crashpoint

from trimerge.lineage.history.protection import refuse

if TYPE_CHECKING:
    from trimerge.lineage.ports import ResetHost

__all__ = ["ResetResult", "reset", "unreachable_after"]


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


def reset(repo: "ResetHost", name: str, ref: str, *, actor: str | None = None, dry_run: bool = False) -> ResetResult:
    """Move branch ``name`` to the commit ``ref`` names (any ref expression, ``NAME@{N}`` included).

    Bad input (no such branch, a ref that does not resolve) raises before anything is written; a
    concurrent writer holding the branch makes it wait, then fail with the retryable
    :class:`ConcurrentWriteError`."""
    repo.check_writable()
    if not isinstance(ref, str) or not ref:
        raise RefSyntaxError("reset needs a ref to move the branch to")
    current = repo.branches.get(name)  # BranchNotFoundError
    refuse(repo, name, "reset")
    target = repo.resolve(ref)
    repo.check_readable(target)
    if dry_run or current.commit_id == target.id:
        return ResetResult(name, current.commit_id, target.id,
                           unreachable_after(repo, current.commit_id, name, target.id), dry_run)
    lease = repo.lock_branch(name, f"reset {name}")
    try:
        branch = repo.refs.branch(name)
        if branch is None:
            raise BranchNotFoundError(f"no branch {name!r}")
        crashpoint("reset_locked")
        moved = repo.refs.move_branch(branch, target.id, actor=actor or repo.default_actor(),
                                      reason=f"reset: moving to {ref}")
        if moved is None:
            raise ConcurrentWriteError(f"branch {name!r} moved during the reset; refresh and retry")
        crashpoint("reset_moved")
        try:
            repo.reclaimed.check([target.id])  # after the ref names it: see trimerge.lineage.safety.gc
        except BaseException:
            repo.refs.move_branch(moved, branch.commit_id, actor=actor or repo.default_actor(),
                                  reason="reset: undone (its commit is reclaimed by gc)")
            raise
    finally:
        lease.release()
    return ResetResult(name, branch.commit_id, target.id, unreachable_after(repo, branch.commit_id, name, target.id))
