"""The candidate plan of a table diff, shared by both engines: which rows may have changed,
from Lance metadata alone, and which engine runs the diff.

Methods, cheapest first: ``delta`` (both versions on one Lance lineage from a common version:
row-version metadata names the changed rows), ``fragments`` (same dataset: fragments whose data
and deletion files are identical are skipped, those that differ only in deletions contribute the
rows whose deletion state differs, the rest are read), ``full`` (unrelated datasets), and
``added``/``dropped``/``none``. The local engine (:mod:`trimerge.diff.engine`) and the Spark
engine (:mod:`trimerge.diff.spark`) both execute this plan; :func:`choose_engine` picks one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa

from trimerge.diff.columns import ColumnPair, Layout, changed_columns, key_signature
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.repository import Repository

#: ``engine="auto"`` runs a table's diff on Spark above this many planned candidate rows.
DEFAULT_SPARK_THRESHOLD = 20_000_000


class PlanAssumptionError(RuntimeError):
    """What a plan's metadata promised is not what the data holds (a row id that is not there, a
    version Lance cannot read a delta from): the diff falls back to the next exact plan."""


def spark_threshold() -> int:
    return int(os.environ.get("TRIMERGE_SPARK_THRESHOLD", DEFAULT_SPARK_THRESHOLD))


def spark_at_hand(spark: Any = None) -> bool:
    """Whether Spark can bring other machines without trimerge starting it here: a session was
    passed, one is active in this process, a master is named (``TRIMERGE_SPARK_MASTER``), or the
    threshold was set by hand (``TRIMERGE_SPARK_THRESHOLD``). A local Spark session started on this
    machine is never faster than the local engine, which uses every core in bounded memory."""
    if spark is not None or os.environ.get("TRIMERGE_SPARK_MASTER") or os.environ.get("TRIMERGE_SPARK_THRESHOLD"):
        return True
    session = sys.modules.get("pyspark.sql")  # not imported: no session can be active
    return session is not None and session.SparkSession.getActiveSession() is not None


class Snapshot:
    """One table at one commit, opened lazily."""

    def __init__(self, repo: Repository, tv: TableVersion | None, row_cache: Any = None):
        self.repo = repo
        self.tv = tv
        self._ds: lance.LanceDataset | None = None
        self.row_cache = row_cache  # a diff.reads.RowCache shared by the readers of this snapshot, or None

    @property
    def ds(self) -> lance.LanceDataset:
        if self._ds is None:
            self._ds = self.repo.open_table_version(self.tv)
        return self._ds

    @property
    def schema(self) -> pa.Schema | None:
        return self.ds.schema if self.tv else None

    @property
    def root(self) -> str:
        """Folder of this Lance branch (where its own files live)."""
        return self.repo.table_store.branch_folder(self.tv)


def lineage(repo: Repository, tv: TableVersion) -> list[tuple[str, int]]:
    """(Lance branch, version) from ``tv`` up through the branches it was forked from to ``main``."""
    chain = [(tv.lance_branch, tv.version)]
    forks = repo.table_store.forks(tv.dataset) if tv.lance_branch != "main" else {}
    while chain[-1][0] != "main" and len(chain) <= len(forks):
        info = forks.get(chain[-1][0])
        if not info:
            return chain
        chain.append((info.get("parent_branch") or "main", int(info["parent_version"])))
    return chain


def fragment_layouts(snap: Snapshot) -> list[Layout]:
    """Each fragment with its data files — (resolved path, Lance field ids it holds) — and its
    resolved deletion-file path (paths resolved through base paths: fragment ids collide across
    branches, files do not)."""
    bases = {k: v.path for k, v in snap.ds.base_paths().items()}
    out = []
    for frag in snap.ds.get_fragments():
        meta = frag.metadata  # attributes, not to_json(): that serializes every inline row id
        files = tuple(sorted((f"{bases[d.base_id] if d.base_id is not None else snap.root}/data/{d.path}",
                              tuple(d.fields)) for d in meta.files))
        dfile = meta.deletion_file
        dpath = None
        if dfile:
            base = bases[dfile.base_id] if dfile.base_id is not None else snap.root
            dpath = f"{base}/{frag.deletion_file()}"
        out.append(Layout(frag, files, dpath, bool(meta.overlays)))
    return out


def stable_row_ids(snap: Snapshot, frag: Any) -> pa.Array:
    """The stable row ids of one fragment of a snapshot."""
    t = snap.ds.scanner(columns=[], with_row_id=True, fragments=[frag]).to_table()
    return t.column("_rowid").combine_chunks()


def set_minus(a: pa.Array, b: pa.Array) -> pa.Array:
    """Row ids in ``a`` and not in ``b``, sorted and unique. Sorted numpy sets: Arrow's hash-based
    ``is_in`` / ``unique`` took gigabytes at tens of millions of ids."""
    import numpy as np

    def ids(x: pa.Array) -> "np.ndarray":
        values = x.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
        if len(values) > 1 and not (values[1:] > values[:-1]).all():  # a fragment's ids usually are sorted
            values = np.sort(values)  # sort, then drop repeats: numpy's unique hashes, many times slower
            values = values[np.r_[True, values[1:] != values[:-1]]]
        return values

    left, right = ids(a), ids(b)
    lo, hi = (int(right[0]), int(right[-1])) if len(right) else (0, -1)
    if len(right) and 8 * len(right) >= hi - lo + 1:  # dense ids: a byte per id of their range, no lookups
        mask = np.zeros(hi - lo + 1, dtype=bool)
        mask[right - np.uint64(lo)] = True
        inside = np.flatnonzero((left >= np.uint64(lo)) & (left <= np.uint64(hi)))
        keep = np.ones(len(left), dtype=bool)
        keep[inside] = ~mask[left[inside] - np.uint64(lo)]
        left = left[keep]
    elif len(right):
        kept = []
        for start in range(0, len(left), 1 << 20):  # in slices: the lookups' temporaries stay small
            part = left[start:start + (1 << 20)]
            pos = np.minimum(np.searchsorted(right, part), len(right) - 1)
            kept.append(part[right[pos] != part])
        left = np.concatenate(kept) if kept else left
    return pa.array(left, pa.uint64())


def only_on_each_side(a: pa.Array, b: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(Ids only in ``a``, ids only in ``b``), each sorted and unique: of two fragments' row ids,
    the rows live on one side only. Ids of one fragment are dense: one byte per id of their range
    tells both differences in a pass; sparse ids go through :func:`set_minus`."""
    import numpy as np

    left = a.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    right = b.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    if not len(left) or not len(right):
        return set_minus(a, b), set_minus(b, a)
    lo = int(min(left.min(), right.min()))
    span = int(max(left.max(), right.max())) - lo + 1
    if 4 * (len(left) + len(right)) < span:
        return set_minus(a, b), set_minus(b, a)
    seen = np.zeros(span, dtype=np.uint8)
    seen[left - np.uint64(lo)] |= 1
    seen[right - np.uint64(lo)] |= 2
    return (pa.array(np.flatnonzero(seen == 1).astype(np.uint64) + np.uint64(lo), pa.uint64()),
            pa.array(np.flatnonzero(seen == 2).astype(np.uint64) + np.uint64(lo), pa.uint64()))


