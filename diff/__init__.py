"""trimerge.diff: per-table snapshot diffs between any two refs."""

from trimerge.diff.engine import Diff, DiffCounts, DiffPlan, SchemaChange, TableDiff, classify, diff, parse_range

__all__ = ["Diff", "DiffCounts", "DiffPlan", "SchemaChange", "TableDiff", "classify", "diff", "parse_range"]
