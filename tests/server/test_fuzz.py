"""Fuzzing the request parser and the dispatcher with hypothesis: random and mutated RESP frames,
random commands from the command table with hostile arguments. The reader raises nothing but
ProtocolError; the server never crashes or hangs and other clients keep being served. A short run
is part of the default suite; ``-m slow`` runs the long one (PION_FUZZ_EXAMPLES overrides both).

Handler exceptions that are not ReplyError (a bug: the connection is dropped, the server lives on)
are collected from the loop's exception handler and reported by the long run's assertion.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.servers import ThreadServer, make_settings

from pion.protocol.errors import ProtocolError
from pion.protocol.reader import RequestReader

SHORT = int(os.environ.get("PION_FUZZ_EXAMPLES", "60"))
LONG = int(os.environ.get("PION_FUZZ_EXAMPLES", "2000"))
_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def frame(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


args_st = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
tokens = st.sampled_from([b"*", b"$", b"\r\n", b"\n", b"-1", b"0", b"99999999999", b"-", b":", b"+", b"\x00",
                          b"\"", b"'", b"\\x4", b" ", b"*-1\r\n", b"$-1\r\n", b"*0\r\n", b"PING"])


@st.composite
def mutated_stream(draw) -> bytes:
    """Valid frames and inline lines, then bytes flipped, cut, duplicated or spliced with junk."""
    parts = []
    for args in draw(st.lists(args_st, max_size=4)):
        parts.append(frame(args) if draw(st.booleans()) else b" ".join(args).replace(b"\n", b"") + b"\r\n")
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.integers(0, 3))
        pos = draw(st.integers(0, len(data)))
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == 1:
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == 2:
            data[pos:pos] = draw(tokens)
        else:
            data[pos:pos] = draw(st.binary(max_size=8))
    return bytes(data)


def feed_all(reader: RequestReader, data: bytes, cuts: list[int]) -> list[list[bytes]]:
    out = []
    last = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts} | {len(data)}):
        reader.feed(data[last:cut])
        last = cut
        while (argv := reader.next_command()) is not None:
            out.append(argv)
    return out


# -- the reader ------------------------------------------------------------------------------------


@settings(max_examples=SHORT * 3, **_FUZZ)
@given(mutated_stream(), st.lists(st.integers(0, 1000), max_size=6), st.booleans())
def test_reader_raises_only_protocol_errors(data, cuts, strict):
    reader = RequestReader(1024 * 1024)
    reader.set_strict(strict)
    try:
        for argv in feed_all(reader, data, cuts):
            assert isinstance(argv, list) and all(isinstance(a, bytes) for a in argv)
    except ProtocolError:
        pass


@settings(max_examples=SHORT * 3, **_FUZZ)
@given(st.lists(args_st, min_size=1, max_size=5), st.lists(st.integers(0, 500), max_size=8), st.booleans())
def test_valid_frames_parse_the_same_however_they_are_split(commands, cuts, strict):
    commands = [c[:10] for c in commands]
    reader = RequestReader(1024 * 1024)
    reader.set_strict(strict)
    assert feed_all(reader, b"".join(frame(c) for c in commands), cuts) == commands


def test_strict_mode_switches_mid_stream_without_losing_bytes():
    reader = RequestReader()
    reader.feed(frame([b"AUTH", b"pw"]) + frame([b"SET", b"k", b"v" * 20000]) + b"PING\r\n")
    assert reader.next_command() == [b"AUTH", b"pw"]
    reader.set_strict(True)  # e.g. RESET: what hiredis held is parsed with the pre-auth caps now
    with pytest.raises(ProtocolError, match="unauthenticated bulk length"):
        reader.next_command()
    reader = RequestReader()
    reader.set_strict(True)
    reader.feed(frame([b"AUTH", b"pw"]) + frame([b"SET", b"k", b"v" * 20000]) + b"PING\r\n")
    assert reader.next_command() == [b"AUTH", b"pw"]
    reader.set_strict(False)
    assert reader.next_command() == [b"SET", b"k", b"v" * 20000]
    assert reader.next_command() == [b"PING"]


ATHERIS_HARNESS = """
import sys
import atheris
with atheris.instrument_imports():
    from pion.protocol.errors import ProtocolError
    from pion.protocol.reader import RequestReader

def one(data):
    fdp = atheris.FuzzedDataProvider(data)
    strict, cut = fdp.ConsumeBool(), fdp.ConsumeIntInRange(0, 64)
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    reader = RequestReader(1 << 20)
    reader.set_strict(strict)
    try:
        for part in (body[:cut], body[cut:]):
            reader.feed(part)
            while reader.next_command() is not None:
                pass
    except ProtocolError:
        pass

