"""Moving history between two repositories: the missing commits and the Lance files they name.

Everything is copied by its relative path through the storage backends, so any pair of a local
directory, ``s3://`` and ``az://`` works, and nothing the destination has is copied again:

* commits are content-addressed (``_trimerge/commits/<id[:2]>/<id[2:]>.json``): the walk from the
  tips stops at the first commit the destination has (its ancestors were copied before it);
* a table version is a Lance manifest under ``tables/<dataset>/[tree/<fork>/]_versions/`` plus the
  data, deletion and index files it names and its transaction file; a fork's version also needs the
  fork's Lance branch document (``_refs/branches/<fork>.json``) and its ancestry (the version it
  started from, recursively). All of them are immutable per path, so a file the destination has is
  never sent again. ``_versions/latest_version_hint.json`` is never copied: Lance lists the
  versions when the hint is stale or missing.
* A fork's manifests and Clone transaction name the absolute dataset root of the repository they
  were written in; they are rewritten for the destination (:mod:`trimerge.lineage.tables.relocation`),
  and the manifest size Lance caches in the fork's branch document is set to the destination's.

Before the first copy, the destination gets an ``incoming/`` record naming the Lance branches and
commits on their way (:mod:`trimerge.lineage.safety.incoming`): its gc keeps them until the caller,
having moved its refs, drops the record (:meth:`Transfer.done`; used as a context manager).

The source is untrusted (as git treats a clone's source): every name it gives — a commit id,
a dataset, a Lance branch, a file a manifest names, an index folder — is checked before it becomes
a key (:func:`~trimerge.lineage.tables.keys.inside_table`: a key is used only as it is spelled,
in normal form, below its table's folder), every local file is opened without following a link out of the source
(:mod:`trimerge.remotes.copying`), and every commit is written as the content its id was checked
against. Before the first write, every local file is opened once that way, so a refused transfer
(:class:`CorruptRepositoryError`, one line naming the offending file) has written nothing.

Order, for crash safety: data files first, then manifests (parents first), then fork documents,
then commits (oldest first); the caller moves refs last. A version counts as present only once its
manifest (and a fork's document) is there, and a commit only once its versions are, so rerunning an
interrupted transfer finishes it.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import CorruptRepositoryError, DataReclaimedError, TrimergeError, lance_message
from trimerge.lineage.history.commits import commit_key
from trimerge.lineage.safety import incoming
from trimerge.lineage.safety.boundary import is_panic, translate
from trimerge.lineage.storage.documents import dumps
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.location import TABLES_DIR
from trimerge.lineage.tables.keys import inside_table, plain_name
from trimerge.lineage.tables.relocation import rebase_manifest, rebase_transaction
from trimerge.remotes.copying import STREAM_BYTES, SourceFile, open_source, read_source

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

#: ``progress(files_done, files_total, bytes_done)`` after each file copied.
Progress = Callable[[int, int, int], None]
U64_MAX = 2**64 - 1
#: After this many commits checked one by one on a bucket, the destination's commit ids are listed.
LIST_AFTER = 32
Location = tuple[str, str, int]  # (dataset, Lance branch, version)


@dataclass
class Moved:
    """What a transfer copied."""

    commits: int = 0
    files: int = 0
    bytes: int = 0

    def add(self, other: "Moved") -> None:
        self.commits += other.commits
        self.files += other.files
        self.bytes += other.bytes


def manifest_version(name: str) -> int | None:
    """The version a ``_versions/`` file name stands for (Lance's V1 and V2 naming), else None."""
    stem = name.rsplit("/", 1)[-1]
    if not stem.endswith(".manifest") or not stem[:-9].isdigit():
        return None
    n = int(stem[:-9])
    return U64_MAX - n if n > 2**63 else n


def branch_dir(dataset: str, lance_branch: str) -> str:
    return dataset if lance_branch == "main" else f"{dataset}/tree/{lance_branch}"


_COMMIT_ID = re.compile(r"^[0-9a-f]{64}$")


def _as_uri(folder: str, scheme_of: str) -> str:
    scheme = scheme_of.split("://", 1)[0] + "://" if "://" in scheme_of else ""
    if scheme and "://" not in folder:
        return scheme + folder.lstrip("/")
    return folder


def _roots(src: "Repository", dst: "Repository") -> list[tuple[str, str]]:
    """(old, new) spellings of the ``tables/`` root that fork metadata may carry."""
    old, new = src.location.join(TABLES_DIR), dst.location.join(TABLES_DIR)
    pairs = [(old, new)]
    bare = lambda uri: uri.split("://", 1)[1] if "://" in uri else uri  # noqa: E731 - Lance may drop the scheme
    if "://" in old:
        pairs.append((bare(old), new if "://" not in new else bare(new)))
    return pairs


class Listing:
    """The keys of folders below ``tables/`` on one side, listed once."""

    def __init__(self, backend: Any):
        self.backend = backend
        self._folders: dict[str, set[str]] = {}

    def has(self, key: str) -> bool:
        folder = key.rsplit("/", 1)[0]
        if folder not in self._folders:
            self._folders[folder] = set(self.backend.list(folder))
        return key in self._folders[folder]

    def add(self, key: str) -> None:
        if self.has(key):
            return
        self._folders[key.rsplit("/", 1)[0]].add(key)

    def names(self, folder: str) -> set[str]:
        if folder not in self._folders:
            self._folders[folder] = set(self.backend.list(folder))
        return self._folders[folder]


class Transfer:
    """Copy what ``dst`` lacks of the history of some commits of ``src``."""

    def __init__(self, src: "Repository", dst: "Repository", progress: Progress | None = None):
        self.src, self.dst = src, dst
        self.src_files, self.dst_files = src.table_store.files, dst.table_store.files
        self.src_list, self.dst_list = Listing(self.src_files), Listing(self.dst_files)
        self.progress = progress
        self.roots = _roots(src, dst)
        self.moved = Moved()
        self.record: str | None = None  # the destination's incoming/ record of this transfer
        self._fork_points: dict[tuple[str, str], tuple[str, int]] = {}
        self._threads = 8 if (getattr(self.src_files, "remote", False) or getattr(self.dst_files, "remote", False)) else 4

    def done(self) -> None:
        """The refs naming what was copied have moved (or the transfer failed): drop the record."""
        if self.record is not None:
            incoming.finish(self.dst.docs, self.record)
            self.record = None

    def __enter__(self) -> "Transfer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done()

    # ------------------------------------------------------------------ an untrusted source
    def _refused(self, what: str) -> CorruptRepositoryError:
        return CorruptRepositoryError(f"{self.src.uri}: {what}: refused (a forged or damaged repository)")

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Whatever reading the source's metadata raises is a :class:`TrimergeError`: a file that
        vanished meanwhile or a full disk as the API's edge says it, anything else — a document or
        manifest that does not parse, a panic of Lance's reader on forged bytes — a damaged source."""
        try:
            yield
        except TrimergeError:
            raise
        except BaseException as exc:
            if not is_panic(exc) and not isinstance(exc, (OSError, ValueError, RuntimeError, KeyError, TypeError)):
                raise  # KeyboardInterrupt, SystemExit, and bugs of ours
            better = None if is_panic(exc) else translate(exc)
            if better is not None:
                raise better from exc
            detail = " ".join(lance_message(exc).split())[:200] or type(exc).__name__
            raise CorruptRepositoryError(f"{self.src.uri}: {what} cannot be read ({detail}): a damaged or forged "
                                         "repository") from None

    def _check_location(self, loc: Location) -> None:
        dataset, lance_branch, version = loc
        if not plain_name(dataset) or not (lance_branch == "main" or plain_name(lance_branch)) \
                or type(version) is not int or not 0 <= version < 2**63:
            raise self._refused(f"a commit names table data {loc!r}, which is no table version inside tables/")

    def _check_key(self, key: str, loc: Location, what: str) -> str:
        if not inside_table(key, loc[0]):
            raise self._refused(f"version {loc[2]} of {loc[0]} ({loc[1]}) names the {what} {key!r}, which is not "
                                f"inside its table's folder ({TABLES_DIR}/{loc[0]}/)")
        return key

    # ------------------------------------------------------------------ what is missing
    def missing_commits(self, tips: Iterable[str]) -> list[Commit]:
        """Commits reachable from ``tips`` that ``dst`` lacks, oldest first. A commit ``dst``'s gc
        condemned (the leftover of an interrupted transfer) counts as missing: its data comes again."""
        with self._reading("its commits"):
            return self._missing_commits(tips)

    def _missing_commits(self, tips: Iterable[str]) -> list[Commit]:
        condemned = set(self.dst.reclaimed.read()[0])
        seen: set[str] = set()
        stack = [t for t in tips if t]
        out: list[Commit] = []
        known: set[str] | None = None  # dst's commit ids, listed once a long walk makes that cheaper
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen.add(cid)
            if not isinstance(cid, str) or not _COMMIT_ID.match(cid):
                raise self._refused(f"a ref or commit names the commit {str(cid)[:80]!r}, which is no commit id")
            if known is None and len(seen) > LIST_AFTER and getattr(self.dst.docs.backend, "remote", False):
                known = set(self.dst.commits.all_ids())
            there = cid in known if known is not None else self.dst.commits.exists(cid)
            if there and cid not in condemned:
                continue
            c = self.src.commit(cid)
            out.append(c)
            stack.extend(c.parents)
        return sorted(out, key=lambda c: (c.generation, c.created_at, c.id))

    def _manifest_key(self, listing: Listing, loc: Location) -> str | None:
        folder = f"{branch_dir(loc[0], loc[1])}/_versions"
        for key in listing.names(folder):
            if manifest_version(key) == loc[2]:
                return key
        return None

    def _fork_doc_key(self, dataset: str, lance_branch: str) -> str:
        return f"{dataset}/_refs/branches/{lance_branch}.json"

    def present(self, loc: Location) -> bool:
        """Whether ``dst`` has this Lance version complete (manifest, and a fork's document)."""
        if self._manifest_key(self.dst_list, loc) is None:
            return False
        return loc[1] == "main" or self.dst_list.has(self._fork_doc_key(loc[0], loc[1]))

    def _fork_point(self, dataset: str, lance_branch: str) -> tuple[str, int]:
        key = (dataset, lance_branch)
        if key not in self._fork_points:
            self._fork_points[key] = self._read_fork_point(dataset, lance_branch)
        return self._fork_points[key]

    def _read_fork_point(self, dataset: str, lance_branch: str) -> tuple[str, int]:
        key = self._fork_doc_key(dataset, lance_branch)
        where = self.src.location.join(TABLES_DIR, key)
        with self._reading(where):
            data = read_source(self.src_files, key, where)
            if data is None:
                raise CorruptRepositoryError(f"{self.src.uri}: Lance branch {lance_branch} of {dataset} has no branch "
                                             "document")
            doc = json.loads(data)
            return (doc.get("parentBranch") or "main"), int(doc["parentVersion"])

    def locations(self, commits: Iterable[Commit]) -> list[Location]:
        """Every Lance version the commits name and ``dst`` lacks, with their fork ancestry, parents first."""
        order: list[Location] = []
        seen: set[Location] = set()

        def visit(loc: Location) -> None:
            if loc in seen:
                return
            self._check_location(loc)
            seen.add(loc)
            if self.present(loc):
                return
            if loc[1] != "main":
                parent, at = self._fork_point(loc[0], loc[1])
                visit((loc[0], parent, at))
                if loc[2] != at:
                    visit((loc[0], loc[1], at))  # the fork's first version (its Clone)
            order.append(loc)

        with self._reading("a fork's ancestry"):  # (a forged chain of forks deeper than Python's stack)
            for c in commits:
                for tv in c.tables.values():
                    visit(tv.location)
        return order

    def files_of(self, loc: Location) -> list[str]:
        """Keys below ``tables/`` of the data, deletion, index and transaction files of one version,
        each checked to lie inside its table's folder."""
        with self._reading(f"version {loc[2]} of {loc[0]} ({loc[1]})"):
            return self._files_of(loc)

    def _files_of(self, loc: Location) -> list[str]:
        dataset, lance_branch, version = loc
        store = self.src.table_store
        tv = TableVersion(dataset, lance_branch, version, "", ())
        ds = store.open(dataset, lance_branch, version)
        root = self.src.location.join(TABLES_DIR).rstrip("/") + "/"
        own = store.branch_folder(tv)
        bases = {k: str(b.path) for k, b in ds.base_paths().items()}
        try:
            named = store.data_files(tv)
        except CorruptRepositoryError as exc:
            raise CorruptRepositoryError(f"{exc}: refused") from None
        keys = [self._check_key(k, loc, "data file") for k in named]
        for fragment in ds.get_fragments():
            deletion = fragment.metadata.deletion_file
            if deletion is None:
                continue
            folder = _as_uri(own if deletion.base_id is None else bases.get(deletion.base_id, "?"), self.src.uri)
            if folder.startswith(root):
                keys.append(self._check_key(f"{folder[len(root):]}/{deletion.path(fragment.fragment_id)}", loc,
                                            "deletion file"))
        for _name, folder in store.index_folders(tv):
            keys.extend(self._check_key(k, loc, "index file")
                        for k in self.src_files.keys_below(self._check_key(folder, loc, "index folder")))
        try:
            txn = ds.read_transaction(version)
        except (OSError, ValueError, RuntimeError, TypeError):
            # pylance 14 cannot decode some transactions (a compaction's RewrittenIndex raises
            # TypeError). The .txn file is a copy of the manifest's inline transaction that readers
            # never need, so the version is copied without it.
            txn = None
        if txn is not None:
            key = f"{branch_dir(dataset, lance_branch)}/_transactions/{txn.read_version}-{txn.uuid}.txn"
            if inside_table(key, dataset) and self.src_list.has(key):
                keys.append(key)
        return keys

    # ------------------------------------------------------------------ copying
    def _rebased(self, key: str, data: bytes) -> bytes:
        if "/tree/" not in key:
            return data
        rebase = rebase_manifest if key.endswith(".manifest") else rebase_transaction if key.endswith(".txn") else None
        if rebase is None:
            return data
        for old, new in self.roots:
            if old != new:
                data = rebase(data, old, new)
        return data

    def _open(self, key: str) -> SourceFile:
        where = self.src.location.join(TABLES_DIR, key)
        source = open_source(self.src_files, key, where)
        if source is None:
            raise CorruptRepositoryError(f"{where} is missing")
        return source

    def _copy(self, key: str) -> int:
        """Copy one file below ``tables/`` unless ``dst`` has it; the bytes written. The source file is
        opened once (never through a link out of the source) and every way of copying reads that."""
        rewritten = "/tree/" in key and key.endswith((".manifest", ".txn"))
        with self._open(key) as source:
            if not rewritten:
                linked = source.link_to(self.dst_files, key)
                if linked is not None:
                    return linked
                if source.size is None or source.size >= STREAM_BYTES:  # None: in a bucket, its size known once read
                    streamed = source.stream_to(self.dst_files, key)
                    if streamed is not None:
                        return streamed
            data = self._rebased(key, source.read())
        written = self.dst_files.create(key, data)
        return len(data) if written is not None else 0

    def _check_sources(self, keys: Iterable[str]) -> None:
        """Open every local source file once (refusing links out of the source and what is not a
        file) before the first write, so that a refused transfer has changed nothing."""
        if getattr(self.src_files, "remote", False):
            return  # a bucket has no links; a missing object is found when it is copied
        for key in keys:
            self._open(key).close()

    def _copy_all(self, keys: list[str], total: int) -> None:
        def one(key: str) -> int:
            n = self._copy(key)
            crashpoint("transfer_file_copied")
            return n

        if len(keys) > 1 and self._threads > 1:
            with ThreadPoolExecutor(self._threads) as pool:
                results = pool.map(one, keys)
                for key, n in zip(keys, results):
                    self._count(key, n, total)
        else:
            for key in keys:
                self._count(key, one(key), total)

    def _count(self, key: str, n: int, total: int) -> None:
        self.dst_list.add(key)
        if n:
            self.moved.files += 1
            self.moved.bytes += n
        self._done += 1
        if self.progress is not None:
            self.progress(self._done, total, self.moved.bytes)

    def _fork_doc(self, dataset: str, lance_branch: str) -> bytes:
        """The fork's Lance branch document, with the manifest size of its parent version as ``dst`` has it."""
        key = self._fork_doc_key(dataset, lance_branch)
        where = self.src.location.join(TABLES_DIR, key)
        with self._reading(where):
            data = read_source(self.src_files, key, where)
            doc = json.loads(data) if data is not None else {}
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            parent, at = (doc.get("parentBranch") or "main"), int(doc.get("parentVersion", 0))
        if "manifestSize" in doc:
            mkey = self._manifest_key(self.dst_list, (dataset, parent, at))
            found = self.dst_files.get(mkey) if mkey else None
            if found is not None:
                doc["manifestSize"] = len(found.data)
        return json.dumps(doc, indent=2).encode()

    def run(self, tips: Iterable[str]) -> Moved:
        """Copy everything ``dst`` lacks to hold ``tips`` and their history; refs are the caller's."""
        commits = self.missing_commits(tips)
        locations = self.locations(commits)
        plain: list[str] = []
        seen: set[str] = set()
        for loc in locations:
            for key in self.files_of(loc):
                if key not in seen and not self.dst_list.has(key):
                    seen.add(key)
                    plain.append(key)
        manifests = []
        for loc in locations:
            found = self._manifest_key(self.src_list, loc)
            if found is None:
                raise DataReclaimedError(f"{self.src.uri}: version {loc[2]} of {loc[0]} ({loc[1]}) is gone")
            if not self.dst_list.has(found):
                manifests.append(found)
        forks = sorted({(d, b) for d, b, _v in locations if b != "main"
                        and not self.dst_list.has(self._fork_doc_key(d, b))})
        total = len(plain) + len(manifests) + len(forks) + len(commits)
        self._check_sources([*plain, *manifests, *(self._fork_doc_key(d, b) for d, b in forks)])
        if commits or locations:  # the destination's gc keeps all this until the caller's refs moved
            self.record = incoming.record(self.dst.docs, [c.id for c in commits], [(d, b) for d, b, _v in locations])
        self._done = 0
        self._copy_all(plain, total)
        crashpoint("transfer_data_copied")
        for key in manifests:  # parents first: a version never lands before the one it starts from
            self._count(key, self._copy(key), total)
        crashpoint("transfer_manifests_copied")
        for dataset, lance_branch in forks:
            key = self._fork_doc_key(dataset, lance_branch)
            data = self._fork_doc(dataset, lance_branch)
            self._count(key, len(data) if self.dst_files.create(key, data) is not None else 0, total)
        # Oldest generation first (a commit present means its ancestors are); one generation at once.
        generations: dict[int, list[Commit]] = {}
        for c in commits:
            generations.setdefault(c.generation, []).append(c)
        for generation in sorted(generations):
            batch = generations[generation]
            if len(batch) > 1 and self._threads > 1:
                with ThreadPoolExecutor(self._threads) as pool:
                    sizes = list(pool.map(self._copy_commit, batch))
            else:
                sizes = [self._copy_commit(c) for c in batch]
            for n in sizes:
                if n:
                    self.moved.commits += 1
                    self.moved.bytes += n
                self._done += 1
            if self.progress is not None:
                self.progress(self._done, total, self.moved.bytes)
        return self.moved

    def _copy_commit(self, c: Commit) -> int:
        """Write one commit as the commit store does, from the content its id was checked against
        when the source's copy was read (nothing else of the source's file travels); the bytes written."""
        data = dumps(c.to_json())
        written = self.dst.docs.backend.create(commit_key(c.id), data)
        crashpoint("transfer_commit_copied")
        return len(data) if written is not None else 0
