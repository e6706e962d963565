"""Temporary branches: branches trimerge creates for one computation and removes when it ends (a
rebase builds its replays on one), and the cleanup of those whose process died.

A temporary branch is named ``__trimerge__/<kind>/<ulid>`` (:data:`~trimerge.lineage.history.names.TEMPORARY_SPACE`):
a space no user can create a name in, hidden from listings, ref expressions and the reflog. Before
its branch document exists it is recorded in ``temporaries/<ulid>.json`` and its owner holds the
lease ``<name>-owner``; cleanup removes a branch only when such a record names it and its owner's
lease can be taken (the owner is dead), so it never touches a user's branch nor a live computation.
A read-write open (recovery) and every rebase clean up.

Older versions named their rebase branches ``rebasing/<ulid>`` — a name users may hold too. One
of those is removed only when the older rebase's own owner lease (``rebasing/<ulid>-owner``, held
for "rebase of ...") proves it was trimerge's, and that owner is dead; any other ``rebasing/*``
branch is a user's and stays.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.commit import format_time
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.history.names import addressing, is_temporary_branch, temporary_branch_name
from trimerge.lineage.history.refs import Branch, now

if TYPE_CHECKING:
    from trimerge.lineage.ports import LeaseHandle, TemporariesHost

JOURNAL = "temporaries"
OWNER_SUFFIX = "-owner"
# What an older version's rebase left: its owner lease, whose holder purpose it wrote as "rebase of ...".
_LEGACY_OWNER = re.compile(r"rebasing/[0-9a-z]{26}-owner")
_LEGACY_PURPOSE = "rebase of "


def _journal_key(ulid: str) -> str:
    return f"{JOURNAL}/{ulid}.json"


class TemporaryBranch:
    """One temporary branch: :meth:`create` it at a commit, :meth:`remove` it when done."""

    def __init__(self, repo: "TemporariesHost", kind: str, purpose: str):
        self.repo = repo
        self.ulid = new_ulid().lower()
        self.name = temporary_branch_name(kind, self.ulid)
        self.purpose = purpose
        self.owner = repo.branch_lease(self.name + OWNER_SUFFIX, purpose)
        self._addressing = addressing(self.name)
        self._addressed = False

    def create(self, commit_id: str) -> Branch:
        """Create the branch at ``commit_id``; from now until :meth:`remove`, the calling code may
        write and resolve it like a branch (:func:`~trimerge.lineage.history.names.addressing`)."""
        repo = self.repo
        self.owner.acquire(repo.lock_timeout, purpose_label(self.purpose))
        # The record first: cleanup only ever removes a branch a record names.
        repo.docs.create(_journal_key(self.ulid), {"branch": self.name, "purpose": self.purpose,
                                                   "created_at": format_time(now())})
        crashpoint("temporary_recorded")
        created = repo.refs.create_branch(Branch(self.name, commit_id, new_ulid(), now(), None))
        if created is None:
            raise ConcurrentWriteError("a temporary branch of that name exists already; retry")
        self._addressing.__enter__()
        self._addressed = True
        return created

    def remove(self) -> None:
        """Remove the branch, then its leases and record (a crash in between leaves the record, so
        the next cleanup finishes the job)."""
        if self._addressed:
            self._addressed = False
            self._addressing.__exit__(None, None, None)
        _remove(self.repo, self.name, self.ulid)
        self.owner.release()
        self.repo.docs.delete(self.owner.key)


def purpose_label(purpose: str) -> str:
    return f"temporary branch ({purpose})"


def _remove(repo: "TemporariesHost", name: str, ulid: str | None) -> None:
    repo.refs.delete_branch(name)
    repo.docs.delete(repo.branch_lease(name, "").key)
    if ulid is not None:
        repo.docs.delete(_journal_key(ulid))


def _busy_branches(repo: "TemporariesHost") -> set[str]:
    """Branches an interrupted write still names: recovery repairs those before they can go."""
    from trimerge.lineage.safety.recovery import INTENTS

    out = set()
    for key in repo.docs.list(INTENTS):
        try:
            doc = repo.docs.get(key)
        except CorruptRepositoryError:
            continue
        if isinstance(doc, dict):
            out.add(str(doc.get("branch")))
    return out


def _take_dead(repo: "TemporariesHost", owner_name: str) -> "LeaseHandle | None":
    """The owner's lease, taken, when its holder is dead or gone; None while it lives (or is damaged)."""
    lease = repo.branch_lease(owner_name, "clean up a dead computation's temporary branch")
    try:
        return lease if lease.try_acquire() else None
    except CorruptRepositoryError:  # fsck reports a damaged lease; cleanup leaves it be
        return None


def sweep(repo: "TemporariesHost") -> list[str]:
    """Remove the temporary branches whose owner died; returns their names."""
    docs = repo.docs
    journal = docs.list(JOURNAL)
    legacy = [key for key in docs.list("locks") if _LEGACY_OWNER.fullmatch(_lease_name(key))]
    if not journal and not legacy:
        return []  # the usual case: every read-write open passes here
    busy = _busy_branches(repo)
    removed = []
    for key in journal:
        try:
            doc = docs.get(key)
        except CorruptRepositoryError:
            continue
        name = doc.get("branch") if isinstance(doc, dict) else None
        if not isinstance(name, str) or not is_temporary_branch(name) or name in busy:
            continue
        owner = _take_dead(repo, name + OWNER_SUFFIX)
        if owner is None:
            continue
        ulid = key.rsplit("/", 1)[-1].removesuffix(".json")
        existed = repo.refs.branch(name) is not None
        _remove(repo, name, ulid)
        owner.release()
        docs.delete(owner.key)
        if existed:
            removed.append(name)
    return removed + _sweep_legacy(repo, legacy, busy)


def _lease_name(key: str) -> str:
    return unquote(key.rsplit("/", 1)[-1].removesuffix(".lock"))


def _sweep_legacy(repo: "TemporariesHost", keys: list[str], busy: set[str]) -> list[str]:
    """Older versions' rebase branches, removed only where their own owner lease proves them."""
    removed = []
    for key in keys:
        owner_name = _lease_name(key)
        name = owner_name.removesuffix(OWNER_SUFFIX)
        holder = repo.branch_lease(owner_name, "").holder()
        if holder is None or not holder.purpose.startswith(_LEGACY_PURPOSE) or name in busy:
            continue
        owner = _take_dead(repo, owner_name)
        if owner is None:
            continue
        existed = repo.refs.branch(name) is not None
        _remove(repo, name, None)
        owner.release()
        repo.docs.delete(owner.key)
        if existed:
            removed.append(name)
    return removed