atheris.Setup([sys.argv[0], "-runs=" + sys.argv[1], "-max_len=512"], one)
atheris.Fuzz()
"""


@pytest.mark.parametrize("runs", [pytest.param(5000, id="short"),
                                  pytest.param(2_000_000, id="long", marks=pytest.mark.slow)])
def test_reader_under_atheris(runs):
    """Coverage-guided fuzzing of the reader (atheris comes with the dev extras)."""
    done = subprocess.run([sys.executable, "-c", ATHERIS_HARNESS, str(runs)], capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]


# -- the server -----------------------------------------------------------------------------------


class Fuzzed:
    """One server for a whole hypothesis run, with its loop's internal errors collected."""

    def __init__(self, tmp_path) -> None:
        self.srv = ThreadServer(make_settings(tmp_path, requirepass="pw", tenants=("t1:tpw",))).start()
        self.errors: list[str] = []
        self.srv.loop.call_soon_threadsafe(self.srv.loop.set_exception_handler, self._handler)
        self.control = redis.Redis(port=self.srv.port, password="pw", socket_timeout=5)
        table = self.srv.server.table
        self.names = sorted(
            {s.full_name.replace("|", " ").encode() for top in table for s in [top, *top.subcommands.values()]
             if s.handler is not None} - {b"shutdown", b"debug", b"monitor", b"client pause", b"save",
                                          b"bgsave", b"bgrewriteaof", b"flushall", b"kv.prefix.save",
                                          b"config set", b"config rewrite", b"client kill"})

    def _handler(self, loop, context) -> None:
        exc = context.get("exception")
        self.errors.append(f"{context.get('message')}: {exc!r}")

    def alive(self) -> None:
        start = time.perf_counter()
        assert self.control.ping() is True
        assert time.perf_counter() - start < 2.0, "the server took too long to answer another client"

    def stop(self) -> None:
        self.control.close()
        self.srv.stop()


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    target = Fuzzed(tmp_path_factory.mktemp("fuzz"))
    yield target
    target.stop()


hostile = st.one_of(st.binary(max_size=30), st.sampled_from(
    [b"0", b"-1", b"1", b"9223372036854775807", b"-9223372036854775808", b"99999999999999999999", b"nan",
     b"inf", b"-inf", b"1e309", b"*", b"k", b"", b"\x00", b"COUNT", b"LIMIT", b"WITHSCORES", b"EX", b"PX",
     b"KEEPTTL", b"BY", b"GET", b"STORE", b"TYPE", b"MATCH", b"FIELDS", b"RANGE", b"FMT", b"RAW"]))


@st.composite
def commands(draw, names) -> list[bytes]:
    name = draw(st.sampled_from(names)).split(b" ")
    return name + draw(st.lists(hostile, max_size=6))


def send_and_drain(port: int, payload: bytes, auth: bytes | None) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=3)
    try:
        if auth:
            sock.sendall(auth)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        sock.close()


def run_commands(fuzzed: Fuzzed, batch: list[list[bytes]], tenant: bool) -> None:
    auth = frame([b"AUTH", b"t1", b"tpw"] if tenant else [b"AUTH", b"pw"])
    send_and_drain(fuzzed.srv.port, b"".join(frame(c) for c in batch), auth)
    fuzzed.alive()


def test_garbage_streams_never_hurt_the_server(fuzzed):
    @settings(max_examples=SHORT, **_FUZZ)
    @given(mutated_stream(), st.booleans())
    def check(data, authenticated):
        send_and_drain(fuzzed.srv.port, data, frame([b"AUTH", b"pw"]) if authenticated else None)
        fuzzed.alive()

    check()


def test_random_commands_never_hurt_the_server(fuzzed):
    @settings(max_examples=SHORT, **_FUZZ)
    @given(st.lists(commands(fuzzed.names), min_size=1, max_size=8), st.booleans())
    def check(batch, tenant):
        run_commands(fuzzed, batch, tenant)

    check()


@pytest.mark.slow
def test_long_fuzz_finds_no_internal_errors(fuzzed):
    @settings(max_examples=LONG, **_FUZZ)
    @given(st.lists(commands(fuzzed.names), min_size=1, max_size=8), st.booleans(), mutated_stream())
    def check(batch, tenant, garbage):
        run_commands(fuzzed, batch, tenant)
        send_and_drain(fuzzed.srv.port, garbage, frame([b"AUTH", b"pw"]))
        fuzzed.alive()

    check()
    assert fuzzed.errors == []
