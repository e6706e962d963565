"""``query_table``: a LanceDB query run by the namespace, answered as an Arrow IPC file.

LanceDB runs a query itself (it opens the dataset ``describe_table`` locates) unless the connection
pushes it down (``lancedb.connect_namespace(..., namespace_client_pushdown_operations=["QueryTable"])``);
then it sends the query here. The query runs with pylance on exactly the table version the request's
ref pins (the caller resolves it), so it reads what a local read at that ref reads. Scans with a filter,
columns, a limit and an offset, and vector searches, are answered; a full-text query is refused.
"""

from __future__ import annotations

from typing import Any, Mapping

import lance_namespace as ln
import pyarrow as pa

from trimerge.lineage.errors import TrimergeError, lance_message
from trimerge.lineage.tables.filters import check_filter, plan_filter

__all__ = ["ARROW_FILE", "run_query"]

#: The media type of an answer (Arrow IPC file format, what LanceDB's clients read back).
ARROW_FILE = "application/vnd.apache.arrow.file"

# LanceDB asks for k = i32::MAX when a scan has no limit.
_NO_LIMIT = 2**31 - 1
# Rows per batch of the answer: LanceDB hands each batch of an answer to Python on its own (a round
# trip through its event loop), so a few large batches read back faster than pylance's 8192-row ones.
_BATCH = 1 << 17


def _get(request: Any, name: str) -> Any:
    if request is None:
        return None
    if isinstance(request, Mapping):
        return request.get(name)
    return getattr(request, name, None)


def _columns(request: Any) -> Any:
    columns = _get(request, "columns")
    if columns is None:
        return None
    names, aliases = _get(columns, "column_names"), _get(columns, "column_aliases")
    if names and aliases:
        raise ln.InvalidInputError("columns: give column_names or column_aliases, not both")
    if aliases:
        return {str(k): str(v) for k, v in dict(aliases).items()}
    return [str(c) for c in names] if names is not None else None


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
    k, offset = _get(request, "k"), _get(request, "offset")
    limit = None if k is None or k >= _NO_LIMIT else int(k)
    if limit is not None and limit < 0 or offset is not None and offset < 0:
        raise ln.InvalidInputError(f"query_table on {what}: k and offset must not be negative")
    where = _get(request, "filter")
    try:
        if where is not None:
            where = check_filter(where, "filter")
            plan_filter(dataset, where, f"query {what}")
        nearest = _nearest(dataset, request, limit, what)
        options: dict[str, Any] = {"columns": _columns(request), "filter": where, "batch_size": _BATCH,
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
