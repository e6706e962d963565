"""Values as JSON can hold them: reports, check results and conflicts write them with :func:`jsonable`."""

from __future__ import annotations

from typing import Any, Mapping


def jsonable(v: Any) -> Any:
    """``v`` with every value JSON can hold as is, and the rest as text (bytes as hex)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.hex()
    return str(v)
