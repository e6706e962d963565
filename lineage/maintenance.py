"""Table upkeep: what a write does to a table before its commit publishes, so that long histories
and many small commits keep costing what they change.

Two policies, each a repository setting (:mod:`trimerge.lineage.settings`), run inside the write's
own transaction (no separate maintenance commit, nothing for merges to see):

* **fragment hygiene** — a table with more than ``compaction.max_small_fragments`` fragments of
  fewer than ``compaction.small_fragment_rows`` rows has those fragments compacted into fragments of
  up to that many rows. Large fragments are never rewritten by it, so its cost follows the small
  fragments (the recent writes), not the table;
* **index freshness** — ``index.refresh_threshold``, see :func:`trimerge.lineage.indices.stale`.

:func:`needs_compaction` reads fragment metadata only; :func:`compact` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import lance

#: Commit metadata key marking maintenance commits (``optimize``): ``log --no-maintenance`` hides them.
MAINTENANCE = "trimerge.maintenance"
#: Rows per fragment an explicit ``optimize`` compacts to (Lance's default).
OPTIMIZE_TARGET_ROWS = 1024 * 1024


@dataclass(frozen=True)
class Policy:
    max_small_fragments: int
    small_fragment_rows: int
    refresh_threshold: float

    @classmethod
    def from_settings(cls, get: Callable[[str], Any]) -> "Policy":
        return cls(get("compaction.max_small_fragments"), get("compaction.small_fragment_rows"),
                   get("index.refresh_threshold"))


def small_fragments(ds: "lance.LanceDataset", small_rows: int) -> int:
    return sum(1 for f in ds.get_fragments() if f.metadata.physical_rows < small_rows)


def needs_compaction(ds: "lance.LanceDataset", policy: Policy) -> bool:
    """Whether a table a write just changed has more small fragments than the policy allows."""
    return 0 < policy.max_small_fragments < small_fragments(ds, policy.small_fragment_rows)


def compact(ds: "lance.LanceDataset", small_rows: int) -> None:
    """Merge small fragments into fragments of up to ``small_rows`` rows; deletions in large
    fragments stay in their deletion files (rewriting those would cost the table, not the change)."""
    ds.optimize.compact_files(target_rows_per_fragment=small_rows, materialize_deletions=False)


def optimize(ds: "lance.LanceDataset") -> None:
    """Full compaction (deletions materialised) for an explicit ``optimize``."""
    ds.optimize.compact_files(target_rows_per_fragment=OPTIMIZE_TARGET_ROWS)
