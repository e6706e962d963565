"""The Lance boundary of the namespace: which location and version serve a ref, and what happens
to a commit a Lance client asks the namespace to take.

What Lance 14 / LanceDB 0.40 do (measured; see tests/test_lance_boundary.py):

* A client opens exactly the version the namespace names only when ``describe_table`` answers
  ``managed_versioning=True``: Lance then asks ``list_table_versions`` for the latest version and
  ``describe_table_version`` for any other, and commits through ``create_table_version``. Without
  it, Lance opens the newest manifest it finds at the location, whatever ``version`` says.
* A managed table must be located at a dataset root whose manifests are on Lance's ``main``: Lance
  checks after loading that the manifest belongs to the branch the client asked for, and a plain
  ``open_table(name)`` asks for ``main`` ("open of branch 'main' resolved a manifest belonging to
  branch 'f-…'", an internal error). A trimerge fork is a Lance branch (``tree/f-<ulid>``), so its
  states cannot be served managed in place.
* So a fork's state is served from a *pinned location*: a shallow clone of exactly that Lance
  version (``ds.shallow_clone``: a manifest that references the fork's files, ~KB, no data copied)
  under ``_trimerge/served/<dataset>/<lance branch>/v<version>``, whose manifest is on its own
  ``main`` — managed like any other table. The clone is made on first use and reused; it is a
  cache, never repository state.
* A write through a managed table reaches the namespace as ``create_table_version``, after Lance
  wrote the data files and a staging manifest (``_versions/<n>.manifest-<uuid>``). On a branch
  trimerge takes the commit, inside a :class:`~trimerge.lineage.transaction.Transaction` (the
  branch lease; one trimerge commit): on the branch's own Lance ``main`` chain the staging manifest
  becomes the next version as it is; on a fork (written in a pinned copy) or on a table the branch
  still shares with its parent, the staged Lance operation (Append, Delete, Update, CreateIndex) is
  replayed on the branch's own fork — new files copied from the pinned copy, every file's base
  path mapped to the fork's — the exact rows the client computed (:func:`replay_on_fork`). On a
  tag, commit id, expression or protected branch it is refused and its files removed.
* A client handle that is behind (another writer committed first, or the commit's own upkeep
  compacted after the client's version) stages a version that is not the next one: the namespace
  answers ``ConcurrentModificationError`` and leaves the files; Lance reads the newer versions,
  rebases its transaction and stages again, which then becomes a commit.
* Lance gives a refusing namespace no voice: whatever ``create_table_version`` raises, Lance logs
  two WARN lines, reads the version back (``describe_table_version``), and raises "Commit result
  for version N is unknown"; the namespace's message appears only in the WARN line. Nothing Lance
  asks before it writes the data files tells a write from a read, so a refusal cannot come earlier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import lance_namespace as ln

from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.storage.location import META_DIR

if TYPE_CHECKING:
    from trimerge.lineage.hosts import ServedHost

__all__ = ["CLIENT_WRITE", "SERVED_DIR", "Served", "refuse_lance_branch", "refused_extras", "remove_pinned_leftovers",
           "serve", "stale_pinned_locations", "staged_pinned", "take_commit"]

_U64_MAX = 2**64 - 1
#: Pinned locations of fork states, below the repository's metadata folder.
SERVED_DIR = "served"
_PINNED: set[str] = set()  # pinned locations this process has seen complete
#: Commit metadata of a commit a Lance client's write became: the table it wrote.
CLIENT_WRITE = "trimerge.lance_client_write"


def field(request: Any, name: str) -> Any:
    """A request field: Python clients pass pydantic models, Lance's Rust bridge passes dicts."""
    if request is None:
        return None
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)


def manifest_name(version: int) -> str:
    return f"{_U64_MAX - version:020d}.manifest"


def store_path(location: str) -> str:
    """A location as the object-store path Lance hands to the namespace (no scheme, no bucket)."""
    scheme, sep, rest = location.partition("://")
    if sep and scheme != "file":
        return rest.partition("/")[2]
    return (rest if sep else location).lstrip("/")


@dataclass(frozen=True)
class Served:
    """Where a table version is served: a dataset root whose Lance ``main`` holds ``version``."""

    location: str
    version: int
    pinned: bool  # a pinned location (a fork's state), not the table's own dataset

    @property
    def manifest_path(self) -> str:
        return f"{store_path(self.location)}/_versions/{manifest_name(self.version)}"


