"""Fast-forward merges, git's habit as an opt-in: ``merge(..., fast_forward="allow" | "only")``.

The default (``"never"``) is the design's rule, from lakeFS: a merge is always a new commit with
the destination's tip as first parent, so a branch's first-parent history records every merge
into it. ``"allow"`` moves the destination to the source's tip when the destination has not
diverged (it is an ancestor of the source) and merges otherwise; ``"only"`` moves it or refuses
(:class:`FastForwardError`, exit 1), changing nothing.

A fast-forward publishes no commit, so nothing could run the rules a merge commit passes through:
a protected destination, or data checks that gate it by name, take the merge commit under
``"allow"`` and refuse under ``"only"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trimerge.lineage.errors import ConcurrentWriteError, InvalidOperationError, TrimergeError
from trimerge.lineage.commit import Commit

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

__all__ = ["FAST_FORWARD_MODES", "FastForwardError", "check_mode", "fast_forward_blocker", "move"]

FAST_FORWARD_MODES = ("never", "allow", "only")


class FastForwardError(TrimergeError):
    """``fast_forward="only"`` (``--ff-only``) and the destination cannot simply move: it has
    diverged, or a rule needs a merge commit. Nothing changed."""

    exit_code = 1


def check_mode(mode: object) -> str:
    """``fast_forward=`` checked: one of ``never``, ``allow``, ``only``."""
    if not isinstance(mode, str) or mode not in FAST_FORWARD_MODES:
        raise InvalidOperationError(f"fast_forward= takes 'never', 'allow' or 'only', not {mode!r}")
    return mode


def fast_forward_blocker(repo: "Repository", dest: str, ours: Commit, theirs: Commit) -> str | None:
    """Why ``dest`` (at ``ours``) cannot just move to ``theirs``; None when it can."""
    if not repo.is_ancestor(ours.id, theirs.id):
        return f"'{dest}' has commits the source does not have (the histories diverged)"
    if repo.branches.protection(dest) is not None:
        return f"'{dest}' is protected: it changes by merge commits only"
    gating = sorted({c.name for ref in (ours.id, theirs.id) for c in repo.checks.list(ref)
                     if c.gates is not None and dest in c.gates})
    if gating:
        return f"data check(s) {', '.join(gating)} gate '{dest}' and run on a merge commit"
    return None


def move(repo: "Repository", dest: str, ours: Commit, theirs: Commit, *, actor: str | None, source: str) -> None:
    """Move branch ``dest`` from ``ours`` to ``theirs`` under its lease (a writer that moved it
    meanwhile: :class:`ConcurrentWriteError`, retryable)."""
    repo.check_writable()
    lease = repo.lock_branch(dest, f"merge {source} (fast-forward)")
    try:
        current = repo.refs.branch(dest)
        if current is None or current.commit_id != ours.id or repo.refs.move_branch(
                current, theirs.id, actor=actor or repo.default_actor(),
                reason=f"merge {source}: fast-forward") is None:
            raise ConcurrentWriteError(f"branch {dest!r} moved during the merge; retry")
    finally:
        lease.release()

