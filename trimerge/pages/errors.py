"""What a page answers when it cannot show what was asked: a typed error and its HTTP status.

The statuses are the ones the Lance namespace of ``trimerge serve`` uses for the same fault (an
unknown ref or table: 404; bad input: 400; not signed in: 401; a token that may not: 403; a lost
race or a conflict: 409), so a script that reads both sees one convention.
"""

from __future__ import annotations

from trimerge.lineage.errors import (
    AlreadyExistsError,
    ConcurrentWriteError,
    InternalError,
    NotFoundError,
    ReadOnlyRefError,
    TrimergeError,
)

__all__ = ["BadRequestError", "ForbiddenError", "MethodNotAllowedError", "PageError", "PageNotFoundError",
           "SignInRequiredError", "TooLongError", "http_status"]


class PageError(TrimergeError):
    """A page cannot be shown as asked; :attr:`status` is the HTTP status of the answer."""

    status = 400


class BadRequestError(PageError):
    """A query parameter or form field is malformed (not a number, empty, out of range)."""

    status = 400


class PageNotFoundError(PageError):
    """No such page: an unknown address, request id, or a page number past the end."""

    status = 404


class SignInRequiredError(PageError):
    """The server has tokens and the browser has no live session (never signed in, expired, signed out)."""

    status = 401


class ForbiddenError(PageError):
    """The signed-in token may not do this (a read token's action, a branch outside its glob, a forged
    form without the session's CSRF token)."""

    status = 403


class MethodNotAllowedError(PageError):
    """A page asked with a method it does not answer (the pages answer GET, and POST for forms)."""

    status = 405


class TooLongError(PageError):
    """The address's query string is longer than any page needs."""

    status = 414


def http_status(exc: BaseException) -> int:
    """The status of a page that failed with ``exc``: its own for page errors, else by kind."""
    if isinstance(exc, PageError):
        return exc.status
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, (AlreadyExistsError, ConcurrentWriteError)):
        return 409
    if isinstance(exc, ReadOnlyRefError):
        return 409
    if isinstance(exc, InternalError):
        return 500
    if isinstance(exc, TrimergeError):
        return 409 if exc.exit_code == 1 else 400  # exit 1: refused by a rule (a conflict, a gate)
    return 500
