"""``trimerge relocate [PATH]``: make a copied or moved repository name the place it is now.

A read-write open does this by itself; the command is what a read-only reader of a moved copy is
told to run (:mod:`trimerge.lineage.tables.relocation`). Idempotent: a second run has nothing to do.
"""

from __future__ import annotations

import click

from trimerge.cli.app import Context, cli, common, emit


@cli.command()
@click.argument("target", required=False, metavar="[PATH]")
@common
def relocate(obj: Context, target: str | None) -> None:
    """Make a copied or moved repository (cp, rsync, a bucket sync, a restored backup) read and write
    where it is now: its branches' table data stops naming the old place. PATH defaults to -C."""
    from trimerge.cli.diffs import watched_bar
    from trimerge.lineage.tables.relocation import relocate as run

    bar = watched_bar(obj, None, "relocating")  # a bar once it has run a second, for a person watching
    try:
        result = run(target or obj.path, storage_options=obj.storage_options or None,
                     progress=None if bar is None else (lambda key: bar(key.split("/_")[0], "checked")))
    finally:
        if bar is not None:
            bar.close()
    if not result.relocated:
        text = f"nothing to do: {result.location} already names its place"
    else:
        text = (f"relocated {result.old_location} -> {result.location}: {result.files_rewritten} file(s) of "
                f"{result.forks} fork(s) in {result.datasets} table dataset(s) rewritten in {result.seconds:.2f}s")
    emit(obj, result.to_json(), text)
