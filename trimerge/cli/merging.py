"""merge, revert and cherry-pick."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable

import click

from trimerge.cli.app import (
    EXIT_NO,
    EXIT_OUTPUT_FAILED,
    Context,
    cli,
    common,
    describe_os_error,
    emit,
    fail,
    say_error,
)


def merge_options(fn: Callable) -> Callable:
    for opt in reversed([
        click.option("--strategy", default=None,
                     help="source-wins | dest-wins, or per table: TABLE=STRATEGY (repeatable, '*' for the rest).",
                     multiple=True),
        click.option("--granularity", type=click.Choice(["cell", "row", "table"]), default="cell", show_default=True),
        click.option("--dry-run", is_flag=True, help="Compute everything, publish nothing."),
        click.option("--report", "reports", multiple=True, metavar="FORMAT[:PATH]",
                     help="junit | sarif | markdown | json | github, to stdout or PATH (repeatable)."),
        click.option("--message", "-m", default=None),
        click.option("--actor", default=None),
        click.option("--conflicts", "conflicts_file", default=None, metavar="FILE",
                     help="Write the conflicts table to FILE (.parquet, .csv, .jsonl) to fill in resolutions."),
        click.option("--resolve", "resolve_file", default=None, metavar="FILE",
                     help="Resolutions: the conflicts table with 'resolution' (ours|theirs|base|value) and 'value'."),
        click.option("--no-checks", "no_checks", is_flag=True, default=False,
                     help="Skip the data checks that gate the destination (the merge commit records it)."),
        click.option("--verify", is_flag=True, default=False,
                     help="Check every diff the merge uses against the brute-force diff first (exit 4 on a "
                          "difference; also TRIMERGE_VERIFY=1)."),
    ]):
        fn = opt(fn)
    return fn


def _parse_strategy(values: tuple[str, ...]):
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    out = {}
    for v in values:
        if "=" not in v:
            fail(f"bad --strategy {v!r}: use STRATEGY alone or TABLE=STRATEGY")
        table, strategy = v.split("=", 1)
        out[table] = strategy
    return out


parse_strategy = _parse_strategy  # public name, for other command modules (rebase)


CONFLICTS_SUFFIXES = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson")


def _check_output(path: str, what: str) -> None:
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.lineage.storage.outputs import FILE, check_output

    try:
        check_output(path, FILE, what)
    except InvalidOperationError as exc:
        fail(str(exc))


#: API argument -> CLI option, for API messages shown on the command line.
API_TO_CLI = {"strategy=": "--strategy", "resolutions=": "--resolve", "granularity=": "--granularity",
              "conflicts_file=": "--conflicts", "dry_run=": "--dry-run",
              "tables=": "--table", "squash=": "--squash"}


def api_to_cli(message: str) -> str:
    """An API error message with its argument names (``strategy=``) replaced by the CLI's options."""
    for arg, option in API_TO_CLI.items():
        message = message.replace(arg, option)
    return message


def _merge_bar(obj: Context, repo: Any, source: str, dest: str) -> Any:
    """A progress bar (on stderr, once the merge has run a second) when a person watches: not with
    --json, nor when stdout or stderr is not a terminal."""
    if obj.json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    from trimerge.cli.diffs import DelayedProgress
    from trimerge.lineage.errors import TrimergeError

    try:  # tables the merge will go through; a bad ref is the merge's own error to report
        total = len(set(repo.resolve(source).tables) | set(repo.resolve(dest).tables))
    except TrimergeError:
        return None
    return DelayedProgress(total + 1, "merge")  # + publishing


#: Report formats that are one JSON document (what --json may print instead of the result).
JSON_REPORTS = ("json", "sarif")


