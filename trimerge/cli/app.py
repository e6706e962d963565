"""The CLI's application: the command group, its context, output, exit codes and error handling.

Exit codes: 0 success; 1 "no" answers (``merge-base --is-ancestor``) and merge conflicts;
2 bad input or usage; 3 lost a race (retry); 4 internal error; 5 done (published), but an output
(a report, ``--conflicts``, ``-o``) was not written; 141 the reader of the output went away. Errors print one line, never a traceback (set ``TRIMERGE_DEBUG=1`` to see one); under
``--json`` that line is a JSON object ``{"error", "type", "exit_code", "retryable"}``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn

import click

from trimerge.lineage.safety import boundary
from trimerge.lineage.errors import TrimergeError, lance_message, one_line

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT, EXIT_RETRY, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_OUTPUT_FAILED = 5  # the command did its work (published), but an output file was not written
EXIT_PIPE = 141  # killed by SIGPIPE, as git is when its reader goes away
MAX_COUNT = 2**62  # counts (--limit, -n) beyond this are typos, and overflow Arrow's int64 slices
#: Failures of the machine, not of trimerge: one clear line (exit 2), never "internal error".
ENVIRONMENT_ERRORS = boundary.ENVIRONMENT_ERRORS


class Context:
    def __init__(self) -> None:
        self.path = "."
        self.json = False
        self.storage_options: dict[str, str] = {}
        self._repo: Any = None

    def open(self, location: str | None = None, *, read_only: bool = False):
        """Open the repository at ``location`` (default: ``-C``) with the ``--storage-option`` values."""
        from trimerge.lineage.repository import Repository

        return Repository.open(location or self.path, read_only=read_only,
                               storage_options=self.storage_options or None)

    def repo(self, *, options_for_remote: bool = False):
        """The repository at ``-C``. ``options_for_remote``: the ``--storage-option`` values are meant
        for a remote too, so a local repository opens without them (they apply to object stores only)."""
        if self._repo is None:
            from trimerge.lineage.storage.location import Location

            if options_for_remote and Location.parse(self.path).is_local:
                from trimerge.lineage.repository import Repository

                self._repo = Repository.open(self.path)
            else:
                self._repo = self.open()
        return self._repo


def _merge_common(ctx: click.Context, path: str | None, as_json: bool, storage_options: tuple[str, ...]) -> Context:
    from trimerge.lineage.storage.location import parse_storage_options

    obj = ctx.ensure_object(Context)
    if path is not None:
        obj.path = path
    if as_json:
        obj.json = True
    if storage_options:
        obj.storage_options.update(parse_storage_options(storage_options))
    return obj


def common(fn: Callable) -> Callable:
    """``-C URI``, ``--storage-option`` and ``--json`` are accepted before or after the sub-command."""

    @click.option("-C", "path", default=None, metavar="URI",
                  help="Repository: a directory or an s3://, gs://, az:// URI (default: current directory).")
    @click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
                  help="Object-store option (credentials, endpoint, region…); repeatable. Default: environment.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
    @click.pass_context
    @functools.wraps(fn)
    def wrapper(ctx: click.Context, path: str | None, storage_options: tuple[str, ...], as_json: bool, **kwargs: Any):
        obj = _merge_common(ctx, path, as_json, storage_options)
        return fn(obj, **kwargs)

    return wrapper


def echo_lines(lines: Iterable[str]) -> None:
    """``click.echo`` each line (the text of a listing, for :func:`emit`)."""
    for line in lines:
        click.echo(line)


def emit(obj: Context, data: Any, text: str | Callable[[], object] | None = None) -> None:
    if obj.json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif callable(text):
        text()
    elif text is not None:
        click.echo(text)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    say_error(message, "InvalidInput", code)
    sys.exit(code)


_JSON_ERRORS = False  # set from argv, for usage errors raised before the context exists


def say_error(message: str, kind: str, code: int, *, retryable: bool = False, prefix: str = "error") -> None:
    """The one line every failure prints on stderr: text, or JSON under ``--json``."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(Context) if ctx is not None else None
    from trimerge.remotes.config import redact

    text = redact(one_line(message))  # a URL's credentials are never printed, whichever error named it
    if (obj is not None and obj.json) or _JSON_ERRORS:
        click.echo(json.dumps({"error": text, "type": kind, "exit_code": code, "retryable": retryable}), err=True)
    else:
        click.echo(f"{prefix}: {text}", err=True)


