"""The repository: tables as Lance datasets plus one commit graph for all of them.

Layout of a repository directory::

    _trimerge/repo.json                     format marker
    _trimerge/HEAD                          the current branch (for the CLI)
    _trimerge/commits/<id[:2]>/<id[2:]>.json  immutable commits (content-addressed, never deleted)
    _trimerge/refs/branches/<name>.json     branch tips (name with '/' as %2F)
    _trimerge/refs/tags/<name>.json         tags
    _trimerge/locks/<name>.lock             one writer per branch; __schema_apply_lock__ for schema changes
    _trimerge/intents/<ulid>.json           what an in-flight write intends (recovery sidecar)
    _trimerge/quarantine/                   damaged sidecars, kept for inspection
    _trimerge/reclaim/<name>.json           forks of deleted branches still to reclaim
    tables/<table>-<ulid>/                  one Lance dataset per table lineage, stable row ids

A commit maps every table to (dataset, Lance branch, version). Writers take the branch's lock,
write Lance versions (invisible: readers follow commits, never "latest"), write the commit and
then move the branch ref: that rename is the single visibility point of a multi-table write.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import lance
import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from trimerge.lineage import graph as graphalg
from trimerge.lineage.address import Address, parse_address
from trimerge.lineage.commit import Commit, TableVersion, format_time, parse_time
from trimerge.lineage.errors import (
    AlreadyExistsError,
    BranchNotFoundError,
    ConcurrentWriteError,
    DataReclaimedError,
    InvalidOperationError,
    PrimaryKeyError,
    ReadOnlyRefError,
    RefNotFoundError,
    RepositoryNotFoundError,
    SchemaMismatchError,
    TableNotFoundError,
    TagNotFoundError,
    TrimergeError,
)
from trimerge.lineage.names import (
    MAIN,
    SCHEMA_LOCK_BRANCH,
    is_internal_branch,
    validate_branch_name,
    validate_table_name,
    validate_tag_name,
)
from trimerge.lineage.refexpr import resolve as resolve_expr
from trimerge.lineage.store import FileLock, MetaStore, break_lock_if_dead, decode_name, encode_name, local_path
from trimerge.lineage import tables as tbl

META_DIR = "_trimerge"
TABLES_DIR = "tables"
RECOVERY_ACTOR = "trimerge:recovery"
#: How long a lock held by a process on another host stays valid without its owner.
LOCK_LEASE_SECONDS = 600.0


def default_actor() -> str:
    env = os.environ.get("TRIMERGE_ACTOR")
    if env:
        return env
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def crashpoint(name: str) -> None:
    """Failure injection for the recovery tests: ``TRIMERGE_CRASH_AT=name`` kills the process here."""
    if os.environ.get("TRIMERGE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Branch:
    """A graph branch: a movable pointer to a commit."""

    name: str
    commit_id: str
    id: str  # incarnation id: owner of the Lance forks this branch writes
    created_at: datetime
    parent: str | None  # branch it was created from (None for main or when created from a tag/commit)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "commit": self.commit_id, "id": self.id,
                "created_at": format_time(self.created_at), "parent": self.parent}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Branch":
        return cls(doc["name"], doc["commit"], doc["id"], parse_time(doc["created_at"]), doc.get("parent"))


@dataclass(frozen=True)
class Tag:
    """An immutable, named pointer to a commit."""

    name: str
    commit_id: str
    created_at: datetime
    actor: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "commit": self.commit_id, "created_at": format_time(self.created_at),
                "actor": self.actor, "message": self.message}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Tag":
        return cls(doc["name"], doc["commit"], parse_time(doc["created_at"]), doc.get("actor", ""), doc.get("message", ""))


@dataclass
class CleanupReport:
    """What :meth:`Repository.cleanup` reclaimed."""

    datasets_removed: list[str] = field(default_factory=list)
    forks_removed: list[str] = field(default_factory=list)
    lance_tags_removed: list[str] = field(default_factory=list)
    temp_files_removed: int = 0
    bytes_freed: int = 0
    pending: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RecoveryReport:
    completed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)


def _dir_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


class _CommitGraphView:
    """Read-only commit graph over the store, loading commits lazily (never the whole history)."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.repo.commit(commit_id).parents

    def generation(self, commit_id: str) -> int:
        return self.repo.commit(commit_id).generation

    def created_at(self, commit_id: str) -> float:
        return self.repo.commit(commit_id).created_at.timestamp()


class _RefNamespace:
    def __init__(self, repo: "Repository"):
        self.repo = repo

    def commit_exists(self, commit_id: str) -> bool:
        return self.repo._meta.exists(self.repo._commit_key(commit_id))

    def branch_tip(self, name: str) -> str | None:
        if is_internal_branch(name):
            return None
        b = self.repo.branches.get_or_none(name)
        return b.commit_id if b else None

    def tag_target(self, name: str) -> str | None:
        t = self.repo.tags.get_or_none(name)
        return t.commit_id if t else None

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return self.repo._ids_with_prefix(prefix)


