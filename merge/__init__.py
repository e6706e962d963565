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
