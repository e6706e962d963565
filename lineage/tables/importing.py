"""Zero-copy import: an existing Lance dataset becomes a table without copying its data files.

:func:`open_source` checks the source (a Lance dataset, the version exists, a valid non-null unique
key; only the key columns are read) and writes nothing. :func:`clone` makes ``tables/<dataset>`` a
Lance shallow clone of that version: a manifest referring to the source's data, deletion and index
files through a base path (a few KB, whatever the source's size), with non-null key columns.

Later writes go to the clone's own folder: the source is never written to, and Lance's cleanup of
the clone and trimerge's gc only delete files below ``tables/``. The table reads the source's files
with the repository's storage options, so the source must stay where it is, readable with them
(:func:`clone` checks; :func:`missing_sources` lets fsck report a source that disappeared). A
source inside the repository or on another kind of store is refused (:func:`check_placement`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, cast

from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.errors import (InvalidOperationError, NotFoundError, PrimaryKeyError, TrimergeError,
                                     lance_message)
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.location import OBJECT_STORE_SCHEMES, Location

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.commit import TableVersion
    from trimerge.lineage.tables.tablestore import TableStore

KEY_BATCH_ROWS = 1 << 20  # key rows read per batch
EXAMPLES = 3  # duplicate keys shown in the error
#: ``progress(name, event)``, as diff's and merge's (see :meth:`Transaction.import_table`).
Progress = Callable[[str, str], None]


class SourceNotFoundError(NotFoundError):
    """The import source does not exist, is not a Lance dataset, or has no such version."""


def source_uri(source: Any) -> str:
    """The source as Lance should record it: an absolute local path, or ``scheme://bucket/path``."""
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():  # bytes paths too
        raise InvalidOperationError(f"import source must be a path or URI, not {source!r}")
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in OBJECT_STORE_SCHEMES:
            raise InvalidOperationError(f"import source {text!r}: unknown scheme {scheme!r} (use a local path, "
                                        f"file://, {', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})")
        return text.rstrip("/")
    # Lance records base paths as given: a relative path would break once the process moves.
    return os.path.abspath(os.path.expanduser(text))


def open_source(source: str, primary_key: tuple[str, ...], *, version: int | None,
                storage_options: Mapping[str, str] | None, progress: Progress | None = None,
                name: str = "") -> "lance.LanceDataset":
    """The source dataset at ``version`` (None: latest), checked to be importable with
    ``primary_key``. Reads the manifest and the key columns only; writes nothing. ``progress``
    hears ``(name, "keys")`` after each batch of key rows checked (see :func:`check_keys`)."""
    import lance

    uri = source_uri(source)
    if "://" not in uri and not os.path.isdir(uri):
        what = "not a Lance dataset (a file)" if os.path.exists(uri) else "no such file or directory"
        raise SourceNotFoundError(f"import source {source}: {what}")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise InvalidOperationError(f"import source version must be a positive integer, not {version!r}")
    options = {str(k): str(v) for k, v in (storage_options or {}).items()} or None
    try:
        ds = lance.dataset(uri, storage_options=options)
    except (OSError, ValueError, RuntimeError) as exc:
        raise SourceNotFoundError(f"import source {source}: not a Lance dataset ({lance_message(exc)})") from None
    if version is not None and version != ds.version:
        try:
            ds = ds.checkout_version(version)
        except (OSError, ValueError, RuntimeError):
            raise SourceNotFoundError(f"import source {source}: no version {version} (latest is {ds.version})") \
                from None
    check_source_schema(ds.schema, primary_key, source)
    check_keys(ds, primary_key, source, progress=progress, name=name)
    return ds


def check_source_schema(schema: Any, primary_key: Sequence[str], source: str) -> None:
    """Column names trimerge accepts; key columns present and of a type that can be a key."""
    tbl.check_field_names(schema)
    missing = [k for k in primary_key if k not in schema.names]
    if missing:
        raise PrimaryKeyError(f"import {source}: primary key column(s) {missing} not in the dataset "
                              f"(columns: {schema.names})")
    tbl.schema_with_primary_key(schema, primary_key)  # refuses float and nested key columns


