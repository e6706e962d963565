"""The Lance REST Namespace routes ``trimerge serve`` answers, and how a request becomes the
namespace's request model.

Routes are ``/v1/<object>/<id>/<action>`` (the spec's ``rest.yaml``); ``<id>`` is the object's id
joined by the ``delimiter`` query parameter (default ``$`` in pylance's and LanceDB's clients), the
root namespace being the delimiter alone. A request's JSON body carries the id again, as a list: that
one is used (a ref may contain the delimiter), after checking it agrees with the path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote

import lance_namespace as ln

from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.history.names import validate_table_name

__all__ = ["MAX_ID_PART", "Op", "build_request", "find_op", "spec_method", "split_path"]

#: Longest ref expression or table name part of an id a client may send.
MAX_ID_PART = 1024


@dataclass(frozen=True)
class Op:
    """One operation: the namespace method answering it, its request model, what it touches."""

    method: str
    model: Any = None
    write: bool = False
    table: bool = False  # the id names a table ([TABLE] or [REF, TABLE]), else a namespace ([] or [REF])


_READ = {
    ("namespace", "list"): Op("list_namespaces", ln.ListNamespacesRequest),
    ("namespace", "describe"): Op("describe_namespace", ln.DescribeNamespaceRequest),
    ("namespace", "exists"): Op("namespace_exists", ln.NamespaceExistsRequest),
    ("namespace", "table/list"): Op("list_tables", ln.ListTablesRequest),
    ("table", "describe"): Op("describe_table", ln.DescribeTableRequest, table=True),
    ("table", "exists"): Op("table_exists", ln.TableExistsRequest, table=True),
    ("table", "count_rows"): Op("count_table_rows", ln.CountTableRowsRequest, table=True),
    ("table", "query"): Op("query_table", ln.QueryTableRequest, table=True),  # answered as an Arrow IPC file
    ("table", "version/list"): Op("list_table_versions", ln.ListTableVersionsRequest, table=True),
    ("table", "version/describe"): Op("describe_table_version", ln.DescribeTableVersionRequest, table=True),
    ("table", "version/create"): Op("create_table_version", ln.CreateTableVersionRequest, write=True, table=True),
}

# The spec's write operations: the namespace refuses each (a trimerge write is a multi-table commit
# on a branch); they are still routed so the client hears the namespace's reason, not "not found".
_REFUSED = {
    ("namespace", "create"): "create_namespace", ("namespace", "drop"): "drop_namespace",
    ("table", "create"): "create_table", ("table", "declare"): "declare_table", ("table", "drop"): "drop_table",
    ("table", "register"): "register_table", ("table", "deregister"): "deregister_table",
    ("table", "insert"): "insert_into_table", ("table", "merge_insert"): "merge_insert_into_table",
    ("table", "update"): "update_table", ("table", "delete"): "delete_from_table",
    ("table", "create_index"): "create_table_index", ("table", "create_scalar_index"): "create_table_scalar_index",
    ("table", "index/*/drop"): "drop_table_index", ("table", "add_columns"): "alter_table_add_columns",
    ("table", "alter_columns"): "alter_table_alter_columns", ("table", "drop_columns"): "alter_table_drop_columns",
    ("table", "backfill_column"): "alter_table_backfill_columns", ("table", "rename"): "rename_table",
    ("table", "restore"): "restore_table", ("table", "tags/create"): "create_table_tag",
    ("table", "tags/update"): "update_table_tag", ("table", "tags/delete"): "delete_table_tag",
    ("table", "branches/create"): "create_table_branch", ("table", "branches/delete"): "delete_table_branch",
    ("table", "schema_metadata/update"): "update_table_schema_metadata",
    ("table", "update_field_metadata"): "update_field_metadata", ("table", "version/delete"):
    "batch_delete_table_versions", ("table", "batch-commit"): "batch_commit_tables",
    ("table", "version/batch-create"): "batch_create_table_versions", ("transaction", "alter"): "alter_transaction",
    ("materialized_view", "create"): "create_materialized_view",
    ("materialized_view", "refresh"): "refresh_materialized_view",
}
# The spec's read operations trimerge does not serve (answered UnsupportedOperation), listed so
# that every route of the spec has its method.
_UNSERVED = {("table", ""), ("table", "stats"), ("table", "explain_plan"), ("table", "analyze_plan"),
             ("table", "index/list"), ("table", "index/*/stats"), ("table", "tags/list"), ("table", "tags/version"),
             ("table", "branches/list"), ("transaction", "describe")}
# The spec's GET routes (their request is the path and query); every other route of it is POST.
_GET = {("namespace", "list"), ("namespace", "table/list"), ("table", "")}
_NO_ID = {("table", "batch-commit"), ("table", "version/batch-create"), ("table", "")}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def split_path(raw_path: bytes) -> tuple[str, str | None, str] | None:
    """(object, id as sent, action) of ``/v1/<object>/<id>/<action>``, or None for another path.
    From the raw path: a ``%2F`` inside the id (a branch ``team/x``) is not a path separator."""
    try:
        text = raw_path.decode("ascii")
    except UnicodeDecodeError:
        return None
    parts = text.split("/")
    if parts == ["", "v1", "table"]:  # ListAllTables: the one route without an action
        return "table", None, ""
    if len(parts) < 4 or parts[0] != "" or parts[1] != "v1":
        return None
    kind, rest = unquote(parts[2]), [unquote(p) for p in parts[3:]]
    if (kind, "/".join(rest)) in _NO_ID:
        return kind, None, "/".join(rest)
    if len(rest) < 2:
        return None
    action = "/".join(rest[1:])
    if kind == "table" and len(rest) == 4 and rest[1] == "index":
        action = f"index/*/{rest[3]}"
    return kind, rest[0], action


def spec_method(kind: str, action: str) -> str | None:
    """The HTTP method the spec gives the route ``(kind, action)``, or None for a path not in the spec."""
    key = (kind, action)
    if key in _READ or key in _REFUSED or key in _UNSERVED:
        return "GET" if key in _GET else "POST"
    return None


def find_op(kind: str, action: str) -> Op | None:
    op = _READ.get((kind, action))
    if op is not None:
        return op
    refused = _REFUSED.get((kind, action))
    return Op(refused, write=True) if refused else None


def _check_part(part: Any, what: str) -> str:
    if not isinstance(part, str):
        raise ln.InvalidInputError(f"{what}: an id part must be text, not {type(part).__name__}")
    if not part:
        raise ln.InvalidInputError(f"{what}: an id part is empty")
    if len(part) > MAX_ID_PART:
        raise ln.InvalidInputError(f"{what}: an id part of {len(part)} characters (at most {MAX_ID_PART})")
    if _CONTROL.search(part):
        raise ln.InvalidInputError(f"{what}: an id part contains a control character (NUL, newline, ...)")
    return part


def check_id(ident: list[Any], op: Op) -> list[str]:
    """Refuse what no ref or table is: empty or huge parts, control characters, path-like table names."""
    parts = [_check_part(p, "id") for p in ident]
    if op.table:
        if not parts:
            raise ln.InvalidInputError("a table request needs an id: [TABLE] or [REF, TABLE]")
        try:
            validate_table_name(parts[-1])
        except TrimergeError as exc:
            raise ln.InvalidInputError(f"table id {parts!r}: {exc}") from None
    if len(parts) > (2 if op.table else 1):
        raise (ln.TableNotFoundError if op.table else ln.NamespaceNotFoundError)(
            f"id {parts!r}: a trimerge namespace has one level of child namespaces, one per ref: "
            f"{'[TABLE] or [REF, TABLE]' if op.table else '[] or [REF]'}")
    return parts


def _typed(model: Any, key: str, value: str) -> Any:
    """A query parameter as the model's field type wants it (the generated models are strict)."""
    field = model.model_fields.get(key)
    kind = str(field.annotation) if field is not None else ""
    if "bool" in kind:
        if value.lower() not in ("true", "false"):
            raise ln.InvalidInputError(f"query parameter {key}={value!r}: expected true or false")
        return value.lower() == "true"
    if "int" in kind:
        if not value.isdigit() or len(value) > 18:
            raise ln.InvalidInputError(f"query parameter {key}={value!r}: expected a non-negative integer")
        return int(value)
    return value


