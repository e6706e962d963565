"""History editing on the command line: rebase, branch reset, table restore and reflog."""

from __future__ import annotations

import sys

import click

from trimerge.cli.app import EXIT_NO, MAX_COUNT, Context, cli, common, emit, fail
from trimerge.cli.history import branch
from trimerge.cli.merging import parse_strategy
from trimerge.cli.tables import table


@branch.command("reset")
@click.argument("name")
@click.argument("ref")
@click.option("--dry-run", is_flag=True, help="Say what would move, move nothing.")
@click.option("--actor", default=None)
@click.option("--expect", "expected_tip", default=None, metavar="COMMIT",
              help="Move only if NAME is at COMMIT now (the tip you saw); else exit 3 and change nothing.")
@common
def branch_reset(obj: Context, name: str, ref: str, dry_run: bool, actor: str | None,
                 expected_tip: str | None) -> None:
    """Move branch NAME to REF (git's reset --hard). Undo it with 'trimerge branch reset NAME NAME@{1}'.
    A branch that moved after REF was resolved is not moved (exit 3: retry)."""
    repo = obj.repo()
    r = repo.branches.reset(name, ref, actor=actor, dry_run=dry_run, expected_tip=expected_tip)

    def text() -> None:
        verb = "would move" if dry_run else "moved"
        if not r.moved:
            click.echo(f"{name} is at {repo.short_id(r.new)} already")
            return
        click.echo(f"{name} {verb} from {repo.short_id(r.old)} to {repo.short_id(r.new)}")
        if r.unreachable:
            click.echo(f"{r.unreachable} commit(s) no branch or tag reaches any more: the reflog keeps them until "
                       f"gc's retention passes (undo: trimerge branch reset {name} {name}@{{1}})")

    emit(obj, r.to_json(), text)


@table.command("restore")
@click.argument("name", metavar="TABLE")
@click.option("--ref", required=True, help="The ref whose state of TABLE to restore.")
@click.option("-b", "--branch", default=None, help="Branch to commit on (default: the current branch).")
@click.option("-m", "--message", default=None)
@click.option("--actor", default=None)
@click.option("--dry-run", is_flag=True, help="Say what would change, commit nothing.")
@click.option("--keep-gates/--no-keep-gates", default=True, show_default=True,
              help="Keep the branch's data checks and derived-column declarations on TABLE (--no-keep-gates: "
                   "take them from REF as they were there).")
@common
def table_restore(obj: Context, name: str, ref: str, branch: str | None, message, actor, dry_run: bool,
                  keep_gates: bool) -> None:
    """One commit in which TABLE equals its state at REF (dropped if it did not exist there); its
    checks and derived declarations stay as the branch has them unless --no-keep-gates."""
    repo = obj.repo()
    r = repo.restore(name, ref, branch=branch, actor=actor, message=message, dry_run=dry_run, keep_gates=keep_gates)

    def text() -> None:
        if r.action == "unchanged":
            click.echo(f"{name} on {r.branch} is as it was at {ref} already: nothing to restore")
        elif r.dry_run:
            click.echo(f"dry run: {name} would be {r.action} ({ref} = {repo.short_id(r.source.id)})")
        else:
            click.echo(f"[{r.branch} {repo.short_id(r.commit.id)}] {r.commit.message} ({name} {r.action})")

    emit(obj, r.to_json(), text)


@cli.command("rebase")
@click.argument("branch_name", metavar="[BRANCH]", required=False)
@click.option("--onto", required=True, help="The ref to replay BRANCH's commits on.")
@click.option("--strategy", default=None, multiple=True,
              help="source-wins | dest-wins, or per table: TABLE=STRATEGY (repeatable).")
@click.option("--resolve", "resolve_file", default=None, metavar="FILE",
              help="Resolutions (the conflicts table filled in; a 'commit' column names the replay).")