def check_keys(ds: "lance.LanceDataset", primary_key: Sequence[str], source: str, *,
               progress: Progress | None = None, name: str = "") -> None:
    """No null and no duplicate key, from a scan of the key columns only (memory: the key columns).
    Keys stored in increasing order (the usual case) are checked as they stream by; others through
    sorted key hashes (polars' group-by took ~9 s on 6M two-column keys on 2 cores; this ~1 s).
    ``progress(name, "keys")`` follows each batch read (at most :data:`KEY_BATCH_ROWS` rows), and
    ``progress(name, "duplicates")`` precedes the hash check of keys not stored in order."""
    import numpy as np
    import polars as pl

    pk = list(primary_key)
    frames: list[Any] = []
    increasing, last = True, None
    for batch in ds.to_batches(columns=pk, batch_size=KEY_BATCH_ROWS):
        for k in pk:
            if batch.column(k).null_count:
                raise PrimaryKeyError(f"import {source}: primary key column {k!r} has null values")
        if not batch.num_rows:
            continue
        frame = cast("pl.DataFrame", pl.from_arrow(batch))  # a record batch makes a DataFrame
        frames.append(frame)
        if increasing:
            increasing = _increasing(frame if last is None else pl.concat([last, frame]), pk)
            last = frame.tail(1)
        if progress is not None:
            progress(name, "keys")
    if increasing or sum(f.height for f in frames) < 2:
        return
    if progress is not None:
        progress(name, "duplicates")
    # Hash every key, sort the hashes (one numpy column: fast), then compare the few keys whose
    # hashes repeat exactly (a hash collision is not a duplicate). No hash-based unique/group-by
    # over all keys: numpy's and polars' took seconds per million keys on 2 cores.
    hashes = [f.select(pl.struct(pk).hash(seed=0)).to_series().to_numpy() for f in frames]
    ordered = np.sort(np.concatenate(hashes))
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    repeated = repeated[np.r_[True, repeated[1:] != repeated[:-1]]] if len(repeated) else repeated
    for start in range(0, len(repeated), 1024):  # a few keys are enough to show; all if they collide
        wanted = repeated[start:start + 1024]
        parts = []
        for frame, h in zip(frames, hashes):
            mask = wanted[np.minimum(np.searchsorted(wanted, h), len(wanted) - 1)] == h
            if mask.any():
                parts.append(frame.filter(pl.Series(mask)))
        dups = pl.concat(parts).group_by(pk).len().filter(pl.col("len") > 1).sort(pk)
        if dups.height:
            sample = dups.head(EXAMPLES).drop("len").to_dicts()
            raise PrimaryKeyError(f"import {source}: duplicate primary key values ({len(repeated)} keys repeat), "
                                  f"e.g. {sample}")


def _increasing(frame: Any, pk: list[str]) -> bool:
    """Whether every row's key is greater than the previous row's (lexicographic)."""
    import polars as pl

    if frame.height < 2:
        return True
    less, equal = pl.lit(False), pl.lit(True)
    for k in pk:
        prev = pl.col(k).shift(1)
        less = less | (equal & (prev < pl.col(k)))
        equal = equal & (prev == pl.col(k))
    return bool(frame.select(less.slice(1).all()).item())


def clone(source_ds: "lance.LanceDataset", primary_key: Sequence[str], table_store: "TableStore",
          dataset: str) -> "lance.LanceDataset":
    """Make ``tables/<dataset>`` a shallow clone of ``source_ds``'s version with non-null key
    columns; returns the clone's latest version (as the table store opens it)."""
    check_placement(source_ds.uri, table_store)
    target = table_store.uri(dataset)
    try:
        source_ds.shallow_clone(target, source_ds.version, storage_options=table_store.options)
    except (OSError, ValueError, RuntimeError) as exc:
        raise InvalidOperationError(f"import {source_ds.uri}: Lance cannot clone it ({lance_message(exc)})") from None
    crashpoint("import_cloned")
    ds = table_store.open(dataset, "main", None)
    declare_primary_key(ds, primary_key)
    ds = table_store.open(dataset, "main", None)
    check_readable(ds, primary_key, source_ds.uri)
    return ds


def declare_primary_key(ds: "lance.LanceDataset", primary_key: Sequence[str]) -> None:
    """Key columns non-null, as :func:`~trimerge.lineage.tables.conversion.schema_with_primary_key` stores them (in
    place: one metadata-only commit; the keys were checked before). The key lives in the commit. A
    Lance ``unenforced-primary-key`` mark of the source stays (Lance refuses to change it once set):
    it only costs a 32 KB key filter per ``merge_insert``."""
    nullable = [{"path": k, "nullable": False} for k in primary_key if ds.schema.field(k).nullable]
    if nullable:
        ds.alter_columns(*nullable)  # type: ignore[arg-type]  # pylance: *alterations typed Iterable[AlterColumn]


def check_readable(ds: "lance.LanceDataset", primary_key: Sequence[str], source: str) -> None:
    """Read a row as the repository will (its own storage options); the transaction rolls back otherwise."""
    try:
        ds.to_table(columns=list(primary_key), limit=1)
    except (OSError, ValueError, RuntimeError) as exc:
        raise InvalidOperationError(f"import {source}: the repository cannot read the source with its own storage "
                                    f"options, which it reads imported tables with ({lance_message(exc)})") from None


# ---------------------------------------------------------------------------------------------- where files live
def _normal(uri: str) -> str:
    """A location for prefix comparison: real local paths (symlinks resolved), URIs as they are."""
    local = "://" not in uri or uri.startswith("file://")
    return os.path.realpath(uri.removeprefix("file://")) if local else uri.rstrip("/")


def _inside(child: str, parent: str) -> bool:
    child, parent = _normal(child), _normal(parent)
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def store_kind(uri: str) -> str:
    """``file`` for a local path, else the URI's scheme (``s3``, ``gs``, ``az``…)."""
    uri = str(uri)
    return uri.split("://", 1)[0].lower() if "://" in uri and not uri.startswith("file://") else "file"