def serve(repo: "ServedHost", tv: TableVersion, what: str) -> Served:
    """The managed location of ``tv``: its dataset root on Lance ``main``, else a pinned clone."""
    if tv.lance_branch == "main":
        return Served(repo.dataset_path(tv), tv.version, pinned=False)
    parts = (SERVED_DIR, tv.dataset, tv.lance_branch, f"v{tv.version}")
    location = repo.location.join(META_DIR, *parts)
    if location in _PINNED:
        return Served(location, tv.version, pinned=True)
    meta = repo.location.backend(META_DIR)
    manifest = "/".join((*parts, "_versions", manifest_name(tv.version)))
    versions = "/".join((*parts, "_versions"))
    if manifest not in meta.list(versions):
        try:
            source = repo.table_store.open(tv.dataset, tv.lance_branch, tv.version)
            source.shallow_clone(location, (tv.lance_branch, tv.version),
                                 storage_options=repo.table_store.options)
        except (OSError, ValueError, RuntimeError) as exc:
            # a concurrent reader may have made the same clone: then it is there now
            if manifest not in meta.list(versions):
                raise ln.ServiceUnavailableError(
                    f"{what} is Lance version {tv.version} of fork {tv.lance_branch}, which Lance clients open only "
                    f"from a pinned location, and it could not be made ({str(exc).splitlines()[0][:200]}); read it "
                    f"with trimerge instead (repo.dataset(table, ref=...))") from None
    _PINNED.add(location)  # a pinned location never changes: known once, known for the process
    return Served(location, tv.version, pinned=True)


def refuse_lance_branch(request: Any, table: str, ref: str) -> None:
    """Lance asks for a Lance branch (LanceDB's ``branch=``, ``table.branches.checkout``): refused,
    as trimerge branches are refs of the namespace, not Lance branches of one table."""
    branch = field(request, "branch")
    if branch and branch != "main":
        raise ln.InvalidInputError(
            f"{table}: Lance branch {branch!r} refused: trimerge branches are refs, not Lance branches; open "
            f"the branch as a ref (lancedb.connect_namespace('trimerge', {{'root': ..., 'ref': {branch!r}}}) or "
            f"open_table({table!r}, namespace_path=[{branch!r}]))")


def _staging_key(served: Served, request: Any, what: str) -> tuple[str, str]:
    """(staging key, final key) of a commit Lance staged at ``served``, relative to the store root
    of the served location's folder; refused unless it is this location's next version."""
    version = field(request, "version")
    staged = str(field(request, "manifest_path") or "")
    final = f"{store_path(served.location)}/_versions/{manifest_name(int(version or 0))}"
    if not version or not staged.startswith(final + "-") or "/" in staged[len(final):]:
        raise ln.InvalidInputError(f"{what}: Lance staged version {version} at {staged!r}, not at {final}-<id>")
    return staged, final


def remove_pinned_leftovers(repo: "ServedHost", served: Served) -> None:
    """Remove what a refused write left in a pinned location: everything but the clone's manifest,
    version hint and transaction (a refused write's data, deletion and index files, its transaction
    and staging manifest). Best effort: the pinned location is a cache and stays exact regardless,
    as no version names those files."""
    if not served.pinned:
        return
    meta = repo.location.backend(META_DIR)
    folder = served.location[len(repo.location.join(META_DIR)) + 1:]
    keep = {f"_versions/{manifest_name(served.version)}", "_versions/latest_version_hint.json"}
    try:
        import lance

        txn = lance.dataset(served.location, storage_options=repo.table_store.options).read_transaction(served.version)
        if txn is None:
            raise LookupError("the pinned version has no transaction")
        keep.add(f"_transactions/{txn.read_version}-{txn.uuid}.txn")
    except Exception:  # noqa: BLE001 - without the clone's transaction name, transactions stay
        keep.update(k[len(folder) + 1:] for k in meta.keys_below(f"{folder}/_transactions"))
    for key in list(meta.keys_below(folder)):
        if key[len(folder) + 1:] not in keep:
            try:
                meta.delete(key)
            except (OSError, TrimergeError):
                pass


