"""``query_table``: a LanceDB query run by the namespace, answered as an Arrow IPC file.

LanceDB runs a query itself (it opens the dataset ``describe_table`` locates) unless the connection
pushes it down (``lancedb.connect_namespace(..., namespace_client_pushdown_operations=["QueryTable"])``);
then it sends the query here. The query runs with pylance on exactly the table version the request's
ref pins (the caller resolves it), so it reads what a local read at that ref reads. Scans with a filter,
columns, a limit and an offset, and vector searches, are answered; a full-text query is refused.

A query is client input that Lance parses and plans, so every expression in it — the ``filter`` and
each ``column_aliases`` value (a projection) — passes the filter guard
(:func:`~trimerge.lineage.tables.filters.check_expressions`: one SQL expression each, bounded in
nesting, depth and size, alone and together) and is planned whole before anything runs; output
and column names are plain text of at most :data:`MAX_NAME` characters, at most :data:`MAX_COLUMNS`
of them; numbers Lance holds in 32 or 64 bits are bounded so.
"""

from __future__ import annotations

from typing import Any, Mapping

import lance_namespace as ln
import pyarrow as pa

from trimerge.lineage.errors import TrimergeError, lance_message
from trimerge.lineage.tables.filters import check_expressions, plan_filter, plan_projection

__all__ = ["ARROW_FILE", "MAX_COLUMNS", "MAX_NAME", "run_query"]

#: The media type of an answer (Arrow IPC file format, what LanceDB's clients read back).
ARROW_FILE = "application/vnd.apache.arrow.file"

# LanceDB asks for k = i32::MAX when a scan has no limit.
_NO_LIMIT = 2**31 - 1
# Rows per batch of the answer: LanceDB hands each batch of an answer to Python on its own (a round
# trip through its event loop), so a few large batches read back faster than pylance's 8192-row ones.
_BATCH = 1 << 17
#: Most columns (names or aliased expressions) one query may ask for.
MAX_COLUMNS = 1024
#: Longest column or output name a query may send.
MAX_NAME = 1024
# Search knobs Lance holds in 32 bits (nprobes, ef, refine factor); an offset in 64 (signed).
_KNOBS = ("ef", "refine_factor", "nprobes", "minimum_nprobes", "maximum_nprobes")
_MAX_KNOB = 2**31 - 1
_MAX_OFFSET = 2**63 - 1


def _get(request: Any, name: str) -> Any:
    if request is None:
        return None
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ln.InvalidInputError(f"{what}: a column name must be text, not {type(value).__name__}")
    if not value or len(value) > MAX_NAME or not value.isprintable():
        raise ln.InvalidInputError(f"{what}: a column name must be 1 to {MAX_NAME} printable characters "
                                   f"(got {len(value)} characters{'' if value.isprintable() else ', not all printable'})")
    return value


def _columns(request: Any) -> tuple[list[str] | None, dict[str, Any] | None]:
    """(column names, {output name: expression}) the query asks for; names checked, expressions not yet."""
    columns = _get(request, "columns")
    if columns is None:
        return None, None
    names, aliases = _get(columns, "column_names"), _get(columns, "column_aliases")
    if names and aliases:
        raise ln.InvalidInputError("columns: give column_names or column_aliases, not both")
    given = aliases if aliases else names
    if given is not None and len(given) > MAX_COLUMNS:
        raise ln.InvalidInputError(f"columns: {len(given):,} columns asked for (at most {MAX_COLUMNS:,})")
    if aliases:
        return None, {_name(k, "columns.column_aliases"): v for k, v in dict(aliases).items()}
    return ([_name(c, "columns.column_names") for c in names] if names is not None else None), None


def _check_numbers(request: Any, what: str) -> None:
    k, offset = _get(request, "k"), _get(request, "offset")
    if k is not None and k < 0 or offset is not None and offset < 0:
        raise ln.InvalidInputError(f"query_table on {what}: k and offset must not be negative")
    if offset is not None and offset > _MAX_OFFSET:
        raise ln.InvalidInputError(f"query_table on {what}: offset {offset} is over {_MAX_OFFSET}")
    for name in _KNOBS:
        value = _get(request, name)
        if value is not None and not 0 <= value <= _MAX_KNOB:
            raise ln.InvalidInputError(f"query_table on {what}: {name} must be 0 to {_MAX_KNOB}, not {value}")