def _run_merge(obj: Context, fn, source: str, into: str | None, strategy, granularity, dry_run, reports, message,
               actor, engine: str = "auto", spark: Any = None, conflicts_file: str | None = None,
               resolve_file: str | None = None, verify: bool = False, squash: bool = False,
               tables: tuple[str, ...] = (), on_stale: str = "report", no_checks: bool = False,
               fast_forward: str = "never") -> None:
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.merge.reports import stale_lines
    from trimerge.merge import MergeCheckError, MergeConflictError
    from trimerge.merge.reports import FORMATS
    from trimerge.merge.resolutions import read_table as read_resolutions

    # Every output is checked before the repository is even opened: a report or conflicts file
    # that cannot be written must not follow a merge that ran, or worse, was published.
    for spec in reports:
        fmt, _, path = spec.partition(":")
        if fmt not in FORMATS:
            fail(f"unknown report format {fmt!r} (use {', '.join(FORMATS)})")
        if path:
            _check_output(path, f"--report {fmt}")
        elif obj.json and (fmt not in JSON_REPORTS or sum(":" not in r for r in reports) > 1):
            # --json promises one JSON document on stdout: a JSON report on stdout is that document.
            fail(f"--report {fmt} prints to stdout, where --json prints one JSON document: write it to a file "
                 f"(--report {fmt}:PATH)")
    if conflicts_file is not None:
        if Path(conflicts_file).suffix.lower() not in CONFLICTS_SUFFIXES:
            fail(f"cannot write --conflicts {conflicts_file}: use .parquet, .csv or .jsonl")
        _check_output(conflicts_file, "--conflicts")
    repo = obj.repo()
    dest = into or repo.current_branch
    bar = _merge_bar(obj, repo, source, dest) if fn.__name__ == "merge" else None
    try:
        extra = {"engine": engine, "spark": spark} if fn.__name__ == "merge" else {}
        if bar is not None:
            extra["progress"] = bar
        if squash:
            extra["squash"] = True
        if tables:
            extra["tables"] = list(tables)
        if on_stale != "report":
            extra["on_stale"] = on_stale
        if no_checks:
            extra["checks"] = False
        if fast_forward != "never":
            extra["fast_forward"] = fast_forward
        resolutions = read_resolutions(resolve_file) if resolve_file else None
        result = fn(source, dest, repo=repo, strategy=_parse_strategy(strategy), granularity=granularity,
                    dry_run=dry_run, actor=actor, message=message, resolutions=resolutions,
                    conflicts_file=conflicts_file, verify=verify or None, **extra)
    except (MergeConflictError, MergeCheckError) as exc:
        result = exc.result
    except InvalidOperationError as exc:  # the API names its arguments (strategy=); say the options
        fail(api_to_cli(str(exc)))
    finally:
        if bar is not None:
            bar.close()
    published = result.commit is not None and not dry_run
    unwritten = _write_reports(result, reports, published)

    def text() -> None:
        if result.status == "up-to-date":
            click.echo(f"Already up to date: {source} is contained in {dest}")
            return
        if result.status == "fast-forward":
            click.echo(f"{'dry run: would fast-forward' if dry_run else 'Fast-forward'} {dest} "
                       f"{repo.short_id(result.dest_commit.id)}..{repo.short_id(result.commit.id)} "
                       f"(no merge commit: {dest} had not diverged from {source})")
            return
        if result.virtual_base:
            click.echo(f"{len(result.base)} merge bases ({', '.join(repo.short_id(b.id) for b in result.base)}): "
                       "merging against their virtual base (recursive)")
        for name, s in sorted(result.stats.items()):
            if s.action != "unchanged":
                click.echo(f"  {name:<20} {s.action:<9} {s.rows_from_source} row(s) from source, {s.converged} converged, "
                           f"{s.cells_merged} cell(s) merged, {s.conflicts} conflict(s)")
        for _table, line in stale_lines(result):
            click.echo(f"STALE {line}")
        for c in result.checks:
            click.echo(f"{'CHECK FAILED' if not c.passed else 'check passed'} {c.describe()}")
        if result.status == "check_failed":
            click.echo(f"{len(result.failed_checks)} check(s) failed; "
                       + ("nothing published" if not dry_run else "dry run"))
        for c in result.conflicts:
            click.echo(f"CONFLICT {c.describe()}")
            for line in c.value_lines():
                click.echo(f"    {line}")
        if result.has_conflicts:
            n = result.conflicts_total
            shown = "" if n == len(result.conflicts) else f" ({len(result.conflicts)} shown)"
            click.echo(f"{n} conflict(s){shown}; nothing published" if not dry_run
                       else f"dry run: {n} conflict(s){shown}")
            if fn.__name__ in ("merge", "revert", "cherry_pick"):
                verb = {"merge": "merge", "revert": "revert", "cherry_pick": "cherry-pick"}[fn.__name__]
                again = f"trimerge {verb} {source}" + (f" --into {dest}" if into else "")
                click.echo(f"next: write them with '{again} --conflicts FILE', fill in 'resolution', then "
                           f"'{again} --resolve FILE'; or settle all with '{again} --strategy source-wins|dest-wins'")
        elif result.commit is not None:
            click.echo(f"[{dest} {repo.short_id(result.commit.id)}] {result.commit.message}")
            if fn.__name__ == "merge" and len(result.commit.parents) > 1:
                ids = [repo.short_id(p) for p in result.commit.parents]
                unmoved = any(b.id == result.dest_commit.id for b in result.base)
                click.echo(f"Made a merge commit with parents {ids[0]} ({dest}) and {ids[1]} ({source}), as every "
                           "merge is" + (f"; {dest} had not diverged: --ff would have moved it instead" if unmoved
                                         else ""))
        elif dry_run and result.status != "check_failed":
            click.echo("dry run: merges cleanly")

    if not (reports and any(":" not in r for r in reports)):
        emit(obj, result.to_json(), text)
    elif not obj.json:  # a report holds stdout: the human summary still prints, on stderr
        with contextlib.redirect_stdout(sys.stderr):
            text()
    if unwritten:
        # The work is done and published: saying "bad input" (2) would tell a script nothing happened.
        verb = {"merge": "merged", "revert": "reverted", "cherry_pick": "cherry-picked"}.get(fn.__name__, "published")
        path, why = unwritten
        say_error(f"{verb} as {result.commit.id}; writing {path} failed: {why}", "OutputNotWritten",
                  EXIT_OUTPUT_FAILED)
        sys.exit(EXIT_OUTPUT_FAILED)
    if result.has_conflicts or result.status == "check_failed":
        sys.exit(EXIT_NO)


