"""Three-way merge of named definitions — index definitions, derived-column declarations, data
checks — the way the schema merges columns: by name, a change on one side is taken, the same
change on both sides is one, different changes on both sides are a conflict someone decides."""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

V = TypeVar("V")
#: ``decide(name, base, ours, theirs)`` -> ``"ours"``, ``"theirs"``, ``"base"``, or None (unresolved).
Decide = Callable[[str, Any, Any, Any], "str | None"]


def merge_by_name(base: Mapping[str, V], ours: Mapping[str, V], theirs: Mapping[str, V],
                  decide: Decide) -> tuple[dict[str, V], list[tuple[str, str]], bool]:
    """(merged definitions, what was taken from elsewhere than ours as ``(name, how)`` — ``add``,
    ``drop``, ``change`` for the source's one-sided changes, ``theirs``/``base`` for decisions —,
    whether some conflict stayed unresolved: its name keeps ours' definition)."""
    merged: dict[str, V] = {}
    taken: list[tuple[str, str]] = []
    unresolved = False
    for name in sorted(base.keys() | ours.keys() | theirs.keys()):
        b, o, t = base.get(name), ours.get(name), theirs.get(name)
        if o == t or t == b:
            chosen = o
        elif o == b:
            chosen = t
            taken.append((name, "drop" if t is None else "add" if b is None else "change"))
        else:
            choice = decide(name, b, o, t)
            if choice is None:
                unresolved, chosen = True, o
            else:
                chosen = {"ours": o, "theirs": t, "base": b}[choice]
                if chosen != o:
                    taken.append((name, choice))
        if chosen is not None:
            merged[name] = chosen
    return merged, taken, unresolved
