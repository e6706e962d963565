"""Copies work where they land: rewrite the absolute locations Lance records in fork metadata.

Why this exists: a trimerge fork is a Lance branch (``tables/<dataset>/tree/f-<ulid>``), and Lance
records the dataset root it was branched from as an *absolute* base path in every manifest of the
fork (``Manifest.base_paths``, protobuf field 18) and in the fork's Clone transaction (the
``_transactions/*.txn`` file and the transaction section inline in the manifest). A repository
copied or moved by any plain tool (cp, rsync, ``aws s3 sync``, a restored backup) therefore still
points back at the old place: with the original gone its branches cannot be read, and with the
original still there they would silently read (and write next to) the original's files.

pylance 14 has no API to change a base path (``add_bases`` only adds one, in a new version, and
commits name old versions by number), so the fix is the one the Lance format suggests: edit the
base paths in the manifests, a metadata-only operation. :func:`rebase_manifest` and
:func:`rebase_transaction` (from :mod:`~trimerge.lineage.tables.basepaths`, re-exported here) do
that on bytes.

:func:`relocate` applies it to a whole repository: every manifest and transaction file of every
fork (and of the served pinned copies of :mod:`trimerge.lineage.tables.served`), then the manifest
sizes Lance caches in ``_refs/**.json``, and ``_trimerge/repo.json``'s ``location`` *last*: until
then the repository still counts as moved, so an interrupted run (kill -9) is finished by the next
one. Each file is replaced whole and atomically (a compare-and-swap put on the storage backend), a
file already naming the new place is skipped, and nothing under the old location is ever opened: the
files are edited as bytes, never through Lance, before they name the new place.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Callable

from trimerge.lineage.errors import CorruptRepositoryError
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.location import META_DIR, TABLES_DIR, Location
from trimerge.lineage.tables.basepaths import manifest_with, rebase_manifest, rebase_transaction, transaction_with

__all__ = ["RELOCATE_LEASE", "RelocationResult", "moved_from", "moved_message", "rebase_manifest",
           "rebase_transaction", "relocate", "relocate_on_open", "same_place", "still_moved"]

#: One relocation at a time (a second one waits, then finds nothing to do).
RELOCATE_LEASE = "locks/__relocate__.lock"
#: :data:`trimerge.lineage.tables.served.SERVED_DIR` (not imported: that module imports the namespace client).
SERVED_DIR = "served"

# ------------------------------------------------------------------------------------------ a repository
@dataclass
class RelocationResult:
    """What :func:`relocate` did. ``relocated`` is False when there was nothing to do (the
    repository already names where it is)."""

    location: str
    old_location: str | None = None
    relocated: bool = False
    datasets: int = 0
    forks: int = 0
    files_rewritten: int = 0
    files_unchanged: int = 0
    refs_fixed: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def same_place(recorded: str, location: Location) -> bool:
    """Whether the location ``repo.json`` records leads to ``location`` (equal, or, on a local disk,
    the same folder once symbolic links are resolved: a link from the old place is not a move)."""
    if recorded == location.uri:
        return True
    if not location.is_local or "://" in recorded.replace("file://", "", 1):
        return False
    here = os.path.realpath(location.uri)
    return os.path.realpath(recorded.replace("file://", "", 1)) == here


def moved_from(location: Location, marker: dict | None) -> str | None:
    """The old location of a repository copied or moved to ``location`` (None: not moved)."""
    recorded = marker.get("location") if isinstance(marker, dict) else None
    if not isinstance(recorded, str) or not recorded or same_place(recorded, location):
        return None
    return recorded


def _mapper(old: str, new: Location, dataset: str) -> Callable[[str], str]:
    """How base paths of ``dataset``'s forks change: below the recorded old location (any dataset),
    or naming this dataset's root or one of its forks under any earlier place (a dataset folder is
    named by a ULID, so ``<anywhere>/tables/<dataset>`` is this one: forks made while the
    repository was reached through a symbolic link, an object-store root written without its
    scheme)."""
    old_tables, new_tables = old.rstrip("/") + "/" + TABLES_DIR, new.join(TABLES_DIR)
    if old_tables.startswith("file://"):
        old_tables = old_tables[len("file://"):]
    marker = f"/{TABLES_DIR}/{dataset}"

    def mapped(path: str) -> str:
        if path == new_tables or path.startswith(new_tables + "/"):
            return path
        if path == old_tables or path.startswith(old_tables + "/"):
            return new_tables + path[len(old_tables):]
        at = len(path) - len(marker) if path.endswith(marker) else path.find(marker + "/tree/")
        return new_tables + path[at + len(TABLES_DIR) + 1:] if at >= 0 else path

    mapped.needle = f"/{TABLES_DIR}".encode()  # type: ignore[attr-defined]
    return mapped


def _rebase_file(key: str, mapped: Callable[[str], str], data: bytes) -> bytes:
    return (transaction_with if key.endswith(".txn") else manifest_with)(data, mapped)


# A version's manifest, and a manifest Lance staged for a version the namespace never took
# (``N.manifest-<id>``, left by a refused or interrupted client write): it names the old place too.
_MANIFEST_KEY = re.compile(r"/_versions/\d+\.manifest(-[A-Za-z0-9_-]+)?$")
_TXN_KEY = re.compile(r"/_transactions/[^/]+\.txn$")


def _put(backend: Any, key: str, change: Callable[[bytes], bytes]) -> bool | None:
    """Replace ``key`` by ``change(its bytes)``, whole and atomically (compare-and-swap, so a write
    beside is never lost); True if rewritten, False if already right, None if the file is gone."""
    for _attempt in range(10):
        stored = backend.get(key)
        if stored is None:
            return None
        new = change(stored.data)
        if new == stored.data:
            return False
        path = os.path.join(backend.root, key) if hasattr(backend, "root") else None  # a local disk
        mode = os.stat(path).st_mode & 0o777 if path else None
        if backend.swap(key, new, stored.version) is not None:
            if path and mode is not None:  # the replacement is a fresh temporary file: keep who may read it
                os.chmod(path, mode)
            return True
    raise CorruptRepositoryError(f"{key} keeps changing while being relocated; retry")


def _rewrite_dataset(tables: Any, dataset: str, mapped: Callable[[str], str], result: RelocationResult,
                     progress: Callable[[str], None] | None) -> None:
    """Every manifest and transaction of every fork of one dataset, then its refs' manifest sizes."""
    keys = sorted(k for k in tables.keys_below(f"{dataset}/tree") if _MANIFEST_KEY.search(k) or _TXN_KEY.search(k))
    result.forks += len({k.split("/_versions/")[0].split("/_transactions/")[0] for k in keys})

    def one(key: str) -> bool | None:
        try:
            done = _put(tables, key, partial(_rebase_file, key, mapped))
        except CorruptRepositoryError as exc:
            raise CorruptRepositoryError(f"{TABLES_DIR}/{key}: {exc}; nothing was relocated to this place yet: "
                                         "restore the file from the original, then run it again") from None
        if done:
            crashpoint("relocate_file_rewritten")
        if progress is not None:
            progress(key)
        return done

    for done in _each(tables, keys, one):
        result.files_rewritten += bool(done)
        result.files_unchanged += done is False
    refs = [k for k in tables.keys_below(f"{dataset}/_refs") if k.endswith(".json")]
    fixed = _each(tables, refs, lambda key: _put(tables, key, partial(_fixed_ref, tables, dataset)))
    result.refs_fixed += sum(bool(done) for done in fixed)


