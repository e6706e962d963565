"""SQL over refs (``repo.sql``, ``trimerge sql``), on DuckDB.

In a query, a table name is that table at the query's ref, ``"<table>@<ref>"`` is it at any other
ref (any ref expression: ``"products@main~2"``, ``"products@v1"``), and a table function
registered with :func:`register_table_function` (the diff package registers
``diff('<A>', '<B>', '<table>')``) yields rows computed by trimerge. Tables are handed to DuckDB as
Lance datasets, so DuckDB pushes its filters and column choices into Lance's scan.

The query is parsed before anything is read (sqlglot, DuckDB dialect): exactly one read-only query
or one clear error. It runs on a connection without external access (no files, no network, no
extensions) and is interrupted after the ``checks.timeout`` setting, the limits data checks have.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from trimerge.lineage.errors import InvalidOperationError

if TYPE_CHECKING:  # pyarrow only when a query runs: `import trimerge` (which registers functions) stays light
    import pyarrow as pa

    from trimerge.lineage.hosts import SqlHost

#: Longest query text accepted.
MAX_QUERY_CHARS = 100_000
#: Separates a table from its ref in a table name: ``"products@main~1"``.
REF_SEPARATOR = "@"

TableFunction = Callable[..., "pa.Table"]
#: name -> fn(repo, *literal arguments) -> Arrow table; see :func:`register_table_function`.
TABLE_FUNCTIONS: dict[str, TableFunction] = {}


def register_table_function(name: str, fn: TableFunction) -> None:
    """Make ``name(...)`` usable in ``FROM``: ``fn(repo, *args)`` gets the repository and the
    call's literal arguments (text or numbers) and returns the rows as an Arrow table."""
    TABLE_FUNCTIONS[name.lower()] = fn


def run_sql(repo: "SqlHost", query: Any, ref: str | None = None, timeout: float | None = None) -> pa.Table:
    """The rows of ``query`` with its tables at ``ref`` (default: the current branch)."""
    import duckdb

    tree = _parse(query)
    default_ref = repo.default_ref(ref)
    con = duckdb.connect(config={"enable_external_access": False, "threads": 2})
    try:
        for name, relation in _relations(repo, tree, default_ref).items():
            con.register(name, relation)
        seconds = float(repo.settings.get("checks.timeout")) if timeout is None else timeout
        table = _run(con, tree.sql(dialect="duckdb"), seconds)
    finally:
        con.close()
    # DuckDB lets a query name two columns alike (``SELECT 1 AS a, 2 AS a``, a self-join's ``*``);
    # Arrow keeps both, but every consumer downstream (polars, JSON objects, Parquet readers, Lance)
    # needs names that differ: one answer for the API and every output format alike.
    return table.rename_columns(unique_names(table.column_names))


def unique_names(names: list[str]) -> list[str]:
    """``names`` with each repeat renamed ``<name>_1``, ``<name>_2``, …: the first of equal names
    keeps it, and no new name takes one that another column has (``a, a, a_1`` gives ``a, a_2, a_1``)."""
    taken = set(names)
    seen: set[str] = set()
    out = []
    for name in names:
        if name in seen:
            n = 1
            while f"{name}_{n}" in taken:
                n += 1
            name = f"{name}_{n}"
            taken.add(name)
        seen.add(name)
        out.append(name)
    return out


def read_only_query(text: Any, what: str, refusal: str, max_chars: int = MAX_QUERY_CHARS) -> Any:
    """The sqlglot tree (DuckDB dialect) of ``text`` if it is exactly one query that writes
    nothing; otherwise one :class:`InvalidOperationError` line starting with ``what`` (``refusal``
    says what is expected when it is not a query). Shared by ``repo.sql`` and data checks."""
    import sqlglot
    from sqlglot import exp

    if not isinstance(text, str) or not text.strip():
        raise InvalidOperationError(f"{what}: the SQL must be a non-empty query")
    if len(text) > max_chars or "\x00" in text:
        raise InvalidOperationError(f"{what}: the SQL is longer than {max_chars:,} characters or holds a NUL")
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidOperationError(f"{what}: the SQL does not parse ({first[:200]})") from None
    except RecursionError:
        raise InvalidOperationError(f"{what}: the SQL nests too deeply") from None
    if len(statements) != 1:
        raise InvalidOperationError(f"{what}: give exactly one query, not {len(statements)} statements")
    tree = statements[0]
    writes = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Command, exp.Copy,
              exp.Merge, exp.Set, exp.Pragma, exp.Use, exp.Transaction, exp.Commit, exp.Rollback)
    if not isinstance(tree, exp.Query) or any(isinstance(node, writes) for node in tree.walk()):
        raise InvalidOperationError(f"{what}: {refusal}")
    return tree


def _parse(query: Any) -> Any:
    return read_only_query(query, "sql", "only queries (SELECT ..., WITH ... SELECT ...) run here; nothing may write")


def _relations(repo: "SqlHost", tree: Any, default_ref: str) -> dict[str, Any]:
    """What each table of ``tree`` names, registered under that name: Lance datasets at refs and
    table functions' rows (whose calls are replaced by the names, in ``tree``)."""
    from sqlglot import exp

    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    relations: dict[str, Any] = {}
    for node in list(tree.find_all(exp.Table)):
        if isinstance(node.this, exp.Anonymous) or isinstance(node.this, exp.Func):
            name = f"__trimerge_fn_{len(relations)}"
            relations[name] = _call(repo, node.this)
            node.set("this", exp.to_identifier(name, quoted=True))
            continue
        if node.args.get("db") or node.args.get("catalog"):
            raise InvalidOperationError(f"sql: {node.sql(dialect='duckdb')}: name a table, or \"table@ref\"")
        name = node.name
        if not name or name in ctes or name in relations:
            continue
        table, at, other = name.partition(REF_SEPARATOR)
        relations[name] = repo.dataset(table, other if at else default_ref)
    return relations


def _call(repo: "SqlHost", call: Any) -> pa.Table:
    from sqlglot import exp

    fname = (call.name if isinstance(call, exp.Anonymous) else call.sql_name()).lower()
    fn = TABLE_FUNCTIONS.get(fname)
    if fn is None:
        known = ", ".join(sorted(TABLE_FUNCTIONS)) or "none"
        raise InvalidOperationError(f"sql: unknown table function {fname!r} (table functions: {known})")
    args = []
    for arg in call.expressions:
        if not isinstance(arg, exp.Literal):
            raise InvalidOperationError(f"sql: {fname}(...) takes text or number literals, not {arg.sql()!r}")
        args.append(arg.this if arg.is_string else float(arg.this) if "." in arg.this else int(arg.this))
    return fn(repo, *args)


def _run(con: Any, sql: str, seconds: float) -> pa.Table:
    import duckdb

    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        if fired.is_set() or isinstance(exc, duckdb.InterruptException):
            raise InvalidOperationError(f"sql: the query did not finish within {seconds:g} s and was stopped "
                                        "(setting checks.timeout)") from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidOperationError(f"sql: {first[:300]}") from None
    finally:
        timer.cancel()
