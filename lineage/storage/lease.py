"""Leases: one writer per branch, on a local disk and on object stores alike.

A lease is a document holding its holder (token, pid, host, expiry). It is taken by
create-if-absent, or — when the current holder released it or is dead — by compare-and-swap over
the version that was judged; it is renewed and released by compare-and-swap too. Nothing ever
deletes it blindly, so a writer can never remove a lease that someone else took in between.

A holder is dead when its process is gone (same host) or its lease expired (any host). Whoever
takes over a dead holder's lease is told so through ``on_dead_holder``, while holding it, so the
dead writer's half-done work can be repaired before anything else is written.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Callable

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.documents import NONCE, Documents, dumps
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError

HOSTNAME = socket.gethostname()
#: How long a lease stays valid without renewal (a holder on another host cannot be checked).
LEASE_SECONDS = float(os.environ.get("TRIMERGE_LEASE_SECONDS", "600"))


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Holder:
    token: str
    pid: int
    host: str
    acquired_at: float
    expires_at: float
    purpose: str
    released: bool = False

    @classmethod
    def new(cls, purpose: str, seconds: float) -> "Holder":
        now = time.time()
        return cls(new_ulid(), os.getpid(), HOSTNAME, now, now + seconds, purpose)

    @classmethod
    def from_json(cls, doc: object) -> "Holder | None":
        """None for a damaged document (its writer died while writing it, or worse)."""
        try:
            return cls(str(doc["token"]), int(doc["pid"]), str(doc["host"]), float(doc["acquired_at"]),
                       float(doc.get("expires_at", doc["acquired_at"] + LEASE_SECONDS)),
                       str(doc.get("purpose", "")), bool(doc.get("released", False)))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def to_json(self) -> dict:
        return asdict(self)

    def is_dead(self) -> bool:
        if self.host == HOSTNAME and not process_alive(self.pid):
            return True
        return time.time() > self.expires_at

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}: {self.purpose}"


def damaged_lease(docs: Documents, key: str) -> CorruptRepositoryError:
    """A lease that does not parse is damage, not a dead holder: a lease is written whole (link or
    rename of a complete file, one PUT), so something else changed it, and taking it over could
    let two writers in."""
    return CorruptRepositoryError(
        f"{docs.where}/{key} is damaged (not a lease document): make sure no trimerge process is writing "
        f"(ps; 'trimerge status' lists writes in flight), then delete that file")


class Lease:
    """An exclusive, expiring claim on one key."""

    def __init__(self, docs: Documents, key: str, purpose: str, seconds: float | None = None,
                 released_versions: dict[str, object] | None = None):
        self.docs = docs
        self.key = key
        # Versions of leases this process released: the next take tries one swap over it first, which
        # saves a read per write when one process writes a branch again and again.
        self.released_versions = released_versions if released_versions is not None else {}
        self.seconds = LEASE_SECONDS if seconds is None else seconds
        self.mine = Holder.new(purpose, self.seconds)
        self._version: object | None = None
        self._before: bytes | None = None  # the released lease this one replaced, to put back untouched
        self._created = False  # this holder created the lease document
        self.held = False

    @property
    def token(self) -> str:
        return self.mine.token

    def holder(self) -> Holder | None:
        found = self.docs.read(self.key, damaged_as_none=True)
        return None if found is None else Holder.from_json(found.doc)

    def _swap(self, doc: dict, expected: object) -> object | None:
        return self.docs.backend.swap(self.key, self._bytes(doc), expected)

    @staticmethod
    def _bytes(doc: dict) -> bytes:
        return dumps({**doc, NONCE: new_ulid()})

    def try_acquire(self, on_dead_holder: Callable[[Holder | None], object] | None = None) -> bool:
        """Take the lease if it is free, released or held by a dead holder; never waits."""
        hint = self.released_versions.pop(self.key, None)
        if hint is not None:
            hint_version, hint_bytes = hint
            self._version = self._swap(self.mine.to_json(), hint_version)
            if self._version is not None:  # still exactly as this process released it
                self.held, self._before, self._created = True, hint_bytes, False
                return True
        stored = self.docs.backend.get(self.key)
        found = None if stored is None else self.docs.read(self.key, damaged_as_none=True)
        current = None if found is None else Holder.from_json(found.doc)
        if stored is not None and current is None:
            raise damaged_lease(self.docs, self.key)
        if stored is None:
            self._version = self.docs.backend.create(self.key, self._bytes(self.mine.to_json()))
        elif current is not None and not current.released and not current.is_dead():
            return False
        else:
            self._version = self._swap(self.mine.to_json(), stored.version)
        self.held = self._version is not None
        self._before = stored.data if stored is not None and current is not None and current.released else None
        self._created = stored is None
        if self.held and stored is not None and on_dead_holder is not None and (current is None or not current.released):
            try:
                on_dead_holder(current)
            except BaseException:
                self.release()
                raise
        return self.held

    def acquire(self, timeout: float, what: str,
                on_dead_holder: Callable[[Holder | None], object] | None = None) -> "Lease":
        """Wait up to ``timeout`` seconds; :class:`ConcurrentWriteError` (retryable) after that."""
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not self.try_acquire(on_dead_holder):
            if time.monotonic() >= deadline:
                current = self.holder()
                who = f" (held by {current.describe()})" if current and not current.released else ""
                raise ConcurrentWriteError(f"{what} is being written by another writer{who}; refresh and retry")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        return self

    def renew_if_due(self) -> None:
        """Push the expiry out once half of it has passed (a long write keeps its lease)."""
        if not self.held or time.time() < self.mine.expires_at - self.seconds / 2:
            return
        renewed = Holder(**{**self.mine.to_json(), "expires_at": time.time() + self.seconds})
        version = self.docs.swap(self.key, renewed.to_json(), self._version)
        if version is None:
            self.held = False
            raise ConcurrentWriteError(f"lost the lease {self.key} (it expired and another writer took it); retry")
        self.mine, self._version = renewed, version

    def release(self, *, untouched: bool = False) -> None:
        """Mark the lease free; a lease taken over meanwhile is left to its new holder.

        ``untouched``: the holder changed nothing, so the lease goes back to exactly the bytes it
        had (or away, if it was new), and a rejected call leaves the repository byte-for-byte as it
        was. Putting back the same released state is safe: it means what it meant before."""
        if not self.held:
            return
        self.held = False
        if untouched and self._before is not None:
            version = self.docs.backend.swap(self.key, self._before, self._version)
            if version is not None:
                self.released_versions[self.key] = (version, self._before)
            return
        if untouched and self._created and self.mine.expires_at - time.time() > self.seconds / 2:
            self.docs.backend.delete(self.key)  # created by this holder moments ago, still far from expiry
            return
        data = self._bytes(Holder(**{**self.mine.to_json(), "released": True}).to_json())
        version = self.docs.backend.swap(self.key, data, self._version)
        if version is not None:
            self.released_versions[self.key] = (version, data)
