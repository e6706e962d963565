"""Vector and full-text search on one table version (any ref: branch, tag, old commit).

The dataset given is pinned to a commit's version of a table (and Lance branch): time travel and
object stores come for free, this module only reads ``ds``. Inputs are checked before Lance sees
them: Lance answers some bad ones silently (a NaN vector or ``fast_search`` without an index finds
nothing, a post-filter drops rows after the top k) and others abort the process (with a vector
index Lance pre-allocates ``k * refine_factor * 12`` bytes, and ``ef * 8``).

Vector search (pylance 14 behaviour, checked):

* Without a vector index on the column the search is exact (flat).
* With a PQ/SQ index, Lance's candidates are re-ranked by exact distance (``refine_factor``,
  default :data:`DEFAULT_REFINE_FACTOR` and at least :data:`MIN_RERANKED` candidates), so ``_distance`` is exact and recall high even with the
  coarse codes of trimerge's default IVF_PQ (5,000 clustered 32-d vectors, 2 sub-vectors: recall@10
  0.82 at refine 5, 0.997 at 10). ``refine_factor=None`` turns it off (approximate distances).
* Rows written after the index was built are scanned flat, so they are found at once.
* ``l2`` distances are squared Euclidean; rows whose vector is null are never returned.

Full-text search needs an INVERTED index on the column: Lance refuses a table without any, and on a
column without one it scores rows only when another column has one, so trimerge requires it.
"""

from __future__ import annotations

import contextlib
import math
from numbers import Integral, Real
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from trimerge.lineage.errors import InvalidOperationError, SchemaMismatchError, StorageError, lance_message
from trimerge.lineage.tables.filters import prepare_filter

#: Largest ``k``: beyond it a search is a mistake (and Lance's allocations grow with it).
MAX_K = 10_000_000
#: Exact re-ranking of ``k * refine_factor`` index candidates when the column has a vector index:
#: at least this factor, and at least :data:`MIN_RERANKED` candidates. PQ codes rank points of one
#: dense cluster poorly (1M clustered 128-d vectors, 16 sub-vectors: recall@10 0.42 re-ranking 100
#: candidates, 0.88 with 500, 1.0 with 1,000), and re-ranking 1,000 rows costs a few milliseconds.
DEFAULT_REFINE_FACTOR = 10
MIN_RERANKED = 1000
#: At most this many candidates are re-ranked (Lance allocates ~12 bytes each up front).
MAX_CANDIDATES = 100_000_000
MAX_TEXT_CHARS = 100_000
METRICS = ("l2", "cosine", "dot")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INDEX_CAP = 1_000_000  # nprobes / ef: beyond any real index, and ef is allocated up front


def _int_in(low: int, high: int):
    return lambda v: isinstance(v, Integral) and not isinstance(v, bool) and low <= v <= high


#: Options of a vector search: name -> (check, what a valid value is). Text search takes none.
VECTOR_OPTIONS = {
    "nprobes": (_int_in(1, _INDEX_CAP), f"an integer from 1 to {_INDEX_CAP:,} (IVF partitions to probe)"),
    "refine_factor": (lambda v: v is None or _int_in(1, 1000)(v),
                      "an integer from 1 to 1,000, or None for no exact re-ranking"),
    "ef": (_int_in(1, _INDEX_CAP), f"an integer from k to {_INDEX_CAP:,} (HNSW candidate list)"),
    "metric": (lambda v: isinstance(v, str) and v.lower() in METRICS, f"one of {', '.join(METRICS)}"),
    "use_index": (lambda v: isinstance(v, bool), "true or false (false: exact search even with an index)"),
}


