"""Row codecs for K/V tensors: pure numpy, one module each, byte-compatible with the reference.

``get_codec(name)`` returns a codec with ``encode(array) -> bytes``, ``decode(bytes, shape) ->
float32 array`` and ``bytes_per_row(dim)``. Used by the server (rows are stored encoded) and by
the client (``V.FETCH ... FMT RAW`` ships the stored bytes for the client to decode).
"""

from __future__ import annotations

from pion.codecs import bf16, fp8, fp16, fp32, int8, mlx4g32, turbo2, turbo3, turbo4
from pion.codecs.base import Codec, CodecError
from pion.codecs.chain import block_hashes
from pion.codecs.hybrid import RopeFp8Codec

__all__ = ["CODECS", "CODEC_NAMES", "Codec", "CodecError", "block_hashes", "codec_by_tag", "get_codec"]

#: name -> codec, for the codecs that take no parameter
CODECS: dict[str, Codec] = {
    module.CODEC.name: module.CODEC
    for module in (int8, turbo4, fp16, turbo3, turbo2, fp8, mlx4g32, fp32, bf16)
}
#: every name ``get_codec`` knows
CODEC_NAMES = (*CODECS, RopeFp8Codec.name)


def get_codec(name: str | bytes, rope: int = 0) -> Codec:
    """The codec called ``name`` (case-insensitive); the rope/fp8 hybrid needs ``rope``."""
    key = (name.decode("latin-1") if isinstance(name, bytes | bytearray) else str(name)).lower()
    codec = CODECS.get(key)
    if codec is not None:
        return codec
    if key == RopeFp8Codec.name:
        if rope <= 0:
            raise CodecError(f"{RopeFp8Codec.name} needs rope > 0")
        return RopeFp8Codec(rope)
    raise CodecError(f"unknown codec '{key}' (want {'|'.join(CODEC_NAMES)})")


def codec_by_tag(tag: int, rope: int = 0) -> Codec:
    for codec in CODECS.values():
        if codec.tag == tag:
            return codec
    if tag == RopeFp8Codec.tag:
        return get_codec(RopeFp8Codec.name, rope)
    raise CodecError(f"unknown codec tag {tag}")
