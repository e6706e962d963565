"""Delivering what is pending: one pass over a repository's hooks.

Per hook, a pass takes the hook's lease (``hooks/leases/<hook>.lock``; a hook another runner is
delivering is skipped — it delivers what is new too), reads its cursor, lists the events it has
not delivered (:mod:`trimerge.hooks.sources`) and sends them oldest first. Each event is tried
``1 + retries`` times with a doubling pause; every attempt is logged (:mod:`trimerge.hooks.attempts`),
and the cursor moves past an event once the receiver accepted it. An event that fails every try
stops the hook's pass (later events wait: order is kept, nothing is skipped) and backs the hook
off (30 s, doubling, at most an hour) for passes that respect it — the writer's own and ``hooks
run --watch``; an explicit :meth:`~trimerge.hooks.api.Hooks.deliver` tries at once.

A pass never raises for a hook's failure: what went wrong is in the log, the cursor and
``status``. A deadline bounds it (the writing process delivers for a moment, not forever).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from trimerge.hooks import attempts
from trimerge.hooks.cursor import Cursor
from trimerge.hooks.model import DEFS, Hook, def_key, lease_key, names_in, secret_key
from trimerge.hooks.payload import body, build, environment
from trimerge.hooks.sources import Event, Snapshot, initial_state, pending
from trimerge.hooks.transport import Outcome, post, run, signature
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError, StorageError
from trimerge.lineage.history.refs import now
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.lease import Lease

#: How long a runner's claim on a hook lasts without renewal (renewed between events).
LEASE_SECONDS = 120.0
#: The pause before the first retry of an event (doubling, at most :data:`MAX_PAUSE`).
FIRST_PAUSE, MAX_PAUSE = 0.5, 8.0


@dataclass
class HookReport:
    """What one pass did for one hook."""

    hook: str
    delivered: list[str] = field(default_factory=list)
    failed: str | None = None  # the event that failed every try
    error: str | None = None
    busy: bool = False  # another runner holds the hook
    waiting: bool = False  # backing off after failures
    left: int = 0  # events not delivered (a failure or the deadline stopped the pass)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class DeliveryReport:
    """What one pass did: per hook."""

    hooks: list[HookReport] = field(default_factory=list)

    @property
    def delivered(self) -> int:
        return sum(len(h.delivered) for h in self.hooks)

    @property
    def failed(self) -> list[HookReport]:
        return [h for h in self.hooks if h.failed is not None]

    @property
    def pending(self) -> int:
        return sum(h.left for h in self.hooks)

    def to_json(self) -> dict[str, Any]:
        return {"delivered": self.delivered, "pending": self.pending, "hooks": [h.to_json() for h in self.hooks]}


def load_hooks(docs: Any) -> list[Hook]:
    """Every hook defined (a damaged definition raises: say so rather than skip it silently)."""
    out = []
    for name in names_in(docs.list(DEFS)):
        found = docs.read(def_key(name), damaged_as_none=True)
        if found is not None:
            out.append(Hook.from_json(found.doc, f"{docs.where}/{def_key(name)}", name))
    return out


def read_secret(docs: Any, name: str) -> bytes | None:
    """The webhook secret of hook ``name`` (None: its requests are not signed)."""
    doc = docs.get(secret_key(name))
    try:
        return bytes.fromhex(doc["secret_hex"]) if isinstance(doc, dict) else None
    except (KeyError, TypeError, ValueError):
        raise CorruptRepositoryError(f"{docs.where}/{secret_key(name)}: malformed hook secret; remove the hook "
                                     "and add it again") from None


def send(repo: Any, hook: Hook, doc: dict[str, Any], timeout: float, secret: bytes | None = None) -> Outcome:
    """One attempt to tell ``hook`` of event ``doc``."""
    data = body(doc, hook.name)
    if hook.url is not None:
        headers = {"X-Trimerge-Event": str(doc["event"]), "X-Trimerge-Delivery": str(doc["id"]),
                   "X-Trimerge-Hook": hook.name}
        if secret is not None:
            headers["X-Trimerge-Signature-256"] = signature(secret, data)
        return post(hook.url, data, headers, timeout)
    cwd = str(repo.location.path) if repo.location.is_local else None
    return run(str(hook.run), data + b"\n", environment(doc, hook.name), timeout, cwd)


class Deliverer:
    """One pass over ``repo``'s hooks. ``deadline`` (``time.monotonic()`` value): stop starting
    attempts after it; ``respect_backoff``: skip a hook that is backing off; ``branches``: look
    only at these branches' moves (the writer's pass: what it just moved); ``wait``: how long to
    wait for a hook another runner is delivering (0: leave it to that runner)."""

    def __init__(self, repo: Any, *, deadline: float | None = None, respect_backoff: bool = False,
                 branches: Iterable[str] | None = None, wait: float = 0.0):
        self.repo = repo
        self.wait = wait  # seconds to wait for a hook another runner is delivering (0: skip it)
        self.docs = repo.docs
        self.deadline = deadline
        self.respect_backoff = respect_backoff
        self.branches = sorted(set(branches)) if branches is not None else None
        self._payloads: dict[str, dict[str, Any]] = {}
        self._last_error: str | None = None

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def run(self, names: Iterable[str] | None = None) -> DeliveryReport:
        report = DeliveryReport()
        wanted = set(names) if names is not None else None
        for hook in load_hooks(self.docs):
            if hook.gate or (wanted is not None and hook.name not in wanted):
                continue  # gates run inside merges, not from the outbox
            left = self.left()
            if left is not None and left <= 0:
                break
            report.hooks.append(self.deliver_hook(hook))
        return report

    def idle(self, hook: Hook) -> bool:
        """Whether ``hook`` has nothing to deliver and its cursor nothing to learn (looked at
        without its lease: an idle runner's pass writes nothing)."""
        cursor = Cursor.load(self.docs, hook.name)
        if cursor is None:
            return False
        if self.respect_backoff and cursor.waiting(now()):
            return True  # backing off: the pass after its pause delivers
        snap = Snapshot(self.repo)
        events, plans = pending(snap, hook, cursor.state, self.branches)
        if events:
            return False
        probe = Cursor(hook.name, copy.deepcopy(cursor.state), cursor.version)
        probe.settle(plans, [t.name for t in snap.tags()] if self.branches is None else None)
        probe.set_hold([], self.branches is None, now())
        return probe.state == cursor.state

    def deliver_hook(self, hook: Hook) -> HookReport:
        report = HookReport(hook.name)
        if self.idle(hook):
            return report
        for _ in range(3):  # again after letting go: what landed while we held the lease
            lease = Lease(self.docs, lease_key(hook.name), f"deliver hook {hook.name}", seconds=LEASE_SECONDS)
            try:
                if self.wait > 0:
                    lease.acquire(self.wait, f"hook {hook.name}")
                elif not lease.try_acquire():
                    report.busy = True
                    return report
            except (ConcurrentWriteError, CorruptRepositoryError):  # busy, or a damaged lease (fsck's business)
                report.busy = True
                return report
            try:
                more = self._deliver_held(hook, lease, report)
            finally:
                lease.release()
            if not more or report.failed is not None or report.waiting or self.idle(hook):
                return report
        return report

    def _deliver_held(self, hook: Hook, lease: Lease, report: HookReport) -> bool:
        """Deliver while holding the lease; whether anything was delivered (look again then)."""
        started = now()
        cursor = Cursor.load(self.docs, hook.name)
        if cursor is None:  # a definition without a cursor (an add that died between the two)
            cursor = Cursor.create(self.docs, hook.name, initial_state(Snapshot(self.repo), new_ulid()))
        if self.respect_backoff and cursor.waiting(started):
            report.waiting = True
            return False
        snap = Snapshot(self.repo)
        events, plans = pending(snap, hook, cursor.state, self.branches)
        before = copy.deepcopy(cursor.state)
        by_branch: dict[str, int] = {}
        for e in events:
            if e.source == "ref":
                by_branch[e.position[0]] = by_branch.get(e.position[0], 0) + 1
        settled = {b: p for b, p in plans.items() if b not in by_branch}
        cursor.settle(settled, [t.name for t in snap.tags()] if self.branches is None else None)
        secret = read_secret(self.docs, hook.name) if hook.url is not None else None
        if hook.has_secret and secret is None and events:  # never send unsigned what should be signed
            report.failed, report.left = events[0].id, len(events)
            report.error = "its secret is missing: remove the hook and add it again"
            cursor.failed(report.error, now())
            self._save(cursor, report)
            return False
        delivered_any = False
        for i, event in enumerate(events):
            left = self.left()
            if (left is not None and left <= 0) or self.docs.get(def_key(hook.name)) is None:
                report.left = len(events) - i
                break
            lease.renew_if_due()
            ok = self._send_with_retries(hook, event, secret)
            if not ok:
                report.failed, report.error = event.id, self._last_error
                report.left = len(events) - i
                cursor.failed(f"{event.kind} {event.id}: {self._last_error}", now())
                break
            cursor.advance(event)
            cursor.succeeded()
            report.delivered.append(event.id)
            delivered_any = True
            if event.source == "ref":
                branch = event.position[0]
                by_branch[branch] -= 1
                if by_branch[branch] == 0:
                    cursor.settle({branch: plans[branch]}, None)
            if not self._save(cursor, report):
                return False
            before = copy.deepcopy(cursor.state)
        undelivered = events[len(events) - report.left:] if report.left else []
        cursor.set_hold(undelivered, self.branches is None, started)
        if cursor.state != before and not self._save(cursor, report):
            return False
        if delivered_any:
            attempts.prune(self.docs, hook.name)
        return delivered_any

    def _save(self, cursor: Cursor, report: HookReport) -> bool:
        try:
            cursor.save(self.docs)
            return True
        except ConcurrentWriteError:  # our lease expired and another runner took the hook over
            report.error = "another runner took the hook over"
            return False

    def _send_with_retries(self, hook: Hook, event: Event, secret: bytes | None) -> bool:
        doc = self._payload(event)
        pause = FIRST_PAUSE
        for attempt in range(1, hook.retries + 2):
            left = self.left()
            timeout = hook.timeout if left is None else max(0.05, min(hook.timeout, left))
            crashpoint("hooks_before_delivery")
            try:
                outcome = send(self.repo, hook, doc, timeout, secret)
            except Exception as exc:  # noqa: BLE001 - a hook's failure is recorded, never raised
                outcome = Outcome(False, None, 0.0, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            crashpoint("hooks_after_delivery")
            try:
                attempts.record(self.docs, hook.name, event.kind, event.id, attempt, outcome)
            except (StorageError, OSError):
                pass  # the log is best effort; the cursor is what counts
            if outcome.ok:
                return True
            self._last_error = outcome.error
            left = self.left()
            if attempt <= hook.retries and (left is None or left > pause):
                time.sleep(pause)
                pause = min(MAX_PAUSE, pause * 2)
            elif attempt <= hook.retries:
                break
        return False

    def _payload(self, event: Event) -> dict[str, Any]:
        if event.id not in self._payloads:
            self._payloads[event.id] = json.loads(json.dumps(build(self.repo, event), default=str))
        return self._payloads[event.id]