def search(ds: Any, primary_key: Sequence[str], *, vector: Any = None, column: str | None = None,
           text: str | None = None, k: int = 10, where: str | None = None, columns: Sequence[str] | None = None,
           **options: Any) -> pa.Table:
    """The ``k`` rows of ``ds`` nearest to ``vector`` or best matching ``text``.

    Returns an Arrow table: the key columns, then ``columns`` (default none), then ``_distance``
    (vector search, ascending) or ``_score`` (full text, BM25, descending); ties are ordered by key.
    ``column`` defaults to the only vector column (vector search) or the only column with an
    INVERTED index (text). ``where`` is a SQL prefilter: the result is the top ``k`` among the
    matching rows. ``options`` (vector search only): ``nprobes``, ``refine_factor``, ``ef``,
    ``metric`` (with a vector index only the index's own metric), ``use_index``.
    Every bad input raises a :class:`~trimerge.lineage.errors.TrimergeError` with one clear line.
    """
    if (vector is None) == (text is None):
        raise InvalidOperationError("search: give exactly one of a vector or a text query"
                                    + (" (both were given)" if vector is not None else ""))
    k, keys = _check_k(k), list(primary_key)
    with _lance():
        schema, indices, rows = ds.schema, _indices(ds), max(1, ds.count_rows())
    extra = _check_columns(columns, schema, keys)
    if where is not None:
        where = prepare_filter(ds, where, "search where")
    if text is not None:
        if options:
            raise InvalidOperationError(f"search: full-text search takes no options (got "
                                        f"{', '.join(map(repr, options))}; options apply to vector search)")
        text = _check_text(text)
        col = _text_column(column, schema, indices)
        query: dict[str, Any] = {"full_text_query": {"query": text, "columns": [col]},
                                 "limit": min(k, rows)}
        score, ascending = "_score", False
    else:
        col = _vector_column(column, schema)
        q = _check_vector(vector, schema.field(col).type.list_size)
        nearest = _nearest(col, q, k, rows, indices, options)
        query, score, ascending = {"nearest": nearest}, "_distance", True
    # The score column is named explicitly: Lance warns (on stderr) when it is projected implicitly.
    with _lance():
        result = ds.to_table(columns=keys + extra + [score], filter=where, prefilter=True, **query)
    return _ordered(result, keys, score, ascending).slice(0, k)


@contextlib.contextmanager
def _lance():
    """Lance's own errors as typed one-line errors (they would otherwise escape raw)."""
    try:
        yield
    except OSError as exc:  # reading the manifest, indices or data files
        raise StorageError(f"search: cannot read the table: {lance_message(exc)}") from None
    except (ValueError, RuntimeError, TypeError, OverflowError) as exc:
        raise InvalidOperationError(f"search: Lance refused the query: {lance_message(exc)}") from None


def _check_k(k: Any) -> int:
    if not isinstance(k, Integral) or isinstance(k, bool):
        raise InvalidOperationError(f"search: k must be a positive integer, not {k!r}")
    if not 1 <= k <= MAX_K:
        raise InvalidOperationError(f"search: k must be from 1 to {MAX_K:,}, not {k}")
    return int(k)


def _check_columns(columns: Any, schema: pa.Schema, keys: list[str]) -> list[str]:
    """The extra output columns (key columns and repeats dropped, order kept)."""
    if columns is None:
        return []
    columns = [columns] if isinstance(columns, str) else columns
    if not isinstance(columns, (list, tuple)):
        raise InvalidOperationError(f"search: columns must be a list of column names, not {type(columns).__name__}")
    unknown = [c for c in columns if not isinstance(c, str) or c not in schema.names]
    if unknown:
        raise SchemaMismatchError(f"search: no column(s) {', '.join(map(repr, unknown))} "
                                  f"(columns: {', '.join(schema.names)})")
    return [c for i, c in enumerate(columns) if c not in keys and c not in columns[:i]]


