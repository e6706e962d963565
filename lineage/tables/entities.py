"""One row by primary key, and the history of that row: reads over a narrow interface (a way to open
a table version, a log and a commit lookup), so they test on any store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import PrimaryKeyError

if TYPE_CHECKING:
    import lance


def key_values(primary_key: Sequence[str], key: Any) -> list[Any]:
    """A key given as a value, a tuple/list or a mapping, as one value per key column."""
    if isinstance(key, Mapping):
        missing = [k for k in primary_key if k not in key]
        if missing:
            raise PrimaryKeyError(f"key {key!r} lacks the key column(s) {missing}")
        values = [key[k] for k in primary_key]
    elif isinstance(key, (tuple, list)):
        values = list(key)
    else:
        values = [key]
    if len(values) != len(primary_key):
        raise PrimaryKeyError(f"key {key!r} does not match the primary key {list(primary_key)}")
    return values


def row_at(ds: "lance.LanceDataset", primary_key: Sequence[str], key: Any) -> dict[str, Any] | None:
    """The row of ``ds`` with ``key`` (None if absent); the key must have the key columns' types."""
    import pyarrow as pa

    from trimerge.lineage.tables import conversion as tbl

    values = key_values(primary_key, key)
    try:  # the key must be a value of the key columns' types (not just something Lance may coerce)
        typed = [pa.array([v]).cast(ds.schema.field(c).type, safe=True)[0].as_py() if v is not None else None
                 for c, v in zip(primary_key, values)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        types = ", ".join(f"{c}: {ds.schema.field(c).type}" for c in primary_key)
        raise PrimaryKeyError(f"key {key!r} does not match the key column types ({types})") from None
    if any(v is None for v in typed):
        raise PrimaryKeyError(f"key {key!r}: key values cannot be null")
    rows = ds.to_table(filter=tbl.key_filter(primary_key, typed)).to_pylist()
    return rows[0] if rows else None


def entity_history(open_version: Callable[[TableVersion], "lance.LanceDataset"], log: Iterable[Commit],
                   commit_of: Callable[[str], Commit], table: str, key: Any) -> list[Commit]:
    """Commits of ``log`` (newest first) in which the row with ``key`` changed. Only commits whose
    version of the table differs from their first parent's are read."""
    out = []
    cache: dict[tuple, Any] = {}

    def row_in(c: Commit | None) -> Any:
        tv = c.tables.get(table) if c is not None else None
        if tv is None:
            return None
        if tv.location not in cache:
            cache[tv.location] = row_at(open_version(tv), tv.primary_key, key)
        return cache[tv.location]

    for c in log:
        parent = commit_of(c.parents[0]) if c.parents else None
        mine = c.tables.get(table)
        theirs = parent.tables.get(table) if parent else None
        if mine is not None and theirs is not None and mine.location == theirs.location:
            continue
        if row_in(c) != row_in(parent):
            out.append(c)
    return out
