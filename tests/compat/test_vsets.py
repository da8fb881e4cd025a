"""Vector sets on the wire: every command, its error texts and its reply shapes in RESP2 and
RESP3, compared with what Redis 8's vset.c answers (exact bytes where the shape matters)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import redis

from tests.compat.test_sets import WRONGTYPE, err

INVALID_VECTOR = "invalid vector specification"


def fp32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def vadd(client, key, vec, name, *opts):
    return client.execute_command("VADD", key, "VALUES", len(vec), *vec, name, *opts)


def pairs(flat):
    return dict(zip(flat[::2], flat[1::2], strict=True))


@pytest.fixture
def points(rr):
    """The five 2-d points of Redis's epsilon test: a, b, c (zero), d, e around the circle."""
    for name, vec in (("a", (1, 1)), ("b", (0, 1)), ("c", (0, 0)), ("d", (0, -1)), ("e", (-1, -1))):
        assert vadd(rr, "pts", vec, name) == 1
    return rr


def test_vadd_creates_a_vectorset_and_counts(rr):
    assert vadd(rr, "v", (1, 0, 0), "x") == 1
    assert rr.execute_command("VADD", "v", "FP32", fp32(0, 1, 0), "y") == 1
    assert rr.type("v") == b"vectorset"
    assert rr.execute_command("VCARD", "v") == 2
    assert rr.execute_command("VDIM", "v") == 3
    assert rr.execute_command("VCARD", "nokey") == 0
    assert err(rr, "VDIM", "nokey") == "key does not exist"
    assert rr.object("encoding", "v") == b"raw"


def test_vadd_of_an_existing_element_updates_its_vector_answers_0_and_keeps_its_attributes(rr):
    assert vadd(rr, "v", (1, 0), "x", "SETATTR", '{"a": 1}') == 1
    assert vadd(rr, "v", (0, 1), "x") == 0
    assert rr.execute_command("VCARD", "v") == 1
    assert [float(x) for x in rr.execute_command("VEMB", "v", "x")] == pytest.approx([0, 1])
    assert rr.execute_command("VGETATTR", "v", "x") == b'{"a": 1}'
    assert vadd(rr, "v", (0, 1), "x", "SETATTR", "") == 0
    assert rr.execute_command("VGETATTR", "v", "x") is None


def test_booleans_are_resp3_booleans_and_resp2_integers(raw):
    raw.cmd("VADD", "v", "VALUES", "2", "1", "0", "x")
    assert raw.read_exactly(b":1\r\n") == b":1\r\n"
    raw.cmd("HELLO", "3")
    raw.read_some()
    for argv, reply in ((("VADD", "v", "VALUES", "2", "1", "0", "x"), b"#f\r\n"),
                        (("VISMEMBER", "v", "x"), b"#t\r\n"), (("VSETATTR", "v", "nope", "{}"), b"#f\r\n"),
                        (("VREM", "v", "x"), b"#t\r\n"), (("VREM", "v", "x"), b"#f\r\n")):
        raw.cmd(*argv)
        assert raw.read_exactly(reply) == reply, argv


@pytest.mark.parametrize(("argv", "message"), [
    (("VADD", "v", "VALUES", "3", "1", "2", "x"), INVALID_VECTOR),         # too few values
    (("VADD", "v", "VALUES", "0", "x", "y"), INVALID_VECTOR),
    (("VADD", "v", "VALUES", "2", "1", "abc", "x"), INVALID_VECTOR),
    (("VADD", "v", "VALUES", "2", "1", "nan", "x"), INVALID_VECTOR),
    (("VADD", "v", "FP32", b"\x00\x00\x80", "x"), INVALID_VECTOR),          # not a multiple of 4
    (("VADD", "v", "FP64", "abcd", "x"), INVALID_VECTOR),
    (("VADD", "v", "REDUCE", "0", "VALUES", "2", "1", "2", "x"), INVALID_VECTOR),
    (("VADD", "v", "REDUCE", "3", "VALUES", "2", "1", "2", "x"), INVALID_VECTOR),  # reduce > dim
    (("VADD", "v", "VALUES", "2", "1", "2"), "wrong number of arguments for 'vadd' command"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "EF", "0"), "invalid EF"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "EF", "1000001"), "invalid EF"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "M", "3"), "invalid M"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "M", "4097"), "invalid M"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "BOGUS"), "invalid option after element"),
    (("VADD", "v", "VALUES", "2", "1", "2", "x", "EF"), "invalid option after element"),
])
def test_vadd_argument_errors_change_nothing(rr, argv, message):
    assert err(rr, *argv) == message
    assert rr.exists("v") == 0


