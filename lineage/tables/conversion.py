"""Lance-level helpers: turning user data into well-typed Arrow tables and opening table versions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import lance

from trimerge.lineage.errors import PrimaryKeyError, SchemaMismatchError
from trimerge.lineage.history.names import validate_column_names

PK_METADATA = b"lance-schema:unenforced-primary-key"

# Arrow view and large types become the plain types where the width is not the user's choice:
# data from polars (which exports every string as large_string or string_view) and pandas.
# Arrow data keeps the types it was written with: Lance stores large_string and large_binary as
# they are. Lance cannot store the view types (it narrows them to string/binary), so a schema
# with them is refused (:func:`check_storable`); data written into an existing table is cast.
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary(),
               pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
_UNSTORABLE = {pa.string_view(): "string", pa.binary_view(): "binary"}


def plain_type(t: pa.DataType) -> pa.DataType:
    """Replace Arrow view and large types with the plain types (polars' and pandas' data)."""
    if t in _VIEW_TYPES:
        return _VIEW_TYPES[t]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = plain_type(t.value_type)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain_type(f.type)) for f in t])
    return t


def plain_table(table: pa.Table) -> pa.Table:
    """``table`` with view and large types narrowed (:func:`plain_type`): for data whose string
    width no one chose (polars' exports, CSV and JSON files read through polars)."""
    schema = pa.schema([f.with_type(plain_type(f.type)) for f in table.schema], metadata=table.schema.metadata)
    try:
        return table.cast(schema) if schema != table.schema else table
    except pa.ArrowException as exc:
        raise SchemaMismatchError(f"cannot convert the data: {str(exc).splitlines()[0][:200]}") from None


def _unstorable(t: pa.DataType) -> str | None:
    if t in _UNSTORABLE:
        return _UNSTORABLE[t]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _unstorable(t.value_type)
    if pa.types.is_struct(t):
        return next((u for u in (_unstorable(f.type) for f in t) if u), None)
    return None


def check_storable(fields: "pa.Schema | Sequence[pa.Field]", what: str) -> None:
    """Refuse a column type Lance would store as another type (``string_view``, ``binary_view``):
    the schema read back would not be the one written."""
    for f in fields:
        plain = _unstorable(f.type)
        if plain:
            raise SchemaMismatchError(
                f"{what}: column {f.name!r} has type {f.type}, which Lance stores as {plain}; "
                f"cast it to {plain} or large_{plain} first")


def to_arrow(data: Any) -> pa.Table:
    """Accept a pyarrow Table/RecordBatch, a polars DataFrame, a pandas DataFrame or a dict of columns."""
    try:
        if isinstance(data, pa.Table):
            table = data
        elif isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data])
        elif hasattr(data, "to_arrow") and type(data).__module__.startswith("polars"):
            table = data.to_arrow()
        elif type(data).__module__.startswith("pandas"):
            table = pa.Table.from_pandas(data, preserve_index=False)
        elif isinstance(data, dict):
            table = pa.table(data)
        else:
            raise SchemaMismatchError(
                f"cannot load data of type {type(data).__name__}: pass a pyarrow.Table or a polars/pandas DataFrame"
            )
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise SchemaMismatchError(f"cannot convert the data to a table: {str(exc).splitlines()[0][:200]}") from None
    check_field_names(table.schema)
    # polars and pandas strings have no width of their own: stored as plain string/binary. Arrow
    # data keeps its types (a write into an existing table casts to the table's schema).
    return table if isinstance(data, (pa.Table, pa.RecordBatch, dict)) else plain_table(table)


def field_name(f: pa.Field) -> str:
    """A field's name; pyarrow accepts names that are not UTF-8 but cannot give them back."""
    try:
        return f.name
    except UnicodeDecodeError:
        from trimerge.lineage.errors import InvalidNameError

        raise InvalidNameError("invalid column name: not valid UTF-8") from None


def check_field_names(fields: "pa.Schema | Sequence[pa.Field]") -> None:
    """The column-name rules of :func:`~trimerge.lineage.history.names.validate_column_name`, nested fields included."""
    fields = list(fields)
    validate_column_names([field_name(f) for f in fields])
    for f in fields:
        if pa.types.is_struct(f.type):
            check_field_names([f.type.field(i) for i in range(f.type.num_fields)])


