"""Validation of branch, tag and table names.

Branch names follow the Lance branch spec's seven rules, tag names its five rules. On top of the
spec we reject what pylance 14 accepts but then mishandles: segments that collide with Lance's own
layout inside ``tree/`` (deleting branch ``x/data`` destroys branch ``x``'s data files), names that
are unsafe as file names, and non-ASCII tag names (they break ``tags.list()`` for the whole
dataset). Every error names the rule that was broken.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from trimerge.lineage.errors import InvalidNameError

MAIN = "main"
#: Not a branch: the current one (as ``trimerge switch`` set it), in every ref and ``branch=`` argument.
HEAD = "HEAD"
#: Internal branches: hidden from listings, not creatable by users.
SCHEMA_LOCK_BRANCH = "__schema_apply_lock__"
INTERNAL_BRANCHES = frozenset({SCHEMA_LOCK_BRANCH})
#: First segment of the temporary branches trimerge creates and removes itself (a rebase's replays,
#: scratch transactions). No user can create a name with a segment ``__x__``, so cleaning these up
#: can never touch a user's branch.
TEMPORARY_SPACE = "__trimerge__"
# Lease names of scratch transactions (gc sweeps their leftovers); older releases used the second.
SCRATCH_PREFIX = f"{TEMPORARY_SPACE}/scratch/"
SCRATCH_PREFIXES = (SCRATCH_PREFIX, "__scratch_")
# Temporary branches the running code may write and resolve like branches (see ``addressing``).
_ADDRESSABLE: ContextVar[frozenset[str]] = ContextVar("trimerge_addressable_temporaries", default=frozenset())

# Directory names Lance itself uses inside a dataset or branch directory.
RESERVED_SEGMENTS = frozenset({"data", "_versions", "_deletions", "_transactions", "_indices", "_refs", "tree"})
_SEGMENT_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
_TAG_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Longest name we allow: branch names become directory paths and tag names file names.
MAX_NAME_LENGTH = 200


def validate_branch_name(name: str, *, allow_internal: bool = False, existing: bool = False) -> str:
    """Return ``name`` if it is a valid graph-branch name, else raise :class:`InvalidNameError`.
    ``existing``: the name of a branch that may predate the reservation of segments ``__x__``
    (older versions reserved only whole names of that form), so such a segment is accepted."""
    if not isinstance(name, str):
        raise InvalidNameError(f"branch name must be a string, not {type(name).__name__}")
    if name == "":
        raise InvalidNameError("invalid branch name '': rule 1: a branch name cannot be empty")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidNameError(f"invalid branch name {name!r}: rule 2: cannot start or end with '/'")
    if "//" in name:
        raise InvalidNameError(f"invalid branch name {name!r}: rule 3: cannot contain consecutive '//'")
    if ".." in name or "\\" in name:
        raise InvalidNameError(f"invalid branch name {name!r}: rule 4: cannot contain '..' or '\\'")
    for segment in name.split("/"):
        if not segment.isascii() or not _SEGMENT_CHARS.fullmatch(segment):
            raise InvalidNameError(
                f"invalid branch name {name!r}: rule 5: segment {segment!r} may contain only ASCII letters, "
                "digits, '.', '-' and '_'"
            )
    if name.endswith(".lock"):
        raise InvalidNameError(f"invalid branch name {name!r}: rule 6: cannot end with '.lock'")
    if name == MAIN:
        raise InvalidNameError("invalid branch name 'main': rule 7: 'main' is reserved for the default branch")
    if name == HEAD:
        raise InvalidNameError("invalid branch name 'HEAD': it always means the current branch")
    for segment in name.split("/"):
        if segment in RESERVED_SEGMENTS:
            raise InvalidNameError(
                f"invalid branch name {name!r}: segment {segment!r} collides with Lance's storage layout "
                f"(reserved: {', '.join(sorted(RESERVED_SEGMENTS))})"
            )
        if segment in (".",) or segment.startswith(".") or segment.endswith("."):
            raise InvalidNameError(
                f"invalid branch name {name!r}: segment {segment!r} cannot start or end with '.' "
                "(hidden or unsafe on a filesystem)"
            )
        if segment.endswith(".lock"):
            raise InvalidNameError(f"invalid branch name {name!r}: segment {segment!r} cannot end with '.lock'")
    # Stored as one file name with '/' as %2F: keep it under the usual 255-byte limit.
    if len(name) + 2 * name.count("/") > MAX_NAME_LENGTH:
        raise InvalidNameError(
            f"invalid branch name: longer than {MAX_NAME_LENGTH} characters (each '/' counts as 3)")
    whole = name.startswith("__") and name.endswith("__")
    if (whole or not existing) and any(s.startswith("__") and s.endswith("__") for s in name.split("/")):
        if not (allow_internal and is_internal_branch(name)):
            raise InvalidNameError(f"invalid branch name {name!r}: names and segments of the form __x__ are reserved "
                                   "for trimerge's internal branches")
    return name


def validate_tag_name(name: str) -> str:
    """Return ``name`` if it is a valid tag name, else raise :class:`InvalidNameError`."""
    if not isinstance(name, str):
        raise InvalidNameError(f"tag name must be a string, not {type(name).__name__}")
    if name == "":
        raise InvalidNameError("invalid tag name '': rule 1: a tag name cannot be empty")
    if name == HEAD:
        raise InvalidNameError("invalid tag name 'HEAD': it always means the current branch")
    if not name.isascii():
        raise InvalidNameError(f"invalid tag name {name!r}: only ASCII characters are allowed (pylance breaks on others)")
    if not _TAG_CHARS.fullmatch(name):
        raise InvalidNameError(f"invalid tag name {name!r}: rule 2: may contain only letters, digits, '.', '-' and '_'")
    if name.startswith(".") or name.endswith("."):
        raise InvalidNameError(f"invalid tag name {name!r}: rule 3: cannot start or end with '.'")
    if name.endswith(".lock"):
        raise InvalidNameError(f"invalid tag name {name!r}: rule 4: cannot end with '.lock'")
    if ".." in name:
        raise InvalidNameError(f"invalid tag name {name!r}: rule 5: cannot contain consecutive '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidNameError(f"invalid tag name: longer than {MAX_NAME_LENGTH} characters")
    return name


def validate_table_name(name: str) -> str:
    """Table names are identifiers (letters, digits, '_'; not starting with a digit)."""
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name) or len(name) > 128:
        raise InvalidNameError(
            f"invalid table name {name!r}: use letters, digits and '_', starting with a letter or '_' (at most 128)"
        )
    return name


def is_internal_branch(name: str) -> bool:
    """Whether ``name`` is one of trimerge's own branches: hidden from listings and users."""
    return name in INTERNAL_BRANCHES or is_temporary_branch(name)


