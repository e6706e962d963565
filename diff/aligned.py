"""Counting and classifying a delta diff by stable row id, without partitioning by key.

When the before side is the common version itself (a merge's diff of either side from the merge
base), every row the after side updated since then kept its stable row id: its before image
is the row with that id on the before side. Such a pair whose key is the same on both sides holds
the whole story of that key — a key is unique within each snapshot, so it appears nowhere else on
either side — and is compared in place: no hash join, no key buckets on disk. Both streams (the
after side's written fragments, the before side's rows read by id) come in row-id order or nearly
(Lance writes and reads fragments in order), so rows are matched in small windows, and what is
held at once is a window, not the change: :func:`count_aligned` only counts the pairs,
:func:`classify_aligned` classifies them into the diff's rows. Every other candidate — inserted
rows, before images of deleted rows, pairs whose key changed — goes to the keyed classification
as before. Streams that do not line up (a window outgrows its bound) are not an error: the caller
counts or classifies the usual way."""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from trimerge.diff.counting import DiffCounts, add_updates
from trimerge.diff.delta import changes_since, written_row_ids
from trimerge.diff.images import BeforeImages
from trimerge.diff.narrowrows import sorted_by_key
from trimerge.diff.planner import PlanAssumptionError, Snapshot
from trimerge.diff.reads import DENSE_TAKE_FRACTION, ROWID, scan_ids, take_all
from trimerge.diff.rules import classify_aligned as classify_pairs
from trimerge.diff.spill import CandidateBuffer
from trimerge.lineage.tables import arrowtypes

#: Unmatched rows (both sides) a window may hold before the streams count as not lined up.
WINDOW_ROWS = 1 << 20


class NotAligned(Exception):
    """The two streams are not in row-id order: count the usual way."""


def applies(before: Snapshot, version: int | None) -> bool:
    return version is not None and before.tv is not None and before.tv.version == version


def count_aligned(before: Snapshot, after: Snapshot, version: int, key: Sequence[str], common: Sequence[str],
                  added: Sequence[str], keyed: CandidateBuffer) -> DiffCounts | None:
    """Counts of the rows ``after`` updated since ``version`` (= ``before``'s version) whose key
    did not change; every other candidate row is added to ``keyed`` (0: before, 1: after). None if
    the streams do not line up (``keyed`` then holds a part: discard it)."""
    counter = _Counter(list(key), list(common), list(added))
    gone = _walk(before, after, version, _Window(list(key), keyed, counter))
    if gone is None:
        return None
    for _, t in take_all([(before, gone())]):
        keyed.add(0, t)
    return counter.counts


def classify_aligned(before: Snapshot, after: Snapshot, version: int, key: Sequence[str], common: Sequence[str],
                     added: Sequence[str], keyed: CandidateBuffer, images: BeforeImages) -> bool:
    """The classification of the same rows, in bounded memory: each pair of the same key is
    compared in place (:func:`trimerge.diff.rules.classify_aligned`) and its diff row, if any, goes
    to ``keyed`` as a row classified already (side 2); every other candidate goes to ``keyed`` as
    a candidate (0: before, 1: after), deleted rows' images as ``images`` says (whole, or key only).
    False if the streams do not line up (``keyed`` then holds a part: discard it)."""
    key = list(key)
    columns = [[c for c in snap.ds.schema.names if c not in key] for snap in (before, after)]

    def compare(b: pa.Table, a: pa.Table) -> None:
        keyed.add(CandidateBuffer.CLASSIFIED, classify_pairs(b, a, key, common, added, columns[0], columns[1]))

    gone = _walk(before, after, version, _Window(key, keyed, compare), watch=images.watch)
    if gone is None:
        return False
    ids = gone()
    fetch, key_only = images.split(before, ids, ids)
    if key_only is not None:
        keyed.add(0, key_only)
    for _, t in take_all([(before, fetch)]):
        keyed.add(0, t)
    return True


def _walk(before: Snapshot, after: Snapshot, version: int, window: "_Window",
          watch: Callable[[Iterator[pa.Table]], Iterator[pa.Table]] = lambda parts: parts
          ) -> Callable[[], pa.Array] | None:
    """Stream the rows ``after`` wrote since ``version`` (through ``watch``) and the before images
    of those it updated into ``window``, a slice at a time; inserted rows go to the window's keyed
    candidates. The ids of the rows ``after`` deleted (a function: call it once the walk is done),
    or None when the streams do not line up."""
    updated = written_row_ids(after, version)
    rows, _ids, deleted = changes_since(after, version, keep_ids=False)
    images = scan_ids(before, updated) if len(updated) >= DENSE_TAKE_FRACTION * before.ds.count_rows() \
        else (t for _, t in take_all([(before, pa.array(updated.ids(), pa.uint64()))]))
    try:
        for a_rows in watch(rows):
            hit = updated.contains(a_rows.column(ROWID).to_numpy())
            if not hit.all():
                window.keyed.add(1, a_rows.filter(pa.array(~hit)))  # inserted since the version
            window.add_after(a_rows.filter(pa.array(hit)) if not hit.all() else a_rows)
            while window.behind():
                image = next(images, None)
                if image is None:
                    break
                window.add_before(image)
        for image in images:
            window.add_before(image)
    except NotAligned:
        return None
    if window.pending():
        raise PlanAssumptionError(f"{after.tv.dataset if after.tv else ''}: {window.pending()} updated row(s) "
                                  "without a before image")
    return deleted


