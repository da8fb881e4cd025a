"""The request reader's limits (issue #13, item 4): no ``*N`` over 1,048,576 reaches hiredis (which
allocates the whole list for it), in any frame of a read and across read boundaries; payloads that
merely look like big headers are parsed as data; a frame of many small arguments is parsed in
linear time."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from pion.protocol.errors import ProtocolError
from pion.protocol.reader import MAX_MULTIBULK_LEN, RequestReader


def frame(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def parse(chunks: list[bytes]) -> list:
    reader, out = RequestReader(), []
    for chunk in chunks:
        reader.feed(chunk)
        try:
            while (argv := reader.next_command()) is not None:
                out.append(argv)
        except ProtocolError as exc:
            out.append(f"ERR {exc}")
            break
    return out


def split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_the_limit_is_redis_1024_times_1024():
    assert MAX_MULTIBULK_LEN == 1024 * 1024


@pytest.mark.parametrize("seed", range(40))
def test_a_huge_count_after_good_frames_is_refused_wherever_the_reads_split(seed):
    rng = random.Random(seed)
    good = [frame(b"SET", b"k%d" % i, b"v" * rng.randint(0, 300)) for i in range(rng.randint(1, 5))]
    bad = b"*%d\r\n" % rng.choice([1024 * 1024 + 1, 2**31 - 1, 10**12])
    data = b"".join(good) + bad + frame(b"PING")
    got = parse(split_randomly(data, rng))
    assert got[:-1] == [[b"SET", b"k%d" % i, g.split(b"\r\n")[-2]] for i, g in enumerate(good)]
    assert got[-1] == "ERR invalid multibulk length"


def test_hiredis_never_allocates_for_a_declared_count():
    """On main ``*1\\r\\n$4\\r\\nPING\\r\\n*2147483647\\r\\n`` made hiredis build a 16 GB list."""
    tracemalloc.start()
    try:
        assert parse([b"*1\r\n$4\r\nPING\r\n*134217728\r\n"]) == [[b"PING"], "ERR invalid multibulk length"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_a_nested_array_with_a_huge_count_is_refused():
    assert parse([b"*2\r\n$3\r\nGET\r\n*3000000\r\n"]) == ["ERR expected '$', got '*'"]


@pytest.mark.parametrize("seed", range(10))
def test_payloads_that_look_like_big_headers_are_data(seed):
    rng = random.Random(seed)
    tricky = [b"*2147483647", b"\r\n*3000000000\r\n", b"$999999999", b"x$123456\r\n*1048577\r\n"]
    frames = [frame(b"SET", b"k", rng.choice(tricky) * rng.randint(1, 40)) for _ in range(6)]
    data = b"".join(frames)
    assert parse(split_randomly(data, rng)) == [[b"SET", b"k", f.split(b"\r\n", 6)[6][:-2]] for f in frames]


def test_a_frame_of_a_million_small_arguments_parses():
    count = MAX_MULTIBULK_LEN
    data = b"*%d\r\n$5\r\nRPUSH\r\n$1\r\nL\r\n" % count + b"$1\r\nx\r\n" * (count - 2)
    got = parse([data[i:i + 262144] for i in range(0, len(data), 262144)])
    assert len(got) == 1 and len(got[0]) == count and got[0][-1] == b"x"


def test_an_oversize_bulk_length_is_still_refused_before_its_payload():
    data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$600000000\r\n" + b"x" * 300_000
    assert parse([data[i:i + 65536] for i in range(0, len(data), 65536)]) == ["ERR invalid bulk length"]
