"""Hooks and the change feed: ``hook add/list/remove/test/log``, ``hooks run`` and ``changes``
(the API is ``repo.hooks`` and ``repo.changes``, :mod:`trimerge.hooks`).

Exit codes as everywhere: 0 done; 1 ``hook test`` whose receiver refused or never answered;
2 bad input (a hook name, glob, URL or consumer that is not valid, an unknown hook, a consumer
whose checkpoint gc reclaimed); 3 a lost race (retry). A hook that fails to deliver never changes
the exit code of the write that caused its event: the write is published, the event waits in
the outbox and ``status`` says so.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import click

from trimerge.cli.app import EXIT_NO, Context, cli, common, echo_lines, emit, fail

EVENTS_HELP = ("post-commit, post-merge, post-branch-create, post-branch-delete, post-tag, request-created, "
               "request-reviewed, request-enqueued, request-dequeued, request-merged, request-closed, "
               "request-reopened, or pre-merge with --gate")


@cli.group("hook")
def hook() -> None:
    """Hooks: tell a webhook or a command of commits, merges, branches, tags and merge requests."""


@hook.command("add")
@click.argument("name")
@click.option("--on", "on", multiple=True, metavar="EVENT",
              help=f"An event to run on (repeatable or comma-separated; default post-merge): {EVENTS_HELP}.")
@click.option("--branch", "-b", "branch", default="*", show_default=True,
              help="Branches whose events it runs on: a glob ('*' any characters, '/' included). Tags: the tag "
                   "name; merge requests: their target.")
@click.option("--run", "run", default=None, metavar="CMD",
              help="A shell command, given the event as JSON on stdin and TRIMERGE_* variables.")
@click.option("--url", default=None, help="A webhook: the event is POSTed there as JSON (http:// or https:// only).")
@click.option("--secret-file", "secret_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A file holding the webhook's secret: requests carry X-Trimerge-Signature-256 (HMAC-SHA256 of "
                   "the body). Never printed.")
@click.option("--gate", is_flag=True, help="A pre-merge gate: runs before a merge into the branch, on its would-be "
                                           "result; a non-zero exit or non-2xx answer refuses the merge.")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds one attempt may take.")
@click.option("--retries", type=int, default=3, show_default=True,
              help="Retries of a failed delivery within a pass (0-10), with a doubling pause.")
@common
def hook_add(obj: Context, name: str, on: tuple[str, ...], branch: str, run: str | None, url: str | None,
             secret_file: str | None, gate: bool, timeout: float, retries: int) -> None:
    """Add hook NAME: one of --run CMD or --url URL [--secret-file F]."""
    secret = None
    if secret_file is not None:
        try:
            secret = Path(secret_file).read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            fail(f"--secret-file {secret_file}: {exc.strerror or exc}")
    events: Any = ",".join(on) if on else ("pre-merge" if gate else "post-merge")
    h = obj.repo().hooks.add(name, on=events, branch=branch, url=url, run=run, secret=secret, gate=gate,
                             timeout=timeout, retries=retries)
    emit(obj, h.describe(), f"Added hook {h.name}: {', '.join(h.on)} on {h.branch} -> {h.kind} {h.target}")


@hook.command("list")
@common
def hook_list(obj: Context) -> None:
    """List the hooks, with how their delivery goes (pending events, failures, last error)."""
    repo = obj.open(read_only=True)
    hooks = repo.hooks.list()
    states = {s.name: s for s in repo.hooks.status()}
    rows = []
    for h in hooks:
        doc = h.describe()
        s = states.get(h.name)
        if s is not None:
            doc["status"] = s.to_json()
        rows.append(doc)

    def text() -> None:
        if not hooks:
            click.echo("No hooks")
        for h in hooks:
            s = states.get(h.name)
            state = "gate" if h.gate else (f"{s.pending} pending, {s.delivered} delivered" if s else "")
            if s is not None and s.failures:
                state += f", failing ({s.failures} in a row: {s.last_error})"
            click.echo(f"{h.name}\t{','.join(h.on)}\t{h.branch}\t{h.kind} {h.target}\t{state}")

    emit(obj, rows, text)


@hook.command("remove")
@click.argument("name")
@common
def hook_remove(obj: Context, name: str) -> None:
    """Remove hook NAME (its events not yet delivered are dropped with it)."""
    h = obj.repo().hooks.remove(name)
    emit(obj, h.describe() if h is not None else {"name": name}, f"Removed hook {name}")


@hook.command("test")
@click.argument("name")
@common
def hook_test(obj: Context, name: str) -> None:
    """Send hook NAME a test event now (logged); exit 1 when it is refused or not answered."""
    attempt = obj.repo().hooks.test(name)
    emit(obj, attempt.to_json(), lambda: click.echo(_attempt_line(attempt)))
    if not attempt.ok:
        sys.exit(EXIT_NO)


def _attempt_line(a: Any) -> str:
    code = f" {a.code}" if a.code is not None else ""
    error = f"  {a.error}" if a.error else ""
    return f"{a.at:%Y-%m-%d %H:%M:%S}  {a.status}{code}  {a.duration_ms:.0f} ms  {a.event} {a.id} (try {a.attempt}){error}"


@hook.command("log")
@click.argument("name")
@click.option("--limit", "-n", type=click.IntRange(0, 100_000), default=50, show_default=True,
              help="At most this many attempts, newest first.")
@common
def hook_log(obj: Context, name: str, limit: int) -> None:
    """Hook NAME's delivery attempts, newest first: status, response code or exit status, duration."""
    found = obj.open(read_only=True).hooks.log(name, limit)
    emit(obj, [a.to_json() for a in found],
         lambda: echo_lines([_attempt_line(a) for a in found] or [f"No delivery attempts of hook {name} yet"]))


