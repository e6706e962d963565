"""Data checks: a name, a table and a SQL query over that table that returns the failing rows
(dbt's convention). Checks are versioned table state (``TableVersion.checks``), so they travel
with commits, time travel and merges (merged three-way like the schema: :mod:`trimerge.merge.gates`).

A query sees the table under its own name (``SELECT * FROM flights WHERE dep_delay < -120``) and
runs in DuckDB over the Lance dataset (projections and filters pushed into Lance's scan, nothing
copied), with file access disabled. Only a single query is accepted: anything that writes, loads,
attaches or sets is refused when the check is added.

A check may also read the other tables of the commit it judges, by their names (joins, ``EXISTS``,
``IN`` subqueries, aggregates across tables), still returning failing rows of its own table:
``SELECT s.* FROM stocks s LEFT JOIN companies c USING (symbol) WHERE c.symbol IS NULL``. The
tables it reads are found in its SQL (:func:`~trimerge.lineage.gates.checkscope.tables_read`) and
only those are registered beside its own. Such a *multi-table* check always runs on the whole
result (``CheckResult.scope`` says ``whole result: ...``), since a row's verdict depends on other
tables' rows. Adding one that names a table the branch lacks is refused; judging a commit (or a
merge's result) that lacks a table it reads is a failed check with that reason
(``CheckResult.reason``), not an error.

``gates`` names the branches whose merges a check gates; None means every protected branch.

A check's query must return the table's key columns (refused when the check is added: the keys
are what a failing result names), and runs within the ``checks.timeout`` setting: a query still
running then is interrupted and the check fails to run (one line; a gated merge aborts and its
branch lease is released) — an endless query would otherwise hang ``check run`` and every gated
merge.

A gated merge runs a *row-local* check (:mod:`trimerge.lineage.gates.checkscope`) on the rows it wrote
alone when the table is known to pass it (:mod:`trimerge.lineage.gates.checkpasses`, written by
:meth:`Checks.run` and by gated merges): the same verdict for a fraction of the cost
(:mod:`trimerge.merge.checkdelta`). Checks run in connections to one DuckDB database per process
(:func:`_session`).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, Sequence

from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import AlreadyExistsError, CheckNotFoundError, InvalidOperationError
from trimerge.lineage.gates.checkscope import tables_read
from trimerge.lineage.history.names import validate_branch_name, validate_table_name

if TYPE_CHECKING:
    from trimerge.lineage.hosts import ChecksHost

SAMPLE_KEYS = 5  # failing rows' keys a result carries
MAX_SQL = 100_000
TIMEOUT_SETTING = "checks.timeout"
#: ``CheckResult.scope`` of a check that reads other tables: it ran on the whole result.
WHOLE_RESULT = "whole result"

#: Opens a table of the commit being judged by name (a Lance dataset).
TableOpener = Callable[[str], Any]


@dataclass(frozen=True)
class Check:
    """A check's definition: ``gates`` None gates merges into every protected branch."""

    name: str
    table: str
    sql: str
    gates: tuple[str, ...] | None = None

    def record(self) -> str:
        return json.dumps({"sql": self.sql, "gates": None if self.gates is None else list(self.gates)},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_record(cls, name: str, table: str, text: str) -> "Check":
        doc = json.loads(text)
        gates = doc.get("gates")
        return cls(name, table, str(doc.get("sql", "")), None if gates is None else tuple(str(g) for g in gates))

    def gates_branch(self, branch: str, protected: Iterable[str]) -> bool:
        return branch in (set(protected) if self.gates is None else set(self.gates))

    def reads(self) -> tuple[str, ...]:
        """The other tables its SQL reads, as written (empty: it reads its own table only)."""
        return tables_read(self.sql, self.table)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "table": self.table, "sql": self.sql,
                "gates": None if self.gates is None else list(self.gates), "reads": list(self.reads())}