def column_fields(snap: Snapshot) -> dict[str, tuple[frozenset[int], str]]:
    """Each top-level column's Lance field ids (its own and its children's) and type."""
    def ids(f: Any) -> set[int]:
        out = {f.id()}
        for c in f.children():
            out |= ids(c)
        return out

    return {f.name(): (frozenset(ids(f)), str(f.to_arrow().type)) for f in snap.ds.lance_schema.fields()}


def live_rows(frag: Any) -> int:
    meta = frag.metadata
    deleted = (meta.deletion_file.num_deleted_rows or 0) if meta.deletion_file else 0
    return meta.physical_rows - deleted


def common_version(before: Snapshot, after: Snapshot) -> int | None:
    """The latest version ``p`` both sides descend from along Lance lineage (a branch and the
    branches it was forked from, at their fork points), so both can be described by ``delta``
    from ``p``: the first Lance branch both lineages pass through, at the earlier position."""
    lineage_b, lineage_a = lineage(before.repo, before.tv), lineage(before.repo, after.tv)
    on_a = dict(lineage_a)
    for branch, version in lineage_b:
        if branch in on_a:
            common = min(version, on_a[branch])
            # pylance reads a delta only from versions in the branch's own tree, which starts at
            # its fork point: deeper lineages fall back to the fragment plan.
            first = max(lin[1][1] if len(lin) > 1 else 0 for lin in (lineage_b, lineage_a))
            return common if common >= first else None
    return None


@dataclass
class CandidatePlan:
    """Where one table's candidate rows come from (see the module docstring for ``method``)."""

    method: str
    common_version: int | None = None  # delta: the version both sides are described from
    read_before: list[Any] = field(default_factory=list)  # fragments read whole, per side
    read_after: list[Any] = field(default_factory=list)
    deletion_pairs: list[tuple[Any, Any]] = field(default_factory=list)  # same data files, other deletions
    column_pairs: list[ColumnPair] = field(default_factory=list)  # same rows, some columns to compare
    skipped: int = 0  # identical fragments
    estimated_rows: int = 0  # candidate rows of the fragment plan, from metadata (an upper bound)


#: Plans a caller may ask for: ``auto`` (the cheapest exact one), or a plan to start from — a
#: plan whose precondition does not hold falls back to the next exact one (delta, fragments, full).
PLAN_CHOICES = ("auto", "delta", "fragments", "full")


