"""Bearer tokens of ``trimerge serve``: the token file, and what each token may do.

The token file has one token a line; blank lines and lines starting with ``#`` are ignored::

    TOKEN [read|write [BRANCHES [ACTOR]]]

* ``TOKEN``: the secret a client sends as ``Authorization: Bearer TOKEN`` (at least 16 characters
  of letters, digits and ``-._~+/=``; each token once).
* ``read`` or ``write`` (default ``write``): a ``read`` token is refused every write
  (``create_table_version``: a LanceDB ``add``/``delete``/``update``/``merge_insert``/index).
* ``BRANCHES`` (default ``*``): a glob (``fnmatch``: ``*``, ``?``, ``[...]``; ``*`` also matches
  ``/``). A token with a glob other than ``*`` may name only the branches it matches and
  expressions built on them (``feat~1``, ``feat^2``, ``feat@{3}``); tags and commit ids name states
  on any branch, so they need ``*``.
* ``ACTOR`` (default: the server's user): the author of the commits this token's writes become:
  plain printable text (no control or formatting characters), at most :data:`MAX_ACTOR` characters.

Fields are separated by spaces and tabs; a line holding any other control or formatting character
is refused with its line number (lines end at ``\n`` only, so a stray ``\x1e`` or ``\u2028``
cannot make one line two).

Example::

    # analysts read everything; the ingest job writes to ingest/* only
    k7Gq2vS9xLm4pR8tWz3nB5cY  read
    Jd8sK2mQ9vX4wZ7pL3nR6tB1  write  ingest/*  ingest-bot
"""

from __future__ import annotations

import fnmatch
import hmac
import re
from dataclasses import dataclass
from pathlib import Path

from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.history.refexpr import parse_ref_expr

__all__ = ["MAX_ACTOR", "MIN_TOKEN_LENGTH", "Grant", "TokenFileError", "find_grant", "load_tokens", "parse_tokens",
           "ref_base"]

MIN_TOKEN_LENGTH = 16
#: Longest ACTOR a token may carry into commits.
MAX_ACTOR = 200
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/=]+")
_REFLOG = re.compile(r"(?P<name>.+)@\{[0-9]{1,9}\}")
_ACCESS = ("read", "write")
_FIELD_SEP = re.compile(r"[ \t]+")


class TokenFileError(ValueError):
    """The token file cannot be used (unreadable, a malformed line, no token)."""


@dataclass(frozen=True)
class Grant:
    """What one token may do."""

    token: str
    write: bool = True
    branches: str = "*"
    actor: str | None = None
    line: int = 0

    @property
    def label(self) -> str:
        """How the request log names the token: never the secret."""
        return self.actor or f"token#{self.line}"

    def may_name(self, ref: str, branches: "set[str]") -> bool:
        """Whether this token may name ``ref`` (``branches``: the repository's branch names)."""
        if self.branches == "*":
            return True
        base = ref_base(ref)
        return base in branches and fnmatch.fnmatchcase(base, self.branches)


def ref_base(ref: str) -> str:
    """The ref name an expression starts from: ``feat`` of ``feat~2``, ``feat^``, ``feat@{1}``."""
    try:
        base = parse_ref_expr(ref).base
    except TrimergeError:
        return ref
    found = _REFLOG.fullmatch(base)
    return found.group("name") if found else base


def parse_tokens(text: str, source: str = "token file") -> list[Grant]:
    grants: list[Grant] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        fields = _FIELD_SEP.split(line)  # (str.split() would also split at \x1c-\x1f and \u2028)
        where = f"{source} line {number}"
        bad = next((c for c in "".join(fields) if not c.isprintable()), None)
        if bad is not None:
            raise TokenFileError(f"{where}: a control or formatting character ({ascii(bad)}) in it: tokens, "
                                 f"branches and actors are plain printable text")
        if len(fields) > 4:
            raise TokenFileError(f"{where}: expected TOKEN [read|write [BRANCHES [ACTOR]]], got {len(fields)} fields")
        token = fields[0]
        if len(token) < MIN_TOKEN_LENGTH or not _TOKEN.fullmatch(token):
            raise TokenFileError(f"{where}: a token needs at least {MIN_TOKEN_LENGTH} characters of letters, digits "
                                 f"and -._~+/=")
        if token in seen:
            raise TokenFileError(f"{where}: the same token is on an earlier line")
        seen.add(token)
        access = fields[1] if len(fields) > 1 else "write"
        if access not in _ACCESS:
            raise TokenFileError(f"{where}: access must be 'read' or 'write', not {access!r}")
        branches = fields[2] if len(fields) > 2 else "*"
        actor = fields[3] if len(fields) > 3 else None
        if actor is not None and len(actor) > MAX_ACTOR:
            raise TokenFileError(f"{where}: an actor of {len(actor)} characters (at most {MAX_ACTOR})")
        grants.append(Grant(token, access == "write", branches, actor, number))
    if not grants:
        raise TokenFileError(f"{source}: no token in it (every request would be refused)")
    return grants


def load_tokens(path: str) -> list[Grant]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"--token-file {path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    return parse_tokens(text, f"--token-file {path}")


def find_grant(grants: list[Grant], header: str | None) -> Grant | None:
    """The grant of an ``Authorization: Bearer TOKEN`` header, compared in constant time."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    found = None
    for grant in grants:  # every token is compared, so the time does not tell which one nearly matched
        if hmac.compare_digest(grant.token.encode(), token.encode("utf-8", "replace")):
            found = grant
    return found
