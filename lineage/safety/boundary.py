"""The public API's edge: what may leave it is a result or a :class:`TrimergeError`.

Two kinds of failure are translated where a call leaves trimerge (:func:`guarded`, applied to the
public classes and functions with :func:`guard_class`):

- **the environment** — a full disk, a quota, a read-only file system, permission denied, too many
  open files, an I/O error — from trimerge's own files or from inside Lance (which reports them
  as ``LanceError(IO): … (os error 28), …/writer.rs:254:9``): :class:`EnvironmentFailureError`, a
  :class:`StorageError` (and still an ``OSError``, with its ``errno``) that says what ran out, in
  words, without Lance's source paths. The write it interrupted published nothing: a commit is
  only visible once its branch document is swapped, which is the last step. Lance's own memory
  pool running out (``Resources exhausted``) is a :class:`ResourceExhaustedError` that names the
  setting raising it (``LANCE_MEM_POOL_SIZE``), never a problem of the data.
- **a panic** inside a Rust dependency (``pyo3_runtime.PanicException``, a ``BaseException`` that
  ``except Exception`` does not catch): :class:`InternalError` (exit 4), its cause chained for
  ``TRIMERGE_DEBUG=1``.

A table file Lance cannot find was removed under the read by gc: retryable
(:class:`ConcurrentWriteError`) — unless its name could never be a file of the repository (a
``..``, ``/`` or ``\\`` inside a manifest's file name, :func:`not_a_file_name`): then the
repository is damaged or forged (:class:`CorruptRepositoryError`, exit 2), and a retry cannot help.
"""

from __future__ import annotations

import errno
import functools
import inspect
import re
from typing import Any, Callable, TypeVar
from urllib.parse import unquote

from trimerge.lineage.errors import (ConcurrentWriteError, CorruptRepositoryError, EnvironmentFailureError,
                                     InternalError, TrimergeError, lance_message, resource_exhausted)

F = TypeVar("F", bound=Callable[..., Any])

#: Failures of the machine, not of trimerge, in words.
ENVIRONMENT_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                      errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
                      errno.EROFS: "read-only file system", errno.EIO: "input/output error",
                      errno.EMFILE: "too many open files", errno.ENFILE: "too many open files in the system",
                      errno.ENAMETOOLONG: "file name too long", errno.ENOMEM: "out of memory"}
_REMEDY = {errno.ENOSPC: "free some space and retry", errno.EDQUOT: "free some space or raise the quota and retry",
           errno.EMFILE: "raise the open-file limit (ulimit -n) and retry",
           errno.ENFILE: "close other programs' files and retry", errno.ENOMEM: "free some memory and retry"}


def environment_errno(exc: BaseException) -> int | None:
    """The errno of a machine failure: Python's own, or the ``(os error N)`` Lance reports in its text."""
    code = getattr(exc, "errno", None)
    if code is None and isinstance(exc, (OSError, RuntimeError, ValueError)):
        found = re.search(r"\(os error (\d+)\)", str(exc))
        code = int(found.group(1)) if found else None
    return code if code in ENVIRONMENT_ERRORS else None


def describe(exc: BaseException) -> str:
    """Why an operation failed, in words (``no space left on the device``), without Rust paths."""
    code = environment_errno(exc)
    if code is not None:
        return ENVIRONMENT_ERRORS[code]
    return getattr(exc, "strerror", None) or lance_message(exc)


def environment_failure(exc: BaseException) -> EnvironmentFailureError | None:
    """``exc`` as an :class:`EnvironmentFailureError`, or None when it is no machine failure."""
    if isinstance(exc, TrimergeError):
        return None
    code = environment_errno(exc)
    if code is None:
        return None
    filename = getattr(exc, "filename", None)
    where = f" ({filename})" if filename else f" ({_detail(exc)})" if _detail(exc) else ""
    remedy = _REMEDY.get(code)
    text = f"{ENVIRONMENT_ERRORS[code]}{where}" + (f": {remedy}" if remedy else "") + "; nothing was published"
    return EnvironmentFailureError(text, code, filename, ENVIRONMENT_ERRORS[code])


def _detail(exc: BaseException) -> str:
    """Lance's words about an I/O failure without its error kind, errno suffix or source paths."""
    if getattr(exc, "errno", None) is not None:
        return ""
    text = re.sub(r"LanceError\(\w+\):\s*|Generic \w+ error:\s*|\s*\(os error \d+\)", "", lance_message(exc))
    return text.strip(" ,:")[:300]


