"""The reference client's wire traffic (spec section 8: PionPromptCache, the hybrid path, boundary
protect, the serve lineage store), replayed pipelined, replies checked byte for byte.

The fixture is written out by hand from the spec: RESP framing, fp32 rows as the client packs
them (``struct '<f'``), fp16 replies as IEEE halves (``struct '<e'``); no Pion code builds it.
"""

from __future__ import annotations

import struct

N_TOKENS, KV_DIM, LAYERS = 3, 4, 2  # 2 kv heads x head_dim 2


def values(side: int, layer: int) -> list[float]:
    """Token-major rows, heads concatenated; every value exact in fp16."""
    return [side * 8 + layer * 2 + t * 0.25 + d * 0.125 for t in range(N_TOKENS) for d in range(KV_DIM)]


def f32(side: int, layer: int) -> bytes:
    return struct.pack("<%df" % (N_TOKENS * KV_DIM), *values(side, layer))


def f16(side: int, layer: int) -> bytes:
    return struct.pack("<%de" % (N_TOKENS * KV_DIM), *values(side, layer))


def command(*args: bytes | str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        out += b"$%d\r\n%s\r\n" % (len(data), data)
    return out


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


NS = "9f2c1b7e0a4d4e6b8c3a5d2e1f0b7c6a"  # make_namespace(...): 32 hex chars
SSM_BLOB = b"\x01\x00\x00\x00\x01\x00\x00\x00" + bytes(range(40))

STORE = [command("V.STOREBATCH", NS + side, str(layer), "0", str(N_TOKENS), f32(s, layer))
         for layer in range(LAYERS) for s, side in enumerate(("_pk", "_pv"))]

SESSION = [  # (request, exact reply)
    (command("KV.PREFIX.LOOKUP", NS), b"+MISS\r\n"),
    (command("KV.PREFIX.REGISTER", NS, str(KV_DIM), "fp16", "PREFILL_MS", "1234"), b"+OK\r\n"),
    *[(request, b"+OK\r\n") for request in STORE],
    (command("KV.PREFIX.LOOKUP", NS), b"+HIT\r\n"),
    (command("V.FETCH", NS + "_pk", "BATCH", "0", str(N_TOKENS), str(LAYERS), "FMT", "NATIVE"),
     b"*2\r\n" + bulk(f16(0, 0)) + bulk(f16(0, 1))),
    (command("V.FETCH", NS + "_pv", "BATCH", "0", str(N_TOKENS), str(LAYERS), "FMT", "NATIVE"),
     b"*2\r\n" + bulk(f16(1, 0)) + bulk(f16(1, 1))),
    (command("V.FETCH", NS + "_pv", "1", "RANGE", "0", str(N_TOKENS), "FMT", "NATIVE"), bulk(f16(1, 1))),
    (command("V.FETCH", NS + "_pk", "0", "RANGE", "0", str(N_TOKENS)), bulk(f32(0, 0))),
    (command("V.FETCH", NS + "_pk", "1", "0", "2"), bulk(f32(0, 1)[:16] + f32(0, 1)[32:48])),
    (command("KV.PREFIX.LOOKUP", NS, "TOKENS", str(N_TOKENS)), b"+HIT\r\n"),
    # hybrid models: re-register, then linear-layer state through SSM.PREFIX
    (command("KV.PREFIX.REGISTER", NS, str(KV_DIM), "fp16"), b"+OK\r\n"),
    (command("SSM.PREFIX.STORE", NS, "5", SSM_BLOB), b"+OK\r\n"),
    (command("SSM.PREFIX.FETCH", NS, "5"), bulk(SSM_BLOB)),
    (command("SSM.PREFIX.FETCH", NS, "6"), b"$-1\r\n"),
    # boundary protect: two SCHEMA creates instead of REGISTER (replies must start with ':')
    (command("V.CREATE", "bp_pk", "0", "SCHEMA", "2", "fmt=fp16,dim=4", "fmt=fp16,dim=4"), b":2\r\n"),
    (command("V.CREATE", "bp_pv", "0", "SCHEMA", "2", "fmt=fp16,dim=4", "fmt=int8,dim=4"), b":3\r\n"),
    # the serve lineage store: fp16 rows stored as they are, checked with V.INFO, fetched NATIVE
    (command("KV.PREFIX.REGISTER", "ppsabcs1", str(KV_DIM), "fp16"), b"+OK\r\n"),
    (command("V.STOREBATCH", "ppsabcs1_pk", "0", "0", str(N_TOKENS), f16(0, 0), "FMT", "F16"), b"+OK\r\n"),
    (command("V.FETCH", "ppsabcs1_pk", "BATCH", "0", str(N_TOKENS), "FMT", "NATIVE"), b"*1\r\n" + bulk(f16(0, 0))),
    (command("KV.PREFIX.DROP", "ppsabcs1"), b":1\r\n"),
    (command("KV.PREFIX.LOOKUP", "ppsabcs1"), b"+MISS\r\n"),
]


def test_reference_prompt_cache_session_byte_for_byte(raw):
    raw.send(b"".join(request for request, _ in SESSION))  # pipelined, as a busy client would
    expected = b"".join(reply for _, reply in SESSION)
    got = raw.read_exactly(expected)
    for request, reply in SESSION:  # a readable failure: which command answered what
        assert got[: len(reply)] == reply, request[:80]
        got = got[len(reply):]


def test_v_info_shows_every_layer_holds_its_rows_before_a_restore(raw):
    raw.send(command("KV.PREFIX.REGISTER", NS, str(KV_DIM), "fp16") + b"".join(STORE))
    raw.read_exactly(b"+OK\r\n" * (1 + len(STORE)))
    body = (b"session_idx:1\r\nvalue_dim:4\r\nv_format:fp16\r\nnum_layers:2\r\nschema:uniform\r\n"
            b"layer_0_tokens:3\r\nlayer_1_tokens:3\r\ntotal_tokens:6\r\nbytes:48\r\n")
    raw.send(command("V.INFO", NS + "_pv"))
    assert raw.read_exactly(bulk(body)) == bulk(body)
