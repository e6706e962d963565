"""The web view of ``trimerge serve``: history, diffs, blame, tables and merge requests as pages
under ``/ui/``, served beside the Lance namespace (``--no-ui`` leaves them out).

Pages are rendered on the server from the Jinja2 templates in ``templates/`` (autoescaped) with
the small stylesheet and script in ``static/``: nothing is loaded from another origin and there is
no build step. Each page asks the repository what the matching CLI command asks
(:mod:`~trimerge.pages.history`: home, log, commit; :mod:`~trimerge.pages.compare`: diffs;
:mod:`~trimerge.pages.browse`: table and blame; :mod:`~trimerge.pages.review`: merge requests),
one page of rows at a time. Sign-in, sessions and CSRF: :mod:`~trimerge.pages.app`,
:mod:`~trimerge.pages.sessions`; the tokens and their branch globs are ``trimerge serve``'s.

May import: serve (its config and tokens), the facade's layers below. Needs the ``serve`` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimerge.serve.config import ServeConfig

__all__ = ["pages_routes"]


def pages_routes(config: "ServeConfig") -> list[Any]:
    """The web view's Starlette routes for ``config`` (put them in ``config.routes``)."""
    from trimerge.pages.app import pages_routes as build

    return build(config)
