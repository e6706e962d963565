"""Pushes in flight into this repository: what gc must keep until the pushed ref has moved.

A push (:mod:`trimerge.remotes`) uploads Lance files and commits before it moves the remote branch.
Until then nothing in the receiving repository refers to them, so before its first upload it records
``incoming/<ulid>.json`` here: the Lance branches it writes to (``touched``, as an intent's) and the
commits it brings. gc reads these records with the intents, before the refs (see
:mod:`trimerge.lineage.safety.gc`), and keeps them; the push deletes its record after the branch
moved. A record whose writer died (its process is gone on this host, or it is older than
:data:`MAX_AGE_SECONDS`) keeps nothing and is removed by gc.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Iterable

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.storage.lease import process_alive

FOLDER = "incoming"
MAX_AGE_SECONDS = 24 * 3600


def record(docs: Documents, commits: Iterable[str], touched: Iterable[tuple[str, str]]) -> str:
    """Announce an upload; returns the record's key (for :func:`finish`)."""
    key = f"{FOLDER}/{new_ulid()}.json"
    docs.create(key, {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(),
                      "commits": sorted(set(commits)), "touched": sorted({(d, b) for d, b in touched})})
    return key


def commits(docs: Documents, key: str) -> list[str]:
    """The commits the upload recorded at ``key`` brings (none when the record is gone or damaged)."""
    found = docs.read(key, damaged_as_none=True)
    listed = found.doc.get("commits") if found is not None and isinstance(found.doc, dict) else None
    return [c for c in listed if isinstance(c, str)] if isinstance(listed, list) else []


def finish(docs: Documents, key: str) -> None:
    docs.delete(key)


def _dead(doc: Any) -> bool:
    try:
        if doc["host"] == socket.gethostname() and not process_alive(int(doc["pid"])):
            return True
        return time.time() - float(doc["started_at"]) > MAX_AGE_SECONDS
    except (KeyError, TypeError, ValueError):
        return True


def live(docs: Documents) -> list[dict[str, Any]]:
    """The records of pushes still running."""
    out = []
    for key in docs.list(FOLDER):
        doc = docs.read(key, damaged_as_none=True)
        if doc is not None and isinstance(doc.doc, dict) and not _dead(doc.doc):
            out.append(doc.doc)
    return out


def expire(docs: Documents) -> int:
    """Remove the records of pushes whose writer died; how many."""
    n = 0
    for key in docs.list(FOLDER):
        doc = docs.read(key, damaged_as_none=True)
        if doc is not None and (not isinstance(doc.doc, dict) or _dead(doc.doc)):
            docs.delete(key)
            n += 1
    return n
