"""``repo.branches`` and ``repo.tags``: the public ref API over :mod:`trimerge.lineage.history.refs`."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.errors import (
    AlreadyExistsError,
    BranchNotFoundError,
    InvalidOperationError,
    TagNotFoundError,
)
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.history.protection import Protection, ProtectionRule, refuse
from trimerge.lineage.history.names import MAIN, is_addressable, is_internal_branch, validate_branch_name, validate_tag_name
from trimerge.lineage.history.refs import Branch, Tag, now
from trimerge.lineage.history.reset import ResetResult  # at runtime too: typing.get_type_hints resolves it
from trimerge.lineage.history.retention import DeletionRecord

if TYPE_CHECKING:
    from trimerge.lineage.ports import BranchesHost


class BranchManager:
    """``repo.branches``: create, list, get and delete graph branches."""

    def __init__(self, repo: "BranchesHost"):
        self.repo = repo

    def get_or_none(self, name: str) -> Branch | None:
        return self.repo.refs.branch(name)

    def get(self, name: str) -> Branch:
        b = self.get_or_none(name) if isinstance(name, str) else None
        if b is None or is_internal_branch(str(name)):
            raise BranchNotFoundError(f"no branch {name!r}")
        return Protection(self.repo).marked([b])[0]

    def exists(self, name: str) -> bool:
        visible = isinstance(name, str) and (not is_internal_branch(name) or is_addressable(name))
        return visible and self.get_or_none(name) is not None

    def __contains__(self, name: str) -> bool:
        return self.exists(name)

    def list(self, include_internal: bool = False) -> list[Branch]:
        found = [self.get_or_none(n) for n in self.repo.refs.branch_names(include_internal)]
        return Protection(self.repo).marked(sorted((b for b in found if b), key=lambda b: (b.name != MAIN, b.name)))

    def protect(self, name: str, *, approvals: int | None = None, checks: bool | None = None,
                actor: str | None = None) -> Branch:
        """Refuse direct writes to branch ``name`` from now on: it changes only by merges, reverts and
        cherry-picks (see :mod:`trimerge.lineage.history.protection`); recorded with actor and time.

        ``approvals=K`` (K > 0): only the merge of a merge request (``repo.requests``) with K
        approvals of its current source tip by people other than its author, and no changes
        requested, may change it; ``checks`` (default True with approvals): that merge must run the
        data checks gating the branch. None keeps what the branch has."""
        return Protection(self.repo).change(name, True, actor, approvals=approvals, checks=checks)

    def protection(self, name: str) -> "ProtectionRule | None":
        """What protected branch ``name`` requires of merges into it (None: it is not protected)."""
        self.get(name)
        return Protection(self.repo).rule(name)

    def unprotect(self, name: str, *, actor: str | None = None) -> Branch:
        """Allow direct writes to branch ``name`` again; recorded with actor and time."""
        return Protection(self.repo).change(name, False, actor)

    def names(self) -> builtins.list[str]:
        return [b.name for b in self.list()]

    def create(self, name: str, from_ref: str | None = None) -> Branch:
        """Create a branch at ``from_ref`` (default: the current branch). Atomic; fails if it exists.

        A branch may start at any commit whose data gc has not reclaimed, including the tip of a
        deleted branch within the retention period (see :meth:`deleted`)."""
        repo = self.repo
        repo.check_writable()
        validate_branch_name(name)
        source = repo.default_ref(from_ref)  # HEAD too: the branch it names is the new one's origin
        commit = repo.resolve(source)
        repo.check_readable(commit)
        parent = source if self.exists(source) else None
        crashpoint("branch_resolved")
        created = repo.refs.create_branch(Branch(name, commit.id, new_ulid(), now(), parent),
                                          actor=repo.default_actor(), reason=f"branch: created from {source}")
        if created is None:
            raise AlreadyExistsError(f"branch {name!r} exists already")
        crashpoint("branch_ref_created")
        try:
            repo.reclaimed.check([commit.id])  # after the ref exists: see trimerge.lineage.safety.gc
        except BaseException:
            repo.refs.delete_branch(name, old=commit.id, actor=repo.default_actor(),
                                    reason="branch: creation undone (its commit is reclaimed by gc)")
            raise
        return created

    def delete(self, name: str, *, force: bool = False) -> Branch:
        """Delete a branch; returns it as it was. Refuses ``main``, the current branch and — unless
        ``force`` — a branch that other existing branches were created from (see :meth:`children`;
        they keep working when it goes: their data never depended on its ref) or whose tip no
        other branch or tag reaches (its commits would become unreachable). Its data stays
        readable until gc runs after the retention period."""
        repo = self.repo
        repo.check_writable()
        self.get(name)
        if name == MAIN:
            raise InvalidOperationError("cannot delete 'main'")
        refuse(repo, name, "deleting it")
        if name == repo.current_branch:
            raise InvalidOperationError(f"cannot delete {name!r}: it is the current branch (switch first)")
        if not force:
            self._check_deletable(self.get(name))  # before the lease: a refusal writes nothing
        lease = repo.lock_branch(name, f"delete branch {name}")
        try:
            branch = self.get(name)
            if not force:
                self._check_deletable(branch)
        except BaseException:
            lease.release(untouched=True)
            raise
        try:
            # The record first: gc reads refs before records, so the tip is always rooted somewhere.
            repo.deletions.record("branch", name, branch.commit_id, now())
            repo.refs.delete_branch(name, old=branch.commit_id, actor=repo.default_actor())
        finally:
            lease.release()
        return branch

    def reset(self, name: str, ref: str, *, actor: str | None = None, dry_run: bool = False,
              expected_tip: str | None = None) -> "ResetResult":
        """Move branch ``name`` to ``ref``, as git's ``reset --hard`` moves a branch (see
        :func:`trimerge.lineage.history.reset.reset`): under the branch's lease, recorded in the reflog, so
        ``reset(name, f"{name}@{{1}}")`` undoes it. Only from the tip ``ref`` was resolved at (and
        ``expected_tip``'s commit, when given): a branch that moved meanwhile is a retryable
        :class:`~trimerge.lineage.errors.ConcurrentWriteError`, with nothing changed."""
        from trimerge.lineage.history.reset import reset

        return reset(self.repo, name, ref, actor=actor, dry_run=dry_run, expected_tip=expected_tip)

    def children(self, name: str) -> builtins.list[Branch]:
        """The existing branches created from branch ``name`` — from its current incarnation: a
        branch created from an earlier, deleted branch of the same name is not its child."""
        parent = self.get_or_none(name)
        since = parent.created_at if parent is not None else None
        return [b for b in self.list() if b.parent == name and b.name != name
                and (since is None or b.created_at >= since)]

    def _check_deletable(self, branch: Branch) -> None:
        children = self.children(branch.name)
        if children:
            names = ", ".join(repr(b.name) for b in children[:10]) + (f" and {len(children) - 10} more"
                                                                       if len(children) > 10 else "")
            raise InvalidOperationError(
                f"cannot delete branch {branch.name!r}: {names} {'was' if len(children) == 1 else 'were'} created "
                f"from it; delete {'it' if len(children) == 1 else 'them'} first, or delete it anyway with force=True "
                f"('trimerge branch delete -D {branch.name}': they keep working)")
        self._check_merged(branch)

    def _check_merged(self, branch: Branch) -> None:
        if not self._reached_elsewhere(branch):
            raise InvalidOperationError(
                f"branch {branch.name!r} is not fully merged: no other branch or tag reaches its tip "
                f"{branch.commit_id[:10]}; delete it anyway with force=True ('trimerge branch delete -D {branch.name}')")

    def _reached_elsewhere(self, branch: Branch) -> bool:
        repo = self.repo
        others = [b.commit_id for b in self.list() if b.name != branch.name] + [t.commit_id for t in repo.tags.list()]
        return any(tip == branch.commit_id or repo.is_ancestor(branch.commit_id, tip) for tip in others)

    def deleted(self) -> builtins.list[DeletionRecord]:
        """Branches deleted within the retention period gc last honoured, newest first."""
        records = [r for r in self.repo.deletions.records() if r.kind == "branch"]
        return sorted(records, key=lambda r: r.deleted_at, reverse=True)


class TagManager:
    """``repo.tags``: immutable named commits; tagging pins the tagged table versions."""

    def __init__(self, repo: "BranchesHost"):
        self.repo = repo

    def get_or_none(self, name: str) -> Tag | None:
        return self.repo.refs.tag(name)

    def get(self, name: str) -> Tag:
        t = self.get_or_none(name)
        if t is None:
            raise TagNotFoundError(f"no tag {name!r}")
        return t

    def list(self) -> list[Tag]:
        found = [self.get_or_none(n) for n in self.repo.refs.tag_names()]
        return sorted((t for t in found if t), key=lambda t: t.name)

    def create(self, name: str, ref: str | None = None, *, message: str = "", actor: str | None = None) -> Tag:
        """Tag the commit ``ref`` resolves to (default: the current branch)."""
        repo = self.repo
        repo.check_writable()
        validate_tag_name(name)
        if self.get_or_none(name):
            raise AlreadyExistsError(f"tag {name!r} exists already")
        commit = repo.resolve(repo.current_branch if ref is None else ref)
        repo.check_readable(commit)
        tag = Tag(name, commit.id, now(), actor or repo.default_actor(), message)
        # Claim the name atomically first, so racing creators cannot touch each other's pins.
        crashpoint("tag_resolved")
        if not repo.refs.create_tag(tag):
            raise AlreadyExistsError(f"tag {name!r} exists already")
        crashpoint("tag_ref_created")
        try:
            repo.reclaimed.check([commit.id])  # after the ref exists: see trimerge.lineage.safety.gc
            self.pin(tag)
        except BaseException:
            repo.refs.delete_tag(name)
            raise
        return tag

    def pin(self, tag: Tag) -> None:
        """Lance tags ``t-<name>`` on every tagged table version (an orphan of a crash is re-pointed)."""
        for tv in self.repo.commit(tag.commit_id).tables.values():
            self.repo.table_store.pin(tv, f"t-{tag.name}")

    def delete(self, name: str) -> None:
        repo = self.repo
        repo.check_writable()
        tag = self.get(name)
        repo.deletions.record("tag", name, tag.commit_id, now())
        repo.refs.delete_tag(name)
        for tv in repo.commit(tag.commit_id).tables.values():
            try:
                repo.table_store.unpin(tv.dataset, f"t-{name}")
            except Exception:  # an orphan pin is removed by gc
                pass
