"""The repository: tables as Lance datasets plus one commit graph for all of them.

Layout of a repository (a local directory or a prefix in a bucket)::

    _trimerge/repo.json                       format marker and where the repository was created
    _trimerge/HEAD                            the current branch (for the CLI)
    _trimerge/commits/<id[:2]>/<id[2:]>.json  immutable commits (content-addressed)
    _trimerge/refs/branches/<name>.json       branch tips (name with '/' as %2F)
    _trimerge/refs/tags/<name>.json           tags
    _trimerge/locks/<name>.lock               one lease per branch; __schema_apply_lock__ for schema changes
    _trimerge/intents/<ulid>.json             what an in-flight write intends (for recovery)
    _trimerge/quarantine/                     unparsable intents, kept for inspection
    _trimerge/deleted/<ulid>.json             deleted branches and tags, kept by gc for the retention period
    _trimerge/gc/reclaimed.json               commits gc condemned (being reclaimed, or reclaimed)
    tables/<table>-<ulid>/                    one Lance dataset per table lineage, stable row ids

This class is a facade: storage lives in :mod:`~trimerge.lineage.storage.backends` and
:mod:`~trimerge.lineage.storage.documents`, commits in :mod:`~trimerge.lineage.history.commits`, refs and
publishing in :mod:`~trimerge.lineage.history.refs`, Lance data in :mod:`~trimerge.lineage.tables.tablestore`,
writes in :mod:`~trimerge.lineage.transaction` (one-commit shortcuts in
:mod:`~trimerge.lineage.shortcuts`), repairs in :mod:`~trimerge.lineage.safety.recovery` and
garbage collection in :mod:`~trimerge.lineage.safety.gc` (integrity checks in :mod:`~trimerge.lineage.safety.fsck`).
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.storage.lazyimport import lazy_module

if TYPE_CHECKING:
    import lance
    import pyarrow as pa
    import pyarrow.compute as pc

    from trimerge.lineage.tables import indices as indices_module
    from trimerge.lineage import transaction as transaction_module
    from trimerge.lineage.transaction import Transaction
    from trimerge.lineage.gates import checks as checks_module
    from trimerge.lineage.history import reflog as reflog_module
    from trimerge.lineage import restore as restore_module
    from trimerge.lineage.safety import fsck as fsck_module, gc as gc_module
else:  # what annotations name, and the managers a command may not use, imported on first use
    # (typing.get_type_hints resolves them then): startup stays light
    lance, pa, pc = lazy_module("lance"), lazy_module("pyarrow"), lazy_module("pyarrow.compute")
    indices_module, transaction_module = lazy_module("trimerge.lineage.tables.indices"), lazy_module("trimerge.lineage.transaction")
    checks_module, reflog_module = lazy_module("trimerge.lineage.gates.checks"), lazy_module("trimerge.lineage.history.reflog")
    restore_module = lazy_module("trimerge.lineage.restore")
    fsck_module, gc_module = lazy_module("trimerge.lineage.safety.fsck"), lazy_module("trimerge.lineage.safety.gc")

from trimerge.lineage.tables import entities
from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.history.address import Address, parse_address
from trimerge.lineage.history.branches import BranchManager, TagManager
from trimerge.lineage.commit import Commit, TableVersion, format_time
from trimerge.lineage.history.commits import CommitStore
from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.errors import (
    AlreadyExistsError,
    CorruptRepositoryError,
    DataReclaimedError,
    InvalidOperationError,
    RepositoryNotFoundError,
    TableNotFoundError,
)
from trimerge.lineage.storage.lease import Lease
from trimerge.lineage.storage.location import META_DIR, Location
from trimerge.lineage.storage.marker import REPO_DOC, read_marker, refuse_to_init
from trimerge.lineage.storage.settings import Settings
from trimerge.lineage.shortcuts import TableWrites
from trimerge.lineage.history.retention import DeletionLog, ReclaimedCommits
from trimerge.lineage.tables.maintenance import MAINTENANCE
from trimerge.lineage.history.names import HEAD, MAIN, SCHEMA_LOCK_BRANCH, is_addressable, is_internal_branch
from trimerge.lineage.safety.recovery import Recovery, RecoveryReport
from trimerge.lineage.history import reftime
from trimerge.lineage.history.refexpr import resolve as resolve_expr, resolve_base
from trimerge.lineage.history.refs import Branch, RefStore, Tag, encode_name, now
from trimerge.lineage.tables import relocation
from trimerge.lineage.tables.tablestore import TableStore
# clone, fetch, pull, push and ``repo.remotes``: registered by trimerge.remotes when ``trimerge`` is imported.
from trimerge.lineage.extensions import REMOTE_OPERATIONS, REPOSITORY_EXTENSIONS, register_remote_operations  # noqa: F401
from trimerge.lineage.extensions import HooksFacade, ref_changed  # repo.hooks, repo.changes: trimerge.hooks


#: How long gc keeps the commits of a deleted branch or tag (git keeps unreachable objects 2 weeks).
DEFAULT_RETENTION = timedelta(days=7)

__all__ = ["Branch", "CleanupReport", "FsckReport", "GcReport", "Ref", "Repository", "RecoveryReport", "Tag", "Transaction"]


#: Names of this module imported on first use: ``Transaction`` imports pyarrow, which metadata-only
#: commands never need; the reports, the managers of gc and fsck. ``CleanupReport``: ``GcReport``'s
#: name before gc had a retention period.
_LAZY = {"Transaction": ("trimerge.lineage.transaction", "Transaction"),
         "GcReport": ("trimerge.lineage.safety.gc", "GcReport"),
         "CleanupReport": ("trimerge.lineage.safety.gc", "GcReport"),
         "FsckReport": ("trimerge.lineage.safety.fsck", "FsckReport")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(name)


def default_actor() -> str:
    env = os.environ.get("TRIMERGE_ACTOR")
    if env:
        return env
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class _RefNamespace:
    """What ref expressions resolve against (see :func:`trimerge.lineage.history.refexpr.resolve`)."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    def commit_exists(self, commit_id: str) -> bool:
        return self.repo.commits.exists(commit_id)

    def branch_tip(self, name: str) -> str | None:
        if name == HEAD:  # the current branch, as 'trimerge switch' set it
            name = self.repo.current_branch
        if is_internal_branch(name) and not is_addressable(name):
            return None
        b = self.repo.refs.branch(name)
        return b.commit_id if b else None

    def tag_target(self, name: str) -> str | None:
        t = self.repo.refs.tag(name)
        return t.commit_id if t else None

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return self.repo.commits.ids_with_prefix(prefix)

    def reflog_value(self, name: str, n: int) -> str:
        """The commit ``name@{n}`` names (see :mod:`trimerge.lineage.history.reflog`)."""
        return self.repo.refs.reflog.nth(name, n, self.repo.reflog_current(name))

    def tracking_tip(self, name: str) -> str | None:
        return self.repo.refs.tracking(name)

    def value_at(self, name: str, when: datetime) -> str:  # NAME@{TIME}: lineage.history.reftime
        return reftime.value_at(self.repo, name, when, lambda plain: resolve_base(plain, self))


