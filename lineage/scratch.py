"""Scratch transactions: table versions written for a computation and never published (a
merge's virtual base). Split from :mod:`trimerge.lineage.transaction`, whose machinery they reuse."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ulid import ULID

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.history.names import SCRATCH_PREFIX, temporary_branch_name
from trimerge.lineage.history.refs import Branch, now
from trimerge.lineage.transaction import Transaction

if TYPE_CHECKING:
    from trimerge.lineage.hosts import TransactionHost



class ScratchTransaction(Transaction):
    """Table versions written for a computation and never published: a merge's virtual base.

    It starts from ``tables`` (read as of ``base``) and forks every table it writes, so nothing it
    does is visible on any branch. Like any transaction it records an intent, so gc keeps its forks
    while it is open and recovery drops them after a crash; :meth:`close` drops them."""

    scratch = True

    def __init__(self, repo: "TransactionHost", tables: Mapping[str, TableVersion], base: Commit, purpose: str):
        ulid = str(ULID())
        super().__init__(repo, temporary_branch_name("scratch", ulid), actor="trimerge:scratch", message=purpose,
                         metadata=None)
        self.ulid = ulid
        self._start = (dict(tables), base)

    def begin(self) -> None:
        self.repo.check_writable()
        tables, base = self._start
        self._lock = self.repo.lock_branch(self.branch_name, f"scratch {self.ulid}")
        self._branch = Branch(self.branch_name, base.id, self.ulid, now(), None)
        self._base = base
        self._tables = dict(tables)

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def table_versions(self) -> dict[str, TableVersion]:
        """The tables as written so far (valid until :meth:`close`)."""
        return dict(self._tables)

    def _schema_changed(self) -> None:
        """A scratch transaction publishes nothing, so it lets the schema lock go at once: the merge
        it serves takes that lock again for dest's own schema change (held, it would wait on itself)."""
        if self._schema_lock is not None:
            self._schema_lock.release()
            self._schema_lock = None

    def publish(self) -> Commit | None:
        raise InvalidOperationError("a scratch transaction is never published")

    def close(self) -> None:
        """Drop every fork this scratch created, and its lease (the name is never used again)."""
        lock = self._lock
        self.abort()
        if lock is not None:
            self.repo.docs.delete(lock.key)