class _Counter:
    """Counts of pairs of the same key (the rows :func:`count_aligned` compares in place)."""

    def __init__(self, key: list[str], common: list[str], added: list[str]):
        self.key, self.common, self.added = key, common, added
        self.counts = DiffCounts()

    def __call__(self, b: pa.Table, a: pa.Table) -> None:
        pb = arrowtypes.to_polars(b.select([*self.key, *self.common]))
        pa_ = arrowtypes.to_polars(a.select([*self.key, *self.common, *self.added]))
        frame = pl.concat([pb.rename({c: f"b\x00{c}" for c in pb.columns}),
                           pa_.rename({c: f"a\x00{c}" for c in pa_.columns})], how="horizontal")
        add_updates(self.counts, frame, self.common, self.added)


class _Window:
    """Rows of both sides waiting for their partner (same stable row id). Pairs of the same key
    go to ``pairs`` (before rows, after rows, in the same order); pairs whose key changed go to
    ``keyed`` as candidates."""

    def __init__(self, key: list[str], keyed: CandidateBuffer, pairs: Callable[[pa.Table, pa.Table], None]):
        self.key, self.keyed, self.pairs = key, keyed, pairs
        self.before: list[pa.Table] = []
        self.after: list[pa.Table] = []

    def pending(self) -> int:
        return sum(t.num_rows for t in self.before) + sum(t.num_rows for t in self.after)

    def behind(self) -> bool:
        """Whether the before side has fewer rows waiting than the after side."""
        return sum(t.num_rows for t in self.before) < sum(t.num_rows for t in self.after)

    def add_after(self, table: pa.Table) -> None:
        if table.num_rows:
            self.after.append(table)
            self._match()

    def add_before(self, table: pa.Table) -> None:
        if table.num_rows:
            self.before.append(table)
            self._match()

    def _match(self) -> None:
        if not (self.before and self.after):
            return
        b = pa.concat_tables(self.before, promote_options="permissive")
        a = pa.concat_tables(self.after, promote_options="permissive")
        at_b, at_a = _pairs(b.column(ROWID).to_numpy(), a.column(ROWID).to_numpy())
        if len(at_b):
            self._compare(b.take(pa.array(at_b)), a.take(pa.array(at_a)))
            keep_b = np.ones(b.num_rows, dtype=bool)
            keep_b[at_b] = False
            keep_a = np.ones(a.num_rows, dtype=bool)
            keep_a[at_a] = False
            b, a = b.filter(pa.array(keep_b)), a.filter(pa.array(keep_a))
        self.before, self.after = ([b] if b.num_rows else []), ([a] if a.num_rows else [])
        if self.pending() > WINDOW_ROWS:
            raise NotAligned()

    def _compare(self, b: pa.Table, a: pa.Table) -> None:
        """Pairs in the same order: same key → ``pairs``; another key → the keyed candidates."""
        keys_b = arrowtypes.to_polars(b.select(self.key))
        keys_a = arrowtypes.to_polars(a.select(self.key))
        same = pl.concat([keys_b.rename({k: f"b\x00{k}" for k in self.key}), keys_a], how="horizontal").select(
            pl.all_horizontal([pl.col(f"b\x00{k}").cast(keys_a.schema[k]).eq_missing(pl.col(k))
                               for k in self.key]).alias("s"))["s"].to_numpy()
        if not same.all():
            moved = pa.array(~same)
            self.keyed.add(0, b.filter(moved))
            self.keyed.add(1, a.filter(moved))
            kept = pa.array(same)
            b, a = b.filter(kept), a.filter(kept)
        if b.num_rows:
            self.pairs(b, a)


def _pairs(before_ids: np.ndarray, after_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (in ``before_ids``, in ``after_ids``) of the ids both hold."""
    order = np.argsort(before_ids, kind="stable")
    ordered = before_ids[order]
    at = np.minimum(np.searchsorted(ordered, after_ids), max(len(ordered) - 1, 0))
    hit = ordered[at] == after_ids if len(ordered) else np.zeros(len(after_ids), dtype=bool)
    return order[at[hit]], np.flatnonzero(hit)


def with_classified(rows: pa.Table, classified: list[pa.Table], key: list[str]) -> pa.Table:
    """The keyed classification's ``rows`` (in key order) with the rows classified on the way
    (:mod:`trimerge.diff.aligned`, in row-id order), all in key order."""
    parts = [t for t in classified if t.num_rows]
    if not parts:
        return rows
    return sorted_by_key(pa.concat_tables([*(t.cast(rows.schema) for t in parts), rows]), key)
