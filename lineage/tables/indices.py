"""Lance indices as versioned table state.

An index lives in the Lance manifest of a table version, so a commit that names the version names
its indices: time travel, lazy forks and merges carry them like rows. This module checks an index
definition against a table before any effect (:func:`checked_spec`), builds and drops indices on a
writable dataset, keeps them fresh after writes (:func:`stale`), and lists them
(:func:`list_indices`). The definition a user gave (kind and parameters) is recorded in the
commit's :class:`~trimerge.lineage.commit.TableVersion` (``index_params``), since Lance keeps only
the trained result; Lance's manifest stays the truth about which indices exist.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, cast

import pyarrow as pa

from trimerge.lineage.errors import AlreadyExistsError, InvalidOperationError, NotFoundError, SchemaMismatchError

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.commit import TableVersion

VECTOR_KINDS = ("IVF_PQ", "IVF_HNSW_SQ", "IVF_FLAT")
SCALAR_KINDS = ("BTREE", "BITMAP", "LABEL_LIST")
TEXT_KINDS = ("INVERTED",)
KINDS = VECTOR_KINDS + SCALAR_KINDS + TEXT_KINDS
#: Lance's own type names (``list_indices()["type"]``) for the kinds above.
_FROM_LANCE = {"BTree": "BTREE", "Bitmap": "BITMAP", "LabelList": "LABEL_LIST", "Inverted": "INVERTED"}
#: The index trimerge keeps on a table's first key column (see trimerge.lineage.tables.keyed).
KEY_INDEX = "trimerge_key_idx"
#: Default share of a table's rows that may sit outside an index before a write refreshes it.
DEFAULT_REFRESH_THRESHOLD = 0.10
METRICS = ("l2", "cosine", "dot", "hamming")
#: ``progress(table, event)``, as diff's and merge's: ``start``, Lance's build stages as they begin
#: (``train_ivf``, ``shuffle``, ``load_data``…: they vary with the index kind and Lance's version), ``done``.
Progress = Callable[[str, str], None]


def lance_indices(ds: "lance.LanceDataset") -> list[dict[str, Any]]:
    """Lance's index list (name, type, fields, uuid, fragment_ids, base_id). pylance 14 deprecates
    ``list_indices`` for ``describe_indices``, which groups segments differently; one place to change."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cast("list[dict[str, Any]]", ds.list_indices())  # pylance: a list of TypedDicts


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and value.lower() in choices


def _boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


_IVF = {"num_partitions": (_positive_int, "a positive integer"),
        "metric": (_one_of(*METRICS), f"one of {', '.join(METRICS)}"),
        "sample_rate": (_positive_int, "a positive integer"),
        "max_iters": (_positive_int, "a positive integer")}
#: The parameters each kind takes: name -> (check, what a valid value is).
PARAMS: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "IVF_PQ": {**_IVF, "num_sub_vectors": (_positive_int, "a positive integer dividing the dimension"),
               "num_bits": (lambda v: v in (4, 8) and not isinstance(v, bool), "4 or 8")},
    "IVF_HNSW_SQ": {**_IVF, "m": (_positive_int, "a positive integer"),
                    "ef_construction": (_positive_int, "a positive integer")},
    "IVF_FLAT": dict(_IVF),
    "BTREE": {}, "BITMAP": {}, "LABEL_LIST": {},
    "INVERTED": {"with_position": (_boolean, "true or false"), "base_tokenizer": (_one_of("simple", "whitespace", "raw"),
                                                                                  "simple, whitespace or raw"),
                 "language": (_text, "a language name, e.g. English"),
                 "max_token_length": (_positive_int, "a positive integer"), "lower_case": (_boolean, "true or false"),
                 "stem": (_boolean, "true or false"), "remove_stop_words": (_boolean, "true or false"),
                 "ascii_folding": (_boolean, "true or false")},
}


@dataclass(frozen=True)
class IndexSpec:
    """A checked index definition: what :func:`build` creates."""

    name: str
    column: str
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    replace: bool = False


