"""Base paths in Lance metadata bytes: rewrite the absolute locations a manifest or transaction names.

Lance records a fork's parent dataset root as an absolute base path (``Manifest.base_paths``,
protobuf field 18; the Clone transaction's ``ref_path``). pylance 14 has no API to change one, so
:mod:`trimerge.lineage.tables.relocation` edits the bytes, as the Lance format's own guidance on
portability suggests. A small protobuf wire-format walker does it (Lance's generated classes are
not available from Python): only the known path fields change, every section position, the
manifest's length and the footer are fixed, and everything else is copied byte for byte.
"""

from __future__ import annotations

import struct
from typing import Callable

from trimerge.lineage.errors import CorruptRepositoryError, InvalidOperationError

__all__ = ["manifest_with", "rebase_manifest", "rebase_transaction", "transaction_with"]

MAGIC = b"LANC"
# Protobuf wire types.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
#: ``BasePath.path`` (lance.table.BasePath: id=1, name=2, is_dataset_root=3, path=4).
_PATH = "path"
_BASE_PATH = {4: _PATH}
#: Where a Manifest names paths: ``base_paths`` (18).
_MANIFEST_PATHS = {18: _BASE_PATH}
#: Where a Transaction names paths: Overwrite.initial_bases (102/5), Clone.ref_path (113/4),
#: UpdateBases.new_bases (114/1).
_TRANSACTION_PATHS = {102: {5: _BASE_PATH}, 113: {4: _PATH}, 114: {1: _BASE_PATH}}
#: Manifest fields that are file positions of sections before the manifest: version_aux_data (4),
#: index_section (6), transaction_section as the format spec numbers it (21; pylance 14 calls it
#: ``transaction_section_deprecated``) and as pylance 14 writes it (23).
_POSITION_FIELDS = (4, 6, 21, 23)
_TRANSACTION_SECTIONS = (23, 21)
#: ``fragment_tree`` (22, pylance 14): a layout this module does not know; refused rather than guessed.
_UNKNOWN_LAYOUT_FIELDS = (22,)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _fields(msg: bytes):
    """(field number, wire type, start of the field, start of its value, end, value) for each field:
    ``value`` is the integer of a varint, the payload of a length-delimited field, else None."""
    i = 0
    while i < len(msg):
        start = i
        key, i = _varint(msg, i)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, end = _varint(msg, i)
            yield number, wire, start, i, end, value
            i = end
        elif wire == _LEN:
            n, j = _varint(msg, i)
            end = j + n
            if end > len(msg):
                raise ValueError("length-delimited field runs past its message")
            yield number, wire, start, j, end, msg[j:end]
            i = end
        elif wire in (_I64, _I32):
            end = i + (8 if wire == _I64 else 4)
            yield number, wire, start, i, end, None
            i = end
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if i != len(msg):
        raise ValueError("message ends inside a field")


def _prefix_mapper(old_root: str, new_root: str) -> Callable[[str], str]:
    old_root, new_root = str(old_root).rstrip("/"), str(new_root).rstrip("/")
    if not old_root or not new_root:
        raise InvalidOperationError("relocation needs two non-empty roots")

    def mapped(path: str) -> str:
        if _below(path, new_root) or not _below(path, old_root):  # already there (idempotent), or elsewhere
            return path
        return new_root + path[len(old_root):]

    mapped.needle = old_root.encode()  # type: ignore[attr-defined] # bytes without it cannot change
    return mapped


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _rewrite(msg: bytes, spec: dict, mapped: Callable[[str], str]) -> bytes:
    """``msg`` with every path the field ``spec`` points at mapped; the same object if none changed."""
    out, last = [], 0
    for number, wire, start, _vstart, end, value in _fields(msg):
        sub = spec.get(number)
        if sub is None or wire != _LEN:
            continue
        if sub == _PATH:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                continue
            new = mapped(text)
            payload = new.encode("utf-8") if new != text else value
        else:
            payload = _rewrite(value, sub, mapped)
        if payload is not value:
            out += [msg[last:start], _encode_varint((number << 3) | _LEN), _encode_varint(len(payload)), payload]
            last = end
    if not out:
        return msg
    out.append(msg[last:])
    return b"".join(out)