def test_vadd_must_match_the_existing_set(rr):
    vadd(rr, "v", (1, 2, 3), "x")
    assert err(rr, "VADD", "v", "VALUES", 3, 1, 2, 3, "y", "NOQUANT") == "asked quantization mismatch with existing vector set"
    assert err(rr, "VADD", "v", "VALUES", 3, 1, 2, 3, "y", "M", 32) == "asked M value mismatch with existing vector set"
    assert err(rr, "VADD", "v", "VALUES", 2, 1, 2, "y") == "Vector dimension mismatch - got 2 but set has 3"
    vadd(rr, "bin", (1, 2), "x", "BIN", "M", 8)
    assert vadd(rr, "bin", (3, 4), "y", "BIN", "M", 8) == 1
    assert err(rr, "VADD", "bin", "VALUES", 2, 1, 2, "z") == "asked quantization mismatch with existing vector set"
    rr.set("s", "x")
    assert err(rr, "VADD", "s", "VALUES", 2, 1, 2, "z") == WRONGTYPE
    assert rr.execute_command("VCARD", "v") == 1


def test_reduce_projects_to_fewer_dimensions_and_queries_take_the_full_size(rr):
    assert rr.execute_command("VADD", "r", "REDUCE", 3, "VALUES", 6, 1, 0, 0, 0, 0, 0, "x") == 1
    rr.execute_command("VADD", "r", "REDUCE", 3, "VALUES", 6, 0, 1, 0, 0, 0, 0, "y")
    assert rr.execute_command("VDIM", "r") == 3
    info = pairs(rr.execute_command("VINFO", "r")) if rr.protocol_version == 2 else rr.execute_command("VINFO", "r")
    assert info[b"vector-dim"] == 3 and info[b"projection-input-dim"] == 6
    assert rr.execute_command("VSIM", "r", "VALUES", 6, 1, 0, 0, 0, 0, 0, "COUNT", 1) == [b"x"]
    assert rr.execute_command("VSIM", "r", "ELE", "y", "COUNT", 1) == [b"y"]
    assert err(rr, "VSIM", "r", "VALUES", 5, 1, 0, 0, 0, 0) == "Input dimension mismatch for projection - got 5 but projection expects 6"
    assert err(rr, "VADD", "r", "REDUCE", 3, "VALUES", 5, 1, 0, 0, 0, 0, "z") == "Input dimension mismatch for projection - got 5 but projection expects 6"
    assert err(rr, "VADD", "r", "VALUES", 6, 1, 0, 0, 0, 0, 0, "z") == "Vector dimension mismatch - got 6 but set has 3"
    vadd(rr, "plain", (1, 2, 3), "x")
    assert err(rr, "VADD", "plain", "REDUCE", 3, "VALUES", 3, 1, 2, 3, "y") == "cannot add projection to existing set without projection"


def test_vsim_orders_by_similarity_with_scores_in_0_1(points):
    flat = points.execute_command("VSIM", "pts", "VALUES", 2, 1, 1, "WITHSCORES")
    scores = pairs(flat) if points.protocol_version == 2 else flat
    assert list(scores) == [b"a", b"b", b"c", b"d", b"e"]
    assert [float(s) for s in scores.values()] == pytest.approx([1.0, 0.8535, 0.5, 0.1464, 0.0], abs=1e-3)
    assert points.execute_command("VSIM", "pts", "ELE", "a", "COUNT", 2) == [b"a", b"b"]
    assert points.execute_command("VSIM", "missing", "ELE", "whatever") == []
    assert points.execute_command("VSIM", "missing", "FOO", "bar") == []  # the key is looked up first