class TrimergeGroup(click.Group):
    """Turns every error into one line and a documented exit code."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        global _JSON_ERRORS
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        _JSON_ERRORS = "--json" in (sys.argv[1:] if args is None else list(args))
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # a group without a subcommand: its help, as --help
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            sys.exit(0)
        except click.exceptions.UsageError as exc:
            from trimerge.cli.habits import usage_hint

            path = exc.ctx.command_path if exc.ctx is not None else "trimerge"
            say_error(usage_hint(exc) or f"{exc.format_message()} (see '{path} --help')", "UsageError",
                      EXIT_BAD_INPUT)
            sys.exit(EXIT_BAD_INPUT)
        except click.exceptions.ClickException as exc:
            say_error(exc.format_message(), "UsageError", exc.exit_code)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        from trimerge.cli.habits import habit_hint

        hint = habit_hint(args[0]) if args and args[0] not in self.commands else None
        if hint:  # a git habit: name trimerge's equivalent
            raise click.UsageError(hint, ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrimergeError as exc:
            if os.environ.get("TRIMERGE_DEBUG"):
                raise
            msg = str(exc) if str(exc).strip() else type(exc).__name__
            say_error(msg + (" (retry)" if exc.retryable and "retry" not in msg else ""), type(exc).__name__,
                      exc.exit_code, retryable=exc.retryable)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            _reader_went_away()
        except (OSError, RuntimeError) as exc:
            code = _environment_errno(exc)
            if code is None and isinstance(exc, OSError) and exc.filename and not os.environ.get("TRIMERGE_DEBUG"):
                # A path the checks up front could not judge (/proc, a file removed meanwhile).
                say_error(f"{exc.strerror or exc}: {exc.filename}", "EnvironmentError", EXIT_BAD_INPUT)
                ctx.exit(EXIT_BAD_INPUT)
            if os.environ.get("TRIMERGE_DEBUG"):
                raise
            if code is None:  # no input or machine fault explains it: ours to own, never a traceback
                _internal_error(ctx, exc)
            filename = getattr(exc, "filename", None)
            where = f" ({filename})" if filename else ""
            detail = getattr(exc, "strerror", None) or lance_message(exc)
            say_error(f"{ENVIRONMENT_ERRORS[code]}{where}: {detail}", "EnvironmentError", EXIT_BAD_INPUT)
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - the CLI must never print a traceback
            if os.environ.get("TRIMERGE_DEBUG"):
                raise
            _internal_error(ctx, exc)
        except BaseException as exc:
            # A Rust panic inside polars, pyarrow or Lance arrives as a BaseException: no input
            # explained it (those are caught where the input is read), so it is ours to own.
            if type(exc).__name__ != "PanicException" or os.environ.get("TRIMERGE_DEBUG"):
                raise
            _internal_error(ctx, exc)


def describe_os_error(exc: BaseException) -> str:
    """Why a write failed, in words (``no space left on the device``), without Lance's source paths."""
    return boundary.describe(exc)


def _internal_error(ctx: click.Context, exc: BaseException) -> NoReturn:
    first = str(exc).splitlines()[0] if str(exc) else ""
    say_error(f"{type(exc).__name__}: {first} (TRIMERGE_DEBUG=1 shows details)", "InternalError",
              EXIT_INTERNAL, prefix="internal error")
    ctx.exit(EXIT_INTERNAL)


@click.group(cls=TrimergeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "path", default=None, metavar="URI",
              help="Repository: a directory or an s3://, gs://, az:// URI (default: current directory).")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="Object-store option (credentials, endpoint, region…); repeatable. Default: environment.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.version_option(package_name="trimerge")
