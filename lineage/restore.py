"""``table restore``: one commit in which a table equals its state at an older ref.

The table is pointed at the Lance version that ref names (rows, schema and indices together),
without copying data: cost follows nothing but the commit itself. A table that did not exist at the
ref is dropped; one the branch no longer has is brought back. The next write to the table on this
branch rolls its Lance branch back to that content first, which ends the diff's delta chain there
(see ``TableVersion.delta_since``): rows brought back keep their old row versions.

Gates are not history: by default (``keep_gates=True``) the table keeps the data checks and
derived-column declarations the branch has now, whatever ``ref`` had, so restoring to a commit older
than a check never removes the check. A restore that cannot keep them is refused, before anything is
written: a declaration naming a column the restored table lacks, a check whose query no longer runs
on it, or a table dropped (absent at ``ref``) that carries gates. ``keep_gates=False`` takes them
from ``ref`` as they were there (removing any added since) — the only way a restore removes one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.errors import ConcurrentWriteError, InvalidOperationError, TableNotFoundError
from trimerge.lineage.history.names import validate_table_name
from trimerge.lineage.history.protection import refuse

if TYPE_CHECKING:
    from trimerge.lineage.ports import RestoreHost

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
    keep_gates: bool = True  # the table kept the branch's checks and derived declarations

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (what ``--json`` prints)."""
        return {"table": self.table, "ref": self.ref, "source_commit": self.source.id, "branch": self.branch,
                "action": self.action, "commit": self.commit.id if self.commit else None, "dry_run": self.dry_run,
                "keep_gates": self.keep_gates}


def restore(repo: "RestoreHost", table: str, ref: str, *, branch: str | None = None, actor: str | None = None,
            message: str | None = None, dry_run: bool = False, keep_gates: bool = True) -> RestoreResult:
    """Make ``table`` on ``branch`` (default: the current one) what it was at ``ref``, as one commit;
    it keeps the branch's checks and derived declarations unless ``keep_gates=False`` (see above)."""
    repo.check_writable()
    validate_table_name(table)
    if not isinstance(keep_gates, bool):
        raise InvalidOperationError(f"keep_gates= takes True or False, not {keep_gates!r}")
    at = repo.resolve(ref)
    repo.check_readable(at)
    name = repo.default_ref(branch)
    tip = repo.branches.get(name)
    then = at.tables.get(table)
    now_ = repo.commit(tip.commit_id).tables.get(table)
    if then is None and now_ is None:
        raise TableNotFoundError(f"cannot restore {table!r}: there is no such table at {ref!r} nor on branch {name!r}")
    # Refused before the states are compared, as reset is: a no-op restore (or a dry run) on a
    # protected branch is refused too, never answered "unchanged".
    refuse(repo, name, "restore")
    if keep_gates:
        then = with_gates(repo, table, ref, then, now_, around=repo.commit(tip.commit_id).tables)
    action = ("unchanged" if then is not None and now_ is not None and same_state(then, now_) else
              "dropped" if then is None else "brought back" if now_ is None else "restored")
    result = RestoreResult(table, ref, at, name, action, dry_run=dry_run, keep_gates=keep_gates)
    if dry_run or action == "unchanged":
        return result
    crashpoint("restore_read")
    meta = {"restore.table": table, "restore.ref": ref, "restore.commit": at.id,
            "restore.gates": "kept" if keep_gates else "from ref"}
    with repo.transaction(name, actor=actor, message=message or f"Restore {table} to {ref} ({at.id[:10]})",
                          metadata=meta) as tx:
        tx.refer(at.id)  # gc keeps its data while this runs; refused if gc condemned it
        current = tx.table_version(table) if table in tx.tables() else None
        if current != now_:
            # Someone changed the table after the restore read it: restoring now would silently
            # undo a change its caller never saw (a lost update), so the caller retries instead.
            raise ConcurrentWriteError(f"{table!r} on branch {name!r} changed while it was being restored "
                                       f"to {ref!r}; retry")
        if then is None:
            tx.drop_table(table)
        elif current is None or not same_state(current, then):
            tx.set_table(table, then)
    result.commit = tx.commit
    if result.commit is None:
        result.action = "unchanged"
    return result


def same_state(a: TableVersion, b: TableVersion) -> bool:
    """Same content and the same gates (nothing for a restore to do)."""
    return a.location == b.location and a.checks == b.checks and a.derived == b.derived


def with_gates(repo: "RestoreHost", table: str, ref: str, then: TableVersion | None,
               now_: TableVersion | None, *, around: Mapping[str, TableVersion] | None = None) -> TableVersion | None:
    """``then`` (the table at ``ref``) carrying the checks and derived declarations ``now_`` has;
    :class:`InvalidOperationError` when the restored table cannot carry them. A check reading other
    tables binds against them as ``around`` (the branch's tables) has them."""
    from trimerge.lineage.gates.checks import bind, resolve_reads, table_checks

    hint = "pass keep_gates=False (--no-keep-gates) to take them from the ref as they were there"
    if now_ is None or (then is not None and then.checks == now_.checks and then.derived == now_.derived):
        return then
    if then is None:
        if now_.checks or now_.derived:
            raise InvalidOperationError(f"cannot restore {table!r} to {ref!r}: it did not exist there, and dropping it "
                                        f"would remove its checks and derived declarations; {hint}")
        return then
    dataset = repo.open_table_version(then)
    columns = set(dataset.schema.names)
    lost = [c for c, inputs in now_.derived if c not in columns or not columns.issuperset(inputs)]
    if lost:
        raise InvalidOperationError(f"cannot restore {table!r} to {ref!r} keeping its derived declaration(s) of "
                                    f"{', '.join(lost)}: {ref} lacks the columns they name; {hint}")
    for check in table_checks(now_, table).values():
        try:
            found, _missing = resolve_reads(check.reads(), around or {})
            others = {n: repo.open_table_version((around or {})[n]) for n in found.values() if n != table}
            bind(table, dataset, check.sql, f"check {check.name!r}", others=others)
        except InvalidOperationError as exc:
            raise InvalidOperationError(f"cannot restore {table!r} to {ref!r} keeping {exc}; {hint}") from None
    return replace(then, checks=now_.checks, derived=now_.derived)