def _is_vector(dtype: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(dtype) and dtype.list_size > 0 and pa.types.is_floating(dtype.value_type)


def _vector_column(column: Any, schema: pa.Schema) -> str:
    candidates = [f.name for f in schema if _is_vector(f.type)]
    if column is None:
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise SchemaMismatchError("search: the table has no vector column (fixed_size_list of floats)")
        raise InvalidOperationError(f"search: several vector columns ({', '.join(candidates)}); pick one with column=")
    _known(column, schema)
    dtype = schema.field(column).type
    if not _is_vector(dtype):
        raise SchemaMismatchError(f"search: column {column!r} is {dtype}, not a vector (fixed_size_list of floats); "
                                  f"vector columns: {', '.join(candidates) or 'none'}")
    return column


def _indices(ds: Any) -> list[tuple[str, str, list[str], dict]]:
    """(name, kind, columns, details) of each index: ``describe_indices`` (``list_indices`` is
    deprecated in pylance 14) carries the kind and, for vector indices, the metric."""
    out = []
    for desc in ds.describe_indices():
        kind = str(desc.type_url).rsplit(".", 1)[-1]  # VectorIndexDetails, InvertedIndexDetails, ...
        out.append((desc.name, kind, list(desc.field_names), dict(desc.details or {})))
    return out


def _text_column(column: Any, schema: pa.Schema, indices: list[tuple]) -> str:
    indexed = sorted({f[0] for _, kind, f, _ in indices if kind == "InvertedIndexDetails" and len(f) == 1
                      and f[0] in schema.names})
    if column is None:
        if len(indexed) == 1:
            return indexed[0]
        if not indexed:
            raise InvalidOperationError(f"search: full-text search needs an INVERTED index and no column has one; "
                                        f"{_index_hint('COLUMN')}")
        raise InvalidOperationError(f"search: several columns have an INVERTED index ({', '.join(indexed)}); "
                                    "pick one with column=")
    _known(column, schema)
    dtype = schema.field(column).type
    if not (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)):
        raise SchemaMismatchError(f"search: column {column!r} is {dtype}, not text (a string column)")
    if column not in indexed:
        raise InvalidOperationError(f"search: column {column!r} has no INVERTED index at this version; full-text "
                                    f"search needs one: {_index_hint(column)}")
    return column


def _index_hint(column: str) -> str:  # the table's name is not known here (only its dataset): TABLE
    return (f"create it with repo.create_index(TABLE, {column!r}, 'INVERTED') or "
            f"'trimerge index create TABLE {column} --kind INVERTED'")


def _known(column: Any, schema: pa.Schema) -> None:
    # Exact names only: Lance would match a vector column case-insensitively.
    if not isinstance(column, str) or column not in schema.names:
        raise SchemaMismatchError(f"search: no column {column!r} (columns: {', '.join(schema.names)})")