@click.pass_context
def cli(ctx: click.Context, path: str | None, storage_options: tuple[str, ...], as_json: bool) -> None:
    """trimerge: git-style branches, history, diff and three-way merge for multi-table Lance datasets."""
    _merge_common(ctx, path, as_json, storage_options)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    from trimerge.cli.startup import install

    install()  # pandas stays out of the process unless Spark needs it (trimerge.cli.startup)
    try:
        cli.main(args=argv, prog_name="trimerge")
    except BrokenPipeError:
        _reader_went_away()


def _environment_errno(exc: BaseException) -> int | None:
    """The errno of a machine failure: Python's own, or the ``(os error N)`` Lance reports in its text."""
    return boundary.environment_errno(exc)


def _reader_went_away() -> None:
    """``trimerge log | head -1``: stop quietly (stdout goes to /dev/null so the final flush is silent)."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_PIPE)


# ---------------------------------------------------------------------------------------------- helpers
def read_file(path: str):
    """Read CSV, Parquet, JSON lines, JSON, Arrow IPC or a Lance dataset into Arrow (see
    :mod:`trimerge.cli.inputs`: encodings and reader failures are one line naming the file)."""
    from trimerge.cli.inputs import read_file as read

    return read(path)


def commit_line(repo, c) -> str:
    return f"{repo.short_id(c.id)} {c.created_at:%Y-%m-%d %H:%M:%S} {c.actor:<16} {c.message}"


def published(obj: Context, repo, commit, what: str) -> None:
    if commit is None:
        emit(obj, {"commit": None}, f"{what}: nothing to commit")
    else:
        emit(obj, commit.summary(), f"[{commit.branch} {repo.short_id(commit.id)}] {commit.message}")


def write_options(fn: Callable) -> Callable:
    fn = click.option("--branch", "-b", default=None, help="Branch to write (default: the current branch).")(fn)
    fn = click.option("--message", "-m", default=None, help="Commit message.")(fn)
    fn = click.option("--actor", default=None, help="Who makes the change (default: $TRIMERGE_ACTOR or user@host).")(fn)
    return fn


#: Output formats by file extension (``-o FILE``); text goes to a terminal or a file without one of these.
DATA_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
                   ".csv": "csv", ".lance": "lance"}
TEXT_EXTENSIONS = ("", ".txt")


def output_suffix(output: str) -> str:
    """The extension of ``-o`` PATH, lower-case ('' for none; a trailing '/' ignored)."""
    return Path(output.rstrip("/")).suffix.lower()


def output_format(fmt: str | None, output: str | None, *, formats: tuple[str, ...], default: str,
                  what: str = "this command") -> str:
    """The format to write: ``--format``, else the extension of ``-o`` FILE, else ``default``.

    Refused up front (exit 2, before any work): an extension that is neither a data format nor
    text, a ``--format`` that contradicts the extension, or a format ``what`` cannot write."""
    implied = None
    if output is not None:
        suffix = output_suffix(output)
        implied = DATA_EXTENSIONS.get(suffix)
        if implied is None and suffix not in TEXT_EXTENSIONS:
            fail(f"-o {output}: no output format has the extension {suffix!r} (use .parquet, .jsonl, .json, .csv, "
                 ".lance, or .txt or no extension for text)")
        if fmt is not None and implied is not None and fmt != implied:
            fail(f"--format {fmt} contradicts -o {output}, a .{implied} file (drop --format, or change the extension)")
    chosen = fmt or implied or default
    if chosen not in formats:
        fail(f"{what} cannot write {chosen} (formats: {', '.join(formats)})")
    if chosen in ("parquet", "lance") and output is None:
        fail(f"--format {chosen} needs -o {'FILE' if chosen == 'parquet' else 'DIRECTORY'}")
    return chosen


def check_output_path(output: str | None, fmt: str, what: str = "-o") -> None:
    """Refuse (exit 2) an output path that cannot take ``fmt``: a Lance dataset is a directory,
    every other format a file (see :mod:`trimerge.lineage.storage.outputs`)."""
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.lineage.storage.outputs import DIRECTORY, FILE, check_output

    if output is None:
        return
    try:
        check_output(output, DIRECTORY if fmt == "lance" else FILE, what)
    except InvalidOperationError as exc:
        fail(str(exc))


def print_table(table, fmt: str, output: str | None, limit: int | None = None) -> None:
    """Print or write an Arrow table as text, JSON, JSON lines, CSV, Parquet or a Lance dataset."""
    if output is not None and fmt == "table":  # a caller's default: the file's extension decides
        fmt = DATA_EXTENSIONS.get(output_suffix(output), "table")
    check_output_path(output, fmt)
    from trimerge.cli.tableformats import distinct_names

    table = distinct_names(table)  # every format keeps every column
    if limit is not None:
        table = table.slice(0, limit)
    if fmt in ("parquet", "lance"):
        if not output:
            fail(f"--format {fmt} needs -o {'FILE' if fmt == 'parquet' else 'DIRECTORY'}")
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, output)
        else:
            import lance

            from trimerge.cli.tableformats import lance_name_problem
            from trimerge.lineage.storage.outputs import is_remote, local_path

            if (problem := lance_name_problem(table)) is not None:
                fail(f"-o {output}: {problem}")

            # "create" where nothing is yet: Lance warns on stderr when "overwrite" finds nothing.
            fresh = not is_remote(output) and not local_path(output, uri=True).exists()
            lance.write_dataset(table, output, mode="create" if fresh else "overwrite")
        return
    from trimerge.cli.texttable import simple_text

    if fmt == "json":
        text = json.dumps(table.to_pylist(), indent=2, default=str)
    elif fmt == "jsonl":
        text = "\n".join(json.dumps(r, default=str) for r in table.to_pylist())
    elif fmt == "table" and (simple := simple_text(table)) is not None:
        text = simple  # a table of plain values: the text polars would draw, without importing polars
    else:  # polars writes CSV and draws the table (imported only then: a quarter of a second)
        import polars as pl

        from trimerge.lineage.tables.arrowtypes import to_polars

        if fmt == "csv":  # nested values as JSON text: polars' CSV writer has none
            from trimerge.cli.tableformats import csv_ready

            table = csv_ready(table)
        df = to_polars(table)  # decimal256 too (polars panics on it)
        if fmt == "csv":
            text = df.write_csv()
        else:
            with pl.Config(tbl_rows=50, tbl_cols=20, fmt_str_lengths=40):
                text = str(df)
    if output:
        Path(output).write_text(text + ("\n" if not text.endswith("\n") else ""), encoding="utf-8")
    else:
        click.echo(text)


def graph_text(repo, starts: list[str], first_parent: bool = False, limit: int | None = None) -> list[str]:
    """``log --graph``: the layout of :mod:`trimerge.lineage.history.graphlayout`, labelled with refs and messages."""
    from trimerge.lineage.history.graphlayout import graph_lines

    tips: dict[str, list[str]] = {}
    for b in repo.branches.list():
        tips.setdefault(b.commit_id, []).append(b.name)
    for t in repo.tags.list():
        tips.setdefault(t.commit_id, []).append(f"tag: {t.name}")

    def label(cid: str) -> str:
        c = repo.commit(cid)
        refs = f" ({', '.join(tips[cid])})" if cid in tips else ""
        return f"{repo.short_id(cid)} {c.actor}: {c.message}{refs}"

    return graph_lines(repo.graph, starts, label, first_parent=first_parent, limit=limit)


def table_address(obj: Context, table_name: str, ref: str | None) -> tuple[str, str | None]:
    """A TABLE argument that may be an address ``REPO::REF::TABLE``: (table, ref), the repository
    taken from the address; an address that disagrees with ``--ref`` is one clear line."""
    from trimerge.lineage.history.address import is_address, parse_address

    if not is_address(table_name):
        return table_name, ref
    addr = parse_address(table_name)
    if addr.repository is not None:
        obj.path = addr.repository
    if addr.table is None:
        fail(f"address {table_name!r} names no table")
    if ref is not None and ref != addr.ref:
        fail(f"address {table_name!r} and --ref {ref!r} disagree")
    return addr.table, addr.ref
