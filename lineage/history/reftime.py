"""Refs at a time: ``NAME@{TIME}`` and ``Repository.read(..., as_of=)``, as git's ``main@{date}``.

``TIME`` is an ISO-8601 date or time (``2026-12-02``, ``2026-12-02T08:28``,
``2026-12-02 08:28:00+01:00``, ``...Z``), or relative: ``now``, ``yesterday``, ``N
seconds|minutes|hours|days|weeks ago``. A time without a zone is local time, as in git.

A branch's value at a time comes from its reflog, as git's does: the value of its newest move at
or before that time. Where no move is recorded then (a reflog expired by gc, a tag, a
remote-tracking ref or a commit id), commit times decide: the newest commit of the ref's
first-parent history created at or before that time. A time before the ref existed (or before its
first commit) or in the future names nothing: one clear :class:`RefNotFoundError`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable

from trimerge.lineage.errors import RefNotFoundError, RefSyntaxError

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

__all__ = ["AT_TIME", "as_of_ref", "parse_when", "value_at"]

#: ``NAME@{TIME}`` (``NAME@{N}``, digits only, is a reflog position and matched first).
AT_TIME = re.compile(r"(?P<name>[^{}]+)@\{(?P<when>[^{}]{1,64})\}")
_RELATIVE = re.compile(r"(?P<n>[0-9]{1,9})[ .]+(?P<unit>second|minute|hour|day|week)s?[ .]+ago")
_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
#: Clocks of writers and readers differ a little: a time this far ahead still means "now".
_SKEW = timedelta(seconds=5)


def _local(moment: datetime) -> datetime:
    return moment.astimezone() if moment.tzinfo is None else moment  # naive: local time, as git


def parse_when(text: str, now: datetime | None = None, *, ref: str = "") -> datetime:
    """The moment ``text`` names (timezone-aware); :class:`RefSyntaxError` when it names none
    (``ref``: the name before ``@{``, for the message)."""
    now = now or datetime.now(timezone.utc)
    spelled = text.strip().lower()
    if spelled == "now":
        return now
    if spelled == "yesterday":
        return now - timedelta(days=1)
    rel = _RELATIVE.fullmatch(spelled)
    if rel is not None:
        seconds = int(rel.group("n")) * _UNITS[rel.group("unit")]
        if seconds > 200 * 365 * 86400:
            raise RefSyntaxError(f"{ref}@{{{text}}}: {rel.group('n')} {rel.group('unit')}s is too far back")
        return now - timedelta(seconds=seconds)
    iso = text.strip()
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise RefSyntaxError(f"{ref}@{{{text}}} is no time: use ISO-8601 (2026-12-02T08:28:00, a date, a zone as "
                             "+01:00 or Z) or 'N hours|days|weeks ago', 'yesterday'") from None
    return _local(moment)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def value_at(repo: "Repository", name: str, when: datetime, resolve_name: Callable[[str], str]) -> str:
    """The commit ``name`` named at ``when`` (see the module's docstring); ``resolve_name``
    resolves a plain ref name (no ``@{}``) to its commit now."""
    when = _local(when)
    spelled = f"{name}@{{{_stamp(when)}}}"
    now = datetime.now(timezone.utc)
    if when > now + _SKEW:
        raise RefNotFoundError(f"{spelled}: that time is in the future (now: {_stamp(now)})")
    branch = repo.current_branch if name == "HEAD" else name
    current = repo.refs.branch(branch)
    if current is not None:
        entries = repo.refs.reflog.entries(branch, current.commit_id)
        for e in entries:  # newest first
            if e.time <= when:
                if e.new is None:
                    raise RefNotFoundError(f"{spelled}: branch {branch!r} did not exist then")
                return e.new
        if entries and entries[-1].old is None:  # the reflog goes back to the branch's creation
            raise RefNotFoundError(f"{spelled}: branch {branch!r} was created later, at "
                                   f"{_stamp(entries[-1].time)}")
    tip = current.commit_id if current is not None else resolve_name(name)
    cid: str | None = tip
    while cid is not None:  # first parents: the ref's own history, newest first
        c = repo.commit(cid)
        if c.created_at <= when:
            return c.id
        cid = c.parents[0] if c.parents else None
    raise RefNotFoundError(f"{spelled}: before the first commit of {name!r}")


def as_of_ref(ref: str, as_of: object) -> str:
    """``read(..., ref, as_of=)`` as a ref expression: ``REF@{TIME}`` (``ref`` a branch, tag or
    commit name, no steps; ``as_of`` a datetime, naive meaning local time, or ISO-8601 text)."""
    from trimerge.lineage.errors import InvalidOperationError

    if isinstance(as_of, str):
        as_of = parse_when(as_of, ref=ref)
    if not isinstance(as_of, datetime):
        raise InvalidOperationError(f"as_of= takes a datetime (or ISO-8601 text), not {type(as_of).__name__}")
    if any(ch in ref for ch in "^~{}"):
        raise InvalidOperationError(f"as_of= needs a branch, tag or commit name as ref, not the expression {ref!r}")
    return f"{ref}@{{{_local(as_of).isoformat()}}}"
