"""The delivery log: one document per attempt, ``_trimerge/hooks/log/<hook>/<ulid>.json``.

An attempt is created once and never changed (create-if-absent: two runners never contend), so
the log of a hook is every attempt anyone made, newest first: event, id, outcome, HTTP status or
exit code, duration, one line of error and the start of the answer or output. The oldest are
pruned past :data:`KEEP`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trimerge.hooks.model import log_folder
from trimerge.hooks.transport import Outcome
from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.history.refs import now
from trimerge.lineage.storage.ids import new_ulid

#: Attempts kept per hook (older ones are removed as new ones are written).
KEEP = 500
#: Characters of an answer or output kept in the log (the transport keeps more, for gates' reports).
LOG_OUTPUT = 4000


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt of event ``id`` (``event``) to a hook: ``status`` is ``delivered``,
    ``failed`` or ``test``-prefixed for ``hook test``; ``code`` the HTTP status or exit code."""

    hook: str
    event: str
    id: str
    attempt: int
    status: str
    code: int | None
    duration_ms: float
    error: str | None
    output: str
    at: datetime
    by: str

    @property
    def ok(self) -> bool:
        return self.status in ("delivered", "test-delivered")

    def to_json(self) -> dict[str, Any]:
        return {"hook": self.hook, "event": self.event, "id": self.id, "attempt": self.attempt,
                "status": self.status, "code": self.code, "duration_ms": round(self.duration_ms, 3),
                "error": self.error, "output": self.output, "at": format_time(self.at), "by": self.by}

    @classmethod
    def from_json(cls, doc: Any) -> "Attempt":
        return cls(str(doc["hook"]), str(doc["event"]), str(doc["id"]), int(doc["attempt"]), str(doc["status"]),
                   None if doc.get("code") is None else int(doc["code"]), float(doc["duration_ms"]),
                   doc.get("error"), str(doc.get("output", "")), parse_time(doc["at"]), str(doc.get("by", "")))


def record(docs: Any, hook: str, event: str, event_id: str, attempt: int, outcome: Outcome, *,
           test: bool = False) -> Attempt:
    """Write one attempt to the log and return it."""
    status = ("test-" if test else "") + ("delivered" if outcome.ok else "failed")
    entry = Attempt(hook, event, event_id, attempt, status, outcome.code, outcome.seconds * 1000.0, outcome.error,
                    outcome.output[:LOG_OUTPUT], now(), f"pid {os.getpid()} on {socket.gethostname()}")
    docs.create(f"{log_folder(hook)}/{new_ulid()}.json", entry.to_json(), nonce=False)
    return entry


def read(docs: Any, hook: str, limit: int | None = None) -> list[Attempt]:
    """The attempts of ``hook``, newest first (at most ``limit``); damaged entries are skipped."""
    keys = sorted(docs.list(log_folder(hook)), reverse=True)  # ULIDs sort by time
    out: list[Attempt] = []
    for key in keys:
        if limit is not None and len(out) >= limit:
            break
        doc = _get(docs, key)
        if doc is None:
            continue
        try:
            out.append(Attempt.from_json(doc))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _get(docs: Any, key: str) -> Any:
    found = docs.read(key, damaged_as_none=True)
    return None if found is None else found.doc


def prune(docs: Any, hook: str) -> int:
    """Remove the oldest attempts beyond :data:`KEEP` (only once there are a tenth more, so a busy
    hook does not list and delete on every attempt); returns how many went."""
    keys = sorted(docs.list(log_folder(hook)))
    extra = len(keys) - KEEP
    if extra < KEEP // 10:
        return 0
    for key in keys[:extra]:
        docs.delete(key)
    return extra


def remove_all(docs: Any, hook: str) -> None:
    for key in docs.list(log_folder(hook)):
        docs.delete(key)
