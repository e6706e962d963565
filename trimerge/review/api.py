"""``repo.requests``: open, review, merge, close and queue merge requests.

Every change is one compare-and-swap of the request's document (:mod:`trimerge.lineage.history.requests`),
checked against the state it swaps out: bad input and refused changes write nothing. A merge holds
the request's lease from before it reads the request until it has recorded the outcome, so one
request is merged by one caller at a time; a caller that finds the lease of a dead merger first
looks for that merger's commit on the target (its metadata names the request) and records it,
so a request is never merged twice. The target's own rule (approvals, checks) is enforced by
lineage when the merge publishes; it is checked here first only to fail before any work.
"""

from __future__ import annotations

import builtins
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import (AlreadyExistsError, ApprovalRequiredError, BranchNotFoundError,
                                     ConcurrentWriteError, InvalidOperationError, TrimergeError)
from trimerge.lineage.history.refs import now
from trimerge.lineage.history.requests import (LOCKS, MAX_BODY, MAX_COMMENT, MAX_TITLE, REQUEST_META, STATES,
                                               VERDICTS, Event, QueueEntry, Request, RequestRecords, Review,
                                               approvals, checked_actor, request_number)
from trimerge.lineage.repository import Repository
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.lease import Holder, Lease

if TYPE_CHECKING:
    from trimerge.review.queue import QueueReport
    from trimerge.review.view import RequestView

#: How far before a dead merger took its lease its commit may be dated (clocks of two hosts differ).
CLOCK_SKEW = 300.0


def _title(title: Any) -> str:
    if not isinstance(title, str) or not title.strip():
        raise InvalidOperationError("a merge request needs a title (title=..., --title T)")
    title = title.strip()
    if len(title) > MAX_TITLE or not title.isprintable():
        raise InvalidOperationError(f"a request title is one printable line of at most {MAX_TITLE} characters")
    return title