def test_vsim_epsilon_keeps_similarity_of_at_least_1_minus_epsilon(points):
    def names(eps):
        return points.execute_command("VSIM", "pts", "VALUES", 2, 1, 1, "EPSILON", eps)
    assert names(0.5) == [b"a", b"b", b"c"]
    assert names(0.2) == [b"a", b"b"]
    assert names(0.001) == [b"a"]
    assert len(names(1.0)) == 5


@pytest.mark.parametrize(("opts", "message"), [
    (("COUNT", "0"), "invalid COUNT"),
    (("COUNT", "x"), "invalid COUNT"),
    (("EF", "0"), "invalid EF"),
    (("EF", "1000001"), "invalid EF"),
    (("EPSILON", "0"), "invalid EPSILON"),
    (("EPSILON", "abc"), "invalid EPSILON"),
    (("FILTER-EF", "0"), "invalid FILTER-EF"),
    (("BOGUS",), "syntax error in VSIM command"),
    (("COUNT",), "syntax error in VSIM command"),
    (("FILTER", ".a >"), "syntax error in FILTER expression near: .a >"),
    (("FILTER", ".a == foo"), "syntax error in FILTER expression near: .a == foo"),  # error at the end
    (("FILTER", "foo == .a"), "syntax error in FILTER expression near:  == .a"),
])
def test_vsim_option_errors(points, opts, message):
    assert err(points, "VSIM", "pts", "VALUES", 2, 1, 1, *opts) == message


def test_vsim_vector_errors(points):
    assert err(points, "VSIM", "pts", "ELE", "nope") == "element not found in set"
    assert err(points, "VSIM", "pts", "VALUES", 3, 1, 1, 1) == "Vector dimension mismatch - got 3 but set has 2"
    assert err(points, "VSIM", "pts", "VALUES", 2, 1) == INVALID_VECTOR
    assert err(points, "VSIM", "pts", "FP32", b"abc") == INVALID_VECTOR
    assert err(points, "VSIM", "pts", "FOO", "x") == INVALID_VECTOR
    points.set("s", "x")
    assert err(points, "VSIM", "s", "ELE", "a") == WRONGTYPE


def two_points(raw, added: bytes) -> None:
    """x (with attributes) and y, orthogonal: x scores 1 and y 0.5 against x."""
    raw.cmd("VADD", "v", "VALUES", "2", "1", "0", "x", "SETATTR", '{"k":1}')
    raw.cmd("VADD", "v", "VALUES", "2", "0", "1", "y")
    assert raw.read_exactly(added * 2) == added * 2


def test_vsim_reply_shapes_in_resp2(raw):
    two_points(raw, b":1\r\n")
    raw.cmd("VSIM", "v", "VALUES", "2", "1", "0", "WITHSCORES", "WITHATTRIBS")
    expected = b"*6\r\n$1\r\nx\r\n$1\r\n1\r\n$7\r\n{\"k\":1}\r\n$1\r\ny\r\n$3\r\n0.5\r\n$-1\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("VSIM", "v", "VALUES", "2", "1", "0", "WITHATTRIBS")
    expected = b"*4\r\n$1\r\nx\r\n$7\r\n{\"k\":1}\r\n$1\r\ny\r\n$-1\r\n"
    assert raw.read_exactly(expected) == expected


