"""Where events come from: the outbox is the repository's own record of what happened.

**Branch moves.** Every move of a user branch writes a reflog entry *before* it swaps the branch
document, and the swap writes the entry's id into the document (``Branch.log``); each entry names
the entry the mover read (``prev``) and the branch's incarnation (``inc``). So the moves that
happened are exactly the entries reached from the branch document through ``prev`` — an entry of
a move that lost its swap, or whose writer died before it, is on no such chain — and an event is
recorded atomically with the commit that causes it, at no cost to the commit. A deleted
incarnation's chain starts at its newest deletion entry (written before the document went).
Chains are walked from the tip back to the hook's cursor, so a pass reads only what is new; a
branch whose incarnation changed since the cursor (deleted, re-created) has its reflog folder
listed, from a little before what the cursor saw (:data:`SKEW`: the clocks of writers on other
machines may disagree).

**Tags** are documents created once (an event per tag not yet delivered); **merge requests**
record numbered events in their own documents (:mod:`trimerge.lineage.history.requests`).

A hook's cursor (:mod:`trimerge.hooks.cursor`) says what it has delivered; :func:`pending` lists
what it has not, oldest first.
"""

from __future__ import annotations

import fnmatch
import hashlib
import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable
from urllib.parse import unquote

from trimerge.hooks.model import REF_EVENTS, REQUEST_EVENTS, Hook
from trimerge.lineage.history.reflog import LOGS, Reflog, ReflogEntry
from trimerge.lineage.history.refs import Branch, Tag, encode_name, entry_id

#: How far back of what a cursor saw a changed branch's reflog is listed again (clock skew).
SKEW = timedelta(minutes=10)
HEAD_LOG = "HEAD"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid_time(ulid: str) -> datetime:
    """When the ULID ``ulid`` was made (its first 10 characters: milliseconds since the epoch)."""
    ms = 0
    for ch in ulid[:10].upper():
        ms = ms * 32 + _CROCKFORD.index(ch)
    return datetime.fromtimestamp(ms / 1000.0, timezone.utc)


def ulid_at(when: datetime) -> str:
    """The smallest ULID made at ``when`` (to compare with entry ids)."""
    ms = max(0, int(when.timestamp() * 1000))
    out = []
    for _ in range(10):
        out.append(_CROCKFORD[ms % 32])
        ms //= 32
    return "".join(reversed(out)) + "0" * 16


def before(ulid: str, delta: timedelta) -> str:
    return ulid_at(ulid_time(ulid) - delta)


@dataclass(frozen=True)
class Event:
    """One thing a hook may be told: ``kind`` (an event name), ``id`` (stable: the receiver's
    idempotency key), the ``subject`` a hook's glob matches (branch, tag or request target) and
    where it sits in the cursor (``source``, ``position``)."""

    kind: str
    id: str
    subject: str
    time: datetime
    source: str  # "ref", "tag" or "request"
    position: tuple[Any, ...]
    entry: ReflogEntry | None = None
    tag: Tag | None = None
    request: Any = None  # a trimerge.lineage.history.requests.Request
    request_event: Any = None  # one of its events


def move_kind(entry: ReflogEntry) -> str:
    """The event of a branch move: created, deleted, a merge, or any other move to a new commit."""
    if entry.new is None:
        return "post-branch-delete"
    if entry.old is None:
        return "post-branch-create"
    return "post-merge" if entry.reason.startswith("merge:") else "post-commit"


def tag_event_id(tag: Tag) -> str:
    """A stable id of a tag's creation (a re-created tag of the same name is another event)."""
    digest = hashlib.sha256(f"{tag.name}\x00{tag.commit_id}\x00{tag.created_at.isoformat()}".encode()).hexdigest()
    return f"tag-{digest[:26]}"


@dataclass
class BranchPlan:
    """A branch's events not yet delivered (``events``, every kind: a hook takes those it wants)
    and ``final``, the branch's cursor once they all are."""

    events: list[Event] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    gap: bool = False  # an entry the chain needs is gone (expired before delivery)