def plan_candidates(before: Snapshot, after: Snapshot, method: str = "auto") -> CandidatePlan:
    """The candidate plan of the diff from ``before`` to ``after`` (no row is read).

    Each plan is used only where its precondition holds, which makes it exact:

    * ``delta``: both sides descend from one version ``p`` along Lance lineage, and on each side the
      versions from ``p`` on form one chain of row-level writes (``TableVersion.delta_since``) —
      every row whose values changed got a new row version, and rows older than ``p`` keep their
      stable row ids on both sides. A chain ends at a restore (revert, failed-write rollback), an
      overwrite, a dropped or retyped column.
    * ``fragments``: same dataset. Fragments whose key columns live in the same data file on both
      sides hold the same physical rows (:mod:`trimerge.diff.columns`): only the columns whose
      files differ are read (none: skipped, or only the rows whose deletion state differs);
      other fragments are read whole. Chosen over ``delta`` when it reads columns instead of
      whole rows (:func:`columns_cheaper`).
    * ``full``: always (both sides read whole and joined by key)."""
    if method not in PLAN_CHOICES:
        from trimerge.lineage.errors import InvalidOperationError

        raise InvalidOperationError(f"unknown diff plan {method!r} (use {', '.join(PLAN_CHOICES)})")
    b, a = before, after
    if b.tv is None and a.tv is None or (b.tv and a.tv and b.tv.location == a.tv.location):
        return CandidatePlan("none")
    if b.tv is None:
        return CandidatePlan("added", read_after=list(a.ds.get_fragments()), estimated_rows=a.ds.count_rows())
    if a.tv is None:
        return CandidatePlan("dropped", read_before=list(b.ds.get_fragments()), estimated_rows=b.ds.count_rows())
    if b.tv.dataset != a.tv.dataset or method == "full":
        return CandidatePlan("full", read_before=list(b.ds.get_fragments()), read_after=list(a.ds.get_fragments()),
                             estimated_rows=b.ds.count_rows() + a.ds.count_rows())
    plan = CandidatePlan("fragments")
    fb, fa = column_fields(b), column_fields(a)
    key = list(b.tv.primary_key)
    compared = [c for c in a.schema.names if c not in key]
    if all(fb.get(k) == fa.get(k) for k in key) and tuple(b.tv.primary_key) == tuple(a.tv.primary_key):
        key_ids = frozenset().union(*(fb[k][0] for k in key))
        layouts_b = fragment_layouts(b)
        by_signature = {sig: lay for lay in layouts_b if (sig := key_signature(lay, key_ids)) is not None}
        unpaired_b = [lay for lay in layouts_b if key_signature(lay, key_ids) is None]  # overlays: read whole
        for lay in fragment_layouts(a):
            sig = key_signature(lay, key_ids)
            match = by_signature.pop(sig, None) if sig is not None else None
            if match is None:
                plan.read_after.append(lay.fragment)
                plan.estimated_rows += live_rows(lay.fragment)
                continue
            columns = changed_columns(match, lay, fb, fa, compared)
            if columns:
                plan.column_pairs.append(ColumnPair(match.fragment, lay.fragment, columns))
                plan.estimated_rows += live_rows(match.fragment) + live_rows(lay.fragment)
            elif match.deletion != lay.deletion:
                plan.deletion_pairs.append((match.fragment, lay.fragment))
                plan.estimated_rows += abs(live_rows(match.fragment) - live_rows(lay.fragment))
            else:
                plan.skipped += 1
        for lay in [*by_signature.values(), *unpaired_b]:
            plan.read_before.append(lay.fragment)
            plan.estimated_rows += live_rows(lay.fragment)
    else:  # the key itself was retyped: no fragment holds the same key on both sides
        plan.read_before = list(b.ds.get_fragments())
        plan.read_after = list(a.ds.get_fragments())
        plan.estimated_rows = b.ds.count_rows() + a.ds.count_rows()
    common = common_version(b, a) if method in ("auto", "delta") else None
    # Row versions exist only with stable row ids (an imported dataset may lack them).
    if common is not None and b.tv.delta_exact_from(common) and a.tv.delta_exact_from(common) \
            and b.ds.has_stable_row_ids and a.ds.has_stable_row_ids and not (method == "auto" and columns_cheaper(plan)):
        plan.method, plan.common_version = "delta", common
    return plan


def columns_cheaper(plan: CandidatePlan) -> bool:
    """Whether the fragment plan beats the delta plan: it has column pairs (whose rows a delta
    would read whole, every column) and reads no more rows whole than those pairs hold — a column
    write (a backfill, a re-embedding) is diffed by reading its columns only."""
    if not plan.column_pairs:
        return False
    whole = sum(live_rows(f) for f in (*plan.read_before, *plan.read_after))
    return whole <= sum(live_rows(p.after) for p in plan.column_pairs)


def choose_engine(engine: str, plan: CandidatePlan, threshold: int | None = None, at_hand: bool = True) -> str:
    """``local`` or ``spark`` for one table: as asked, or for ``auto`` by the planned size — above
    the threshold, and only when Spark is ``at_hand`` (:func:`spark_at_hand`) or the threshold was
    given."""
    if plan.method == "none" or engine == "local":
        return "local"
    if engine == "spark":
        return "spark"
    if threshold is None and not at_hand:
        return "local"
    return "spark" if plan.estimated_rows > (spark_threshold() if threshold is None else threshold) else "local"
