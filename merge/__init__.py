"""trimerge.merge: three-way merge, revert and cherry-pick with CI conflict reports."""

from trimerge.merge.engine import (
    Conflict,
    MergeBaseError,
    MergeConflictError,
    MergeResult,
    TableMergeStats,
    cherry_pick,
    merge,
    revert,
)

__all__ = ["Conflict", "MergeBaseError", "MergeConflictError", "MergeResult", "TableMergeStats", "cherry_pick",
           "merge", "revert"]

from trimerge.lineage.boundary import guarded as _guarded  # noqa: E402 - the API's edge

merge = _guarded(merge)
revert = _guarded(revert)
cherry_pick = _guarded(cherry_pick)
