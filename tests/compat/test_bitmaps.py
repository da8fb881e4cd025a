"""Bitmap commands through redis-py in RESP2 and RESP3: GETBIT SETBIT BITCOUNT BITPOS BITOP
BITFIELD BITFIELD_RO, with Redis's error texts and what each write logs."""

from __future__ import annotations

import random

import redis

from tests.compat.string_support import (  # noqa: F401 (fixtures)
    argvs,
    effects_fixture,
    error_of,
    events_fixture,
    wrongtype_fixture,
)

BIT_OFFSET = "bit offset is not an integer or out of range"
BAD_TYPE = "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."


# -- GETBIT / SETBIT ---------------------------------------------------------------------------


def test_setbit_getbit(rr, wrongtype):
    assert rr.setbit("b", 7, 1) == 0
    assert rr.get("b") == b"\x01"
    assert rr.setbit("b", 7, 0) == 1
    assert rr.setbit("b", 100, 1) == 0
    assert rr.strlen("b") == 13
    assert rr.getbit("b", 100) == 1
    assert rr.getbit("b", 99) == 0
    assert rr.getbit("b", 10_000) == 0
    assert rr.getbit("missing", 3) == 0
    rr.set("s", "`")  # 0b01100000
    assert [rr.getbit("s", i) for i in range(8)] == [0, 1, 1, 0, 0, 0, 0, 0]
    wrongtype(b"wt")
    assert error_of(rr.getbit, "wt", 0).startswith("WRONGTYPE")
    assert error_of(rr.setbit, "wt", 0, 1).startswith("WRONGTYPE")


def test_setbit_errors(rr):
    assert error_of(rr.setbit, "b", -1, 1) == BIT_OFFSET
    assert error_of(rr.setbit, "b", 4294967296, 1) == BIT_OFFSET
    assert error_of(rr.getbit, "b", "x") == BIT_OFFSET
    # redis-py's setbit() turns any value into 0/1, so send these as they are
    assert error_of(rr.execute_command, "SETBIT", "b", 0, 2) == "bit is not an integer or out of range"
    assert error_of(rr.execute_command, "SETBIT", "b", 0, "x") == "bit is not an integer or out of range"
    assert error_of(rr.execute_command, "SETBIT", "b", 0, -1) == "bit is not an integer or out of range"


def test_setbit_same_value_logs_nothing(rr, effects):
    rr.setbit("b", 3, 1)
    assert argvs(effects) == [[b"SETBIT", b"b", b"3", b"1"]]
    effects.clear()
    assert rr.setbit("b", 3, 1) == 1
    assert rr.setbit("b", 5, 0) == 0
    assert effects == []
    assert rr.setbit("b", 9, 0) == 0  # grows the string: a change
    assert len(effects) == 1


def test_setbit_notifies(events):
    srv, seen = events
    redis.Redis(port=srv.port).setbit("b", 1, 1)
    assert seen == [("$", "setbit", b"b")]


# -- BITCOUNT / BITPOS -------------------------------------------------------------------------


def test_bitcount(rr, wrongtype):
    rr.set("k", "foobar")
    assert rr.bitcount("k") == 26
    assert rr.bitcount("k", 0, 0) == 4
    assert rr.bitcount("k", 1, 1) == 6
    assert rr.bitcount("k", 1, 1, "BYTE") == 6
    assert rr.bitcount("k", 5, 30, "BIT") == 17
    assert rr.bitcount("k", -2, -1) == 7
    assert rr.bitcount("k", -1, -2) == 0
    assert rr.bitcount("missing") == 0
    assert rr.execute_command("BITCOUNT", "missing", "x", "y") == 0  # Redis 7.0: key first
    assert error_of(rr.execute_command, "BITCOUNT", "k", "0") == "syntax error"
    assert error_of(rr.execute_command, "BITCOUNT", "k", "0", "1", "BITS") == "syntax error"
    assert error_of(rr.execute_command, "BITCOUNT", "k", "a", "1") == "value is not an integer or out of range"
    wrongtype(b"wt")
    assert error_of(rr.bitcount, "wt").startswith("WRONGTYPE")


