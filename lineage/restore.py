"""``table restore``: one commit in which a table equals its state at an older ref.

The table is pointed at the Lance version that ref names (rows, schema and indices together),
without copying data: cost follows nothing but the commit itself. A table that did not exist at the
ref is dropped; one the branch no longer has is brought back. The next write to the table on this
branch rolls its Lance branch back to that content first, which ends the diff's delta chain there
(see ``TableVersion.delta_since``): rows brought back keep their old row versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import TableNotFoundError
from trimerge.lineage.names import validate_table_name

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

__all__ = ["RestoreResult", "restore"]


@dataclass
class RestoreResult:
    """What a restore did (or would do): ``action`` is ``restored``, ``dropped``, ``brought back`` or ``unchanged``."""

    table: str
    ref: str
    source: Commit  # the commit ``ref`` named
    branch: str
    action: str
    commit: Commit | None = None
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (what ``--json`` prints)."""
        return {"table": self.table, "ref": self.ref, "source_commit": self.source.id, "branch": self.branch,
                "action": self.action, "commit": self.commit.id if self.commit else None, "dry_run": self.dry_run}


def restore(repo: "Repository", table: str, ref: str, *, branch: str | None = None, actor: str | None = None,
            message: str | None = None, dry_run: bool = False) -> RestoreResult:
    """Make ``table`` on ``branch`` (default: the current one) what it was at ``ref``, as one commit."""
    repo.check_writable()
    validate_table_name(table)
    at = repo.resolve(ref)
    repo.check_readable(at)
    name = repo.default_ref(branch)
    tip = repo.branches.get(name)
    then = at.tables.get(table)
    now_ = repo.commit(tip.commit_id).tables.get(table)
    if then is None and now_ is None:
        raise TableNotFoundError(f"cannot restore {table!r}: there is no such table at {ref!r} nor on branch {name!r}")
    action = ("unchanged" if then is not None and now_ is not None and then.location == now_.location else
              "dropped" if then is None else "brought back" if now_ is None else "restored")
    result = RestoreResult(table, ref, at, name, action, dry_run=dry_run)
    if dry_run or action == "unchanged":
        return result
    meta = {"restore.table": table, "restore.ref": ref, "restore.commit": at.id}
    with repo.transaction(name, actor=actor, message=message or f"Restore {table} to {ref} ({at.id[:10]})",
                          metadata=meta) as tx:
        tx.refer(at.id)  # gc keeps its data while this runs; refused if gc condemned it
        current = tx.table_version(table) if table in tx.tables() else None
        if then is None:
            tx.drop_table(table)
        elif current is None or current.location != then.location:
            tx.set_table(table, then)
    result.commit = tx.commit
    if result.commit is None:
        result.action = "unchanged"
    return result