def parse_primary_key(primary_key: Any, what: str) -> tuple[str, ...]:
    """A primary key given as a column name or a non-empty list of names, as a tuple."""
    if isinstance(primary_key, str):
        pk = (primary_key,)
    elif isinstance(primary_key, (list, tuple)) and primary_key and all(isinstance(k, str) for k in primary_key):
        pk = tuple(primary_key)
    else:
        raise PrimaryKeyError(f"{what}: primary_key must be a column name or a non-empty list of them, "
                              f"not {primary_key!r}")
    if len(set(pk)) != len(pk):
        raise PrimaryKeyError(f"{what}: primary key {list(pk)} names a column twice")
    return pk


def schema_with_primary_key(schema: pa.Schema, primary_key: Sequence[str]) -> pa.Schema:
    """The schema a table is stored with: key fields non-null. The key lives in the commit
    (``TableVersion.primary_key``), not in Lance's schema: Lance's ``unenforced-primary-key`` mark
    makes every ``merge_insert`` store a 32 KB key filter in its transaction and manifest (66 KB per
    one-row upsert), a guard against concurrent writers that the branch lease already gives."""
    missing = [k for k in primary_key if k not in schema.names]
    if missing:
        raise PrimaryKeyError(f"primary key column(s) {missing} not in the data (columns: {schema.names})")
    check_storable(schema, "table schema")
    fields = []
    for f in schema:
        if f.metadata and PK_METADATA in f.metadata:
            f = f.with_metadata({k: v for k, v in f.metadata.items() if k != PK_METADATA} or None)
        if f.name in primary_key:
            if pa.types.is_floating(f.type) or pa.types.is_nested(f.type):
                raise PrimaryKeyError(f"primary key column {f.name!r} has type {f.type}, which cannot be a key")
            f = f.with_nullable(False)
        fields.append(f)
    return pa.schema(fields)


def strip_field_metadata(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.remove_metadata() for f in schema])


def check_primary_key(table: pa.Table, primary_key: Sequence[str], what: str) -> None:
    """Key columns present and non-null, and each key at most once."""
    if not primary_key:
        raise PrimaryKeyError(f"{what}: a primary key is required")
    missing = [k for k in primary_key if k not in table.column_names]
    if missing:
        raise PrimaryKeyError(f"{what}: primary key column(s) {missing} missing from the data")
    for k in primary_key:
        nulls = table.column(k).null_count
        if nulls:
            raise PrimaryKeyError(f"{what}: primary key column {k!r} has {nulls} null value(s)")
    if table.num_rows < 2:
        return
    counts = table.select(list(primary_key)).group_by(list(primary_key)).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        sample = dup.slice(0, 3).drop_columns(["count_all"]).to_pylist()
        raise PrimaryKeyError(f"{what}: {dup.num_rows} duplicate primary key value(s), e.g. {sample}")