def test_vsim_reply_shapes_in_resp3(raw):
    raw.cmd("HELLO", "3")
    raw.read_some()
    two_points(raw, b"#t\r\n")
    raw.cmd("VSIM", "v", "VALUES", "2", "1", "0", "WITHSCORES", "WITHATTRIBS")
    expected = b"%2\r\n$1\r\nx\r\n*2\r\n,1\r\n$7\r\n{\"k\":1}\r\n$1\r\ny\r\n*2\r\n,0.5\r\n_\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("VSIM", "v", "VALUES", "2", "1", "0", "WITHSCORES")
    expected = b"%2\r\n$1\r\nx\r\n,1\r\n$1\r\ny\r\n,0.5\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("VSIM", "v", "VALUES", "2", "1", "0")
    expected = b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
    assert raw.read_exactly(expected) == expected


def test_vsim_filter_over_attributes(rr):
    rows = [("a", (1, 1, 1), '{"year": 1950, "genre": "drama"}'), ("b", (-1, -1, -1), '{"year": 1951}'),
            ("c", (0, 1, 0), '{"year": 1952, "genre": "action"}'), ("d", (1, 0, 0), None), ("e", (0, 0, 1), "not json")]
    for name, vec, attr in rows:
        vadd(rr, "m", vec, name, *(("SETATTR", attr) if attr else ()))
    def find(expr, *more):
        return sorted(rr.execute_command("VSIM", "m", "VALUES", 3, 0, 0, 0, "FILTER", expr, *more))
    assert find(".year > 1950") == [b"b", b"c"]
    assert find('.genre == "action" or .genre == "drama"') == [b"a", b"c"]
    assert find('"rama" in .genre') == [b"a"]
    assert find(".year in [1950, 1952] and !(.genre == 'drama')") == [b"c"]
    assert find(".missing") == []
    assert find(".year > 1950", "FILTER-EF", 1, "TRUTH") == [b"b", b"c"]
    got = rr.execute_command("VSIM", "m", "VALUES", 3, 1, 1, 1, "FILTER", ".year >= 1950", "WITHATTRIBS", "COUNT", 1)
    got = pairs(got) if rr.protocol_version == 2 else got
    assert got == {b"a": b'{"year": 1950, "genre": "drama"}'}


def test_vemb_returns_the_denormalized_vector_and_raw_the_stored_form(rr):
    vadd(rr, "q8", (3, 4), "x")
    assert [float(v) for v in rr.execute_command("VEMB", "q8", "x")] == pytest.approx([3, 4], rel=1e-2)
    kind, blob, l2, rng = rr.execute_command("VEMB", "q8", "x", "RAW")
    assert kind == b"int8" and blob == bytes([95, 127]) and float(l2) == pytest.approx(5) and float(rng) == pytest.approx(0.8)
    vadd(rr, "f32", (3, 4), "x", "NOQUANT")
    assert [float(v) for v in rr.execute_command("VEMB", "f32", "x")] == pytest.approx([3, 4], rel=1e-6)
    kind, blob, l2 = rr.execute_command("VEMB", "f32", "x", "RAW")
    assert kind == b"f32" and struct.unpack("<2f", blob) == pytest.approx((0.6, 0.8))
    vadd(rr, "bin", (3, -4, 0), "x", "BIN")
    assert [float(v) for v in rr.execute_command("VEMB", "bin", "x")] == [1, -1, -1]
    kind, blob, l2 = rr.execute_command("VEMB", "bin", "x", "RAW")
    assert kind == b"bin" and blob == b"\x01" + b"\x00" * 7
    assert rr.execute_command("VEMB", "q8", "nope") is None and rr.execute_command("VEMB", "nokey", "x") is None
    assert err(rr, "VEMB", "q8", "x", "FOO") == "invalid option"