def _vector_column(dataset: Any, what: str) -> str:
    """The table's one vector column (a fixed-size list of floats), for a query that names none."""
    found = [f.name for f in dataset.schema if pa.types.is_fixed_size_list(f.type)
             and pa.types.is_floating(f.type.value_type)]
    if len(found) != 1:
        raise ln.InvalidInputError(f"query_table on {what}: name the vector column (vector_column): the table has "
                                   f"{len(found)} ({', '.join(found) or 'none'})")
    return found[0]


def _nearest(dataset: Any, request: Any, k: int | None, what: str) -> dict[str, Any] | None:
    vector = _get(request, "vector")
    single, multi = _get(vector, "single_vector"), _get(vector, "multi_vector")
    if multi:
        raise ln.UnsupportedOperationError("query_table: a multi-vector query is not run on the server; run it "
                                           "locally (without QueryTable in namespace_client_pushdown_operations)")
    if not single:
        return None
    nearest: dict[str, Any] = {"q": [float(x) for x in single], "k": k if k is not None else 10}
    for key, name in (("column", "vector_column"), ("metric", "distance_type"), ("refine_factor", "refine_factor"),
                      ("ef", "ef"), ("minimum_nprobes", "minimum_nprobes"), ("maximum_nprobes", "maximum_nprobes")):
        value = _get(request, name)
        if value is not None:
            nearest[key] = value
    if "column" in nearest:
        _name(nearest["column"], "vector_column")
    nearest.setdefault("column", _vector_column(dataset, what))
    if _get(request, "nprobes") is not None:
        nearest["minimum_nprobes"] = _get(request, "nprobes")
    if _get(request, "bypass_vector_index"):
        nearest["use_index"] = False
    lower, upper = _get(request, "lower_bound"), _get(request, "upper_bound")
    if lower is not None or upper is not None:
        nearest["distance_range"] = (lower, upper)
    return nearest


def run_query(dataset: Any, request: Any, what: str) -> bytes:
    """Run ``request`` (a ``QueryTableRequest``, or the dict Lance's Rust bridge passes) on ``dataset``
    (the table's version at the ref) and give the result as an Arrow IPC file."""
    if _get(request, "full_text_query") is not None:
        raise ln.UnsupportedOperationError(f"query_table on {what}: a full-text query is not run on the server; "
                                           f"run it locally (without QueryTable in the pushdown operations)")
    _check_numbers(request, what)
    k, offset = _get(request, "k"), _get(request, "offset")
    limit = None if k is None or k >= _NO_LIMIT else int(k)
    where = _get(request, "filter")
    names, aliases = _columns(request)
    try:
        expressions = [("filter", where, "filter")] if where is not None else []
        expressions += [(f"columns.column_aliases[{name[:100]!r}]", text, "projection")
                        for name, text in (aliases or {}).items()]
        check_expressions(expressions)  # every expression before Lance parses any of them
        if where is not None:
            plan_filter(dataset, where, f"query {what}")
        columns: Any = plan_projection(dataset, aliases, f"query {what}: column alias") if aliases else names
        nearest = _nearest(dataset, request, limit, what)
        options: dict[str, Any] = {"columns": columns, "filter": where, "batch_size": _BATCH,
                                   "with_row_id": bool(_get(request, "with_row_id"))}
        if nearest is not None:
            options.update(nearest=nearest, prefilter=bool(_get(request, "prefilter")),
                           fast_search=bool(_get(request, "fast_search")))
            if offset:
                options.update(limit=nearest["k"], offset=offset)
        else:
            options.update(limit=limit, offset=offset)
        table = dataset.to_table(**options)
    except TrimergeError as exc:
        raise ln.InvalidInputError(str(exc)) from None
    except (OSError, ValueError, RuntimeError, TypeError, KeyError) as exc:
        raise ln.InvalidInputError(f"query {what}: {lance_message(exc)[:300]}") from None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