def _each(backend: Any, keys: list[str], fn: Callable[[str], Any]) -> list[Any]:
    """``fn`` of each key: one after the other on a local disk, 8 at a time on an object store
    (a request's round trip dominates there)."""
    if not getattr(backend, "remote", False) or len(keys) < 2:
        return [fn(k) for k in keys]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8, thread_name_prefix="trimerge-relocate") as pool:
        return list(pool.map(fn, keys))


def _fixed_ref(tables: Any, dataset: str, data: bytes) -> bytes:
    """A Lance branch or tag document with ``manifestSize`` (a size hint for the manifest it starts
    from or names) set to that manifest's size now; unchanged when it is right or unknown."""
    try:
        doc = json.loads(data)
    except ValueError:
        return data
    if not isinstance(doc, dict) or not isinstance(doc.get("manifestSize"), int):
        return data
    if "parentVersion" in doc:  # a branch: it starts from its parent's manifest
        branch, version = doc.get("parentBranch"), doc.get("parentVersion")
    else:  # a tag
        branch, version = doc.get("branch"), doc.get("version")
    if not isinstance(version, int) or version < 0 or (branch is not None and (
            not isinstance(branch, str) or branch.startswith("/") or ".." in branch.split("/"))):
        return data  # not a document Lance wrote: left alone, and nothing outside the dataset is read
    folder = dataset if branch in (None, "main") else f"{dataset}/tree/{branch}"
    stored = tables.get(f"{folder}/_versions/{2**64 - 1 - version:020d}.manifest")
    if stored is None or len(stored.data) == doc["manifestSize"]:
        return data
    doc["manifestSize"] = len(stored.data)
    return json.dumps(doc, indent=2).encode()


