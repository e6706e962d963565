"""The change feed: per consumer and branch, the rows that changed since the consumer's checkpoint.

``repo.changes("warehouse", branch="main")`` diffs the consumer's checkpoint commit against the
branch's tip with the diff engine — at the cost of the change, not of the tables — and returns a
:class:`ChangeBatch`: per table the rows inserted, deleted and updated (before and after images,
as :meth:`TableDiff.rows() <trimerge.diff.engine.TableDiff.rows>`), ``from_commit`` and
``to_commit``. Reading again before :meth:`ChangeBatch.ack` returns the same changes; ``ack()``
moves the checkpoint to ``to_commit`` by compare-and-swap, so a consumer that applies a batch and
then acks applies every change exactly once, whatever crashes in between (it re-reads the same
batch). A consumer's first batch starts from nothing: every row is an insert.

Checkpoints live in ``_trimerge/feeds/<consumer>/<branch>.json``. gc keeps a checkpoint's commit
for ``retention`` after each ack (default 7 days; the commits on the branch's history are kept
anyway); a consumer whose checkpoint commit was reclaimed since gets
:class:`ConsumerExpiredError`, which names the way back: a full re-read (``full=True``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Iterator

from trimerge.hooks.model import validate_name
from trimerge.lineage.commit import Commit, format_time, parse_time
from trimerge.lineage.errors import (BranchNotFoundError, ConcurrentWriteError, CorruptRepositoryError,
                                     DataReclaimedError, InvalidOperationError)
from trimerge.lineage.history.refs import encode_name, now

if TYPE_CHECKING:
    import pyarrow as pa

    from trimerge.diff.engine import TableDiff

FEEDS = "feeds"
DEFAULT_RETENTION = timedelta(days=7)


class ConsumerExpiredError(DataReclaimedError):
    """The consumer's checkpoint commit was reclaimed by gc: only a full re-read can go on."""


def checkpoint_key(consumer: str, branch: str) -> str:
    return f"{FEEDS}/{consumer}/{encode_name(branch)}.json"


class _Rows(Mapping[str, "pa.Table"]):
    """Table name -> its changed rows, computed when first asked for."""

    def __init__(self, diffs: dict[str, "TableDiff"]):
        self._diffs = diffs
        self._rows: dict[str, pa.Table] = {}

    def __getitem__(self, name: str) -> "pa.Table":
        if name not in self._rows:
            self._rows[name] = self._diffs[name].rows()
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._diffs)

    def __len__(self) -> int:
        return len(self._diffs)

    def __repr__(self) -> str:
        return f"<changed rows of {', '.join(self._diffs) or 'no table'}>"


