"""Commits: immutable, content-addressed records of the whole repository's state."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

FORMAT = 1


@dataclass(frozen=True)
class TableVersion:
    """Where one table's data lives at a commit: a Lance dataset, a branch of it and a version.

    ``owner`` is the id of the graph-branch incarnation allowed to write that Lance branch; any other
    branch forks it lazily on its first write.

    ``delta_since`` is the earliest version of this Lance branch from which Lance's row-version
    metadata describes every change up to ``version``: the versions ``delta_since..version`` form
    one chain of row-level writes, each built on the one before (no restore or repoint back in
    time, no overwrite, no schema change). ``ds.delta(begin_version=v)`` is exact for every
    ``v >= delta_since``; None means unknown (commits written before this was recorded).

    ``index_params`` records, per index name, the parameters it was defined with (canonical JSON):
    Lance's manifest says which indices exist, but keeps only their trained result.

    ``derived`` declares derived columns: (column, the input columns it is computed from), sorted
    (see :mod:`trimerge.lineage.gates.derived`)."""

    dataset: str
    lance_branch: str
    version: int
    owner: str
    primary_key: tuple[str, ...]
    delta_since: int | None = None
    index_params: tuple[tuple[str, str], ...] = ()
    derived: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Data checks on this table: (name, canonical JSON of {"sql", "gates"}), sorted
    #: (see :mod:`trimerge.lineage.gates.checks`).
    checks: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc = {
            "dataset": self.dataset,
            "lance_branch": self.lance_branch,
            "version": self.version,
            "owner": self.owner,
            "primary_key": list(self.primary_key),
        }
        if self.delta_since is not None:
            doc["delta_since"] = self.delta_since
        if self.index_params:
            doc["index_params"] = dict(self.index_params)
        if self.derived:
            doc["derived"] = {c: list(i) for c, i in self.derived}
        if self.checks:
            doc["checks"] = dict(self.checks)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TableVersion":
        since = doc.get("delta_since")
        params = doc.get("index_params") or {}
        derived = doc.get("derived") or {}
        checks = doc.get("checks") or {}
        return cls(doc["dataset"], doc["lance_branch"], int(doc["version"]), doc["owner"], tuple(doc["primary_key"]),
                   int(since) if since is not None else None, tuple(sorted((str(k), str(v)) for k, v in params.items())),
                   tuple(sorted((str(c), tuple(str(x) for x in i)) for c, i in derived.items())),
                   tuple(sorted((str(k), str(v)) for k, v in checks.items())))

    def delta_exact_from(self, version: int) -> bool:
        """Whether Lance's ``delta`` from ``version`` (of this Lance branch) to this version names
        every changed row."""
        return version == self.version or (self.delta_since is not None and self.delta_since <= version <= self.version)

    @property
    def location(self) -> tuple[str, str, int]:
        """(dataset, Lance branch, version): equal locations hold identical data."""
        return (self.dataset, self.lance_branch, self.version)


def format_time(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


@dataclass(frozen=True, eq=False)
class Commit:
    """One published state of the repository. ``parents`` lists the destination first on merges."""

    id: str
    ulid: str
    parents: tuple[str, ...]
    actor: str
    created_at: datetime
    message: str
    metadata: Mapping[str, str]
    branch: str
    generation: int
    tables: Mapping[str, TableVersion] = field(repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Commit) and other.id == self.id

    def __repr__(self) -> str:
        """Short: id, branch, actor, time, message (cut) and counts (``trimerge.lineage.display``)."""
        from trimerge.lineage.display import commit_repr

        return commit_repr(self)

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def short_id(self) -> str:
        return self.id[:10]

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1

    def body(self) -> dict[str, Any]:
        """The digested content: everything but the id."""
        return {
            "format": FORMAT,
            "ulid": self.ulid,
            "parents": list(self.parents),
            "actor": self.actor,
            "created_at": format_time(self.created_at),
            "message": self.message,
            "metadata": dict(sorted(self.metadata.items())),
            "branch": self.branch,
            "generation": self.generation,
            "tables": {name: tv.to_json() for name, tv in sorted(self.tables.items())},
        }

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, **self.body()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Commit":
        return cls(
            id=doc["id"],
            ulid=doc["ulid"],
            parents=tuple(doc["parents"]),
            actor=doc["actor"],
            created_at=parse_time(doc["created_at"]),
            message=doc["message"],
            metadata=dict(doc.get("metadata", {})),
            branch=doc["branch"],
            generation=int(doc["generation"]),
            tables={n: TableVersion.from_json(t) for n, t in doc.get("tables", {}).items()},
        )

    @classmethod
    def build(cls, **fields: Any) -> "Commit":
        """Create a commit and compute its id from its content."""
        draft = cls(id="", **fields)
        return cls(id=digest(draft.body()), **fields)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly description for the CLI."""
        return {
            "id": self.id,
            "ulid": self.ulid,
            "parents": list(self.parents),
            "actor": self.actor,
            "created_at": format_time(self.created_at),
            "message": self.message,
            "metadata": dict(self.metadata),
            "branch": self.branch,
            "generation": self.generation,
            "tables": {n: {"lance_branch": t.lance_branch, "version": t.version, "dataset": t.dataset}
                       for n, t in sorted(self.tables.items())},
        }


def digest(body: Mapping[str, Any]) -> str:
    """SHA-256 over a canonical JSON encoding (sorted keys, no whitespace, parents in order)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()
