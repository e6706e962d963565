"""Three-way merge of two commits of a repository, at table, schema, row and cell level.

The merge is a fold, in the shape of Dolt's: for each table, the table-level three-way table
(:mod:`trimerge.merge.plan`), then the schema merge (:mod:`trimerge.merge.schema`), then every
changed key classified once, vectorised (:mod:`trimerge.merge.classify`), each conflict decided —
a resolution given by hand first, then the table's strategy (:mod:`trimerge.merge.resolve`) —
and one set of row edits built (:mod:`trimerge.merge.rows`), applied to dest in one transaction
(:mod:`trimerge.merge.publish`): one merge commit whose parents are (destination tip, source tip).

Several merge bases that disagree (a criss-cross history) are first merged into a virtual base,
as git's recursive strategy does (:mod:`trimerge.merge.virtual_base`).

Conflict kinds: ``table.drop_modify``, ``table.add_add``, ``table.update_update`` (granularity
``table``), ``schema.column``, ``schema.drop_modify``, ``schema.primary_key``,
``row.delete_modify``, ``row.insert_insert`` and ``row.update_update``. Without a resolution or
strategy for each, a merge with conflicts publishes nothing.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from trimerge.diff.engine import Progress
from trimerge.diff.verify import verify_requested
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.gates.derived import check_on_stale
from trimerge.lineage.errors import InvalidOperationError, ReadOnlyRefError, RefSyntaxError
from trimerge.lineage.repository import Ref, Repository
from trimerge.merge import fastforward
from trimerge.merge.gates import Gate, merge_checks
from trimerge.merge.plan import ThreeWay, same_content
from trimerge.merge.publish import changes_anything, publish
from trimerge.merge.resolutions import Resolutions, check_writable, write_conflicts
from trimerge.merge.resolve import Resolver
from trimerge.merge.result import (
    GRANULARITIES,
    MAX_CONFLICTS,
    STRATEGIES,
    Conflict,
    Granularity,
    MergeBaseError,
    MergeCheckError,
    MergeConflictError,
    MergeResult,
    Strategy,
    TableMergeStats,
    validate_options,
)
from trimerge.merge.virtual_base import VirtualBase

__all__ = ["GRANULARITIES", "STRATEGIES", "Conflict", "Granularity", "MergeBaseError", "MergeCheckError",
           "MergeConflictError",
           "MergeResult", "Strategy", "TableMergeStats", "cherry_pick", "merge", "revert"]


def _resolve_inputs(source: Any, dest: Any, repo: Repository | None) -> tuple[Repository, str, str]:
    for r in (source, dest):
        if isinstance(r, Ref):
            if repo is not None and r.repo.uri != repo.uri:
                raise InvalidOperationError("source and dest belong to different repositories")
            repo = r.repo
    if repo is None:
        raise InvalidOperationError("merge needs repo=... or refs that carry their repository (repo.ref(...))")
    src = source.expr if isinstance(source, Ref) else source
    dst = dest.expr if isinstance(dest, Ref) else dest
    for r in (src, dst):
        if not isinstance(r, str):
            raise RefSyntaxError(f"a ref must be text or a Ref, not {type(r).__name__}")
    dst = repo.default_ref(dst)  # HEAD: the current branch
    if not repo.branches.exists(dst):
        if repo.tags.get_or_none(dst):
            raise ReadOnlyRefError(f"merge destination {dst!r} is a tag; merge into a branch")
        repo.resolve(dst)  # raises for unknown refs
        raise ReadOnlyRefError(f"merge destination {dst!r} is not a branch")
    return repo, src, dst


def _check_strategy_tables(strategy: Any, tables: set[str]) -> None:
    if isinstance(strategy, Mapping):
        unknown = sorted(t for t in strategy if t != "*" and t not in tables)
        if unknown:
            raise InvalidOperationError(f"strategy= names no table of this merge: {', '.join(unknown)} "
                                        f"(tables: {', '.join(sorted(tables)) or 'none'})")


def plan_merge(repo: Repository, base: Mapping[str, TableVersion], ours: Commit, theirs: Commit, *,
               resolver: Resolver, granularity: str, engine: str = "local", spark: Any = None,
               base_is_scratch: bool = False, max_conflicts: int | None = None, verify: bool = False,
               only: set[str] | None = None, progress: Progress | None = None) -> ThreeWay:
    """Plan the merge of ``theirs`` into ``ours`` against ``base`` (nothing is written). Close the
    result when done with it (Spark folds keep their rows on executors until then). ``only``: plan
    just these tables (the others stay as dest has them)."""
    def pick(tables: Mapping[str, TableVersion]) -> Mapping[str, TableVersion]:
        return tables if only is None else {n: tv for n, tv in tables.items() if n in only}

    three = ThreeWay(repo, pick(base), pick(ours.tables), pick(theirs.tables), resolver=resolver, granularity=granularity,
                     engine=engine, spark=spark, base_is_scratch=base_is_scratch, max_conflicts=max_conflicts,
                     verify=verify, progress=progress)
    try:
        three.run()
    except BaseException:
        three.close()
        raise
    return three


def _check_limit(max_conflicts: Any) -> None:
    if max_conflicts is not None and (not isinstance(max_conflicts, int) or isinstance(max_conflicts, bool)
                                      or max_conflicts < 0):
        raise InvalidOperationError(f"max_conflicts takes a non-negative whole number or None, not {max_conflicts!r}")


def _run(repo: Repository, *, source_ref: str, dest: str, theirs: Commit, bases: list[Commit], strategy: Any,
         granularity: str, dry_run: bool, actor: str | None, message: str, metadata: Mapping[str, str] | None,
         merge_commit: bool, engine: str = "local", spark: Any = None, resolutions: Any = None,
         conflicts_file: str | None = None, max_conflicts: int | None = MAX_CONFLICTS,
         verify: bool | None = None, only: set[str] | None = None, on_stale: str = "report",
         progress: Progress | None = None, checks: bool = True,
         replaying: tuple[Commit, Commit] | None = None) -> MergeResult:
    validate_options(strategy, granularity)
    if not isinstance(checks, bool):
        raise InvalidOperationError(f"checks= takes True or False, not {checks!r}")
    check_on_stale(on_stale)
    _check_limit(max_conflicts)
    if conflicts_file:
        check_writable(conflicts_file)
    given = resolutions if isinstance(resolutions, Resolutions) else Resolutions.from_data(resolutions)
    if engine not in ("local", "spark", "auto"):
        raise InvalidOperationError(f"unknown engine {engine!r} (use local, spark or auto)")
    ours = repo.resolve(dest)
    with VirtualBase(repo) as virtual:
        base_tables, is_virtual = virtual.tables(bases)
        _check_strategy_tables(strategy, set(ours.tables) | set(theirs.tables) | set(base_tables))
        resolver = Resolver(given, strategy, on_stale=on_stale)
        three = plan_merge(repo, base_tables, ours, theirs, resolver=resolver, granularity=granularity,
                           engine=engine, spark=spark, base_is_scratch=is_virtual, max_conflicts=max_conflicts,
                           verify=verify_requested(verify), only=only, progress=progress)
        try:
            result = _finish(repo, three, given, resolver, source_ref=source_ref, dest=dest, ours=ours, theirs=theirs,
                             bases=bases, is_virtual=is_virtual, strategy=strategy, granularity=granularity,
                             dry_run=dry_run, actor=actor, message=message, metadata=metadata,
                             merge_commit=merge_commit, conflicts_file=conflicts_file, max_conflicts=max_conflicts,
                             progress=progress, checks=checks, replaying=replaying)
        finally:
            three.close()
    return result


def _finish(repo: Repository, three: ThreeWay, given: Resolutions, resolver: Resolver, *, source_ref: str, dest: str,
            ours: Commit, theirs: Commit, bases: list[Commit], is_virtual: bool, strategy: Any, granularity: str,
            dry_run: bool, actor: str | None, message: str, metadata: Mapping[str, str] | None, merge_commit: bool,
            conflicts_file: str | None, max_conflicts: int | None, progress: Progress | None = None,
            checks: bool = True, replaying: tuple[Commit, Commit] | None = None) -> MergeResult:
    """The result of a planned merge: its conflicts (also to ``conflicts_file``), or its commit;
    the data checks gating ``dest`` run on the result first (:mod:`trimerge.merge.gates`).
    ``replaying``: (parent, commit) of a cherry-pick or revert, for the rule on empty commits.

    A dry run ends where the real run would publish and answers what it would: ``up-to-date``
    when it would publish nothing, and the error it would raise for a source or base whose data
    gc has reclaimed."""
    check_records = merge_checks(three)  # may add check.update_update conflicts
    unused = resolver.unused()
    if unused:
        shown = "; ".join(r.describe() for r in unused[:5]) + (f"; … {len(unused) - 5} more" if len(unused) > 5 else "")
        raise InvalidOperationError(f"{len(unused)} resolution(s) match no conflict of this merge: {shown}")
    total = sum(p.stats.conflicts for p in three.plans.values())
    if conflicts_file and total:
        write_conflicts(three.all_conflicts(), conflicts_file)
    result = MergeResult(status="merged", source_ref=source_ref, source_commit=theirs, dest_ref=dest,
                         dest_commit=ours, base=bases, conflicts=three.conflicts[:max_conflicts],
                         stats={n: p.stats for n, p in three.plans.items()}, dry_run=dry_run, strategy=strategy,
                         granularity=granularity, virtual_base=is_virtual,
                         stale=stale_keys(three.plans))
    gate = Gate(repo, dest, check_records, checks, result)
    if total or three.conflicts:
        result.status = "conflicts"
        gate.dry(three.plans, ours, conflicts=True)
        if not dry_run:
            raise MergeConflictError(result)
        return result
    refers = [theirs.id, *(b.id for b in bases)]  # the source and base data it may reuse
    # Git's rule on empty commits, by content, whatever the storage or the plan: a one-parent
    # commit that would change nothing is not published (the change is there already), except
    # the replay of a commit that changed nothing itself, which is kept.
    empty = not merge_commit and not changes_anything(repo, three.plans, ours, check_records)
    keep_empty = empty and replaying is not None and started_empty(repo, *replaying)
    if dry_run:
        gate.dry(three.plans, ours)
        if result.status == "merged":
            if empty and not keep_empty:
                result.status = "up-to-date"
            else:
                repo.reclaimed.check(refers)  # what the publish checks last (lineage/transaction.py)
        return result
    meta = {"merge.resolved_by_hand": str(given.applied),
            "merge.resolved_by_strategy": str(sum(p.stats.resolved for p in three.plans.values())),
            "merge.source": source_ref, "merge.source_commit": theirs.id,
            "merge.base": ",".join(b.id for b in bases), "merge.granularity": granularity,
            **({"merge.virtual_base": "recursive"} if is_virtual else {}),
            **({"merge.strategy": json.dumps(strategy) if not isinstance(strategy, str) else strategy}
               if strategy else {}),
            **(metadata or {})}
    if progress is not None:
        progress(dest, "publish")
    result.commit = publish(repo, three.plans, dest, ours, [theirs.id] if merge_commit else [], refers, actor,
                            message, meta, gate=gate, keep_empty=keep_empty)
    if progress is not None:
        progress(dest, "published")
    if result.commit is None:
        result.status = "up-to-date"
    return result


def started_empty(repo: Repository, parent: Commit, commit: Commit) -> bool:
    """Whether ``commit`` changed no content of its parent (an upsert of rows as they were, a
    compaction): git's "started empty", kept when replayed."""
    return all(same_content(repo, name, parent.tables.get(name), commit.tables.get(name))
               for name in sorted(parent.tables.keys() | commit.tables.keys()))


