"""Addresses: one string naming repository + ref + table (trimerge's ``lakefs://REPO/REF/KEY``).

Grammar::

    address  := [ repository "::" ] ref "::" [ table ]
    ref      := a ref expression (branch, tag, commit id or prefix, with ^/~ steps)
    table    := identifier

Examples: ``main::flights``, ``main~2^2::flights``, ``/data/repo::v1::airports``,
``s3://bucket/repo::feature/x::planes``. Refs and table names never contain ':' so the string is
split at its last two ``::``: whatever precedes them, colons included, is the repository.
"""

from __future__ import annotations

from dataclasses import dataclass

from trimerge.lineage.errors import RefSyntaxError
from trimerge.lineage.history.names import validate_table_name
from trimerge.lineage.errors import InvalidNameError

SEPARATOR = "::"


@dataclass(frozen=True)
class Address:
    repository: str | None
    ref: str | None
    table: str | None

    def __str__(self) -> str:
        head = f"{self.repository}{SEPARATOR}" if self.repository is not None else ""
        return f"{head}{self.ref or ''}{SEPARATOR}{self.table or ''}"


def is_address(text: str) -> bool:
    return isinstance(text, str) and SEPARATOR in text


def parse_address(text: str) -> Address:
    """Parse ``[repo::]ref::[table]``; raises :class:`RefSyntaxError` on malformed input."""
    if not isinstance(text, str) or SEPARATOR not in text:
        raise RefSyntaxError(f"not an address: {text!r} (expected [REPOSITORY::]REF::TABLE)")
    parts = text.rsplit(SEPARATOR, 2)
    if len(parts) == 2:
        repository, ref, table = None, parts[0], parts[1]
    else:
        repository, ref, table = parts
        if repository == "":
            raise RefSyntaxError(f"address {text!r}: empty repository before '::'")
    if ref == "" or ":" in ref:
        raise RefSyntaxError(f"address {text!r}: missing or malformed ref")
    if table:
        try:
            validate_table_name(table)
        except InvalidNameError as exc:
            raise RefSyntaxError(f"address {text!r}: {exc}") from None
    return Address(repository, ref, table or None)