def is_panic(exc: BaseException) -> bool:
    """A Rust panic surfaced by pyo3 (``pyo3_runtime.PanicException``)."""
    return type(exc).__name__ == "PanicException"


def translate(exc: BaseException) -> TrimergeError | None:
    """The :class:`TrimergeError` ``exc`` becomes at the API's edge, or None to let it through."""
    if isinstance(exc, TrimergeError):
        return None
    if is_panic(exc):
        first = str(exc).splitlines()[0] if str(exc).strip() else ""
        return InternalError(f"internal error: a dependency panicked ({first}); this is a bug in trimerge "
                             "(TRIMERGE_DEBUG=1 shows details)")
    vanished = re.search(r"Not found: (\S*/tables/\S+?)[,\s]", str(exc))
    if vanished and isinstance(exc, (OSError, ValueError)) and not_a_file_name(vanished.group(1)):
        return CorruptRepositoryError(f"the repository is damaged: its metadata names the file {vanished.group(1)}, "
                                      "which is no file of its tables/ (a '..', '/' or '\\' inside a file name); "
                                      "check it with 'trimerge fsck'")
    if vanished and isinstance(exc, (OSError, ValueError)):  # ArrowInvalid is a ValueError
        # A table file went away under a read: gc reclaimed what a deleted branch left behind.
        return ConcurrentWriteError(f"a file of the repository was removed while it was being read "
                                    f"({vanished.group(1)}): gc ran beside this read; retry")
    return machine_failure(exc)


def machine_failure(exc: BaseException) -> TrimergeError | None:
    """``exc`` as the machine's or Lance's own limit it is (a memory pool, a full disk, too many
    open files), or None: for a caller about to report a Lance failure as a problem of the input."""
    return resource_exhausted(exc) or environment_failure(exc)


def not_a_file_name(path: str) -> bool:
    """Whether a path Lance reports below ``tables/`` cannot be a file any repository holds: Lance
    spells a ``/`` inside a manifest's file name as ``%2F``, so a forged name such as
    ``x/../../PAYLOAD.lance`` arrives as ``x%2F..%2F..%2FPAYLOAD.lance``. Lance and trimerge never
    write a name with ``%``, ``\\``, or an empty, ``.`` or ``..`` part: such a read is damage, not a race."""
    tail = path.split("/tables/", 1)[-1]
    decoded = unquote(tail)
    return decoded != tail or "\\" in decoded or any(p in ("", ".", "..") for p in decoded.split("/"))


def guarded(fn: F) -> F:
    """``fn`` with :func:`translate` applied to what it raises (generators too)."""
    if getattr(fn, "__trimerge_guarded__", False):
        return fn
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from fn(*args, **kwargs))
            except BaseException as exc:
                better = translate(exc)
                if better is None:
                    raise
                raise better from exc
        gen_wrapper.__trimerge_guarded__ = True  # type: ignore[attr-defined]
        return gen_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            better = translate(exc)
            if better is None:
                raise
            raise better from exc
    wrapper.__trimerge_guarded__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def guard_class(cls: type, extra: tuple[str, ...] = ()) -> type:
    """Guard every public method, class method, static method and property of ``cls`` (and the
    dunder methods named in ``extra``, e.g. ``__exit__``)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") and name not in extra:
            continue
        if isinstance(value, classmethod):
            setattr(cls, name, classmethod(guarded(value.__func__)))
        elif isinstance(value, staticmethod):
            setattr(cls, name, staticmethod(guarded(value.__func__)))
        elif isinstance(value, property):
            setattr(cls, name, property(value.fget and guarded(value.fget), value.fset and guarded(value.fset),
                                        value.fdel, value.__doc__))
        elif inspect.isfunction(value):
            setattr(cls, name, guarded(value))
    return cls


def guard_returned_class(method: F, extra: tuple[str, ...] = ("__enter__", "__exit__")) -> F:
    """``method`` (guarded) whose result's class is guarded too, once: for classes imported
    lazily, such as the transaction :meth:`Repository.transaction` returns."""
    inner = guarded(method)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = inner(*args, **kwargs)
        cls = type(result)
        if not cls.__dict__.get("__trimerge_guarded_class__", False):
            guard_class(cls, extra)
            cls.__trimerge_guarded_class__ = True
        return result
    wrapper.__trimerge_guarded__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