@dataclass(frozen=True)
class IndexInfo:
    """One index of a table version: its definition and how many live rows it covers."""

    name: str
    columns: tuple[str, ...]
    kind: str
    params: Mapping[str, Any]
    num_indexed_rows: int
    num_unindexed_rows: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "columns": list(self.columns), "kind": self.kind, "params": dict(self.params),
                "num_indexed_rows": self.num_indexed_rows, "num_unindexed_rows": self.num_unindexed_rows}

    @property
    def definition(self) -> tuple:
        """What makes two indices "the same" in a merge: columns, kind and the given parameters."""
        return definition(self.columns, self.kind, self.params)


def definition(columns: tuple[str, ...], kind: str, params: Mapping[str, Any]) -> tuple:
    return (tuple(columns), kind, canonical(params))


def canonical(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def kind_of(lance_type: str) -> str:
    """A Lance index type name as the kind users pass (``BTree`` -> ``BTREE``)."""
    return _FROM_LANCE.get(lance_type, lance_type.upper())


def _column_fits(kind: str, dtype: pa.DataType) -> bool:
    if kind in VECTOR_KINDS:
        return pa.types.is_fixed_size_list(dtype) and dtype.list_size > 0 and (
            pa.types.is_floating(dtype.value_type) or pa.types.is_uint8(dtype.value_type))
    if kind == "LABEL_LIST":
        return (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) and not pa.types.is_nested(dtype.value_type)
    if kind == "INVERTED":
        return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
    return not pa.types.is_nested(dtype) and not pa.types.is_null(dtype) and not pa.types.is_dictionary(dtype)


_TYPE_HINT = {"IVF_PQ": "a vector (fixed_size_list of floats)", "IVF_HNSW_SQ": "a vector (fixed_size_list of floats)",
              "IVF_FLAT": "a vector (fixed_size_list of floats)", "LABEL_LIST": "a list of scalars",
              "INVERTED": "text (string)", "BTREE": "a scalar", "BITMAP": "a scalar"}


def checked_spec(ds: "lance.LanceDataset", table: str, column: Any, kind: Any, *, name: Any = None,
                 replace: bool = False, params: Mapping[str, Any] | None = None) -> IndexSpec:
    """Check an index definition against ``ds`` (reads only the schema and the index list) and
    return it with Lance's required parameters filled in. Every problem is one clear line."""
    what = f"create index on {table}"
    if not isinstance(kind, str) or kind.upper() not in KINDS:
        raise InvalidOperationError(f"{what}: unknown index kind {kind!r} (kinds: {', '.join(KINDS)})")
    kind = kind.upper()
    if not isinstance(column, str) or column not in ds.schema.names:
        raise SchemaMismatchError(f"{what}: no column {column!r} (columns: {', '.join(ds.schema.names)})")
    dtype = ds.schema.field(column).type
    if not _column_fits(kind, dtype):
        raise SchemaMismatchError(f"{what}: the {kind} index needs {_TYPE_HINT[kind]}; column {column!r} is {dtype}")
    if name is None:
        name = f"{column}_idx"
    if not isinstance(name, str) or not name or not name.isprintable() or len(name) > 200:
        raise InvalidOperationError(f"{what}: index name must be non-empty printable text, not {name!r}")
    if not isinstance(replace, bool):
        raise InvalidOperationError(f"{what}: replace must be true or false, not {replace!r}")
    existing = {i["name"]: i for i in lance_indices(ds)}
    if name in existing and not replace:
        raise AlreadyExistsError(f"{what}: an index named {name!r} exists already (pass replace=True to rebuild it)")
    for other in existing.values():
        if other["name"] != name and other["fields"] == [column] and kind_of(other["type"]) == kind and not replace:
            raise AlreadyExistsError(f"{what}: column {column!r} has an index of kind {kind} already ({other['name']!r})")
    given = dict(params or {})
    allowed = PARAMS[kind]
    for key, value in given.items():
        if key not in allowed:
            hint = f"parameters of {kind}: {', '.join(sorted(allowed))}" if allowed else f"{kind} takes no parameters"
            raise InvalidOperationError(f"{what}: unknown parameter {key!r} ({hint})")
        check, expected = allowed[key]
        if not check(value):
            raise InvalidOperationError(f"{what}: parameter {key}={value!r} must be {expected}")
    if "metric" in given:
        given["metric"] = given["metric"].lower()
        if given["metric"] == "hamming" and not pa.types.is_uint8(dtype.value_type):
            raise InvalidOperationError(f"{what}: the hamming metric needs a vector of uint8")
    if kind in VECTOR_KINDS and pa.types.is_uint8(dtype.value_type) and given.get("metric") != "hamming":
        raise InvalidOperationError(f"{what}: a uint8 vector column needs metric='hamming'")
    if kind == "IVF_PQ" and "num_sub_vectors" in given and dtype.list_size % given["num_sub_vectors"]:
        raise InvalidOperationError(f"{what}: num_sub_vectors={given['num_sub_vectors']} does not divide the "
                                    f"dimension {dtype.list_size}")
    return IndexSpec(name, column, kind, given, replace)


def lance_arguments(spec: IndexSpec, ds: "lance.LanceDataset") -> dict[str, Any]:
    """The parameters Lance needs, defaults filled in the way LanceDB picks them."""
    args = dict(spec.params)
    if spec.kind in VECTOR_KINDS:
        rows = max(1, ds.count_rows())
        # Lance trains at most one IVF partition per 256 vectors (and warns when asked for more).
        args.setdefault("num_partitions", max(1, min(256, math.isqrt(rows), rows // 256)))
        args["num_partitions"] = min(args["num_partitions"], rows)  # k-means needs a row per centroid
        if spec.kind == "IVF_PQ" and "num_sub_vectors" not in args:
            dim = ds.schema.field(spec.column).type.list_size
            args["num_sub_vectors"] = next(d for d in (dim // 16, dim // 8, dim // 4, dim // 2, 1) if d and dim % d == 0)
    return args


def lance_progress(progress: Progress | None, table: str) -> dict[str, Any]:
    """Lance's ``progress_callback`` argument telling ``progress`` each build stage as it begins."""
    if progress is None:
        return {}

    def heard(event: Any) -> None:
        if getattr(event, "event", None) == "start":
            progress(table, str(event.stage))

    return {"progress_callback": heard}


def build(ds: "lance.LanceDataset", spec: IndexSpec, progress: Progress | None = None, table: str = "") -> None:
    """Create (or with ``replace`` rebuild) the index on ``ds`` (a writable head): one Lance version.
    ``progress(table, stage)`` hears Lance's build stages as they begin."""
    args = {**lance_arguments(spec, ds), **lance_progress(progress, table)}
    try:
        if spec.kind in VECTOR_KINDS:
            ds.create_index(spec.column, spec.kind, name=spec.name, replace=spec.replace, **args)
        else:
            ds.create_scalar_index(spec.column, cast(Any, spec.kind), name=spec.name, replace=spec.replace, **args)
    except (OSError, ValueError, RuntimeError, TypeError) as exc:
        from trimerge.lineage.errors import lance_message, resource_exhausted

        exhausted = resource_exhausted(exc)  # Lance's memory pool, not the index's definition
        if exhausted is not None:
            raise exhausted from exc
        raise InvalidOperationError(f"cannot build the {spec.kind} index {spec.name!r} on {spec.column!r}: "
                                    f"{lance_message(exc)}") from None


class TableWriter(Protocol):
    """What index and upkeep operations need of a transaction."""

    def dataset(self, table: str) -> "lance.LanceDataset": ...

    def table_version(self, table: str) -> "TableVersion": ...

    def set_index_params(self, table: str, params: tuple[tuple[str, str], ...]) -> None: ...

    def foreign_fragments(self, table: str) -> list[int]: ...

    def write_table(self, table: str, op: str, change: Callable[["lance.LanceDataset"], Any], *,
                    row_level: bool = True) -> None: ...


def create(tx: TableWriter, table: str, spec: IndexSpec, progress: Progress | None = None) -> None:
    """Build ``spec`` on ``table`` in transaction ``tx`` and record its definition; ``progress``
    hears ``(table, "start")``, Lance's build stages and ``(table, "done")``."""
    if progress is not None:
        progress(table, "start")
    tx.write_table(table, f"create index {spec.name} on {table}", lambda head: build(head, spec, progress, table))
    tx.set_index_params(table, record(tx.table_version(table).index_params, spec))
    if progress is not None:
        progress(table, "done")


def around_column_rewrite(tx: TableWriter, table: str, column: str, op: str,
                          rewrite: Callable[["lance.LanceDataset"], Any]) -> None:
    """Rewrite ``column`` (a type change: not row-level) under its indices: Lance refuses to cast
    an indexed column, so they are dropped first and built again on the rewritten data."""
    affected = [i for i in list_indices(tx.dataset(table), tx.table_version(table)) if column in i.columns]

    def change(ds: "lance.LanceDataset") -> None:
        for info in affected:
            ds.drop_index(info.name)
        rewrite(ds)

    tx.write_table(table, op, change, row_level=False)
    for info in affected:
        create(tx, table, IndexSpec(info.name, column, info.kind, dict(info.params)))


def drop(tx: TableWriter, table: str, name: Any) -> None:
    """Drop the index ``name`` (checked first: an unknown name is a clear error, nothing written)."""
    names = [i["name"] for i in lance_indices(tx.dataset(table))]
    if name == KEY_INDEX:
        raise InvalidOperationError(f"index {name!r} of {table!r} is kept by trimerge for keyed writes; "
                                    "it cannot be dropped (set index.key_min_rows to 0 to stop new ones)")
    if name not in names:
        raise NotFoundError(f"table {table!r} has no index {name!r} (indices: {', '.join(names) or 'none'})")
    tx.write_table(table, f"drop index {name} of {table}", lambda head: head.drop_index(name))
    tx.set_index_params(table, record(tx.table_version(table).index_params, None, drop_name=name))


def row_coverage(ds: "lance.LanceDataset", fragment_ids: Any) -> tuple[int, int]:
    """(indexed, unindexed) live rows, from fragment metadata alone."""
    covered = set(fragment_ids)
    indexed = unindexed = 0
    for frag in ds.get_fragments():
        rows = frag.metadata.num_rows
        if frag.fragment_id in covered:
            indexed += rows
        else:
            unindexed += rows
    return indexed, unindexed


def grouped(ds: "lance.LanceDataset") -> dict[str, dict[str, Any]]:
    """Lance's index entries grouped by name: an index refreshed incrementally is several segments
    (one entry each, same name), covering the union of their fragments."""
    out: dict[str, dict[str, Any]] = {}
    for info in lance_indices(ds):
        if info["name"].startswith("__"):  # Lance's own system indices (e.g. the fragment reuse index)
            continue
        entry = out.setdefault(info["name"], {**info, "fragment_ids": set()})
        entry["fragment_ids"] |= set(info["fragment_ids"])
    return out


def list_indices(ds: "lance.LanceDataset", tv: "TableVersion | None" = None) -> list[IndexInfo]:
    """The indices of one table version, with the definitions the commit recorded."""
    recorded = dict(tv.index_params) if tv is not None else {}
    out = []
    for name, info in sorted(grouped(ds).items()):
        indexed, unindexed = row_coverage(ds, info["fragment_ids"])
        params = json.loads(recorded.get(name, "{}"))
        out.append(IndexInfo(name, tuple(info["fields"]), kind_of(info["type"]), params, indexed, unindexed))
    return out


def stale(ds: "lance.LanceDataset", threshold: float) -> bool:
    """Whether some index of ``ds`` leaves more than ``threshold`` of the live rows unindexed."""
    for info in grouped(ds).values():
        indexed, unindexed = row_coverage(ds, info["fragment_ids"])
        if unindexed and unindexed > threshold * (indexed + unindexed):
            return True
    return False


def optimize(ds: "lance.LanceDataset", progress: Progress | None = None, table: str = "") -> None:
    """Add unindexed fragments to every index of ``ds`` (no retraining); ``progress`` as in :func:`build`."""
    ds.optimize.optimize_indices(**lance_progress(progress, table))


def record(params: tuple[tuple[str, str], ...], spec: IndexSpec | None, *, drop_name: str | None = None,
           keep: Any = None) -> tuple[tuple[str, str], ...]:
    """The ``index_params`` of a TableVersion after creating ``spec`` or dropping ``drop_name``;
    ``keep`` (names present in Lance) prunes definitions of indices Lance dropped by itself (a
    dropped column, an overwrite)."""
    out = dict(params)
    if drop_name is not None:
        out.pop(drop_name, None)
    if spec is not None:
        out[spec.name] = canonical(spec.params)
    if keep is not None:
        out = {k: v for k, v in out.items() if k in keep}
    return tuple(sorted(out.items()))