def _rewrite_served(meta: Any, old: str, new: Location, result: RelocationResult) -> None:
    """The served pinned copies (shallow clones of fork states, a cache): same rewrite."""
    for key in list(meta.keys_below(SERVED_DIR)):
        if _MANIFEST_KEY.search(key) or _TXN_KEY.search(key):
            mapped = _mapper(old, new, key.split("/")[1])  # served/<dataset>/<lance branch>/v<n>/...
            try:
                done = _put(meta, key, partial(_rebase_file, key, mapped))
            except CorruptRepositoryError:  # a damaged cache entry is no reason to stop the move: left as is
                continue
            result.files_rewritten += bool(done)
            result.files_unchanged += done is False


def _location(target: Any, storage_options: Any) -> tuple[Location, float]:
    if hasattr(target, "table_store"):  # a Repository (not imported: the facade imports this module)
        return target.location, target.lock_timeout
    if isinstance(target, Location):
        return target, 30.0
    return Location.parse(target, storage_options), 30.0


def relocate(target: Any, *, storage_options: Any = None,
             progress: Callable[[str], None] | None = None, lock_timeout: float | None = None) -> RelocationResult:
    """Make a copied or moved repository name the place it is now (see the module docstring).

    ``target``: a :class:`~trimerge.lineage.repository.Repository`, a :class:`Location`, or a path
    or URI (with ``storage_options``). Idempotent: a repository that names its place already comes
    back with ``relocated=False``. ``progress`` hears each fork file checked. Raises
    :class:`RepositoryNotFoundError` when ``target`` is no repository."""
    from trimerge.lineage.errors import ConcurrentWriteError, RepositoryNotFoundError
    from trimerge.lineage.storage.documents import Documents, dumps
    from trimerge.lineage.storage.lease import Lease
    from trimerge.lineage.storage.marker import REPO_DOC, read_marker

    started = time.monotonic()
    location, timeout = _location(target, storage_options)
    docs = Documents(location.backend(META_DIR), location.join(META_DIR))
    result = RelocationResult(location.uri)
    marker = read_marker(docs)
    if marker is None:
        raise RepositoryNotFoundError(f"no trimerge repository at {location.uri}")
    if moved_from(location, marker) is None:
        return result
    lease = Lease(docs, RELOCATE_LEASE, f"relocate to {location.uri}")
    lease.acquire(timeout if lock_timeout is None else lock_timeout, "the repository's relocation")
    try:
        stored = docs.read(REPO_DOC)  # again, under the lease: another process may have finished
        old = moved_from(location, stored.doc if stored else None)
        if stored is None or old is None:
            return result
        result.old_location = old
        tables = location.backend(TABLES_DIR)
        for dataset in tables.folders(""):
            result.datasets += 1
            _rewrite_dataset(tables, dataset, _mapper(old, location, dataset), result, progress)
            lease.renew_if_due()
        _rewrite_served(docs.backend, old, location, result)
        crashpoint("relocate_before_marker")
        if docs.backend.swap(REPO_DOC, dumps({**stored.doc, "location": location.uri}), stored.version) is None:
            raise ConcurrentWriteError(f"{location.join(META_DIR, REPO_DOC)} changed during relocation; retry")
        result.relocated = True
    finally:
        lease.release()
    result.seconds = round(time.monotonic() - started, 3)
    return result


def relocate_on_open(repo: Any) -> RelocationResult:
    """A read-write open of a moved repository relocates it before anything else (recovery
    included) opens a fork: afterwards nothing of it names the old place."""
    result = relocate(repo)
    repo.table_store.moved_from = None
    return result


def still_moved(location: Location) -> str | None:
    """Where the repository at ``location`` was before, if it has not been relocated yet (read now:
    a reader that opened it before a relocation finished sees the relocation)."""
    from trimerge.lineage.storage.documents import Documents
    from trimerge.lineage.storage.marker import read_marker

    return moved_from(location, read_marker(Documents(location.backend(META_DIR), location.join(META_DIR))))


def moved_message(old: str, new: str) -> str:
    """The one line a read-only open of a moved repository raises with."""
    return (f"the repository was moved or copied from {old} (Lance forks record absolute paths): run "
            f"'trimerge relocate {new}' (or open it read-write, which relocates it), or move or copy the "
            f"repository back to {old}, or make that path point to {new}")
