"""Merge requests and the merge queue: ``request create/list/show/review/merge/close/reopen`` and
``queue run/list`` (the API is ``repo.requests``, :mod:`trimerge.review`).

Exit codes as everywhere: 0 done, 1 refused by a rule (missing approvals, conflicts, failing
checks), 2 bad input (unknown request, a closed request, a self-review...), 3 a lost race (retry).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trimerge.cli.app import EXIT_NO, MAX_COUNT, Context, cli, common, echo_lines, emit, fail
from trimerge.cli.diffs import text_value
from trimerge.cli.merging import parse_strategy

SHOW_FORMATS = ("text", "markdown", "json", "sarif", "junit")


@cli.group("request")
def request() -> None:
    """Merge requests: a reviewed way into a branch (see 'branch protect --approvals')."""


def _line(r: Any) -> str:
    queued = " (queued)" if r.queued is not None else ""
    return f"#{r.id}\t{r.state}{queued}\t{r.source} -> {r.into}\t{r.title}\t({r.author})"


def _said(r: Any, what: str) -> str:
    return f"{what} merge request #{r.id}: {r.source} -> {r.into} ({r.state})"


@request.command("create")
@click.argument("source")
@click.option("--into", default="main", show_default=True, help="The branch to merge into.")
@click.option("--title", required=True, help="One line saying what the change does.")
@click.option("--body", default=None, help="The longer description.")
@click.option("--actor", default=None, help="Who asks (default: $TRIMERGE_ACTOR or user@host).")
@common
def request_create(obj: Context, source: str, into: str, title: str, body: str | None, actor: str | None) -> None:
    """Open a request to merge branch SOURCE into a branch."""
    r = obj.repo().requests.create(source, into=into, title=title, body=body, actor=actor)
    emit(obj, r.to_json(), f"Opened merge request #{r.id}: {r.source} -> {r.into}: {r.title}")


@request.command("list")
@click.option("--state", type=click.Choice(["open", "merged", "closed"]), default=None, help="Only these.")
@click.option("--into", default=None, help="Only requests into this branch.")
@click.option("--remote", default=None, help="The requests of this remote, as the last clone or fetch copied them.")
@common
def request_list(obj: Context, state: str | None, into: str | None, remote: str | None) -> None:
    """List merge requests by number."""
    found = obj.open(read_only=True).requests.list(state=state, into=into, remote=remote)
    emit(obj, [r.to_json() for r in found], lambda: echo_lines(_line(r) for r in found))


@request.command("show")
@click.argument("number", metavar="N")
@click.option("--format", "fmt", type=click.Choice(SHOW_FORMATS), default=None,
              help="text (default), markdown (a CI comment), json, or sarif/junit as merge reports are.")
@click.option("-o", "output", default=None, metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None,
              help="At most N changed rows per table (default: 20 in text, 1000 in JSON).")
@click.option("--remote", default=None, help="A request of this remote (as copied by clone or fetch).")
@common
def request_show(obj: Context, number: str, fmt: str | None, output: str | None, limit: int | None,
                 remote: str | None) -> None:
    """What a reviewer needs: the three-dot diff, the conflicts and checks of a dry-run merge,
    the reviews, and whether it can merge (and why not)."""
    fmt = fmt or ("json" if obj.json else "text")
    if output is not None:
        _check_output(output)
    view = obj.repo().requests.show(number, remote=remote)  # the dry run builds its result aside: not read-only
    if fmt == "text":
        text = "\n".join(_show_text(view, 20 if limit is None else limit))
    elif fmt == "json":
        import json

        text = json.dumps(view.to_json(rows=1000 if limit is None else limit), indent=2, default=str)
    else:
        text = view.report(fmt)
    if output is None:
        click.echo(text)
    else:
        Path(output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _check_output(path: str) -> None:
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.lineage.storage.outputs import FILE, check_output

    try:
        check_output(path, FILE, "-o")
    except InvalidOperationError as exc:
        fail(str(exc))


def _show_text(view: Any, limit: int) -> list[str]:
    r = view.request
    lines = [f"merge request #{r.id}: {r.title}", f"  {r.source} -> {r.into}, opened by {r.author} at "
             f"{r.created_at:%Y-%m-%d %H:%M:%S}, {r.state}" + (f" as {r.merge_commit[:10]}" if r.merge_commit else "")
             + (" (queued)" if r.queued is not None else "")]
    if r.body:
        lines += ["", *(f"    {line}" for line in r.body.splitlines())]
    if view.diff is not None:
        dots = "..." if view.diff.three_dot else ".."
        lines += ["", f"changes ({view.diff.before.id[:10]}{dots}{view.diff.after.id[:10]}):"]
        for name, td in sorted(view.diff.tables.items()):
            if td.status == "unchanged" and not td.index_changes:
                continue
            c = td.counts
            lines.append(f"  === {name} ({td.status}: +{c.inserted} -{c.deleted} ~{c.updated})")
            shown = td.head(limit)
            for row in shown.to_pylist():
                key = ", ".join(f"{k}={text_value(row[k])}" for k in td.primary_key)
                if row["change"] == "update":
                    before, after = row.get("before") or {}, row.get("after") or {}
                    cells = "; ".join(f"{col}: {text_value(before.get(col))} -> {text_value(after.get(col))}"
                                      for col in row["changed_columns"] if col in after)
                    lines.append(f"    ~ {key}: {cells}")
                else:
                    lines.append(f"    {'+' if row['change'] == 'insert' else '-'} {key}")
            if shown.num_rows < c.rows_changed:
                lines.append(f"    ... {c.rows_changed - shown.num_rows} more rows (--limit N, or --format json)")
    for c in view.conflicts:
        lines.append(f"CONFLICT {c.describe()}")
    for c in view.checks:
        lines.append(f"{'check passed' if c.passed else 'CHECK FAILED'} {c.describe()}")
    lines.append("reviews:" if view.reviews else "reviews: none")
    for v in view.reviews:
        lines.append(f"  {v.actor}: {v.verdict} at {v.commit[:10]}{' (stale)' if v.stale else ''}"
                     + (f": {v.comment}" if v.comment else ""))
    if view.approvals is not None:
        lines.append(f"approvals: {len(view.approvals.approvers)} of {view.approvals.required}")
    if r.state == "open":
        lines.append("mergeable: yes" if view.mergeable else f"mergeable: no: {view.why}")
    return lines


@request.command("review")
@click.argument("number", metavar="N")
@click.option("--approve", is_flag=True, help="Approve the source's current tip.")
@click.option("--request-changes", "changes", is_flag=True, help="Ask for changes (blocks the merge).")
@click.option("--comment", default=None, help="What the reviewer says.")
@click.option("--actor", default=None, help="The reviewer (default: $TRIMERGE_ACTOR or user@host).")
@common
def request_review(obj: Context, number: str, approve: bool, changes: bool, comment: str | None,
                   actor: str | None) -> None:
    """Review request N: --approve or --request-changes (recorded with the source tip seen)."""
    if approve == changes:
        fail("say either --approve or --request-changes")
    verdict = "approve" if approve else "request-changes"
    r = obj.repo().requests.review(number, verdict, comment=comment, actor=actor)
    last = r.reviews[-1]
    emit(obj, r.to_json(), f"{last.actor} reviewed merge request #{r.id}: {last.verdict} at {last.commit[:10]}")


@request.command("close")
@click.argument("number", metavar="N")
@click.option("--actor", default=None)
@common
def request_close(obj: Context, number: str, actor: str | None) -> None:
    """Close request N without merging it."""
    r = obj.repo().requests.close(number, actor=actor)
    emit(obj, r.to_json(), _said(r, "Closed"))


@request.command("reopen")
@click.argument("number", metavar="N")
@click.option("--actor", default=None)
@common
def request_reopen(obj: Context, number: str, actor: str | None) -> None:
    """Reopen closed request N."""
    r = obj.repo().requests.reopen(number, actor=actor)
    emit(obj, r.to_json(), _said(r, "Reopened"))


@request.command("merge")
@click.argument("number", metavar="N")
@click.option("--strategy", multiple=True, default=None,
              help="source-wins | dest-wins, or per table: TABLE=STRATEGY (repeatable, '*' for the rest).")
@click.option("--resolve", "resolve_file", default=None, metavar="FILE",
              help="Resolutions: the conflicts table with 'resolution' (ours|theirs|base|value) and 'value'.")
@click.option("--queue", "queued", is_flag=True, help="Put it in the target's merge queue instead ('queue run').")
@click.option("--actor", default=None)
@common
def request_merge(obj: Context, number: str, strategy: tuple[str, ...], resolve_file: str | None, queued: bool,
                  actor: str | None) -> None:
    """Merge request N into its target (one merge commit naming it), or queue it (--queue).

    Exit 0 merged, 1 refused (conflicts, failing checks, missing approvals), 2 bad input, 3 lost a race."""
    from trimerge.merge import MergeCheckError, MergeConflictError

    repo = obj.repo()
    if queued:
        if strategy or resolve_file:
            fail("--queue merges as the queue runner does: without --strategy or --resolve")
        r = repo.requests.enqueue(number, actor=actor)
        position = [q.id for q in repo.requests.queue(r.into)].index(r.id) + 1 if r.queued else 0
        emit(obj, {**r.to_json(), "position": position},
             f"Queued merge request #{r.id} into {r.into} (position {position}); 'trimerge queue run {r.into}' merges it")
        return
    resolutions = None
    if resolve_file is not None:
        from trimerge.merge.resolutions import read_table

        resolutions = read_table(resolve_file)
    try:
        r = repo.requests.merge(number, strategy=parse_strategy(strategy or ()), resolutions=resolutions, actor=actor)
    except (MergeConflictError, MergeCheckError) as exc:
        result = exc.result
        if obj.json:
            emit(obj, {"merged": False, "error": str(exc), "result": result.to_json()})
        else:
            for c in result.conflicts:
                click.echo(f"CONFLICT {c.describe()}")
            for c in result.failed_checks:
                click.echo(f"CHECK FAILED {c.describe()}")
            click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_NO)
    commit = r.merge_commit
    emit(obj, {**r.to_json(), "result": r.merge_result.to_json() if r.merge_result is not None else None},
         f"Merged request #{r.id} into {r.into}" + (f" as {repo.short_id(commit)}" if commit else
                                                    " (its source was in the target already)"))


@cli.group("queue")
def queue() -> None:
    """Merge queues: requests queued into a branch ('request merge N --queue'), merged in order."""


@queue.command("run")
@click.argument("branch", default="main")
@click.option("--wait", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Keep running until the queue has stayed empty this many seconds.")
@click.option("--actor", default=None, help="Who merges (default: whoever queued each request).")
@common
def queue_run(obj: Context, branch: str, wait: float, actor: str | None) -> None:
    """Merge the requests queued into BRANCH in order; one that conflicts or fails its checks leaves
    the queue with the reason, the others go on."""
    from trimerge.review.queue import run_queue

    repo = obj.repo()
    report = run_queue(repo.requests, branch, actor=actor, wait=wait)

    def text() -> None:
        for n in report.merged:
            commit = report.commits.get(n)
            click.echo(f"merged #{n}" + (f" as {repo.short_id(commit)}" if commit else " (already in the branch)"))
        for n in report.recovered:
            click.echo(f"recovered #{n}: merged by an interrupted runner")
        for n, why in report.removed:
            click.echo(f"removed #{n}: {why}")
        for n in report.deferred:
            click.echo(f"deferred #{n}: lost every race; still queued")
        if not (report.merged or report.recovered or report.removed or report.deferred):
            click.echo(f"the merge queue of {branch} is empty")

    emit(obj, report.to_json(), text)


@queue.command("list")
@click.argument("branch", default="main")
@common
def queue_list(obj: Context, branch: str) -> None:
    """The requests queued into BRANCH, in order."""
    found = obj.open(read_only=True).requests.queue(branch)
    emit(obj, [r.to_json() for r in found], lambda: echo_lines(_line(r) for r in found))