class Repository(TableWrites, HooksFacade):
    """A multi-table Lance repository with git-style commits, branches and tags.

    Create one with :meth:`init`, open an existing one with :meth:`open` (a read-write open first
    repairs interrupted writes). The location is a local path, ``file://``, ``s3://``, ``gs://`` or
    ``az://`` URI; ``storage_options`` (credentials, endpoint, region…) go to Lance and to the
    metadata store alike, and default to the standard environment variables."""

    def __init__(self, location: Location, *, read_only: bool = False, lock_timeout: float = 30.0,
                 moved_from: str | None = None):
        self.location = location
        self.uri = location.uri
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.docs = Documents(location.backend(META_DIR), location.join(META_DIR))
        self.commits = CommitStore(self.docs)
        self.refs = RefStore(self.docs)
        self.refs.on_change = partial(ref_changed, self)  # hooks deliver their events (trimerge.hooks)
        self.table_store = TableStore(location, moved_from)
        self.branches = BranchManager(self)
        self.tags = TagManager(self)
        self.recovery = Recovery(self)
        self.deletions = DeletionLog(self.docs)
        self.reclaimed = ReclaimedCommits(self.docs)
        self.settings = Settings(self.docs, self.check_writable)
        self.last_recovery = RecoveryReport()
        self._released_leases: dict[str, Any] = {}

    # ------------------------------------------------------------------ opening
    @classmethod
    def init(cls, uri: str | os.PathLike, *, actor: str | None = None,
             storage_options: Mapping[str, str] | None = None) -> "Repository":
        """Create a repository with a root commit on ``main`` ("Repository created")."""
        location = Location.parse(uri, storage_options)
        repo = cls(location)
        refuse_to_init(location, repo.docs)
        if location.is_local:
            location.path.mkdir(parents=True, exist_ok=True)
        created = now()
        root = repo.commits.build(parents=(), actor=actor or default_actor(), created_at=created,
                                  message="Repository created", metadata={}, branch=MAIN, tables={})
        repo.commits.put(root)
        for name in (MAIN, SCHEMA_LOCK_BRANCH):
            repo.refs.create_branch(Branch(name, root.id, new_ulid(), created, None), actor=root.actor,
                                    reason="init: repository created")
        # Written last: a location without repo.json is not a repository (an interrupted init).
        doc = {"format": 1, "created_at": format_time(created), "root": root.id, "location": location.uri}
        if repo.docs.create(REPO_DOC, doc, nonce=False) is None:
            raise AlreadyExistsError(f"a trimerge repository exists already at {location.uri}")
        return repo

    @classmethod
    def open(cls, uri: str | os.PathLike, *, read_only: bool = False, lock_timeout: float = 30.0,
             storage_options: Mapping[str, str] | None = None) -> "Repository":
        """Open a repository. A read-write open recovers interrupted writes first."""
        location = Location.parse(uri, storage_options)
        probe = Documents(location.backend(META_DIR), location.join(META_DIR))
        doc = read_marker(probe)
        if not isinstance(doc, dict):
            if not location.is_local:
                probe.backend.children("")  # a missing bucket or bad credentials say so, not "no repository"
            if probe.backend.children(""):
                raise CorruptRepositoryError(
                    f"{location.join(META_DIR, REPO_DOC)} is missing but {META_DIR}/ holds data: an interrupted "
                    f"init or a damaged repository; do not run init over it (check it, or restore {REPO_DOC})")
            raise RepositoryNotFoundError(f"no trimerge repository at {location.uri} (create one with 'trimerge init')")
        moved_from = relocation.moved_from(location, doc)
        repo = cls(location, read_only=read_only, lock_timeout=lock_timeout, moved_from=moved_from)
        if not read_only:
            if moved_from:  # a copy works where it lands: name this place before any fork is opened
                relocation.relocate_on_open(repo)
            repo.recover()
        return repo

    def __repr__(self) -> str:
        return f"Repository({self.uri!r})"

    # ------------------------------------------------------------------ remotes (trimerge.remotes)
    @classmethod
    def clone(cls, src: str | os.PathLike, dst: str | os.PathLike, **options: Any) -> Any:
        """Copy repository ``src`` to the empty location ``dst`` (any pair of a directory, ``s3://``,
        ``az://``); ``origin`` names ``src`` there. Returns what moved (:mod:`trimerge.remotes`)."""
        return REMOTE_OPERATIONS["clone"](src, dst, **options)

    @property
    def remotes(self) -> Any:
        """The remotes: ``add(name, uri)``, ``list()``, ``get(name)``, ``remove(name)``."""
        return REMOTE_OPERATIONS["remotes"](self)

    def fetch(self, remote: str = "origin", **options: Any) -> Any:
        """Bring the remote's branches (as ``REMOTE/BRANCH``) and what they need."""
        return REMOTE_OPERATIONS["fetch"](self, remote, **options)

    def pull(self, remote: str | None = None, branch: str | None = None, **options: Any) -> Any:
        """Fetch, then fast-forward ``branch`` or merge ``REMOTE/BRANCH`` into it."""
        return REMOTE_OPERATIONS["pull"](self, remote, branch, **options)

    def push(self, remote: str | None = None, branch: str | None = None, *, tags: bool = False,
             **options: Any) -> Any:
        """Move the remote's ``branch`` to this one's tip: fast-forward only."""
        return REMOTE_OPERATIONS["push"](self, remote, branch, tags=tags, **options)

    @property
    def requests(self) -> Any:
        """Merge requests, reviews and the merge queue (``create``, ``show``, ``merge``...: :mod:`trimerge.review`)."""
        return REPOSITORY_EXTENSIONS["requests"](self)

    @property
    def path(self):
        """The repository's local directory (local repositories only)."""
        return self.location.path

    @property
    def graph(self) -> CommitStore:
        """The commit graph (parents, generation, created_at) for :mod:`trimerge.lineage.history.graph`."""
        return self.commits

    @staticmethod
    def default_actor() -> str:
        return default_actor()

    # ------------------------------------------------------------------ commits and refs
    def commit(self, commit_id: str) -> Commit:
        """The commit with this full id."""
        return self.commits.get(commit_id)

    def resolve(self, expr: "str | Commit | Ref") -> Commit:
        """Resolve a ref expression (commit id or prefix, branch, tag, with ``^``/``~`` steps)."""
        if isinstance(expr, Commit):
            return expr
        if isinstance(expr, Ref):
            expr = expr.expr
        return self.commit(resolve_expr(expr, _RefNamespace(self), self.commits))

    def ref(self, expr: str) -> "Ref":
        """A ref that carries this repository (for ``merge(repo.ref('a'), repo.ref('b'))``)."""
        return Ref(self, expr)

    def short_id(self, commit_id: str) -> str:
        """Shortest unique prefix of at least 7 characters."""
        return graphalg.shortest_unique_prefix(commit_id, self.commits.ids_with_prefix)

    @property
    def current_branch(self) -> str:
        name = self.refs.head()
        return name if name == MAIN or self.branches.exists(name) else MAIN

    def switch(self, branch: str) -> Branch:
        """Make ``branch`` the current branch (the default of writes and reads)."""
        b = self.branches.get(branch)
        try:
            before = self.current_branch
        except CorruptRepositoryError:  # a damaged HEAD is what switch repairs
            before = None
        self.refs.set_head(b.name)
        if before is not None and before != b.name:
            old = self.refs.branch(before)
            self.refs.reflog.record(HEAD, old.commit_id if old else None, b.commit_id, self.default_actor(),
                                    f"switch: moving from {before} to {b.name}")
        return b

    def reflog(self, ref: str | None = None, limit: int | None = None) -> list[reflog_module.ReflogEntry]:
        """The moves of ``ref`` (a branch, or ``HEAD`` for switches; default: every ref), newest
        first: ref, old and new commit, actor, time, reason. ``NAME@{N}`` in a ref expression is
        the N-th previous value of NAME (see :mod:`trimerge.lineage.history.reflog`)."""
        from trimerge.lineage.history.reflog import list_entries

        return list_entries(self, ref, limit)

    def reflog_current(self, ref: str) -> str | None:
        """The commit ``ref`` names now (HEAD: the current branch's tip; None: no such branch)."""
        b = self.refs.branch(self.current_branch if ref == HEAD else ref)
        return b.commit_id if b else None

    def restore(self, table: str, ref: str, *, branch: str | None = None, actor: str | None = None,
                message: str | None = None, dry_run: bool = False, keep_gates: bool = True) -> restore_module.RestoreResult:
        """One commit on ``branch`` in which ``table`` equals its state at ``ref`` (rows, schema,
        indices), without copying data; dropped if it did not exist there, brought back if the
        branch no longer has it (see :mod:`trimerge.lineage.restore`). The table keeps the data
        checks and derived-column declarations it has on ``branch`` (a restore that cannot keep
        them is refused); ``keep_gates=False`` takes them from ``ref`` instead."""
        from trimerge.lineage.restore import restore

        return restore(self, table, ref, branch=branch, actor=actor, message=message, dry_run=dry_run,
                       keep_gates=keep_gates)

    def default_ref(self, ref: str | None) -> str:
        """``ref``, or the current branch when it is None or ``HEAD``."""
        return self.current_branch if ref is None or ref == HEAD else ref

    # ------------------------------------------------------------------ history
    def log(self, ref: str | None = None, first_parent: bool = False, actor: str | None = None,
            limit: int | None = None, since: datetime | None = None, until: datetime | None = None, *,
            refs: Sequence[str] | None = None, branch: str | None = None,
            message: str | None = None, maintenance: bool = True) -> list[Commit]:
        """Ancestors of ``ref`` (or of every ref in ``refs``) newest first (generation, then time, then
        id), filtered as :meth:`iter_log` says."""
        return list(self.iter_log(ref, first_parent=first_parent, actor=actor, limit=limit, since=since,
                                  until=until, refs=refs, branch=branch, message=message, maintenance=maintenance))

    def iter_log(self, ref: str | None = None, first_parent: bool = False, actor: str | None = None,
                 limit: int | None = None, since: datetime | None = None,
                 until: datetime | None = None, *, refs: Sequence[str] | None = None, branch: str | None = None,
                 message: str | None = None, maintenance: bool = True) -> Iterator[Commit]:
        """The one history filter (``log``, ``commit list``): commits by ``actor``, made on ``branch``,
        whose message contains ``message``, created in [``since``, ``until``]; at most ``limit``;
        ``maintenance=False`` leaves out maintenance commits (``optimize``, ``compact``)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidOperationError(f"limit must be a non-negative whole number, not {limit!r}")
        starts = [self.resolve(r).id for r in refs] if refs is not None else [self.resolve(self.default_ref(ref)).id]
        n = 0
        for cid in graphalg.iter_history(self.commits, starts, first_parent=first_parent) if starts else []:
            if limit is not None and n >= limit:
                return
            c = self.commit(cid)
            if (actor is not None and c.actor != actor) or (branch is not None and c.branch != branch) or \
                    (message is not None and message not in c.message) or \
                    (since is not None and c.created_at < since) or (until is not None and c.created_at > until) or \
                    (not maintenance and MAINTENANCE in c.metadata):
                continue
            n += 1
            yield c

    def merge_bases(self, a: str, b: str) -> list[Commit]:
        """All best common ancestors (``git merge-base --all``)."""
        return [self.commit(c) for c in graphalg.merge_bases(self.commits, self.resolve(a).id, self.resolve(b).id)]

    def merge_base(self, a: str, b: str) -> Commit | None:
        """One best common ancestor, chosen deterministically; None for unrelated histories."""
        c = graphalg.merge_base(self.commits, self.resolve(a).id, self.resolve(b).id)
        return self.commit(c) if c else None

    def is_ancestor(self, a: str, b: str) -> bool:
        """True if ``a`` is ``b`` or an ancestor of it."""
        return graphalg.is_ancestor(self.commits, self.resolve(a).id, self.resolve(b).id)

    def all_commits(self) -> list[Commit]:
        """Every commit stored (reachable or not), newest first."""
        out = [self.commit(cid) for cid in self.commits.all_ids()]
        return sorted(out, key=lambda c: (c.generation, c.created_at, c.id), reverse=True)

    # ------------------------------------------------------------------ reading
    def _split_address(self, table: str, ref: str | None) -> tuple[str, str | None]:
        if isinstance(table, Address) or "::" in str(table):
            addr = table if isinstance(table, Address) else parse_address(str(table))
            if addr.repository is not None and not self.location.same_place(addr.repository):
                raise InvalidOperationError(f"address {addr} names another repository than {self.uri}")
            if addr.table is None:
                raise InvalidOperationError(f"address {addr} names no table")
            if ref is not None and addr.ref is not None and ref != addr.ref:
                raise InvalidOperationError(f"address {addr} and ref={ref!r} disagree")
            return addr.table, addr.ref or ref
        return table, ref

    def tables(self, ref: str | None = None) -> list[str]:
        """Names of the tables at ``ref`` (default: the current branch)."""
        return sorted(self.resolve(self.default_ref(ref)).tables)

    def table_version(self, table: str, ref: str | None = None) -> TableVersion:
        table, ref = self._split_address(table, ref)
        commit = self.resolve(self.default_ref(ref))
        try:
            return commit.tables[table]
        except KeyError:
            raise TableNotFoundError(
                f"no table {table!r} at {ref or self.current_branch} (tables: {', '.join(sorted(commit.tables)) or 'none'})"
            ) from None

    def dataset_path(self, tv: TableVersion | str) -> str:
        """URI of a table's Lance dataset (a path on local disk)."""
        return self.table_store.uri(tv)

    def open_table_version(self, tv: TableVersion) -> lance.LanceDataset:
        """The Lance dataset pinned at a commit's version of a table."""
        return self.table_store.open_version(tv)

    def check_readable(self, commit: Commit) -> None:
        """Raise :class:`DataReclaimedError` unless every table of ``commit`` still has its data."""
        for name, tv in commit.tables.items():
            if not self.table_store.has_data(tv):
                raise DataReclaimedError(
                    f"commit {commit.id[:10]}: data of table {name!r} was reclaimed by cleanup after its branch was "
                    "deleted; it can no longer be branched from or tagged")

    def dataset(self, table: str, ref: str | None = None) -> lance.LanceDataset:
        """The table at ``ref`` as a Lance dataset (a pyarrow dataset) pinned at that ref's version.

        For reading (DuckDB, polars, pandas, pyarrow): writing to it (``delete``, ``insert``,
        ``create_index``...) creates a Lance version no trimerge commit references: reads ignore it,
        the next trimerge write builds on the commit's version and ``gc`` removes it. Change data
        through the repository (:meth:`transaction`, :meth:`upsert`, ...)."""
        return self.open_table_version(self.table_version(table, ref))

    def read(self, table: str, ref: str | None = None, *, columns: Sequence[str] | None = None,
             where: str | pc.Expression | None = None, filter: str | pc.Expression | None = None,
             as_of: datetime | str | None = None) -> pa.Table:
        """Read a table at any ref (branch, tag, commit id or prefix, expression, or an address);
        ``where``: a SQL filter, as in delete, search and blame (``filter`` is its older name);
        ``as_of``: as branch/tag ``ref`` was at that time (``REF@{TIME}``, lineage.history.reftime)."""
        if where is not None and filter is not None:
            raise InvalidOperationError("read takes where= or its older name filter=, not both")
        filter = where if where is not None else filter
        table, ref = self._split_address(table, ref)
        ref = reftime.as_of_ref(self.default_ref(ref), as_of) if as_of is not None else ref
        ds = self.dataset(table, ref)
        if columns is not None:
            columns = [columns] if isinstance(columns, str) else list(columns)
            unknown = [c for c in columns if c not in ds.schema.names]
            if unknown:
                raise InvalidOperationError(f"table {table!r} has no column(s) {', '.join(map(repr, unknown))} "
                                            f"(columns: {', '.join(ds.schema.names)})")
        if isinstance(filter, str):
            from trimerge.lineage.tables.filters import prepare_filter

            filter = prepare_filter(ds, filter, f"read {table}")  # `d < '2001-01-01'` typed for Lance
        try:
            return ds.to_table(columns=list(columns) if columns else None, filter=filter)
        except (OSError, ValueError) as exc:
            if filter is None and columns is None:
                raise
            raise InvalidOperationError(
                f"cannot read {table}: bad filter or columns ({str(exc).splitlines()[0][:200]})") from None

    def sql(self, query: str, ref: str | None = None) -> pa.Table:
        """Run one read-only SQL query (DuckDB) over the tables at ``ref`` (default: the current
        branch): ``"t@REF"`` is table t at any other ref, and ``diff('A', 'B', 't')`` the rows that
        changed between two refs (:mod:`trimerge.lineage.tables.sql`)."""
        from trimerge.lineage.tables.sql import run_sql

        return run_sql(self, query, ref)

    def schema(self, table: str, ref: str | None = None) -> pa.Schema:
        return self.dataset(table, ref).schema

    def primary_key(self, table: str, ref: str | None = None) -> tuple[str, ...]:
        return self.table_version(table, ref).primary_key

    def entity(self, table: str, key: Any, ref: str | None = None) -> dict[str, Any] | None:
        """One row by primary key at ``ref`` (None if absent). ``key``: value, tuple or dict."""
        tv = self.table_version(table, ref)
        return entities.row_at(self.open_table_version(tv), tv.primary_key, key)

    @property
    def checks(self) -> checks_module.Checks:
        """Data checks, versioned with the tables and gating merges (:mod:`trimerge.lineage.gates.checks`)."""
        return checks_module.Checks(self)

    def blame(self, table: str, *, ref: str | None = None, where: str | None = None,
              columns: Sequence[str] | None = None, method: str = "auto") -> pa.Table:
        """The last commit that changed each row (or each of ``columns``) of ``table`` at ``ref``
        (:mod:`trimerge.lineage.gates.blame`); ``method``: ``"auto"``, ``"images"`` (Lance's row-version
        metadata along the first-parent chain) or ``"exact"`` (a keyed walk, the reference)."""
        from trimerge.lineage.gates.blame import blame

        return blame(self, table, ref=ref, where=where, columns=columns, method=method)

    def entity_history(self, table: str, key: Any, ref: str | None = None) -> list[Commit]:
        """Commits (newest first) in which the row with ``key`` changed: inserted, updated or deleted.

        Only commits whose version of the table differs from their first parent's are read."""
        return entities.entity_history(self.open_table_version, self.iter_log(ref), self.commit, table, key)

    # ------------------------------------------------------------------ writing
    def check_writable(self) -> None:
        if self.read_only:
            raise InvalidOperationError("repository was opened read-only")

    def transaction(self, branch: str | None = None, *, actor: str | None = None, message: str | None = None,
                    metadata: Mapping[str, str] | None = None) -> transaction_module.Transaction:
        """A multi-table write that becomes visible as one commit, all at once or not at all."""
        self.check_writable()
        from trimerge.lineage.transaction import Transaction

        return Transaction(self, self.default_ref(branch), actor=actor or default_actor(), message=message,
                           metadata=metadata)

    # ------------------------------------------------------------------ leases, recovery, maintenance
    def branch_lease(self, branch: str, purpose: str) -> Lease:
        """The (not yet taken) lease that makes one writer at a time own ``branch``."""
        return Lease(self.docs, f"locks/{encode_name(branch)}.lock", purpose, released_versions=self._released_leases)

    def lock_branch(self, branch: str, purpose: str, *, what: str | None = None) -> Lease:
        """Take ``branch``'s lease, waiting up to ``lock_timeout``; a dead holder's interrupted write is
        repaired first, while the lease is held."""
        lease = self.branch_lease(branch, purpose)
        return lease.acquire(self.lock_timeout, what or f"branch {branch!r}",
                             on_dead_holder=lambda _dead: self.recovery.repair_branch(branch, lease.token))

    def recover(self) -> RecoveryReport:
        """Repair writes interrupted by a crash: complete them under their commit id or roll them back.

        Each repair is recorded as a commit by actor ``trimerge:recovery``. Damaged intents are
        quarantined, never fatal."""
        self.check_writable()
        self.last_recovery = self.recovery.recover_all()
        return self.last_recovery

    def gc(self, retention: timedelta | float | str = DEFAULT_RETENTION, *,
           warn: Callable[[str], None] | None = None) -> gc_module.GcReport:
        """Reclaim what nothing keeps: data of commits no branch or tag reaches (once the branch or
        tag that reached them was deleted more than ``retention`` ago), Lance versions and files no
        kept commit names (aborted writes, a transaction's intermediate versions), pins of deleted
        tags and stale temporary files. ``retention`` is a ``timedelta``, seconds, or text such as
        ``"7d"``, ``"12h"`` or ``"now"``. Safe beside writers in other processes (see
        :mod:`trimerge.lineage.safety.gc`); one gc runs at a time. ``warn`` hears about entries under
        ``tables/`` that trimerge did not create (they are left alone)."""
        self.check_writable()
        self.recover()
        return gc_module.Collector(self, gc_module.as_retention(retention), warn=warn).run()

    def cleanup(self, retention: timedelta | float | str = DEFAULT_RETENTION, **kwargs: Any) -> gc_module.GcReport:
        """Alias of :meth:`gc`."""
        return self.gc(retention, **kwargs)

    def fsck(self) -> fsck_module.FsckReport:
        """Check every commit, ref, recovery note and reachable table version; never writes."""
        return fsck_module.check_repository(self)


@dataclass(frozen=True)
class Ref:
    """A ref expression bound to its repository."""

    repo: Repository
    expr: str

    def resolve(self) -> Commit:
        return self.repo.resolve(self.expr)

    def __str__(self) -> str:
        return self.expr


# The API's edge: a full disk or a dependency's panic leaves it as a TrimergeError (boundary.py).
from trimerge.lineage.safety.boundary import guard_class, guard_returned_class  # noqa: E402

Repository.transaction = guard_returned_class(Repository.transaction)  # type: ignore[method-assign]  # Transaction is imported lazily
for _cls in (Repository, BranchManager, TagManager, Ref):
    guard_class(_cls)