def is_temporary_branch(name: object) -> bool:
    return isinstance(name, str) and name.startswith(TEMPORARY_SPACE + "/")


def temporary_branch_name(kind: str, ulid: str) -> str:
    """The name of a temporary branch of ``kind`` (``rebase``, ``scratch``) with id ``ulid``."""
    return f"{TEMPORARY_SPACE}/{kind}/{ulid.lower()}"


def is_addressable(name: object) -> bool:
    """Whether the running code may write and resolve temporary branch ``name`` (see :func:`addressing`)."""
    return isinstance(name, str) and name in _ADDRESSABLE.get()


@contextmanager
def addressing(name: str) -> Iterator[None]:
    """Within the block (this thread of control only), trimerge's own temporary branch ``name``
    resolves and takes writes like a branch — a rebase cherry-picks onto its replay branch through
    the ordinary merge code — while listings and every other caller still never see it."""
    token = _ADDRESSABLE.set(_ADDRESSABLE.get() | {name})
    try:
        yield
    finally:
        _ADDRESSABLE.reset(token)


def is_branch_name(name: object) -> bool:
    """Whether ``name`` could name a user branch (a valid, non-internal branch name)."""
    if is_addressable(name):
        return True
    if not isinstance(name, str) or is_internal_branch(name):
        return False
    if name == MAIN:
        return True
    try:
        validate_branch_name(name, existing=True)
    except InvalidNameError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- columns
#: Names Lance gives its own columns; a user column with one of them could never be read back.
RESERVED_COLUMNS = frozenset({"_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version",
                              "_row_last_updated_at_version", "_distance", "_score", "_relevance_score"})
MAX_COLUMN_BYTES = 256


def validate_column_name(name: object) -> str:
    """Return ``name`` if it can be a column name, else raise :class:`InvalidNameError`.

    Rules: a non-empty string of at most 256 UTF-8 bytes, valid Unicode, no control characters, no
    backtick (it quotes names in filters) and no '.' (it separates nested fields), and none of
    Lance's own names (``_rowid``, ``_rowaddr``, anything starting with ``_row``…)."""
    if not isinstance(name, str):
        raise InvalidNameError(f"column name must be a string, not {type(name).__name__}")
    shown = _shown(name)
    if name == "":
        raise InvalidNameError("invalid column name '': a column name cannot be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidNameError(f"invalid column name {shown}: not valid Unicode") from None
    if size > MAX_COLUMN_BYTES:
        raise InvalidNameError(f"invalid column name {shown}: longer than {MAX_COLUMN_BYTES} bytes")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidNameError(f"invalid column name {shown}: control characters are not allowed")
    if "`" in name or "." in name:
        raise InvalidNameError(f"invalid column name {shown}: '`' and '.' are not allowed")
    if name in RESERVED_COLUMNS or name.startswith("_row"):
        raise InvalidNameError(f"invalid column name {shown}: reserved by Lance")
    return name


def validate_column_names(names: "list[str] | tuple[str, ...]") -> None:
    """Every name valid, and no two equal ignoring case (SQL filters do not tell them apart)."""
    seen: dict[str, str] = {}
    for name in names:
        validate_column_name(name)
        if name.lower() in seen:
            other = seen[name.lower()]
            if other == name:
                raise InvalidNameError(f"duplicate column name {_shown(name)}")
            raise InvalidNameError(f"column names {_shown(other)} and {_shown(name)} differ only in case")
        seen[name.lower()] = name


def _shown(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."