class Snapshot:
    """One pass's reads of the repository, shared by every hook of the pass (each entry, branch
    document and listing read at most once)."""

    def __init__(self, repo: Any):
        self.repo = repo
        self.docs = repo.docs
        self.reflog = Reflog(repo.docs)
        self._branches: dict[str, Branch | None] = {}
        self._entries: dict[tuple[str, str], ReflogEntry | None] = {}
        self._folders: dict[str, list[str]] = {}
        self._names: list[str] | None = None
        self._tags: list[Tag] | None = None
        self._requests: list[Any] | None = None

    def branch(self, name: str) -> Branch | None:
        if name not in self._branches:
            self._branches[name] = self.repo.refs.branch(name)
        return self._branches[name]

    def branch_names(self) -> list[str]:
        """Branches alive or with a reflog (a deleted one has its moves there)."""
        if self._names is None:
            live = set(self.repo.refs.branch_names())
            logged = {unquote(f) for f in self.docs.folders(LOGS)} - {HEAD_LOG}
            self._names = sorted(live | logged)
        return self._names

    def ids(self, branch: str) -> list[str]:
        """The entry ids in ``branch``'s reflog folder, oldest first."""
        if branch not in self._folders:
            self._folders[branch] = sorted(entry_id(k) for k in self.docs.list(Reflog.folder(branch)))
        return self._folders[branch]

    def entry(self, branch: str, eid: str) -> ReflogEntry | None:
        key = (branch, eid)
        if key not in self._entries:
            doc = self.docs.get(f"{Reflog.folder(branch)}/{eid}.json")
            self._entries[key] = None if doc is None else _entry(doc, f"{Reflog.folder(branch)}/{eid}.json")
        return self._entries[key]

    def walk(self, branch: str, head: str | None, stop: str | None) -> tuple[list[ReflogEntry], bool]:
        """The chain of entries from ``head`` back to (not including) ``stop``, oldest first, and
        whether an entry it needed was missing (a gap: expired before it was delivered)."""
        out: list[ReflogEntry] = []
        visited: set[str] = set()
        current = head
        while current is not None and current != stop and current not in visited:
            visited.add(current)
            found = self.entry(branch, current)
            if found is None:
                out.reverse()
                return out, True
            out.append(found)
            current = found.prev
        out.reverse()
        return out, False

    def tags(self) -> list[Tag]:
        if self._tags is None:
            found = [self.repo.refs.tag(n) for n in self.repo.refs.tag_names()]
            self._tags = sorted((t for t in found if t is not None), key=lambda t: t.name)
        return self._tags

    def requests(self) -> list[Any]:
        if self._requests is None:
            from trimerge.lineage.history.requests import RequestRecords

            self._requests = RequestRecords(self.docs).readable()
        return self._requests


def _entry(doc: Any, key: str) -> ReflogEntry | None:
    from trimerge.lineage.commit import parse_time

    try:
        return ReflogEntry(str(doc["ref"]), doc.get("old"), doc.get("new"), str(doc.get("actor", "")),
                           parse_time(doc["time"]), str(doc.get("reason", "")), key, doc.get("prev"), doc.get("inc"))
    except (KeyError, TypeError, ValueError):
        return None  # a damaged entry names no move a hook can tell of (fsck reports it)


def _move_event(branch: str, entry: ReflogEntry, done: bool) -> Event:
    eid = entry_id(entry.key)
    return Event(move_kind(entry), eid, branch, entry.time, "ref", (branch, entry.inc, eid, done), entry=entry)


def plan_branch(snap: Snapshot, branch: str, state: dict[str, Any], since: str) -> BranchPlan:
    """What ``branch`` has that a cursor at ``state`` (its entry for the branch) has not delivered:
    events recorded after ``since`` (a ULID), oldest first."""
    doc = snap.branch(branch)
    inc, key, seen = state.get("inc"), state.get("key"), state.get("seen")
    live = doc.id if doc is not None else None
    plan = BranchPlan(final={**state, "inc": live, "key": doc.log if doc is not None else None})
    if doc is not None and inc == doc.id:  # the common case: the same incarnation moved on
        chain, plan.gap = snap.walk(branch, doc.log, key)
        plan.events = [_move_event(branch, e, False) for e in chain if entry_id(e.key) > since]
        return plan
    ids = snap.ids(branch)
    if doc is None and not ids:
        plan.final = {}  # gone with its whole reflog: nothing left to remember
        return plan
    if doc is None and inc is None and seen is not None and ids[-1] <= seen:
        return plan  # gone, and nothing new in its folder
    marks = [x for x in (key, seen) if x]
    floor = before(min(marks) if marks else since, SKEW)
    recent = [e for e in (snap.entry(branch, i) for i in ids if i > floor) if e is not None and e.inc is not None]
    done = set(state.get("done") or [])
    lives: dict[str, list[ReflogEntry]] = {}
    for e in recent:
        lives.setdefault(str(e.inc), []).append(e)
    finished = []
    for life, entries in sorted(lives.items(), key=lambda item: min(entry_id(e.key) for e in item[1])):
        if life == live or life in done:
            continue
        deletions = [e for e in entries if e.new is None]
        if not deletions:
            continue  # a creation that never happened (or is still in flight): no move yet
        last = max(deletions, key=lambda e: entry_id(e.key))
        chain, gap = snap.walk(branch, entry_id(last.key), key if life == inc else None)
        plan.gap |= gap
        plan.events += [_move_event(branch, e, e.key == last.key) for e in chain if entry_id(e.key) > since]
        finished.append(life)
    if doc is not None:
        chain, gap = snap.walk(branch, doc.log, None)  # a new incarnation: its whole life
        plan.gap |= gap
        plan.events += [_move_event(branch, e, False) for e in chain if entry_id(e.key) > since]
    # Lives older than the listing cannot come back into it: their marks are no longer needed.
    plan.final.update(seen=ids[-1] if ids else seen, done=sorted((done & set(lives)) | set(finished)))
    return plan


