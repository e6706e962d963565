"""Where data checks are known to pass: ``checks/passed/<dataset>/<Lance branch>.json``, per
Lance version (the few latest), the checks that passed there on the whole table.

A gated merge runs a row-local check (:mod:`trimerge.lineage.gates.checkscope`) on the rows written
since a version where it passed instead of on the whole result (:mod:`trimerge.merge.checkdelta`);
this is where it learns such a version. ``check run`` and gated merges write it.

Why this is safe to trust:

* A Lance version's data never changes, and the name ``(dataset, Lance branch, version)`` is never
  given to other data: dataset folders and forks carry fresh ULIDs, a branch's version numbers
  only grow (a rollback is a restore, which writes a new version). So "passed at that version" —
  even one a transaction wrote and then abandoned — stays true.
* What a check returns there also depends on the query, the table's name and schema, and DuckDB:
  the record names a check by a hash of its table, SQL, DuckDB's version and the session's time
  zone and calendar, and keeps the schema's hash, so a changed query, a retyped column, an
  upgraded DuckDB or another time zone finds no record.
* A record is written after the check passed, in one atomic create or compare-and-swap of the
  document (a crash leaves the old document or the new one); a lost race, a damaged document
  or a store that refuses the write only loses the record. Without a record, checks run on the
  whole table as before — the record can make a merge faster, never change its verdict.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from trimerge.lineage.gates.checks import engine_identity
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import TrimergeError

if TYPE_CHECKING:
    import pyarrow as pa

    from trimerge.lineage.gates.checks import Check
    from trimerge.lineage.ports import DocumentStore

FOLDER = "checks/passed"
KEEP_VERSIONS = 8  # per Lance branch: merges chain from the latest; older entries only cost space
_ATTEMPTS = 3


def check_identity(check: "Check", engine: str) -> str:
    """What a check's verdict depends on besides the data: its table's name, its SQL and the
    engine (:func:`~trimerge.lineage.gates.checks.engine_identity`)."""
    text = "\x00".join((check.table, check.sql, engine))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def schema_identity(schema: "pa.Schema") -> str:
    text = schema.remove_metadata().to_string(show_field_metadata=False, show_schema_metadata=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def record_key(dataset: str, lance_branch: str) -> str:
    return f"{FOLDER}/{dataset}/{lance_branch}.json"


class CheckPasses:
    """Read and add "passed at" records (``repo.docs``)."""

    def __init__(self, docs: "DocumentStore"):
        self.docs = docs
        self.engine = engine_identity()

    def versions(self, dataset: str, lance_branch: str, check: "Check", schema: "pa.Schema") -> list[int]:
        """The versions of a Lance branch where ``check`` passed on a table of this ``schema``,
        latest first (none when the document is missing or damaged)."""
        try:
            found = self.docs.read(record_key(dataset, lance_branch), damaged_as_none=True)
        except (TrimergeError, OSError):  # unreadable: as if absent (the check reads the whole table)
            return []
        entries = _entries(None if found is None else found.doc)
        want, shape = check_identity(check, self.engine), schema_identity(schema)
        return sorted((v for v, (s, ids) in entries.items() if s == shape and want in ids), reverse=True)

    def record(self, tv: TableVersion, schema: "pa.Schema", checks: Iterable["Check"]) -> bool:
        """Note that ``checks`` passed on the whole table ``tv`` (of ``schema``); whether it was
        written. Best effort: a record only ever saves work, so failing to write one is no error."""
        ids = {check_identity(c, self.engine) for c in checks}
        if not ids:
            return False
        key = record_key(tv.dataset, tv.lance_branch)
        shape = schema_identity(schema)
        try:
            for _ in range(_ATTEMPTS):
                found = self.docs.read(key, damaged_as_none=True)
                entries = _entries(None if found is None else found.doc)
                have = entries.get(tv.version)
                if have is not None and have[0] == shape and ids <= have[1]:
                    return True
                merged = ids | (have[1] if have is not None and have[0] == shape else set())
                entries[tv.version] = (shape, merged)
                kept = sorted(entries)[-KEEP_VERSIONS:]
                doc = {"passed": {str(v): {"schema": entries[v][0], "checks": sorted(entries[v][1])} for v in kept}}
                written = self.docs.create(key, doc) if found is None else self.docs.swap(key, doc, found.version)
                if written is not None:
                    return True
        except (TrimergeError, OSError):
            pass
        return False


def _entries(doc: Any) -> dict[int, tuple[str, set[str]]]:
    """{version: (schema hash, check hashes)} of a document; anything malformed counts as absent."""
    out: dict[int, tuple[str, set[str]]] = {}
    passed = doc.get("passed") if isinstance(doc, Mapping) else None
    if not isinstance(passed, Mapping):
        return out
    for version, entry in passed.items():
        try:
            v = int(version)
        except (TypeError, ValueError):
            continue
        if isinstance(entry, Mapping) and isinstance(entry.get("schema"), str) \
                and isinstance(entry.get("checks"), list):
            out[v] = (entry["schema"], {c for c in entry["checks"] if isinstance(c, str)})
    return out
