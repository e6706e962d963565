"""What the agent tools do, apart from any protocol: bounded reads, scoped writes, one-line refusals.

Every tool takes the caller's :class:`~trimerge.serve.tokens.Grant` (None: the local user, who
may do anything the files allow) and checks it as ``trimerge serve`` does: a read token is
refused every write, a token whose BRANCHES glob is not ``*`` may name only the branches it
matches (and write only those). Requests are bounded before any work: rows returned
(:data:`MAX_ROWS`), SQL and filter text (:data:`MAX_TEXT`), rows written (:data:`MAX_WRITE_ROWS`,
:data:`MAX_WRITE_CHARS`), names (:data:`MAX_NAME`); an answer is cut to :data:`MAX_ANSWER_CHARS`
of JSON. A refusal is :class:`AgentRefusal`; :func:`error_line` turns any failure into the one
line a client is shown.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from trimerge.lineage.errors import InvalidOperationError, TrimergeError, one_line
from trimerge.lineage.safety.boundary import translate
from trimerge.lineage.storage.jsonvalues import jsonable
from trimerge.serve.tokens import Grant

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEFAULT_ROWS", "MAX_ANSWER_CHARS", "MAX_NAME", "MAX_ROWS", "MAX_TEXT", "MAX_WRITE_CHARS",
           "MAX_WRITE_ROWS", "AgentRefusal", "AgentTools", "error_line"]

#: Rows a read, diff or query returns unless told otherwise.
DEFAULT_ROWS = 50
#: Most rows one answer holds: an agent pages with ``where``/``LIMIT``, it never pulls a table.
MAX_ROWS = 1_000
#: Longest SQL query or filter accepted (the CLI takes more; a conversation never needs it).
MAX_TEXT = 20_000
#: Longest table, branch, ref, column or title text.
MAX_NAME = 1_000
#: Most rows one write takes, and the most characters of JSON they may be together.
MAX_WRITE_ROWS = 10_000
MAX_WRITE_CHARS = 4 << 20
#: Largest answer (JSON characters): rows past it are left out and the answer says ``truncated``.
MAX_ANSWER_CHARS = 1 << 20


class AgentRefusal(Exception):
    """A request refused before any work: out of bounds, or beyond the caller's token."""


def error_line(exc: BaseException) -> str:
    """The one line a client sees for ``exc``: trimerge's own message for its typed errors and
    refusals, the machine's failure in words, and ``internal error: ...`` for anything else."""
    if isinstance(exc, AgentRefusal):
        return one_line(str(exc))
    if not isinstance(exc, TrimergeError):
        better = translate(exc)
        if better is None:
            first = str(exc).splitlines()[0] if str(exc).strip() else ""
            return one_line(f"internal error: {type(exc).__name__}: {first}"[:2000])
        exc = better
    assert isinstance(exc, TrimergeError)
    msg = str(exc) or type(exc).__name__
    if exc.retryable and "retry" not in msg:
        msg += " (retry)"
    return one_line(msg)[:4000]


