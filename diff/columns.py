"""Column-aware fragment pairing: which columns of a fragment changed, from its data files alone.

Lance stores a fragment's columns in one or more data files, each naming the field ids it holds
(a column write adds a file for the changed columns and masks them in the old file). Two snapshots
of one dataset hold *the same physical rows* in two fragments when the file holding the key
columns is the same file (same resolved path, same field ids) on both sides. For such a pair:

* a column whose field ids are held by the same files on both sides has the same value in every
  row present on both sides: it is not read;
* any other compared column (its file differs, or it is read through other field ids or another
  type on the two sides — dropped and re-added, widened) is read, with the key and the row id,
  from both fragments; an added column counts where it is not null, as in every diff;
* rows present on one side only (their deletion state differs) show up in that same narrow read.

So a pair costs what its changed columns cost. :func:`compare_pair` classifies a pair on those
narrow reads (exact counts and changed columns); the rows' full images, when wanted, are then
taken by row id. Why it is exact: a row present on both sides of a pair is the same physical row
(same key file, same offset), and the diff's keys are unique per snapshot, so the key appears
nowhere else on either side. A row present on one side only (deleted on the other) may have moved
to another fragment there (an upsert): such rows join the other candidates by key, never alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: A fragment's data files: (resolved path, field ids it holds; -2 marks a masked field).
Files = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Layout:
    """One fragment of a snapshot: its files and resolved deletion-file path."""

    fragment: Any
    files: Files
    deletion: str | None
    overlays: bool

    def holders(self, field_ids: frozenset[int]) -> frozenset[tuple[int, str]]:
        """(field id, file) for each of ``field_ids`` a data file of this fragment holds."""
        return frozenset((fid, path) for path, fields in self.files for fid in fields if fid in field_ids)


@dataclass(frozen=True)
class ColumnPair:
    """The same physical rows on both sides; ``columns``: the compared columns to read."""

    before: Any
    after: Any
    columns: tuple[str, ...]


def key_signature(layout: Layout, key_ids: frozenset[int]) -> frozenset[tuple[int, str]] | None:
    """Where the key's fields live (None: not all of them in data files, or an overlay)."""
    if layout.overlays:
        return None
    found = layout.holders(key_ids)
    return found if len(found) == len(key_ids) else None


def changed_columns(b: Layout, a: Layout, columns_b: dict[str, tuple[frozenset[int], str]],
                    columns_a: dict[str, tuple[frozenset[int], str]], compared: Sequence[str]) -> tuple[str, ...]:
    """The compared columns a pair must read (see the module docstring)."""
    out = []
    for name in compared:
        spec_b, spec_a = columns_b.get(name), columns_a.get(name)
        held_b = b.holders(spec_b[0]) if spec_b else frozenset()
        held_a = a.holders(spec_a[0]) if spec_a else frozenset()
        if spec_b == spec_a:
            if held_b != held_a:
                out.append(name)
        elif held_b or held_a:  # read through other field ids or types: values decide
            out.append(name)
    return tuple(out)


def compare_pair(before: Any, after: Any, pair: ColumnPair, key: Sequence[str], common: Sequence[str],
                 added: Sequence[str]) -> pa.Table:
    """The diff rows of one pair from narrow reads (``before``/``after``: the snapshots): the
    classification of :func:`trimerge.diff.rules.classify` restricted to the pair's columns —
    exact kinds and changed columns, images holding only those columns.

    Both reads are the same physical rows in the same order, less the rows deleted on one side
    only: rows with the same stable row id are compared by position (no key join), and only the
    rows present on one side (or, never expected, a pair whose key differs) are joined by key."""
    from trimerge.diff.reads import ROWID
    from trimerge.diff.rules import classify, classify_aligned

    read_common = [c for c in common if c in pair.columns]
    read_added = [c for c in added if c in pair.columns]
    sides = []
    for snap, frag, cols in ((before, pair.before, read_common), (after, pair.after, read_common + read_added)):
        t = snap.ds.scanner(columns=list(key) + cols, with_row_id=True, fragments=[frag]).to_table()
        schema = pa.schema([snap.ds.schema.field(c) for c in list(key) + cols] + [pa.field(ROWID, pa.uint64())])
        sides.append(t.select(schema.names).cast(schema))
    b, a = sides
    names = (key, read_common, read_added, read_common, read_common + read_added)
    at_b, at_a = same_rows(b, a, list(key))
    if len(at_b) == b.num_rows == a.num_rows:  # every row on both sides (a backfill): in place
        return classify_aligned(b, a, *names)
    paired = classify_aligned(b.take(pa.array(at_b)), a.take(pa.array(at_a)), *names)
    rest = classify(_without(b, at_b), _without(a, at_a), *names)
    return pa.concat_tables([paired.cast(rest.schema), rest])


def same_rows(b: pa.Table, a: pa.Table, key: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Positions (in ``b``, in ``a``) of the rows with the same stable row id and the same key, in
    ``a``'s order: identity when both hold the same rows in the same order."""
    from trimerge.diff.reads import ROWID

    ids_b, ids_a = (t.column(ROWID).to_numpy() for t in (b, a))
    in_place = len(ids_b) == len(ids_a) and np.array_equal(ids_b, ids_a)
    if in_place:
        at_b = at_a = np.arange(len(ids_a))
    else:
        order = np.argsort(ids_b, kind="stable")
        found = np.minimum(np.searchsorted(ids_b[order], ids_a), max(len(ids_b) - 1, 0))
        hit = ids_b[order][found] == ids_a if len(ids_b) else np.zeros(len(ids_a), dtype=bool)
        at_b, at_a = order[found[hit]], np.flatnonzero(hit)
    same = np.ones(len(at_a), dtype=bool)
    if in_place:  # the same rows of the same key file, in the same order: the same keys
        return at_b, at_a
    for k in key:  # rows paired by id across deletions: checked, as it costs little
        kb, ka = b.column(k).take(pa.array(at_b)), a.column(k).take(pa.array(at_a))
        if kb.type != ka.type:
            kb = kb.cast(ka.type)
        same &= pc.fill_null(pc.equal(kb, ka), False).to_numpy(zero_copy_only=False)
    return at_b[same], at_a[same]


def _without(t: pa.Table, at: np.ndarray) -> pa.Table:
    keep = np.ones(t.num_rows, dtype=bool)
    keep[at] = False
    return t.filter(pa.array(keep))


def row_ids(narrow: pa.Table) -> tuple[pa.Array, pa.Array]:
    """(before row ids, after row ids) of the rows a narrow classification found changed."""
    from trimerge.diff.rules import AFTER_ROWID, BEFORE_ROWID

    return tuple(narrow.column(c).drop_null().combine_chunks().cast(pa.uint64())
                 for c in (BEFORE_ROWID, AFTER_ROWID))
