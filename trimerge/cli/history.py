"""Commands on refs and history: branch, switch, tag, commit, log, rev-parse, merge-base."""

from __future__ import annotations

import sys

import click

from trimerge.cli.app import (
    echo_lines,
    EXIT_NO,
    EXIT_OK,
    MAX_COUNT,
    Context,
    cli,
    commit_line,
    common,
    emit,
    fail,
)


# ---------------------------------------------------------------------------------------------- branches, tags
@cli.group(invoke_without_command=True)
@click.option("-a", "--all", "list_all", is_flag=True, help="List remote-tracking refs (REMOTE/BRANCH) too, as git.")
@click.option("-r", "--remotes", "list_remotes", is_flag=True, help="List only remote-tracking refs, as git.")
@click.option("-v", "--verbose", is_flag=True, help="Also show the branch each one was created from.")
@click.pass_context
def branch(ctx: click.Context, list_all: bool, list_remotes: bool, verbose: bool) -> None:
    """Create, list and delete branches (bare: list them, as git does; -a/-r/-v as git's)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(branch_list, verbose=verbose, remotes="only" if list_remotes else "also" if list_all else None)
    elif list_all or list_remotes or verbose:
        fail("-a, -r and -v list branches: give them without a sub-command (or use 'branch list -v')")


@branch.command("create")
@click.argument("name")
@click.option("--from", "from_ref", default=None, help="Ref to branch from (default: the current branch).")
@common
def branch_create(obj: Context, name: str, from_ref: str | None) -> None:
    """Create branch NAME."""
    repo = obj.repo()
    b = repo.branches.create(name, from_ref=from_ref)
    emit(obj, {"name": b.name, "commit": b.commit_id}, f"Created branch {b.name} at {repo.short_id(b.commit_id)}")


@branch.command("list")
@click.option("--deleted", is_flag=True, help="Deleted branches whose data gc still keeps (to re-create one).")
@click.option("-v", "--verbose", is_flag=True, help="Also show the branch each one was created from.")
@click.option("-a", "--all", "remotes", flag_value="also", default=None,
              help="List remote-tracking refs (REMOTE/BRANCH) too.")
@click.option("-r", "--remotes", "remotes", flag_value="only", help="List only remote-tracking refs.")
@common
def branch_list(obj: Context, deleted: bool, verbose: bool, remotes: str | None = None) -> None:
    """List branches (the current one is marked *); -v: where each was created from; --deleted:
    branches gc still keeps; -a: remote-tracking refs too; -r: only those."""
    repo = obj.repo()
    if remotes is not None and deleted:
        fail("--deleted lists local branches: it cannot be combined with -a or -r")
    tracking: list[dict] = []
    if remotes is not None:
        from trimerge.cli.logview import tracking_refs

        tracking = [{"name": name, "commit": cid, "remote": True} for name, cid in tracking_refs(repo).items()]
        if remotes == "only":
            emit(obj, tracking, lambda: echo_lines(f"  {r['name']}\t{repo.short_id(r['commit'])}" for r in tracking))
            return
    if deleted:
        gone = [{"name": r.name, "commit": r.commit_id, "deleted_at": r.deleted_at.isoformat()}
                for r in repo.branches.deleted()]
        emit(obj, gone, lambda: echo_lines(f"  {r['name']}\t{repo.short_id(r['commit'])}\tdeleted {r['deleted_at']}"
                                           for r in gone))
        return
    current = repo.current_branch
    branches = repo.branches.list()
    names = {b.name for b in branches}
    rows = [{"name": b.name, "commit": b.commit_id, "current": b.name == current, "parent": b.parent,
             "created_at": b.created_at.isoformat(), "protected": b.protected} for b in branches]

    def origin(r: dict) -> str:
        if not verbose:
            return ""
        if r["parent"] is None:
            return "\t(root)" if r["name"] == "main" else "\t(from a commit)"
        return f"\tfrom {r['parent']}" + ("" if r["parent"] in names else " (deleted)")

    def listing() -> None:
        echo_lines(f"{'*' if r['current'] else ' '} {r['name']}\t{repo.short_id(r['commit'])}"
                   f"{' (protected)' if r['protected'] else ''}{origin(r)}" for r in rows)
        echo_lines(f"  remotes/{r['name']}\t{repo.short_id(r['commit'])}" for r in tracking)

    emit(obj, rows + tracking, listing)


@branch.command("protect")
@click.argument("name")
@click.option("--approvals", type=click.IntRange(min=0, max=100), default=None, metavar="K",
              help="Merges into it go through a merge request with K approvals of its source tip by people other "
                   "than its author ('trimerge request').")
@click.option("--checks/--no-checks", default=None,
              help="Whether its merges must run the data checks gating it (default: yes with --approvals).")
@common
def branch_protect(obj: Context, name: str, approvals: int | None = None, checks: bool | None = None) -> None:
    """Protect branch NAME: direct writes are refused, it changes by merges only (with --approvals K,
    by merges of reviewed requests only)."""
    repo = obj.repo()
    b = repo.branches.protect(name, approvals=approvals, checks=checks)
    rule = repo.branches.protection(b.name)
    how = f"merges of requests with {rule.approvals} approval(s)" if rule is not None and rule.approvals else "merges"
    emit(obj, {"name": b.name, "protected": True, **(rule.to_json() if rule is not None else {})},
         f"Protected branch {b.name}: it changes by {how} only")


@branch.command("unprotect")
@click.argument("name")
@common
def branch_unprotect(obj: Context, name: str) -> None:
    """Allow direct writes to branch NAME again."""
    b = obj.repo().branches.unprotect(name)
    emit(obj, {"name": b.name, "protected": False}, f"Branch {b.name} is no longer protected")


@branch.command("delete")
@click.argument("name")
@click.option("-D", "--force", is_flag=True,
              help="Delete even if other branches were created from it or no other branch or tag reaches its tip.")
@common
def branch_delete(obj: Context, name: str, force: bool) -> None:
    """Delete branch NAME. Its data stays until 'trimerge gc' runs after the retention period."""
    repo = obj.repo()
    branch = repo.branches.delete(name, force=force)
    emit(obj, {"deleted": name, "commit": branch.commit_id},
         f"Deleted branch {name} (was {repo.short_id(branch.commit_id)})")


@cli.command()
@click.argument("name")
@click.argument("start", required=False)
@click.option("-c", "--create", is_flag=True, help="Create branch NAME first (at START, default the current branch).")
@click.option("--from", "from_ref", default=None, help="With -c: the ref to branch from (the same as START).")
@common
def switch(obj: Context, name: str, start: str | None = None, create: bool = False,
           from_ref: str | None = None) -> None:
    """Make NAME the current branch (-c: create it first at START, like git switch -c NAME START).
    A NAME that only a remote has (a unique REMOTE/NAME) becomes a local branch at it, as in git."""
    repo = obj.repo()
    if (from_ref is not None or start is not None) and not create:
        fail(f"{'--from' if from_ref is not None else 'START'} needs -c (create the branch)")
    if start is not None and from_ref is not None and start != from_ref:
        fail("give the start either as START or as --from, not both")
    tracked = None
    if create:
        repo.branches.create(name, from_ref=start or from_ref)
    elif not repo.branches.exists(name):
        tracked = remote_branch(repo, name)
        if tracked is not None:
            repo.branches.create(name, from_ref=tracked)
    b = repo.switch(name)
    text = f"Switched to branch {b.name}"
    if tracked is not None:
        remote = tracked.split("/", 1)[0]
        sync = "" if remote == "origin" else f" {remote}"
        text = (f"Created branch {b.name} tracking {tracked} ('trimerge pull{sync}' and 'trimerge push{sync}' "
                f"keep them in step)\n{text}")
    emit(obj, {"branch": b.name, "commit": b.commit_id, "created_from": tracked}, text)


def remote_branch(repo, name: str) -> str | None:
    """The one remote-tracking ref ``REMOTE/NAME`` (git's ``checkout.guess``); None when no remote
    has ``name``; several remotes having it is ambiguous (one line naming them, nothing changed)."""
    from trimerge.cli.logview import tracking_refs
    from trimerge.lineage.errors import AmbiguousRefError

    found = sorted(ref for ref in tracking_refs(repo) if ref.split("/", 1)[1] == name)
    if len(found) > 1:
        raise AmbiguousRefError(f"branch {name!r} is on {len(found)} remotes ({', '.join(found)}): pick one with "
                                f"'trimerge switch -c {name} {found[0]}'")
    return found[0] if found else None


@cli.group(invoke_without_command=True)
@click.pass_context
def tag(ctx: click.Context) -> None:
    """Create, list and delete tags (bare: list them, as git does)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(tag_list)


@tag.command("create")
@click.argument("name")
@click.argument("ref", required=False)
@click.option("--message", "-m", default="")
@common
def tag_create(obj: Context, name: str, ref: str | None, message: str) -> None:
    """Tag REF (default: the current branch) as NAME."""
    repo = obj.repo()
    t = repo.tags.create(name, ref, message=message)
    emit(obj, {"name": t.name, "commit": t.commit_id}, f"Tagged {repo.short_id(t.commit_id)} as {t.name}")


@tag.command("list")
@common
def tag_list(obj: Context) -> None:
    """List tags."""
    repo = obj.repo()
    rows = [{"name": t.name, "commit": t.commit_id, "message": t.message} for t in repo.tags.list()]
    emit(obj, rows, lambda: echo_lines(f"{r['name']}\t{repo.short_id(r['commit'])}\t{r['message']}" for r in rows))


@tag.command("delete")
@click.argument("name")
@common
def tag_delete(obj: Context, name: str) -> None:
    """Delete tag NAME."""
    repo = obj.repo()
    repo.tags.delete(name)
    emit(obj, {"deleted": name}, f"Deleted tag {name}")


# ---------------------------------------------------------------------------------------------- history
@cli.group()
def commit() -> None:
    """List and show commits."""


@commit.command("list")
@click.option("--filter", "filters", multiple=True, help="KEY=VALUE, e.g. actor=alice (repeatable).")
@click.option("--branch", "-b", default=None, help="Commits reachable from this branch (default: all branches).")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@common
def commit_list(obj: Context, filters, branch, limit) -> None:
    """List commits, newest first."""
    repo = obj.repo()
    want: dict[str, str] = {}
    for f in filters:
        if "=" not in f:
            fail(f"bad --filter {f!r}: expected KEY=VALUE (keys: actor, branch, message)")
        k, v = f.split("=", 1)
        if k not in ("actor", "branch", "message"):
            fail(f"bad --filter key {k!r}: use actor, branch or message")
        want[k] = v
    starts = [branch] if branch else [b.commit_id for b in repo.branches.list()]
    rows = repo.log(refs=starts, actor=want.get("actor"), branch=want.get("branch"), message=want.get("message"),
                    limit=limit)
    emit(obj, [c.summary() for c in rows], lambda: echo_lines(commit_line(repo, c) for c in rows))


@commit.command("show")
@click.argument("ref")
@common
def commit_show(obj: Context, ref: str) -> None:
    """Show one commit (any ref expression)."""
    repo = obj.repo()
    c = repo.resolve(ref)
    emit(obj, c.summary(), lambda: click.echo("\n".join(commit_text(repo, c))))


def commit_text(repo, c) -> list[str]:
    """The lines ``commit show`` prints for commit ``c``."""
    lines = [f"commit {c.id}", f"ulid   {c.ulid}"]
    if c.parents:
        lines.append("parents " + " ".join(repo.short_id(p) for p in c.parents))
    lines += [f"actor  {c.actor}", f"date   {c.created_at.isoformat()}", f"branch {c.branch}", "",
              f"    {c.message}", ""]
    lines += [f"    {k}: {v}" for k, v in sorted(c.metadata.items())]
    # The table's version and key; the Lance branch it lives on is storage detail (--json has it).
    lines += [f"  {name:<20} version {tv.version}  key ({', '.join(tv.primary_key)})"
              for name, tv in sorted(c.tables.items())]
    return lines


class LogCommand(click.Command):
    """``log [REVISION...] [-- TABLE...]``: what follows ``--`` are tables, as git's paths."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["log_tables"] = tuple(args[cut + 1:])
            args = args[:cut]
        return super().parse_args(ctx, args)


@cli.command(cls=LogCommand)
@click.argument("revisions", nargs=-1, metavar="[REVISION]... [-- TABLE...]")
@click.option("--first-parent", is_flag=True, help="Follow first parents only (the branch's own history).")
@click.option("--graph", "graph", is_flag=True, help="Draw the commit graph.")
@click.option("--all", "all_refs", is_flag=True, help="Start from every branch and tag too.")
@click.option("--actor", default=None)
@click.option("--limit", "-n", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@click.option("--no-maintenance", "no_maintenance", is_flag=True, help="Hide maintenance commits (optimize, compact).")
@click.option("--oneline", is_flag=True, help="One line per commit: short id and message (as git log --oneline).")
@click.option("--table", "-t", "tables", multiple=True, metavar="TABLE",
              help="Only commits that changed TABLE (repeatable; also 'log -- TABLE...').")
@click.option("--decorate/--no-decorate", default=True, show_default=True,
              help="Name the branches, tags and remote-tracking refs at each commit.")
@common
def log(obj: Context, revisions: tuple[str, ...], first_parent: bool, graph: bool, all_refs: bool,
        actor: str | None, limit: int | None, no_maintenance: bool, oneline: bool, tables: tuple[str, ...],
        decorate: bool) -> None:
    """Show history, newest first. REVISION: a ref, A..B (in B, not in A), A...B (in exactly one of
    them) or ^A (leave out A's history); every option works the same with --graph and --json."""
    from trimerge.cli import logview

    repo = obj.repo()
    tables = tables + click.get_current_context().meta.get("log_tables", ())
    if len(revisions) == 1 and not tables and ".." not in revisions[0] \
            and logview.is_unknown_ref(repo, revisions[0]) and revisions[0] in repo.tables(repo.current_branch):
        tables, revisions = (revisions[0],), ()  # 'log stocks': a table, as git takes a path that is no ref
    query = logview.LogQuery(revisions, all_refs, first_parent, actor, not no_maintenance, tables)
    selection, starts = logview.select(repo, query)
    tips = logview.decorations(repo) if decorate or graph else {}

    def refs(cid: str) -> str:
        return f" ({', '.join(tips[cid])})" if cid in tips else ""

    if graph:
        from trimerge.lineage.history.graphlayout import graph_lines

        def label(cid: str) -> str:
            c = repo.commit(cid)
            return f"{repo.short_id(cid)} {c.message if oneline else f'{c.actor}: {c.message}'}{refs(cid)}"

        lines = graph_lines(selection, selection.tips(starts), label, first_parent=first_parent, limit=limit)
        emit(obj, {"graph": lines}, "\n".join(lines))
        return
    shown = selection.walk(starts)
    commits = [repo.commit(cid) for _, cid in zip(range(limit), shown)] if limit is not None \
        else [repo.commit(cid) for cid in shown]
    line = (lambda c: f"{repo.short_id(c.id)} {c.message}") if oneline else (lambda c: commit_line(repo, c))
    emit(obj, [{**c.summary(), "refs": tips.get(c.id, [])} if decorate else c.summary() for c in commits],
         lambda: echo_lines(line(c) + refs(c.id) for c in commits))


@cli.command("rev-parse")
@click.argument("expr")
@click.option("--short", is_flag=True, help="Print the shortest unique prefix (at least 7 characters).")
@common
def rev_parse(obj: Context, expr: str, short: bool) -> None:
    """Resolve a ref expression (e.g. main~2^2) to a commit id."""
    repo = obj.repo()
    c = repo.resolve(expr)
    emit(obj, {"expr": expr, "id": c.id, "short": repo.short_id(c.id)}, repo.short_id(c.id) if short else c.id)


@cli.command("merge-base")
@click.argument("refs", nargs=-1, required=True)
@click.option("--all", "all_bases", is_flag=True, help="Print every best common ancestor.")
@click.option("--is-ancestor", is_flag=True, help="Exit 0 if the first ref is an ancestor of the second, else 1.")
@click.option("--independent", is_flag=True, help="Print the refs that are not ancestors of another.")
@click.option("--octopus", is_flag=True, help="Best common ancestors of all refs.")
@common
def merge_base(obj: Context, refs, all_bases, is_ancestor, independent, octopus) -> None:
    """Best common ancestor(s) of commits, like git merge-base."""
    from trimerge.lineage.history import graph as graphalg

    modes = [flag for flag, on in (("--is-ancestor", is_ancestor), ("--independent", independent),
                                   ("--octopus", octopus)) if on]
    if len(modes) > 1 or (modes and all_bases and modes[0] != "--octopus"):
        fail(f"{' and '.join(modes + (['--all'] if all_bases else []))} cannot be combined (as in git)")
    repo = obj.repo()
    ids = [repo.resolve(r).id for r in refs]
    if is_ancestor:
        if len(ids) != 2:
            fail("--is-ancestor takes exactly two refs")
        yes = graphalg.is_ancestor(repo.graph, ids[0], ids[1])
        emit(obj, {"is_ancestor": yes})
        sys.exit(EXIT_OK if yes else EXIT_NO)
    if independent:
        out = graphalg.independent(repo.graph, ids)
    elif octopus:
        out = graphalg.octopus_merge_bases(repo.graph, ids)
    else:
        if len(ids) < 2:
            fail("merge-base needs at least two refs")
        out = graphalg.merge_bases_many(repo.graph, ids[0], ids[1:])
    if not (all_bases or independent or octopus):
        out = out[:1]
    emit(obj, out, "\n".join(out) if out else None)
    if not out:
        sys.exit(EXIT_NO)
