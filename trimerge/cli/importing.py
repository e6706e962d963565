"""``trimerge table import``: an existing Lance dataset becomes a table without copying its data."""

from __future__ import annotations

import click

from trimerge.cli.app import Context, common, emit, write_options
from trimerge.cli.diffs import watched_bar
from trimerge.cli.tables import table


@table.command("import")
@click.argument("name")
@click.argument("uri")
@click.option("--primary-key", "-k", "keys", required=True, multiple=True,
              help="Key column; repeat (or separate with commas) for a composite key.")
@click.option("--version", "source_version", type=click.IntRange(min=1), default=None,
              help="Version of the source to import (default: its latest).")
@write_options
@common
def table_import(obj: Context, name: str, uri: str, keys: tuple[str, ...], source_version: int | None, branch,
                 message, actor) -> None:
    """Import the Lance dataset at URI (a path or s3://, gs://, az:// URI) as table NAME, without
    copying its data files: the table refers to the source's files, which must stay where they are.
    The source is never written to. Its key column(s) must be non-null and unique; its indices
    come along. The source is read with the repository's --storage-option values when it is on
    the same kind of store (the repository reads its files with them later), else with the
    environment's settings."""
    primary_key = [k.strip() for part in keys for k in part.split(",") if k.strip()]
    repo = obj.repo()
    store = repo.table_store
    same_store = "://" in uri and uri.split("://", 1)[0].lower() == store.location.scheme
    options = dict(store.options) if same_store and store.options else None
    bar = watched_bar(obj, None, "import")  # key batches: as many as the source has rows / 2**20
    try:
        commit = repo.import_table(name, uri, primary_key, version=source_version, storage_options=options,
                                   branch=branch, actor=actor, message=message, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    tv = commit.tables[name]
    emit(obj, {**commit.summary(), "table": name, "dataset": tv.dataset, "source": uri,
               "source_version": source_version},
         f"[{commit.branch} {repo.short_id(commit.id)}] {commit.message}")
