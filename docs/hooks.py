"""MkDocs hook: the docstrings use Sphinx roles (``:class:`Repository```); the API pages render them as
plain code, without the role's name (``Repository``)."""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:py:)?(?:meth|class|func|mod|attr|data|exc|obj|const|ref|any):(<code>)~?")


def on_page_content(html: str, **kwargs: object) -> str:
    return ROLE.sub(r"\1", html)