def stale_keys(plans: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per table, the keys of the stale rows the fold reported (see trimerge.lineage.gates.derived), in
    key order (buckets and Spark partitions fold in other orders)."""
    out = {}
    for name, plan in sorted(plans.items()):
        keys = [row for t in plan.stale for row in t.to_pylist()]
        if keys:
            out[name] = sorted(keys, key=lambda row: tuple((v is None, v) for v in row.values()))
    return out


def checked_tables(tables: Any, known: set[str]) -> set[str] | None:
    """``tables=`` of a per-table merge: None (every table), or a non-empty list of table names
    that one side or the other has."""
    if tables is None:
        return None
    if isinstance(tables, str):
        tables = [tables]
    if not isinstance(tables, (list, tuple, set, frozenset)) or not all(isinstance(t, str) for t in tables):
        raise InvalidOperationError(f"tables= takes a list of table names, not {tables!r}")
    if not tables:
        raise InvalidOperationError("tables= is empty: name at least one table to merge (or leave it out)")
    unknown = sorted(t for t in tables if t not in known)
    if unknown:
        raise InvalidOperationError(f"tables= names no table of the source or the destination: {', '.join(unknown)} "
                                    f"(tables: {', '.join(sorted(known)) or 'none'})")
    return set(tables)


def merge(source: str | Ref, dest: str | Ref, *, repo: Repository | None = None,
          strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
          dry_run: bool = False, actor: str | None = None, message: str | None = None,
          metadata: Mapping[str, str] | None = None, engine: str = "auto", spark: Any = None,
          resolutions: Any = None, conflicts_file: str | None = None,
          max_conflicts: int | None = MAX_CONFLICTS, verify: bool | None = None, squash: bool = False,
          tables: list[str] | None = None, on_stale: str = "report",
          progress: Progress | None = None, checks: bool = True, fast_forward: str = "never") -> MergeResult:
    """Merge ``source`` (any ref) into branch ``dest``.

    Publishes one merge commit with parents (dest tip, source tip) — also when dest has not moved
    (the default ``fast_forward="never"``, lakeFS's rule). ``fast_forward="allow"`` (git's
    ``--ff``) instead moves dest to the source's tip when dest has not diverged (status
    ``fast-forward``, ``commit`` the source's tip) and merges otherwise; ``"only"``
    (``--ff-only``) moves it or raises :class:`~trimerge.merge.fastforward.FastForwardError`
    (see :mod:`trimerge.merge.fastforward`). Returns status ``up-to-date`` without a commit when the source is
    already contained in dest. ``resolutions`` (a table like :meth:`MergeResult.conflicts_table`
    plus ``resolution`` and ``value`` columns) settle single conflicts first; ``strategy``
    (``source-wins``/``dest-wins``, or per table) settles the rest. Conflicts left unresolved raise
    :class:`MergeConflictError` (with ``dry_run=True`` they are returned with status
    ``conflicts``). Several merge bases are merged into a virtual base first (git's recursive
    strategy). ``engine="spark"`` runs the row merge of every table changed on both sides on Spark:
    executors classify, resolve and write the new rows as Lance fragments, the driver commits once
    (``"auto"``: only tables whose planned rows exceed the threshold, when Spark is at hand — see
    :func:`trimerge.diff.diff`; ``spark``: a SparkSession).
    ``result.conflicts`` holds at most ``max_conflicts`` conflicts (None: all; the count of all is
    ``result.conflicts_total``); ``conflicts_file`` (.parquet, .csv, .jsonl) receives every one,
    ready to be filled in as ``resolutions``. ``verify=True`` (default: env ``TRIMERGE_VERIFY=1``)
    checks every diff the merge uses against the brute-force diff first (see ``diff``).

    ``squash=True`` publishes the same merge as a one-parent commit on dest (its metadata names the
    source tip; as in git, a later merge of the source starts again from the old merge base).
    ``tables=[...]`` merges only those tables (the others stay as dest has them) as a one-parent
    commit naming the source and the tables, so a later full merge of the source still brings the
    rest.

    Tables with derived columns (:meth:`Repository.set_derived`): rows whose derived value would
    come from one side and an input it is computed from from the other are listed in
    ``result.stale`` (``on_stale="report"``), or are ``row.stale_derived`` conflicts
    (``on_stale="conflict"``), resolved like any other.

    ``progress``: called as ``progress(table, "start")`` and ``progress(table, "done")`` around
    each table's merge (in name order, as ``diff(progress=)`` does), then
    ``progress(dest, "publish")`` and ``progress(dest, "published")`` around writing the commit
    (not for a dry run or a merge with conflicts).

    Data checks that gate ``dest`` (:meth:`Repository.checks`) run on the merge's result before
    it publishes (also on a dry run): a failing one publishes nothing and raises
    :class:`MergeCheckError` (a dry run returns status ``check_failed``); ``result.checks`` lists
    every check run. ``checks=False`` skips them, and the merge commit records that it did."""
    repo, src, dst = _resolve_inputs(source, dest, repo)
    validate_options(strategy, granularity)
    check_on_stale(on_stale)
    if not isinstance(squash, bool):
        raise InvalidOperationError(f"squash= takes True or False, not {squash!r}")
    ff_mode = fastforward.check_mode(fast_forward)
    if ff_mode == "only" and (squash or tables is not None):
        raise InvalidOperationError("fast_forward='only' moves the whole branch: it cannot be combined with "
                                    "squash= or tables=")
    theirs = repo.resolve(src)
    ours = repo.resolve(dst)
    only = checked_tables(tables, set(ours.tables) | set(theirs.tables))
    bases = repo.merge_bases(theirs.id, ours.id)
    if repo.is_ancestor(theirs.id, ours.id):
        # Nothing to merge, but a strategy naming no table is still a mistake worth saying.
        _check_strategy_tables(strategy, set(ours.tables) | set(theirs.tables)
                               | {t for b in bases for t in b.tables})
        return MergeResult(status="up-to-date", source_ref=src, source_commit=theirs, dest_ref=dst, dest_commit=ours,
                           base=bases, dry_run=dry_run, strategy=strategy, granularity=granularity)
    if ff_mode != "never" and not squash and only is None:
        blocker = fastforward.fast_forward_blocker(repo, dst, ours, theirs)
        if blocker is None:
            if not dry_run:
                fastforward.move(repo, dst, ours, theirs, actor=actor, source=src)
            return MergeResult(status="fast-forward", source_ref=src, source_commit=theirs, dest_ref=dst,
                               dest_commit=ours, base=bases, commit=theirs, dry_run=dry_run, strategy=strategy,
                               granularity=granularity)
        if ff_mode == "only":
            raise fastforward.FastForwardError(f"not possible to fast-forward '{dst}' to '{src}': {blocker} "
                                               "(merge without --ff-only to make a merge commit)")
    extra: dict[str, str] = {}
    default = f"Merge '{src}' into '{dst}'"
    if only is not None:
        extra["merge.tables"] = ",".join(sorted(only))
        default = f"Merge table(s) {', '.join(sorted(only))} of '{src}' into '{dst}'"
    if squash:
        extra["merge.squash"] = "true"
        default = "Squash " + default[0].lower() + default[1:]
    return _run(repo, source_ref=src, dest=dst, theirs=theirs, bases=bases, strategy=strategy,
                granularity=granularity, dry_run=dry_run, actor=actor,
                message=message or default, metadata={**extra, **(metadata or {})},
                merge_commit=not squash and only is None, engine=engine, spark=spark, resolutions=resolutions,
                conflicts_file=conflicts_file, max_conflicts=max_conflicts, verify=verify, only=only,
                on_stale=on_stale, progress=progress, checks=checks)


def _apply_commit(commit: str | Ref, branch: str | Ref, *, invert: bool, repo: Repository | None,
                  strategy: Any, granularity: str, dry_run: bool, actor: str | None, message: str | None,
                  metadata: Mapping[str, str] | None, resolutions: Any = None, conflicts_file: str | None = None,
                  max_conflicts: int | None = MAX_CONFLICTS, verify: bool | None = None,
                  on_stale: str = "report", checks: bool = True) -> MergeResult:
    """Three-way merge of one commit's change onto ``branch``: the change from the commit's first
    parent to the commit (cherry-pick), or back from the commit to its parent (revert)."""
    repo, src, dst = _resolve_inputs(commit, branch, repo)
    picked = repo.resolve(src)
    verb = "revert" if invert else "cherry-pick"
    if not picked.parents:
        raise InvalidOperationError(f"cannot {verb} the root commit")
    parent = repo.commit(picked.parents[0])
    base, theirs = (picked, parent) if invert else (parent, picked)
    default = f"{'Revert' if invert else 'Cherry-pick'} '{picked.message}' ({picked.id[:10]})"
    return _run(repo, source_ref=src, dest=dst, theirs=theirs, bases=[base], strategy=strategy,
                granularity=granularity, dry_run=dry_run, actor=actor, message=message or default,
                metadata={f"{verb.replace('-', '_')}.commit": picked.id, **(metadata or {})}, merge_commit=False,
                resolutions=resolutions, conflicts_file=conflicts_file, max_conflicts=max_conflicts, verify=verify,
                on_stale=on_stale, checks=checks, replaying=(parent, picked))


def cherry_pick(commit: str | Ref, branch: str | Ref, *, repo: Repository | None = None,
                strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
                dry_run: bool = False, actor: str | None = None, message: str | None = None,
                metadata: Mapping[str, str] | None = None, resolutions: Any = None, conflicts_file: str | None = None,
           max_conflicts: int | None = MAX_CONFLICTS, verify: bool | None = None,
           on_stale: str = "report", checks: bool = True) -> MergeResult:
    """Apply the changes ``commit`` made (relative to its first parent) to ``branch``: a three-way
    merge with base = the commit's parent, source = the commit. Publishes a one-parent commit.

    Empty commits follow git's rule, judged by content (rows, schema, indices, declarations,
    checks), never by storage or merge plan: when ``branch`` has the change already nothing is
    published (status ``up-to-date``; a rebase drops the commit), but a commit that changed
    nothing itself (an upsert of rows as they were, a compaction) is replayed as a commit that
    changes nothing. The same holds for :func:`revert`."""
    return _apply_commit(commit, branch, invert=False, repo=repo, strategy=strategy, granularity=granularity,
                         dry_run=dry_run, actor=actor, message=message, metadata=metadata, resolutions=resolutions,
                         conflicts_file=conflicts_file, max_conflicts=max_conflicts, verify=verify,
                         on_stale=on_stale, checks=checks)


def revert(commit: str | Ref, branch: str | Ref, *, repo: Repository | None = None,
           strategy: Strategy | Mapping[str, Strategy] | None = None, granularity: Granularity = "cell",
           dry_run: bool = False, actor: str | None = None, message: str | None = None,
           metadata: Mapping[str, str] | None = None, resolutions: Any = None, conflicts_file: str | None = None,
           max_conflicts: int | None = MAX_CONFLICTS, verify: bool | None = None,
           on_stale: str = "report", checks: bool = True) -> MergeResult:
    """Undo the changes ``commit`` made, on ``branch``: a three-way merge with base = the commit,
    source = its first parent. Publishes a one-parent commit."""
    return _apply_commit(commit, branch, invert=True, repo=repo, strategy=strategy, granularity=granularity,
                         dry_run=dry_run, actor=actor, message=message, metadata=metadata, resolutions=resolutions,
                         conflicts_file=conflicts_file, max_conflicts=max_conflicts, verify=verify,
                         on_stale=on_stale, checks=checks)
