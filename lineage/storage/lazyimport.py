"""Modules that annotations name, imported on first use.

Modules that keep heavy imports (pyarrow, Lance) out of their startup name them only under
``TYPE_CHECKING``; then ``typing.get_type_hints`` on their functions fails with ``NameError``.
Binding the name at runtime to a :func:`lazy_module` instead makes those hints resolve (to the real
classes, importing the module then) while ``import trimerge`` stays as fast as it was::

    if TYPE_CHECKING:
        import pyarrow as pa
    else:
        pa = lazy_module("pyarrow")
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class LazyModule(types.ModuleType):
    """Stands for a module until an attribute is read; then imports it and answers from it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__dict__["_lazy_target"])
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_target']!r}>"


def lazy_module(name: str) -> Any:
    """The module ``name`` if it is imported already, else a :class:`LazyModule` for it."""
    return sys.modules.get(name) or LazyModule(name)
