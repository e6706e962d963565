"""Per-conflict resolutions: a table, usually the conflicts table of a dry run edited by hand.

Columns that identify a conflict: ``kind``, ``table``, ``key`` (JSON text of the key, as in
:meth:`MergeResult.conflicts_table`), ``column`` (the conflicting column of a cell conflict, empty
otherwise); then ``resolution`` — ``ours`` (keep the dest's value), ``theirs`` (take the source's),
``base`` (go back to the merge base's) or ``value`` — and ``value``: JSON text of ``{column: value}``
for a cell, or of the whole row. Other columns are ignored. Resolutions apply before strategies.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pyarrow as pa

from trimerge.lineage.errors import InvalidOperationError

CHOICES = ("ours", "theirs", "base", "value")
REQUIRED = ("kind", "table", "key", "column", "resolution")


@dataclass(frozen=True)
class Resolution:
    kind: str
    table: str
    key: str | None  # canonical JSON text
    column: str | None
    resolution: str
    value: Mapping[str, Any] | None = None

    def describe(self) -> str:
        where = self.table + (f"[{self.key}]" if self.key else "") + (f".{self.column}" if self.column else "")
        return f"{self.kind} at {where} -> {self.resolution}"


def canonical_key(key: Any) -> str | None:
    """The key as JSON text with sorted fields (how conflicts and resolutions are matched)."""
    if key is None:
        return None
    if isinstance(key, str):
        key = json.loads(key)
    return json.dumps(key, sort_keys=True, default=str)


class Resolutions:
    """The resolutions of one merge, looked up by conflict; remembers which were used."""

    def __init__(self, items: list[Resolution] | None = None):
        self._by: dict[tuple, Resolution] = {}
        for r in items or []:
            self._by[(r.kind, r.table, r.key, r.column)] = r
        self._used: set[tuple] = set()
        self.applied = 0

    def __len__(self) -> int:
        return len(self._by)

    @classmethod
    def from_data(cls, data: Any) -> "Resolutions":
        """From a pyarrow Table, a polars/pandas DataFrame, or None (no resolutions)."""
        if data is None:
            return cls()
        from trimerge.lineage.tables.conversion import to_arrow

        table = data if isinstance(data, pa.Table) else to_arrow(data)
        missing = [c for c in REQUIRED if c not in table.column_names]
        if missing:
            raise InvalidOperationError(f"resolutions lack column(s) {missing} (need {', '.join(REQUIRED)}, value)")
        items = []
        for n, row in enumerate(table.to_pylist(), 1):
            items.append(_parse_row(row, n))
        return cls(items)

    def find(self, kind: str, table: str, key_text: str | None, column: str | None) -> Resolution | None:
        """The resolution of one conflict cell (``key_text``: the key as in the conflicts table)."""
        k = (kind, table, key_text, column or None)
        found = self._by.get(k)
        if found is not None:
            self._used.add(k)
        return found

    def unused(self) -> list[Resolution]:
        return [r for k, r in self._by.items() if k not in self._used]

    def used_keys(self) -> list[tuple]:
        """What identifies each resolution used so far (merges run elsewhere report these back)."""
        return sorted(self._used, key=repr)

    def mark_used(self, keys: Any) -> None:
        """Count resolutions used by a merge run elsewhere (Spark executors) as used here."""
        self._used.update(tuple(k) for k in keys if tuple(k) in self._by)


def _parse_row(row: Mapping[str, Any], n: int) -> Resolution:
    choice = str(row.get("resolution") or "").strip().lower()
    if choice not in CHOICES:
        raise InvalidOperationError(f"resolution row {n}: resolution {row.get('resolution')!r} is not one of "
                                    f"{', '.join(CHOICES)}")
    try:
        key = canonical_key(row.get("key")) if row.get("key") not in (None, "") else None
    except (ValueError, TypeError):
        raise InvalidOperationError(f"resolution row {n}: key {row.get('key')!r} is not JSON text") from None
    value = None
    if choice == "value":
        try:
            value = json.loads(row.get("value") or "")
        except (ValueError, TypeError):
            raise InvalidOperationError(f"resolution row {n}: 'value' must be JSON text of {{column: value}}") from None
        if not isinstance(value, dict):
            raise InvalidOperationError(f"resolution row {n}: 'value' must be a JSON object {{column: value}}")
    column = row.get("column") or None
    return Resolution(str(row.get("kind")), str(row.get("table")), key, column, choice, value)


def read_table(path: str) -> pa.Table:
    """A conflicts or resolutions table from Parquet, CSV or JSON lines (by extension)."""
    p = Path(path)
    suffix = p.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return pq.read_table(p)
        if suffix == ".csv":
            import pyarrow.csv as pcsv

            return pcsv.read_csv(p, convert_options=pcsv.ConvertOptions(strings_can_be_null=True,
                                                                        column_types={"key": pa.string(),
                                                                                      "value": pa.string()}))
        if suffix in (".jsonl", ".ndjson"):
            rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            return pa.Table.from_pylist(rows)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise InvalidOperationError(f"cannot read {path}: {str(exc).splitlines()[0][:200]}") from None
    raise InvalidOperationError(f"cannot read {path}: use .parquet, .csv or .jsonl")


def write_table(table: pa.Table, path: str) -> None:
    """Write a conflicts table as Parquet, CSV or JSON lines (by extension), ready to be edited."""
    write_tables([table], path)


def write_conflicts(conflicts: Iterable[Any], path: str, chunk: int = 10_000) -> None:
    """Write conflicts (:class:`~trimerge.merge.result.Conflict`, any number, streamed) as a
    conflicts table."""
    from trimerge.merge.result import conflicts_table

    def tables() -> Iterator[pa.Table]:
        group: list[Any] = []
        for c in conflicts:
            group.append(c)
            if len(group) >= chunk:
                yield conflicts_table(group)
                group = []
        if group:
            yield conflicts_table(group)

    write_tables(tables(), path)


def _editable(table: pa.Table, csv: bool) -> pa.Table:
    """With empty ``resolution`` and ``value`` columns; for CSV, ``columns`` as JSON text."""
    for name in ("resolution", "value"):
        if name not in table.column_names:
            table = table.append_column(name, pa.array([None] * table.num_rows, pa.string()))
    if csv:
        table = table.set_column(table.schema.get_field_index("columns"), "columns",
                                 pa.array([json.dumps(v) for v in table.column("columns").to_pylist()], pa.string()))
    return table


def check_writable(path: str) -> None:
    """Refuse, before any work, a conflicts file that could not be written."""
    p = Path(path).expanduser().absolute()
    if p.suffix.lower() not in (".parquet", ".pq", ".csv", ".jsonl", ".ndjson"):
        raise InvalidOperationError(f"cannot write {path}: use .parquet, .csv or .jsonl")
    if not (p.parent.is_dir() and os.access(p.parent, os.W_OK)):
        raise InvalidOperationError(f"cannot write {path}: folder {p.parent} does not exist or is not writable")


def write_tables(tables: Iterable[pa.Table], path: str) -> None:
    """Write conflicts tables one after the other into one file (Parquet, CSV or JSON lines); a
    failure to write (a full disk) is one :class:`EnvironmentFailureError` naming the file."""
    from trimerge.lineage.safety.boundary import describe, environment_failure

    try:
        _write_tables(tables, path)
    except OSError as exc:
        failure = environment_failure(exc)
        if failure is None:
            raise
        raise type(failure)(f"writing conflicts file {path} failed: {describe(exc)}; nothing was published",
                            failure.errno, path, failure.strerror) from None


def _write_tables(tables: Iterable[pa.Table], path: str) -> None:
    check_writable(path)
    suffix = Path(path).suffix.lower()
    csv = suffix == ".csv"
    writer: Any = None
    with open(path, "wb") as out:
        for table in tables:
            table = _editable(table, csv)
            if suffix in (".jsonl", ".ndjson"):
                out.write("".join(json.dumps(r) + "\n" for r in table.to_pylist()).encode())
                continue
            if writer is None:
                if csv:
                    import pyarrow.csv as pcsv

                    writer = pcsv.CSVWriter(out, table.schema)
                else:
                    import pyarrow.parquet as pq

                    writer = pq.ParquetWriter(out, table.schema)
            writer.write_table(table)
        if writer is None and suffix not in (".jsonl", ".ndjson"):  # no conflicts: the columns alone
            from trimerge.merge.result import CONFLICTS_SCHEMA

            _write_tables([CONFLICTS_SCHEMA.empty_table()], path)
            return
        if writer is not None:
            writer.close()
