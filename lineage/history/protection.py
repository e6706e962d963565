"""Protected branches: repository state (not versioned) that refuses direct writes to a branch.

``_trimerge/protection.json`` holds the protected branch names and the history of every change
(``protect``/``unprotect``, actor, time), changed by compare-and-swap. On a protected branch, direct
writes — loads, deletes, updates, table create/drop/alter, transactions, reset, restore, branch
delete, a rebase of the branch itself — raise :class:`ProtectedBranchError`; merges, reverts and
cherry-picks into it (and rebases onto it) are allowed: their transactions are marked ``merging``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import ConcurrentWriteError, ProtectedBranchError
from trimerge.lineage.history.refs import Branch, now

if TYPE_CHECKING:
    from trimerge.lineage.ports import ProtectionHost

PROTECTION_DOC = "protection.json"


@dataclass(frozen=True)
class ProtectionChange:
    """One recorded change: ``action`` is ``protect`` or ``unprotect``."""

    action: str
    branch: str
    actor: str
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "branch": self.branch, "actor": self.actor, "at": format_time(self.at)}


class Protection:
    """The protected branches of a repository (read fresh each time: another process may change them)."""

    def __init__(self, repo: "ProtectionHost"):
        self.repo = repo

    def _read(self) -> tuple[dict[str, Any], Any]:
        found = self.repo.docs.read(PROTECTION_DOC)
        if found is None or not isinstance(found.doc, dict):
            return {"protected": {}, "history": []}, (None if found is None else found.version)
        doc = found.doc
        return {"protected": dict(doc.get("protected") or {}), "history": list(doc.get("history") or [])}, found.version

    def names(self) -> set[str]:
        return set(self._read()[0]["protected"])

    def is_protected(self, branch: str) -> bool:
        return branch in self.names()

    def history(self) -> list[ProtectionChange]:
        """Every change of protection, oldest first."""
        return [ProtectionChange(h["action"], h["branch"], h.get("actor", ""), parse_time(h["at"]))
                for h in self._read()[0]["history"]]

    def change(self, name: str, protect: bool, actor: str | None = None) -> Branch:
        repo = self.repo
        repo.check_writable()
        branch = repo.branches.get(name)  # BranchNotFoundError: nothing written
        who = actor or repo.default_actor()
        for _ in range(20):
            doc, version = self._read()
            if (name in doc["protected"]) == protect:
                return replace(branch, protected=protect)
            entry = ProtectionChange("protect" if protect else "unprotect", name, who, now()).to_json()
            if protect:
                doc["protected"][name] = {"actor": who, "at": entry["at"]}
            else:
                doc["protected"].pop(name, None)
            doc["history"].append(entry)
            stored = repo.docs.create(PROTECTION_DOC, doc) if version is None else \
                repo.docs.swap(PROTECTION_DOC, doc, version)
            if stored is not None:
                return replace(branch, protected=protect)
        raise ConcurrentWriteError("branch protection is being changed by another process; retry")

    def marked(self, branches: list[Branch]) -> list[Branch]:
        names = self.names() if branches else set()
        return [replace(b, protected=b.name in names) for b in branches]


def refuse(repo: "ProtectionHost", branch: str, what: str) -> None:
    """Raise :class:`ProtectedBranchError` if ``branch`` is protected (``what``: the refused write)."""
    if isinstance(branch, str) and Protection(repo).is_protected(branch):
        raise ProtectedBranchError(f"branch {branch!r} is protected: {what} refused; change it by merging a branch "
                                   f"into it (or unprotect it: 'trimerge branch unprotect {branch}')")


def refuse_direct_write(tx: Any) -> None:
    """The check at the start of a transaction: merges (``tx.merging``) may write protected branches."""
    if not getattr(tx, "merging", False) and not getattr(tx, "scratch", False):
        refuse(tx.repo, tx.branch_name, "a direct write")