def _write_reports(result: Any, reports: tuple[str, ...], published: bool) -> tuple[str, str] | None:
    """Write every report; after publishing, a failure is returned as (path, why) — the first one —
    and the other reports are still written. Before publishing (dry run, conflicts) it is an error
    as any other: nothing changed."""
    from trimerge.lineage.errors import StorageError

    failed = None
    for spec in reports:
        fmt, _, path = spec.partition(":")
        text = result.report(fmt)
        if not path:
            click.echo(text)
            continue
        try:
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            why = describe_os_error(exc)
            if not published:
                raise StorageError(f"writing --report {fmt} {path} failed: {why}; nothing was published") from None
            failed = failed or (path, why)
    return failed


@cli.command("merge")
@click.argument("source")
@click.option("--into", default=None, help="Destination branch (default: the current branch).")
@merge_options
@click.option("--engine", type=click.Choice(["local", "spark", "auto"]), default="auto", show_default=True,
              help="Where the row merge runs: on Spark, executors classify, resolve and write the rows "
                   "(revert and cherry-pick read small changes and always run locally).")
@click.option("--verbose", is_flag=True, help="Show Spark's own log lines (hidden by default).")
@click.option("--squash", is_flag=True, help="Publish the merge as a one-parent commit (its metadata names the source).")
@click.option("--table", "tables", multiple=True, metavar="T",
              help="Merge only table T (repeatable); the others stay as the destination has them.")
@click.option("--on-stale", type=click.Choice(["report", "conflict"]), default="report", show_default=True,
              help="Rows whose derived column and its inputs would come from different sides: list them, or "
                   "make them row.stale_derived conflicts.")
@click.option("--ff", "fast_forward", flag_value="allow",
              help="Move the branch to SOURCE when it has not diverged (git's fast-forward), else merge.")
@click.option("--ff-only", "fast_forward", flag_value="only",
              help="Move the branch to SOURCE, or refuse (exit 1) when that is not a fast-forward.")
@click.option("--no-ff", "fast_forward", flag_value="never", default=True,
              help="Always make a merge commit (the default, lakeFS's rule).")
@common
def merge_cmd(obj: Context, source, into, strategy, granularity, dry_run, reports, message, actor, conflicts_file,
              resolve_file, no_checks, verify, engine, verbose, squash, tables, on_stale, fast_forward="never") -> None:
    """Merge SOURCE (any ref) into a branch: one commit with parents (dest, source), also when
    the branch has not moved (lakeFS's rule; --ff or --ff-only move it instead, as git does).

    Exit 0 merged, fast-forwarded or up to date, 1 conflicts or --ff-only refused, 2 bad input,
    3 lost a race (retry)."""
    from trimerge.merge import merge

    spark = None
    if verbose and engine == "spark":
        from trimerge.diff.spark import get_spark

        spark = get_spark(verbose=True)
    if any(not t for t in tables):
        fail("--table needs a table name")
    _run_merge(obj, merge, source, into, strategy, granularity, dry_run, reports, message, actor, engine, spark,
               conflicts_file, resolve_file, verify, squash, tables, on_stale, no_checks=no_checks,
               fast_forward=fast_forward or "never")


@cli.command("revert")
@click.argument("commit_ref", metavar="COMMIT")
@click.option("--into", default=None, help="Branch (default: the current branch).")
@merge_options
@common
def revert_cmd(obj: Context, commit_ref, into, strategy, granularity, dry_run, reports, message, actor, conflicts_file,
               resolve_file, no_checks, verify) -> None:
    """Undo the changes of COMMIT on a branch (a three-way merge)."""
    from trimerge.merge import revert

    _run_merge(obj, revert, commit_ref, into, strategy, granularity, dry_run, reports, message, actor,
               conflicts_file=conflicts_file, resolve_file=resolve_file, verify=verify, no_checks=no_checks)


@cli.command("cherry-pick")
@click.argument("commit_ref", metavar="COMMIT")
@click.option("--into", default=None, help="Branch (default: the current branch).")
@merge_options
@common
def cherry_pick_cmd(obj: Context, commit_ref, into, strategy, granularity, dry_run, reports, message, actor,
                    conflicts_file, resolve_file, no_checks, verify) -> None:
    """Apply the changes of COMMIT to a branch (a three-way merge)."""
    from trimerge.merge import cherry_pick

    _run_merge(obj, cherry_pick, commit_ref, into, strategy, granularity, dry_run, reports, message, actor,
               conflicts_file=conflicts_file, resolve_file=resolve_file, verify=verify, no_checks=no_checks)