@dataclass(frozen=True)
class CheckResult:
    """One check run: ``failing_rows`` counts the rows the query returned; ``sample_keys`` holds the
    first failing rows' keys (by key order; empty when the query does not return the key columns).
    ``scope`` says what the query ran on: ``"table"``, in a gated merge ``"rows written since
    version N"`` (a row-local check that passed at version N: the same verdict, see
    :mod:`trimerge.merge.checkdelta`), or ``"whole result: <tables>"`` for a check that reads other
    tables (``reads``). ``reason`` is set when the check could not be judged on this data (a table
    it reads is missing): it failed, with no rows counted."""

    name: str
    table: str
    failing_rows: int
    sample_keys: list[dict[str, Any]] = field(default_factory=list)
    sql: str = ""
    scope: str = "table"
    reads: tuple[str, ...] = ()
    reason: str | None = None

    @property
    def passed(self) -> bool:
        return self.failing_rows == 0 and self.reason is None

    def to_json(self) -> dict[str, Any]:
        from trimerge.lineage.storage.jsonvalues import jsonable

        return {"name": self.name, "table": self.table, "failing_rows": self.failing_rows,
                "sample_keys": [jsonable(k) for k in self.sample_keys], "sql": self.sql, "passed": self.passed,
                "scope": self.scope, "reads": list(self.reads), "reason": self.reason}

    def describe(self) -> str:
        on = f"check {self.name} on {self.table}" + (f" (reads {', '.join(self.reads)})" if self.reads else "")
        if self.reason is not None:
            return f"{on}: failed: {self.reason}"
        if self.passed:
            return f"{on}: passed"
        shown = ", ".join(json.dumps(k, sort_keys=True, default=str) for k in self.sample_keys[:3])
        more = " …" if self.failing_rows > min(3, len(self.sample_keys)) else ""
        return f"{on}: {self.failing_rows} failing row(s)" + (f" ({shown}{more})" if shown else "")


def table_checks(tv: TableVersion | None, table: str) -> dict[str, Check]:
    return {} if tv is None else {n: Check.from_record(n, table, r) for n, r in tv.checks}


def as_record(checks: Mapping[str, Check]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((n, c.record()) for n, c in checks.items()))


def all_checks(tables: Mapping[str, TableVersion]) -> list[Check]:
    return sorted((c for name, tv in tables.items() for c in table_checks(tv, name).values()),
                  key=lambda c: (c.name, c.table))


def judging(before: Mapping[str, TableVersion], after: Mapping[str, TableVersion], branch: str,
            protected: Iterable[str]) -> list[Check]:
    """The checks that judge a change of ``branch`` from tables ``before`` to ``after`` (a merge,
    a rebase): those gating it in ``after``, and — so that no change removes a gate unseen — those
    gating it in ``before`` that the change removes or stops gating it with, as they were defined.
    A check whose table ``after`` no longer has is not run: no rows are left for it to judge."""
    protected = set(protected)
    now = [c for c in all_checks(after) if c.gates_branch(branch, protected)]
    kept = {(c.name, c.table) for c in now}
    removed = [c for c in all_checks(before) if c.gates_branch(branch, protected)
               and (c.name, c.table) not in kept and c.table in after]
    return sorted(now + removed, key=lambda c: (c.name, c.table))


# ---------------------------------------------------------------------------------------------- SQL
def checked_sql(sql: Any, what: str) -> str:
    """``sql`` if it is one read-only query (sqlglot, DuckDB dialect); one clear error otherwise."""
    from trimerge.lineage.tables.sql import read_only_query

    read_only_query(sql, what, "a check's SQL must be a query returning the failing rows (SELECT ...); it may not write",
                    MAX_SQL)
    return sql


_DATABASE: dict[int, Any] = {}  # per process id: a forked child must not share its parent's
_DATABASE_LOCK = threading.Lock()


def _session() -> Any:
    """A new connection to this process's DuckDB database for checks. Opening a database costs
    40–150 ms (a gated merge of 0.1% of a large table is ~0.3 s); a connection to an open one costs
    nothing and sees only what it registers itself (registered tables are connection-local, and a
    check's SQL cannot write). File access is off for the whole database."""
    import os

    import duckdb

    pid = os.getpid()
    with _DATABASE_LOCK:
        if pid not in _DATABASE:
            _DATABASE.clear()
            _DATABASE[pid] = duckdb.connect(config={"enable_external_access": False, "threads": 2})
        return _DATABASE[pid].cursor()


def engine_identity() -> str:
    """What besides a query and the data decides its answer here: DuckDB's version and the
    session's time zone and calendar (a TIMESTAMPTZ cast or date part depends on them)."""
    import duckdb

    con = _session()
    try:
        zone, calendar = con.sql("SELECT current_setting('TimeZone'), current_setting('Calendar')").fetchall()[0]
    except duckdb.Error:  # built without ICU: no time zones
        zone, calendar = "", ""
    finally:
        con.close()
    return f"{duckdb.__version__}|{zone}|{calendar}"


