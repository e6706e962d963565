"""Which before images a diff's candidate read takes whole, for a caller that needs some only.

A row the after side deleted or rewrote is read from the before side by stable row id (the
``delta`` plan: touched since the common version; the ``fragments`` plan: live on one side of a
fragment pair only), whole: ~36–64 µs a row of 16 columns (SF1 lineitem), where its key columns
cost ~6 µs.
A merge needs fewer whole images than a diff gives, and says so with two knobs:

* ``key_only_deletes`` (the source's diff): a key the source deleted needs the base's values only
  when dest changed it too (a delete/modify conflict shows them, a resolution may choose them),
  and dest's diff then holds that base image whole. Deleted rows get key-only images (other
  values null).
* ``only_keys`` (dest's diff): the merge needs dest's rows only for the keys the source changed
  (:meth:`TableDiff.only_keys`). Rows of other keys are left out, unread.

Exactness: a row id deleted on the after side is a delete only if its key is not on the after
side again (an upsert may delete a row and write its key anew: an update, whose image must be
whole). The keys of every row the after side wrote are noted as they stream, and only ids whose
key is not among them get key-only images. A key of ``only_keys`` keeps all its rows on both
sides, read whole, so its diff rows are the full diff's.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import polars as pl
import pyarrow as pa

from trimerge.diff.planner import Snapshot, set_minus
from trimerge.diff.reads import ROWID, take, take_all
from trimerge.diff.spill import ChangedRows
from trimerge.lineage.tables import arrowtypes

#: The after side's written rows whose keys are held to tell a moved key from a deleted one; past
#: it, deleted rows are read whole (the keys of millions of rows cost more memory than the reads save).
WATCH_LIMIT = 1_000_000


class BeforeImages:
    """One candidate read's choice of images. :meth:`watch` sees the after side's written rows (and
    drops those of keys outside ``only_keys``); :meth:`split` then says which of the ids to read
    from the before side are read whole, and gives key-only images of the rest."""

    def __init__(self, key: Sequence[str], schema: pa.Schema, *, key_only_deletes: bool = False,
                 only_keys: pa.Table | None = None):
        self.key = list(key)
        self.schema = schema  # of the before side's rows, ``_rowid`` last
        self.key_only_deletes = key_only_deletes
        self._wanted = None if only_keys is None else only_keys.select(self.key)
        self._keys: list[pa.Table] = []  # of every after row seen (before the only_keys filter)
        self._rows = 0
        self.before_rows = 0  # rows the before side wrote, seen by watch(side=0)
        self._watching = key_only_deletes or only_keys is not None
        #: With ``only_keys``: True when some key (of any) was inserted or deleted — the whole
        #: diff has rows, known from keys alone; None when that is not known.
        self.whole_changed: bool | None = None

    def _within(self, t: pa.Table) -> pa.Table:
        """The rows of ``t`` whose key is in ``only_keys``."""
        assert self._wanted is not None
        return _semi(t, self._wanted, self.key)

    def watch(self, parts: Iterable[pa.Table], side: int = 1) -> Iterator[pa.Table]:
        """``parts``, the rows one side wrote (1: after, whose keys are noted on the way; 0:
        before), without those of keys outside ``only_keys``."""
        for t in parts:
            if side == 0:
                self.before_rows += t.num_rows
            elif self._watching:
                self._keys.append(t.select(self.key))
                self._rows += t.num_rows
                if self._rows > WATCH_LIMIT:
                    self._watching, self._keys = False, []
            yield t if self._wanted is None else self._within(t)

    def split(self, snap: Snapshot, fetch: pa.Array, deleted: pa.Array, *, after_unwatched: int = 0,
              before_changed: bool = False) -> tuple[pa.Array, pa.Table | None]:
        """(The ids of ``fetch`` (rows of the before side ``snap``) still to read whole, key-only
        images (in :attr:`schema`) of the ``deleted`` ids — a subset of ``fetch`` — whose key the
        after side does not hold, or None.) ``after_unwatched``: after-side rows not seen by
        :meth:`watch` (their keys are unknown, so nothing is left key-only); ``before_changed``:
        whether the before side wrote or deleted rows since the common version."""
        if self._wanted is not None:
            return self._split_by_keys(snap, fetch, before_changed or bool(after_unwatched)), None
        if not self._watching or after_unwatched or not len(deleted):
            return fetch, None
        keys = key_columns(snap, deleted, self.key)
        gone = self._not_after(keys)
        if gone is None or not gone.num_rows:
            return fetch, None
        images = pa.table([gone.column(f.name) if f.name in gone.column_names else pa.nulls(gone.num_rows, f.type)
                           for f in self.schema], schema=self.schema)
        return set_minus(fetch, images.column(ROWID).combine_chunks()), images

    def only_wanted(self, snap: Snapshot, ids: pa.Array) -> pa.Array:
        """The ids of ``ids`` (rows of ``snap``) whose key is in ``only_keys``; all without it."""
        if self._wanted is None or not len(ids):
            return ids
        return self._within(key_columns(snap, ids, self.key)).column(ROWID).combine_chunks()

    def _split_by_keys(self, snap: Snapshot, fetch: pa.Array, before_changed: bool) -> pa.Array:
        """The ids of ``fetch`` whose key is in ``only_keys``; notes :attr:`whole_changed` when
        only the after side changed (then every changed row was seen or fetched)."""
        if before_changed or not self._watching:
            return self.only_wanted(snap, fetch)
        if not len(fetch):
            self.whole_changed = True if self._rows else None  # every row written is a new key
            return fetch
        keys = key_columns(snap, fetch, self.key)
        # A fetched key not written again was deleted; a written key never fetched was inserted.
        gone = self._not_after(keys)
        after = pa.concat_tables(self._keys, promote_options="permissive") if self._keys else None
        new = None if after is None else _anti(after, keys, self.key)
        if (gone is not None and gone.num_rows) or (new is not None and new.num_rows):
            self.whole_changed = True
        return self._within(keys).column(ROWID).combine_chunks()

    def _not_after(self, keys: pa.Table) -> pa.Table | None:
        """The rows of ``keys`` whose key no after row holds (None if key types do not compare)."""
        if not self._keys:
            return keys
        try:
            return _anti(keys, pa.concat_tables(self._keys, promote_options="permissive"), self.key)
        except pl.exceptions.PolarsError:  # a key of another type on the after side: read whole
            return None


def _anti(rows: pa.Table, others: pa.Table, key: list[str]) -> pa.Table:
    """The rows of ``rows`` whose key is not in ``others`` (cast to ``rows``' key types)."""
    return _joined(rows, others, key, "anti")


def _semi(rows: pa.Table, keys: pa.Table, key: list[str]) -> pa.Table:
    """The rows of ``rows`` whose key is in ``keys`` (cast to ``rows``' key types)."""
    return _joined(rows, keys, key, "semi")


def _joined(rows: pa.Table, keys: pa.Table, key: list[str], how: str) -> pa.Table:
    mine = arrowtypes.to_polars(rows.select(key)).with_row_index("\x01at")
    other = arrowtypes.to_polars(keys.select(key))
    other = other.with_columns([pl.col(k).cast(mine.schema[k], strict=True) for k in key])
    at = mine.join(other, on=key, how=how, nulls_equal=True)["\x01at"]
    return rows.take(at.to_arrow())


def restrict_rows(changed: ChangedRows, keys: pa.Table, key: Sequence[str]) -> tuple[ChangedRows, bool]:
    """(The classified rows of ``keys`` only, in memory; whether rows of other keys were left out.)"""
    kept, outside = [], False
    for batch in changed.batches():
        t = pa.Table.from_batches([batch])
        inside = _semi(t, keys, list(key))
        outside = outside or inside.num_rows < t.num_rows
        kept.append(inside)
    table = pa.concat_tables(kept) if kept else changed.schema.empty_table()
    if changed.table is None and table.num_rows:  # spilled rows come bucket by bucket: in key order, as in memory
        table = table.sort_by([(k, "ascending") for k in key])
    return ChangedRows.in_memory(table), outside


def key_columns(snap: Snapshot, ids: pa.Array, key: list[str]) -> pa.Table:
    """The key columns (and ``_rowid`` last) of the rows with these stable ids (a take costs ~6 µs
    a row; a large share of the table is read by one scan of the key columns)."""
    parts = [t for _, t in take_all([(snap, ids)], columns=key)]
    return pa.concat_tables(parts) if parts else take(snap, ids, key)
