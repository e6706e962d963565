"""What keeps unreachable commits alive for a while, and what gc has condemned for good.

Two small document sets, written by two kinds of actors:

* ``deleted/<ulid>.json`` — one record per deleted branch or tag (its tip and when it went). Until
  the retention period has passed, gc treats the recorded commit as a root: a deleted branch stays
  readable, and can be re-created, like git's reflog and lakeFS's retention.
* ``gc/reclaimed.json`` — the commits gc decided to reclaim (``state`` is the gc run's id while it
  deletes, ``"reclaimed"`` once done). Whoever makes an existing commit reachable again (a new
  branch or tag, a merge or cherry-pick of it) first publishes its reference and *then* calls
  :meth:`ReclaimedCommits.check`; gc first records its verdict and *then* re-reads the references.
  On a linearizable store one of the two always sees the other (see :mod:`trimerge.lineage.safety.gc`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterable

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError, DataReclaimedError

if TYPE_CHECKING:
    from trimerge.lineage.ports import DocumentStore

DELETED = "deleted"
RECLAIMED = "gc/reclaimed.json"
DONE = "reclaimed"


@dataclass(frozen=True)
class DeletionRecord:
    """A deleted branch or tag, kept as a gc root until the retention period has passed."""

    key: str
    kind: str  # "branch" or "tag"
    name: str
    commit_id: str
    deleted_at: datetime

    def expired(self, retention: timedelta, at: datetime) -> bool:
        return at - self.deleted_at >= retention


class DeletionLog:
    """``deleted/``: written by branch and tag deletion before the ref goes, read by gc after refs."""

    def __init__(self, docs: DocumentStore):
        self.docs = docs

    def record(self, kind: str, name: str, commit_id: str, at: datetime) -> str:
        key = f"{DELETED}/{new_ulid()}.json"
        self.docs.write(key, {"kind": kind, "name": name, "commit": commit_id, "deleted_at": format_time(at)}, None)
        return key

    def records(self) -> list[DeletionRecord]:
        """Every record; a damaged one raises (gc must not forget a root it cannot read)."""
        found = []
        for key in self.docs.list(DELETED):
            doc = self.docs.get(key)
            if doc is None:
                continue  # expired and removed meanwhile
            try:
                found.append(DeletionRecord(key, str(doc["kind"]), str(doc["name"]), str(doc["commit"]),
                                            parse_time(doc["deleted_at"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptRepositoryError(f"{self.docs.where}/{key}: malformed deletion record ({exc!r})") from None
        return found

    def latest(self, kind: str, name: str) -> DeletionRecord | None:
        matching = [r for r in self.records() if r.kind == kind and r.name == name]
        return max(matching, key=lambda r: r.deleted_at) if matching else None

    def remove(self, record: DeletionRecord) -> None:
        self.docs.delete(record.key)


class ReclaimedCommits:
    """``gc/reclaimed.json``: commit id → gc run id (being reclaimed) or ``"reclaimed"``."""

    def __init__(self, docs: DocumentStore):
        self.docs = docs

    def read(self) -> tuple[dict[str, str], Any]:
        found = self.docs.read(RECLAIMED)
        if found is None:
            return {}, None
        commits = found.doc.get("commits") if isinstance(found.doc, dict) else None
        if not isinstance(commits, dict):
            raise CorruptRepositoryError(f"{self.docs.where}/{RECLAIMED}: malformed (no 'commits')")
        return {str(k): str(v) for k, v in commits.items()}, found.version

    def write(self, commits: dict[str, str], version: Any) -> Any:
        return self.docs.write(RECLAIMED, {"commits": commits}, version)

    def check(self, commit_ids: Iterable[str]) -> None:
        """Raise if gc has condemned any of these commits. Call it *after* the reference to them is
        stored (and undo that reference when it raises)."""
        wanted = set(commit_ids)
        if not wanted:
            return
        commits, _ = self.read()
        for cid in sorted(wanted & commits.keys()):
            if commits[cid] == DONE:
                raise DataReclaimedError(f"commit {cid[:10]}: its data was reclaimed by gc")
            raise ConcurrentWriteError(
                f"commit {cid[:10]} is being reclaimed by gc (run {commits[cid][:10]}); retry when gc has finished")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
