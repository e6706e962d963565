"""In-memory fakes of the stores in :mod:`trimerge.lineage.ports`, for testing managers without a
repository: dicts instead of files, no Lance, no leases on disk.

* :class:`MemoryDocuments` — a :class:`~trimerge.lineage.ports.DocumentStore`: JSON documents in a
  dict, versions are counters (so the nonce of the real store is not needed);
* :class:`MemoryCommits` — a :class:`~trimerge.lineage.ports.CommitStore` (and commit graph);
* :class:`MemoryRefs` — a :class:`~trimerge.lineage.ports.RefStore`, whose moves go to the real
  :class:`~trimerge.lineage.history.reflog.Reflog` over its documents;
* :class:`MemoryLeases` — :class:`~trimerge.lineage.ports.Leases` whose lease documents live among
  the documents (``kill`` makes a holder dead);
* :class:`MemoryRepository` — all of them, plus the slices of the facade the managers read (ref
  expressions resolve with the real resolver; no table data).
"""

from __future__ import annotations

import builtins
import copy
import itertools
import time
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ulid import ULID

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import BranchNotFoundError, ConcurrentWriteError, InvalidOperationError, RefNotFoundError
from trimerge.lineage.history.names import MAIN, is_addressable, is_internal_branch
from trimerge.lineage.history.refs import Branch, Tag, encode_name, now
from trimerge.lineage.history import graph, refexpr
from trimerge.lineage.history.commits import GraphFromCommits
from trimerge.lineage.history.reflog import Reflog
from trimerge.lineage.storage.documents import Document
from trimerge.lineage.history.retention import DeletionLog, ReclaimedCommits
from trimerge.lineage.storage.lease import HOSTNAME, Holder

_versions = itertools.count(1)