def same_store(source: Any, table_store: "TableStore") -> bool:
    """Whether ``source`` is on the same kind of store as the repository (so its options apply)."""
    return store_kind(source_uri(source)) == store_kind(table_store.location.uri)


def check_placement(source: str, table_store: "TableStore") -> None:
    """Refuse a source inside the repository: gc removes datasets no commit uses and Lance version
    cleanup deletes files only old versions use, neither knowing a clone refers to them. Refuse a
    source on another kind of store: pylance 14 writes a shallow clone with the *source's* store (a
    local source cloned to s3:// wrote ``/<key>`` on local disk, an s3:// source cloned to a local
    path wrote into the source's bucket)."""
    root = table_store.location.uri
    if _inside(source, root):
        raise InvalidOperationError(f"import {source}: the source lies inside the repository ({root}); its files "
                                    "could be reclaimed under the imported table (use a branch instead)")
    kinds = [store_kind(u) for u in (source, root)]
    if kinds[0] != kinds[1]:
        shown = [{"file": "local disk"}.get(k, k + "://") for k in kinds]
        raise InvalidOperationError(f"import {source}: the source is on {shown[0]} and the repository on {shown[1]}; "
                                    "Lance cannot clone across stores (copy the data with create_table)")


def _as_uri(path: str, location: Location) -> str:
    """Lance may report an object-store base path without its scheme."""
    path = str(path)
    return path if "://" in path or location.is_local else f"{location.scheme}://{path.lstrip('/')}"


def foreign_bases(ds: "lance.LanceDataset", table_store: "TableStore") -> dict[int, str]:
    """Base paths of ``ds`` outside the repository's ``tables/`` (an import's source): id -> URI."""
    root = table_store.location.join("tables")
    out = {}
    for base_id, base in ds.base_paths().items():
        uri = _as_uri(str(base.path), table_store.location)
        if not _inside(uri, root):
            out[int(base_id)] = uri
    return out


def referenced_files(ds: "lance.LanceDataset", bases: Mapping[int, str]) -> dict[str, list[str]]:
    """For each base of ``bases``, the keys (relative to the base) of the data, deletion and index
    files ``ds``'s manifest reads from it (an index folder stands for its files)."""
    out: dict[str, list[str]] = {uri: [] for uri in bases.values()}
    for frag in ds.get_fragments():
        meta = frag.metadata
        for f in meta.files:
            if f.base_id is not None and f.base_id in bases:
                out[bases[f.base_id]].append(f"data/{f.path}")
        dfile = meta.deletion_file
        if dfile is not None and dfile.base_id is not None and dfile.base_id in bases:
            out[bases[dfile.base_id]].append(cast(str, frag.deletion_file()))  # there is one: dfile
    from trimerge.lineage.tables.indices import lance_indices  # pylance's list_indices, without its deprecation warning

    for info in lance_indices(ds):
        if info.get("base_id") in bases:
            out[bases[info["base_id"]]].append(f"_indices/{info['uuid']}/")
    return out


def missing_sources(table_store: "TableStore", datasets: Iterable["str | TableVersion"]) -> list[str]:
    """Problems (fsck lines) of imported tables whose source files are gone. ``datasets``: dataset
    names (their latest main version is checked) or table versions. Lists each source folder once."""
    listings: dict[str, set[str] | None] = {}
    problems = []
    for item in datasets:
        name = item if isinstance(item, str) else item.dataset
        branch, version = ("main", None) if isinstance(item, str) else (item.lance_branch, item.version)
        where = f"{name} ({branch}" + (f" v{version})" if version is not None else ")")
        try:
            ds = table_store.open(name, branch, version)
            files = referenced_files(ds, foreign_bases(ds, table_store))
        except (TrimergeError, OSError, ValueError, RuntimeError) as exc:
            problems.append(f"table data {where}: cannot be opened ({lance_message(exc)})")
            continue
        for base, keys in sorted(files.items()):
            if not keys:
                continue  # nothing read from there (an empty source)
            if base not in listings:
                listings[base] = _list_source(base, table_store.location)
            present = listings[base]
            if not present:
                state = "cannot be listed" if present is None else "is gone"
                problems.append(f"table data {where}: its import source {base} {state}")
                continue
            gone = [k for k in keys if k not in present]
            if gone:
                problems.append(f"table data {where}: {len(gone)} file(s) of its import source {base} missing, "
                                f"e.g. {gone[0]}")
    return problems


def _list_source(base: str, location: Location) -> set[str] | None:
    """Every key below a source folder (data, deletions, indices; an index folder as ``_indices/<uuid>/``);
    None if it cannot be listed."""
    try:
        same_store = "://" in base and base.split("://", 1)[0] == location.scheme
        backend = Location.parse(base, location.storage_options if same_store else None).backend("")
        keys: set[str] = set()
        for folder in ("data", "_deletions", "_indices"):
            keys.update(k.lstrip("/") for k in backend.keys_below(folder))
        return keys | {"/".join(k.split("/")[:2]) + "/" for k in keys if k.startswith("_indices/")}
    except (TrimergeError, OSError, ValueError, RuntimeError):
        return None
