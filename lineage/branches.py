"""``repo.branches`` and ``repo.tags``: the public ref API over :mod:`trimerge.lineage.refs`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ulid import ULID

from trimerge.lineage.errors import (
    AlreadyExistsError,
    BranchNotFoundError,
    InvalidOperationError,
    TagNotFoundError,
)
from trimerge.lineage.maintenance import CleanupReport, reclaim_key
from trimerge.lineage.names import MAIN, is_internal_branch, validate_branch_name, validate_tag_name
from trimerge.lineage.refs import Branch, Tag, now

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository


class BranchManager:
    """``repo.branches``: create, list, get and delete graph branches."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    def get_or_none(self, name: str) -> Branch | None:
        return self.repo.refs.branch(name)

    def get(self, name: str) -> Branch:
        b = self.get_or_none(name) if isinstance(name, str) else None
        if b is None or is_internal_branch(str(name)):
            raise BranchNotFoundError(f"no branch {name!r}")
        return b

    def exists(self, name: str) -> bool:
        return isinstance(name, str) and not is_internal_branch(name) and self.get_or_none(name) is not None

    def __contains__(self, name: str) -> bool:
        return self.exists(name)

    def list(self, include_internal: bool = False) -> list[Branch]:
        found = [self.get_or_none(n) for n in self.repo.refs.branch_names(include_internal)]
        return sorted((b for b in found if b), key=lambda b: (b.name != MAIN, b.name))

    def names(self) -> list[str]:
        return [b.name for b in self.list()]

    def create(self, name: str, from_ref: str | None = None) -> Branch:
        """Create a branch at ``from_ref`` (default: the current branch). Atomic; fails if it exists."""
        repo = self.repo
        repo.check_writable()
        validate_branch_name(name)
        if repo.docs.get(reclaim_key(name)):
            raise AlreadyExistsError(
                f"branch name {name!r} was deleted but its storage is not reclaimed yet; run 'trimerge cleanup' first")
        source = repo.current_branch if from_ref is None else from_ref
        commit = repo.resolve(source)
        repo.check_readable(commit)
        parent = source if self.exists(source) else None
        created = repo.refs.create_branch(Branch(name, commit.id, str(ULID()), now(), parent))
        if created is None:
            raise AlreadyExistsError(f"branch {name!r} exists already")
        return created

    def delete(self, name: str) -> list[str]:
        """Delete a branch. Refuses the current branch, ``main`` and branches others were created from.

        Its Lance forks are reclaimed best-effort (those no other ref reaches); what is left is
        reclaimed by :meth:`Repository.cleanup`. Returns the forks still pending."""
        repo = self.repo
        repo.check_writable()
        self.get(name)
        if name == MAIN:
            raise InvalidOperationError("cannot delete 'main'")
        if name == repo.current_branch:
            raise InvalidOperationError(f"cannot delete {name!r}: it is the current branch (switch first)")
        children = [b.name for b in self.list() if b.parent == name]
        if children:
            raise InvalidOperationError(
                f"cannot delete {name!r}: branches were created from it: {', '.join(sorted(children))}")
        lease = repo.lock_branch(name, f"delete branch {name}")
        try:
            branch = self.get(name)
            owned = {(tv.dataset, tv.lance_branch) for tv in repo.commit(branch.commit_id).tables.values()
                     if tv.owner == branch.id}
            repo.refs.delete_branch(name)
        finally:
            lease.release()
        if not owned:
            return []
        report = CleanupReport()
        try:
            wanted = repo.maintenance.referenced_locations(repo.maintenance.reachable_commits())
            repo.maintenance.reclaim_forks(wanted, {d for d, _ in owned}, report)
        except Exception:  # best effort: cleanup finishes the job
            report.pending.extend(f"{d}:{f}" for d, f in owned)
        pending = [p for p in report.pending if tuple(p.split(":", 1)) in owned]
        if pending:
            key = reclaim_key(name)
            found = repo.docs.read(key)
            repo.docs.write(key, {"branch": name, "forks": pending}, found.version if found else None)
        return pending


class TagManager:
    """``repo.tags``: immutable named commits; tagging pins the tagged table versions."""

    def __init__(self, repo: "Repository"):
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
        if not repo.refs.create_tag(tag):
            raise AlreadyExistsError(f"tag {name!r} exists already")
        try:
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
        repo.refs.delete_tag(name)
        for tv in repo.commit(tag.commit_id).tables.values():
            try:
                repo.table_store.unpin(tv.dataset, f"t-{name}")
            except Exception:  # an orphan pin is removed by cleanup
                pass
