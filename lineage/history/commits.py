"""The commit store: immutable, content-addressed commits under ``commits/<id[:2]>/<id[2:]>.json``.

Commits are only ever created (create-if-absent), never changed or deleted, so they are cached
forever once read. A commit read back is checked against its id: an edited file is refused.

On an object store a history walk would pay one round trip per commit, one after the other (a
commit's parents are known only once it is read). After :data:`PREFETCH_AFTER` cold reads the
store therefore lists the commits and reads them all at once on a thread pool, unless there are
more than :data:`PREFETCH_LIMIT` of them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from trimerge.lineage.storage.ids import new_ulid
from trimerge.lineage.commit import Commit, TableVersion, digest
from trimerge.lineage.storage.documents import without_nonce
from trimerge.lineage.errors import CorruptRepositoryError, RefNotFoundError

if TYPE_CHECKING:
    from trimerge.lineage.ports import DocumentStore

FOLDER = "commits"
PREFETCH_AFTER = 32
PREFETCH_LIMIT = 50_000
PREFETCH_THREADS = 32


def commit_key(commit_id: str) -> str:
    return f"{FOLDER}/{commit_id[:2]}/{commit_id[2:]}.json"


class GraphFromCommits:
    """The graph interface (:class:`~trimerge.lineage.history.graph.CommitGraph`) of any store that
    can ``get`` a commit: parents, generation and time are read from the commit itself."""

    def get(self, commit_id: str) -> Commit:
        raise NotImplementedError

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.get(commit_id).parents

    def generation(self, commit_id: str) -> int:
        return self.get(commit_id).generation

    def created_at(self, commit_id: str) -> float:
        return self.get(commit_id).created_at.timestamp()


class CommitStore(GraphFromCommits):
    """Read and create commits; also the commit graph seen by :mod:`trimerge.lineage.history.graph`."""

    def __init__(self, docs: "DocumentStore"):
        self.docs = docs
        self._cache: dict[str, Commit] = {}
        self._cold_reads = 0

    # -- store
    def get(self, commit_id: str) -> Commit:
        """The commit with this full id (:class:`RefNotFoundError` if there is none)."""
        c = self._cache.get(commit_id)
        if c is not None:
            return c
        self._cold_reads += 1
        if self._cold_reads == PREFETCH_AFTER and self.docs.remote:
            self.prefetch()
            if commit_id in self._cache:
                return self._cache[commit_id]
        key = commit_key(commit_id)
        doc = self.docs.get(key) if isinstance(commit_id, str) and len(commit_id) > 2 else None
        if doc is None:
            raise RefNotFoundError(f"no commit {commit_id}")
        return self._parsed(commit_id, key, doc)

    def _parsed(self, commit_id: str, key: str, doc: Any) -> Commit:  # whatever the store held: checked below
        try:
            c = Commit.from_json(without_nonce(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRepositoryError(f"{self.docs.where}/{key}: malformed commit ({exc!r})") from None
        if c.id != commit_id or digest(c.body()) != commit_id:
            raise CorruptRepositoryError(f"{self.docs.where}/{key}: content does not match the commit id "
                                         "(the file was edited or damaged)")
        self._cache[commit_id] = c
        return c

    def prefetch(self) -> None:
        """Read every stored commit into the cache, many requests at a time."""
        from concurrent.futures import ThreadPoolExecutor

        keys = []
        for key in self.docs.keys_below(FOLDER):
            keys.append(key)
            if len(keys) > PREFETCH_LIMIT:
                return
        wanted = [(k, k.split("/", 1)[1].replace("/", "").removesuffix(".json")) for k in keys]
        wanted = [(k, cid) for k, cid in wanted if cid not in self._cache]
        with ThreadPoolExecutor(PREFETCH_THREADS) as pool:
            docs = list(pool.map(lambda kc: self.docs.get(kc[0]), wanted))
        for (key, cid), doc in zip(wanted, docs):
            if doc is not None:
                try:
                    self._parsed(cid, key, doc)
                except CorruptRepositoryError:
                    pass  # reported when (and if) the commit is really read

    def exists(self, commit_id: str) -> bool:
        return commit_id in self._cache or self.docs.exists(commit_key(commit_id))

    def put(self, commit: Commit) -> None:
        """Store a commit (a no-op if the same id exists: ids are content digests)."""
        self.docs.create(commit_key(commit.id), commit.to_json(), nonce=False)
        self._cache[commit.id] = commit

    def build(self, *, parents: Sequence[str], actor: str, message: str, metadata: Mapping[str, str],
              branch: str, tables: Mapping[str, TableVersion], created_at: datetime,
              ulid: str | None = None) -> Commit:
        """A new commit on top of ``parents`` (not stored yet)."""
        generation = 1 + max((self.get(p).generation for p in parents), default=0)
        return Commit.build(
            ulid=ulid or new_ulid(), parents=tuple(parents), actor=actor, created_at=created_at,
            message=message, metadata={str(k): str(v) for k, v in (metadata or {}).items()}, branch=branch,
            generation=generation, tables=dict(tables),
        )

    def ids_with_prefix(self, prefix: str) -> list[str]:
        prefix = prefix.lower()
        if len(prefix) < 2:
            shards = [s for s in self.docs.children(FOLDER) if s.startswith(prefix)]
        else:
            shards = [prefix[:2]]
        out = []
        for shard in shards:
            for key in self.docs.list(f"{FOLDER}/{shard}"):
                cid = shard + key.rsplit("/", 1)[1].removesuffix(".json")
                if cid.startswith(prefix):
                    out.append(cid)
        return sorted(out)

    def all_ids(self) -> list[str]:
        return self.ids_with_prefix("")