def conform(table: pa.Table, schema: pa.Schema, what: str, *, fill_nullable: bool = False) -> pa.Table:
    """Reorder and safely cast ``table`` to ``schema``; missing or extra columns are an error.

    ``fill_nullable`` (appends: new rows, as SQL's ``INSERT`` of some columns): a missing column
    the schema lets be null is filled with nulls; a missing non-nullable one is still an error."""
    names = set(table.column_names)
    missing = [n for n in schema.names if n not in names]
    extra = [n for n in table.column_names if n not in schema.names]
    if fill_nullable and missing and not extra:
        required = [n for n in missing if not schema.field(n).nullable]
        if required:
            raise SchemaMismatchError(f"{what}: column(s) {required} missing, and the table's schema does not let "
                                      f"them be null (the other missing columns would be filled with nulls)")
        for n in missing:
            table = table.append_column(schema.field(n), pa.nulls(table.num_rows, schema.field(n).type))
        missing = []
    if missing or extra:
        raise SchemaMismatchError(
            f"{what}: columns do not match the table's schema (missing: {missing}, unexpected: {extra})"
        )
    table = table.select(schema.names)
    try:
        return table.cast(schema, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        got = {f.name: str(f.type) for f in table.schema if f.type != schema.field(f.name).type}
        raise SchemaMismatchError(f"{what}: data types do not match the table's schema ({got}): {exc}") from None


def open_version(path: str, lance_branch: str, version: int | None,
                 storage_options: dict[str, str] | None = None, session: Any = None) -> lance.LanceDataset:
    """Open one version (None: latest) of one Lance branch of a dataset. A shared ``session`` keeps
    object-store clients and immutable manifests cached between opens (9 ms → 1 ms per open on S3)."""
    import lance  # imported on first use: commands that never open a table start faster

    ds = lance.dataset(path, storage_options=storage_options, session=session)
    if lance_branch == "main" and version is not None:
        return ds.checkout_version(version) if ds.version != version else ds
    return ds.checkout_version((lance_branch, version))


def fragment_signature(ds: lance.LanceDataset) -> tuple:
    """What determines a version's content: schema (with Lance field ids: a dropped and re-added
    column reads other files), each fragment's files and deletions, and the indices."""
    frags = tuple(sorted((f.fragment_id, repr(f.metadata.to_json().get("files")),
                          repr(f.metadata.to_json().get("deletion_file"))) for f in ds.get_fragments()))
    from trimerge.lineage.tables.indices import lance_indices

    return (str(ds.lance_schema), frags, tuple(sorted(i["uuid"] for i in lance_indices(ds))))


def checked_new_columns(schema: pa.Schema, fields: Any, table: str) -> list[pa.Field]:
    """Columns to add to a table of ``schema``: pyarrow fields, nullable, new names; as stored."""
    fields = [fields] if isinstance(fields, pa.Field) else list(fields) if isinstance(fields, (list, tuple, pa.Schema)) else []
    if not fields or not all(isinstance(f, pa.Field) for f in fields):
        raise SchemaMismatchError("add_columns takes pyarrow fields (pa.field(name, type)), at least one")
    check_field_names(fields)
    for f in fields:
        if f.name in schema.names:
            raise SchemaMismatchError(f"table {table!r} has a column {f.name!r} already")
        if not f.nullable:
            raise SchemaMismatchError(f"new column {f.name!r} must be nullable (existing rows get nulls)")
    check_field_names([*schema, *fields])  # no clash in case with existing columns either
    check_storable(fields, f"add columns to {table}")
    return fields


def checked_dropped_columns(schema: pa.Schema, columns: Any, primary_key: Sequence[str], table: str) -> list[str]:
    """Columns to drop from a table of ``schema``: existing, not part of the key."""
    columns = [columns] if isinstance(columns, str) else list(columns) if isinstance(columns, (list, tuple)) else []
    if not columns or not all(isinstance(c, str) for c in columns):
        raise SchemaMismatchError(f"drop columns from {table}: name at least one column, as text")
    for c in columns:
        if c not in schema.names:
            raise SchemaMismatchError(f"table {table!r} has no column {c!r}")
        if c in primary_key:
            raise PrimaryKeyError(f"cannot drop primary key column {c!r}")
    return columns


def checked_widening(schema: pa.Schema, column: str, data_type: pa.DataType, table: str) -> bool:
    """Whether changing ``column`` to ``data_type`` is a widening to do (False: it has that type already)."""
    if column not in schema.names:
        raise SchemaMismatchError(f"table {table!r} has no column {column!r}")
    old = schema.field(column).type
    if old == data_type:
        return False
    if not is_widening(old, data_type):
        raise SchemaMismatchError(f"cannot change {table}.{column} from {old} to {data_type}: only widening is allowed")
    return True


def distinct_keys(table: pa.Table, schema: pa.Schema, primary_key: Sequence[str], what: str) -> pa.Table:
    """The key columns of ``table``, typed as in ``schema``, non-null, one row per key."""
    pk = list(primary_key)
    missing = [k for k in pk if k not in table.column_names]
    if missing:
        raise PrimaryKeyError(f"{what}: key column(s) {missing} missing")
    table = table.select(pk)
    if any(table.column(k).null_count for k in pk):
        raise PrimaryKeyError(f"{what}: key values cannot be null")
    table = conform(table, pa.schema([schema.field(k) for k in pk]), what)
    return table.group_by(pk).aggregate([]) if table.num_rows > 1 else table


# Lossless type changes allowed by alter_column: from -> set of wider types (int -> float is
# lossless for small ints but Lance cannot cast it in place).
_WIDENINGS = {
    pa.int8(): {pa.int16(), pa.int32(), pa.int64()},
    pa.int16(): {pa.int32(), pa.int64()},
    pa.int32(): {pa.int64()},
    pa.uint8(): {pa.uint16(), pa.uint32(), pa.uint64(), pa.int16(), pa.int32(), pa.int64()},
    pa.uint16(): {pa.uint32(), pa.uint64(), pa.int32(), pa.int64()},
    pa.uint32(): {pa.uint64(), pa.int64()},
    pa.float16(): {pa.float32(), pa.float64()},
    pa.float32(): {pa.float64()},
    pa.string(): {pa.large_string()},
    pa.binary(): {pa.large_binary()},
}


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    return new in _WIDENINGS.get(old, set())


def sql_literal(value: Any) -> str | None:
    """``value`` as a Lance SQL literal, or None when there is no safe spelling for it."""
    import datetime as dt

    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        return None
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return None


def key_filter(primary_key: Sequence[str], values: Sequence[Any]) -> str | pc.Expression:
    """A filter selecting one key: SQL where every value has a literal (works for every string
    type), else a pyarrow expression."""
    literals = [sql_literal(v) for v in values]
    if all(lit is not None for lit in literals):
        return " AND ".join(f"`{c}` = {lit}" for c, lit in zip(primary_key, literals))
    expr = None
    for col, value in zip(primary_key, values):
        term = pc.field(col) == value
        expr = term if expr is None else expr & term
    return expr


def rows_with_keys(ds: "lance.LanceDataset", keys: pa.Table, *, with_row_address: bool = False,
                   columns: Sequence[str] | None = None, with_row_id: bool = False) -> pa.Table:
    """The rows of ``ds`` whose key is in ``keys`` (a table of the key columns), read by a filter
    on the first key column (cost follows the number of keys, not the table; a scalar index on
    that column answers it without a scan). ``with_row_address`` adds ``_rowaddr``, ``with_row_id``
    ``_rowid``; ``columns`` limits the columns read (they must include the key)."""
    extra = {"with_row_address": with_row_address, "with_row_id": with_row_id,
             **({"columns": list(columns)} if columns is not None else {})}
    first = keys.column_names[0]
    values = pc.unique(keys.column(first))
    if not pa.types.is_large_string(values.type) and not pa.types.is_large_binary(values.type):
        try:
            found = ds.to_table(filter=pc.field(first).isin(values), **extra)
        except pa.ArrowNotImplementedError:  # a column type Substrait cannot carry (large_list): SQL
            found = None
    else:
        found = None
    if found is None:
        # Lance cannot push an Arrow filter on a large_* column (Substrait); SQL literals work.
        parts = [ds.to_table(filter=f"`{first}` IN ({', '.join(_text_literal(v) for v in part)})", **extra)
                 for part in _slices(values.to_pylist(), 1000)]
        found = pa.concat_tables(parts) if parts else ds.to_table(limit=0, **extra)
    if keys.num_columns == 1:
        return found
    at, _ = matching_positions(found, keys, keys.column_names)
    return found.take(at)


def matching_positions(left: pa.Table, right: pa.Table, key: Sequence[str]) -> tuple[pa.Array, pa.Array]:
    """(positions in ``left``, positions in ``right``) of the rows whose keys match, in ``left``'s
    order. Only the key columns are joined: Arrow's join refuses nested non-key columns (lists,
    structs, fixed-size vectors), which are then taken by position."""
    def indexed(t: pa.Table, name: str) -> pa.Table:
        return t.select(list(key)).append_column(name, pa.array(range(t.num_rows), pa.int64()))

    pairs = indexed(left, "\x01l").join(indexed(right, "\x01r"), keys=list(key), join_type="inner")
    pairs = pairs.sort_by("\x01l")
    return pairs.column("\x01l").combine_chunks(), pairs.column("\x01r").combine_chunks()


def _text_literal(value: str | bytes) -> str:
    return f"X'{value.hex()}'" if isinstance(value, bytes) else sql_literal(value)


def _slices(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def replace_columns(current: pa.Table, new: pa.Table, key: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """``current`` rows with ``columns`` taken from the ``new`` row of the same key."""
    try:
        at_current, at_new = matching_positions(current, new, key)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"cannot combine the changed columns with the stored rows: {exc}") from None
    out = current.drop_columns(list(columns)).take(at_current)
    for c in columns:
        out = out.append_column(new.schema.field(c), new.column(c).take(at_new))
    return out


def checked_batches(rows: pa.RecordBatchReader, schema: pa.Schema, pk: list[str], what: str):
    """Each batch of ``rows`` conformed to ``schema`` and checked for a usable primary key."""
    for batch in rows:
        table = conform(pa.Table.from_batches([batch]), schema, what)
        check_primary_key(table, pk, what)
        yield from table.to_batches()