def test_bitcount_large_string_uses_whole_range(rr):
    rnd = random.Random(1)
    data = rnd.randbytes(100_000)
    rr.set("big", data)
    assert rr.bitcount("big") == sum(bin(b).count("1") for b in data)
    assert rr.bitcount("big", 3, 99_990, "BIT") == sum(
        (data[i >> 3] >> (7 - (i & 7))) & 1 for i in range(3, 99_991))


def test_bitpos(rr, wrongtype):
    rr.set("k", b"\xff\xf0\x00")
    assert rr.bitpos("k", 0) == 12
    assert rr.bitpos("k", 1, 2) == -1
    assert rr.bitpos("k", 0, 2) == 16
    rr.set("ones", b"\xff\xff")
    assert rr.bitpos("ones", 0) == 16  # no end: zero-padded on the right
    assert rr.bitpos("ones", 0, 0, -1) == -1  # explicit end: not found
    assert rr.bitpos("ones", 0, 3, 7, "BIT") == -1
    rr.set("k2", b"\x00\x01")
    assert rr.bitpos("k2", 1, 7, 15, "BIT") == 15
    assert rr.bitpos("k2", 1, 0, 14, "bit") == -1
    assert rr.bitpos("missing", 1) == -1
    assert rr.bitpos("missing", 0) == 0
    rr.set("empty", "")
    assert rr.bitpos("empty", 0) == -1
    assert error_of(rr.execute_command, "BITPOS", "k", "2") == "The bit argument must be 1 or 0."
    assert error_of(rr.execute_command, "BITPOS", "k", "1", "0", "1", "WORD") == "syntax error"
    assert error_of(rr.execute_command, "BITPOS", "k", "1", "0", "x", "WORD") == "syntax error"
    wrongtype(b"wt")
    assert error_of(rr.bitpos, "wt", 1).startswith("WRONGTYPE")


def test_bitpos_large_string(rr):
    data = b"\x00" * 50_000 + b"\x04" + b"\xff" * 10
    rr.set("big", data)
    assert rr.bitpos("big", 1) == 50_000 * 8 + 5
    assert rr.bitpos("big", 1, 100, -1) == 50_000 * 8 + 5
    rr.set("full", b"\xff" * 50_000 + b"\xfe")
    assert rr.bitpos("full", 0) == 50_001 * 8 - 1


# -- BITOP -------------------------------------------------------------------------------------


def test_bitop(rr, wrongtype, effects):
    rr.set("a", b"\xf0\x0f")
    rr.set("b", b"\xff")
    assert rr.bitop("AND", "d", "a", "b") == 2
    assert rr.get("d") == b"\xf0\x00"
    assert rr.bitop("OR", "d", "a", "b", "missing") == 2
    assert rr.get("d") == b"\xff\x0f"
    assert rr.bitop("XOR", "d", "a", "b") == 2
    assert rr.get("d") == b"\x0f\x0f"
    assert rr.bitop("NOT", "d", "a") == 2
    assert rr.get("d") == b"\x0f\xf0"
    effects.clear()
    assert rr.bitop("AND", "d", "missing", "missing2") == 0
    assert rr.get("d") is None
    assert argvs(effects) == [[b"BITOP", b"AND", b"d", b"missing", b"missing2"]]
    assert error_of(rr.bitop, "NOT", "d", "a", "b") == "BITOP NOT must be called with a single source key."
    assert error_of(rr.bitop, "NAND", "d", "a") == "syntax error"
    wrongtype(b"wt")
    assert error_of(rr.bitop, "AND", "d", "a", "wt").startswith("WRONGTYPE")


