"""Pre-merge hooks: gates that judge a merge's would-be result before it publishes.

A merge into a branch that a gate hook (``gate=True``) matches builds its result as it always
does (:mod:`trimerge.merge.gates`), runs the data checks, and then each gate: the result is stored
as a commit no ref names — so ``REPO::<commit>::TABLE`` opens it from any process (LanceDB,
pylance, DuckDB through ``repo.sql``, ``trimerge`` itself) — and the hook is told of event
``pre-merge`` with that commit as ``ref`` and an address per table. A command that exits non-zero,
a webhook that answers anything but 2xx or does not answer in time refuses the merge like a failing
check (:class:`~trimerge.merge.result.MergeCheckError`, exit 1): the merge's report lists it with
the hook's output. The commit is removed once the gates have answered. A dry run asks the gates
too; the report of a merge with conflicts does not (there is no result to judge).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable, Mapping

from trimerge.hooks import attempts
from trimerge.hooks.delivery import load_hooks, read_secret, send
from trimerge.lineage.commit import Commit, TableVersion, format_time
from trimerge.lineage.gates.checks import CheckResult
from trimerge.lineage.history.commits import commit_key
from trimerge.lineage.history.refs import now
from trimerge.lineage.storage.ids import new_ulid

#: Characters of a gate's output kept in the merge's report.
REPORT_OUTPUT = 2000
SCRATCH_META = "hooks.pre-merge"


def applies(repo: Any, dest: str) -> Callable[..., list[CheckResult]] | None:
    """:data:`~trimerge.lineage.extensions.MERGE_GATES` entry: the gate runner of a merge into
    ``dest``, or None when no gate hook matches it (the merge pays one listing)."""
    hooks = [h for h in load_hooks(repo.docs) if h.gate and fnmatch.fnmatchcase(dest, h.branch)]
    if not hooks:
        return None

    def judge(tables: Mapping[str, TableVersion], base: Commit, result: Any, dry_run: bool) -> list[CheckResult]:
        source = result.source_commit
        parents = [base.id] + ([source.id] if source is not None and source.id != base.id else [])
        commit = repo.commits.build(parents=parents, actor="trimerge:pre-merge", branch=dest, tables=tables,
                                    message=f"the would-be result of merging {result.source_ref} into {dest} "
                                            "(for its pre-merge hooks; never on a branch)",
                                    metadata={SCRATCH_META: "true"}, created_at=now())
        repo.commits.put(commit)
        try:
            return [_run_one(repo, hook, dest, commit, base, result, dry_run) for hook in hooks]
        finally:
            repo.docs.delete(commit_key(commit.id))

    return judge


def _run_one(repo: Any, hook: Any, dest: str, commit: Commit, base: Commit, result: Any, dry_run: bool) -> CheckResult:
    stats = {n: s.to_json() for n, s in sorted(getattr(result, "stats", {}).items())
             if getattr(s, "action", "unchanged") != "unchanged"}
    doc = {"event": "pre-merge", "id": f"pre-merge-{new_ulid()}", "repository": repo.uri, "time": format_time(now()),
           "branch": dest, "commit": commit.id, "ref": commit.id, "parents": list(commit.parents), "old": base.id,
           "source": result.source_ref, "source_commit": result.source_commit.id if result.source_commit else None,
           "actor": repo.default_actor(), "message": commit.message, "dry_run": bool(dry_run),
           "addresses": {t: f"{repo.uri}::{commit.id}::{t}" for t in sorted(commit.tables)}, "tables": stats}
    secret = read_secret(repo.docs, hook.name) if hook.url is not None else None
    outcome = send(repo, hook, doc, hook.timeout, secret)
    try:
        attempts.record(repo.docs, hook.name, "pre-merge", str(doc["id"]), 1, outcome)
    except OSError:
        pass  # the log is best effort; the verdict is what counts
    reason = None
    if not outcome.ok:
        shown = outcome.output.strip()[-REPORT_OUTPUT:]
        # A command's last line is in its error already; a webhook's answer is not.
        more = bool(shown) and (hook.url is not None or len([ln for ln in shown.splitlines() if ln.strip()]) > 1)
        reason = f"pre-merge hook {hook.name} refused the merge: {outcome.error}" + (f"\n{shown}" if more else "")
    return CheckResult(name=f"hook:{hook.name}", table="*", failing_rows=0, sql="", scope=f"pre-merge hook ({hook.kind})",
                       reason=reason)