class Repository:
    """A multi-table Lance repository with git-style commits, branches and tags.

    Create one with :meth:`init`, open an existing one with :meth:`open` (a read-write open first
    repairs interrupted writes)."""

    def __init__(self, path: Path, *, read_only: bool = False, lock_timeout: float = 30.0):
        self.path = path
        self.uri = str(path)
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self._meta = MetaStore(path / META_DIR)
        self._commits: dict[str, Commit] = {}
        self.graph = _CommitGraphView(self)
        self._ns = _RefNamespace(self)
        self.branches = BranchManager(self)
        self.tags = TagManager(self)
        self.last_recovery = RecoveryReport()

    # ------------------------------------------------------------------ opening
    @classmethod
    def init(cls, uri: str | os.PathLike, *, actor: str | None = None) -> "Repository":
        """Create a repository with a root commit on ``main`` ("Repository created")."""
        path = local_path(uri)
        if (path / META_DIR / "repo.json").exists():
            raise AlreadyExistsError(f"a trimerge repository exists already at {path}")
        if (path / META_DIR).exists():
            # An init that died before writing repo.json: nothing was ever committed on top of it.
            shutil.rmtree(path / META_DIR)
        path.mkdir(parents=True, exist_ok=True)
        repo = cls(path)
        meta = repo._meta
        root = Commit.build(
            ulid=str(ULID()), parents=(), actor=actor or default_actor(), created_at=_now(),
            message="Repository created", metadata={}, branch=MAIN, generation=1, tables={},
        )
        meta.create(repo._commit_key(root.id), root.to_json())
        for name in (MAIN, SCHEMA_LOCK_BRANCH):
            meta.create(repo.branches._key(name),
                        Branch(name, root.id, str(ULID()), root.created_at, None).to_json())
        (path / META_DIR / "HEAD").write_text(MAIN)
        (path / TABLES_DIR).mkdir(exist_ok=True)
        # Written last: a directory without repo.json is not a repository (an interrupted init).
        if not meta.create("repo.json", {"format": 1, "created_at": format_time(root.created_at), "root": root.id}):
            raise AlreadyExistsError(f"a trimerge repository exists already at {path}")
        return repo

    @classmethod
    def open(cls, uri: str | os.PathLike, *, read_only: bool = False, lock_timeout: float = 30.0) -> "Repository":
        """Open a repository. A read-write open recovers interrupted writes first."""
        path = local_path(uri)
        if not (path / META_DIR / "repo.json").exists():
            raise RepositoryNotFoundError(f"no trimerge repository at {path} (create one with 'trimerge init')")
        repo = cls(path, read_only=read_only, lock_timeout=lock_timeout)
        if not read_only:
            repo.recover()
        return repo

    def __repr__(self) -> str:
        return f"Repository({self.uri!r})"

    # ------------------------------------------------------------------ commits and refs
    @staticmethod
    def _commit_key(commit_id: str) -> str:
        return f"commits/{commit_id[:2]}/{commit_id[2:]}.json"

    def commit(self, commit_id: str) -> Commit:
        """The commit with this full id."""
        c = self._commits.get(commit_id)
        if c is None:
            try:
                c = Commit.from_json(self._meta.read(self._commit_key(commit_id)))
            except FileNotFoundError:
                raise RefNotFoundError(f"no commit {commit_id}") from None
            self._commits[commit_id] = c
        return c

    def _ids_with_prefix(self, prefix: str) -> list[str]:
        prefix = prefix.lower()
        if len(prefix) < 2:
            shards = [k.rsplit("/", 1)[1] for k in self._meta.list("commits")]
            shards = [s for s in shards if s.startswith(prefix)]
        else:
            shards = [prefix[:2]]
        out = []
        for shard in shards:
            for key in self._meta.list(f"commits/{shard}"):
                cid = shard + key.rsplit("/", 1)[1].removesuffix(".json")
                if cid.startswith(prefix):
                    out.append(cid)
        return sorted(out)

    def resolve(self, expr: str | Commit) -> Commit:
        """Resolve a ref expression (commit id or prefix, branch, tag, with ``^``/``~`` steps)."""
        if isinstance(expr, Commit):
            return expr
        if isinstance(expr, Ref):
            expr = expr.expr
        return self.commit(resolve_expr(expr, self._ns, self.graph))

    def ref(self, expr: str) -> "Ref":
        """A ref that carries this repository (for ``merge(repo.ref('a'), repo.ref('b'))``)."""
        return Ref(self, expr)

    def short_id(self, commit_id: str) -> str:
        """Shortest unique prefix of at least 7 characters."""
        return graphalg.shortest_unique_prefix(commit_id, self._ids_with_prefix)

    @property
    def current_branch(self) -> str:
        try:
            name = (self.path / META_DIR / "HEAD").read_text().strip()
        except FileNotFoundError:
            return MAIN
        return name if self.branches.get_or_none(name) else MAIN

    def switch(self, branch: str) -> Branch:
        """Make ``branch`` the current branch (the default of writes and reads)."""
        b = self.branches.get(branch)
        tmp = self.path / META_DIR / f".tmp-HEAD-{ULID()}"
        tmp.write_text(b.name)
        os.replace(tmp, self.path / META_DIR / "HEAD")
        return b

    def _default_ref(self, ref: str | None) -> str:
        return self.current_branch if ref is None else ref

    # ------------------------------------------------------------------ history
    def log(self, ref: str | None = None, first_parent: bool = False, actor: str | None = None,
            limit: int | None = None, since: datetime | None = None, until: datetime | None = None) -> list[Commit]:
        """Ancestors of ``ref`` newest first (generation, then time, then id)."""
        return list(self.iter_log(ref, first_parent=first_parent, actor=actor, limit=limit, since=since, until=until))

    def iter_log(self, ref: str | None = None, first_parent: bool = False, actor: str | None = None,
                 limit: int | None = None, since: datetime | None = None,
                 until: datetime | None = None) -> Iterator[Commit]:
        start = self.resolve(self._default_ref(ref))
        n = 0
        for cid in graphalg.iter_history(self.graph, start.id, first_parent=first_parent):
            if limit is not None and n >= limit:
                return
            c = self.commit(cid)
            if actor is not None and c.actor != actor:
                continue
            if since is not None and c.created_at < since:
                continue
            if until is not None and c.created_at > until:
                continue
            n += 1
            yield c

    def merge_bases(self, a: str, b: str) -> list[Commit]:
        """All best common ancestors (``git merge-base --all``)."""
        return [self.commit(c) for c in graphalg.merge_bases(self.graph, self.resolve(a).id, self.resolve(b).id)]

    def merge_base(self, a: str, b: str) -> Commit | None:
        """One best common ancestor, chosen deterministically; None for unrelated histories."""
        c = graphalg.merge_base(self.graph, self.resolve(a).id, self.resolve(b).id)
        return self.commit(c) if c else None

    def is_ancestor(self, a: str, b: str) -> bool:
        """True if ``a`` is ``b`` or an ancestor of it."""
        return graphalg.is_ancestor(self.graph, self.resolve(a).id, self.resolve(b).id)

    def all_commits(self) -> list[Commit]:
        """Every commit stored (reachable or not), newest first."""
        out = []
        for shard in self._meta.list("commits"):
            for key in self._meta.list(shard):
                cid = shard.rsplit("/", 1)[1] + key.rsplit("/", 1)[1].removesuffix(".json")
                out.append(self.commit(cid))
        return sorted(out, key=lambda c: (c.generation, c.created_at, c.id), reverse=True)

    # ------------------------------------------------------------------ reading
    def _split_address(self, table: str, ref: str | None) -> tuple[str, str | None]:
        if isinstance(table, Address) or "::" in str(table):
            addr = table if isinstance(table, Address) else parse_address(str(table))
            if addr.repository is not None and local_path(addr.repository) != self.path:
                raise InvalidOperationError(f"address {addr} names another repository than {self.uri}")
            if addr.table is None:
                raise InvalidOperationError(f"address {addr} names no table")
            if ref is not None and addr.ref is not None and ref != addr.ref:
                raise InvalidOperationError(f"address {addr} and ref={ref!r} disagree")
            return addr.table, addr.ref or ref
        return table, ref

    def tables(self, ref: str | None = None) -> list[str]:
        """Names of the tables at ``ref`` (default: the current branch)."""
        return sorted(self.resolve(self._default_ref(ref)).tables)

    def table_version(self, table: str, ref: str | None = None) -> TableVersion:
        table, ref = self._split_address(table, ref)
        commit = self.resolve(self._default_ref(ref))
        try:
            return commit.tables[table]
        except KeyError:
            raise TableNotFoundError(
                f"no table {table!r} at {ref or self.current_branch} (tables: {', '.join(sorted(commit.tables)) or 'none'})"
            ) from None

    def dataset_path(self, tv: TableVersion | str) -> str:
        name = tv.dataset if isinstance(tv, TableVersion) else tv
        return str(self.path / TABLES_DIR / name)

    def open_table_version(self, tv: TableVersion) -> lance.LanceDataset:
        """The Lance dataset pinned at a commit's version of a table."""
        try:
            return tbl.open_version(self.dataset_path(tv), tv.lance_branch, tv.version)
        except (OSError, ValueError) as exc:
            if not Path(self.dataset_path(tv)).exists() or "not found" in str(exc).lower():
                raise DataReclaimedError(
                    f"data of {tv.dataset} ({tv.lance_branch} v{tv.version}) is gone: it was reclaimed by cleanup "
                    "after its branch was deleted"
                ) from None
            raise

    def check_readable(self, commit: Commit) -> None:
        """Raise :class:`DataReclaimedError` unless every table of ``commit`` still has its data."""
        for name, tv in commit.tables.items():
            path = Path(self.dataset_path(tv))
            gone = not path.exists() or (tv.lance_branch != "main" and not (path / "tree" / tv.lance_branch).exists())
            if gone:
                raise DataReclaimedError(
                    f"commit {commit.id[:10]}: data of table {name!r} was reclaimed by cleanup after its branch was "
                    "deleted; it can no longer be branched from or tagged")

    def dataset(self, table: str, ref: str | None = None) -> lance.LanceDataset:
        """The table at ``ref`` as a read-only, version-pinned Lance dataset."""
        return self.open_table_version(self.table_version(table, ref))

    def read(self, table: str, ref: str | None = None, *, columns: Sequence[str] | None = None,
             filter: str | pc.Expression | None = None) -> pa.Table:
        """Read a table at any ref (branch, tag, commit id or prefix, expression, or an address)."""
        table, ref = self._split_address(table, ref)
        ds = self.dataset(table, ref)
        try:
            return ds.to_table(columns=list(columns) if columns else None, filter=filter)
        except (OSError, ValueError) as exc:
            if filter is None and columns is None:
                raise
            raise InvalidOperationError(
                f"cannot read {table}: bad filter or columns ({str(exc).splitlines()[0][:200]})") from None

    def schema(self, table: str, ref: str | None = None) -> pa.Schema:
        return self.dataset(table, ref).schema

    def primary_key(self, table: str, ref: str | None = None) -> tuple[str, ...]:
        return self.table_version(table, ref).primary_key

    def _key_filter(self, primary_key: Sequence[str], key: Any) -> pc.Expression:
        if isinstance(key, Mapping):
            values = [key[k] for k in primary_key]
        elif isinstance(key, (tuple, list)):
            values = list(key)
        else:
            values = [key]
        if len(values) != len(primary_key):
            raise PrimaryKeyError(f"key {key!r} does not match the primary key {list(primary_key)}")
        return tbl.key_filter(primary_key, values)

    def entity(self, table: str, key: Any, ref: str | None = None) -> dict[str, Any] | None:
        """One row by primary key at ``ref`` (None if absent). ``key``: value, tuple or dict."""
        tv = self.table_version(table, ref)
        rows = self.open_table_version(tv).to_table(filter=self._key_filter(tv.primary_key, key)).to_pylist()
        return rows[0] if rows else None

    def entity_history(self, table: str, key: Any, ref: str | None = None) -> list[Commit]:
        """Commits (newest first) in which the row with ``key`` changed: inserted, updated or deleted.

        Only commits whose version of the table differs from their first parent's are read."""
        out = []
        cache: dict[tuple, Any] = {}

        def row_at(c: Commit) -> Any:
            tv = c.tables.get(table)
            if tv is None:
                return None
            if tv.location not in cache:
                rows = self.open_table_version(tv).to_table(filter=self._key_filter(tv.primary_key, key)).to_pylist()
                cache[tv.location] = rows[0] if rows else None
            return cache[tv.location]

        for c in self.iter_log(ref):
            parent = self.commit(c.parents[0]) if c.parents else None
            mine = c.tables.get(table)
            theirs = parent.tables.get(table) if parent else None
            if mine is not None and theirs is not None and mine.location == theirs.location:
                continue
            if row_at(c) != (row_at(parent) if parent else None):
                out.append(c)
        return out

    # ------------------------------------------------------------------ writing
    def transaction(self, branch: str | None = None, *, actor: str | None = None, message: str | None = None,
                    metadata: Mapping[str, str] | None = None) -> "Transaction":
        """A multi-table write that becomes visible as one commit, all at once or not at all."""
        self._check_writable()
        return Transaction(self, self._default_ref(branch), actor=actor, message=message, metadata=metadata)

    def _check_writable(self) -> None:
        if self.read_only:
            raise InvalidOperationError("repository was opened read-only")

    def _one(self, branch: str | None, actor: str | None, message: str | None, default_message: str,
             metadata: Mapping[str, str] | None = None) -> "Transaction":
        return self.transaction(branch, actor=actor, message=message or default_message, metadata=metadata)

    def create_table(self, name: str, data: Any, primary_key: str | Sequence[str], *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Create a table from a pyarrow Table or polars DataFrame; one commit."""
        with self._one(branch, actor, message, f"Create table {name}") as tx:
            tx.create_table(name, data, primary_key)
        return tx.commit

    def append(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Insert rows whose keys are new; an existing key is an error."""
        with self._one(branch, actor, message, f"Append to {table}") as tx:
            tx.append(table, data)
        return tx.commit

    def upsert(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Insert new keys, update existing ones (rows with identical values are left alone)."""
        with self._one(branch, actor, message, f"Upsert into {table}") as tx:
            tx.upsert(table, data)
        return tx.commit

    def overwrite(self, table: str, data: Any, *, branch: str | None = None, actor: str | None = None,
                  message: str | None = None) -> Commit:
        """Replace a table's content."""
        with self._one(branch, actor, message, f"Overwrite {table}") as tx:
            tx.overwrite(table, data)
        return tx.commit

    def delete(self, table: str, where: str, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Commit:
        """Delete the rows matching a SQL predicate."""
        with self._one(branch, actor, message, f"Delete from {table} where {where}") as tx:
            tx.delete(table, where)
        return tx.commit

    def delete_keys(self, table: str, keys: Any, *, branch: str | None = None, actor: str | None = None,
                    message: str | None = None) -> Commit:
        """Delete rows by primary key (``keys``: a table with the key columns)."""
        with self._one(branch, actor, message, f"Delete keys from {table}") as tx:
            tx.delete_keys(table, keys)
        return tx.commit

    def drop_table(self, table: str, *, branch: str | None = None, actor: str | None = None,
                   message: str | None = None) -> Commit:
        """Remove a table from the branch (its history stays readable)."""
        with self._one(branch, actor, message, f"Drop table {table}") as tx:
            tx.drop_table(table)
        return tx.commit

    def compact(self, table: str, *, branch: str | None = None, actor: str | None = None,
                message: str | None = None) -> Commit:
        """Compact a table's fragments (same content, fewer files)."""
        with self._one(branch, actor, message, f"Compact {table}") as tx:
            tx.compact(table)
        return tx.commit

    def add_columns(self, table: str, fields: pa.Field | Sequence[pa.Field] | pa.Schema, *,
                    branch: str | None = None, actor: str | None = None, message: str | None = None) -> Commit:
        """Add nullable columns (existing rows get nulls)."""
        names = [f.name for f in ([fields] if isinstance(fields, pa.Field) else fields)]
        with self._one(branch, actor, message, f"Add column(s) {', '.join(names)} to {table}") as tx:
            tx.add_columns(table, fields)
        return tx.commit

    def drop_columns(self, table: str, columns: Sequence[str], *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Drop non-key columns."""
        with self._one(branch, actor, message, f"Drop column(s) {', '.join(columns)} from {table}") as tx:
            tx.drop_columns(table, columns)
        return tx.commit

    def alter_column(self, table: str, column: str, data_type: pa.DataType, *, branch: str | None = None,
                     actor: str | None = None, message: str | None = None) -> Commit:
        """Widen a column's type (e.g. int32 to int64, float32 to float64)."""
        with self._one(branch, actor, message, f"Widen {table}.{column} to {data_type}") as tx:
            tx.alter_column(table, column, data_type)
        return tx.commit

    # ------------------------------------------------------------------ publishing (used by transactions and merge)
    def _lock(self, branch: str, purpose: str) -> FileLock:
        lock = FileLock(self._meta, f"locks/{encode_name(branch)}.lock", purpose)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            if lock.try_acquire():
                return lock
            # A crashed writer's lock: repair its write, then compete again.
            holder = lock.current_owner()
            if holder is None or holder.is_dead(LOCK_LEASE_SECONDS):
                self.recover()
                continue
            if time.monotonic() >= deadline:
                return lock.acquire(0, f"branch {branch!r}")  # raises ConcurrentWriteError
            time.sleep(0.02)

    def _publish(self, branch: Branch, commit: Commit) -> None:
        """Store the commit and move the branch to it. Caller holds the branch lock."""
        current = self.branches.get(branch.name)
        if current.commit_id != commit.parents[0] or current.id != branch.id:
            # Cannot happen while the lock is held; checked so a broken lock never loses a commit.
            raise ConcurrentWriteError(f"branch {branch.name!r} moved during the write; refresh and retry")
        self._meta.create(self._commit_key(commit.id), commit.to_json())
        self._commits[commit.id] = commit
        crashpoint("after_commit_object")
        self._meta.replace(self.branches._key(branch.name), replace(current, commit_id=commit.id).to_json())

    def _new_commit(self, *, parents: Sequence[str], actor: str, message: str, metadata: Mapping[str, str],
                    branch: str, tables: Mapping[str, TableVersion], ulid: str | None = None,
                    created_at: datetime | None = None) -> Commit:
        generation = 1 + max((self.commit(p).generation for p in parents), default=0)
        return Commit.build(
            ulid=ulid or str(ULID()), parents=tuple(parents), actor=actor, created_at=created_at or _now(),
            message=message, metadata={str(k): str(v) for k, v in (metadata or {}).items()}, branch=branch,
            generation=generation, tables=dict(tables),
        )

    def _prepare_head(self, tv: TableVersion) -> lance.LanceDataset:
        """Latest of an owned Lance branch, rolled back to the committed version if a failed write left
        other content there (self-healing: works even when the write's sidecar was lost)."""
        path = self.dataset_path(tv)
        latest = tbl.open_version(path, tv.lance_branch, None)
        if latest.version == tv.version:
            return latest
        committed = tbl.open_version(path, tv.lance_branch, tv.version)
        if tbl.fragment_signature(latest) != tbl.fragment_signature(committed):
            committed.restore()
            latest = tbl.open_version(path, tv.lance_branch, None)
        return latest

    # ------------------------------------------------------------------ recovery
    def recover(self) -> RecoveryReport:
        """Repair writes interrupted by a crash: complete them under their commit id or roll them back.

        Each repair is recorded as a commit by actor ``trimerge:recovery``. Damaged sidecars are
        quarantined, never fatal."""
        report = RecoveryReport()
        for key in self._meta.list("intents"):
            try:
                intent = self._meta.read(key)
                branch_name = intent["branch"]
                lock_key = f"locks/{encode_name(branch_name)}.lock"
                token = intent["lock_token"]
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError):
                self._quarantine(key)
                report.quarantined.append(key)
                continue
            holder = FileLock(self._meta, lock_key, "recovery").current_owner()
            if holder is not None and holder.token == token and not holder.is_dead(LOCK_LEASE_SECONDS):
                continue  # a live writer
            if holder is not None and holder.token != token:
                if not holder.is_dead(LOCK_LEASE_SECONDS):
                    # The intent's writer lost its lock long ago; another live writer owns the branch.
                    continue
            if not break_lock_if_dead(self._meta, lock_key, LOCK_LEASE_SECONDS):
                continue
            lock = FileLock(self._meta, lock_key, "recovery")
            if not lock.try_acquire():
                continue
            try:
                if not self._meta.exists(key):
                    continue
                try:
                    outcome = self._recover_intent(intent)
                except Exception:  # a record we cannot act on must never brick the repository
                    self._quarantine(key)
                    report.quarantined.append(key)
                    continue
                (report.completed if outcome == "completed" else report.rolled_back).append(intent["ulid"])
                self._meta.delete(key)
            finally:
                lock.release()
        # Locks whose owner died before writing an intent.
        for key in self._meta.list("locks"):
            if key.endswith(".lock"):
                break_lock_if_dead(self._meta, key, LOCK_LEASE_SECONDS)
        self.last_recovery = report
        return report

    def _quarantine(self, key: str) -> None:
        target = self._meta.path("quarantine") / (key.rsplit("/", 1)[1] + f".{ULID()}")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self._meta.path(key), target)
        except FileNotFoundError:
            pass

    def _recover_intent(self, intent: Mapping[str, Any]) -> str:
        branch = self.branches.get(intent["branch"])
        touched = intent.get("touched", [])
        planned = intent.get("commit")
        if branch.commit_id == (planned or {}).get("id"):
            return "completed"  # published; only the sidecar removal was missing
        if planned and branch.commit_id == planned["parents"][0]:
            commit = Commit.from_json(planned)
            ok = True
            for t in commit.tables.values():
                for item in touched:
                    if (item["dataset"], item["lance_branch"]) == (t.dataset, t.lance_branch):
                        latest = tbl.open_version(self.dataset_path(t), t.lance_branch, None)
                        ok = ok and latest.version == t.version
            if ok:
                self._publish(branch, commit)
                note = self._new_commit(
                    parents=[commit.id], actor=RECOVERY_ACTOR, branch=branch.name, tables=commit.tables,
                    message=f"Recovery: completed interrupted commit {commit.id[:10]} ({commit.message})",
                    metadata={"recovery.action": "completed", "recovery.ulid": commit.ulid,
                              "recovery.commit": commit.id},
                )
                self._publish(self.branches.get(branch.name), note)
                return "completed"
        # Roll back: every Lance branch back to what the branch tip says.
        tip = self.commit(branch.commit_id)
        undone = self._undo_writes(touched, tip)
        note = self._new_commit(
            parents=[tip.id], actor=RECOVERY_ACTOR, branch=branch.name, tables=tip.tables,
            message=(f"Recovery: rolled back interrupted write {intent['ulid']} by {intent.get('actor', '?')}"
                     f" ({intent.get('message', '')})" + (": " + "; ".join(undone) if undone else "")),
            metadata={"recovery.action": "rolled_back", "recovery.ulid": intent["ulid"]},
        )
        self._publish(branch, note)
        return "rolled_back"

    def _undo_writes(self, touched: Iterable[Mapping[str, Any]], tip: Commit) -> list[str]:
        """Make every Lance branch a failed write touched agree with ``tip`` again; drop what it created."""
        at_tip = {(tv.dataset, tv.lance_branch): tv for tv in tip.tables.values()}
        undone = []
        for item in touched:
            key = (item["dataset"], item["lance_branch"])
            ds_path = Path(self.dataset_path(item["dataset"]))
            if key in at_tip:
                if ds_path.exists():
                    self._prepare_head(at_tip[key])
                undone.append(f"restored {key[0]}@{key[1]} v{at_tip[key].version}")
            elif item.get("created_dataset"):
                shutil.rmtree(ds_path, ignore_errors=True)
                undone.append(f"removed new dataset {key[0]}")
            elif item.get("created_fork"):
                try:
                    lance.dataset(str(ds_path)).branches.delete(key[1])
                except Exception:  # reclaimed later by cleanup
                    pass
                undone.append(f"dropped fork {key[1]} of {key[0]}")
        return undone

    # ------------------------------------------------------------------ maintenance
    def _reachable_commits(self) -> set[str]:
        starts = [b.commit_id for b in self.branches.list(include_internal=True)]
        starts += [t.commit_id for t in self.tags.list()]
        return set(graphalg.iter_history(self.graph, starts)) if starts else set()

    def _referenced_locations(self, commit_ids: Iterable[str]) -> set[tuple[str, str]]:
        refs: set[tuple[str, str]] = set()
        for cid in commit_ids:
            for tv in self.commit(cid).tables.values():
                refs.add((tv.dataset, tv.lance_branch))
        for key in self._meta.list("intents"):
            try:
                for item in self._meta.read(key).get("touched", []):
                    refs.add((item["dataset"], item["lance_branch"]))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass
        return refs

    def _reclaim_forks(self, wanted: set[tuple[str, str]], only_datasets: set[str] | None,
                       report: CleanupReport) -> None:
        """Delete Lance forks no reachable commit uses (children before parents)."""
        root = self.path / TABLES_DIR
        for ds_dir in sorted(root.iterdir()) if root.exists() else []:
            name = ds_dir.name
            if only_datasets is not None and name not in only_datasets:
                continue
            if not any(d == name for d, _ in wanted):
                continue
            ds = lance.dataset(str(ds_dir))
            progress = True
            while progress:
                progress = False
                for fork in sorted(ds.branches.list()):
                    if (name, fork) in wanted:
                        continue
                    size = _dir_size(ds_dir / "tree" / fork)
                    try:
                        ds.branches.delete(fork)
                    except Exception:
                        continue  # still has children or tags; retried next round
                    report.forks_removed.append(f"{name}:{fork}")
                    report.bytes_freed += size
                    progress = True
            leftover = [f for f in ds.branches.list() if (name, f) not in wanted]
            report.pending.extend(f"{name}:{f}" for f in leftover)

    def cleanup(self) -> CleanupReport:
        """Reclaim what no branch, tag or reachable commit needs: forks of deleted branches, datasets of
        failed or unreachable writes, orphaned pins and temporary files. Every reachable commit stays readable."""
        self._check_writable()
        self.recover()
        report = CleanupReport()
        wanted = self._referenced_locations(self._reachable_commits())
        wanted_datasets = {d for d, _ in wanted}
        root = self.path / TABLES_DIR
        for ds_dir in sorted(root.iterdir()) if root.exists() else []:
            if ds_dir.name not in wanted_datasets:
                report.bytes_freed += _dir_size(ds_dir)
                shutil.rmtree(ds_dir, ignore_errors=True)
                report.datasets_removed.append(ds_dir.name)
        self._reclaim_forks(wanted, None, report)
        for t in self.tags.list():
            try:
                self.tags._pin(t)  # a tag whose creator died before pinning
            except Exception:  # its data is gone or unreadable: nothing to pin
                pass
        tag_names = {t.name for t in self.tags.list()}
        for ds_dir in sorted(root.iterdir()) if root.exists() else []:
            ds = lance.dataset(str(ds_dir))
            for lance_tag in list(ds.tags.list()):
                if lance_tag.startswith("t-") and lance_tag[2:] not in tag_names:
                    ds.tags.delete(lance_tag)
                    report.lance_tags_removed.append(f"{ds_dir.name}:{lance_tag}")
        for p in self._meta.stale_temp_files():
            p.unlink(missing_ok=True)
            report.temp_files_removed += 1
        still_pending = {p.split(":", 1)[1] for p in report.pending}
        for key in self._meta.list("reclaim"):
            try:
                forks = self._meta.read(key).get("forks", [])
            except (ValueError, OSError):
                forks = []
            if not any(f.split(":", 1)[-1] in still_pending for f in forks):
                self._meta.delete(key)
        return report


@dataclass(frozen=True)
class Ref:
    """A ref expression bound to its repository."""

    repo: Repository
    expr: str

    def resolve(self) -> Commit:
        return self.repo.resolve(self.expr)

    def __str__(self) -> str:
        return self.expr


class BranchManager:
    """``repo.branches``: create, list, get and delete graph branches."""

    def __init__(self, repo: Repository):
        self.repo = repo

    @staticmethod
    def _key(name: str) -> str:
        return f"refs/branches/{encode_name(name)}.json"

    def get_or_none(self, name: str) -> Branch | None:
        doc = self.repo._meta.read_or_none(self._key(name))
        return Branch.from_json(doc) if doc else None

    def get(self, name: str) -> Branch:
        b = self.get_or_none(name) if isinstance(name, str) else None
        if b is None or is_internal_branch(str(name)):
            raise BranchNotFoundError(f"no branch {name!r}")
        return b

    def exists(self, name: str) -> bool:
        return self.get_or_none(name) is not None and not is_internal_branch(name)

    def __contains__(self, name: str) -> bool:
        return self.exists(name)

    def list(self, include_internal: bool = False) -> list[Branch]:
        out = []
        for key in self.repo._meta.list("refs/branches"):
            name = decode_name(key.rsplit("/", 1)[1].removesuffix(".json"))
            if not include_internal and is_internal_branch(name):
                continue
            b = self.get_or_none(name)
            if b:
                out.append(b)
        return sorted(out, key=lambda b: (b.name != MAIN, b.name))

    def names(self) -> list[str]:
        return [b.name for b in self.list()]

    def create(self, name: str, from_ref: str | None = None) -> Branch:
        """Create a branch at ``from_ref`` (default: the current branch). Atomic; fails if it exists."""
        self.repo._check_writable()
        validate_branch_name(name)
        pending = self.repo._meta.read_or_none(f"reclaim/{encode_name(name)}.json")
        if pending:
            raise AlreadyExistsError(
                f"branch name {name!r} was deleted but its storage is not reclaimed yet; run 'trimerge cleanup' first"
            )
        source = self.repo._default_ref(from_ref)
        commit = self.repo.resolve(source)
        self.repo.check_readable(commit)
        parent = source if self.exists(source) else None
        branch = Branch(name, commit.id, str(ULID()), _now(), parent)
        if not self.repo._meta.create(self._key(name), branch.to_json()):
            raise AlreadyExistsError(f"branch {name!r} exists already")
        return branch

    def delete(self, name: str) -> list[str]:
        """Delete a branch. Refuses the current branch, ``main`` and branches others were created from.

        Its Lance forks are reclaimed best-effort (those no other ref reaches); what is left is
        reclaimed by :meth:`Repository.cleanup`. Returns the forks still pending."""
        repo = self.repo
        repo._check_writable()
        branch = self.get(name)
        if name == MAIN:
            raise InvalidOperationError("cannot delete 'main'")
        if name == repo.current_branch:
            raise InvalidOperationError(f"cannot delete {name!r}: it is the current branch (switch first)")
        children = [b.name for b in self.list() if b.parent == name]
        if children:
            raise InvalidOperationError(
                f"cannot delete {name!r}: branches were created from it: {', '.join(sorted(children))}"
            )
        lock = repo._lock(name, f"delete branch {name}")
        try:
            owned = {(tv.dataset, tv.lance_branch) for c in [repo.commit(branch.commit_id)]
                     for tv in c.tables.values() if tv.owner == branch.id}
            repo._meta.delete(self._key(name))
        finally:
            lock.release()
        if not owned:
            return []
        report = CleanupReport()
        try:
            wanted = repo._referenced_locations(repo._reachable_commits())
            repo._reclaim_forks(wanted, {d for d, _ in owned}, report)
        except Exception:  # best effort: cleanup finishes the job
            report.pending.extend(f"{d}:{f}" for d, f in owned)
        pending = [p for p in report.pending if tuple(p.split(":", 1)) in owned]
        if pending:
            repo._meta.replace(f"reclaim/{encode_name(name)}.json", {"branch": name, "forks": pending})
        return pending


class TagManager:
    """``repo.tags``: immutable named commits; tagging pins the tagged table versions."""

    def __init__(self, repo: Repository):
        self.repo = repo

    @staticmethod
    def _key(name: str) -> str:
        return f"refs/tags/{name}.json"

    def get_or_none(self, name: str) -> Tag | None:
        doc = self.repo._meta.read_or_none(self._key(name)) if isinstance(name, str) and "/" not in name else None
        return Tag.from_json(doc) if doc else None

    def get(self, name: str) -> Tag:
        t = self.get_or_none(name)
        if t is None:
            raise TagNotFoundError(f"no tag {name!r}")
        return t

    def list(self) -> list[Tag]:
        out = []
        for key in self.repo._meta.list("refs/tags"):
            t = self.get_or_none(key.rsplit("/", 1)[1].removesuffix(".json"))
            if t:
                out.append(t)
        return sorted(out, key=lambda t: t.name)

    def create(self, name: str, ref: str | None = None, *, message: str = "", actor: str | None = None) -> Tag:
        """Tag the commit ``ref`` resolves to (default: the current branch)."""
        repo = self.repo
        repo._check_writable()
        validate_tag_name(name)
        if self.get_or_none(name):
            raise AlreadyExistsError(f"tag {name!r} exists already")
        commit = repo.resolve(repo._default_ref(ref))
        repo.check_readable(commit)
        tag = Tag(name, commit.id, _now(), actor or default_actor(), message)
        # Claim the name atomically first, so racing creators cannot touch each other's pins.
        if not repo._meta.create(self._key(name), tag.to_json()):
            raise AlreadyExistsError(f"tag {name!r} exists already")
        try:
            self._pin(tag)
        except BaseException:
            repo._meta.delete(self._key(name))
            raise
        return tag

    def _pin(self, tag: Tag) -> None:
        """Lance tags ``t-<name>`` on every tagged table version (an orphan of a crash is re-pointed)."""
        for tv in self.repo.commit(tag.commit_id).tables.values():
            ds = lance.dataset(self.repo.dataset_path(tv))
            pin = f"t-{tag.name}"
            existing = ds.tags.list().get(pin)
            if existing is None:
                ds.tags.create(pin, (tv.lance_branch, tv.version))
            elif (existing.get("branch") or "main", existing.get("version")) != (tv.lance_branch, tv.version):
                ds.tags.update(pin, (tv.lance_branch, tv.version))

    def delete(self, name: str) -> None:
        repo = self.repo
        repo._check_writable()
        tag = self.get(name)
        repo._meta.delete(self._key(name))
        for tv in repo.commit(tag.commit_id).tables.values():
            try:
                lance.dataset(repo.dataset_path(tv)).tags.delete(f"t-{name}")
            except Exception:  # an orphan pin is removed by cleanup
                pass


class Transaction:
    """A write to one branch that publishes exactly one commit on success.

    The branch is locked from ``__enter__`` until the commit is published or rolled back, so
    concurrent writers queue up (each on top of the previous one) or get a retryable
    :class:`ConcurrentWriteError` after ``lock_timeout`` seconds."""

    def __init__(self, repo: Repository, branch: str, *, actor: str | None, message: str | None,
                 metadata: Mapping[str, str] | None):
        self.repo = repo
        self.branch_name = branch
        self.actor = actor or default_actor()
        self.message = message
        self.metadata = dict(metadata or {})
        self.ulid = str(ULID())
        self.commit: Commit | None = None
        self._lock: FileLock | None = None
        self._schema_lock: FileLock | None = None
        self._branch: Branch | None = None
        self._base: Commit | None = None
        self._tables: dict[str, TableVersion] = {}
        self._touched: dict[tuple[str, str], dict[str, Any]] = {}
        self._ops: list[str] = []
        self._extra_parents: list[str] = []

    # -- lifecycle
    def __enter__(self) -> "Transaction":
        self.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.publish()
        else:
            self.abort()

    def begin(self) -> None:
        repo = self.repo
        if repo.tags.get_or_none(self.branch_name) and not repo.branches.exists(self.branch_name):
            raise ReadOnlyRefError(f"{self.branch_name!r} is a tag; writes go to branches")
        if not repo.branches.exists(self.branch_name):
            try:
                repo.resolve(self.branch_name)
            except TrimergeError:
                raise BranchNotFoundError(f"no branch {self.branch_name!r}") from None
            raise ReadOnlyRefError(f"{self.branch_name!r} is not a branch; writes go to branches")
        self._lock = repo._lock(self.branch_name, f"transaction {self.ulid}")
        try:
            self._branch = repo.branches.get(self.branch_name)
            self._base = repo.commit(self._branch.commit_id)
            self._tables = dict(self._base.tables)
            self._save_intent()
        except BaseException:
            self._lock.release()
            raise

    def _save_intent(self, commit: Commit | None = None) -> None:
        doc = {
            "ulid": self.ulid, "branch": self.branch_name, "lock_token": self._lock.owner.token,
            "base": self._base.id, "actor": self.actor, "message": self.message or "",
            "touched": list(self._touched.values()),
        }
        if commit is not None:
            doc["commit"] = commit.to_json()
        self.repo._meta.replace(f"intents/{self.ulid}.json", doc)

    def _require_open(self) -> None:
        if self._lock is None or not self._lock.held:
            raise InvalidOperationError("the transaction is not active (use it inside a 'with' block)")

    # -- state
    @property
    def base(self) -> Commit:
        """The branch tip this transaction writes on top of."""
        self._require_open()
        return self._base

    @property
    def has_changes(self) -> bool:
        return bool(self._ops)

    def tables(self) -> list[str]:
        """Tables as this transaction sees them so far."""
        return sorted(self._tables)

    def read(self, table: str, **kwargs: Any) -> pa.Table:
        """Read a table including this transaction's own writes."""
        tv = self._table(table)
        return tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).to_table(**kwargs)

    def schema(self, name: str) -> pa.Schema:
        """A table's schema as this transaction sees it."""
        tv = self._table(name)
        return tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema

    def _table(self, name: str) -> TableVersion:
        try:
            return self._tables[name]
        except KeyError:
            raise TableNotFoundError(f"no table {name!r} on branch {self.branch_name!r}") from None

    def _touch(self, key: tuple[str, str], **info: Any) -> None:
        if key not in self._touched:
            self._touched[key] = {"dataset": key[0], "lance_branch": key[1], **info}
            self._save_intent()  # before any physical effect on that Lance branch

    def _writable(self, name: str) -> lance.LanceDataset:
        """The latest of this branch's own Lance branch of ``name``, forking it on first write."""
        repo = self.repo
        tv = self._table(name)
        if tv.owner != self._branch.id:
            fork = f"f-{str(ULID()).lower()}"
            self._touch((tv.dataset, fork), created_fork=True, expected_version=None)
            crashpoint("before_fork")
            lance.dataset(repo.dataset_path(tv)).create_branch(fork, (tv.lance_branch, tv.version))
            tv = TableVersion(tv.dataset, fork, tv.version, self._branch.id, tv.primary_key)
            self._tables[name] = tv
            return tbl.open_version(repo.dataset_path(tv), fork, None)
        self._touch((tv.dataset, tv.lance_branch), expected_version=tv.version)
        return repo._prepare_head(tv)

    def _written(self, name: str, ds_version: int) -> None:
        tv = self._tables[name]
        self._tables[name] = replace(tv, version=ds_version)
        crashpoint(f"after_write_{len(self._ops)}")

    def _latest_version(self, name: str) -> int:
        tv = self._tables[name]
        return tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, None).version

    # -- operations
    def create_table(self, name: str, data: Any, primary_key: str | Sequence[str]) -> None:
        """Create a table (a new Lance dataset with stable row ids and the key declared in its schema)."""
        self._require_open()
        validate_table_name(name)
        if name in self._tables:
            raise AlreadyExistsError(f"table {name!r} exists already on branch {self.branch_name!r}")
        pk = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
        table = tbl.to_arrow(data)
        schema = tbl.schema_with_primary_key(table.schema, pk)
        tbl.check_primary_key(table, pk, f"create table {name}")
        table = table.cast(schema)
        dataset = f"{name}-{str(ULID()).lower()}"
        self._touch((dataset, "main"), created_dataset=True)
        ds = lance.write_dataset(table, self.repo.dataset_path(dataset), schema=schema,
                                 enable_stable_row_ids=True, mode="create")
        self._tables[name] = TableVersion(dataset, "main", ds.version, self._branch.id, pk)
        self._ops.append(f"create {name}")
        self._written(name, ds.version)

    def _incoming(self, name: str, data: Any, what: str) -> tuple[lance.LanceDataset, pa.Table, tuple[str, ...]]:
        tv = self._table(name)
        table = tbl.to_arrow(data)
        current_schema = tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema
        tbl.check_primary_key(table, tv.primary_key, f"{what} {name}")
        table = tbl.conform(table, current_schema, f"{what} {name}")
        return self._writable(name), table, tv.primary_key

    def append(self, name: str, data: Any) -> None:
        """Insert rows; keys that exist already are an error."""
        self._require_open()
        ds, table, pk = self._incoming(name, data, "append to")
        if table.num_rows:
            try:
                ds.merge_insert(list(pk)).when_matched_fail().when_not_matched_insert_all().execute(table)
            except (OSError, ValueError, RuntimeError) as exc:
                if "match" in str(exc).lower() or "fail" in str(exc).lower():
                    raise PrimaryKeyError(f"append to {name}: some primary keys exist already; use upsert") from None
                raise
        self._ops.append(f"append {name}")
        self._written(name, self._latest_version(name))

    def upsert(self, name: str, data: Any) -> None:
        """Insert new keys and update existing rows whose values differ."""
        self._require_open()
        ds, table, pk = self._incoming(name, data, "upsert into")
        if table.num_rows:
            values = [c for c in table.column_names if c not in pk]
            builder = ds.merge_insert(list(pk))
            if values:
                changed = " OR ".join(f"(source.`{c}` IS DISTINCT FROM target.`{c}`)" for c in values)
                builder = builder.when_matched_update_all(changed)
            builder.when_not_matched_insert_all().execute(table)
        self._ops.append(f"upsert {name}")
        self._written(name, self._latest_version(name))

    def overwrite(self, name: str, data: Any) -> None:
        """Replace a table's rows (the schema may change; the primary key stays)."""
        self._require_open()
        tv = self._table(name)
        table = tbl.to_arrow(data)
        schema = tbl.schema_with_primary_key(tbl.strip_field_metadata(table.schema), tv.primary_key)
        tbl.check_primary_key(table, tv.primary_key, f"overwrite {name}")
        ds = self._writable(name)
        out = lance.write_dataset(table.cast(schema), ds, schema=schema, mode="overwrite")
        self._ops.append(f"overwrite {name}")
        self._written(name, out.version if out is not None else self._latest_version(name))

    def delete(self, name: str, where: str) -> None:
        """Delete the rows matching the SQL predicate ``where``."""
        self._require_open()
        if not isinstance(where, str) or not where.strip():
            raise InvalidOperationError("delete needs a non-empty 'where' predicate (use 'true' to delete all rows)")
        ds = self._writable(name)
        try:
            ds.delete(where)
        except (OSError, ValueError) as exc:
            raise InvalidOperationError(f"delete from {name}: bad predicate {where!r}: {str(exc).splitlines()[0]}") from None
        self._ops.append(f"delete {name}")
        self._written(name, self._latest_version(name))

    def delete_keys(self, name: str, keys: Any) -> None:
        """Delete the rows whose primary key appears in ``keys`` (a table of the key columns)."""
        self._require_open()
        tv = self._table(name)
        table = tbl.to_arrow(keys)
        schema = tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema
        pk = list(tv.primary_key)
        missing = [k for k in pk if k not in table.column_names]
        if missing:
            raise PrimaryKeyError(f"delete keys from {name}: key column(s) {missing} missing")
        table = tbl.conform(table.select(pk), pa.schema([schema.field(k) for k in pk]), f"delete keys from {name}")
        ds = self._writable(name)
        if table.num_rows:
            ds.merge_insert(pk).when_matched_delete().execute(table)
        self._ops.append(f"delete {name}")
        self._written(name, self._latest_version(name))

    def replace_rows(self, name: str, row_ids: Sequence[int], expected_keys: pa.Table, rows: Any) -> bool:
        """Remove the rows with these stable row ids and add ``rows`` — a write proportional to the
        change, with no key join against the table. The ids are first checked to still hold
        ``expected_keys`` (same order); if not, nothing is written and False is returned, so the
        caller can fall back to key-based writes."""
        self._require_open()
        tv = self._table(name)
        pk = list(tv.primary_key)
        ds = self._writable(name)
        ids = pa.array(row_ids, pa.uint64())
        if len(ids):
            found = ds._take_rows(ids, columns=pk)
            if found.num_rows != len(ids) or found.to_pylist() != expected_keys.select(pk).to_pylist():
                return False
            before = ds.count_rows()
            for start in range(0, len(ids), 50_000):
                chunk = ids.slice(start, 50_000)
                ds.delete("_rowid IN (" + ",".join(str(i) for i in chunk.to_pylist()) + ")")
                ds = tbl.open_version(self.repo.dataset_path(self._tables[name]), self._tables[name].lance_branch, None)
            if before - ds.count_rows() != len(ids):
                raise InvalidOperationError(f"replace rows in {name}: row ids matched more or fewer rows than expected")
        table = tbl.to_arrow(rows)
        if table.num_rows:
            table = tbl.conform(table, ds.schema, f"replace rows in {name}")
            tbl.check_primary_key(table, pk, f"replace rows in {name}")
            ds.insert(table)
        self._ops.append(f"replace rows {name}")
        self._written(name, self._latest_version(name))
        return True

    def drop_table(self, name: str) -> None:
        """Remove the table from the branch."""
        self._require_open()
        self._table(name)
        del self._tables[name]
        self._ops.append(f"drop {name}")

    def _schema_change(self) -> None:
        if self._schema_lock is None:
            lock = FileLock(self.repo._meta, f"locks/{SCHEMA_LOCK_BRANCH}.lock", f"schema change {self.ulid}")
            deadline = time.monotonic() + self.repo.lock_timeout
            while not lock.try_acquire():
                break_lock_if_dead(self.repo._meta, lock.key, LOCK_LEASE_SECONDS)
                if time.monotonic() > deadline:
                    raise ConcurrentWriteError("another schema change is being applied; refresh and retry")
                time.sleep(0.02)
            self._schema_lock = lock

    def add_columns(self, name: str, fields: pa.Field | Sequence[pa.Field] | pa.Schema) -> None:
        """Add nullable columns, filled with nulls."""
        self._require_open()
        fields = [fields] if isinstance(fields, pa.Field) else list(fields)
        tv = self._table(name)
        schema = tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema
        for f in fields:
            if f.name in schema.names:
                raise SchemaMismatchError(f"table {name!r} has a column {f.name!r} already")
            if not f.nullable:
                raise SchemaMismatchError(f"new column {f.name!r} must be nullable (existing rows get nulls)")
        self._schema_change()
        ds = self._writable(name)
        ds.add_columns([f.with_type(tbl._plain_type(f.type)) for f in fields])
        self._ops.append(f"add columns {name}")
        self._written(name, self._latest_version(name))

    def drop_columns(self, name: str, columns: Sequence[str]) -> None:
        """Drop columns that are not part of the primary key."""
        self._require_open()
        tv = self._table(name)
        schema = tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema
        columns = [columns] if isinstance(columns, str) else list(columns)
        for c in columns:
            if c not in schema.names:
                raise SchemaMismatchError(f"table {name!r} has no column {c!r}")
            if c in tv.primary_key:
                raise PrimaryKeyError(f"cannot drop primary key column {c!r}")
        self._schema_change()
        self._writable(name).drop_columns(columns)
        self._ops.append(f"drop columns {name}")
        self._written(name, self._latest_version(name))

    def alter_column(self, name: str, column: str, data_type: pa.DataType) -> None:
        """Widen a column's type; narrowing or unrelated changes are refused."""
        self._require_open()
        tv = self._table(name)
        schema = tbl.open_version(self.repo.dataset_path(tv), tv.lance_branch, tv.version).schema
        if column not in schema.names:
            raise SchemaMismatchError(f"table {name!r} has no column {column!r}")
        old = schema.field(column).type
        if old == data_type:
            return
        if not tbl.is_widening(old, data_type):
            raise SchemaMismatchError(f"cannot change {name}.{column} from {old} to {data_type}: only widening is allowed")
        self._schema_change()
        self._writable(name).alter_columns({"path": column, "data_type": data_type})
        self._ops.append(f"alter {name}.{column}")
        self._written(name, self._latest_version(name))

    def compact(self, name: str, target_rows_per_fragment: int = 1024 * 1024) -> None:
        """Rewrite small fragments into larger ones (content unchanged; a commit all the same)."""
        self._require_open()
        ds = self._writable(name)
        ds.optimize.compact_files(target_rows_per_fragment=target_rows_per_fragment)
        self._ops.append(f"compact {name}")
        self._written(name, self._latest_version(name))

    def set_table(self, name: str, tv: TableVersion) -> None:
        """Point ``name`` at an existing table version without writing (used by merges)."""
        self._require_open()
        validate_table_name(name)
        self._tables[name] = tv
        self._ops.append(f"set {name}")

    def add_parent(self, commit_id: str) -> None:
        """Make the published commit a merge commit with this extra parent."""
        self._extra_parents.append(commit_id)
        self._ops.append(f"parent {commit_id[:10]}")

    # -- end
    def publish(self) -> Commit | None:
        """Publish the commit (nothing to publish: no commit). Called on a clean ``with`` exit."""
        self._require_open()
        repo = self.repo
        try:
            if not self._ops:
                self.abort()
                return None
            commit = repo._new_commit(
                parents=[self._base.id, *self._extra_parents], actor=self.actor,
                message=self.message or "; ".join(self._ops), metadata=self.metadata,
                branch=self.branch_name, tables=self._tables, ulid=self.ulid,
            )
            self._save_intent(commit)
            crashpoint("before_publish")
            repo._publish(self._branch, commit)
            crashpoint("after_publish")
            repo._meta.delete(f"intents/{self.ulid}.json")
            self.commit = commit
            return commit
        except BaseException:
            if self.commit is None:
                self.abort()
            raise
        finally:
            self._release()

    def abort(self) -> None:
        """Undo every physical write of this transaction and release the branch."""
        if self._lock is None or not self._lock.held:
            return
        repo = self.repo
        try:
            repo._undo_writes(self._touched.values(), self._base)
            repo._meta.delete(f"intents/{self.ulid}.json")
        finally:
            self._release()

    def _release(self) -> None:
        for lock in (self._lock, self._schema_lock):
            if lock is not None:
                lock.release()
