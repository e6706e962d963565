"""Files given to ``load`` and ``table create``: read into Arrow, or refused with one line that
names the file and, where it can, the byte at fault.

Text formats (CSV, JSON, JSON lines) must be UTF-8. A UTF-16 or UTF-32 file with a byte order
mark is decoded (streamed through a temporary UTF-8 copy); one without a mark is recognised by its
NUL bytes and refused with the command that converts it; invalid UTF-8 is refused with the offset
of the first bad byte. A reader that panics (polars, pyarrow and Lance are Rust and C++ inside;
a panic is a ``BaseException``) on a file's content is reported as that file's fault, exit 2.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from trimerge.lineage.errors import InvalidOperationError, lance_message

TEXT_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}
BINARY_SUFFIXES = (".lance", ".parquet", ".pq", ".arrow", ".feather", ".ipc")
# UTF-32 before UTF-16: the UTF-32-LE mark begins with the UTF-16-LE one.
BOMS = ((codecs.BOM_UTF32_LE, "UTF-32-LE"), (codecs.BOM_UTF32_BE, "UTF-32-BE"), (codecs.BOM_UTF8, "UTF-8"),
        (codecs.BOM_UTF16_LE, "UTF-16-LE"), (codecs.BOM_UTF16_BE, "UTF-16-BE"))
CHUNK = 1 << 20


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfaced by pyo3 (each extension has its own class)."""
    return type(exc).__name__ == "PanicException"