def _bit_model(op: str, sources: list[bytes]) -> bytes:
    """Redis 8.2's definitions bit by bit (an independent model, not the server's code)."""
    size = max(len(s) for s in sources)
    padded = [s.ljust(size, b"\x00") for s in sources]
    out = bytearray()
    for i in range(size):
        byte = 0
        for bit in range(8):
            bits = [(p[i] >> bit) & 1 for p in padded]
            first, rest = bits[0], bits[1:]
            value = {"DIFF": first and not any(rest), "DIFF1": (not first) and any(rest),
                     "ANDOR": first and any(rest), "ONE": sum(bits) == 1}[op]
            byte |= int(bool(value)) << bit
        out.append(byte)
    return bytes(out)


def test_bitop_redis_8_2_operations(rr, effects, events):
    """DIFF, DIFF1, ANDOR and ONE: three bytes worked by hand, the model above on random and
    unequal lengths (both the integer and the numpy path), the two-key minimum, the empty result."""
    rr.set("A", bytes([0b11011000]))
    rr.set("B", bytes([0b10010110]))
    rr.set("C", bytes([0b00111001]))
    expected = {"DIFF": 0b01000000, "DIFF1": 0b00100111, "ANDOR": 0b10011000,
                "ONE": 0b01100111}
    for op, value in expected.items():
        assert rr.bitop(op, "R", "A", "B", "C") == 1
        assert rr.get("R") == bytes([value]) == _bit_model(op, [rr.get(k) for k in "ABC"]), op
    rnd = random.Random(8)
    for sizes in ((3, 5, 1), (6000, 4100, 5000), (0, 7), (9, 0, 0, 2)):
        values = [rnd.randbytes(n) for n in sizes]
        keys = [f"k{i}" for i in range(len(values))]
        rr.delete(*keys)
        rr.mset({k: v for k, v in zip(keys, values, strict=True) if v})
        for op in ("DIFF", "DIFF1", "ANDOR", "ONE"):
            assert rr.bitop(op, "R", *keys) == max(sizes)
            assert rr.get("R") == _bit_model(op, values), (op, sizes)
    assert rr.bitop("ONE", "R", "k0") == 9 and rr.get("R") == rr.get("k0")  # ONE of one key is the key
    effects.clear()
    assert rr.bitop("diff", "R", "none1", "none2") == 0 and rr.exists("R") == 0
    assert argvs(effects) == [[b"BITOP", b"diff", b"R", b"none1", b"none2"]]
    for op in ("DIFF", "DIFF1", "ANDOR"):
        assert error_of(rr.bitop, op.lower(), "R", "A") == f"BITOP {op} must be called with at least two source keys."
    assert error_of(rr.bitop, "ONEX", "R", "A") == "syntax error"


def test_bitop_large_strings_with_numpy(rr):
    rnd = random.Random(3)
    a, b = rnd.randbytes(20_000), rnd.randbytes(15_000)
    rr.mset({"a": a, "b": b})
    padded = b + bytes(5_000)
    assert rr.bitop("AND", "d", "a", "b") == 20_000
    assert rr.get("d") == bytes(x & y for x, y in zip(a, padded, strict=True))
    rr.bitop("XOR", "d", "a", "b")
    assert rr.get("d") == bytes(x ^ y for x, y in zip(a, padded, strict=True))
    rr.bitop("NOT", "d", "a")
    assert rr.get("d") == bytes(x ^ 0xFF for x in a)


# -- BITFIELD ----------------------------------------------------------------------------------


def test_bitfield_set_get_incrby(rr):
    assert rr.execute_command("BITFIELD", "bf", "SET", "i8", "0", "100", "GET", "i8", "0") == [0, 100]
    assert rr.execute_command("BITFIELD", "bf", "INCRBY", "u2", "100", "1", "GET", "u4", "0") == [1, 6]
    assert rr.execute_command("BITFIELD", "bf", "SET", "u8", "#1", "255", "GET", "u8", "8") == [0, 255]
    assert rr.execute_command("BITFIELD", "bf", "GET", "i64", "0") == [0x64FF << 48]
    assert rr.execute_command("BITFIELD", "missing", "GET", "u8", "0") == [0]
    assert rr.execute_command("BITFIELD", "missing") == []


