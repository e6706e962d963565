"""The table store: one Lance dataset per table lineage under ``<repo>/tables/``.

Every Lance call of the repository goes through here, so the storage options reach all of them.
A graph branch forks a table lazily into a Lance branch ``f-<ulid>`` of the same dataset; a commit
names a table's data as (dataset, Lance branch, version). Names read from commit documents are
checked before they become paths: a dataset is one plain name inside ``tables/``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lance
    import pyarrow as pa

from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import CorruptRepositoryError, DataReclaimedError, RepositoryMovedError
from trimerge.lineage.storage.location import TABLES_DIR, Location

_SAFE_COMPONENT = re.compile(r"^[^/\\\x00]+$")
#: ``<table>-<ulid>``: the only folders under ``tables/`` that gc may remove.
DATASET_NAME = re.compile(r"^.+-[0-9a-hjkmnp-tv-z]{26}$")
#: ``f-<ulid>``: the only Lance branches gc may remove.
FORK_NAME = re.compile(r"^f-[0-9a-hjkmnp-tv-z]{26}$")
#: What a repository's Lance session may cache of manifests and file metadata (Lance's default is
#: 1 GiB). Thousands of small manifests fit; a table rewritten by one large upsert has a manifest
#: of ~135 MB per 20M rows (its stable row ids out of order), and holding every version of it a
#: merge opened kept ~410 MB; reading such a manifest again costs less than holding it.
METADATA_CACHE_BYTES = 128 << 20


def _check_component(name: str, what: str) -> str:
    if not isinstance(name, str) or not _SAFE_COMPONENT.match(name) or name in (".", ".."):
        raise CorruptRepositoryError(f"{what} {name!r} is not a name inside the repository's tables/")
    return name


class TableStore:
    """Open, create, fork and remove the repository's Lance datasets."""

    def __init__(self, location: Location, moved_from: str | None = None):
        self.location = location
        self.options = location.lance_options()
        self._session = None  # one Lance session per repository: cached clients and manifests
        # Heads this process committed last, per (dataset, Lance branch): the next write there
        # reuses the dataset object after one cheap "is it still the latest?" check.
        self._heads: dict[tuple[str, str], lance.LanceDataset] = {}
        self.files = location.backend(TABLES_DIR)  # folder-level listing and removal
        self.moved_from = moved_from  # where the repository was created, if it is somewhere else now

    @property
    def session(self):
        if self._session is None:
            self._session = _lance().Session(metadata_cache_size_bytes=METADATA_CACHE_BYTES)
        return self._session

    def uri(self, dataset: str | TableVersion) -> str:
        name = dataset.dataset if isinstance(dataset, TableVersion) else dataset
        return self.location.join(TABLES_DIR, _check_component(name, "dataset"))

    def dataset(self, dataset: str) -> lance.LanceDataset:
        """A dataset's main branch, latest version (for maintenance: branches and tags)."""
        return _lance().dataset(self.uri(dataset), storage_options=self.options, session=self.session)

    def open(self, dataset: str, lance_branch: str, version: int | None) -> lance.LanceDataset:
        """One version (None: the latest) of one Lance branch."""
        _check_component(lance_branch, "Lance branch")
        self.files.check_inside(_check_component(dataset, "dataset") if lance_branch == "main"
                                else f"{dataset}/tree/{lance_branch}")
        if self.moved_from and lance_branch != "main":  # a fork's manifests name the old place: never read there
            from trimerge.lineage.tables.relocation import moved_message, still_moved

            if still_moved(self.location):  # (unless another process has relocated it since)
                raise RepositoryMovedError(f"table data {dataset} ({lance_branch}) still refers to the old location: "
                                           f"{moved_message(self.moved_from, self.location.uri)}")
            self.moved_from = None
        return _tables().open_version(self.uri(dataset), lance_branch, version, self.options, self.session)

    def open_version(self, tv: TableVersion) -> lance.LanceDataset:
        """The data of a commit's table, with a clear error when it is gone or moved."""
        try:
            ds = self.open(tv.dataset, tv.lance_branch, tv.version)
        except (OSError, ValueError, RuntimeError) as exc:
            if not self.has_data(tv):
                raise DataReclaimedError(
                    f"data of {tv.dataset} ({tv.lance_branch} v{tv.version}) is gone: it was reclaimed by cleanup "
                    "after its branch was deleted") from None
            if "not found" in str(exc).lower():
                raise DataReclaimedError(
                    f"data of {tv.dataset} ({tv.lance_branch} v{tv.version}) is gone: it was reclaimed by cleanup "
                    "after its branch was deleted") from None
            raise
        return ds

    def has_data(self, tv: TableVersion) -> bool:
        """Whether the dataset (and the Lance branch, for a fork) still exists."""
        return self.has_branch(tv.dataset, tv.lance_branch)

    def has_branch(self, dataset: str, lance_branch: str = "main") -> bool:
        """Whether a Lance branch of a dataset has any version on storage."""
        folder = _check_component(dataset, "dataset")
        if lance_branch != "main":
            folder = f"{folder}/tree/{_check_component(lance_branch, 'Lance branch')}"
        return bool(self.files.list(f"{folder}/_versions"))  # objects: some stores list empty folders

    def create(self, dataset: str, table: pa.Table, schema: pa.Schema) -> lance.LanceDataset:
        return _lance().write_dataset(table, self.uri(dataset), schema=schema, enable_stable_row_ids=True,
                                   mode="create", storage_options=self.options, session=self.session)

    def fork(self, tv: TableVersion, fork: str) -> lance.LanceDataset:
        """A new Lance branch ``fork`` starting at ``tv``; returns its latest version."""
        self.dataset(tv.dataset).create_branch(_check_component(fork, "Lance branch"), (tv.lance_branch, tv.version))
        return self.open(tv.dataset, fork, None)

    def forks(self, dataset: str) -> dict[str, Any]:
        """Every Lance branch of a dataset: {name: info}. Lance lists ``_refs/branches/`` and then
        reads each document, so a fork deleted in between (gc, a scratch branch) fails the whole
        listing with a raw "Not found": list again; if forks keep vanishing, a retryable error."""
        import time

        for attempt in range(_FORK_LIST_ATTEMPTS):
            try:
                return dict(self.dataset(dataset).branches.list())
            except (OSError, ValueError, RuntimeError) as exc:
                if not _fork_vanished(exc):
                    raise
            time.sleep(0.005 * (attempt + 1))
        from trimerge.lineage.errors import ConcurrentWriteError

        raise ConcurrentWriteError(
            f"the forks of table data {dataset} kept changing while being listed (gc or branch deletion "
            "running beside); retry")

    def fork_point(self, dataset: str, lance_branch: str) -> tuple[str, int] | None:
        """(parent Lance branch, version) a fork started from; None for ``main``."""
        if lance_branch == "main":
            return None
        info = self.forks(dataset).get(lance_branch)
        if not info:
            return None
        return (info.get("parent_branch") or "main", int(info["parent_version"]))

    def delete_fork(self, dataset: str, fork: str) -> None:
        self.dataset(dataset).branches.delete(fork)

    def datasets(self) -> list[str]:
        return self.files.children("")

    def dataset_folders(self) -> tuple[list[str], list[str]]:
        """(datasets trimerge created, everything else under ``tables/``): a dataset of ours is a
        real folder named ``<table>-<ulid>``; files, symlinks and other names are strays."""
        folders = set(self.files.folders(""))
        ours = [n for n in self.files.children("") if n in folders and DATASET_NAME.match(n)]
        return ours, sorted(set(self.files.children("")) - set(ours))

    def versions(self, dataset: str, lance_branch: str) -> tuple[list[int], int]:
        """(every version of a Lance branch, its latest)."""
        ds = self.open(dataset, lance_branch, None)
        return [int(v["version"]) for v in ds.versions()], ds.version

    def remove_versions(self, dataset: str, lance_branch: str, versions: list[int]) -> tuple[int, int]:
        """Remove these versions of a Lance branch and the files only they use; (versions, bytes) removed.
        Lance keeps the latest version, tagged versions and the versions other forks start from."""
        stats = self.open(dataset, lance_branch, None).cleanup_old_versions(
            versions=sorted(versions), error_if_tagged_old_versions=False)
        return int(stats.old_versions), int(stats.bytes_removed)

    def remove(self, dataset: str) -> None:
        self.files.delete_tree(_check_component(dataset, "dataset"))

    def size(self, dataset: str, fork: str | None = None) -> int:
        folder = _check_component(dataset, "dataset")
        return self.files.tree_size(folder if fork is None else f"{folder}/tree/{fork}")

    def data_files(self, tv: TableVersion) -> list[str]:
        """Keys (below ``tables/``) of every data file ``tv``'s manifest names, except an imported
        source's (see :func:`trimerge.lineage.tables.importing.missing_sources`); raises when any other
        file lives outside the repository's ``tables/``."""
        ds = self.open_version(tv)
        root = self.location.join(TABLES_DIR).rstrip("/") + "/"
        bases = {k: str(b.path) for k, b in ds.base_paths().items()}
        own = self.branch_folder(tv)
        from trimerge.lineage.tables.importing import foreign_bases
        from trimerge.lineage.tables.keys import plain_path

        imported = foreign_bases(ds, self)  # an import's source: checked by importing.missing_sources
        keys = []
        for fragment in ds.get_fragments():
            for f in fragment.metadata.files:
                if f.base_id in imported:
                    continue
                folder = own if f.base_id is None else bases.get(f.base_id, "?")
                uri = _as_uri(folder, self.location)
                if not uri.startswith(root):
                    raise CorruptRepositoryError(f"data file {f.path} lies outside the repository ({folder})")
                if not plain_path(f.path):  # x/../../PAYLOAD.lance: see trimerge.lineage.tables.keys
                    raise CorruptRepositoryError(f"{folder}: a manifest names the data file {f.path!r}, which is no "
                                                 "file name inside the repository's tables/ (damaged or forged)")
                keys.append(f"{uri[len(root):]}/data/{f.path}")
        return keys

    def foreign_fragment_ids(self, ds: lance.LanceDataset) -> list[int]:
        """Fragments whose data files live outside the repository (an import's source): upkeep
        never rewrites them (that would copy the source into the repository)."""
        from trimerge.lineage.tables.importing import foreign_bases

        foreign = foreign_bases(ds, self)
        if not foreign:
            return []
        return [f.fragment_id for f in ds.get_fragments() if any(d.base_id in foreign for d in f.metadata.files)]

    def index_folders(self, tv: TableVersion) -> list[tuple[str, str]]:
        """(index name, key below ``tables/`` of its folder) for each index ``tv``'s manifest names."""
        ds = self.open_version(tv)
        root = self.location.join(TABLES_DIR).rstrip("/") + "/"
        bases = {k: str(b.path) for k, b in ds.base_paths().items()}
        out = []
        from trimerge.lineage.tables.indices import lance_indices

        for info in lance_indices(ds):
            base = info.get("base_id")
            uri = _as_uri(self.branch_folder(tv) if base is None else bases.get(base, "?"), self.location)
            if uri.startswith(root):  # an imported dataset's own indices are the source's business
                out.append((info["name"], f"{uri[len(root):]}/_indices/{info['uuid']}"))
        return out

    def branch_folder(self, tv: TableVersion) -> str:
        """URI of the folder where a Lance branch's own files live."""
        base = self.uri(tv)
        return base if tv.lance_branch == "main" else f"{base}/tree/{tv.lance_branch}"

    def clean_head(self, tv: TableVersion) -> lance.LanceDataset | None:
        """The latest version of an owned Lance branch if it is the committed one (nothing to heal);
        None otherwise. Reads only, so a write can check its input before its first effect."""
        cached = self._heads.pop((tv.dataset, tv.lance_branch), None)
        if cached is not None and cached.version == tv.version and cached.latest_version == tv.version:
            return cached
        latest = self.open(tv.dataset, tv.lance_branch, None)
        return latest if latest.version == tv.version else None

    def writable_head(self, tv: TableVersion) -> lance.LanceDataset:
        """The latest version of an owned Lance branch, rolled back to the committed version if a
        failed write left other content there (self-healing even when the write's note was lost)."""
        clean = self.clean_head(tv)
        if clean is not None:
            return clean
        latest = self.open(tv.dataset, tv.lance_branch, None)
        committed = self.open(tv.dataset, tv.lance_branch, tv.version)
        if _tables().fragment_signature(latest) != _tables().fragment_signature(committed):
            committed.restore()
            latest = self.open(tv.dataset, tv.lance_branch, None)
        return latest

    def remember_head(self, tv: TableVersion, ds: lance.LanceDataset) -> None:
        """``ds`` is the committed head of ``tv``'s Lance branch (after a successful publish)."""
        if ds.version == tv.version:
            self._heads[(tv.dataset, tv.lance_branch)] = ds

    def latest_version(self, tv: TableVersion) -> int:
        return self.open(tv.dataset, tv.lance_branch, None).version

    def pin(self, tv: TableVersion, name: str) -> None:
        """A Lance tag ``name`` on ``tv`` (re-pointed if it exists elsewhere)."""
        ds = self.dataset(tv.dataset)
        existing = ds.tags.list().get(name)
        if existing is None:
            ds.tags.create(name, (tv.lance_branch, tv.version))
        elif (existing.get("branch") or "main", existing.get("version")) != (tv.lance_branch, tv.version):
            ds.tags.update(name, (tv.lance_branch, tv.version))

    def unpin(self, dataset: str, name: str) -> None:
        self.dataset(dataset).tags.delete(name)

    def pins(self, dataset: str) -> list[str]:
        return list(self.dataset(dataset).tags.list())


_FORK_LIST_ATTEMPTS = 20


def _fork_vanished(exc: BaseException) -> bool:
    """Whether a Lance error is a branch document that disappeared while Lance listed them."""
    text = str(exc)
    return bool(re.search(r"not ?found|no such key|404", text.lower())) and "_refs/branches/" in text.replace("\\", "/")


def _as_uri(folder: str, location: Location) -> str:
    """Lance may report an object-store base path without its scheme; spell it as the location does."""
    scheme = location.uri.split("://", 1)[0] + "://" if "://" in location.uri else ""
    if scheme and "://" not in folder:
        return scheme + folder.lstrip("/")
    return folder


def _lance():
    """Lance, imported on first use: commands that never open a table (log, rev-parse…) start faster."""
    import lance

    return lance


def _tables():
    from trimerge.lineage.tables import conversion as tables

    return tables
