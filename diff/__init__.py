"""trimerge.diff: per-table snapshot diffs between any two refs."""

from trimerge.diff.api import Diff, diff, parse_range
from trimerge.diff.engine import DiffCounts, DiffPlan, SchemaChange, TableDiff, classify
from trimerge.lineage.errors import DiffVerificationError

__all__ = ["Diff", "DiffCounts", "DiffPlan", "DiffVerificationError", "SchemaChange", "TableDiff", "classify", "diff",
           "parse_range"]

from trimerge.lineage.safety.boundary import guard_class as _guard_class, guarded as _guarded  # noqa: E402 - the API's edge

diff = _guarded(diff)
# A diff's reads are lazy: a table file gc reclaims under rows() or counts() leaves them as a
# TrimergeError too, not as Lance's raw "Not found".
for _cls in (Diff, TableDiff):
    _guard_class(_cls)