def _long_text(value: Any, what: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidOperationError(f"{what} must be text, not {type(value).__name__}")
    if len(value) > limit or "\x00" in value:
        raise InvalidOperationError(f"{what} must be text of at most {limit} characters, without NUL")
    return value


class Requests:
    """The merge requests of one repository (``repo.requests``)."""

    def __init__(self, repo: Repository):
        self.repo = repo
        self.records = RequestRecords(repo.docs)

    # ------------------------------------------------------------------ reading
    def get(self, id: Any, *, remote: str | None = None) -> Request:
        """Request ``id`` (:class:`~trimerge.lineage.errors.RequestNotFoundError` if there is none);
        ``remote``: a request of that remote, as the last clone or fetch copied it."""
        return self.records.get(request_number(id), self._remote(remote))

    def list(self, state: str | None = None, into: str | None = None, *,
             remote: str | None = None) -> builtins.list[Request]:
        """Requests by number, those in ``state`` (open, merged, closed) into branch ``into`` only."""
        if state is not None and state not in STATES:
            raise InvalidOperationError(f"unknown request state {state!r} (use {', '.join(STATES)})")
        if into is not None and not isinstance(into, str):
            raise InvalidOperationError(f"into= takes a branch name, not {into!r}")
        return [r for r in self.records.all(self._remote(remote))
                if (state is None or r.state == state) and (into is None or r.into == into)]

    def remotes(self) -> builtins.list[str]:
        """The remotes whose requests a clone or fetch copied here."""
        return self.records.remotes()

    def events(self, since: str | None = None) -> builtins.list[Event]:
        """Every request's events in the order they happened (time, then request and sequence);
        ``since``: only those after the event with that id (``"<request>.<seq>"``), for a hook
        that delivers each once."""
        found = sorted((e for r in self.records.all() for e in r.events), key=lambda e: (e.at, e.request, e.seq))
        if since is None:
            return found
        ids = [e.id for e in found]
        if since not in ids:
            raise InvalidOperationError(f"no request event {since!r}")
        return found[ids.index(since) + 1:]

    def show(self, id: Any, *, remote: str | None = None, strategy: Any = None,
             resolutions: Any = None) -> "RequestView":
        """What a reviewer needs: the three-dot diff, the conflicts a merge would meet now (a dry
        run, with ``strategy``/``resolutions`` if given), the checks' verdicts on the would-be
        result, the reviews (stale ones marked), and whether it can merge — if not, ``why``."""
        from trimerge.review.view import build_view

        request = self.get(id, remote=remote)
        return build_view(self.repo, request, strategy=strategy, resolutions=resolutions)

    # ------------------------------------------------------------------ writing
    def create(self, source: str, into: str = "main", title: str | None = None, body: str | None = None,
               actor: str | None = None) -> Request:
        """Open a request to merge branch ``source`` into branch ``into``, by ``actor`` (default:
        ``$TRIMERGE_ACTOR`` or user@host); numbered one more than the last."""
        repo = self.repo
        repo.check_writable()
        author = checked_actor(actor if actor is not None else repo.default_actor())
        title = _title(title)
        body = _long_text(body, "body", MAX_BODY)
        into = self._branch(into, "target")
        source = self._branch(source, "source")
        if source == into:
            raise InvalidOperationError(f"a request merges one branch into another: source and target are both "
                                        f"{source!r}")
        self._refuse_duplicate(source, into)
        return self.records.create(source=source, into=into, title=title, body=body, author=author)

    def review(self, id: Any, verdict: str, comment: str | None = None, actor: str | None = None, *,
               commit: str | None = None) -> Request:
        """Record ``actor``'s ``verdict`` (``approve`` or ``request-changes``) on the request's
        source tip; ``commit``: the tip the reviewer looked at (refused if the source has moved
        since). The author cannot review their own request."""
        repo = self.repo
        repo.check_writable()
        if verdict not in VERDICTS:
            raise InvalidOperationError(f"unknown review verdict {verdict!r} (use {', '.join(VERDICTS)})")
        who = checked_actor(actor if actor is not None else repo.default_actor(), "a reviewer")
        comment = _long_text(comment, "comment", MAX_COMMENT)
        number = request_number(id)

        def change(current: Request) -> Request:
            self._require_open(current, "reviewed")
            if who == current.author:
                raise InvalidOperationError(f"{who!r} opened merge request #{current.id}: the author cannot review "
                                            f"their own request")
            tip = self._source_tip(current)
            if commit is not None and commit != tip:
                raise ConcurrentWriteError(f"the source of merge request #{current.id} moved to {tip[:10]} since "
                                           f"{str(commit)[:10]} was reviewed; look at the new changes and review again")
            at = now()
            return replace(current, reviews=(*current.reviews, Review(who, verdict, at, tip, comment))).with_event(
                "reviewed", who, at, verdict=verdict, commit=tip, comment=comment)

        return self.records.update(number, change)

    def close(self, id: Any, actor: str | None = None) -> Request:
        """Close an open request without merging it (it leaves its queue)."""
        who = self._writer(actor)

        def change(current: Request) -> Request:
            self._require_open(current, "closed")
            at = now()
            return replace(current, state="closed", closed_at=at, closed_by=who, queued=None).with_event(
                "closed", who, at)

        return self.records.update(request_number(id), change)

    def reopen(self, id: Any, actor: str | None = None) -> Request:
        """Open a closed request again (its source branch must still exist)."""
        who = self._writer(actor)
        number = request_number(id)

        def change(current: Request) -> Request:
            if current.state != "closed":
                raise InvalidOperationError(f"merge request #{current.id} is {current.state}: only a closed request "
                                            f"reopens")
            self._source_tip(current)
            self._branch(current.into, "target")
            self._refuse_duplicate(current.source, current.into, but=current.id)
            at = now()
            return replace(current, state="open", closed_at=None, closed_by=None).with_event("reopened", who, at)

        return self.records.update(number, change)

    def enqueue(self, id: Any, actor: str | None = None) -> Request:
        """Put an open request in its target's merge queue (run by :meth:`run_queue`); a queued one stays
        where it is."""
        who = self._writer(actor)

        def change(current: Request) -> Request | None:
            self._require_open(current, "queued")
            self._branch(current.into, "target")
            self._source_tip(current)
            if current.queued is not None:
                return None
            at = now()
            return replace(current, queued=QueueEntry(at, who, new_ulid())).with_event("enqueued", who, at)

        return self.records.update(request_number(id), change)

    def dequeue(self, id: Any, reason: str = "removed from the queue", actor: str | None = None) -> Request:
        """Take a request out of its queue, saying why (recorded in its events)."""
        who = self._writer(actor)
        reason = _long_text(reason, "reason", MAX_COMMENT) or "removed from the queue"

        def change(current: Request) -> Request | None:
            if current.queued is None:
                return None
            at = now()
            return replace(current, queued=None).with_event("dequeued", who, at, reason=reason)

        return self.records.update(request_number(id), change)

    def queue(self, branch: str) -> builtins.list[Request]:
        """The open requests queued into ``branch``, in queue order."""
        queued = [r for r in self.list(state="open", into=branch) if r.queued is not None]
        return sorted(queued, key=lambda r: (r.queued.order if r.queued else "", r.id))

    def run_queue(self, branch: str | None = None, *, actor: str | None = None) -> "QueueReport":
        """Merge the requests queued into ``branch`` (default: main) in order, each with its checks
        on its would-be result; one that conflicts, fails a check or lacks approvals leaves the
        queue with the reason and the others go on. One runner per branch at a time (a lease);
        one killed mid-merge is picked up by the next without losing or doubling a merge."""
        from trimerge.review.queue import run_queue

        return run_queue(self, branch if branch is not None else "main", actor=actor)

    def merge(self, id: Any, strategy: Any = None, resolutions: Any = None, actor: str | None = None, *,
              via: str = "request") -> Request:
        """Merge the request's source into its target (one merge commit naming the request) and
        record it merged. Conflicts raise :class:`~trimerge.merge.MergeConflictError` and failing
        checks :class:`~trimerge.merge.MergeCheckError` (the request stays open); a target whose
        protection requires approvals the request lacks refuses with
        :class:`~trimerge.lineage.errors.ApprovalRequiredError`. The returned request carries the
        merge's result as ``merge_result``."""
        repo = self.repo
        repo.check_writable()
        who = checked_actor(actor if actor is not None else repo.default_actor())
        number = request_number(id)
        self._require_open(self.records.get(number), "merged")
        lease = Lease(repo.docs, f"{LOCKS}/{number}.lock", f"merge request #{number}")
        lease.acquire(repo.lock_timeout, f"merge request #{number}",
                      on_dead_holder=lambda dead: self.recover(number, dead))
        published = False
        try:
            request = self.records.get(number)  # as it is now that this caller alone merges it
            self._require_open(request, "merged")
            result = self._run_merge(request, strategy, resolutions, who)
            published = True
            crashpoint("request_merge_published")
            commit = result.commit if result.status == "merged" else None
            merged = self._record_merged(number, commit, result.source_commit.id, who, via=via)
            return replace(merged, merge_result=result)
        finally:
            lease.release(untouched=not published)  # a refused merge leaves no trace

    def recover(self, number: int, dead: Holder | None = None) -> Request | None:
        """A merger of request ``number`` died: if its merge commit is on the target (its metadata
        names the request), record the request merged. The request, or None if it is not merged."""
        request = self.records.get(number)
        if request.state == "merged":
            return request
        since = (dead.acquired_at if dead is not None else request.created_at.timestamp()) - CLOCK_SKEW
        found = find_merge_commit(self.repo, request.into, number, since)
        if found is None:
            return None
        return self._record_merged(number, found, found.metadata.get("merge.source_commit", ""), found.actor,
                                   via="recovered")

    # ------------------------------------------------------------------ helpers
    def _run_merge(self, request: Request, strategy: Any, resolutions: Any, who: str) -> Any:
        from trimerge.merge import merge

        tip = self._source_tip(request)
        rule = self.repo.branches.protection(self._branch(request.into, "target"))
        if rule is not None and rule.approvals:  # lineage checks it again when the merge publishes
            counted = approvals(request, tip, rule.approvals)
            if not counted.satisfied:
                raise ApprovalRequiredError(f"merge request #{request.id} into protected {request.into!r}: "
                                            f"{counted.why()}")
        return merge(request.source, request.into, repo=self.repo, strategy=strategy, resolutions=resolutions,
                     actor=who, message=f"Merge request #{request.id}: {request.title}",
                     metadata={REQUEST_META: str(request.id)})

    def _record_merged(self, number: int, commit: Commit | None, source_commit: str, who: str, *,
                       via: str) -> Request:
        def change(current: Request) -> Request | None:
            if current.state == "merged":
                return None
            at = commit.created_at if commit is not None and via == "recovered" else now()
            return replace(current, state="merged", merge_commit=commit.id if commit else None,
                           merged_source=source_commit or None, merged_at=at, merged_by=who, queued=None,
                           closed_at=None, closed_by=None).with_event(
                "merged", who, now(), commit=commit.id if commit else None, source_commit=source_commit or None,
                via=via)

        return self.records.update(number, change)

    def _writer(self, actor: str | None) -> str:
        self.repo.check_writable()
        return checked_actor(actor if actor is not None else self.repo.default_actor())

    def _remote(self, remote: str | None) -> str | None:
        if remote is not None and (not isinstance(remote, str) or not remote or "/" in remote):
            raise InvalidOperationError(f"remote= takes a remote's name, not {remote!r}")
        return remote

    def _branch(self, name: Any, what: str) -> str:
        repo = self.repo
        if not isinstance(name, str) or not name:
            raise InvalidOperationError(f"the request's {what} must be a branch name, not {name!r}")
        name = repo.default_ref(name)
        if repo.branches.exists(name):
            return name
        if repo.tags.get_or_none(name) is not None:
            raise InvalidOperationError(f"the request's {what} {name!r} is a tag: requests merge branches")
        raise BranchNotFoundError(f"no branch {name!r} (the request's {what})")

    def _source_tip(self, request: Request) -> str:
        branch = self.repo.refs.branch(request.source)
        if branch is None or not self.repo.branches.exists(request.source):
            raise InvalidOperationError(f"merge request #{request.id}: its source branch {request.source!r} no "
                                        f"longer exists")
        return branch.commit_id

    @staticmethod
    def _require_open(request: Request, what: str) -> None:
        if request.state != "open":
            done = f" (as {request.merge_commit[:10]})" if request.merge_commit else ""
            raise InvalidOperationError(f"merge request #{request.id} is {request.state}{done}: it cannot be {what}")

    def _refuse_duplicate(self, source: str, into: str, but: int | None = None) -> None:
        for r in self.records.all():
            if r.state == "open" and r.source == source and r.into == into and r.id != but:
                raise AlreadyExistsError(f"merge request #{r.id} from {source!r} into {into!r} is open already")


def find_merge_commit(repo: Repository, branch: str, number: int, since: float) -> Commit | None:
    """The commit on ``branch``'s first-parent history whose metadata names request ``number``,
    looking back to commits created at ``since`` (seconds since the epoch)."""
    try:
        history = repo.iter_log(branch, first_parent=True)
        for c in history:
            if c.metadata.get(REQUEST_META) == str(number):
                return c
            if c.created_at.timestamp() < since:
                return None
    except TrimergeError:
        return None
    return None


def merged_via(request: Request) -> str | None:
    """How the request was merged (``request``, ``queue``, ``recovered``), from its events."""
    for e in reversed(request.events):
        if e.kind == "merged":
            return str(e.detail.get("via")) if e.detail.get("via") else None
    return None

