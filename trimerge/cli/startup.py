"""What the ``trimerge`` process does before its first command: keep pandas out of its start.

pyarrow asks whether pandas is installed the first time it converts a Python value (``pa.scalar``,
``pa.array``; ``import lance`` does, through ``pyarrow.dataset``) — by importing it, which takes
0.5-0.9 s of a command that otherwise reads a three-row table in about 0.5 s, whenever pandas happens
to be installed (the core install does not bring it; the test and Spark extras do). No command
of the command line hands pyarrow a pandas object, so :func:`install` makes pandas look absent (an
import finder that says "no module named pandas", as pyarrow, Lance and polars expect of an optional
dependency) — until pyspark, the one dependency that needs it, is imported: then pandas is
importable again, and pyarrow told so.

Only the console entry point installs this (:func:`trimerge.cli.app.main`); a program that imports
trimerge, or runs the command group in-process, keeps pandas as it is.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Sequence

#: Imported only by commands that run Spark, which needs pandas (pyarrow's conversions for it).
NEEDS_PANDAS = ("pyspark",)


class PandasHider(importlib.abc.MetaPathFinder):
    """Says pandas is not installed, until a module that needs it is first imported."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden from the trimerge command line)", name=name)
        if name in NEEDS_PANDAS:
            unhide()
        return None  # any other import goes on as usual


def install() -> None:
    """Hide pandas from this process until something that needs it is imported (once; nothing
    to do where pandas or pyarrow is imported already)."""
    if any(m in sys.modules for m in ("pandas", "pyarrow", *NEEDS_PANDAS)) or \
            any(isinstance(f, PandasHider) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, PandasHider())


def unhide() -> None:
    """Make pandas importable again; if pyarrow has already decided it is absent, it learns
    otherwise now (its own next look, with pandas importable)."""
    hidden = any(isinstance(f, PandasHider) for f in sys.meta_path)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, PandasHider)]
    shim = getattr(sys.modules.get("pyarrow.lib"), "_pandas_api", None)
    if hidden and shim is not None:
        try:
            shim.pd  # pyarrow looks again: imports pandas, and uses it from then on
        except ImportError:  # not installed after all
            pass
