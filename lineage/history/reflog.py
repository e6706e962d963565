"""The reflog: every move of a branch (and of ``HEAD``) as an entry, so any move can be undone.

Layout below ``_trimerge/``::

    logs/<ref>/<ulid>.json   one entry per move: ref, old commit, new commit, actor, time, reason

Entries are created once and never changed (create-if-absent: no contention between writers). A
move writes its entry *before* it swaps the ref, so gc — which reads refs, then deletion records,
then the reflog — always sees a commit a move leaves behind, either as the ref or in an entry. A
move that then fails removes its entry; one whose process died in between leaves an entry that
names a move which never happened: :meth:`Reflog.entries` drops it, because its ``old`` is the
value the ref kept while its ``new`` never became the ref (see :func:`chain`).

``NAME@{N}`` (in ref expressions) is the N-th previous value of ``NAME``: ``@{0}`` the current
tip, ``@{1}`` the tip before the last move, and so on. gc keeps every commit an entry younger than
the retention names, and removes older entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Iterable

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import (BranchNotFoundError, CorruptRepositoryError, InvalidOperationError,
                                     RefNotFoundError)
from trimerge.lineage.history.names import MAIN, validate_branch_name
from trimerge.lineage.history.refs import encode_name, entry_id, now
from trimerge.lineage.storage.faults import crashpoint

if TYPE_CHECKING:
    from trimerge.lineage.ports import DocumentStore, ReflogHost

__all__ = ["LOGS", "Reflog", "ReflogEntry", "chain", "entry_id", "list_entries", "split_at_n", "validate_log_name"]

LOGS = "logs"
HEAD_REF = "HEAD"
_AT_N = re.compile(r"^(?P<name>.+)@\{(?P<n>[0-9]{1,9})\}$")


@dataclass(frozen=True)
class ReflogEntry:
    """One move of a ref: from ``old`` to ``new`` (None: the ref did not exist before / after)."""

    ref: str
    old: str | None
    new: str | None
    actor: str
    time: datetime
    reason: str
    key: str = ""
    #: The id (:func:`entry_id`) of the entry of the branch's previous move, as the mover read it from
    #: the branch document (None: the first move of this incarnation, or written by an older version).
    #: The branch document names its newest entry (``log``), so following ``prev`` from there gives
    #: exactly the moves that happened, never one that lost its swap (see :mod:`trimerge.hooks`).
    prev: str | None = None
    #: The incarnation id of the branch that moved (``Branch.id``).
    inc: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON (what ``--json`` prints)."""
        return {"ref": self.ref, "old": self.old, "new": self.new, "actor": self.actor,
                "time": format_time(self.time), "reason": self.reason}


def _optional(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} is not text")
    return value


def validate_log_name(ref: Any) -> str:
    """``ref`` if a reflog can be named so (``HEAD``, ``main`` or a valid branch name); else one clear
    :class:`~trimerge.lineage.errors.InvalidNameError`. A reflog is a folder named after its ref: an
    over-long or non-UTF-8 name would otherwise reach the file system as an OSError."""
    if ref in (HEAD_REF, MAIN):
        return ref
    return validate_branch_name(ref, allow_internal=True)


def split_at_n(text: str) -> tuple[str, int] | None:
    """``("main", 2)`` for ``"main@{2}"``; None for text without an ``@{N}`` suffix."""
    m = _AT_N.match(text) if isinstance(text, str) else None
    return (m.group("name"), int(m.group("n"))) if m else None


def chain(entries: list[ReflogEntry], current: str | None) -> list[ReflogEntry]:
    """``entries`` (newest first) without those of moves that never happened: an entry whose
    ``new`` is not the value the ref had next, while its ``old`` is, was written by a move that
    lost its swap or died before it (the ref kept ``old``)."""
    kept: list[ReflogEntry] = []
    expected = current
    for e in entries:
        if e.new != expected and e.old == expected:
            continue  # a move away from the value the ref kept, which never happened
        kept.append(e)
        expected = e.old
    return kept


