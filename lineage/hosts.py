"""Hosts of the managers above the table store: what each uses of the repository, as a Protocol.

The stores and the hosts of history and safety managers are in :mod:`trimerge.lineage.ports`, which
every room may import; the hosts here also name the Lance table store (``tables/``), so only the
rooms from tables up (tables, safety, gates, the transaction) import this module. gc and fsck
state theirs in their own modules (``GcHost``, ``FsckHost``): they also name safety's records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.ports import (BranchLookup, CommitStore, DocumentStore, HistoryStores, ReclaimedCheck, Resolver,
                                    TableReader, TemporariesHost, Transactions)

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.storage.lease import Lease
    from trimerge.lineage.storage.location import Location
    from trimerge.lineage.tables.tablestore import TableStore


class HistoryReader(Resolver, TableReader, Protocol):
    """Commits, refs and table versions to read (blame, data checks)."""

    @property
    def commits(self) -> CommitStore: ...


class SettingsReader(Protocol):
    """Repository settings (storage/settings.py)."""

    def get(self, name: str) -> Any: ...


class ChecksHost(HistoryReader, Transactions, Protocol):
    """``repo.checks`` (gates/checks.py): checks live in the tables, passes in documents."""

    @property
    def read_only(self) -> bool: ...
    @property
    def docs(self) -> DocumentStore: ...
    @property
    def settings(self) -> SettingsReader: ...
    def check_writable(self) -> None: ...
    def table_version(self, table: str, ref: str | None = None) -> TableVersion: ...


class SqlHost(Protocol):
    """``repo.sql`` (tables/sql.py): tables at refs as datasets."""

    @property
    def settings(self) -> SettingsReader: ...
    def default_ref(self, ref: str | None) -> str: ...
    def dataset(self, table: str, ref: str | None = None) -> lance.LanceDataset: ...


class TableOptions(Protocol):
    """The storage options of every Lance call (tables/tablestore.py)."""

    @property
    def options(self) -> dict[str, str] | None: ...


class TableLocations(Protocol):
    """Where a table version's dataset lives (tables/rowwrites.py)."""

    @property
    def table_store(self) -> TableOptions: ...
    def dataset_path(self, tv: TableVersion) -> str: ...


class RecoveryHost(TemporariesHost, Protocol):
    """Repairs of interrupted writes (safety/recovery.py), and the cleanup of temporary branches."""

    @property
    def commits(self) -> CommitStore: ...
    @property
    def table_store(self) -> TableStore: ...
    def commit(self, commit_id: str) -> Commit: ...


class Repairs(Protocol):
    """Undoing a failed write's table changes (``repo.recovery``, safety/recovery.py)."""

    def undo_writes(self, touched: Iterable[Mapping[str, Any]], tip: Commit | None) -> list[str]: ...


class TransactionHost(Resolver, TableLocations, HistoryStores, Protocol):
    """A transaction (transaction.py, scratch.py): the whole write path of the repository."""

    @property
    def docs(self) -> DocumentStore: ...
    @property
    def reclaimed(self) -> ReclaimedCheck: ...
    @property
    def recovery(self) -> Repairs: ...
    @property
    def settings(self) -> SettingsReader: ...
    @property
    def table_store(self) -> TableStore: ...
    def check_writable(self) -> None: ...
    def lock_branch(self, branch: str, purpose: str, *, what: str | None = None) -> Lease: ...


class ServedHost(Protocol):
    """Table versions served to other programs at their commit's state (tables/served.py)."""

    @property
    def location(self) -> Location: ...
    @property
    def table_store(self) -> TableStore: ...
    @property
    def branches(self) -> BranchLookup: ...
    def dataset_path(self, tv: TableVersion) -> str: ...
    def all_commits(self) -> list[Commit]: ...
