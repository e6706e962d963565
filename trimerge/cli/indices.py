"""Commands on indices, upkeep and repository settings: index create/list/drop/optimize, optimize, config."""

from __future__ import annotations

import json

import click

from trimerge.cli.app import Context, cli, common, echo_lines, emit, fail, published, write_options
from trimerge.cli.diffs import watched_bar


@cli.group()
def index() -> None:
    """Build, list and drop a table's Lance indices (versioned with each commit)."""


def _param(text: str) -> tuple[str, object]:
    """``K=V`` with V read as JSON when it parses (numbers, true/false), else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        fail(f"expected --param KEY=VALUE, not {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


@index.command("create")
@click.argument("table_name", metavar="TABLE")
@click.argument("column")
@click.option("--kind", required=True, metavar="KIND",
              help="IVF_PQ, IVF_HNSW_SQ, IVF_FLAT (vectors); BTREE, BITMAP, LABEL_LIST (scalars); INVERTED (text).")
@click.option("--name", default=None, help="Index name (default: COLUMN_idx).")
@click.option("--replace", is_flag=True, help="Rebuild an index of that name.")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Lance parameter, e.g. num_partitions=64 (repeatable).")
@write_options
@common
def index_create(obj: Context, table_name: str, column: str, kind: str, name, replace: bool, params, branch, message,
                 actor) -> None:
    """Build an index on TABLE.COLUMN as one commit."""
    given = dict(_param(p) for p in params)
    reserved = [k for k in given if k in ("branch", "actor", "message", "name", "replace", "progress")]
    if reserved:
        fail(f"--param {reserved[0]} is not a Lance parameter"
             + (" (use the option of that name)" if reserved[0] != "progress" else ""))
    repo = obj.repo()
    bar = watched_bar(obj, None, "index")  # Lance's build stages, not known ahead
    try:
        commit = repo.create_index(table_name, column, kind, name=name, replace=replace, branch=branch, actor=actor,
                                   message=message, progress=bar, **given)
    finally:
        if bar is not None:
            bar.close()
    published(obj, repo, commit, "index create")


@index.command("list")
@click.argument("table_name", metavar="TABLE", required=False)
@click.option("--ref", default=None, help="Ref to list (default: the current branch).")
@common
def index_list(obj: Context, table_name: str | None, ref: str | None) -> None:
    """List the indices of TABLE (default: of every table) at a ref."""
    repo = obj.repo()
    names = [table_name] if table_name else repo.tables(ref)
    rows = [{"table": t, **i.to_json()} for t in names for i in repo.indices(t, ref=ref)]

    def text() -> None:
        for r in rows:
            params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
            click.echo(f"{r['table']}\t{r['name']}\t{r['kind']} on {', '.join(r['columns'])}"
                       f"{f' ({params})' if params else ''}\t{r['num_indexed_rows']} indexed, "
                       f"{r['num_unindexed_rows']} not yet")

    emit(obj, rows, text)


@index.command("drop")
@click.argument("table_name", metavar="TABLE")
@click.argument("name")
@write_options
@common
def index_drop(obj: Context, table_name: str, name: str, branch, message, actor) -> None:
    """Drop the index NAME of TABLE."""
    repo = obj.repo()
    published(obj, repo, repo.drop_index(table_name, name, branch=branch, actor=actor, message=message), "index drop")


@index.command("optimize")
@click.argument("table_name", metavar="TABLE")
@write_options
@common
def index_optimize(obj: Context, table_name: str, branch, message, actor) -> None:
    """Add rows written since the last build to TABLE's indices (no retraining)."""
    repo = obj.repo()
    bar = watched_bar(obj, None, "index optimize")
    try:
        commit = repo.optimize_indices(table_name, branch=branch, actor=actor, message=message, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    published(obj, repo, commit, "index optimize")


@cli.command()
@click.argument("name", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Put NAME back to its default.")
@common
def config(obj: Context, name: str | None, value: str | None, unset: bool) -> None:
    """Show the repository's settings, one setting, or set one (``trimerge config NAME VALUE``)."""
    from trimerge.lineage.storage.settings import SETTINGS, parse_value

    repo = obj.repo()
    if name is None:
        current = repo.settings.as_dict()
        emit(obj, current, lambda: echo_lines(f"{k} = {json.dumps(v)}\t# {SETTINGS[k].help}"
                                              for k, v in current.items()))
        return
    if value is not None or unset:
        if value is not None and unset:
            fail("give VALUE or --unset, not both")
        repo.check_writable()
        repo.settings.set(name, None if unset or value is None else parse_value(name, value))
    current = repo.settings.get(name)
    emit(obj, {name: current}, f"{name} = {json.dumps(current)}")


@cli.command()
@click.argument("table_name", metavar="TABLE", required=False)
@write_options
@common
def optimize(obj: Context, table_name: str | None, branch, message, actor) -> None:
    """Compact TABLE (default: every table) and add unindexed rows to its indices: one maintenance
    commit, no row changes (``log --no-maintenance`` hides it)."""
    repo = obj.repo()
    published(obj, repo, repo.optimize(table_name, branch=branch, actor=actor, message=message), "optimize")