class ChangeBatch:
    """The changes on ``branch`` from ``from_commit`` (None: from nothing) to ``to_commit``, for
    ``consumer``. ``tables``: table name -> a pyarrow Table shaped as ``TableDiff.rows()`` (the
    key columns, ``change``, ``changed_columns``, ``before``, ``after``), for every table whose
    storage changed; ``dropped``: tables gone at ``to_commit`` (their rows come as deletes);
    ``primary_keys``: each table's key columns; ``full``: a re-read from nothing (a consumer
    replaces its copy)."""

    def __init__(self, repo: Any, consumer: str, branch: str, before: Commit | None, after: Commit,
                 diffs: dict[str, "TableDiff"], version: Any, retention: timedelta, full: bool):
        self.repo = repo
        self.consumer = consumer
        self.branch = branch
        self.from_commit = before.id if before is not None else None
        self.to_commit = after.id
        self.full = full
        self.diffs = diffs
        self.tables: Mapping[str, pa.Table] = _Rows(diffs)
        self.dropped = sorted(n for n, td in diffs.items() if td.after_version is None)
        self.primary_keys = {n: tuple(td.primary_key) for n, td in diffs.items()}
        self._version = version
        self._retention = retention
        self._before = before
        self._commits: list[str] | None = None

    @property
    def empty(self) -> bool:
        """Nothing happened on the branch since the checkpoint."""
        return self.from_commit == self.to_commit

    @property
    def commits(self) -> list[str]:
        """The ids of the commits the range brings (reachable from ``to_commit``, not from
        ``from_commit``), newest first."""
        if self._commits is None:
            from trimerge.lineage.history import graph

            stop = set(graph.iter_history(self.repo.commits, [self.from_commit])) if self.from_commit else set()
            self._commits = [c for c in graph.iter_history(self.repo.commits, [self.to_commit]) if c not in stop]
        return self._commits

    def counts(self) -> dict[str, dict[str, int]]:
        """Per table: rows inserted, deleted and updated."""
        return {n: {"inserted": td.counts.inserted, "deleted": td.counts.deleted, "updated": td.counts.updated}
                for n, td in sorted(self.diffs.items())}

    def iter_batches(self, table: str, max_rows: int = 65536) -> Iterator[Any]:
        """``table``'s changed rows in record batches, in bounded memory (a large range spills)."""
        return self._diff(table).iter_batches(max_rows)

    def to_spark(self, table: str, spark: Any = None) -> Any:
        """``table``'s changed rows as a Spark DataFrame: for ranges too large for one machine
        (on the Spark engine nothing is collected on the driver)."""
        td = self._diff(table)
        if spark is not None or td.engine != "spark":
            from trimerge.diff.spark import get_spark

            td.use_spark(spark or get_spark())
        return td.to_spark(spark)

    def _diff(self, table: str) -> "TableDiff":
        if table not in self.diffs:
            raise InvalidOperationError(f"table {table!r} did not change in this batch (changed: "
                                        f"{', '.join(sorted(self.diffs)) or 'none'})")
        return self.diffs[table]

    def ack(self) -> None:
        """Move the consumer's checkpoint to ``to_commit``: call it once the batch is applied.
        A checkpoint another reader of the same consumer moved meanwhile is a retryable
        :class:`ConcurrentWriteError` (read again); acking the same batch twice is a no-op."""
        self.repo.check_writable()
        key = checkpoint_key(self.consumer, self.branch)
        at = now()
        doc = {"consumer": self.consumer, "branch": self.branch, "commit": self.to_commit, "acked_at": format_time(at),
               "keep_until": format_time(at + self._retention), "retention_seconds": self._retention.total_seconds()}
        written = self.repo.docs.create(key, doc) if self._version is None else \
            self.repo.docs.swap(key, doc, self._version)
        if written is None:
            current = read_checkpoint(self.repo.docs, self.consumer, self.branch)
            if current is not None and current[0].get("commit") == self.to_commit:
                return  # acked already (this batch, by this or another reader)
            raise ConcurrentWriteError(f"consumer {self.consumer!r} on {self.branch!r} was acked by another reader "
                                       "since this batch was read; read the changes again")
        self._version = written
        # Naming a commit again: after the checkpoint is stored, ask gc's verdict (lineage/safety/gc.py).
        self.repo.reclaimed.check([self.to_commit])

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "branch": self.branch, "from_commit": self.from_commit,
                "to_commit": self.to_commit, "full": self.full, "dropped": self.dropped, "counts": self.counts()}

    def __repr__(self) -> str:
        start = self.from_commit[:10] if self.from_commit else "nothing"
        return f"ChangeBatch({self.consumer!r} on {self.branch!r}: {start}..{self.to_commit[:10]}, " \
               f"{len(self.diffs)} table(s))"


def read_checkpoint(docs: Any, consumer: str, branch: str) -> tuple[dict[str, Any], Any] | None:
    found = docs.read(checkpoint_key(consumer, branch), damaged_as_none=True)
    if found is None:
        return None
    if not isinstance(found.doc, dict) or not isinstance(found.doc.get("commit"), str):
        raise CorruptRepositoryError(f"{docs.where}/{checkpoint_key(consumer, branch)}: malformed checkpoint of "
                                     f"consumer {consumer!r}; delete it to start the consumer over (a full re-read)")
    return found.doc, found.version


