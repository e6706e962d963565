"""A hook's delivery cursor: ``_trimerge/hooks/cursors/<hook>.json``, changed by compare-and-swap.

It says what the hook has delivered — per branch the incarnation and reflog entry its chain was
delivered up to, per tag the event delivered, per merge request the last event's number — and
how delivery goes (failures in a row, when to try again, the last error). It moves forward after
each event the receiver accepted, never before: a runner killed between the two delivers that
event again (at least once; the receiver dedupes by ``X-Trimerge-Delivery``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trimerge.hooks.model import cursor_key
from trimerge.hooks.sources import BranchPlan, Event, SKEW, ulid_time
from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError
from trimerge.lineage.history.refs import now

#: Hook-level backoff after a pass whose retries all failed: 30 s, doubling, at most an hour.
BACKOFF_FIRST, BACKOFF_MAX = 30.0, 3600.0
#: How far an idle hook's gc hold moves at least when it moves (one cursor write per step, not per pass).
HOLD_STEP = timedelta(minutes=5)


def backoff(failures: int) -> float:
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, failures - 1))


@dataclass
class Cursor:
    """The cursor of hook ``name`` as read (``version``: for the swap)."""

    name: str
    state: dict[str, Any]
    version: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, docs: Any, name: str) -> "Cursor | None":
        found = docs.read(cursor_key(name), damaged_as_none=True)
        if found is None:
            return None
        if not isinstance(found.doc, dict) or not isinstance(found.doc.get("refs", {}), dict):
            raise CorruptRepositoryError(f"{docs.where}/{cursor_key(name)}: malformed hook cursor; remove the hook "
                                         "and add it again ('trimerge hook remove NAME')")
        return cls(name, found.doc, found.version)

    @classmethod
    def create(cls, docs: Any, name: str, state: dict[str, Any]) -> "Cursor":
        """Store a new hook's cursor (replacing one a crashed add or remove left behind)."""
        key = cursor_key(name)
        doc = {"failures": 0, "delivered": 0, "retry_at": None, "last_error": None, "gaps": 0, **state}
        version = docs.create(key, doc)
        if version is None:
            found = docs.read(key, damaged_as_none=True)
            version = docs.write(key, doc, found.version if found is not None else None)
        return cls(name, doc, version)

    def save(self, docs: Any) -> None:
        """Swap the new state in; :class:`ConcurrentWriteError` if another runner moved it."""
        version = docs.swap(cursor_key(self.name), self.state, self.version)
        if version is None:
            raise ConcurrentWriteError(f"hook {self.name!r}: its cursor was moved by another runner")
        self.version = version

    # -- what delivery left
    @property
    def failures(self) -> int:
        return int(self.state.get("failures") or 0)

    def retry_at(self) -> datetime | None:
        value = self.state.get("retry_at")
        return parse_time(value) if isinstance(value, str) else None

    def waiting(self, at: datetime) -> bool:
        when = self.retry_at()
        return when is not None and at < when

    def failed(self, error: str, at: datetime) -> None:
        failures = self.failures + 1
        self.state.update(failures=failures, last_error=error, retry_at=format_time(at + timedelta(seconds=backoff(failures))))

    def succeeded(self) -> None:
        self.state.update(failures=0, retry_at=None, last_error=None,
                          delivered=int(self.state.get("delivered") or 0) + 1)

    # -- positions
    def advance(self, event: Event) -> None:
        """Record ``event`` as delivered (and everything before it in its branch, tag or request)."""
        if event.source == "ref":
            branch, inc, eid, ends_life = event.position
            refs = self.state.setdefault("refs", {})
            mark = dict(refs.get(branch, {}))
            if ends_life:
                mark.update(inc=None, key=None, done=sorted(set(mark.get("done") or []) | {inc}))
            else:
                mark.update(inc=inc, key=eid)
            refs[branch] = mark
        elif event.source == "tag":
            name, eid = event.position
            self.state.setdefault("tags", {})[name] = eid
        else:
            number, seq = event.position
            self.state.setdefault("requests", {})[str(number)] = int(seq)

    def settle(self, plans: dict[str, BranchPlan], tags: list[str] | None) -> bool:
        """Take each branch's final mark (every event of it delivered) and forget tags that are
        gone; whether anything changed."""
        before = copy.deepcopy(self.state)
        refs = self.state.setdefault("refs", {})
        for branch, plan in plans.items():
            if plan.final.get("inc") is None and not plan.final.get("done") and plan.final.get("seen") is None:
                refs.pop(branch, None)  # gone, with no reflog left
            else:
                refs[branch] = {k: v for k, v in plan.final.items() if v not in (None, [])}
            if plan.gap:
                self.state["gaps"] = int(self.state.get("gaps") or 0) + 1
        if tags is not None:
            self.state["tags"] = {n: e for n, e in self.state.get("tags", {}).items() if n in set(tags)}
        return self.state != before

    def hold(self) -> datetime:
        """What gc must keep for this hook: every reflog entry since this time (the oldest event
        not delivered, less the clock skew allowed; see :meth:`set_hold`)."""
        value = self.state.get("hold")
        if isinstance(value, str):
            try:
                return parse_time(value)
            except ValueError:
                pass
        since = self.state.get("since")
        return (ulid_time(since) if isinstance(since, str) and since else now()) - SKEW

    def set_hold(self, undelivered: list[Event], checked_all: bool, started: datetime) -> None:
        """After a pass: hold from the oldest event left undelivered; with none left, from when a
        pass that looked at every branch started (a pass that looked at some only keeps the
        hold it had: the others were not looked at)."""
        moves = [e.time - SKEW for e in undelivered if e.source == "ref"]
        if checked_all:
            hold = min(moves, default=started - SKEW)
            if moves or hold - self.hold() >= HOLD_STEP:  # not a write per idle pass: gc keeps a little more
                self.state["hold"] = format_time(hold)
        elif moves:
            self.state["hold"] = format_time(min(min(moves), self.hold()))
