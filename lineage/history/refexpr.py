"""Ref expressions: ``<ref>`` followed by git-style ``^``/``^N``/``~``/``~N`` steps.

Parsing is pure (no I/O). Resolution looks the base name up in a :class:`RefNamespace` in
lakeFS order (full commit id, branch, tag, unique id prefix) and then walks the steps over a
:class:`~trimerge.lineage.history.graph.CommitGraph`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from trimerge.lineage.errors import AmbiguousRefError, NoSuchAncestorError, RefNotFoundError, RefSyntaxError
from trimerge.lineage.history.graph import CommitGraph

__all__ = [
    "RefExpr",
    "RefNamespace",
    "Step",
    "apply_steps",
    "parse_ref_expr",
    "resolve",
    "resolve_base",
]

_STEP_CHARS = "^~"
_FORBIDDEN_IN_BASE = frozenset("^~:?*[\\")
#: Names made only of these need no character-by-character check (commit ids, most branch names).
_PLAIN_BASE = re.compile(r"[A-Za-z0-9._/@-]*\Z")
_DIGITS = frozenset("0123456789")  # str.isdigit would also accept other scripts' digits
# Far beyond any history length; stops absurd inputs before int() and the walk see them.
_MAX_STEP_DIGITS = 18
_MIN_PREFIX = 4
_AT_N = re.compile(r"(?P<name>.+)@\{(?P<n>[0-9]{1,9})\}")  # NAME@{N}: a reflog entry
_AT_TIME = re.compile(r"(?P<name>[^{}]+)@\{(?P<when>[^{}]{1,64})\}")  # NAME@{TIME} (lineage.history.reftime)
_FULL_ID = re.compile(r"[0-9a-f]{64}")
_ID_PREFIX = re.compile(rf"[0-9a-f]{{{_MIN_PREFIX},63}}")
_SHORT = 7  # id length shown in messages
_MAX_LISTED_CANDIDATES = 10
#: Fully spelled refs (git's): a branch, a tag, a remote-tracking ref ``refs/remotes/REMOTE/BRANCH``.
HEADS_PREFIX, TAGS_PREFIX, REMOTES_PREFIX = "refs/heads/", "refs/tags/", "refs/remotes/"
QUALIFIED_PREFIXES = (HEADS_PREFIX, TAGS_PREFIX, REMOTES_PREFIX)


@dataclass(frozen=True)
class Step:
    """One ``^N`` (N-th parent) or ``~N`` (N-th first-parent ancestor) step.

    ``text`` is the step as written (``"^"``, ``"~01"``) for error messages; it does not take
    part in equality, so ``^``, ``^1`` and ``^01`` are equal steps.
    """

    kind: Literal["^", "~"]
    n: int
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        """Canonical form: the bare kind for N == 1, else kind and N without leading zeros."""
        return self.kind if self.n == 1 else f"{self.kind}{self.n}"


@dataclass(frozen=True)
class RefExpr:
    """A parsed ref expression: a base name and the steps applied to it, left to right."""

    base: str
    steps: tuple[Step, ...] = ()

    def __str__(self) -> str:
        """Canonical text; parsing it gives back an equal expression."""
        return self.base + "".join(str(s) for s in self.steps)


class RefNamespace(Protocol):
    """What resolving a ref name needs to know about a repository."""

    def commit_exists(self, commit_id: str) -> bool:
        """Whether a commit with this full id exists."""
        ...

    def branch_tip(self, name: str) -> str | None:
        """Head commit of branch ``name``, or None if there is no such branch."""
        ...

    def tag_target(self, name: str) -> str | None:
        """Commit tag ``name`` points at, or None if there is no such tag."""
        ...

    def ids_with_prefix(self, prefix: str) -> list[str]:
        """All commit ids starting with ``prefix`` (lowercase hex)."""
        ...


def _syntax_error(text: str, pos: int, problem: str) -> RefSyntaxError:
    return RefSyntaxError(f"invalid ref expression {text!r}: {problem} at position {pos}")


def _base_char_problem(ch: str) -> str | None:
    if ch.isspace():
        return f"whitespace {ch!r} is not allowed"
    if unicodedata.category(ch) == "Cc":
        return f"control character {ch!r} is not allowed"
    if ch in _FORBIDDEN_IN_BASE:
        return f"character {ch!r} is not allowed in a ref name"
    return None


def parse_ref_expr(text: str) -> RefExpr:
    """Parse ``text`` into a :class:`RefExpr` following git's ``^``/``~`` grammar.

    ``<ref>^`` and ``<ref>~`` mean step 1; ``^N``/``~N`` take an unsigned decimal N (leading
    zeros allowed, no signs, no spaces); ``^0``/``~0`` are the commit itself. The base is the
    text before the first ``^`` or ``~``; it must be non-empty and free of whitespace,
    control characters and ``^ ~ : ? * [ \\``. Raises :class:`RefSyntaxError` naming the
    offending position (0-based).
    """
    if not isinstance(text, str) or not text:
        raise RefSyntaxError("invalid ref expression '': empty" if text == "" else
                             f"a ref expression must be text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RefSyntaxError(f"invalid ref expression {text!r}: not valid Unicode") from None
    cut = len(text)
    for i, ch in enumerate(text):
        if ch in _STEP_CHARS:
            cut = i
            break
    base = text[:cut]
    if not base:
        raise _syntax_error(text, 0, f"missing ref name before {text[0]!r}")
    timed = _AT_TIME.fullmatch(base)  # NAME@{TIME}: the time is checked when it is read
    checked = timed.group("name") if timed is not None else base
    for i, ch in enumerate(checked if not _PLAIN_BASE.match(checked) else ""):
        problem = _base_char_problem(ch)
        if problem:
            raise _syntax_error(text, i, problem)
    if timed is not None:
        for i, ch in enumerate(timed.group("when"), start=len(checked) + 2):
            if unicodedata.category(ch) == "Cc":
                raise _syntax_error(text, i, f"control character {ch!r} is not allowed")

    steps: list[Step] = []
    pos = cut
    while pos < len(text):
        kind = text[pos]
        if kind not in _STEP_CHARS:
            raise _syntax_error(text, pos, f"unexpected {kind!r} (expected '^', '^N', '~' or '~N')")
        end = pos + 1
        while end < len(text) and text[end] in _DIGITS:
            end += 1
        digits = text[pos + 1 : end]
        if not digits and end < len(text) and text[end] in "+-":
            raise _syntax_error(text, end, f"signed step number after {kind!r} (N must be unsigned)")
        if len(digits.lstrip("0")) > _MAX_STEP_DIGITS:
            raise _syntax_error(text, pos + 1, f"step number {digits[:20]}... is too large")
        n = int(digits) if digits else 1
        steps.append(Step(kind, n, text[pos:end]))  # type: ignore[arg-type]
        pos = end
    return RefExpr(base, tuple(steps))


def _qualified(name: str, ns: RefNamespace) -> str | None:
    """The commit a fully spelled ref names (git's ``refs/heads/B``, ``refs/tags/T``,
    ``refs/remotes/R/B``), looked up in that kind of ref only; None when ``name`` is not spelled so
    or names nothing there (then, as in git, it is tried as a short name: a branch may be called so)."""
    if not name.startswith(QUALIFIED_PREFIXES):
        return None
    if name.startswith(REMOTES_PREFIX):
        short = name[len(REMOTES_PREFIX):]
        tracking = getattr(ns, "tracking_tip", None)
        return tracking(short) if tracking is not None and "/" in short else None
    if name.startswith(HEADS_PREFIX):
        short = name[len(HEADS_PREFIX):]
        return ns.branch_tip(short) if short and short != "HEAD" else None  # HEAD is no branch's name
    return ns.tag_target(name[len(TAGS_PREFIX):]) if len(name) > len(TAGS_PREFIX) else None


def resolve_base(name: str, ns: RefNamespace) -> str:
    """Resolve a ref name (no steps) to a full commit id.

    A fully spelled name is looked up in its kind of ref first, as in git: ``refs/heads/B`` is
    branch B, ``refs/tags/T`` tag T and ``refs/remotes/R/B`` the remote-tracking ref ``R/B`` — the
    unambiguous way to name one when a local branch is called ``R/B``.
    ``NAME@{N}`` is the N-th previous value of ``NAME`` in its reflog (when ``ns`` has a
    ``reflog_value(name, n)`` method); ``NAME@{TIME}`` the value NAME had at an ISO-8601 time
    (when ``ns`` has ``value_at(name, datetime)``; :mod:`trimerge.lineage.history.reftime`). Otherwise, in lakeFS order: a full 64-hex commit id, then a branch, then a tag,
    then a remote-tracking ref ``REMOTE/BRANCH`` (when ``ns`` has ``tracking_tip(name)``), then a unique
    commit-id prefix of at least 4 hex digits. Hex ids are matched case-insensitively (like
    git). Raises :class:`AmbiguousRefError` (with ``candidates``) for a prefix matching
    several commits and :class:`RefNotFoundError` when nothing matches.
    """
    at = _AT_N.fullmatch(name)
    if at is not None and hasattr(ns, "reflog_value"):
        from trimerge.lineage.history.reflog import validate_log_name  # checked before any lookup touches storage

        return ns.reflog_value(validate_log_name(at.group("name")), int(at.group("n")))
    timed = _AT_TIME.fullmatch(name)
    if timed is not None and hasattr(ns, "value_at"):
        from trimerge.lineage.history.reftime import parse_when

        return ns.value_at(timed.group("name"), parse_when(timed.group("when"), ref=timed.group("name")))
    qualified = _qualified(name, ns)
    if qualified is not None:
        return qualified
    lowered = name.lower()
    if _FULL_ID.fullmatch(lowered) and ns.commit_exists(lowered):
        return lowered
    tip = ns.branch_tip(name)
    if tip is not None:
        return tip
    target = ns.tag_target(name)
    if target is not None:
        return target
    if "/" in name and hasattr(ns, "tracking_tip"):  # REMOTE/BRANCH: local branches and tags win, as in git
        tracked = ns.tracking_tip(name)
        if tracked is not None:
            return tracked
    if _ID_PREFIX.fullmatch(lowered):
        matches = sorted(ns.ids_with_prefix(lowered))
        if len(matches) == 1:
            return matches[0]
        if matches:
            listed = ", ".join(m[:12] for m in matches[:_MAX_LISTED_CANDIDATES])
            more = len(matches) - _MAX_LISTED_CANDIDATES
            if more > 0:
                listed += f" and {more} more"
            raise AmbiguousRefError(
                f"ref {name!r} is ambiguous: it is a prefix of {len(matches)} commit ids ({listed}); "
                "use more characters",
                candidates=matches,
            )
    hint = f" (commit-id prefixes need at least {_MIN_PREFIX} hex digits)" if len(name) < _MIN_PREFIX else ""
    raise RefNotFoundError(f"ref {name!r} not found: no commit id, branch, tag, remote-tracking ref or commit-id "
                           f"prefix matches{hint}")


def apply_steps(graph: CommitGraph, commit_id: str, steps: Sequence[Step], *, expr_text: str = "") -> str:
    """Walk ``steps`` from ``commit_id`` and return the commit reached.

    ``^N`` takes the N-th parent, ``~N`` follows first parents N times (N == 0: stay). Raises
    :class:`NoSuchAncestorError` naming the failing step when a commit has fewer parents than
    ``^N`` asks for or ``~N`` walks past a root.
    """
    where = expr_text or commit_id
    current = commit_id
    for step in steps:
        written = step.text or str(step)
        if step.kind == "^":
            if step.n == 0:
                continue
            parents = graph.parents(current)
            if step.n > len(parents):
                raise NoSuchAncestorError(
                    f"{where}: step {written!r} fails: commit {current[:_SHORT]} has {len(parents)} parent(s)"
                )
            current = parents[step.n - 1]
        else:
            for done in range(step.n):
                parents = graph.parents(current)
                if not parents:
                    raise NoSuchAncestorError(
                        f"{where}: step {written!r} fails: commit {current[:_SHORT]} is a root, "
                        f"reached after {done} of {step.n} generation(s)"
                    )
                current = parents[0]
    return current


def resolve(text: str, ns: RefNamespace, graph: CommitGraph) -> str:
    """Resolve a ref expression such as ``main~2^2`` to a full commit id."""
    expr = parse_ref_expr(text)
    return apply_steps(graph, resolve_base(expr.base, ns), expr.steps, expr_text=text)
