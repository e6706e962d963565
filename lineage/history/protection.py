"""Protected branches: repository state (not versioned) that refuses direct writes to a branch.

``_trimerge/protection.json`` holds the protected branch names and the history of every change
(``protect``/``unprotect``, actor, time), changed by compare-and-swap. On a protected branch, direct
writes — loads, deletes, updates, table create/drop/alter, transactions, reset, restore, branch
delete, a rebase of the branch itself — raise :class:`ProtectedBranchError`; merges, reverts and
cherry-picks into it (and rebases onto it) are allowed: their transactions are marked ``merging``.

A protected branch may also require reviews (``protect(name, approvals=K, checks=True)``): then a
merge into it must be the merge of a merge request (:mod:`trimerge.lineage.history.requests`; its
commit metadata names it) that is open, into this branch, whose source tip is what is merged, with
K approvals of that tip by people other than its author and no changes requested, and — with
``checks`` — whose data checks ran. Anything else merging into it (a plain merge, a revert, a
cherry-pick, a pull) is refused with :class:`ApprovalRequiredError`. The rule is checked when the
merge's transaction begins and again under the branch's lease just before it publishes
(:func:`check_request_merge`), so a review or a push to the source landing meanwhile is judged too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import (ApprovalRequiredError, ConcurrentWriteError, InvalidOperationError,
                                     ProtectedBranchError)
from trimerge.lineage.history.refs import Branch, now

if TYPE_CHECKING:
    from trimerge.lineage.ports import ProtectionHost

PROTECTION_DOC = "protection.json"
#: Most approvals a rule may require (a typo beyond this would lock the branch for good).
MAX_APPROVALS = 100


@dataclass(frozen=True)
class ProtectionRule:
    """What a protected branch requires of merges into it: ``approvals`` (0: none) approvals of a
    merge request, and with ``checks`` that the merge ran the data checks gating the branch (a
    merge with ``checks=False`` is refused)."""

    branch: str
    approvals: int = 0
    checks: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "approvals": self.approvals, "checks": self.checks}


@dataclass(frozen=True)
class ProtectionChange:
    """One recorded change: ``action`` is ``protect`` or ``unprotect``."""

    action: str
    branch: str
    actor: str
    at: datetime
    approvals: int = 0
    checks: bool = False

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"action": self.action, "branch": self.branch, "actor": self.actor,
                               "at": format_time(self.at)}
        if self.action == "protect":
            doc.update(approvals=self.approvals, checks=self.checks)
        return doc


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

    def rule(self, branch: str) -> ProtectionRule | None:
        """What protected ``branch`` requires of merges into it; None when it is not protected."""
        return self._rule(self._read()[0], branch)

    @staticmethod
    def _rule(doc: dict[str, Any], branch: str) -> ProtectionRule | None:
        entry = doc["protected"].get(branch) if isinstance(branch, str) else None
        if entry is None:
            return None
        entry = entry if isinstance(entry, dict) else {}
        approvals = entry.get("approvals", 0)
        approvals = approvals if isinstance(approvals, int) and not isinstance(approvals, bool) else 0
        return ProtectionRule(branch, max(0, approvals), entry.get("checks") is True)

    def history(self) -> list[ProtectionChange]:
        """Every change of protection, oldest first."""
        return [ProtectionChange(h["action"], h["branch"], h.get("actor", ""), parse_time(h["at"]),
                                 int(h.get("approvals", 0) or 0), h.get("checks") is True)
                for h in self._read()[0]["history"]]

    def change(self, name: str, protect: bool, actor: str | None = None, *, approvals: int | None = None,
               checks: bool | None = None) -> Branch:
        """Protect or unprotect ``name``. Protecting: ``approvals``/``checks`` set the rule (None keeps
        what the branch has, or no approvals and checks for a branch newly protected)."""
        repo = self.repo
        repo.check_writable()
        if approvals is not None and (isinstance(approvals, bool) or not isinstance(approvals, int)
                                      or not 0 <= approvals <= MAX_APPROVALS):
            raise InvalidOperationError(f"approvals must be a whole number from 0 to {MAX_APPROVALS}, not {approvals!r}")
        if checks is not None and not isinstance(checks, bool):
            raise InvalidOperationError(f"checks must be True or False, not {checks!r}")
        branch = repo.branches.get(name)  # BranchNotFoundError: nothing written
        who = actor or repo.default_actor()
        for _ in range(20):
            doc, version = self._read()
            old = self._rule(doc, name)
            count = approvals if approvals is not None else (old.approvals if old else 0)
            # A rule requiring reviews requires the checks too unless told otherwise; plain
            # protection keeps what it always meant (a merge may skip the checks, and says so).
            want = ProtectionRule(name, count, checks if checks is not None else
                                  (True if count else (old.checks if old else False)))
            if (old is not None) == protect and (not protect or old == want):
                return replace(branch, protected=protect)
            entry = ProtectionChange("protect" if protect else "unprotect", name, who, now(), want.approvals,
                                     want.checks).to_json()
            if protect:
                doc["protected"][name] = {"actor": who, "at": entry["at"], "approvals": want.approvals,
                                          "checks": want.checks}
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
    """The check at the start of a transaction: merges (``tx.merging``) may write protected branches,
    but into one that requires approvals only the merge of a request (checked in full by
    :func:`check_request_merge` before it publishes)."""
    if getattr(tx, "scratch", False):
        return
    if not getattr(tx, "merging", False):
        refuse(tx.repo, tx.branch_name, "a direct write")
        return
    if isinstance(tx.branch_name, str) and _request_id(tx) is None:
        rule = Protection(tx.repo).rule(tx.branch_name)
        if rule is not None and rule.approvals:
            _refuse_unreviewed(rule, tx.metadata.get("merge.source"))


def _request_id(tx: Any) -> str | None:
    from trimerge.lineage.history.requests import REQUEST_META

    metadata = getattr(tx, "metadata", {})
    if "rebase.replayed_from" in metadata:  # a rebase replays a request's merge commit, metadata and all
        return None
    value = metadata.get(REQUEST_META)
    return value if isinstance(value, str) else None


def _refuse_unreviewed(rule: ProtectionRule, source: Any) -> None:
    shown = source if isinstance(source, str) and source else "SOURCE"
    raise ApprovalRequiredError(
        f"branch {rule.branch!r} requires {rule.approvals} approval(s): merges into it go through a reviewed "
        f"merge request ('trimerge request create {shown} --into {rule.branch} --title TITLE', then "
        f"'trimerge request merge N')")


def check_request_merge(tx: Any) -> None:
    """Under the branch's lease, just before a merging transaction publishes: the merge of a
    request (its metadata names one) must be of that request as it is now — open, into this
    branch, merging its source's current tip — and a branch requiring approvals takes only such
    merges, with the approvals and the checks its rule asks for. Raises
    :class:`ApprovalRequiredError` (exit 1) or :class:`InvalidOperationError`; the transaction then aborts."""
    if getattr(tx, "scratch", False) or not getattr(tx, "merging", False):
        return
    from trimerge.lineage.history.requests import RequestRecords, approvals, request_number

    repo, branch = tx.repo, tx.branch_name
    rule = Protection(repo).rule(branch)
    number = _request_id(tx)
    if number is None:
        if rule is not None and rule.approvals:
            _refuse_unreviewed(rule, tx.metadata.get("merge.source"))
        return
    request = RequestRecords(repo.docs).get(request_number(number))
    if request.state != "open":
        raise InvalidOperationError(f"merge request #{request.id} is {request.state}: it cannot be merged")
    if request.into != branch:
        raise InvalidOperationError(f"merge request #{request.id} is into {request.into!r}, not {branch!r}")
    merged = tx.metadata.get("merge.source_commit")
    source = repo.refs.branch(request.source)
    if source is None:
        raise InvalidOperationError(f"merge request #{request.id}: its source branch {request.source!r} no longer "
                                    f"exists")
    if merged != source.commit_id:
        raise ConcurrentWriteError(
            f"merge request #{request.id}: its source {request.source!r} moved to {source.commit_id[:10]} while it "
            f"was being merged; nothing was published (look at the new changes, then merge again)")
    if rule is None:
        return
    if rule.approvals:
        counted = approvals(request, source.commit_id, rule.approvals)
        if not counted.satisfied:
            raise ApprovalRequiredError(f"merge request #{request.id} into protected {branch!r}: {counted.why()}")
    if rule.checks and str(tx.metadata.get("merge.checks", "")).startswith("skipped"):
        raise ApprovalRequiredError(f"branch {branch!r} requires the data checks of every merge into it: a merge "
                                    f"that skips them is refused")
