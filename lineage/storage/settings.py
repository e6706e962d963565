"""Repository settings: typed, validated policy values in ``_trimerge/settings.json``.

Each setting has a default, a check and a one-line description; an unknown name or a bad value is
a clear error and changes nothing. Settings are repository state (not versioned with commits): they
say how trimerge maintains the tables, not what the tables hold. An open repository reads them
once; a change made by another process is seen when the repository is opened again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.errors import InvalidOperationError

SETTINGS_DOC = "settings.json"


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    check: Callable[[Any], bool]
    expected: str
    help: str


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 86_400


def _count(low: int, high: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("index.refresh_threshold", 0.10, _fraction, "a fraction between 0 and 1",
            "a write that leaves more than this share of a table's rows outside an index adds them to it "
            "in the same commit (1 turns it off)"),
    Setting("index.key_min_rows", 100_000, _count(0, 1 << 62), "a non-negative integer",
            "a table with at least this many rows gets an index on its key, so keyed writes look keys up "
            "instead of scanning them (0 turns it off)"),
    Setting("compaction.max_small_fragments", 64, _count(0, 1_000_000), "an integer between 0 and 1000000",
            "a write that leaves more small fragments than this compacts them in the same commit (0 turns it off)"),
    Setting("compaction.small_fragment_rows", 65536, _count(1, 1 << 40), "a positive integer",
            "fragments with fewer rows than this count as small"),
    Setting("checks.timeout", 10, _seconds, "a number of seconds greater than 0 (at most 86400)",
            "a data check still running after this many seconds is stopped and fails (check run, gated merges)"),
)}


def parse_value(name: str, text: str) -> Any:
    """A setting's value typed in on the command line (JSON-ish: numbers, true/false)."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


class Settings:
    """The repository's settings; ``get`` falls back to the default."""

    def __init__(self, docs: Documents, check_writable: Callable[[], None] = lambda: None):
        self.docs = docs
        self.check_writable = check_writable  # a read-only repository refuses changes
        self._cache: tuple[dict[str, Any], Any] | None = None  # read once per open repository

    def _stored(self, fresh: bool = False) -> tuple[dict[str, Any], Any]:
        if self._cache is None or fresh:
            found = self.docs.read(SETTINGS_DOC)
            if found is None:
                self._cache = ({}, None)
            else:
                doc = found.doc if isinstance(found.doc, dict) else {}
                self._cache = ({k: v for k, v in doc.items() if k in SETTINGS}, found.version)
        return dict(self._cache[0]), self._cache[1]

    @staticmethod
    def _setting(name: Any) -> Setting:
        if name not in SETTINGS:
            raise InvalidOperationError(f"unknown setting {name!r} (settings: {', '.join(SETTINGS)})")
        return SETTINGS[name]

    def get(self, name: str) -> Any:
        setting = self._setting(name)
        value = self._stored()[0].get(name, setting.default)
        return value if setting.check(value) else setting.default  # a hand-edited bad value: the default

    def as_dict(self) -> dict[str, Any]:
        stored = self._stored()[0]
        return {name: stored.get(name, s.default) if s.check(stored.get(name, s.default)) else s.default
                for name, s in SETTINGS.items()}

    def set(self, name: str, value: Any) -> None:
        """Set ``name`` (checked first); ``None`` puts back the default."""
        self.check_writable()
        setting = self._setting(name)
        if value is not None and not setting.check(value):
            raise InvalidOperationError(f"setting {name} must be {setting.expected}, not {value!r}")
        stored, version = self._stored(fresh=True)
        if value is None:
            stored.pop(name, None)
        else:
            stored[name] = value
        self._cache = None
        self.docs.write(SETTINGS_DOC, stored, version)
