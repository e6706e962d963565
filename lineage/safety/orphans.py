"""Orphan files: files in a dataset's folders that no version of any of its Lance branches names.

A write that never became a version leaves its files behind: a LanceDB write refused through the
namespace (data files, its transaction file and a staging manifest ``_versions/<n>.manifest-<uuid>``),
a writer killed before its commit. Lance's own cleanup removes only what the versions it drops
name (and unreferenced data files after 7 days, never transaction files or staging manifests), so
gc sweeps them here and fsck reports them.

What counts, in the folder of each Lance branch (the dataset's root for ``main``,
``tree/<branch>/`` for the others):

* ``data/*.lance`` whose name no fragment of any version of any branch of the dataset names
  (forks name their parents' files, so every branch is read);
* ``_transactions/<n>-<uuid>.txn`` that is no version's transaction (when a version's transaction
  cannot be read, transaction files are left alone);
* ``_versions/*.manifest-*``: staging manifests, which no version ever names.

Names are compared without folders: data and transaction file names are unique (random), so a
file is only ever kept by mistake, never removed by one. Anything else (deletion vectors, index
files, unknown names) is left alone. A file younger than ``min_age`` seconds is never an orphan:
it may belong to a writer still at work (gc passes its retention, and at least an hour).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

if TYPE_CHECKING:
    from trimerge.lineage.tables.tablestore import TableStore

#: The least age of a file gc removes as an orphan, whatever the retention: a foreign writer (LanceDB
#: on a fork's location) writes its data files before it commits them.
ORPHAN_GRACE_SECONDS = 3600.0

_TXN = re.compile(r"^[0-9]+-[0-9a-fA-F-]{36}\.txn$")
_STAGING = re.compile(r"^[0-9]+\.manifest-[0-9A-Za-z-]+$")
_DATA = re.compile(r"^[^/]+\.lance$")


@dataclass(frozen=True)
class Orphan:
    """A file (its key below ``tables/``) that no version names."""

    key: str
    size: int
    kind: str  # "data", "transaction" or "staging manifest"


def _entries(files: Any, prefix: str) -> Iterator[tuple[str, int, float]]:
    """(key, size, modified, as epoch seconds) of the files directly in folder ``prefix``."""
    root = getattr(files, "root", None)
    if isinstance(root, Path):
        folder = root / prefix
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            path = folder / name
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if path.is_file() and not path.is_symlink():
                yield f"{prefix}/{name}", st.st_size, st.st_mtime
    elif getattr(files, "store", None) is not None:  # an object store
        import obstore

        listing = obstore.list_with_delimiter(files.store, prefix.rstrip("/") + "/")
        for o in listing["objects"]:
            yield o["path"], int(o["size"]), o["last_modified"].timestamp()


def _candidates(files: Any, folder: str, cutoff: float) -> list[Orphan]:
    found = []
    for sub, pattern, kind in (("data", _DATA, "data"), ("_transactions", _TXN, "transaction"),
                               ("_versions", _STAGING, "staging manifest")):
        for key, size, modified in _entries(files, f"{folder}/{sub}"):
            if modified <= cutoff and pattern.match(key.rsplit("/", 1)[-1]):
                found.append(Orphan(key, size, kind))
    return found


def _branches(store: "TableStore", dataset: str) -> list[str]:
    return ["main", *sorted(store.dataset(dataset).branches.list())]


def _named(store: "TableStore", dataset: str, branches: Iterable[str], every_version: bool) -> tuple[set[str], bool]:
    """(the file names the versions of ``branches`` name, whether every version's transaction was read).
    Only the latest versions unless ``every_version``."""
    names: set[str] = set()
    transactions_known = True
    for branch in branches:
        head = store.open(dataset, branch, None)
        versions = [int(v["version"]) for v in head.versions()] if every_version else [head.version]
        for v in versions:
            ds = head if v == head.version else head.checkout_version((branch, v) if branch != "main" else v)
            for fragment in ds.get_fragments():
                names.update(f.path.rsplit("/", 1)[-1] for f in fragment.data_files())
            try:
                txn = ds.read_transaction(v)
            except Exception:  # an operation pylance cannot decode: its file's name is unknown
                txn = None
            if txn is None:
                transactions_known = False
            else:
                names.add(f"{txn.read_version}-{txn.uuid}.txn")
    return names, transactions_known


def find_orphans(store: "TableStore", dataset: str, *, min_age: float,
                 skip_branches: Iterable[str] = ()) -> list[Orphan]:
    """The orphan files of ``dataset`` at least ``min_age`` seconds old, outside the folders of
    ``skip_branches`` (those an in-flight write uses)."""
    skip = set(skip_branches)
    branches = _branches(store, dataset)
    cutoff = time.time() - min_age
    found: list[Orphan] = []
    for branch in branches:
        if branch not in skip:
            found += _candidates(store.files, dataset if branch == "main" else f"{dataset}/tree/{branch}", cutoff)
    if not found:
        return []
    unexplained = [o for o in found if o.kind == "staging manifest"]
    for every_version in (False, True):  # the latest versions name most files: read them all only if needed
        named, transactions_known = _named(store, dataset, branches, every_version)
        left = [o for o in found if o.kind != "staging manifest" and o.key.rsplit("/", 1)[-1] not in named
                and (o.kind == "data" or transactions_known)]
        if not left:
            break
    return sorted(unexplained + left, key=lambda o: o.key)


def remove_orphans(store: "TableStore", orphans: Iterable[Orphan]) -> tuple[int, int]:
    """Delete them: (files, bytes) removed."""
    files = size = 0
    for o in orphans:
        store.files.delete(o.key)
        files, size = files + 1, size + o.size
    return files, size


_TXN_NAME = re.compile(rb"[0-9]+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.txn")


def discard_refused_write(store: "TableStore", dataset: str, staging: str, *, busy: bool) -> list[str]:
    """Remove what a write refused through the namespace left in ``dataset``'s main folder: its
    staging manifest ``_versions/<staging>`` and, unless a trimerge write is using that folder
    (``busy``), the data and transaction files that manifest names and no version does. Returns
    the keys removed. The manifest is the client's word only, so nothing any version names is
    touched whatever it says."""
    if not _STAGING.match(staging):
        return []
    key = f"{dataset}/_versions/{staging}"
    stored = store.files.get(key)
    if stored is None:
        return []
    named = set() if busy else _staged_files(stored.data, staging.split(".manifest-")[0])
    removed = []
    if named:
        for o in find_orphans(store, dataset, min_age=0):
            if o.kind != "staging manifest" and o.key.rsplit("/", 1)[-1] in named and o.key.count("/") == 2:
                store.files.delete(o.key)
                removed.append(o.key)
    store.files.delete(key)
    return [*removed, key]


def _staged_files(manifest: bytes, number: str) -> set[str]:
    """Names of the data and transaction files a staging manifest names (empty if it cannot be read)."""
    import shutil
    import tempfile

    import lance

    folder = tempfile.mkdtemp(prefix="trimerge-staged-")
    try:
        os.makedirs(os.path.join(folder, "_versions"))
        with open(os.path.join(folder, "_versions", f"{number}.manifest"), "wb") as f:
            f.write(manifest)  # opened alone: Lance reads the manifest only, never the files it names
        ds = lance.dataset(folder)
        names = {d.path.rsplit("/", 1)[-1] for fragment in ds.get_fragments() for d in fragment.data_files()}
    except Exception:  # not a manifest pylance can read: only the staging manifest itself goes
        return set()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return names | {m.decode() for m in _TXN_NAME.findall(manifest)}