def _set_varints(msg: bytes, values: dict[int, int]) -> bytes:
    """``msg`` with the varint fields named in ``values`` set to the given numbers."""
    out, last = [], 0
    for number, wire, _start, vstart, end, _value in _fields(msg):
        if wire == _VARINT and number in values:
            out += [msg[last:vstart], _encode_varint(values[number])]
            last = end
    out.append(msg[last:])
    return b"".join(out)


def rebase_transaction(data: bytes, old_root: str, new_root: str) -> bytes:
    """The bytes of a Lance transaction (a ``.txn`` file: one serialized ``Transaction``) with every
    base path equal to ``old_root`` or below it naming ``new_root`` instead; ``data`` itself when
    none does (the Clone operation's source, the bases of Overwrite and UpdateBases)."""
    return transaction_with(bytes(data), _prefix_mapper(old_root, new_root))


def rebase_manifest(data: bytes, old_root: str, new_root: str) -> bytes:
    """The bytes of a Lance ``.manifest`` file with every base path equal to ``old_root`` or below it
    naming ``new_root`` instead (``Manifest.base_paths`` and the inline transaction section), every
    section position, the manifest's length and the footer fixed; ``data`` itself when no base
    path is under ``old_root`` (so a second call changes nothing).

    Layout: ``[sections][u32 len][Manifest][u64 manifest position][u16 major][u16 minor]"LANC"``;
    a section is ``[u32 len][message]`` at the file position a Manifest field names."""
    return manifest_with(bytes(data), _prefix_mapper(old_root, new_root))


def transaction_with(data: bytes, mapped: Callable[[str], str]) -> bytes:
    if getattr(mapped, "needle", b"") not in data:
        return data
    try:
        return _rewrite(data, _TRANSACTION_PATHS, mapped)
    except ValueError as exc:
        raise CorruptRepositoryError(f"not a Lance transaction ({exc})") from None


def manifest_with(data: bytes, mapped: Callable[[str], str]) -> bytes:
    if getattr(mapped, "needle", b"") not in data:
        return data
    try:
        return _rebase_manifest(data, mapped)
    except (ValueError, struct.error) as exc:
        raise CorruptRepositoryError(f"not a Lance manifest ({exc})") from None


def _rebase_manifest(data: bytes, mapped: Callable[[str], str]) -> bytes:
    if len(data) < 20 or data[-4:] != MAGIC:
        raise ValueError("no Lance footer")
    (pos,) = struct.unpack_from("<Q", data, len(data) - 16)
    (n,) = struct.unpack_from("<I", data, pos)
    end = pos + 4 + n
    if end > len(data) - 16:
        raise ValueError("the manifest runs into the footer")
    manifest, between = data[pos + 4:end], data[end:len(data) - 16]
    fields = {number: value for number, wire, _s, _v, _e, value in _fields(manifest) if wire == _VARINT}
    unknown = {number for number, *_rest in _fields(manifest)} & set(_UNKNOWN_LAYOUT_FIELDS)
    if unknown:
        raise ValueError(f"manifest field(s) {sorted(unknown)} of a layout this version does not know")
    sections, delta = data[:pos], 0
    txn_at = next((fields[f] for f in _TRANSACTION_SECTIONS if f in fields), None)
    if txn_at is not None:
        (length,) = struct.unpack_from("<I", sections, txn_at)
        if txn_at + 4 + length > len(sections):
            raise ValueError("the transaction section runs past the sections")
        old_txn = sections[txn_at + 4:txn_at + 4 + length]
        new_txn = _rewrite(old_txn, _TRANSACTION_PATHS, mapped)
        if new_txn is not old_txn:
            sections = b"".join([sections[:txn_at], struct.pack("<I", len(new_txn)), new_txn,
                                 sections[txn_at + 4 + length:]])
            delta = len(new_txn) - len(old_txn)
    new_manifest = _rewrite(manifest, _MANIFEST_PATHS, mapped)
    if delta:  # sections after the transaction moved
        new_manifest = _set_varints(new_manifest, {f: fields[f] + delta for f in _POSITION_FIELDS
                                                   if f in fields and fields[f] > txn_at})
    if new_manifest is manifest and not delta:
        return data
    return b"".join([sections, struct.pack("<I", len(new_manifest)), new_manifest, between,
                     struct.pack("<Q", len(sections)), data[-8:-4], MAGIC])