@cli.group("hooks")
def hooks_group() -> None:
    """Deliver the hooks' pending events."""


@hooks_group.command("run")
@click.option("--watch", is_flag=True, help="Keep delivering as events come, until SIGTERM or Ctrl-C.")
@click.option("--interval", type=click.FloatRange(0.05, 3600), default=2.0, show_default=True,
              help="With --watch: seconds between looks for new events.")
@click.option("--hook", "names", multiple=True, metavar="NAME", help="Only this hook (repeatable).")
@common
def hooks_run(obj: Context, watch: bool, interval: float, names: tuple[str, ...]) -> None:
    """Deliver what is pending to every hook once (with --watch: until stopped). Failures are
    logged ('hook log NAME') and retried on the next pass; the exit code is 0 either way."""
    repo = obj.repo()
    if not watch:
        report = repo.hooks.deliver(list(names) or None)
        emit(obj, report.to_json(), lambda: echo_lines(_report_lines(report)))
        return
    from trimerge.hooks.runner import Runner

    runner = Runner(repo, interval=interval, names=list(names) or None,
                    on_pass=lambda report: echo_lines(_report_lines(report, quiet=True)))
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    try:
        runner.run()
    except KeyboardInterrupt:
        runner.stop()


def _report_lines(report: Any, quiet: bool = False) -> list[str]:
    lines = []
    for h in report.hooks:
        if h.delivered:
            lines.append(f"{h.hook}: delivered {len(h.delivered)} event(s)")
        if h.failed:
            lines.append(f"{h.hook}: event {h.failed} failed ({h.error}); {h.left} event(s) wait for the next pass")
        if h.busy and not quiet:
            lines.append(f"{h.hook}: another runner is delivering it")
    if not lines and not quiet:
        lines.append("Nothing to deliver")
    return lines


@cli.command("changes")
@click.argument("consumer")
@click.option("--branch", "-b", default="main", show_default=True, help="The branch whose changes to read.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "parquet", "arrow"]), default="jsonl", show_default=True,
              help="jsonl: one changed row a line ({table, change, key columns, changed_columns, before, after}) "
                   "to stdout or -o FILE; parquet, arrow: one file per table in -o DIRECTORY, with changes.json.")
@click.option("-o", "--output", default=None, metavar="PATH", help="Where to write (jsonl: a file; parquet/arrow: a directory).")
@click.option("--ack", is_flag=True, help="Move the consumer's checkpoint once the output is written.")
@click.option("--full", is_flag=True, help="Read from nothing (every row an insert): the way back for a consumer "
                                           "whose checkpoint gc reclaimed.")
@click.option("--retention", default=None, metavar="PERIOD",
              help="With --ack: how long gc keeps the checkpoint's commit (7d by default; '12h', '2w', ...).")
@common
def changes_cmd(obj: Context, consumer: str, branch: str, fmt: str, output: str | None, ack: bool, full: bool,
                retention: str | None) -> None:
    """The rows that changed on a branch since CONSUMER's checkpoint (its first read: every row).
    The range goes to stderr; with --ack the checkpoint moves after the output is written, so
    reading again without --ack gives the same changes."""
    if fmt in ("parquet", "arrow") and output is None:
        fail(f"--format {fmt} writes one file per table: give -o DIRECTORY")
    repo = obj.repo() if ack else obj.open(read_only=True)
    batch = repo.changes(consumer, branch, full=full, retention=retention)
    from trimerge.hooks.feedoutput import write_batch

    rows = write_batch(batch, fmt, output)
    if ack:
        batch.ack()
    start = batch.from_commit[:10] if batch.from_commit else "nothing"
    summary = {**batch.to_json(), "rows": rows, "acked": ack}
    if obj.json:
        click.echo(json.dumps(summary, default=str), err=True)
    else:
        click.echo(f"{consumer} on {branch}: {start}..{batch.to_commit[:10]}, {rows} changed row(s) in "
                   f"{len(batch.diffs)} table(s){' (acked)' if ack else ''}", err=True)