@click.option("--skip-merges", is_flag=True, help="Leave merge commits of the range out instead of refusing.")
@click.option("--dry-run", is_flag=True, help="Build every replay, move nothing.")
@click.option("--no-checks", "no_checks", is_flag=True, default=False,
              help="Skip the data checks that gate BRANCH (the reflog entry of the move records it).")
@click.option("--actor", default=None)
@common
def rebase_cmd(obj: Context, branch_name, onto, strategy, resolve_file, skip_merges, dry_run, no_checks, actor) -> None:
    """Replay BRANCH's commits (default: the current branch) on top of --onto, then move BRANCH once.

    Exit 0 rebased or up to date, 1 conflicts or a failing data check (nothing published), 2 bad
    input, 3 lost a race."""
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.merge import rebase
    from trimerge.merge.rebase import RebaseCheckError, RebaseConflictError
    from trimerge.merge.resolutions import read_table

    repo = obj.repo()
    try:
        resolutions = read_table(resolve_file) if resolve_file else None
        r = rebase(branch_name, onto, repo=repo, strategy=parse_strategy(strategy), resolutions=resolutions,
                   dry_run=dry_run, actor=actor, skip_merges=skip_merges, checks=not no_checks)
    except (RebaseConflictError, RebaseCheckError) as exc:
        r = exc.rebase_result
    except InvalidOperationError as exc:
        fail(str(exc).replace("skip_merges=True", "--skip-merges").replace("strategy=", "--strategy")
             .replace("resolutions=", "--resolve"))

    def text() -> None:
        if r.status == "up-to-date":
            click.echo(f"{r.branch} is up to date with {onto}")
            return
        if r.status == "conflicts":
            c = repo.commit(r.conflict_commit)
            click.echo(f"replaying {repo.short_id(c.id)} ({c.message}):")
            for conflict in r.conflicts:
                click.echo(f"CONFLICT {conflict.describe()}")
            click.echo(f"{len(r.conflicts)} conflict(s); nothing published" if not dry_run
                       else f"dry run: {len(r.conflicts)} conflict(s)")
            return
        for c in r.checks:
            click.echo(f"{'CHECK FAILED' if not c.passed else 'check passed'} {c.describe()}")
        if r.status == "check_failed":
            click.echo(f"{len(r.failed_checks)} check(s) failed; " + ("nothing published" if not dry_run else "dry run"))
            return
        if r.checks_skipped:
            click.echo(f"checks skipped: {', '.join(r.checks_skipped)}")
        verb = "dry run: would rebase" if dry_run else "Rebased"
        click.echo(f"{verb} {r.branch} onto {onto}: {len(r.replayed)} commit(s) replayed"
                   + (f", {len(r.dropped)} already there" if r.dropped else "")
                   + (f", {len(r.skipped_merges)} merge(s) left out" if r.skipped_merges else "")
                   + ("" if dry_run else f"; now at {repo.short_id(r.new_tip)} (undo: trimerge branch reset "
                                         f"{r.branch} {r.branch}@{{1}})"))

    emit(obj, r.to_json(), text)
    if r.status in ("conflicts", "check_failed"):
        sys.exit(EXIT_NO)


@cli.command("reflog")
@click.argument("ref", required=False)
@click.option("-n", "limit", type=click.IntRange(0, MAX_COUNT), default=None, help="Show at most N entries.")
@common
def reflog_cmd(obj: Context, ref: str | None, limit: int | None) -> None:
    """Moves of REF (a branch, or HEAD for switches; default: every ref), newest first. REF@{N} in
    any ref expression is the N-th previous value of REF."""
    repo = obj.repo()
    entries = repo.reflog(ref, limit)
    rows = [e.to_json() for e in entries]
    counters: dict[str, int] = {}

    def short(cid) -> str:
        return repo.short_id(cid) if cid else "-" * 7

    def text() -> None:
        for e in entries:
            n = counters.get(e.ref, 0)
            counters[e.ref] = n + 1
            click.echo(f"{short(e.new)} {e.ref}@{{{n}}}: {e.reason} ({e.actor}, {e.time.isoformat(timespec='seconds')})")

    emit(obj, rows, text)