def _text(value: Any, what: str, limit: int = MAX_NAME, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise AgentRefusal(f"{what} must be non-empty text")
    if len(value) > limit:
        raise AgentRefusal(f"{what} is {len(value):,} characters long; the limit is {limit:,}")
    if "\x00" in value:
        raise AgentRefusal(f"{what} holds a NUL character")
    return value


def _limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AgentRefusal(f"limit must be a whole number from 0 to {MAX_ROWS:,}, not {value!r}"[:300])
    if value > MAX_ROWS:
        raise AgentRefusal(f"limit {value:,} is over the maximum of {MAX_ROWS:,} rows per answer; "
                           "narrow the request (where=, LIMIT) and ask again"[:400])
    return value


def _table_name(value: Any) -> str:
    name = _text(value, "table")
    assert name is not None
    if "::" in name:  # an address may name another repository on this machine: never through here
        raise AgentRefusal(f"table {name[:200]!r}: addresses (REPO::REF::TABLE) are not accepted; pass the table "
                           "name and ref=")
    return name


def _required_ref(value: Any, what: str) -> str:
    ref = _ref(value, what)
    if ref is None:
        raise AgentRefusal(f"{what} must be non-empty text")
    return ref


def _ref(value: Any, what: str = "ref") -> str | None:
    ref = _text(value, what, required=False)
    if ref is not None and "::" in ref:
        raise AgentRefusal(f"{what} {ref[:200]!r}: addresses (REPO::REF::TABLE) are not accepted; pass a ref")
    return ref


def _rows_answer(table: "pa.Table", limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The first ``limit`` rows as JSON values, cut to :data:`MAX_ANSWER_CHARS`; whether any were left out."""
    rows: list[dict[str, Any]] = []
    size = 0
    for row in table.slice(0, limit).to_pylist():
        value = {str(k): jsonable(v) for k, v in row.items()}
        size += len(json.dumps(value))
        if size > MAX_ANSWER_CHARS:
            return rows, True
        rows.append(value)
    return rows, table.num_rows > limit


class AgentTools:
    """The tools of ``trimerge mcp`` on the repository at ``root`` (one opened per thread)."""

    def __init__(self, root: str, storage_options: dict[str, str] | None = None):
        self.root = root
        self.storage_options = dict(storage_options or {})
        self._local = threading.local()
        self._write_lock = threading.Lock()  # one commit at a time from this server (each takes a lease anyway)

    def repo(self) -> Any:
        """This thread's repository (the SDK runs each tool call on a worker thread)."""
        repo = getattr(self._local, "repo", None)
        if repo is None:
            from trimerge.lineage.repository import Repository

            repo = Repository.open(self.root, storage_options=self.storage_options or None)
            self._local.repo = repo
        return repo

    # -- scopes (trimerge.serve.tokens): the same rules as `trimerge serve`
    def _branches(self) -> set[str]:
        return {b.name for b in self.repo().branches.list()}

    def check_read(self, grant: Grant | None, *refs: str | None) -> None:
        if grant is None or grant.branches == "*":
            return
        names = self._branches()
        for ref in refs:
            ref = ref if ref is not None else self.repo().current_branch
            if not grant.may_name(ref, names):
                raise AgentRefusal(f"{grant.label} may name only branches matching {grant.branches!r}, not {ref!r} "
                                   "(tags and commit ids need a token for '*')")

    def check_write(self, grant: Grant | None, branch: str, what: str, *, new: bool = False) -> None:
        if grant is None:
            return
        if not grant.write:
            raise AgentRefusal(f"{what}: {grant.label} is a read-only token; writes need a write token")
        names = self._branches() | ({branch} if new else set())
        if grant.branches != "*" and not grant.may_name(branch, names):
            raise AgentRefusal(f"{what}: {grant.label} may write only branches matching {grant.branches!r}, "
                               f"not {branch!r}")

    @staticmethod
    def actor(grant: Grant | None) -> str | None:
        return grant.actor if grant is not None else None

    # -- reading
    def list_branches(self, grant: Grant | None) -> dict[str, Any]:
        repo = self.repo()
        current = repo.current_branch
        found = repo.branches.list()
        names = {b.name for b in found}
        shown = [b for b in found if grant is None or grant.branches == "*" or grant.may_name(b.name, names)]
        return {"current": current if any(b.name == current for b in shown) else None,
                "branches": [{"name": b.name, "commit": b.commit_id, "protected": b.protected} for b in shown]}

    def list_tables(self, grant: Grant | None, ref: str | None = None) -> dict[str, Any]:
        ref = _ref(ref)
        self.check_read(grant, ref)
        repo = self.repo()
        commit = repo.resolve(repo.default_ref(ref))
        tables = []
        for name in sorted(commit.tables):
            schema = repo.schema(name, commit.id)
            tables.append({"name": name, "primary_key": list(commit.tables[name].primary_key),
                           "columns": {f.name: str(f.type) for f in schema}})
        return {"ref": repo.default_ref(ref), "commit": commit.id, "tables": tables}

    def read_table(self, grant: Grant | None, table: str, ref: str | None = None, columns: list[str] | None = None,
                   where: str | None = None, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        from trimerge.lineage.tables.filters import check_filter, plan_filter

        table, ref, limit = _table_name(table), _ref(ref), _limit(limit)
        where = _text(where, "where", MAX_TEXT, required=False)
        if columns is not None:
            if not isinstance(columns, list) or len(columns) > MAX_ROWS:
                raise AgentRefusal(f"columns must be a list of at most {MAX_ROWS:,} column names")
            columns = [str(_text(c, "a column name")) for c in columns]
        self.check_read(grant, ref)
        repo = self.repo()
        commit = repo.resolve(repo.default_ref(ref))
        ds = repo.dataset(table, commit.id)
        if columns is not None:
            unknown = [c for c in columns if c not in ds.schema.names]
            if unknown:
                raise InvalidOperationError(f"table {table!r} has no column(s) {', '.join(map(repr, unknown))} "
                                            f"(columns: {', '.join(ds.schema.names)})")
        if where is not None:
            plan_filter(ds, check_filter(where, "where"), f"read {table}")
        try:  # one row past the limit says whether there were more, without counting them all
            data = ds.to_table(columns=columns, filter=where, limit=limit + 1)
        except (OSError, ValueError) as exc:
            better = translate(exc)
            if better is not None:
                raise better from None
            raise InvalidOperationError(f"cannot read {table}: {str(exc).splitlines()[0][:200]}") from None
        rows, truncated = _rows_answer(data, limit)
        return {"table": table, "ref": repo.default_ref(ref), "commit": commit.id, "columns": data.column_names,
                "rows": rows, "truncated": truncated}

    def diff(self, grant: Grant | None, a: str, b: str | None = None, tables: list[str] | None = None,
             limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        from trimerge.diff import diff, parse_range

        a_ref, b_ref, limit = _required_ref(a, "a"), _ref(b, "b"), _limit(limit)
        if tables is not None:
            if not isinstance(tables, list) or len(tables) > MAX_ROWS:
                raise AgentRefusal(f"tables must be a list of at most {MAX_ROWS:,} table names")
            tables = [_table_name(t) for t in tables]
        named = [a_ref, b_ref] if b_ref is not None else list(parse_range(a_ref)[:2])
        self.check_read(grant, *named)
        result = diff(a_ref, b_ref, repo=self.repo(), tables=tables, engine="local")
        out: dict[str, Any] = {"before": result.before.id, "after": result.after.id, "three_dot": result.three_dot,
                               "tables": {}, "truncated": False}
        left = limit
        for name, td in sorted(result.tables.items()):
            summary = td.summary()
            summary.pop("plan", None)  # how the diff ran: noise for an agent
            if td.changed and td.storage_status != "unchanged":
                rows, cut = _rows_answer(td.head(left + 1), left)
                summary["rows"] = rows
                out["truncated"] = out["truncated"] or cut
                left -= len(rows)
            out["tables"][name] = jsonable(summary)
        return out

    def sql(self, grant: Grant | None, query: str, ref: str | None = None, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        query = str(_text(query, "query", MAX_TEXT))
        ref, limit = _ref(ref), _limit(limit)
        if grant is not None and grant.branches != "*":  # a query may name any ref inside it ("t@REF")
            raise AgentRefusal(f"sql: {grant.label} may name only branches matching {grant.branches!r}, and a query "
                               "can name any ref; use read_table, or a token for '*'")
        self.check_read(grant, ref)
        table = self.repo().sql(query, ref=ref)
        rows, truncated = _rows_answer(table, limit)
        return {"columns": table.column_names, "rows": rows, "row_count": table.num_rows, "truncated": truncated}

    # -- writing
    def create_branch(self, grant: Grant | None, name: str, from_ref: str | None = None) -> dict[str, Any]:
        name = str(_text(name, "name"))
        from_ref = _ref(from_ref, "from_ref")
        self.check_write(grant, name, "create_branch", new=True)
        self.check_read(grant, from_ref)
        with self._write_lock:
            branch = self.repo().branches.create(name, from_ref)
        return {"branch": branch.name, "commit": branch.commit_id}

    def upsert_rows(self, grant: Grant | None, table: str, branch: str, rows: list[dict[str, Any]],
                    message: str | None = None) -> dict[str, Any]:
        table, branch = _table_name(table), str(_text(branch, "branch"))
        message = _text(message, "message", MAX_TEXT, required=False)
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise AgentRefusal("rows must be a non-empty list of objects (column name: value)")
        if len(rows) > MAX_WRITE_ROWS:
            raise AgentRefusal(f"{len(rows):,} rows in one write; the limit is {MAX_WRITE_ROWS:,} (send them in parts)")
        size = len(json.dumps(rows, default=str))
        if size > MAX_WRITE_CHARS:
            raise AgentRefusal(f"the rows are {size:,} characters of JSON; the limit is {MAX_WRITE_CHARS:,} per write "
                               "(send them in parts)")
        self.check_write(grant, branch, "upsert_rows")
        repo = self.repo()
        data = rows_table(rows, repo.schema(table, branch), table)
        with self._write_lock:
            commit = repo.upsert(table, data, branch=branch, actor=self.actor(grant), message=message)
        return _commit(commit, "upsert")

    def delete_rows(self, grant: Grant | None, table: str, branch: str, where: str,
                    message: str | None = None) -> dict[str, Any]:
        from trimerge.lineage.tables.filters import check_filter

        table, branch = _table_name(table), str(_text(branch, "branch"))
        where = check_filter(_text(where, "where", MAX_TEXT), "where")
        message = _text(message, "message", MAX_TEXT, required=False)
        self.check_write(grant, branch, "delete_rows")
        with self._write_lock:
            commit = self.repo().delete(table, where, branch=branch, actor=self.actor(grant), message=message)
        return _commit(commit, "delete")

    def merge(self, grant: Grant | None, source: str, into: str, message: str | None = None,
              strategy: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        from trimerge.merge import merge

        source, into = _required_ref(source, "source"), _required_ref(into, "into")
        message = _text(message, "message", MAX_TEXT, required=False)
        strategy = _text(strategy, "strategy", required=False)
        self.check_write(grant, into, "merge")
        self.check_read(grant, source)
        with self._write_lock:
            result = merge(source, into, repo=self.repo(), actor=self.actor(grant), message=message,
                           strategy=strategy, dry_run=bool(dry_run), max_conflicts=MAX_ROWS)  # type: ignore[arg-type]
        doc = result.to_json()
        doc.pop("plans", None)
        doc["conflicts"] = doc["conflicts"][:DEFAULT_ROWS]
        return jsonable(doc)

    def open_request(self, grant: Grant | None, source: str, into: str, title: str,
                     body: str | None = None) -> dict[str, Any]:
        source, into = _required_ref(source, "source"), _required_ref(into, "into")
        title = str(_text(title, "title"))
        body = _text(body, "body", MAX_TEXT, required=False)
        self.check_write(grant, into, "open_request")
        self.check_read(grant, source)
        with self._write_lock:
            request = self.repo().requests.create(source, into=into, title=title, body=body, actor=self.actor(grant))
        return jsonable(request.to_json())


def _commit(commit: Any, what: str) -> dict[str, Any]:
    if commit is None:
        return {"commit": None, "message": f"{what}: nothing to commit"}
    return {"commit": commit.id, "branch": commit.branch, "message": commit.message}


def rows_table(rows: list[dict[str, Any]], schema: "pa.Schema", table: str) -> "pa.Table":
    """JSON rows as an Arrow table of ``schema``'s types (the columns the rows name, in the table's
    order); text is cast where JSON has no type of its own (dates, timestamps, decimals)."""
    import pyarrow as pa

    named: set[str] = set()
    for row in rows:
        named.update(row)
    unknown = sorted(named - set(schema.names))
    if unknown:
        raise InvalidOperationError(f"table {table!r} has no column(s) {', '.join(map(repr, unknown[:20]))} "
                                    f"(columns: {', '.join(schema.names)})")
    arrays, fields = [], []
    for field in schema:
        if field.name not in named:
            continue
        values = [row.get(field.name) for row in rows]
        try:
            try:
                array = pa.array(values, type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                array = pa.array(values).cast(field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidOperationError(f"column {field.name!r} of {table!r} takes {field.type}: "
                                        f"{str(exc).splitlines()[0][:200]}") from None
        arrays.append(array)
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