def read_file(path: str) -> Any:
    """Read CSV, Parquet, JSON lines, JSON, Arrow IPC or a Lance dataset into an Arrow table."""
    p = Path(path)
    if not p.exists():
        raise InvalidOperationError(f"no such file: {path}")
    suffix = p.suffix.lower()
    known = p.is_dir() or suffix in BINARY_SUFFIXES or suffix in TEXT_SUFFIXES
    if not known:
        raise InvalidOperationError(f"cannot read {path}: unknown format (use .csv, .parquet, .jsonl, .json, .arrow "
                                    "or a Lance dataset)")
    try:
        with _utf8(p, path) as source, _stderr_held():
            return _read(source, suffix, p.is_dir())
    except InvalidOperationError:
        raise
    except (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
        raise
    except BaseException as exc:  # noqa: BLE001 - a reader's panic is the file's fault, said in one line
        if not (is_panic(exc) or _reader_error(exc)):
            raise
        raise InvalidOperationError(f"cannot read {path}: {_explain(p, exc)}") from None


@contextlib.contextmanager
def _stderr_held() -> Iterator[None]:
    """Hold what native code writes on file descriptor 2 while a file is read: a Rust panic prints
    its own lines there before it reaches Python. Replayed unless the read panicked (the panic is
    then said in one line)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        replay = True
        try:
            yield
        except BaseException as exc:
            replay = not is_panic(exc)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if replay:
                held.seek(0)
                with contextlib.suppress(OSError):
                    os.write(2, held.read())


def _read(source: Path, suffix: str, is_dir: bool) -> Any:
    import polars as pl

    from trimerge.lineage.tables.conversion import plain_table  # polars reads strings as large_string: no one chose that

    if is_dir or suffix == ".lance":
        import lance

        return lance.dataset(str(source)).to_table()
    if suffix == ".csv":
        return plain_table(pl.read_csv(source, try_parse_dates=False).to_arrow())
    if suffix in (".parquet", ".pq"):
        return plain_table(pl.read_parquet(source).to_arrow())
    if suffix in (".jsonl", ".ndjson"):
        return plain_table(pl.read_ndjson(source).to_arrow())
    if suffix == ".json":
        return plain_table(pl.read_json(source).to_arrow())
    import pyarrow.feather as feather

    return feather.read_table(str(source))


def _reader_error(exc: BaseException) -> bool:
    import polars as pl
    import pyarrow as pa

    return isinstance(exc, (pl.exceptions.PolarsError, pa.ArrowException, OSError, ValueError, TypeError))


def _explain(p: Path, exc: BaseException) -> str:
    """One line on what in the file made the reader fail."""
    text = lance_message(exc) if not is_panic(exc) else str(exc)
    first = (text.splitlines() or [""])[0][:300]
    if "utf-8" in text.lower() or "utf8" in text.lower():
        bad = first_invalid_utf8(p)
        if bad is not None:
            offset, line, byte = bad
            if offset + 4 > p.stat().st_size and _truncated_utf8(p, offset):
                return f"not UTF-8: it ends in the middle of a character at offset {offset} (truncated?)"
            return (f"not UTF-8: byte 0x{byte:02x} at offset {offset} (line {line}) is not valid UTF-8; save the "
                    f"file as UTF-8 (from Latin-1: iconv -f LATIN1 -t UTF-8 {p.name})")
    if is_panic(exc):
        if "NulError" in text:
            return "a column name or value holds a NUL byte the reader cannot take"
        return f"its content made the reader fail ({first})"
    return first


@contextlib.contextmanager
def _utf8(p: Path, path: str) -> Iterator[Path]:
    """``p`` itself, or — for a text file with a byte order mark — a temporary UTF-8 copy of it."""
    if p.is_dir() or p.suffix.lower() not in TEXT_SUFFIXES:
        yield p
        return
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise InvalidOperationError(f"cannot read {path}: {exc.strerror or exc}") from None
    encoding = next((name for bom, name in BOMS if head.startswith(bom)), None)
    if encoding is None:
        guess = _bomless_wide(head)
        if guess:
            raise InvalidOperationError(
                f"cannot read {path}: it looks like {guess} text without a byte order mark; save it as UTF-8 "
                f"(iconv -f {guess[:-3]}{guess[-2:]} -t UTF-8 {p.name})")
        yield p
        return
    fd, tmp = tempfile.mkstemp(prefix="trimerge-input-", suffix=p.suffix.lower())
    try:
        with os.fdopen(fd, "wb") as out:
            _transcode(p, path, encoding, out)
        yield Path(tmp)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _transcode(p: Path, path: str, encoding: str, out: Any) -> None:
    """Stream ``p`` (with its byte order mark) from ``encoding`` into ``out`` as UTF-8."""
    codec = {"UTF-8": "utf-8-sig", "UTF-16-LE": "utf-16", "UTF-16-BE": "utf-16",
             "UTF-32-LE": "utf-32", "UTF-32-BE": "utf-32"}[encoding]
    decoder = codecs.getincrementaldecoder(codec)()
    offset = 0
    with open(p, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                at = offset - pending + exc.start
                what = ("ends in the middle of a character (truncated?)" if not chunk
                        else f"has an invalid {encoding} sequence")
                raise InvalidOperationError(f"cannot read {path}: {encoding} text (byte order mark) that {what} "
                                            f"at byte {at}") from None
            out.write(text.encode("utf-8"))
            if not chunk:
                return
            offset += len(chunk)


def _bomless_wide(head: bytes) -> str | None:
    """``UTF-16-LE`` and the like when the first bytes have the NUL pattern of mostly-ASCII text in
    that encoding; None for anything else (a UTF-8 file holding some NUL bytes included)."""
    n = len(head) // 4 * 4
    if n < 8 or head.count(0) < n // 4:
        return None
    zeros = [head[i:n:4].count(0) for i in range(4)]
    quarter = n // 4
    if min(zeros[1:]) >= 0.9 * quarter and zeros[0] < 0.5 * quarter:
        return "UTF-32-LE"
    if min(zeros[:3]) >= 0.9 * quarter and zeros[3] < 0.5 * quarter:
        return "UTF-32-BE"
    if zeros[1] + zeros[3] >= 1.8 * quarter and zeros[0] + zeros[2] < 0.5 * quarter:
        return "UTF-16-LE"
    if zeros[0] + zeros[2] >= 1.8 * quarter and zeros[1] + zeros[3] < 0.5 * quarter:
        return "UTF-16-BE"
    return None


def _truncated_utf8(p: Path, offset: int) -> bool:
    """Whether the bytes from ``offset`` to the end are the start of a valid UTF-8 character."""
    with open(p, "rb") as f:
        f.seek(offset)
        tail = f.read()
    try:
        tail.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"
    return False


def first_invalid_utf8(p: Path) -> tuple[int, int, int] | None:
    """``(offset, line, byte)`` of the first byte of ``p`` that is not valid UTF-8, or None."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    try:
        with open(p, "rb") as f:
            while True:
                chunk = f.read(CHUNK)
                buffered = decoder.getstate()[0]
                try:
                    decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as exc:
                    data = buffered + chunk
                    return offset - len(buffered) + exc.start, lines + data[:exc.start].count(b"\n") + 1, \
                        data[exc.start]
                if not chunk:
                    return None
                offset += len(chunk)
                lines += chunk.count(b"\n")
    except OSError:
        return None