def test_vlinks_lists_neighbours_per_level_top_down(rr):
    for i in range(20):
        vadd(rr, "g", (1, i / 10), f"e{i}")
    levels = rr.execute_command("VLINKS", "g", "e0")
    assert isinstance(levels, list) and levels and all(isinstance(level, list) for level in levels)
    assert set(levels[-1]) <= {f"e{i}".encode() for i in range(1, 20)} and levels[-1]
    scored = rr.execute_command("VLINKS", "g", "e0", "WITHSCORES")
    for names, level in zip(levels, scored, strict=True):
        level = pairs(level) if rr.protocol_version == 2 else level
        assert list(level) == names and all(0 <= float(s) <= 1 for s in level.values())
    for name in levels[-1]:  # links are bidirectional
        assert b"e0" in rr.execute_command("VLINKS", "g", name)[-1]
    assert rr.execute_command("VLINKS", "g", "nope") is None and rr.execute_command("VLINKS", "no", "x") is None
    assert err(rr, "VLINKS", "g", "e0", "FOO") == "wrong number of arguments for 'vlinks' command"


def test_vinfo_fields_and_order(raw):
    raw.cmd("VADD", "v", "VALUES", "2", "1", "0", "x", "SETATTR", "{}")
    raw.read_exactly(b":1\r\n")
    raw.cmd("VINFO", "v")
    reply = raw.read_some()
    keys = [b"quant-type", b"hnsw-m", b"vector-dim", b"projection-input-dim", b"size", b"max-level",
            b"attributes-count", b"vset-uid", b"hnsw-max-node-uid"]
    assert reply.startswith(b"*18\r\n+quant-type\r\n+int8\r\n+hnsw-m\r\n:16\r\n+vector-dim\r\n:2\r\n")
    lines = reply.split(b"\r\n")[1:-1]
    assert [line[1:] for line in lines[::2]] == keys
    assert b"+size\r\n:1\r\n" in reply and b"+attributes-count\r\n:1\r\n" in reply
    raw.cmd("VINFO", "missing")
    assert raw.read_exactly(b"*-1\r\n") == b"*-1\r\n"
    raw.cmd("HELLO", "3")
    raw.read_some()
    raw.cmd("VINFO", "missing")
    assert raw.read_exactly(b"_\r\n") == b"_\r\n"
    raw.cmd("VINFO", "v")
    assert raw.read_some().startswith(b"%9\r\n+quant-type\r\n+int8\r\n")


def test_attributes_set_get_remove(rr):
    vadd(rr, "v", (1, 0), "x")
    assert rr.execute_command("VGETATTR", "v", "x") is None
    assert rr.execute_command("VSETATTR", "v", "x", '{"a": 1}') == 1
    assert rr.execute_command("VGETATTR", "v", "x") == b'{"a": 1}'
    assert rr.execute_command("VSETATTR", "v", "x", "not json at all") == 1  # stored as given
    assert rr.execute_command("VSETATTR", "v", "x", "") == 1
    assert rr.execute_command("VGETATTR", "v", "x") is None
    assert rr.execute_command("VSETATTR", "v", "nope", "{}") == 0
    assert rr.execute_command("VSETATTR", "nokey", "x", "{}") == 0
    assert rr.execute_command("VGETATTR", "nokey", "x") is None


def test_vrem_and_vismember_and_the_last_removal_deletes_the_key(rr):
    vadd(rr, "v", (1, 0), "x")
    vadd(rr, "v", (0, 1), "y")
    assert rr.execute_command("VISMEMBER", "v", "x") == 1
    assert rr.execute_command("VREM", "v", "x") == 1
    assert rr.execute_command("VREM", "v", "x") == 0
    assert rr.execute_command("VISMEMBER", "v", "x") == 0
    assert rr.execute_command("VISMEMBER", "nokey", "x") == 0
    assert rr.execute_command("VREM", "v", "y") == 1
    assert rr.exists("v") == 0
    assert rr.execute_command("VREM", "v", "y") == 0