def changes(repo: Any, consumer: str, branch: str = "main", *, full: bool = False,
            retention: Any = None) -> ChangeBatch:
    """:meth:`Repository.changes`: what consumer ``consumer`` has not acked on ``branch``.
    ``full=True`` reads from nothing (every row an insert) — the way back for an expired consumer;
    ``retention``: how long gc keeps the checkpoint's commit after the next ack (a ``timedelta``,
    seconds or text such as ``"7d"``; default 7 days)."""
    from trimerge.diff.engine import TableDiff
    from trimerge.diff.planner import Snapshot
    from trimerge.lineage.safety.gc import as_retention

    validate_name(consumer, "consumer")
    if not isinstance(full, bool):
        raise InvalidOperationError(f"full takes True or False, not {full!r}")
    keep = DEFAULT_RETENTION if retention is None else as_retention(retention)
    if not isinstance(branch, str) or not repo.branches.exists(branch):
        raise BranchNotFoundError(f"no branch {branch!r}")
    tip = repo.commit(repo.refs.branch(branch).commit_id)
    found = read_checkpoint(repo.docs, consumer, branch)
    version = found[1] if found is not None else None
    before = None
    if found is not None and not full:
        before = _checkpoint_commit(repo, consumer, branch, found[0])
    diffs = {}
    for name in sorted((before.tables.keys() if before else set()) | tip.tables.keys()):
        old = before.tables.get(name) if before else None
        new = tip.tables.get(name)
        if old is not None and new is not None and old.location == new.location:
            continue  # the same Lance version: nothing to read
        diffs[name] = TableDiff(name, Snapshot(repo, old), Snapshot(repo, new))
    return ChangeBatch(repo, consumer, branch, before, tip, diffs, version, keep, full)


def _checkpoint_commit(repo: Any, consumer: str, branch: str, doc: dict[str, Any]) -> Commit:
    cid = str(doc["commit"])
    way_back = (f"re-read the branch in full: repo.changes({consumer!r}, branch={branch!r}, full=True) "
                f"('trimerge changes {consumer} --branch {branch} --full'), apply it as a replacement, then ack")
    kept = doc.get("keep_until")
    until = f" (gc kept it until {kept})" if isinstance(kept, str) else ""
    if not repo.commits.exists(cid):
        raise ConsumerExpiredError(f"consumer {consumer!r} on {branch!r}: its checkpoint commit {cid[:10]} is gone{until}; "
                                   + way_back)
    commit = repo.commit(cid)
    try:
        repo.check_readable(commit)
    except DataReclaimedError:
        raise ConsumerExpiredError(f"consumer {consumer!r} on {branch!r}: the data of its checkpoint commit {cid[:10]} "
                                   f"was reclaimed by gc{until}; " + way_back) from None
    return commit


def consumers(repo: Any) -> list[dict[str, Any]]:
    """Every checkpoint: consumer, branch, commit, when acked, how long gc keeps it."""
    out = []
    for key in repo.docs.keys_below(FEEDS):
        doc = repo.docs.get(key)
        if isinstance(doc, dict) and isinstance(doc.get("commit"), str):
            out.append({k: doc.get(k) for k in ("consumer", "branch", "commit", "acked_at", "keep_until")})
    return sorted(out, key=lambda d: (str(d["consumer"]), str(d["branch"])))


def held_commits(repo: Any, at: datetime) -> list[str]:
    """The checkpoint commits gc keeps at ``at`` (each within its consumer's retention)."""
    held = []
    for entry in consumers(repo):
        try:
            if entry["keep_until"] and parse_time(str(entry["keep_until"])) > at:
                held.append(str(entry["commit"]))
        except ValueError:  # a damaged time: keep the commit rather than guess
            held.append(str(entry["commit"]))
    return held


# The API's edge: a full disk or a dependency's panic leaves it as a TrimergeError (boundary.py).
from trimerge.lineage.safety.boundary import guard_class, guarded  # noqa: E402

guard_class(ChangeBatch)
changes = guarded(changes)
