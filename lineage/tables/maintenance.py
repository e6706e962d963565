"""Table upkeep: what a write does to a table before its commit publishes, so that long histories
and many small commits keep costing what they change.

Two policies, each a repository setting (:mod:`trimerge.lineage.storage.settings`), run inside the write's
own transaction (no separate maintenance commit, nothing for merges to see):

* **fragment hygiene** — a table with more than ``compaction.max_small_fragments`` fragments of
  fewer than ``compaction.small_fragment_rows`` rows has those fragments compacted into fragments of
  up to that many rows. Large fragments are never rewritten by it, so its cost follows the small
  fragments (the recent writes), not the table;
* **key index** — a table of ``index.key_min_rows`` rows or more gets a BTREE index on its first
  key column, so keyed writes look keys up instead of scanning them (:mod:`trimerge.lineage.tables.keyed`);
* **index freshness** — ``index.refresh_threshold``, see :func:`trimerge.lineage.tables.indices.stale`.

:func:`needs_compaction` reads fragment metadata only; :func:`compact` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.tables.indices import TableWriter

#: Commit metadata key marking maintenance commits (``optimize``): ``log --no-maintenance`` hides them.
MAINTENANCE = "trimerge.maintenance"
#: Rows per fragment an explicit ``optimize`` compacts to (Lance's default).
OPTIMIZE_TARGET_ROWS = 1024 * 1024


@dataclass(frozen=True)
class Policy:
    max_small_fragments: int
    small_fragment_rows: int
    refresh_threshold: float
    key_index_min_rows: int

    @classmethod
    def from_settings(cls, get: Callable[[str], Any]) -> "Policy":
        return cls(get("compaction.max_small_fragments"), get("compaction.small_fragment_rows"),
                   get("index.refresh_threshold"), get("index.key_min_rows"))


def small_fragments(ds: "lance.LanceDataset", small_rows: int, foreign: Sequence[int] = ()) -> int:
    """Small fragments upkeep may compact (see :func:`compaction_options` for those it may not)."""
    excluded = set(compaction_options(ds, foreign).get("excluded_fragment_ids", ()))
    return sum(1 for f in ds.get_fragments() if f.metadata.physical_rows < small_rows and f.fragment_id not in excluded)


def needs_compaction(ds: "lance.LanceDataset", policy: Policy, foreign: Sequence[int] = ()) -> bool:
    """Whether a table a write just changed has more small fragments than the policy allows."""
    return 0 < policy.max_small_fragments < small_fragments(ds, policy.small_fragment_rows, foreign)


def needs_key_index(ds: "lance.LanceDataset", primary_key: Sequence[str], policy: Policy) -> bool:
    """Whether a table has grown to the size where keyed writes should go through a key index
    (see :mod:`trimerge.lineage.tables.keyed`) and has none yet."""
    from trimerge.lineage.tables.keyed import key_indexed

    return 0 < policy.key_index_min_rows <= ds.count_rows() and not key_indexed(ds, primary_key)


def compaction_options(ds: "lance.LanceDataset", foreign: Sequence[int]) -> dict[str, Any]:
    """Options every compaction of trimerge passes Lance: fragments of an import's source are left
    alone (rewriting them would copy the source in), and so are fragments covered by an index that
    lives in another base (a fork's parent, an import's source). pylance 14 writes such an index,
    remapped, into the dataset's own folder but keeps the old base, and then cannot find it; its
    lazy remap (``defer_index_remap``) is not supported with stable row ids. Those fragments are
    the ones a branch inherited, not the small ones its own writes add."""
    from trimerge.lineage.tables.indices import lance_indices

    excluded = set(foreign)
    for info in lance_indices(ds):
        if info.get("base_id") is not None:
            excluded |= set(info["fragment_ids"])
    return {"excluded_fragment_ids": sorted(excluded)} if excluded else {}


def compact(ds: "lance.LanceDataset", small_rows: int, foreign: Sequence[int] = ()) -> None:
    """Merge small fragments into fragments of up to ``small_rows`` rows; deletions in large
    fragments stay in their deletion files (rewriting those would cost the table, not the change)."""
    ds.optimize.compact_files(target_rows_per_fragment=small_rows, materialize_deletions=False,
                              **compaction_options(ds, foreign))


def optimize(ds: "lance.LanceDataset", foreign: Sequence[int] = ()) -> None:
    """Full compaction (deletions materialised) for an explicit ``optimize``."""
    ds.optimize.compact_files(target_rows_per_fragment=OPTIMIZE_TARGET_ROWS, **compaction_options(ds, foreign))


def upkeep(tx: "TableWriter", tables: Sequence[str], policy: Policy) -> None:
    """Before a write publishes: each table it wrote is compacted, key-indexed and has its indices
    refreshed as ``policy`` says, in the same transaction; definitions of indices Lance dropped by
    itself (with their column, or by an overwrite) are forgotten."""
    from trimerge.lineage.tables import indices

    for name in tables:
        ds = tx.dataset(name)
        params = tx.table_version(name).index_params
        if params:
            tx.set_index_params(name, indices.record(params, None, keep={i["name"] for i in indices.lance_indices(ds)}))
        foreign = tx.foreign_fragments(name)
        if needs_compaction(ds, policy, foreign):
            tx.write_table(name, f"compact {name}", lambda head: compact(head, policy.small_fragment_rows, foreign))
            ds = tx.dataset(name)
        if needs_key_index(ds, tx.table_version(name).primary_key, policy):
            indices.create(tx, name, indices.IndexSpec(indices.KEY_INDEX, tx.table_version(name).primary_key[0], "BTREE"))
            ds = tx.dataset(name)
        if policy.refresh_threshold < 1 and indices.stale(ds, policy.refresh_threshold):
            tx.write_table(name, f"optimize indices of {name}", indices.optimize)
