"""Before images of deleted rows with their key only, for a diff whose caller needs a deleted row's
other values only where it has them already.

A merge classifies the keys its two diffs (base→dest, base→source) changed. A key one side
deleted needs the base's values only when the other side changed it too (a delete/modify
conflict shows them, a resolution may choose them), and then the other side's diff holds that
base image: an update's before image is always whole. Reading a deleted row's key is ~8x cheaper
than reading its whole image by row id (SF1 lineitem: 9,000 rows of 2 key columns 0.05 s, of 16
columns 0.36 s), and a merge's diffs read every deleted row's image.

Exactness: a row id deleted on the after side is a delete only if its key is not on the after
side again (an upsert may delete a row and write its key anew: an update, which needs the whole
image). The keys of every row the after side wrote are watched as they stream, and only ids whose
key is not among them get key-only images; the rest are read whole as before.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff.planner import Snapshot, set_minus
from trimerge.diff.reads import ROWID, take
from trimerge.lineage import arrowtypes

#: The after side's written rows whose keys are held to tell a moved key from a deleted one; past
#: it, deleted rows are read whole (the keys of millions of rows cost more memory than the reads save).
WATCH_LIMIT = 1_000_000
#: Fewer deleted rows than this are read whole: their reads cost less than a second look-up.
MIN_DELETED = 32


class KeyOnlyDeletes:
    """Watches the after side's written rows (:meth:`watch`), then splits the ids to read from the
    before side into those read whole and key-only images of deleted rows (:meth:`split`)."""

    def __init__(self, key: Sequence[str], enabled: bool, schema: pa.Schema):
        self.key = list(key)
        self.enabled = enabled
        self.schema = schema  # of the before side's rows, ``_rowid`` last
        self._keys: list[pa.Table] = []
        self._rows = 0

    def watch(self, parts: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """``parts`` unchanged, their keys noted on the way."""
        for t in parts:
            if self.enabled:
                self._keys.append(t.select(self.key))
                self._rows += t.num_rows
                if self._rows > WATCH_LIMIT:
                    self.enabled, self._keys = False, []
            yield t

    def split(self, snap: Snapshot, fetch: pa.Array, deleted: pa.Array, *,
              after_unwatched: int = 0) -> tuple[pa.Array, pa.Table | None]:
        """(The ids of ``fetch`` still to read whole, key-only images (in :attr:`schema`) of the
        ``deleted`` ids — a subset of ``fetch`` — whose key the after side does not hold, or None.)
        ``after_unwatched``: after-side rows not seen by :meth:`watch` (their keys are unknown, so
        nothing is split)."""
        if not self.enabled or after_unwatched or len(deleted) < MIN_DELETED:
            return fetch, None
        keys = take(snap, deleted, self.key)
        mine = arrowtypes.to_polars(keys)
        if self._keys:
            seen = arrowtypes.to_polars(pa.concat_tables(self._keys, promote_options="permissive"))
            try:
                seen = seen.with_columns([pl.col(k).cast(mine.schema[k], strict=True) for k in self.key])
            except pl.exceptions.PolarsError:  # a key of another type on the after side: read whole
                return fetch, None
            mine = mine.join(seen, on=self.key, how="anti", nulls_equal=True)
        if not mine.height:
            return fetch, None
        gone = keys.filter(pc.is_in(keys.column(ROWID), value_set=mine[ROWID].to_arrow().cast(pa.uint64())))
        images = pa.table([gone.column(f.name) if f.name in gone.column_names else pa.nulls(gone.num_rows, f.type)
                           for f in self.schema], schema=self.schema)
        return set_minus(fetch, images.column(ROWID).combine_chunks()), images