def build_request(op: Op, path_id: str | None, query: Mapping[str, str], body: Any) -> tuple[Any, list[str]]:
    """(the request model, the checked id) of one HTTP request."""
    delimiter = query.get("delimiter") or "$"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ln.InvalidInputError(f"the request body must be a JSON object, not {type(body).__name__}")
    fields: dict[str, Any] = {k: _typed(op.model, k, v) for k, v in query.items() if k != "delimiter"}
    fields.update(body)
    if path_id is None or path_id == delimiter:
        from_path: list[str] = []
    else:
        from_path = path_id.split(delimiter)
    ident = fields.get("id")
    if ident is None:
        ident = check_id(from_path, op)
    elif not isinstance(ident, list):
        raise ln.InvalidInputError(f"id must be a list of strings, not {type(ident).__name__}")
    else:
        ident = check_id(ident, op)
        if path_id is not None and ident != from_path and delimiter.join(ident) != path_id:
            raise ln.InvalidInputError(f"the id in the path and in the body differ ({delimiter.join(ident)!r} in "
                                       f"the body)")
    fields["id"] = ident
    try:
        request = op.model.from_dict(fields)
    except ValueError as exc:  # pydantic's ValidationError: the first problem, on one line
        errors: list[dict[str, Any]] = list(getattr(exc, "errors", lambda: [])())
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ln.InvalidInputError(f"malformed {op.method} request: {where}: {first.get('msg')}") from None
    return request, ident
