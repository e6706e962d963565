"""The merge queue: requests queued into a branch, merged one after the other by a runner.

The queue is the open requests whose record holds a queue entry (``repo.requests.enqueue``), in
the order they were queued; it lives in the request documents, so nothing is lost when a runner
dies. A runner holds the queue's lease (one per branch), reads the queue, and merges each request
as ``repo.requests.merge`` does — under the request's lease, the checks gating the branch run on
the would-be result, the target's rule enforced when it publishes. A request that conflicts, fails
a check, lacks approvals or is no longer mergeable leaves the queue with the reason (an event of
its record); one whose merge lost a race (the target or its source moved meanwhile) is tried
again. When the queue is empty the runner stops (``trimerge queue run``) or waits for more
(``trimerge serve``).

Crash safety: kill -9 of a runner leaves the queue's lease and maybe one request's lease to a
dead holder. The next runner takes both over; the request's merge commit, if it was published,
is found on the target by its metadata and recorded (:meth:`~trimerge.review.api.Requests.recover`),
so the request is not merged again; if it was not published, the request is merged then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trimerge.lineage.errors import BranchNotFoundError, ConcurrentWriteError, TrimergeError
from trimerge.lineage.history.refs import encode_name
from trimerge.lineage.history.requests import QUEUE_LOCKS, checked_actor
from trimerge.lineage.storage.lease import Lease

if TYPE_CHECKING:
    from trimerge.review.api import Requests

#: Merges of one request that lost a race (the target or its source moved) before it waits for a later run.
RETRIES = 5


@dataclass
class QueueReport:
    """What one run did: ``merged`` request ids in order (with their commits in ``commits``; None
    when the source was in the branch already), ``removed`` (id, reason) of those that left the
    queue, ``recovered`` those a dead runner had merged (recorded now), ``deferred`` those left
    queued after losing every race."""

    branch: str
    merged: list[int] = field(default_factory=list)
    removed: list[tuple[int, str]] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    commits: dict[int, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "merged": self.merged,
                "commits": {str(k): v for k, v in self.commits.items()},
                "removed": [{"id": i, "reason": why} for i, why in self.removed],
                "recovered": self.recovered, "deferred": self.deferred}


def queue_lease(requests: "Requests", branch: str) -> Lease:
    return Lease(requests.repo.docs, f"{QUEUE_LOCKS}/{encode_name(branch)}.lock", f"merge queue of {branch}")


def run_queue(requests: "Requests", branch: str, *, actor: str | None = None, wait: float = 0.0,
              idle: float = 0.5) -> QueueReport:
    """Run ``branch``'s queue until it is empty (``wait`` > 0: until it has stayed empty that many
    seconds, looking again every ``idle`` seconds). Each merge is by ``actor``, or (None) by
    whoever queued the request. Raises :class:`ConcurrentWriteError` when
    another live runner holds the queue."""
    repo = requests.repo
    repo.check_writable()
    if not isinstance(branch, str) or not repo.branches.exists(branch):
        raise BranchNotFoundError(f"no branch {branch!r} (whose merge queue to run)")
    who = checked_actor(actor) if actor is not None else None  # None: each merge by whoever queued it
    lease = queue_lease(requests, branch)
    if not lease.try_acquire():
        holder = lease.holder()
        by = f" by {holder.describe()}" if holder is not None else ""
        raise ConcurrentWriteError(f"the merge queue of {branch!r} is being run{by}; it merges what is queued")
    report = QueueReport(branch)
    try:
        quiet_since = time.monotonic()
        while True:
            lease.renew_if_due()
            queued = [r for r in requests.queue(branch) if r.id not in report.deferred]
            if queued:
                for request in queued:
                    lease.renew_if_due()
                    _merge_one(requests, request.id, who, report)
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since >= wait:
                return report
            time.sleep(idle)
    finally:
        lease.release()


def _merge_one(requests: "Requests", number: int, actor: str | None, report: QueueReport) -> None:
    for _ in range(RETRIES):
        current = requests.records.get_or_none(number)
        if current is None or current.queued is None or current.state != "open":
            return  # closed, dequeued or merged meanwhile
        who = actor or current.queued.actor
        try:
            merged = requests.merge(number, actor=who, via="queue")
        except ConcurrentWriteError:
            continue  # the target or the source moved: the next attempt judges the new state
        except TrimergeError as exc:
            after = requests.records.get(number)
            if after.state == "merged":  # a dead runner had merged it: recorded as it found the lease
                report.recovered.append(number)
                report.commits[number] = after.merge_commit
                return
            reason = str(exc)
            requests.dequeue(number, reason=reason, actor=who)
            report.removed.append((number, reason))
            return
        report.merged.append(number)
        report.commits[number] = merged.merge_commit
        return
    report.deferred.append(number)