class MemoryDocuments:
    """JSON documents in a dict: ``{key: (document, version)}``; keys are '/'-separated."""

    where = "memory:"
    remote = False

    def __init__(self) -> None:
        self.docs: dict[str, tuple[Any, int]] = {}
        self.raw: dict[str, bytes] = {}  # documents that do not parse (written by ``damage``)

    def damage(self, key: str, data: bytes = b"{not json") -> None:
        """Store bytes that do not parse at ``key`` (a damaged document)."""
        self.docs.pop(key, None)
        self.raw[key] = data

    def _put(self, key: str, doc: Any) -> int:
        version = next(_versions)
        self.docs[key] = (copy.deepcopy(doc), version)
        self.raw.pop(key, None)
        return version

    def read(self, key: str, *, damaged_as_none: bool = False) -> Document | None:
        if key in self.raw:
            if damaged_as_none:
                return Document(None, -1)
            from trimerge.lineage.errors import CorruptRepositoryError

            raise CorruptRepositoryError(f"{self.where}{key}: not valid JSON")
        found = self.docs.get(key)
        return None if found is None else Document(copy.deepcopy(found[0]), found[1])

    def get(self, key: str) -> Any:
        found = self.read(key)
        return None if found is None else found.doc

    def create(self, key: str, doc: dict[str, Any], *, nonce: bool = True) -> Any | None:
        return None if self.exists(key) else self._put(key, doc)

    def swap(self, key: str, doc: dict[str, Any], expected: Any) -> Any | None:
        found = self.docs.get(key)
        return None if found is None or found[1] != expected else self._put(key, doc)

    def write(self, key: str, doc: dict[str, Any], expected: Any | None) -> Any:
        version = self.create(key, doc) if expected is None else self.swap(key, doc, expected)
        if version is None:
            raise ConcurrentWriteError(f"{self.where}{key} was changed by another writer; refresh and retry")
        return version

    def together(self, *calls: Callable[[], Any]) -> builtins.list[Any]:
        return [call() for call in calls]

    def _keys(self) -> builtins.list[str]:
        return sorted({*self.docs, *self.raw})

    def list(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        return [k for k in self._keys() if k.startswith(head) and "/" not in k[len(head):]]

    def delete(self, key: str) -> None:
        self.docs.pop(key, None)
        self.raw.pop(key, None)

    def exists(self, key: str) -> bool:
        return key in self.docs or key in self.raw

    def copy(self, key: str, dest: str) -> bool:
        if key in self.raw:
            self.raw.setdefault(dest, self.raw[key])
        elif key in self.docs:
            if not self.exists(dest):
                self.docs[dest] = self.docs[key]
        else:
            return False
        return True

    def children(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        return sorted({k[len(head):].split("/", 1)[0] for k in self._keys() if k.startswith(head)})

    def folders(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        return sorted({k[len(head):].split("/", 1)[0] for k in self._keys()
                       if k.startswith(head) and "/" in k[len(head):]})

    def keys_below(self, prefix: str) -> Iterator[str]:
        head = prefix.rstrip("/") + "/"
        return iter([k for k in self._keys() if k.startswith(head)])


class MemoryCommits(GraphFromCommits):
    """Commits in a dict; also their graph (parents, generation, created_at)."""

    def __init__(self) -> None:
        self.commits: dict[str, Commit] = {}

    def get(self, commit_id: str) -> Commit:
        try:
            return self.commits[commit_id]
        except (KeyError, TypeError):
            raise RefNotFoundError(f"no commit {commit_id}") from None

    def exists(self, commit_id: str) -> bool:
        return commit_id in self.commits

    def put(self, commit: Commit) -> None:
        self.commits.setdefault(commit.id, commit)

    def build(self, *, parents: Sequence[str], actor: str, message: str, metadata: Mapping[str, str],
              branch: str, tables: Mapping[str, TableVersion], created_at: datetime,
              ulid: str | None = None) -> Commit:
        generation = 1 + max((self.get(p).generation for p in parents), default=0)
        return Commit.build(ulid=ulid or str(ULID()), parents=tuple(parents), actor=actor, created_at=created_at,
                            message=message, metadata={str(k): str(v) for k, v in metadata.items()}, branch=branch,
                            generation=generation, tables=dict(tables))

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return sorted(c for c in self.commits if c.startswith(prefix.lower()))

    def all_ids(self) -> list[str]:
        return sorted(self.commits)


class MemoryRefs:
    """Branches and tags in dicts; user branches' moves are recorded in a real reflog."""

    def __init__(self, docs: MemoryDocuments | None = None) -> None:
        self.branches: dict[str, Branch] = {}
        self.tags: dict[str, Tag] = {}
        self.current = MAIN
        self.reflog = Reflog(docs if docs is not None else MemoryDocuments())

    def _logged(self, name: str, old: str | None, new: str | None, actor: str, reason: str) -> None:
        if not is_internal_branch(name) and old != new:
            self.reflog.record(name, old, new, actor, reason)

    def branch(self, name: str) -> Branch | None:
        return self.branches.get(name) if isinstance(name, str) else None

    def branch_names(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self.branches if include_internal or not is_internal_branch(n))

    def create_branch(self, branch: Branch, *, actor: str = "", reason: str = "branch: created") -> Branch | None:
        if branch.name in self.branches:
            return None
        self._logged(branch.name, None, branch.commit_id, actor, reason)
        self.branches[branch.name] = replace(branch, version=next(_versions))
        return self.branches[branch.name]

    def move_branch(self, branch: Branch, commit_id: str, *, actor: str = "", reason: str = "") -> Branch | None:
        stored = self.branches.get(branch.name)
        if stored is None or stored.version != branch.version:
            return None
        self._logged(branch.name, branch.commit_id, commit_id, actor, reason)
        self.branches[branch.name] = replace(branch, commit_id=commit_id, version=next(_versions))
        return self.branches[branch.name]

    def delete_branch(self, name: str, *, old: str | None = None, actor: str = "",
                      reason: str = "branch: deleted") -> None:
        if old is not None:
            self._logged(name, old, None, actor, reason)
        self.branches.pop(name, None)

    def tag(self, name: str) -> Tag | None:
        return self.tags.get(name) if isinstance(name, str) else None

    def tag_names(self) -> list[str]:
        return sorted(self.tags)

    def create_tag(self, tag: Tag) -> bool:
        return self.tags.setdefault(tag.name, tag) is tag

    def delete_tag(self, name: str) -> None:
        self.tags.pop(name, None)

    def tracking_tips(self) -> list[str]:
        """The commits remote-tracking refs name (none: a fake has no remotes)."""
        return []

    def head(self) -> str:
        return self.current

    def set_head(self, name: str) -> None:
        self.current = name


class MemoryLease:
    """A lease whose document lives among the documents, under ``locks/`` as the real ones do."""

    def __init__(self, docs: MemoryDocuments, name: str, purpose: str) -> None:
        self.docs, self.purpose = docs, purpose
        self.key = f"locks/{encode_name(name)}.lock"
        self.mine: Holder | None = None

    @property
    def token(self) -> str:
        return self.mine.token if self.mine else ""

    def holder(self) -> Holder | None:
        found = self.docs.read(self.key, damaged_as_none=True)
        return None if found is None else Holder.from_json(found.doc)

    def try_acquire(self, on_dead_holder: Callable[[Holder | None], None] | None = None) -> bool:
        found = self.docs.read(self.key, damaged_as_none=True)
        before = None if found is None else Holder.from_json(found.doc)
        if found is not None and before is not None and not before.released and not before.is_dead():
            return False
        mine = Holder.new(self.purpose, 600.0)
        stored = self.docs.create(self.key, mine.to_json()) if found is None else \
            self.docs.swap(self.key, mine.to_json(), found.version)
        if stored is None:
            return False
        self.mine = mine
        if before is not None and not before.released and on_dead_holder is not None:
            on_dead_holder(before)
        return True

    def acquire(self, timeout: float, what: str,
                on_dead_holder: Callable[[Holder | None], None] | None = None) -> MemoryLease:
        if not self.try_acquire(on_dead_holder):
            raise ConcurrentWriteError(f"{what} is held by another writer; retry")
        return self

    def release(self, *, untouched: bool = False) -> None:
        found = self.docs.read(self.key)
        if self.mine is not None and found is not None and found.doc.get("token") == self.mine.token:
            self.docs.swap(self.key, replace(self.mine, released=True).to_json(), found.version)
        self.mine = None


class MemoryLeases:
    """Branch leases over :class:`MemoryDocuments`."""

    lock_timeout = 0.0

    def __init__(self, docs: MemoryDocuments) -> None:
        self.docs = docs

    def branch_lease(self, branch: str, purpose: str) -> MemoryLease:
        return MemoryLease(self.docs, branch, purpose)

    def lock_branch(self, branch: str, purpose: str, *, what: str | None = None) -> MemoryLease:
        return self.branch_lease(branch, purpose).acquire(self.lock_timeout, what or f"branch {branch!r}")

    def kill(self, name: str) -> None:
        """Make the holder of lease ``name`` dead (its process gone, its lease expired)."""
        key = f"locks/{encode_name(name)}.lock"
        found = self.docs.read(key)
        assert found is not None, f"no lease {name!r}"
        self.docs.swap(key, {**found.doc, "host": f"not-{HOSTNAME}", "expires_at": time.time() - 1}, found.version)


class MemoryBranches:
    """``repo.branches`` as other managers read it, over :class:`MemoryRefs`."""

    def __init__(self, refs: MemoryRefs) -> None:
        self.refs = refs

    def get(self, name: str) -> Branch:
        b = self.refs.branch(name)
        if b is None or is_internal_branch(name):
            raise BranchNotFoundError(f"no branch {name!r}")
        return b

    def exists(self, name: str) -> bool:
        visible = isinstance(name, str) and (not is_internal_branch(name) or is_addressable(name))
        return visible and self.refs.branch(name) is not None

    def list(self, include_internal: bool = False) -> builtins.list[Branch]:
        return [self.refs.branches[n] for n in self.refs.branch_names(include_internal)]

    def names(self) -> builtins.list[str]:
        return [b.name for b in self.list()]


class MemoryTags:
    """``repo.tags`` as other managers read it."""

    def __init__(self, refs: MemoryRefs) -> None:
        self.refs = refs

    def get_or_none(self, name: str) -> Tag | None:
        return self.refs.tag(name)

    def list(self) -> builtins.list[Tag]:
        return [self.refs.tags[n] for n in self.refs.tag_names()]


class MemoryRepository:
    """The stores above, wired as the facade wires the real ones, with the slices managers read."""

    def __init__(self, *, read_only: bool = False, actor: str = "tester") -> None:
        self.docs = MemoryDocuments()
        self.commits = MemoryCommits()
        self.refs = MemoryRefs(self.docs)
        self.leases = MemoryLeases(self.docs)
        self.branches = MemoryBranches(self.refs)
        self.tags = MemoryTags(self.refs)
        self.reclaimed = ReclaimedCommits(self.docs)
        self.deletions = DeletionLog(self.docs)
        self.read_only, self.actor = read_only, actor

    @classmethod
    def with_history(cls, chain: Iterable[str] = ("root",), **kwargs: Any) -> MemoryRepository:
        """A repository whose ``main`` is a chain of commits with these messages (the first the root)."""
        repo = cls(**kwargs)
        tip: Commit | None = None
        for message in chain:
            tip = repo.commit_on(MAIN, message) if tip is not None else repo._root(message)
        return repo

    def _root(self, message: str) -> Commit:
        root = self.commits.build(parents=(), actor=self.actor, message=message, metadata={}, branch=MAIN,
                                  tables={}, created_at=now())
        self.commits.put(root)
        self.refs.create_branch(Branch(MAIN, root.id, str(ULID()), now(), None), actor=self.actor)
        return root

    def commit_on(self, branch: str, message: str) -> Commit:
        """A new commit on top of ``branch``'s tip, and the branch moved to it."""
        b = self.branches.get(branch)
        c = self.commits.build(parents=(b.commit_id,), actor=self.actor, message=message, metadata={},
                               branch=branch, tables={}, created_at=now())
        self.commits.put(c)
        moved = self.refs.move_branch(b, c.id, actor=self.actor, reason=f"commit: {message}")
        assert moved is not None
        return c

    # -- slices of the facade
    @property
    def lock_timeout(self) -> float:
        return self.leases.lock_timeout

    def branch_lease(self, branch: str, purpose: str) -> MemoryLease:
        return self.leases.branch_lease(branch, purpose)

    def lock_branch(self, branch: str, purpose: str, *, what: str | None = None) -> MemoryLease:
        return self.leases.lock_branch(branch, purpose, what=what)

    def check_writable(self) -> None:
        if self.read_only:
            raise InvalidOperationError("repository was opened read-only")

    def default_actor(self) -> str:
        return self.actor

    def reflog_current(self, ref: str) -> str | None:
        b = self.refs.branch(self.refs.head() if ref == "HEAD" else ref)
        return b.commit_id if b else None

    @property
    def current_branch(self) -> str:
        return self.refs.head()

    def default_ref(self, ref: str | None) -> str:
        return self.current_branch if ref is None or ref == "HEAD" else ref

    def commit(self, commit_id: str) -> Commit:
        return self.commits.get(commit_id)

    def resolve(self, expr: str) -> Commit:
        """A ref expression (``main~2``, ``main@{1}``, an id prefix…), by the real resolver over these fakes."""
        return self.commits.get(refexpr.resolve(expr, self, self.commits))

    def check_readable(self, commit: Commit) -> None:
        """Every commit is readable: the fakes hold no table data gc could reclaim."""

    def is_ancestor(self, a: str, b: str) -> bool:
        return graph.is_ancestor(self.commits, a, b)

    # -- what ref expressions resolve against (refexpr.RefNamespace)
    def commit_exists(self, commit_id: str) -> bool:
        return self.commits.exists(commit_id)

    def branch_tip(self, name: str) -> str | None:
        b = self.refs.branch(self.current_branch if name == "HEAD" else name)
        return b.commit_id if b is not None and self.branches.exists(b.name) else None

    def tag_target(self, name: str) -> str | None:
        t = self.refs.tag(name)
        return t.commit_id if t else None

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return self.commits.ids_with_prefix(prefix)

    def reflog_value(self, name: str, n: int) -> str:
        return self.refs.reflog.nth(name, n, self.reflog_current(name))