def take_commit(ns: Any, table: str, ref: str, tv: TableVersion, served: Served, request: Any
                ) -> ln.CreateTableVersionResponse:
    """Make the version Lance staged at ``served`` one trimerge commit on branch ``ref``, or refuse it.

    Taken only when ``ref`` is a branch (not a tag, commit id or expression), the table is on the
    branch's own Lance ``main`` chain (not a fork, not a table the branch has not written yet), the
    staged version is the next one after the version the branch's tip has, and the branch is not
    protected; the transaction holds the branch lease, so a concurrent trimerge write either lands
    first (then this commit is refused as stale) or after."""
    repo = ns.repo
    what = f"Lance client write (LanceDB, pylance) to {table} at {ref}"
    instead = ("write with trimerge instead (repo.upsert/delete/transaction(branch=...) or the CLI), or "
               "through LanceDB on a connection whose ref is a writable branch")
    if ref not in repo.branches.names():
        raise ln.UnsupportedOperationError(f"{what} refused: {ref!r} is not a branch (a tag, commit id or "
                                           f"expression names a fixed state); {instead}")
    staged = str(field(request, "manifest_path") or "")
    if served.pinned or not _in_dataset_folder(repo, tv, staged):
        return replay_on_fork(ns, table, ref, tv, request, what, instead)
    staged, final = _staging_key(served, request, what)
    if int(field(request, "version")) != tv.version + 1:
        raise ln.ConcurrentModificationError(
            f"{what} refused: it was built on Lance version {int(field(request, 'version')) - 1}, {ref} is at "
            f"{tv.version}; reopen the table and retry")
    kind = type(_staged_transaction(repo.table_store.files, tv.dataset, staged.rsplit("/", 1)[1],
                                    tv.version + 1)[0].operation).__name__
    if kind not in _REPLAYED:  # schema changes go through trimerge's schema lock (repo.add_columns, ...)
        raise ln.UnsupportedOperationError(f"{what} refused: a Lance {kind} is not taken as a commit (trimerge "
                                           f"takes row writes and index creation); {instead}")
    try:
        writable = ns.writable_repo()
        with writable.transaction(branch=ref, actor=ns.actor, message=ns.message,
                                  metadata={CLIENT_WRITE: table}) as tx:
            now = tx.table_version(table)
            if (now.dataset, now.lance_branch, now.version) != (tv.dataset, tv.lance_branch, tv.version):
                raise ln.ConcurrentModificationError(
                    f"{what} refused: {ref} moved on while LanceDB wrote (it is at Lance version {now.version} of "
                    f"{now.lance_branch}); reopen the table and retry")
            if now.owner != writable.refs.branch(ref).id:
                raise _Shared()
            placed: dict[str, Any] = {}

            def place(ds: Any) -> None:
                if ds.version != tv.version:
                    raise ln.ConcurrentModificationError(
                        f"{what} refused: Lance version {tv.version} of {table} is not its newest stored version "
                        f"({ds.version}); reopen the table and retry")
                files = writable.table_store.files
                base = store_path(served.location).rsplit("/", 1)[1]
                key = f"{base}/_versions/{final.rsplit('/', 1)[1]}"
                found = files.get(f"{base}/_versions/{staged.rsplit('/', 1)[1]}")
                if found is None:
                    raise ln.InvalidInputError(f"{what}: the staged manifest {staged} is missing")
                if files.create(key, found.data) is None:
                    raise ln.ConcurrentModificationError(f"{what} refused: Lance version {tv.version + 1} of "
                                                         f"{table} exists already; reopen the table and retry")
                placed["size"] = len(found.data)

            op = f"Lance client write to {table}"
            tx.write_table(table, op, place)
            tx.message = ns.message or f"Lance client: {kind} on {table}"
    except _Shared:  # ref has not written the table yet: the write becomes its fork's first commit
        return replay_on_fork(ns, table, ref, tv, request, what, instead)
    except TrimergeError as exc:  # a protected branch, a lease not had in time, ...
        raise ln.UnsupportedOperationError(f"{what} refused: {exc}") from None
    files = ns.writable_repo().table_store.files
    try:
        files.delete(f"{store_path(served.location).rsplit('/', 1)[1]}/_versions/{staged.rsplit('/', 1)[1]}")
    except (OSError, TrimergeError):
        pass  # a staging manifest of a committed version: gc removes it
    return ln.CreateTableVersionResponse(version=ln.TableVersion(
        version=tv.version + 1, manifest_path=final, manifest_size=placed.get("size")))


class _Shared(Exception):
    """The table is still on the chain the branch shares with the branch it came from."""



