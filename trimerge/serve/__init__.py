"""``trimerge serve``: a repository's refs and tables over HTTP, as a Lance REST Namespace.

Lance clients in any process or language (pylance's ``lance.namespace.RestNamespace``, LanceDB's
``connect_namespace("rest", ...)``, LanceDB's other SDKs) open a ref's tables exactly as the
in-process :class:`~trimerge.namespace.service.TrimergeNamespace` gives them: child namespaces are
refs (``[REF]``), ``[]`` is the server's ref; a client's write (``create_table_version``) becomes a
trimerge commit on a branch or is refused. Clients read and write the table data in storage
themselves: the server hands out locations and versions, and storage options only when told to.

Needs the ``serve`` extra (``pip install 'trimerge[serve]'``: starlette and uvicorn).
"""

from __future__ import annotations

from trimerge.serve.config import ServeConfig
from trimerge.serve.runner import ServeError, serve
from trimerge.serve.tokens import Grant, TokenFileError, load_tokens, parse_tokens

# The ASGI application (:func:`trimerge.serve.app.build_app`) is imported only to serve: its stack
# (starlette, uvicorn, lance_namespace) takes seconds to import.
__all__ = ["Grant", "ServeConfig", "ServeError", "TokenFileError", "load_tokens", "parse_tokens", "serve"]