def tag_events(snap: Snapshot, hook: Hook, state: dict[str, Any]) -> list[Event]:
    """Tags created and not delivered yet (``state``: tag name -> the id of its delivered event)."""
    if "post-tag" not in hook.on:
        return []
    out = []
    for tag in snap.tags():
        eid = tag_event_id(tag)
        if state.get(tag.name) != eid and hook.wants("post-tag", tag.name):
            out.append(Event("post-tag", eid, tag.name, tag.created_at, "tag", (tag.name, eid), tag=tag))
    return out


def request_events(snap: Snapshot, hook: Hook, state: dict[str, Any]) -> list[list[Event]]:
    """Per merge request, its events after the delivered one (``state``: number -> seq)."""
    if not any(e in REQUEST_EVENTS for e in hook.on):
        return []
    out = []
    for request in snap.requests():
        last = int(state.get(str(request.id), 0))
        events = [Event(f"request-{e.kind}", f"request-{request.id}.{e.seq}", request.into, e.at, "request",
                        (request.id, e.seq), request=request, request_event=e)
                  for e in request.events if e.seq > last]
        wanted = [e for e in events if hook.wants(e.kind, e.subject)]
        if wanted:
            out.append(wanted)
    return out


def pending(snap: Snapshot, hook: Hook, state: dict[str, Any], branches: Iterable[str] | None = None,
            ) -> tuple[list[Event], dict[str, BranchPlan]]:
    """What ``hook`` (with cursor ``state``) has not delivered, oldest first (events of one branch,
    tag or request keep their order), and the per-branch plans (what the cursor learns)."""
    streams: list[list[Event]] = []
    plans: dict[str, BranchPlan] = {}
    refs_state = state.get("refs", {})
    since = str(state.get("since") or "0" * 26)
    if any(e in REF_EVENTS and e != "post-tag" for e in hook.on):
        names = sorted(set(branches)) if branches is not None else sorted(set(snap.branch_names()) | set(refs_state))
        for name in names:
            if name == HEAD_LOG or not fnmatch.fnmatchcase(name, hook.branch):
                continue
            plan = plan_branch(snap, name, refs_state.get(name, {}), since)
            plans[name] = plan
            events = [e for e in plan.events if e.kind in hook.on]
            if events:
                streams.append(events)
    tags = tag_events(snap, hook, state.get("tags", {})) if branches is None else []
    if tags:
        streams.append(tags)
    if branches is None:
        streams += request_events(snap, hook, state.get("requests", {}))
    return list(heapq.merge(*streams, key=lambda e: e.time)), plans


def initial_state(snap: Snapshot, since: str) -> dict[str, Any]:
    """A new hook's cursor: everything recorded so far counts as delivered."""
    refs: dict[str, Any] = {}
    for name in snap.repo.refs.branch_names():
        doc = snap.branch(name)
        if doc is not None:
            refs[name] = {"inc": doc.id, "key": doc.log}
    tags = {t.name: tag_event_id(t) for t in snap.tags()}
    requests = {str(r.id): (r.events[-1].seq if r.events else 0) for r in snap.requests()}
    return {"since": since, "refs": refs, "tags": tags, "requests": requests}