def test_vrandmember(rr):
    for name in ("a", "b", "c"):
        vadd(rr, "v", (1, len(name)), name)
    assert rr.execute_command("VRANDMEMBER", "v") in (b"a", b"b", b"c")
    two = rr.execute_command("VRANDMEMBER", "v", 2)
    assert len(two) == 2 == len(set(two))
    assert sorted(rr.execute_command("VRANDMEMBER", "v", 10)) == [b"a", b"b", b"c"]
    assert len(rr.execute_command("VRANDMEMBER", "v", -7)) == 7
    assert rr.execute_command("VRANDMEMBER", "v", 0) == []
    assert rr.execute_command("VRANDMEMBER", "nokey") is None
    assert rr.execute_command("VRANDMEMBER", "nokey", 3) == []
    assert err(rr, "VRANDMEMBER", "v", "x") == "COUNT value is not an integer"
    assert err(rr, "VRANDMEMBER", "v", 1, 2) == "wrong number of arguments for 'vrandmember' command"


def test_vrange_iterates_in_byte_order(rr):
    names = ["apple", "apricot", "banana", "cherry", "date", "fig", "grape"]
    for name in names:
        vadd(rr, "v", (1, 2), name)
    assert rr.execute_command("VRANGE", "v", "[apple", "[grape", 5) == [n.encode() for n in names[:5]]
    assert rr.execute_command("VRANGE", "v", "(apple", "(cherry") == [b"apricot", b"banana"]
    assert rr.execute_command("VRANGE", "v", "-", "+") == [n.encode() for n in names]
    assert rr.execute_command("VRANGE", "v", "[app", "[apr") == [b"apple"]
    assert rr.execute_command("VRANGE", "v", "[grape", "[apple") == []
    assert rr.execute_command("VRANGE", "v", "-", "+", 0) == []
    assert rr.execute_command("VRANGE", "v", "-", "+", -1) == [n.encode() for n in names]
    seen, cursor = [], "-"
    while True:
        batch = rr.execute_command("VRANGE", "v", cursor, "+", 3)
        seen += batch
        if len(batch) < 3:
            break
        cursor = b"(" + batch[-1]
    assert seen == [n.encode() for n in names]
    assert rr.execute_command("VRANGE", "nokey", "-", "+") == []
    assert err(rr, "VRANGE", "v", "apple", "+") == "invalid start range format"
    assert err(rr, "VRANGE", "v", "-", "[") == "invalid end range format"
    assert err(rr, "VRANGE", "v", "+", "-") == "'-' can only be used as first argument, '+' only as second"
    assert err(rr, "VRANGE", "v", "-", "+", "x") == "invalid COUNT value"


def test_wrongtype_on_every_command(rr):
    rr.set("s", "x")
    for argv in (("VREM", "s", "x"), ("VCARD", "s"), ("VDIM", "s"), ("VEMB", "s", "x"), ("VINFO", "s"),
                 ("VISMEMBER", "s", "x"), ("VGETATTR", "s", "x"), ("VSETATTR", "s", "x", "{}"),
                 ("VLINKS", "s", "x"), ("VRANDMEMBER", "s"), ("VRANGE", "s", "-", "+")):
        assert err(rr, *argv) == WRONGTYPE, argv


def test_multi_exec_and_watch(rr):
    vadd(rr, "v", (1, 0), "x")
    pipe = rr.pipeline(transaction=True)
    pipe.execute_command("VADD", "v", "VALUES", 2, 0, 1, "y", "CAS")
    pipe.execute_command("VSIM", "v", "ELE", "y", "COUNT", 1)
    assert pipe.execute()[1] == [b"y"]
    watcher = redis.Redis(port=rr.connection_pool.connection_kwargs["port"])
    with watcher.pipeline() as p:
        p.watch("v")
        rr.execute_command("VSETATTR", "v", "x", "{}")
        p.multi()
        p.execute_command("VCARD", "v")
        with pytest.raises(redis.WatchError):
            p.execute()
    watcher.close()