def test_bitfield_overflow_policies(rr):
    cmd = rr.execute_command
    assert cmd("BITFIELD", "o", "INCRBY", "u2", "0", "5") == [1]  # WRAP by default
    assert cmd("BITFIELD", "o", "OVERFLOW", "SAT", "INCRBY", "u2", "0", "5") == [3]
    assert cmd("BITFIELD", "o", "OVERFLOW", "FAIL", "INCRBY", "u2", "0", "1") == [None]
    assert cmd("BITFIELD", "o", "OVERFLOW", "SAT", "INCRBY", "i8", "8", "-200") == [-128]
    assert cmd("BITFIELD", "o", "OVERFLOW", "WRAP", "INCRBY", "i8", "8", "-1") == [127]
    assert cmd("BITFIELD", "o", "SET", "i8", "8", "200", "GET", "i8", "8") == [127, -56]
    assert cmd("BITFIELD", "o", "OVERFLOW", "SAT", "SET", "u8", "16", "-1", "GET", "u8", "16") == [0, 255]
    big = "9223372036854775807"
    assert cmd("BITFIELD", "o64", "SET", "i64", "0", big, "INCRBY", "i64", "0", "1") == [0, -9223372036854775808]
    assert cmd("BITFIELD", "o64", "OVERFLOW", "SAT", "INCRBY", "i64", "0", "-1") == [-9223372036854775808]


def test_bitfield_errors(rr, wrongtype):
    cmd = rr.execute_command
    assert error_of(cmd, "BITFIELD", "b", "GET", "u64", "0") == BAD_TYPE
    assert error_of(cmd, "BITFIELD", "b", "GET", "i65", "0") == BAD_TYPE
    assert error_of(cmd, "BITFIELD", "b", "GET", "I8", "0") == BAD_TYPE
    assert error_of(cmd, "BITFIELD", "b", "GET", "u0", "0") == BAD_TYPE
    assert error_of(cmd, "BITFIELD", "b", "GET", "u8", "-1") == BIT_OFFSET
    assert error_of(cmd, "BITFIELD", "b", "GET", "u8", "#-1") == BIT_OFFSET
    assert error_of(cmd, "BITFIELD", "b", "GET", "u8") == "syntax error"
    assert error_of(cmd, "BITFIELD", "b", "FOO", "u8", "0") == "syntax error"
    assert error_of(cmd, "BITFIELD", "b", "OVERFLOW", "NOPE") == "Invalid OVERFLOW type specified"
    assert error_of(cmd, "BITFIELD", "b", "SET", "u8", "0", "x") == "value is not an integer or out of range"
    assert rr.get("b") is None  # nothing ran
    wrongtype(b"wt")
    assert error_of(cmd, "BITFIELD", "wt", "GET", "u8", "0").startswith("WRONGTYPE")
    assert error_of(cmd, "BITFIELD", "wt", "SET", "u8", "0", "1").startswith("WRONGTYPE")


def test_bitfield_ro(rr, wrongtype):
    rr.set("k", b"\x80")
    assert rr.execute_command("BITFIELD_RO", "k", "GET", "u1", "0", "GET", "i8", "0") == [1, -128]
    assert error_of(rr.execute_command, "BITFIELD_RO", "k", "SET", "u8", "0", "1") == \
        "BITFIELD_RO only supports the GET subcommand"
    wrongtype(b"wt")
    assert error_of(rr.execute_command, "BITFIELD_RO", "wt", "GET", "u8", "0").startswith("WRONGTYPE")


def test_bitfield_logs_only_real_changes(rr, effects):
    rr.execute_command("BITFIELD", "b", "SET", "u8", "0", "7")
    assert len(effects) == 1
    effects.clear()
    assert rr.execute_command("BITFIELD", "b", "SET", "u8", "0", "7", "INCRBY", "u8", "0", "0") == [7, 7]
    assert rr.execute_command("BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "300") == [None]
    assert effects == []

