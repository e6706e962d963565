"""Reprs and notebook HTML: kept at this path for callers; the module lives in
:mod:`trimerge.lineage.display` (it imports nothing of the packages whose objects it draws)."""

from trimerge.lineage.display import *  # noqa: F401,F403
from trimerge.lineage.display import __all__ as __all__  # noqa: F401