def _connect(table: str, dataset: Any, others: Mapping[str, Any] | None = None) -> Any:
    con = _session()
    con.register(table, dataset)
    for name, data in (others or {}).items():
        con.register(name, data)
    return con


def resolve_reads(reads: Iterable[str], names: Collection[str]) -> tuple[dict[str, str], list[str]]:
    """Which of ``names`` (the tables of the commit judged) each table a check reads is — the same
    name, else the one name equal to it ignoring case (DuckDB's rule) — and those it lacks."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for wanted in reads:
        alike = [n for n in names if n.lower() == wanted.lower()]
        match = wanted if wanted in names else alike[0] if len(alike) == 1 else None
        if match is None:
            missing.append(wanted)
        else:
            found[wanted] = match
    return found, missing


def lacking(missing: Sequence[str]) -> str:
    """``CheckResult.reason`` of a check judged on data lacking tables it reads."""
    shown = ", ".join(repr(m) for m in missing)
    return (f"it reads table{'s' if len(missing) > 1 else ''} {shown}, which the commit or merge result "
            "it judges does not have")


def bind(table: str, dataset: Any, sql: str, what: str, timeout: float | None = None, *,
         others: Mapping[str, Any] | None = None) -> list[str]:
    """The query's output columns, binding it against the table (and ``others``: the other tables
    it reads, by name) without running it."""
    import duckdb

    con = _connect(table, dataset, others)
    try:
        with _deadline(con, timeout):
            return list(con.sql(sql).columns)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidOperationError(f"{what}: the SQL does not run on table {table!r}: {first[:300]}") from None
    finally:
        con.close()


def run_check(check: Check, dataset: Any, primary_key: Sequence[str], timeout: float | None = None, *,
              tables: Collection[str] = (), open_table: TableOpener | None = None) -> CheckResult:
    """Run ``check`` on ``dataset`` (the table as the ref or the merge's result has it): count the
    failing rows and take the first ones' keys, in one pass over what the query reads. A check
    reading other tables finds them among ``tables`` (names), opened by ``open_table``."""
    return run_each([(check, dataset, primary_key)], timeout, tables=tables, open_table=open_table)[0]


@contextlib.contextmanager
def _deadline(con: Any, seconds: float | None):
    """Interrupt ``con``'s query after ``seconds`` (None: never); yields the timer, ``.fired`` once it went off."""
    def fire() -> None:
        timer.fired = True  # type: ignore[attr-defined]
        try:
            con.interrupt()
        except Exception:  # the query ended (and the connection closed) as the time ran out: nothing to stop
            pass

    timer = threading.Timer(seconds or 0, fire)
    timer.fired = False  # type: ignore[attr-defined]
    timer.daemon = True
    if seconds is not None:
        timer.start()
    try:
        yield timer
    finally:
        timer.cancel()


def default_timeout() -> float:
    from trimerge.lineage.storage.settings import SETTINGS

    return float(SETTINGS[TIMEOUT_SETTING].default)


def _run_on(con: Any, check: Check, primary_key: Sequence[str], timeout: float | None = None) -> CheckResult:
    """``check`` on a connection where the tables it reads are registered (and no other),
    interrupted after ``timeout`` seconds."""
    import duckdb

    with _deadline(con, timeout) as timer:
        try:
            return _query(con, check, primary_key)
        except duckdb.Error as exc:
            if timer.fired:
                raise InvalidOperationError(
                    f"check {check.name!r} on {check.table!r} did not finish within {timeout:g} s and was stopped "
                    f"(setting {TIMEOUT_SETTING}; make the query cheaper or raise the setting)") from None
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidOperationError(f"check {check.name!r} on {check.table!r} failed to run: {first[:300]}") from None


def _query(con: Any, check: Check, primary_key: Sequence[str]) -> CheckResult:
    columns = list(con.sql(check.sql).columns)
    keys = [k for k in primary_key if k in columns]
    quoted = ", ".join('"' + k.replace('"', '""') + '"' for k in keys)
    if keys:
        rows = con.sql(f"SELECT {quoted}, count(*) OVER () AS __trimerge_n FROM ({check.sql}) AS failing "
                       f"ORDER BY {quoted} LIMIT {SAMPLE_KEYS}").fetchall()
        n = rows[0][-1] if rows else 0
        sample = [dict(zip(keys, r[:-1])) for r in rows]
    else:  # a check added before key columns were required: counted, no keys to show
        n, sample = con.sql(f"SELECT count(*) FROM ({check.sql}) AS failing").fetchall()[0][0], []
    return CheckResult(check.name, check.table, int(n), sample, check.sql)


def run_all(checks: Iterable[Check], open_table: TableOpener, tables: Mapping[str, TableVersion],
            timeout: float | None = None) -> list[CheckResult]:
    """Run every check against ``open_table(table)`` (a Lance dataset), each within ``timeout``
    seconds (default: the ``checks.timeout`` setting's default); a check whose table is gone is
    reported as failing to run. A check reading other tables reads them among ``tables`` too."""
    def runs() -> Iterable[tuple[Check, Any, Sequence[str]]]:
        for check in checks:
            if check.table not in tables:
                raise InvalidOperationError(f"check {check.name!r}: table {check.table!r} does not exist")
            yield check, open_table(check.table), tables[check.table].primary_key

    return run_each(runs(), timeout, tables=tables, open_table=open_table)


def run_each(runs: Iterable[tuple[Check, Any, Sequence[str]]], timeout: float | None = None, *,
             tables: Collection[str] = (), open_table: TableOpener | None = None) -> list[CheckResult]:
    """Run each ``(check, data, primary key)``: ``data`` is what the query sees under the check's
    table name — the table (a Lance dataset) or some of its rows (an Arrow table: see
    :mod:`trimerge.merge.checkdelta`) — each within ``timeout`` seconds as :func:`run_all`.

    A check that reads other tables (:meth:`Check.reads`) sees them as ``open_table(name)`` for
    the names in ``tables`` (the commit judged: a ref's tables, or a merge's result), next to
    ``data`` — which must then be its whole table — and its result's scope is ``whole result: ...``;
    when ``tables`` lacks one, the check fails with that ``reason`` and its query does not run."""
    timeout = default_timeout() if timeout is None else timeout
    opened: dict[str, Any] = {}
    out: list[CheckResult] = []
    con = None
    try:
        for check, data, primary_key in runs:  # one connection; each query sees the tables it reads only
            reads = check.reads()
            found, missing = resolve_reads(reads, tables if open_table is not None else ())
            if missing:
                out.append(CheckResult(check.name, check.table, 0, [], check.sql, _whole(check, reads), reads,
                                       lacking(missing)))
                continue
            others: dict[str, Any] = {}
            for name in found.values():
                if name not in opened and open_table is not None:
                    opened[name] = open_table(name)
                others[name] = opened[name]
            if con is None:
                con = _session()
            for name, dataset in {check.table: data, **others}.items():
                con.register(name, dataset)
            try:
                result = _run_on(con, check, primary_key, timeout)
            finally:
                for name in {check.table, *others}:
                    con.unregister(name)
            out.append(replace(result, scope=_whole(check, reads), reads=reads) if reads else result)
    finally:
        if con is not None:
            con.close()
    return out


def _whole(check: Check, reads: Sequence[str]) -> str:
    return f"{WHOLE_RESULT}: {', '.join([check.table, *reads])}"


# ---------------------------------------------------------------------------------------------- the API
class Checks:
    """``repo.checks``: add, remove, list and run data checks."""

    def __init__(self, repo: "ChecksHost"):
        self.repo = repo

    def list(self, ref: str | None = None) -> list[Check]:
        """The checks defined at ``ref`` (default: the current branch), by name."""
        return all_checks(self.repo.resolve(self.repo.default_ref(ref)).tables)

    def get(self, name: str, ref: str | None = None) -> Check:
        for c in self.list(ref):
            if c.name == name:
                return c
        raise CheckNotFoundError(f"no check {name!r} at {self.repo.default_ref(ref)}")

    def add(self, name: str, table: str, sql: str, *, gates: Sequence[str] | None = None, branch: str | None = None,
            actor: str | None = None, message: str | None = None) -> Check:
        """Define check ``name`` on ``table``, committed on ``branch`` (default: the current branch).
        Checked before anything is written: the name, the table, the SQL (one query that binds
        against the table and the other tables it reads, which the branch must have: every column
        it names exists) and the gated branch names."""
        repo = self.repo
        repo.check_writable()
        what = f"check {name!r}"
        if not isinstance(name, str):
            raise InvalidOperationError(f"a check name must be text, not {name!r}")
        validate_table_name(name)  # the same rules: letters, digits, underscores
        gates_t = None if gates is None else _checked_gates(gates, what)
        sql = checked_sql(sql, what)
        target = repo.default_ref(branch)
        tv = repo.table_version(table, target)
        existing = self.list(target)
        if any(c.name == name for c in existing):
            raise AlreadyExistsError(f"a check named {name!r} exists already at {target}")
        tables = repo.resolve(target).tables
        others = {n: repo.open_table_version(tables[n]) for n in _read_at(table, sql, tables, target, what)}
        returned = bind(table, repo.open_table_version(tv), sql, what, repo.settings.get(TIMEOUT_SETTING),
                        others=others)
        missing = [k for k in tv.primary_key if k not in returned]
        if missing:
            raise InvalidOperationError(
                f"{what}: the query must return the key column(s) of {table!r} ({', '.join(tv.primary_key)}) so a "
                f"failure names its rows; it returns {', '.join(returned) or 'no columns'} "
                f"(select them, e.g. SELECT * FROM {table} WHERE ...)")
        check = Check(name, table, sql, gates_t)
        with repo.transaction(target, actor=actor, message=message or f"Add check {name} on {table}") as tx:
            current = tx.table_version(table)
            tx.set_table(table, replace(current, checks=as_record({**table_checks(current, table), name: check})))
        return check

    def remove(self, name: str, *, branch: str | None = None, actor: str | None = None,
               message: str | None = None) -> Check:
        """Remove check ``name`` (committed on ``branch``, default: the current branch)."""
        repo = self.repo
        repo.check_writable()
        target = repo.default_ref(branch)
        check = self.get(name, target)
        with repo.transaction(target, actor=actor, message=message or f"Remove check {name}") as tx:
            current = tx.table_version(check.table)
            kept = {n: c for n, c in table_checks(current, check.table).items() if n != name}
            tx.set_table(check.table, replace(current, checks=as_record(kept)))
        return check

    def run(self, ref: str | None = None, *, names: Sequence[str] | None = None) -> builtins.list[CheckResult]:
        """Run the checks defined at ``ref`` (or those named) on the data at ``ref``."""
        repo = self.repo
        commit = repo.resolve(repo.default_ref(ref))
        checks = all_checks(commit.tables)
        if names is not None:
            unknown = sorted(set(names) - {c.name for c in checks})
            if unknown:
                raise CheckNotFoundError(f"no check {unknown[0]!r} at {repo.default_ref(ref)}")
            checks = [c for c in checks if c.name in set(names)]
        results = run_all(checks, lambda t: repo.open_table_version(commit.tables[t]), commit.tables,
                          repo.settings.get(TIMEOUT_SETTING))
        if not repo.read_only:  # so a gated merge into ref may check only the rows it writes
            from trimerge.lineage.gates.checkpasses import CheckPasses

            passes = CheckPasses(repo.docs)
            for table in sorted({c.table for c in checks}):  # a check reading other tables never runs on rows alone
                passed = [c for c, r in zip(checks, results) if c.table == table and r.passed and not r.reads]
                if passed:
                    tv = commit.tables[table]
                    passes.record(tv, repo.open_table_version(tv).schema, passed)
        return results


def _read_at(table: str, sql: str, tables: Collection[str], target: str, what: str) -> list[str]:
    """The tables of ``target`` that ``sql`` (a check on ``table``) reads besides it; one line when
    it names one ``target`` lacks."""
    found, missing = resolve_reads(tables_read(sql, table), tables)
    if missing:
        name = missing[0]
        hint = ("a check reads the tables of the commit it judges, by plain name, not at other refs"
                if "@" in name else f"tables at {target}: {_few(sorted(tables))}")
        raise InvalidOperationError(f"{what}: the SQL reads table {name!r}, which {target} does not have ({hint})")
    return list(found.values())


def _few(names: Sequence[str], shown: int = 10) -> str:
    return ", ".join(names[:shown]) + (f", … {len(names) - shown} more" if len(names) > shown else "") or "none"


def _checked_gates(gates: Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(gates, str):
        gates = [gates]
    if not isinstance(gates, (list, tuple, set, frozenset)) or not all(isinstance(g, str) for g in gates):
        raise InvalidOperationError(f"{what}: gates= takes a list of branch names, not {gates!r}")
    for g in gates:
        if g != "main":
            validate_branch_name(g)
    return tuple(sorted(set(gates)))