def test_dump_restore_copy_rename_and_memory(rr):
    for i in range(50):
        vadd(rr, "v", (1, i, i * i % 7), f"e{i}", "SETATTR", f'{{"i": {i}}}')
    before = rr.execute_command("VSIM", "v", "ELE", "e3", "WITHSCORES", "COUNT", 5)
    payload = rr.dump("v")
    rr.delete("v")
    assert rr.restore("v", 0, payload)
    assert rr.execute_command("VSIM", "v", "ELE", "e3", "WITHSCORES", "COUNT", 5) == before
    assert rr.execute_command("COPY", "v", "w") == 1
    rr.execute_command("VREM", "v", "e3")
    assert rr.execute_command("VCARD", "w") == 50 and rr.execute_command("VCARD", "v") == 49
    rr.rename("w", "z")
    assert rr.execute_command("VGETATTR", "z", "e7") == b'{"i": 7}'
    assert rr.memory_usage("z") > 50 * 3
    with pytest.raises(redis.ResponseError):
        rr.restore("bad", 0, payload[:-3] + b"\x00\x00\x00")


def test_vector_sets_count_in_used_memory_and_vadd_is_refused_past_maxmemory(make_server):
    srv = make_server()
    r = redis.Redis(port=srv.port, protocol=2)
    r.config_set("maxmemory", 2**40)  # per-key accounting runs while maxmemory is set
    before = r.info("memory")["used_memory"]
    pipe = r.pipeline(transaction=False)
    for i in range(400):
        pipe.execute_command("VADD", "big", "VALUES", 64, *([i % 7] * 63 + [1]), f"element-{i}", "NOQUANT")
    pipe.execute()
    grown = r.info("memory")["used_memory"] - before
    assert grown > 400 * 64 * 4  # at least the float32 vectors themselves
    assert r.memory_usage("big") > 400 * 64 * 4
    r.config_set("maxmemory", r.info("memory")["used_memory"] - 1024)  # noeviction: refuse
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.execute_command("VADD", "big", "VALUES", 64, *([1] * 64), "one-more", "NOQUANT")
    assert r.execute_command("VCARD", "big") == 400
    assert r.execute_command("VREM", "big", "element-1") == 1  # removals are still allowed


def test_noquant_gives_the_vector_back_to_float32_rounding_and_q8_scores_stay_within_0_1(rr):
    rng = np.random.default_rng(21)
    vec = rng.uniform(0, 10, 50).astype(np.float32)
    rr.execute_command("VADD", "f", "FP32", vec.tobytes(), "x", "NOQUANT")
    back = np.array([float(v) for v in rr.execute_command("VEMB", "f", "x")], np.float32)
    assert np.allclose(back, vec, rtol=3e-7, atol=0)  # (x / |x|) * |x| in float32, as Redis
    for i in range(20):
        rr.execute_command("VADD", "q", "FP32", rng.uniform(0, 10, 50).astype(np.float32).tobytes(), f"e{i}")
    for i in range(20):
        got = rr.execute_command("VSIM", "q", "ELE", f"e{i}", "WITHSCORES", "COUNT", 20)
        scores = [float(s) for s in (got.values() if isinstance(got, dict) else got[1::2])]
        assert all(0 <= s <= 1 for s in scores) and max(scores) > 0.999  # itself, up to Q8 error


def test_filter_ef_bounds_how_many_nearest_elements_are_examined(rr):
    for i in range(30):
        vadd(rr, "f", (1, i / 30), f"e{i}", "SETATTR", f'{{"i": {i}}}')
    near_e0 = rr.execute_command("VSIM", "f", "ELE", "e0", "FILTER", ".i >= 0", "COUNT", 3)
    assert near_e0 == [b"e0", b"e1", b"e2"]
    assert rr.execute_command("VSIM", "f", "ELE", "e0", "FILTER", ".i == 29", "FILTER-EF", 1) == []
    assert rr.execute_command("VSIM", "f", "ELE", "e0", "FILTER", ".i == 29", "FILTER-EF", 30) == [b"e29"]
    assert rr.execute_command("VSIM", "f", "ELE", "e0", "FILTER", ".i == 29") == [b"e29"]  # default 10 * 100
