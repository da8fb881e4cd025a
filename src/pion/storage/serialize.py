"""Value serialization shared by DUMP/RESTORE and snapshots.

A payload is ``[u8 type id][body][u16 format version][u32 crc32c of all before]``. Each value
class registers a codec (``register_codec``); bodies are usually built with ``pack_tree``, a small
tagged encoding of bytes/int/float/None/list/dict that needs no per-type parser.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import crc32c

FORMAT_VERSION = 1

_codecs_by_class: dict[type, tuple[int, Callable[[Any], bytes]]] = {}
_loaders_by_id: dict[int, Callable[[bytes], Any]] = {}


class PayloadError(ValueError):
    """A payload that is truncated, corrupt, of a newer version, or of an unknown type."""


def register_codec(cls: type, type_id: int, dump: Callable[[Any], bytes], load: Callable[[bytes], Any]) -> None:
    existing = _loaders_by_id.get(type_id)
    if existing is not None and existing is not load:
        raise ValueError(f"type id {type_id} already registered")
    _codecs_by_class[cls] = (type_id, dump)
    _loaders_by_id[type_id] = load


def dump_value(value: Any) -> bytes:
    entry = _codecs_by_class.get(value.__class__)
    if entry is None:
        raise PayloadError(f"no codec for {value.__class__.__name__}")
    type_id, dump = entry
    body = bytes([type_id]) + dump(value) + struct.pack("<H", FORMAT_VERSION)
    return body + struct.pack("<I", crc32c.crc32c(body))


def verify_payload(payload: bytes) -> bool:
    """True if the version and checksum are right (RESTORE tells this apart from a bad body)."""
    if len(payload) < 7:
        return False
    body, (crc,) = payload[:-4], struct.unpack("<I", payload[-4:])
    return crc32c.crc32c(body) == crc and struct.unpack("<H", body[-2:])[0] <= FORMAT_VERSION


def load_value(payload: bytes) -> Any:
    if len(payload) < 7:
        raise PayloadError("payload too short")
    body, (crc,) = payload[:-4], struct.unpack("<I", payload[-4:])
    if crc32c.crc32c(body) != crc:
        raise PayloadError("checksum mismatch")
    (version,) = struct.unpack("<H", body[-2:])
    if version > FORMAT_VERSION:
        raise PayloadError(f"payload version {version} is newer than {FORMAT_VERSION}")
    loader = _loaders_by_id.get(body[0])
    if loader is None:
        raise PayloadError(f"unknown type id {body[0]}")
    return loader(bytes(body[1:-2]))


# -- a tiny tagged tree encoding ------------------------------------------------------------

_B, _I, _F, _N, _L, _D, _T, _BIG = b"b", b"i", b"f", b"n", b"l", b"d", b"t", b"g"


def pack_tree(value: Any) -> bytes:
    out: list[bytes] = []
    _pack(value, out)
    return b"".join(out)


def _pack(value: Any, out: list[bytes]) -> None:
    cls = value.__class__
    if cls is bytes or cls is bytearray or cls is memoryview:
        out.append(_B + struct.pack("<I", len(value)))
        out.append(bytes(value))
    elif cls is bool:
        out.append(_I + struct.pack("<q", int(value)))
    elif cls is int:
        if -(2**63) <= value < 2**63:
            out.append(_I + struct.pack("<q", value))
        else:
            text = str(value).encode()
            out.append(_BIG + struct.pack("<I", len(text)) + text)
    elif cls is float:
        out.append(_F + struct.pack("<d", value))
    elif value is None:
        out.append(_N)
    elif cls is dict:
        out.append(_D + struct.pack("<I", len(value)))
        for key, item in value.items():
            _pack(key, out)
            _pack(item, out)
    elif cls is tuple:
        out.append(_T + struct.pack("<I", len(value)))
        for item in value:
            _pack(item, out)
    elif isinstance(value, (list, tuple)):
        out.append(_L + struct.pack("<I", len(value)))
        for item in value:
            _pack(item, out)
    else:
        raise PayloadError(f"cannot pack {cls.__name__}")


def unpack_tree(data: bytes) -> Any:
    try:
        value, pos = _unpack(memoryview(data), 0)
    except (struct.error, IndexError, KeyError) as exc:
        raise PayloadError(f"corrupt payload: {exc}") from None
    if pos != len(data):
        raise PayloadError("trailing bytes in payload")
    return value


def _unpack(view: memoryview, pos: int) -> tuple[Any, int]:
    tag = bytes(view[pos : pos + 1])
    pos += 1
    if tag == _B:
        (size,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if pos + size > len(view):
            raise IndexError("bytes past the end")
        return bytes(view[pos : pos + size]), pos + size
    if tag == _I:
        return struct.unpack_from("<q", view, pos)[0], pos + 8
    if tag == _F:
        return struct.unpack_from("<d", view, pos)[0], pos + 8
    if tag == _N:
        return None, pos
    if tag == _BIG:
        (size,) = struct.unpack_from("<I", view, pos)
        return int(bytes(view[pos + 4 : pos + 4 + size])), pos + 4 + size
    if tag in (_L, _T, _D):
        (count,) = struct.unpack_from("<I", view, pos)
        pos += 4
        if tag == _D:
            result: Any = {}
            for _ in range(count):
                key, pos = _unpack(view, pos)
                result[key], pos = _unpack(view, pos)
            return result, pos
        items = []
        for _ in range(count):
            item, pos = _unpack(view, pos)
            items.append(item)
        return (tuple(items) if tag == _T else items), pos
    raise KeyError(f"unknown tag {tag!r}")


register_codec(bytes, 0, lambda value: value, lambda body: body)
