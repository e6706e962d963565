"""Merge requests as repository metadata: one document per request, changed by compare-and-swap.

Layout below ``_trimerge/``::

    requests/items/<n>.json              request n: source, target, author, times, title and body,
                                         state, reviews, queue entry, and the events that made it so
    requests/remotes/<remote>/<n>.json   request n of a remote, as the last clone or fetch saw it
    requests/locks/<n>.lock              the lease a merge of request n holds
    requests/queues/<branch>.lock        the lease of the runner of a branch's merge queue

A number is claimed by creating its document (create-if-absent), so two creators racing get one
number each, and since a request is never deleted a number is never reused. Every change
re-reads the document, re-checks its rule on what it read and swaps the new state in, event
included: a change and its event land together or not at all, and of two racing changes each
lands once, in some order (a lost swap is retried; after many, a retryable
:class:`ConcurrentWriteError`).

Like refs and protection, requests are not versioned: everyone who opens the repository sees the
same ones. The workflow around them (diffs, dry-run merges, the queue runner) lives above merge,
in :mod:`trimerge.review`; what a merge into a branch requiring approvals must satisfy is checked
here, in lineage (:mod:`trimerge.lineage.history.protection`), so no layer above can skip it.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping

from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import (ConcurrentWriteError, CorruptRepositoryError, InvalidOperationError,
                                     RequestNotFoundError)
from trimerge.lineage.history.refs import encode_name, now

if TYPE_CHECKING:
    from trimerge.lineage.ports import DocumentStore

ITEMS = "requests/items"
REMOTE_ITEMS = "requests/remotes"
LOCKS = "requests/locks"
QUEUE_LOCKS = "requests/queues"
FORMAT = 1
STATES = ("open", "merged", "closed")
VERDICTS = ("approve", "request-changes")
#: What the commit metadata of a request's merge names: the request (see protection.check_request_merge).
REQUEST_META = "request.id"
MAX_TITLE = 1000
MAX_BODY = 100_000
MAX_COMMENT = 100_000
MAX_ACTOR = 200
#: Compare-and-swap attempts of one change before it gives up as a lost race.
ATTEMPTS = 50
_NUMBER = re.compile(r"^[1-9][0-9]{0,17}$")


@dataclass(frozen=True)
class Review:
    """A reviewer's verdict (``approve`` or ``request-changes``) on the source tip it saw
    (``commit``). ``stale``: filled in when shown — the source has moved since."""

    actor: str
    verdict: str
    at: datetime
    commit: str
    comment: str | None = None
    stale: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"actor": self.actor, "verdict": self.verdict, "at": format_time(self.at), "commit": self.commit,
                "comment": self.comment, "stale": self.stale}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Review":
        return cls(_text(doc, "actor"), _choice(doc, "verdict", VERDICTS), parse_time(_text(doc, "at")),
                   _text(doc, "commit"), _optional_text(doc, "comment"))


@dataclass(frozen=True)
class Event:
    """One thing that happened to a request: ``kind`` created, reviewed, enqueued, dequeued,
    merged, closed or reopened, by ``actor`` at ``at``; ``detail`` says the rest (a review's
    verdict, a merge commit, why a request left the queue). ``id`` (``"<request>.<seq>"``) is
    stable: a hook may use it to deliver each event once."""

    request: int
    seq: int
    kind: str
    actor: str
    at: datetime
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.request}.{self.seq}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "request": self.request, "seq": self.seq, "kind": self.kind, "actor": self.actor,
                "at": format_time(self.at), "detail": dict(self.detail)}


@dataclass(frozen=True)
class QueueEntry:
    """A request's place in its target's merge queue: queued ``at`` by ``actor``; ``order`` (a
    ULID) sorts the queue."""

    at: datetime
    actor: str
    order: str

    def to_json(self) -> dict[str, Any]:
        return {"at": format_time(self.at), "actor": self.actor, "order": self.order}


@dataclass(frozen=True)
class Request:
    """A merge request: merge branch ``source`` into branch ``into``, asked by ``author``.

    ``state`` is ``open``, ``merged`` or ``closed``; ``reviews`` every review in order (a
    reviewer's last one is the one that counts); ``queued`` its queue entry while queued;
    ``merge_commit`` the merge commit once merged (None when the source was merged already);
    ``remote`` the remote it was copied from (None: this repository's own)."""

    id: int
    source: str
    into: str
    title: str
    body: str | None
    author: str
    state: str
    created_at: datetime
    updated_at: datetime
    reviews: tuple[Review, ...] = ()
    queued: QueueEntry | None = None
    merge_commit: str | None = None
    merged_source: str | None = None
    merged_at: datetime | None = None
    merged_by: str | None = None
    closed_at: datetime | None = None
    closed_by: str | None = None
    events: tuple[Event, ...] = ()
    remote: str | None = None
    version: Any = field(default=None, compare=False, repr=False)
    #: What ``repo.requests.merge`` returns carries the merge's result here (never stored).
    merge_result: Any = field(default=None, compare=False, repr=False)

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def to_json(self) -> dict[str, Any]:
        def when(t: datetime | None) -> str | None:
            return None if t is None else format_time(t)

        return {"format": FORMAT, "id": self.id, "source": self.source, "into": self.into, "title": self.title,
                "body": self.body, "author": self.author, "state": self.state,
                "created_at": format_time(self.created_at), "updated_at": format_time(self.updated_at),
                "reviews": [r.to_json() for r in self.reviews],
                "queued": None if self.queued is None else self.queued.to_json(),
                "merge_commit": self.merge_commit, "merged_source": self.merged_source,
                "merged_at": when(self.merged_at), "merged_by": self.merged_by,
                "closed_at": when(self.closed_at), "closed_by": self.closed_by,
                "events": [e.to_json() for e in self.events],
                **({"remote": self.remote} if self.remote is not None else {})}

    def stored(self) -> dict[str, Any]:
        doc = self.to_json()
        doc.pop("remote", None)
        for r in doc["reviews"]:
            r.pop("stale", None)
        for e in doc["events"]:
            e.pop("id", None)
            e.pop("request", None)
        return doc

    def with_event(self, kind: str, actor: str, at: datetime | None = None, **detail: Any) -> "Request":
        """This request with one more event (and ``updated_at`` moved to it)."""
        at = at or now()
        seq = (self.events[-1].seq + 1) if self.events else 1
        return replace(self, updated_at=at, events=(*self.events, Event(self.id, seq, kind, actor, at, detail)))


# ---------------------------------------------------------------------------------------------- parsing
class _Malformed(Exception):
    pass


def _text(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise _Malformed(f"{key!r} is not text")
    return value


def _optional_text(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise _Malformed(f"{key!r} is not text")
    return value


def _optional_time(doc: Mapping[str, Any], key: str) -> datetime | None:
    value = _optional_text(doc, key)
    return None if value is None else parse_time(value)


def _choice(doc: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = _text(doc, key)
    if value not in choices:
        raise _Malformed(f"{key!r} is {value!r}, not one of {', '.join(choices)}")
    return value


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _Malformed(f"{key!r} is not a list of objects")
    return value


def parse_request(doc: Any, number: int, where: str, remote: str | None = None, version: Any = None) -> Request:
    """The request a stored document holds; :class:`CorruptRepositoryError` naming ``where`` when
    it is not one (or holds another number than its name)."""
    try:
        if not isinstance(doc, dict):
            raise _Malformed("not a JSON object")
        if doc.get("format") != FORMAT:
            raise _Malformed(f"format {doc.get('format')!r}, not {FORMAT}")
        if doc.get("id") != number or isinstance(doc.get("id"), bool):
            raise _Malformed(f"its id {doc.get('id')!r} is not the {number} of its name")
        queued = doc.get("queued")
        if queued is not None and not isinstance(queued, dict):
            raise _Malformed("'queued' is not an object")
        events = tuple(Event(number, int(e["seq"]), _text(e, "kind"), _text(e, "actor"), parse_time(_text(e, "at")),
                             dict(e.get("detail") or {})) for e in _list(doc, "events"))
        return Request(
            id=number, source=_text(doc, "source"), into=_text(doc, "into"), title=_text(doc, "title"),
            body=_optional_text(doc, "body"), author=_text(doc, "author"), state=_choice(doc, "state", STATES),
            created_at=parse_time(_text(doc, "created_at")), updated_at=parse_time(_text(doc, "updated_at")),
            reviews=tuple(Review.from_json(r) for r in _list(doc, "reviews")),
            queued=None if queued is None else QueueEntry(parse_time(_text(queued, "at")), _text(queued, "actor"),
                                                          _text(queued, "order")),
            merge_commit=_optional_text(doc, "merge_commit"), merged_source=_optional_text(doc, "merged_source"),
            merged_at=_optional_time(doc, "merged_at"), merged_by=_optional_text(doc, "merged_by"),
            closed_at=_optional_time(doc, "closed_at"), closed_by=_optional_text(doc, "closed_by"),
            events=events, remote=remote, version=version)
    except (_Malformed, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptRepositoryError(f"{where}: not a merge request document ({exc}); repair or restore that "
                                     f"file") from None


def request_number(value: Any) -> int:
    """A request id as given (an int, or its digits as text); :class:`InvalidOperationError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidOperationError(f"a request id is a positive whole number, not {value!r}")
    text = str(value).strip().lstrip("#") if isinstance(value, str) else str(value)
    if not _NUMBER.fullmatch(text):
        raise InvalidOperationError(f"a request id is a positive whole number, not {value!r}")
    return int(text)


def checked_actor(actor: Any, what: str = "actor") -> str:
    """An actor as recorded: non-empty printable text without surrounding space."""
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidOperationError(f"{what} must be a non-empty name, not {actor!r}")
    if len(actor) > MAX_ACTOR or not actor.isprintable():
        raise InvalidOperationError(f"{what} must be printable text of at most {MAX_ACTOR} characters")
    return actor.strip()


# ---------------------------------------------------------------------------------------------- approvals
@dataclass(frozen=True)
class Approvals:
    """A request's approvals as a rule counts them at source tip ``tip``: ``approvers`` approved
    that tip (the author never counts), ``stale`` approved an earlier one, ``changes_requested``
    asked for changes in their last review (whatever the tip: it holds until they review again)."""

    required: int
    tip: str
    approvers: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    changes_requested: tuple[str, ...] = ()

    @property
    def satisfied(self) -> bool:
        return len(self.approvers) >= self.required and not (self.required and self.changes_requested)

    def why(self) -> str | None:
        """Why the rule is not met (None: it is)."""
        reasons = []
        if self.required and self.changes_requested:
            reasons.append(f"changes requested by {', '.join(self.changes_requested)}")
        if len(self.approvers) < self.required:
            stale = f"; stale (given before the source moved): {', '.join(self.stale)}" if self.stale else ""
            reasons.append(f"needs {self.required} approval(s) of the source tip {self.tip[:10]} by people other "
                           f"than the author, has {len(self.approvers)}{stale}")
        return "; ".join(reasons) or None

    def to_json(self) -> dict[str, Any]:
        return {"required": self.required, "tip": self.tip, "approvers": list(self.approvers),
                "stale": list(self.stale), "changes_requested": list(self.changes_requested),
                "satisfied": self.satisfied}


def approvals(request: Request, tip: str, required: int) -> Approvals:
    """Count ``request``'s reviews against source tip ``tip`` (GitHub's rules: a reviewer's last
    review counts; an approval of an earlier tip is stale; changes requested block until the
    reviewer approves)."""
    last: dict[str, Review] = {}
    for r in request.reviews:
        last[r.actor] = r
    ok = tuple(a for a, r in last.items() if r.verdict == "approve" and r.commit == tip and a != request.author)
    stale = tuple(a for a, r in last.items() if r.verdict == "approve" and r.commit != tip and a != request.author)
    blocking = tuple(a for a, r in last.items() if r.verdict == "request-changes")
    return Approvals(required, tip, ok, stale, blocking)


# ---------------------------------------------------------------------------------------------- the store
class RequestRecords:
    """The request documents of a repository (``docs``: its document store)."""

    def __init__(self, docs: "DocumentStore"):
        self.docs = docs

    @staticmethod
    def key(number: int, remote: str | None = None) -> str:
        if remote is None:
            return f"{ITEMS}/{number}.json"
        return f"{REMOTE_ITEMS}/{encode_name(remote)}/{number}.json"

    def _where(self, key: str) -> str:
        return f"{self.docs.where}/{key}"

    def ids(self, remote: str | None = None) -> builtins.list[int]:
        """Every request number stored, ascending."""
        folder = ITEMS if remote is None else f"{REMOTE_ITEMS}/{encode_name(remote)}"
        names = (k.rsplit("/", 1)[-1].removesuffix(".json") for k in self.docs.list(folder) if k.endswith(".json"))
        return sorted(int(n) for n in names if _NUMBER.fullmatch(n))

    def get_or_none(self, number: int, remote: str | None = None) -> Request | None:
        key = self.key(number, remote)
        found = self.docs.read(key, damaged_as_none=True)
        if found is None:
            return None
        return parse_request(found.doc, number, self._where(key), remote, found.version)

    def get(self, number: int, remote: str | None = None) -> Request:
        found = self.get_or_none(number, remote)
        if found is None:
            where = f" of remote {remote!r}" if remote is not None else ""
            raise RequestNotFoundError(f"no merge request #{number}{where} (list them: 'trimerge request list')")
        return found

    def all(self, remote: str | None = None) -> builtins.list[Request]:
        """Every request, by number (read at once on an object store)."""
        numbers = self.ids(remote)
        found = self.docs.together(*[(lambda n=n: self.get_or_none(n, remote)) for n in numbers])
        return [r for r in found if r is not None]

    def readable(self) -> builtins.list[Request]:
        """Every request that parses (a damaged document is left out: what copies requests elsewhere
        must not stop at one)."""
        out = []
        for number in self.ids():
            try:
                found = self.get_or_none(number)
            except CorruptRepositoryError:
                continue
            if found is not None:
                out.append(found)
        return out

    def create(self, *, source: str, into: str, title: str, body: str | None, author: str) -> Request:
        """A new open request under the next free number (claimed by create-if-absent)."""
        at = now()
        numbers = self.ids()
        number = (numbers[-1] + 1) if numbers else 1
        for _ in range(ATTEMPTS * 4):
            request = Request(number, source, into, title, body, author, "open", at, at).with_event("created", author, at)
            if self.docs.create(self.key(number), request.stored()) is not None:
                return self.get(number)
            number += 1  # taken by a racing creator: the next one
        raise ConcurrentWriteError("merge requests are being created by many writers at once; retry")

    def update(self, number: int, change: Callable[[Request], Request | None]) -> Request:
        """Apply ``change`` to the current request and swap it in; a lost race re-reads and applies
        it again (``change`` re-checks its rule each time: raising refuses, None changes nothing)."""
        for _ in range(ATTEMPTS):
            current = self.get(number)
            new = change(current)
            if new is None:
                return current
            if self.docs.swap(self.key(number), new.stored(), current.version) is not None:
                return self.get(number)
        raise ConcurrentWriteError(f"merge request #{number} is being changed by other writers; retry")

    def copy_from(self, other: "RequestRecords", remote: str) -> int:
        """Store ``other``'s requests (another repository's) as those of ``remote`` here, replacing
        what an earlier copy stored; requests it no longer has are removed. The number copied."""
        theirs = {r.id: r for r in other.readable()}
        for number in self.ids(remote):
            if number not in theirs:
                self.docs.delete(self.key(number, remote))
        for number, request in theirs.items():
            key = self.key(number, remote)
            for _ in range(ATTEMPTS):
                found = self.docs.read(key, damaged_as_none=True)
                stored = self.docs.create(key, request.stored()) if found is None else \
                    self.docs.swap(key, request.stored(), found.version)
                if stored is not None:
                    break
        return len(theirs)

    def adopt(self, other: "RequestRecords") -> int:
        """Take ``other``'s requests as this repository's own, under their numbers (a clone starts
        with its source's requests); a number taken here already is left alone. The number taken."""
        taken = 0
        for request in other.readable():
            taken += self.docs.create(self.key(request.id), request.stored()) is not None
        return taken

    def remotes(self) -> builtins.list[str]:
        from urllib.parse import unquote

        return sorted(unquote(n) for n in self.docs.folders(REMOTE_ITEMS))
