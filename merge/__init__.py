"""trimerge.merge: three-way merge, revert, cherry-pick and rebase with CI conflict reports."""

from trimerge.merge.engine import (
    Conflict,
    MergeBaseError,
    MergeCheckError,
    MergeConflictError,
    MergeResult,
    TableMergeStats,
    cherry_pick,
    merge,
    revert,
)
from trimerge.merge.fastforward import FastForwardError
from trimerge.merge.rebase import RebaseCheckError, RebaseConflictError, RebaseResult, rebase

__all__ = ["Conflict", "FastForwardError", "MergeBaseError", "MergeCheckError", "MergeConflictError", "MergeResult", "RebaseCheckError", "RebaseConflictError", "RebaseResult",
           "TableMergeStats", "cherry_pick", "merge", "rebase", "revert"]

from trimerge.lineage.safety.boundary import guarded as _guarded  # noqa: E402 - the API's edge

merge = _guarded(merge)
revert = _guarded(revert)
cherry_pick = _guarded(cherry_pick)
rebase = _guarded(rebase)
