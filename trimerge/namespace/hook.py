"""Register trimerge's Lance Namespace without importing ``lance_namespace`` eagerly.

``lance_namespace`` takes ~1.5 s to import (its generated REST client), which every CLI command would
pay. :func:`install` registers ``"trimerge"`` at once when ``lance_namespace`` is already imported,
and otherwise the moment it is imported (LanceDB and pylance import it themselves), through a
one-shot import hook that wraps only that module's loader.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Sequence

__all__ = ["CLASS_PATH", "IMPL_NAME", "install"]

_TARGET = "lance_namespace"
#: The name trimerge registers itself under (``lance_namespace.connect("trimerge", ...)``).
IMPL_NAME = "trimerge"
#: Where the implementation lives (``lance_namespace.connect(CLASS_PATH, ...)`` needs no registration).
CLASS_PATH = "trimerge.namespace.service.TrimergeNamespace"


def _register(module: Any = None) -> None:
    (module or sys.modules[_TARGET]).register_namespace_impl(IMPL_NAME, CLASS_PATH)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any):
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        _register(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # one shot
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


def install() -> None:
    """Make ``lance_namespace.connect("trimerge", ...)`` work, now or once ``lance_namespace`` loads."""
    if _TARGET in sys.modules:
        _register()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