def _manifest_contents(manifest: bytes) -> tuple[set[str], set[str]]:
    """(deletion file names, index uuids) a manifest names, read from the manifest alone."""
    import os
    import shutil
    import tempfile

    import lance

    folder = tempfile.mkdtemp(prefix="trimerge-staged-")
    try:
        os.makedirs(os.path.join(folder, "_versions"))
        with open(os.path.join(folder, "_versions", manifest_name(1)), "wb") as out:
            out.write(manifest)
        ds = lance.dataset(folder)
        deletions = {(f.deletion_file() or "").rsplit("/", 1)[-1] for f in ds.get_fragments()} - {""}
        indices = _index_uuids(ds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return deletions, indices


def refused_extras(repo: "ServedHost", tv: TableVersion, served: Served, request: Any) -> list[str]:
    """Keys (below ``tables/``) of the deletion files and index folders a refused write staged at a
    table's own dataset folder: named by its staging manifest and by no version it was built on.
    Their names are random (``<fragment>-<version>-<random>``, a fresh uuid), so no other write's
    files can match. Lance's orphan sweep leaves such files alone; call before the staging manifest
    is removed."""
    if served.pinned:
        return []
    staged = str(field(request, "manifest_path") or "").rsplit("/", 1)[-1]
    dataset = tv.dataset
    try:
        found = repo.table_store.files.get(f"{dataset}/_versions/{staged}")
        if found is None or ".manifest-" not in staged:
            return []
        deletions, indices = _manifest_contents(found.data)
        keep_del: set[str] = set()
        keep_idx: set[str] = set()
        for version in {tv.version, repo.table_store.latest_version(tv)}:
            ds = repo.table_store.open(dataset, tv.lance_branch, version)
            keep_del |= {(f.deletion_file() or "").rsplit("/", 1)[-1] for f in ds.get_fragments()}
            keep_idx |= _index_uuids(ds)
    except Exception:  # noqa: BLE001 - unreadable: leave the files to gc
        return []
    files = repo.table_store.files
    keys = [f"{dataset}/_deletions/{name}" for name in sorted(deletions - keep_del)]
    for uuid in sorted(indices - keep_idx):
        keys.extend(files.keys_below(f"{dataset}/_indices/{uuid}"))
    return keys


def _index_uuids(ds: Any) -> set[str]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # list_indices: describe_indices lacks uuids
        return {str(i["uuid"]) for i in ds.list_indices()}


def stale_pinned_locations(repo: "ServedHost") -> list[str]:
    """Pinned locations (folders below ``_trimerge/``) of fork states no stored commit has any more:
    for gc to remove (``repo.location.backend(META_DIR).delete_tree(folder)``). A pinned location
    holds a manifest that names the fork's files; once gc reclaims those files it reads nothing."""
    states = {(tv.dataset, tv.lance_branch, tv.version) for c in repo.all_commits() for tv in c.tables.values()
              if tv.lance_branch != "main"}
    meta = repo.location.backend(META_DIR)
    stale = []
    for dataset in meta.folders(SERVED_DIR):
        for branch in meta.folders(f"{SERVED_DIR}/{dataset}"):
            for name in meta.folders(f"{SERVED_DIR}/{dataset}/{branch}"):
                version = name[1:]
                if not (name.startswith("v") and version.isdigit() and (dataset, branch, int(version)) in states):
                    stale.append(f"{SERVED_DIR}/{dataset}/{branch}/{name}")
    return stale


# ---------------------------------------------------------------- a client's write to a fork
_TXN_NAME = re.compile(rb"[0-9]+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.txn")
#: The operations a client's write to a fork is replayed as (what LanceDB's add, delete, update,
#: merge_insert and index creation commit); any other is refused.
_REPLAYED = ("Append", "Delete", "Update", "CreateIndex")


def _pinned_folder(repo: "ServedHost", tv: TableVersion, staged: str) -> str | None:
    """The pinned folder (below ``_trimerge/``) of a fork of ``tv``'s dataset a staging manifest is
    in, if it is (a client handle stays on the location it opened while the ref moves on)."""
    prefix = store_path(repo.location.join(META_DIR)) + "/"
    if not staged.startswith(prefix):
        return None
    parts = staged[len(prefix):].split("/")
    if len(parts) != 6 or parts[:2] != [SERVED_DIR, tv.dataset] or parts[4] != "_versions" \
            or not parts[3].startswith("v") or ".manifest-" not in parts[5]:
        return None
    return "/".join(parts[:4])


def _in_dataset_folder(repo: "ServedHost", tv: TableVersion, staged: str) -> bool:
    """Whether a staging manifest is in ``tv``'s dataset's own ``_versions`` (its Lance ``main``)."""
    folder = f"{store_path(repo.dataset_path(tv))}/_versions/"
    return staged.startswith(folder) and ".manifest-" in staged[len(folder):] and "/" not in staged[len(folder):]


def _staged_transaction(meta: Any, folder: str, staged_name: str, version: int
                        ) -> tuple[Any, dict[int, str], list[str]]:
    """(the Lance transaction, base paths by id, the transaction files it names) of a staging
    manifest in ``folder`` of ``meta``."""
    import os
    import shutil
    import tempfile

    import lance

    manifest = meta.get(f"{folder}/_versions/{staged_name}")
    if manifest is None:
        raise ln.InvalidInputError(f"the staged manifest {folder}/_versions/{staged_name} is missing")
    tmp = tempfile.mkdtemp(prefix="trimerge-staged-")
    try:
        os.makedirs(os.path.join(tmp, "_versions"))
        os.makedirs(os.path.join(tmp, "_transactions"))
        with open(os.path.join(tmp, "_versions", manifest_name(version)), "wb") as out:
            out.write(manifest.data)
        txns = sorted({m.decode() for m in _TXN_NAME.findall(manifest.data)})
        for name in txns:
            found = meta.get(f"{folder}/_transactions/{name}")
            if found is not None:
                with open(os.path.join(tmp, "_transactions", name), "wb") as out:
                    out.write(found.data)
        ds = lance.dataset(tmp)
        bases = {int(k): str(b.path).rstrip("/") for k, b in ds.base_paths().items()}
        return ds.read_transaction(version), bases, txns
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replay_on_fork(ns: Any, table: str, ref: str, tv: TableVersion, request: Any, what: str, instead: str
                   ) -> ln.CreateTableVersionResponse:
    """A client's write to a fork's pinned copy becomes one trimerge commit on the fork.

    Lance wrote the write's new files (data, deletion, index files) into the pinned folder and
    staged a manifest there whose transaction is relative to the copy: the new files are copied to
    the fork's folder, the base paths of the files the operation names are mapped from the copy's
    to the fork's (the dataset root, the fork itself), and the same Lance operation is committed on
    the fork's head inside a transaction on ``ref`` (the branch's lease) — the exact rows the client
    computed. The answer names the staged manifest: the client's handle goes on from it.

    ``shared``: the table is on the Lance ``main`` chain ``ref`` shares with the branch it came
    from (``ref`` has not written it yet): the client staged its write there, with its new files
    in the dataset's folder; the transaction forks the table for ``ref`` (as any first write on a
    branch does) and the operation is committed on the new fork, its files named through the
    fork's base path of the dataset root — nothing is copied, the shared chain does not move."""
    import dataclasses

    import lance
    from lance.fragment import DataFile, DeletionFile

    repo = ns.repo
    staged = str(field(request, "manifest_path") or "")
    shared = _in_dataset_folder(repo, tv, staged)
    if shared:  # the client's files are in the dataset's folder: named through the target's base path
        folder, source = tv.dataset, ns.writable_repo().table_store.files
    else:
        pinned, source = _pinned_folder(repo, tv, staged), repo.location.backend(META_DIR)
        if pinned is None:
            raise ln.InvalidInputError(f"{what}: Lance staged the version at {staged!r}, neither in {tv.dataset} "
                                       f"nor in a pinned copy of one of its forks")
        folder = pinned
    if int(field(request, "version") or 0) != tv.version + 1:
        raise ln.ConcurrentModificationError(
            f"{what} refused: it was built on Lance version {int(field(request, 'version') or 0) - 1} of fork "
            f"{tv.lance_branch}, {ref} is at {tv.version}; reopen the table and retry")
    meta = source
    txn, bases, txn_files = _staged_transaction(meta, folder, staged.rsplit("/", 1)[1], tv.version + 1)
    op = txn.operation
    kind = type(op).__name__
    if kind not in _REPLAYED:
        raise ln.UnsupportedOperationError(f"{what} refused: a Lance {kind} on a fork is not taken as a commit; "
                                           f"{instead}")
    writable = ns.writable_repo()
    root = writable.dataset_path(tv).rstrip("/")
    # where the client's files are: base id -> path (None: the folder the client wrote into)
    own = root if shared else None

    def remap(ds: Any, target_dir: str, copies: list[tuple[str, str]]) -> Any:
        """``op`` with every file it names addressed through ``ds``'s base paths (``ds``: the head the
        operation is committed on, whose own folder is ``target_dir``)."""
        target = {str(b.path).rstrip("/"): int(k) for k, b in ds.base_paths().items()}

        def base(base_id: int | None, name: str) -> int | None:
            path = own if base_id is None else bases.get(int(base_id))
            if path is None:  # written by the client into the pinned folder: copied to the target's
                copies.append((f"{folder}/{name}", f"{target_dir[len(root) - len(tv.dataset):]}/{name}"))
                return None
            if path == target_dir:
                return None
            if path in target:
                return target[path]
            raise ln.UnsupportedOperationError(f"{what} refused: the write names files of {path!r}, which "
                                               f"{ref}'s copy of {table} does not reach; {instead}")

        def fragment(frag: Any) -> Any:
            files = [DataFile(d.path, d.fields, d.column_indices, d.file_major_version, d.file_minor_version,
                              d.file_size_bytes, base(d.base_id, f"data/{d.path}")) for d in frag.files]
            deletion = frag.deletion_file
            if deletion is not None:
                deletion = DeletionFile(deletion.read_version, deletion.id, deletion.file_type,
                                        deletion.num_deleted_rows, base(deletion.base_id, deletion.path(frag.id)))
            return dataclasses.replace(frag, files=files, deletion_file=deletion)

        if kind == "Append":
            return dataclasses.replace(op, fragments=[fragment(f) for f in op.fragments])
        if kind == "Delete":
            return dataclasses.replace(op, updated_fragments=[fragment(f) for f in op.updated_fragments])
        if kind == "Update":
            return dataclasses.replace(op, updated_fragments=[fragment(f) for f in op.updated_fragments],
                                       new_fragments=[fragment(f) for f in op.new_fragments])
        indices = []  # CreateIndex
        for index in op.new_indices:
            if index.base_id is None and own is None:
                for f in index.files or []:
                    base(None, f"_indices/{index.uuid}/{f.path}")
            else:
                index = dataclasses.replace(index, base_id=base(index.base_id, ""))
            indices.append(index)
        return dataclasses.replace(op, new_indices=indices)

    try:
        with writable.transaction(branch=ref, actor=ns.actor, message=ns.message,
                                  metadata={CLIENT_WRITE: table}) as tx:
            now = tx.table_version(table)
            if (now.dataset, now.lance_branch, now.version) != (tv.dataset, tv.lance_branch, tv.version):
                raise ln.ConcurrentModificationError(
                    f"{what} refused: {ref} moved on while the client wrote (it is at Lance version {now.version} "
                    f"of {now.lance_branch}); reopen the table and retry")

            def apply(ds: Any) -> None:
                if ds.version != tv.version:
                    raise ln.ConcurrentModificationError(
                        f"{what} refused: Lance version {tv.version} of {table} is not its newest stored version "
                        f"({ds.version}); reopen the table and retry")
                head = tx.table_version(table)  # ref's own chain: forked by this transaction if it was shared
                target_dir = root if head.lance_branch == "main" else f"{root}/tree/{head.lance_branch}"
                copies: list[tuple[str, str]] = []
                replayed = remap(ds, target_dir, copies)
                files = writable.table_store.files
                for source, target in copies:
                    found = meta.get(source)
                    if found is None:
                        raise ln.InvalidInputError(f"{what}: the client's file {source} is missing")
                    files.create(target, found.data)
                lance.LanceDataset.commit(ds, replayed, read_version=ds.version, max_retries=0)

            tx.write_table(table, f"Lance client write to {table}", apply)
            tx.message = ns.message or f"Lance client: {kind} on {table}"
    except TrimergeError as exc:
        raise ln.UnsupportedOperationError(f"{what} refused: {exc}") from None
    # The client's staging manifest and transaction file: the commit made its own. (Its data files
    # stay: the fork names them, or — in a pinned folder — the client's handle reads them.)
    for key in (f"{folder}/_versions/{staged.rsplit('/', 1)[1]}", *(f"{folder}/_transactions/{t}" for t in txn_files)):
        try:
            meta.delete(key)
        except (OSError, TrimergeError):
            pass
    return ln.CreateTableVersionResponse(version=ln.TableVersion(
        version=tv.version + 1, manifest_path=staged, manifest_size=field(request, "manifest_size")))


def staged_pinned(repo: "ServedHost", tv: TableVersion, request: Any) -> Served | None:
    """The pinned location a client staged a write in (any fork of ``tv``'s dataset), if it did."""
    folder = _pinned_folder(repo, tv, str(field(request, "manifest_path") or ""))
    if folder is None:
        return None
    return Served(repo.location.join(META_DIR, folder), int(folder.rsplit("/v", 1)[1]), pinned=True)
