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
    graph_text,
)


# ---------------------------------------------------------------------------------------------- branches, tags
@cli.group(invoke_without_command=True)
@click.pass_context
def branch(ctx: click.Context) -> None:
    """Create, list and delete branches (bare: list them, as git does)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(branch_list)


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
@common
def branch_list(obj: Context, deleted: bool, verbose: bool) -> None:
    """List branches (the current one is marked *); -v: where each was created from; --deleted:
    branches gc still keeps."""
    repo = obj.repo()
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

    emit(obj, rows, lambda: echo_lines(f"{'*' if r['current'] else ' '} {r['name']}\t{repo.short_id(r['commit'])}"
                                       f"{' (protected)' if r['protected'] else ''}{origin(r)}" for r in rows))


@branch.command("protect")
@click.argument("name")
@common
def branch_protect(obj: Context, name: str) -> None:
    """Protect branch NAME: direct writes are refused, it changes by merges only."""
    b = obj.repo().branches.protect(name)
    emit(obj, {"name": b.name, "protected": True}, f"Protected branch {b.name}: it changes by merges only")


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
@click.option("-c", "--create", is_flag=True, help="Create branch NAME first (from --from, default the current branch).")
@click.option("--from", "from_ref", default=None, help="With -c: the ref to branch from.")
@common
def switch(obj: Context, name: str, create: bool = False, from_ref: str | None = None) -> None:
    """Make NAME the current branch (-c: create it first, like git switch -c)."""
    repo = obj.repo()
    if from_ref is not None and not create:
        fail("--from needs -c (create the branch)")
    if create:
        repo.branches.create(name, from_ref=from_ref)
    b = repo.switch(name)
    emit(obj, {"branch": b.name, "commit": b.commit_id}, f"Switched to branch {b.name}")


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
    lines += [f"  {name:<20} {tv.lance_branch} v{tv.version}  key ({', '.join(tv.primary_key)})"
              for name, tv in sorted(c.tables.items())]
    return lines


@cli.command()
@click.argument("ref", required=False)
@click.option("--first-parent", is_flag=True, help="Follow first parents only (the branch's own history).")
@click.option("--graph", "graph", is_flag=True, help="Draw the commit graph.")
@click.option("--all", "all_refs", is_flag=True, help="Start from every branch and tag.")
@click.option("--actor", default=None)
@click.option("--limit", "-n", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@click.option("--no-maintenance", "no_maintenance", is_flag=True, help="Hide maintenance commits (optimize, compact).")
@click.option("--oneline", is_flag=True, help="One line per commit: short id and message (as git log --oneline).")
@common
def log(obj: Context, ref, first_parent, graph, all_refs, actor, limit, no_maintenance, oneline) -> None:
    """Show history, newest first."""
    repo = obj.repo()
    if graph:
        starts = ([b.commit_id for b in repo.branches.list()] + [t.commit_id for t in repo.tags.list()]
                  if all_refs else [repo.resolve(repo.default_ref(ref)).id])
        lines = graph_text(repo, starts, first_parent=first_parent, limit=limit)
        emit(obj, {"graph": lines}, "\n".join(lines))
        return
    commits = repo.log(ref, first_parent=first_parent, actor=actor, limit=limit, maintenance=not no_maintenance)
    line = (lambda c: f"{repo.short_id(c.id)} {c.message}") if oneline else (lambda c: commit_line(repo, c))
    emit(obj, [c.summary() for c in commits], lambda: echo_lines(line(c) for c in commits))


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
