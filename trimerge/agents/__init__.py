"""Surfaces for coding agents: ``trimerge mcp``, the repository as a Model Context Protocol server.

:mod:`trimerge.agents.tools` holds what each tool does (bounded reads, scoped writes, one-line
errors) without the protocol; :mod:`trimerge.agents.mcp_server` serves those tools over stdio or
streamable HTTP through the official ``mcp`` SDK. Both need the ``serve`` extra
(``pip install 'trimerge[serve]'``); tokens and scopes are those of ``trimerge serve``
(:mod:`trimerge.serve.tokens`).
"""

from __future__ import annotations

__all__: list[str] = []