def _check_text(text: Any) -> str:
    if not isinstance(text, str):
        raise InvalidOperationError(f"search: text must be a string, not {type(text).__name__}")
    if not text.strip():
        raise InvalidOperationError("search: text is empty")  # Lance would silently find nothing
    if "\x00" in text:
        raise InvalidOperationError("search: text holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOperationError("search: text is not valid Unicode") from None
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidOperationError(f"search: text is {len(text):,} characters long; the limit is {MAX_TEXT_CHARS:,}")
    return text


def _check_vector(vector: Any, dim: int) -> np.ndarray:
    """``vector`` as float32, refused unless it is one flat list of ``dim`` finite numbers.

    Lance would take a nested list as a batch of queries, bools and NaN silently (NaN finds
    nothing), and casts to float32, so values beyond float32 range become infinite distances."""
    if isinstance(vector, (str, bytes, dict)) or not hasattr(vector, "__len__"):
        raise InvalidOperationError(f"search: vector must be a list of numbers, not {type(vector).__name__}")
    if isinstance(vector, (pa.Array, pa.ChunkedArray)):
        if not (pa.types.is_integer(vector.type) or pa.types.is_floating(vector.type)) or vector.null_count:
            raise InvalidOperationError(f"search: vector must hold numbers only, not {vector.type}"
                                        + (" with nulls" if vector.null_count else ""))
        values = vector.to_numpy(zero_copy_only=False).astype(np.float64)
    elif isinstance(vector, np.ndarray):
        if vector.ndim != 1 or vector.dtype.kind not in "iuf":
            raise InvalidOperationError(f"search: vector must be one flat array of numbers, not {vector.ndim}-d "
                                        f"{vector.dtype}")
        values = vector.astype(np.float64)
    else:
        items = list(vector)
        if any(isinstance(v, (list, tuple, np.ndarray, pa.Array)) for v in items):
            raise InvalidOperationError("search: vector must be one flat list of numbers, not a list of lists")
        bad = [v for v in items if isinstance(v, bool) or not isinstance(v, Real)]
        if bad:
            raise InvalidOperationError(f"search: vector must hold numbers only, not {bad[0]!r}")
        values = np.array([float(v) for v in items], dtype=np.float64)
    if len(values) != dim:
        raise SchemaMismatchError(f"search: vector has {len(values)} values; the column holds vectors of {dim}")
    if not np.all(np.isfinite(values)):
        raise InvalidOperationError("search: vector holds NaN or infinite values")
    if np.any(np.abs(values) > _FLOAT32_MAX):
        raise InvalidOperationError("search: vector holds values beyond float32 range")
    return values.astype(np.float32)


def _nearest(col: str, q: np.ndarray, k: int, rows: int, indices: list[tuple], options: dict) -> dict[str, Any]:
    """Lance's ``nearest`` argument, options checked and re-ranking sized."""
    for name, value in options.items():
        if name not in VECTOR_OPTIONS:
            raise InvalidOperationError(f"search: unknown option {name!r} (options: {', '.join(VECTOR_OPTIONS)})")
        check, expected = VECTOR_OPTIONS[name]
        if not check(value):
            raise InvalidOperationError(f"search: option {name}={value!r} must be {expected}")
    use_index = options.get("use_index", True)
    index = next((i for i in indices if i[1] == "VectorIndexDetails" and i[2] == [col]), None)
    k_lance = min(k, rows)  # Lance allocates for k up front: never ask for more rows than exist
    ef = options.get("ef")
    if ef is not None and ef < k_lance:
        raise InvalidOperationError(f"search: option ef={ef} must be at least k={k_lance}")
    nearest: dict[str, Any] = {"column": col, "q": q, "k": k_lance, "use_index": use_index}
    if "metric" in options:
        metric = options["metric"].lower()
        index_metric = str(index[3].get("metric_type", "")).lower() if index is not None and use_index else ""
        if index_metric and index_metric != metric:
            # Lance would fall back to a brute-force scan with a warning; make that choice explicit.
            raise InvalidOperationError(
                f"search: the index {index[0]!r} on {col!r} uses metric {index_metric}; search with "
                f"metric={index_metric!r}, or pass use_index=False for an exact {metric} search")
        nearest["metric"] = metric
    nearest.update({name: int(options[name]) for name in ("nprobes", "ef") if name in options})
    default = max(DEFAULT_REFINE_FACTOR, math.ceil(MIN_RERANKED / k_lance))
    refine = options.get("refine_factor", default if index is not None and use_index
                         and index[3].get("compression") else None)
    if refine is not None:
        # Re-ranking more candidates than rows changes nothing; bound what Lance allocates.
        refine = max(1, min(int(refine), math.ceil(rows / k_lance), MAX_CANDIDATES // k_lance))
        hnsw = index is not None and use_index and "hnsw" in index[3]
        if hnsw and ef is not None and ef < k_lance * refine:
            # Lance's HNSW wants ef >= k * refine_factor: a given ef caps the default re-ranking.
            if "refine_factor" in options:
                raise InvalidOperationError(f"search: option ef={ef} must be at least k * refine_factor = "
                                            f"{k_lance * refine} on the HNSW index {index[0]!r}")
            refine = ef // k_lance
        nearest["refine_factor"] = refine
    return nearest


def _ordered(result: pa.Table, keys: list[str], score: str, ascending: bool) -> pa.Table:
    """Best first; equal scores ordered by key so the answer does not depend on fragment layout."""
    order = [(score, "ascending" if ascending else "descending")] + [(c, "ascending") for c in keys]
    try:
        return result.sort_by(order)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return result.sort_by(order[:1])
