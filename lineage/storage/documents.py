"""JSON documents on a :mod:`~trimerge.lineage.storage.backends` backend.

Every document that may later be compare-and-swapped carries a fresh ``nonce`` (a ULID) each time
it is written. Object-store versions (S3 ETags) are content hashes, so without it a document that
went A→B→A would look unchanged to a writer that read A first, and that stale writer's swap would
succeed.
"""

from __future__ import annotations

import builtins
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.backends import Backend
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError

NONCE = "nonce"


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, indent=1).encode()


@dataclass(frozen=True)
class Document:
    """A parsed document and the version a swap of it must name."""

    doc: Any
    version: Any


class Documents:
    """Read, create and compare-and-swap JSON documents by key."""

    def __init__(self, backend: Backend, where: str = ""):
        self.backend = backend
        self.where = where  # the location, for error messages

    def _parse(self, key: str, data: bytes) -> Any:
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptRepositoryError(f"{self.where}/{key}: not valid JSON ({exc})") from None

    def read(self, key: str, *, damaged_as_none: bool = False) -> Document | None:
        """The document and its version; None when absent. A document that does not parse raises
        :class:`CorruptRepositoryError`, or comes back with ``doc=None`` if ``damaged_as_none``."""
        stored = self.backend.get(key)
        if stored is None:
            return None
        try:
            return Document(self._parse(key, stored.data), stored.version)
        except CorruptRepositoryError:
            if damaged_as_none:
                return Document(None, stored.version)
            raise

    def get(self, key: str) -> Any:
        """The document at ``key``, or None."""
        found = self.read(key)
        return None if found is None else found.doc

    def create(self, key: str, doc: dict[str, Any], *, nonce: bool = True) -> Any | None:
        """Write ``doc`` if ``key`` is absent; the new version, or None if it existed."""
        body = {**doc, NONCE: new_ulid()} if nonce else doc
        return self.backend.create(key, dumps(body))

    def swap(self, key: str, doc: dict[str, Any], expected: Any) -> Any | None:
        """Replace the document if it is still at version ``expected``; the new version, or None."""
        return self.backend.swap(key, dumps({**doc, NONCE: new_ulid()}), expected)

    def write(self, key: str, doc: dict[str, Any], expected: Any | None) -> Any:
        """Create (``expected`` None) or swap, for a document only its owner writes; a lost race
        means the ownership was lost and is reported as a retryable error."""
        version = self.create(key, doc) if expected is None else self.swap(key, doc, expected)
        if version is None:
            raise ConcurrentWriteError(f"{self.where}/{key} was changed by another writer; refresh and retry")
        return version

    def together(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run independent requests at once on a remote store (one round trip instead of several),
        one after the other on a local disk; the first error is raised after all have finished."""
        if not self.backend.remote or len(calls) < 2:
            return [call() for call in calls]
        futures = [_pool().submit(call) for call in calls]
        return [f.result() for f in futures]

    def list(self, prefix: str) -> list[str]:
        return self.backend.list(prefix)

    def delete(self, key: str) -> None:
        self.backend.delete(key)

    # -- keys, for stores that name documents by folder (commits, reflog): the backend's answers
    @property
    def remote(self) -> bool:
        """Whether requests cross a network (then reading many documents at once pays)."""
        return bool(self.backend.remote)

    def exists(self, key: str) -> bool:
        return self.backend.get(key) is not None

    def copy(self, key: str, dest: str) -> bool:
        """Copy the stored bytes of ``key`` to ``dest`` as they are (parsable or not), if ``dest`` is
        absent; False when ``key`` is absent."""
        stored = self.backend.get(key)
        if stored is None:
            return False
        self.backend.create(dest, stored.data)
        return True

    def children(self, prefix: str) -> builtins.list[str]:
        return self.backend.children(prefix)

    def folders(self, prefix: str) -> builtins.list[str]:
        return self.backend.folders(prefix)

    def keys_below(self, prefix: str) -> Iterator[str]:
        return self.backend.keys_below(prefix)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(4, thread_name_prefix="trimerge-meta")
    return _POOL


def without_nonce(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != NONCE}
