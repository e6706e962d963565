"""``trimerge status`` and ``trimerge show REF``: the two commands git users type first.

Both only read: the repository is opened read-only, so ``status`` reports an interrupted write
(a recovery note) without repairing it — the next write to that branch, or any read-write open,
does that.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

import click

from trimerge.cli.app import Context, cli, common, emit, fail
from trimerge.cli.diffs import diff_format, diff_options, render_diff
from trimerge.cli.history import commit_text
from trimerge.lineage.errors import TrimergeError

LOCKS = "locks"


@cli.command()
@common
def status(obj: Context) -> None:
    """The current branch, its tip, and any write in flight or interrupted (a pending recovery)."""
    repo = obj.open(read_only=True)
    state = repository_status(repo)
    emit(obj, state, lambda: click.echo("\n".join(status_lines(state))))


def repository_status(repo: Any) -> dict[str, Any]:
    """What ``status`` reports, as JSON-ready data (reads documents only; writes nothing)."""
    from trimerge.lineage.storage.lease import Holder
    from trimerge.lineage.safety.recovery import INTENTS, QUARANTINE, parse_intent

    name = repo.current_branch
    branch = repo.branches.get_or_none(name)
    tip = repo.commit(branch.commit_id) if branch is not None else None
    docs = repo.docs
    in_flight, live = [], set()
    for key in docs.list(LOCKS):
        found = docs.read(key, damaged_as_none=True)
        holder = Holder.from_json(found.doc) if found is not None else None
        if holder is None or holder.released or holder.is_dead():
            continue
        lock = unquote(key.rsplit("/", 1)[-1].removesuffix(".lock"))
        live.add(lock)
        in_flight.append({"lock": lock, "pid": holder.pid, "host": holder.host, "purpose": holder.purpose,
                          "since": datetime.fromtimestamp(holder.acquired_at, timezone.utc).isoformat()})
    pending, unreadable = [], []
    for key in docs.list(INTENTS):
        try:
            intent = parse_intent(docs.get(key))
        except Exception:  # noqa: BLE001 - a damaged note is reported, never fatal to status
            unreadable.append(key)
            continue
        if intent["branch"] not in live:  # its writer is gone: recovery will finish or undo it
            pending.append({"intent": intent["ulid"], "branch": intent["branch"]})
    quarantined = list(docs.backend.keys_below(QUARANTINE))
    # Hooks still to deliver, or failing: a failed delivery never failed the write, so it shows here.
    try:
        hooks = [h.to_json() for h in repo.hooks.status() if h.pending or h.failures or h.gaps]
    except TrimergeError as exc:  # a damaged hook document: said, and the rest of status still shown
        hooks = [{"name": "?", "pending": 0, "failures": 1, "retry_at": None, "gaps": 0, "last_error": str(exc)}]
    return {"branch": name, "exists": branch is not None,
            "commit": tip.id if tip else None, "short": repo.short_id(tip.id) if tip else None,
            "message": tip.message if tip else None, "parent_branch": branch.parent if branch else None,
            "in_flight": in_flight, "pending_recovery": pending, "unreadable_notes": unreadable,
            "quarantined": quarantined, "hooks": hooks}


def status_lines(state: dict[str, Any]) -> list[str]:
    """``status`` as text."""
    if not state["exists"]:
        lines = [f"On branch {state['branch']} (it does not exist: switch to another branch)"]
    else:
        lines = [f"On branch {state['branch']}", f"Tip {state['short']} {state['message']}"]
    for w in state["in_flight"]:
        lines.append(f"Write in flight: {w['lock']} held by pid {w['pid']} on {w['host']} ({w['purpose']}) "
                     f"since {w['since']}")
    for p in state["pending_recovery"]:
        lines.append(f"Recovery pending: write {p['intent']} on branch {p['branch']} was interrupted; the next write "
                     "to that branch (or any read-write open) finishes or undoes it")
    for key in state["unreadable_notes"] + state["quarantined"]:
        lines.append(f"Recovery note {key} cannot be read: see 'trimerge fsck'")
    if not (state["in_flight"] or state["pending_recovery"] or state["unreadable_notes"] or state["quarantined"]):
        lines.append("No write in flight, nothing to recover")
    for h in state.get("hooks", []):
        if h["name"] == "?":
            lines.append(f"hooks: {h['last_error']}")
            continue
        how = (f"failing ({h['failures']} in a row, next try {h['retry_at']}): {h['last_error']}" if h["failures"]
               else "waiting for delivery ('trimerge hooks run')")
        lost = f"; {h['gaps']} pass(es) found events gone before delivery" if h["gaps"] else ""
        lines.append(f"hook {h['name']}: {h['pending']} event(s) pending, {how}{lost} (see 'trimerge hook log {h['name']}')")
    return lines


@cli.command()
@click.argument("ref", default="HEAD", required=False)
@click.option("--rows", is_flag=True, help="Show the changed rows (as 'diff' does) instead of --stat.")
@click.option("--stat", "stat_flag", is_flag=True, help="One line per changed table (the default).")
@diff_options
@common
def show(obj: Context, ref: str, rows: bool, stat_flag: bool, tables, name_only, limit, fmt, output,
         columns) -> None:
    """Show commit REF (default: the current branch's tip) as 'commit show' does, then its diff
    against its first parent: --stat by default, --rows or --name-only otherwise; --format as
    for 'diff'."""
    from trimerge.diff import diff as run_diff

    if rows and (stat_flag or name_only):
        fail("--rows cannot be combined with --stat or --name-only")
    stat = not (rows or name_only)
    fmt = diff_format(obj, fmt, output, stat, name_only)
    repo = obj.open(read_only=True)
    c = repo.resolve(repo.default_ref(ref))
    parent = c.parents[0] if c.parents else None
    d = run_diff(parent, c.id, repo=repo, tables=list(tables) or None) if parent else None
    if output is None and (fmt == "json" or obj.json):  # one document: the commit and its diff
        click.echo(json.dumps({"commit": c.summary(), "first_parent": parent,
                               "diff": None if d is None else _diff_json(d, stat, name_only, limit, columns)},
                              indent=2, default=str))
        return
    text = output is not None or fmt == "table"  # rows as JSON lines or CSV on stdout: nothing else there
    if text and obj.json:
        emit(obj, c.summary())
    elif text:
        click.echo("\n".join(commit_text(repo, c)))
    if d is None:
        if text and not obj.json:
            click.echo("(root commit: no parent to compare with)")
        return
    if output is None and text:
        click.echo("")
    render_diff(obj, repo, d, stat=stat, name_only=name_only, limit=limit, fmt=fmt, output=output, columns=columns)


def _diff_json(d: Any, stat: bool, name_only: bool, limit: int | None, columns: str | None) -> Any:
    """The diff part of ``show --json``: stat rows, changed table names, or every changed row."""
    if stat:
        return d.stat_json()
    if name_only:
        return d.changed_tables()
    cols = [c.strip() for c in columns.split(",")] if columns else None
    doc = d.to_json()
    for n, td in d.tables.items():
        if td.status != "unchanged" or td.index_changes:
            doc["tables"][n]["rows"] = (td.head(limit, cols) if limit is not None else td.rows(cols)).to_pylist()
    return doc