class Reflog:
    """``logs/``: the moves of every ref, newest first."""

    def __init__(self, docs: "DocumentStore"):
        self.docs = docs

    @staticmethod
    def folder(ref: str) -> str:
        return f"{LOGS}/{encode_name(ref)}"

    def record(self, ref: str, old: str | None, new: str | None, actor: str, reason: str, *,
               prev: str | None = None, inc: str | None = None) -> str:
        """Append an entry (before the move it describes); returns its key, for :meth:`discard`.
        ``prev``/``inc``: see :class:`ReflogEntry`."""
        key = f"{self.folder(ref)}/{new_ulid()}.json"
        doc: dict[str, Any] = {"ref": ref, "old": old, "new": new, "actor": actor, "time": format_time(now()),
                               "reason": reason[:500]}
        if inc is not None:
            doc.update(prev=prev, inc=inc)
        self.docs.create(key, doc)
        return key

    def discard(self, key: str) -> None:
        """Remove the entry of a move that did not happen."""
        self.docs.delete(key)

    def raw(self, ref: str) -> list[ReflogEntry]:
        """Every stored entry of ``ref``, newest first (also those of moves that never happened)."""
        found = []
        for key in self.docs.list(self.folder(ref)):
            doc = self.docs.get(key)
            if doc is None:
                continue
            try:
                found.append(ReflogEntry(str(doc["ref"]), doc.get("old"), doc.get("new"), str(doc.get("actor", "")),
                                         parse_time(doc["time"]), str(doc.get("reason", "")), key,
                                         _optional(doc, "prev"), _optional(doc, "inc")))
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptRepositoryError(f"{self.docs.where}/{key}: malformed reflog entry ({exc!r})") from None
        return sorted(found, key=lambda e: e.key, reverse=True)  # ULIDs sort by time

    def refs(self) -> list[str]:
        """The refs that have entries."""
        from urllib.parse import unquote

        return sorted(unquote(f) for f in self.docs.folders(LOGS))

    def entries(self, ref: str, current: str | None) -> list[ReflogEntry]:
        """The moves of ``ref`` (whose value is now ``current``), newest first."""
        return chain(self.raw(ref), current)

    def all_entries(self) -> Iterable[ReflogEntry]:
        """Every stored entry of every ref (gc's roots: a failed move's entry keeps its commits too)."""
        for ref in self.refs():
            yield from self.raw(ref)

    def nth(self, ref: str, n: int, current: str | None) -> str:
        """The commit ``ref@{n}`` names: ``@{0}`` the current value, ``@{n}`` the value ``n`` moves ago."""
        validate_log_name(ref)
        entries = self.entries(ref, current) if ref != HEAD_REF else self.raw(ref)
        values = [current] + [e.old for e in entries]
        found = values[n] if n < len(values) else None
        if found is not None:
            return found
        if n < len(values):
            raise RefNotFoundError(f"{ref}@{{{n}}}: {ref!r} did not exist then ('trimerge reflog {ref}')")
        raise RefNotFoundError(f"{ref}@{{{n}}}: the reflog of {ref!r} has only {len(entries)} entr"
                               f"{'y' if len(entries) == 1 else 'ies'} ('trimerge reflog {ref}')")

    def expire(self, retention: timedelta, at: datetime) -> int:
        """Remove the entries older than ``retention`` (gc); returns how many went.

        Oldest first, ref by ref: a gc killed part way leaves each reflog a contiguous run of its
        newest entries (never a gap that :func:`chain` and ``NAME@{N}`` would read across), and
        an entry younger than the retention is never touched."""
        removed = 0
        for ref in self.refs():
            for e in reversed(self.raw(ref)):
                if at - e.time < retention:
                    continue
                self.docs.delete(e.key)
                removed += 1
                crashpoint("reflog_entry_expired")
        return removed


def list_entries(repo: "ReflogHost", ref: str | None, limit: Any) -> list[ReflogEntry]:
    """:meth:`Repository.reflog`: the moves of ``ref`` (every ref when None), newest first."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidOperationError(f"limit must be a non-negative whole number, not {limit!r}")
    log = repo.refs.reflog
    if ref is None:
        found = [e for r in log.refs() for e in (log.raw(r) if r == HEAD_REF else log.entries(r, repo.reflog_current(r)))]
        found.sort(key=lambda e: e.key.rsplit("/", 1)[-1], reverse=True)
    else:
        validate_log_name(ref)
        if not isinstance(ref, str) or (ref != HEAD_REF and not repo.branches.exists(ref) and not log.raw(ref)):
            raise BranchNotFoundError(f"no branch {ref!r} and no reflog of it")
        found = log.raw(ref) if ref == HEAD_REF else log.entries(ref, repo.reflog_current(ref))
    return found[:limit] if limit is not None else found
