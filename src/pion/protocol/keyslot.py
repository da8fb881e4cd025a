"""Redis Cluster's key -> hash slot: CRC16-XMODEM of the key (or of its hash tag) mod 16384.

Shared by the server (routing, ``CLUSTER KEYSLOT``) and the client (placing prefixes on nodes),
so both agree with each other and with Redis (tests diff it against redis-server 7.0.15).
The hash tag rule is Redis's ``keyHashSlot``: if the key holds ``{`` and a later ``}`` with at
least one byte between the first ``{`` and the first ``}`` after it, only those bytes are hashed.
"""

from __future__ import annotations

import binascii

SLOTS = 16384


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, as Redis's crc16.c (``binascii.crc_hqx``
    computes exactly this, in C)."""
    return binascii.crc_hqx(data, 0)


def hash_tag(key: bytes) -> bytes:
    """The bytes Redis hashes for ``key``: its hash tag if it has a non-empty one, else all of it."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


def key_slot(key: bytes | str) -> int:
    """The hash slot (0..16383) of ``key``."""
    if isinstance(key, str):
        key = key.encode()
    return crc16(hash_tag(bytes(key))) & (SLOTS - 1)
