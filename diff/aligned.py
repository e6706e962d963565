"""Counting a delta diff by stable row id, without partitioning by key.

When the before side is the common version itself (a merge counting the source's diff from the
merge base), every row the after side updated since then kept its stable row id: its before image
is the row with that id on the before side. Such a pair whose key is the same on both sides holds
the whole story of that key — a key is unique within each snapshot, so it appears nowhere else on
either side — and is compared in place: no hash join, no key buckets on disk. Both streams (the
after side's written fragments, the before side's rows read by id) come in row-id order or nearly
(Lance writes and reads fragments in order), so rows are matched in small windows. Every other
candidate — inserted rows, before images of deleted rows, pairs whose key changed — goes to the
keyed count as before. Streams that do not line up (a window outgrows its bound) are not an
error: the caller counts the usual way.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from trimerge.diff.counting import DiffCounts, add_updates
from trimerge.diff.delta import changes_since, written_row_ids
from trimerge.diff.planner import PlanAssumptionError, Snapshot
from trimerge.diff.reads import DENSE_TAKE_FRACTION, ROWID, scan_ids, take_all
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
    updated = written_row_ids(after, version)
    rows, _ids, deleted = changes_since(after, version, keep_ids=False)
    images = scan_ids(before, updated) if len(updated) >= DENSE_TAKE_FRACTION * before.ds.count_rows() \
        else (t for _, t in take_all([(before, pa.array(updated.ids(), pa.uint64()))]))
    window = _Window(list(key), list(common), list(added), keyed)
    try:
        for a_rows in rows:
            hit = updated.contains(a_rows.column(ROWID).to_numpy())
            if not hit.all():
                keyed.add(1, a_rows.filter(pa.array(~hit)))  # inserted since the version
            window.add_after(a_rows.filter(pa.array(hit)))
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
    gone = deleted()
    for _, t in take_all([(before, gone)]):
        keyed.add(0, t)
    return window.counts


class _Window:
    """Rows of both sides waiting for their partner (same stable row id)."""

    def __init__(self, key: list[str], common: list[str], added: list[str], keyed: CandidateBuffer):
        self.key, self.common, self.added, self.keyed = key, common, added, keyed
        self.before: list[pa.Table] = []
        self.after: list[pa.Table] = []
        self.counts = DiffCounts()

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
        """Pairs in the same order: same key → counted here; another key → the keyed count."""
        pb = arrowtypes.to_polars(b.select([*self.key, *self.common]))
        pa_ = arrowtypes.to_polars(a.select([*self.key, *self.common, *self.added]))
        frame = pl.concat([pb.rename({c: f"b\x00{c}" for c in pb.columns}),
                           pa_.rename({c: f"a\x00{c}" for c in pa_.columns})], how="horizontal")
        same_key = pl.all_horizontal([pl.col(f"b\x00{k}").cast(frame.schema[f"a\x00{k}"]).eq_missing(pl.col(f"a\x00{k}"))
                                      for k in self.key])
        mask = frame.select(same_key.alias("s"))["s"].to_numpy()
        if not mask.all():
            moved = pa.array(~mask)
            self.keyed.add(0, b.filter(moved))
            self.keyed.add(1, a.filter(moved))
            frame = frame.filter(pl.Series(mask))
        add_updates(self.counts, frame, self.common, self.added)


def _pairs(before_ids: np.ndarray, after_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (in ``before_ids``, in ``after_ids``) of the ids both hold."""
    order = np.argsort(before_ids, kind="stable")
    ordered = before_ids[order]
    at = np.minimum(np.searchsorted(ordered, after_ids), max(len(ordered) - 1, 0))
    hit = ordered[at] == after_ids if len(ordered) else np.zeros(len(after_ids), dtype=bool)
    return order[at[hit]], np.flatnonzero(hit)

