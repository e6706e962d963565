"""trimerge.diff: per-table snapshot diffs between any two refs."""

from trimerge.diff.api import Diff, diff, parse_range
from trimerge.diff.engine import DiffCounts, DiffPlan, SchemaChange, TableDiff, classify
from trimerge.lineage.errors import DiffVerificationError

__all__ = ["Diff", "DiffCounts", "DiffPlan", "DiffVerificationError", "SchemaChange", "TableDiff", "classify", "diff",
           "parse_range"]

from trimerge.lineage.boundary import guarded as _guarded  # noqa: E402 - the API's edge

diff = _guarded(diff)
