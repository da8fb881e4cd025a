"""Redis 8.4's XREADGROUP ... CLAIM min-idle-time over the wire (RESP2 and RESP3). No 8.x server
runs here: the expectations are the documented semantics (the XREADGROUP page's "The CLAIM
option": idle pending entries first, longest idle first, then new entries, COUNT shared, two
more fields per entry, NOACK not applying to claimed entries, CLAIM ignored for an explicit ID,
a blocked read woken when an entry grows idle enough) and the scenarios of redis-py's and
jedis's 8.4 tests."""

from __future__ import annotations

import threading
import time

import redis

from tests.compat.test_sets import err, record_journal
from tests.compat.test_stream_deletes import pending


def setup_read(r, n: int = 2) -> list[bytes]:
    """``n`` entries read by c1 (so pending in g), returns their IDs."""
    r.delete("s")
    got = [r.xadd("s", {"f": f"v{i}"}, id=f"{i}-0") for i in range(1, n + 1)]
    r.xgroup_create("s", "g", "0")
    r.xreadgroup("g", "c1", {"s": ">"})
    return got


def plain(r) -> redis.Redis:
    """The client without redis-py's XREADGROUP parser (it drops CLAIM's two extra fields)."""
    r.response_callbacks.pop("XREADGROUP", None)
    return r


def claim_read(r, *options, key: str = "s", consumer: str = "c2"):
    """XREADGROUP with CLAIM, as {key: [(id, fields, idle, count)]} whatever the protocol."""
    reply = plain(r).execute_command("XREADGROUP", "GROUP", "g", consumer, *options, "STREAMS", key, ">")
    if reply is None:
        return None
    pairs = reply.items() if isinstance(reply, dict) else reply
    return {k: [tuple(entry) for entry in v] for k, v in pairs}


def test_idle_entries_first_longest_idle_first_then_new_ones(rr):
    setup_read(rr, 2)
    rr.xclaim("s", "g", "c1", 0, ["1-0"], idle=5000)   # delivery count 2, idle 5 s
    rr.xclaim("s", "g", "c1", 0, ["2-0"], idle=10000)  # delivery count 2, idle 10 s
    rr.xadd("s", {"f": "v3"}, id="3-0")
    got = claim_read(rr, "CLAIM", 1000)[b"s"]
    assert [entry[0] for entry in got] == [b"2-0", b"1-0", b"3-0"]
    (_, f2, idle2, n2), (_, f1, idle1, n1), (_, f3, idle3, n3) = got
    assert 10000 <= idle2 < 12000 and 5000 <= idle1 < 7000 and n1 == n2 == 2
    assert (idle3, n3) == (0, 0)
    assert [f2, f1, f3] == [[b"f", b"v2"], [b"f", b"v1"], [b"f", b"v3"]]
    detail = {e["message_id"]: e for e in rr.xpending_range("s", "g", "-", "+", 10)}
    assert [detail[i]["consumer"] for i in (b"1-0", b"2-0", b"3-0")] == [b"c2"] * 3
    assert [detail[i]["times_delivered"] for i in (b"1-0", b"2-0", b"3-0")] == [3, 3, 1]
    assert all(detail[i]["time_since_delivered"] < 1000 for i in detail)
    assert claim_read(rr, "CLAIM", 60_000) is None  # nothing idle enough, nothing new


def test_count_is_shared_between_claimed_and_new_entries(r):
    setup_read(r, 3)
    for sid, idle in (("1-0", 3000), ("2-0", 2000), ("3-0", 1000)):
        r.xclaim("s", "g", "c1", 0, [sid], idle=idle)
    r.xadd("s", {"f": "v4"}, id="4-0")
    r.xadd("s", {"f": "v5"}, id="5-0")
    got = claim_read(r, "COUNT", 2, "CLAIM", 500)[b"s"]
    assert [(e[0], e[3]) for e in got] == [(b"1-0", 2), (b"2-0", 2)]  # the budget went to idle ones
    got = claim_read(r, "COUNT", 3, "CLAIM", 500)[b"s"]
    assert [(e[0], e[2], e[3]) for e in got][1:] == [(b"4-0", 0, 0), (b"5-0", 0, 0)]
    assert got[0][0] == b"3-0"


def test_noack_does_not_apply_to_claimed_entries(r):
    setup_read(r, 2)
    time.sleep(0.02)
    r.xadd("s", {"f": "v3"}, id="3-0")
    got = claim_read(r, "CLAIM", 10, "NOACK")[b"s"]
    assert [e[0] for e in got] == [b"1-0", b"2-0", b"3-0"]
    assert pending(r, "g") == (2, b"1-0", b"2-0", [(b"c2", 2)])  # 3-0 read NOACK: not pending


def test_an_explicit_id_ignores_claim_and_keeps_the_plain_shape(raw):
    raw.cmd("XADD", "s", "1-0", "f", "v")
    raw.cmd("XGROUP", "CREATE", "s", "g", "0")
    raw.cmd("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
    raw.read_some(0.3)
    raw.cmd("XREADGROUP", "GROUP", "g", "c1", "CLAIM", "0", "STREAMS", "s", "0")
    assert raw.read_some() == b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"


def test_wire_shapes_resp2_and_resp3(raw):
    raw.cmd("XADD", "s", "1-0", "f", "v")
    raw.cmd("XGROUP", "CREATE", "s", "g", "0")
    raw.read_some(0.3)
    raw.cmd("XREADGROUP", "GROUP", "g", "c1", "CLAIM", "0", "STREAMS", "s", ">")
    assert raw.read_some() == (b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
                               b":0\r\n:0\r\n")
    raw.cmd("HELLO", "3")
    raw.read_some(0.3)
    time.sleep(0.01)
    raw.cmd("XREADGROUP", "GROUP", "g", "c2", "CLAIM", "0", "STREAMS", "s", ">")
    got = raw.read_some()
    assert got.startswith(b"%1\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:")
    assert got.endswith(b"\r\n:1\r\n")  # delivered once before


def test_a_deleted_entry_is_claimed_with_a_nil_body(r):
    setup_read(r, 2)
    r.xdel("s", "1-0")
    time.sleep(0.01)
    reply = plain(r).execute_command("XREADGROUP", "GROUP", "g", "c2", "CLAIM", 0, "STREAMS", "s", ">")
    entries = reply[0][1]
    assert entries[0][0] == b"1-0" and entries[0][1] is None and entries[0][3] == 1
    assert entries[1][0] == b"2-0" and entries[1][1] == [b"f", b"v2"]
    assert pending(r, "g") == (2, b"1-0", b"2-0", [(b"c2", 2)])


def test_argument_errors(r, redis_ref):
    setup_read(r, 1)
    assert err(r, "XREAD", "CLAIM", 5, "STREAMS", "s", "0") == \
        "The CLAIM option is only supported by XREADGROUP. You called XREAD instead."
    assert err(r, "XREADGROUP", "GROUP", "g", "c", "CLAIM", "abc", "STREAMS", "s", ">") == \
        "Invalid min-idle-time argument for XREADGROUP"
    assert err(r, "XREADGROUP", "GROUP", "g", "c", "CLAIM", "STREAMS", "s", ">") == \
        "Invalid min-idle-time argument for XREADGROUP"  # CLAIM takes the next word as its value
    assert claim_read(r, "CLAIM", -5)[b"s"][0][0] == b"1-0"  # negative: as 0, like XCLAIM/XAUTOCLAIM
    ref = redis.Redis(port=redis_ref.port)
    for client in (r, ref):  # a 7.x text Pion had wrong, checked against redis-server 7.0.15
        assert err(client, "XREAD", "NOACK", "STREAMS", "s", "0") == \
            "The NOACK option is only supported by XREADGROUP. You called XREAD instead."


def test_a_blocked_claim_read_wakes_when_an_entry_grows_idle(server):
    r = redis.Redis(port=server.port)
    setup_read(r, 1)
    result: dict = {}

    def blocked() -> None:
        client = plain(redis.Redis(port=server.port, socket_timeout=10))
        start = time.monotonic()
        reply = client.execute_command("XREADGROUP", "GROUP", "g", "c2", "BLOCK", 5000, "CLAIM", 400,
                                       "STREAMS", "s", ">")
        result["reply"] = dict(reply.items() if isinstance(reply, dict) else reply)
        result["waited"] = time.monotonic() - start
        client.close()

    thread = threading.Thread(target=blocked)
    thread.start()
    thread.join(8)
    assert not thread.is_alive()
    entry = result["reply"][b"s"][0]
    assert entry[0] == b"1-0" and entry[2] >= 400 and entry[3] == 1
    assert 0.2 < result["waited"] < 4.5  # woken by time (about 0.4 s), well before BLOCK's 5 s


def test_logged_claims_replay_to_the_same_pel(make_server):
    first, second = make_server(), make_server()
    records = record_journal(first)
    r = redis.Redis(port=first.port)
    setup_read(r, 2)
    time.sleep(0.01)
    r.xadd("s", {"f": "v3"}, id="3-0")
    claim_read(r, "CLAIM", 0)
    logged = [argv for effects in records for argv in effects]
    claims = [argv for argv in logged if argv[0] == b"XCLAIM" and argv[3] == b"c2"]
    assert [argv[5] for argv in claims] == [b"1-0", b"2-0", b"3-0"]
    assert [argv[9] for argv in claims] == [b"2", b"2", b"1"]  # RETRYCOUNT
    copy = redis.Redis(port=second.port)
    for argv in logged:
        copy.execute_command(*argv)
    assert pending(copy, "g") == pending(r, "g") == (3, b"1-0", b"3-0", [(b"c2", 3)])
    mine = [(e["message_id"], e["times_delivered"]) for e in r.xpending_range("s", "g", "-", "+", 10)]
    assert [(e["message_id"], e["times_delivered"]) for e in copy.xpending_range("s", "g", "-", "+", 10)] == mine


def test_command_docs_list_claim(raw):
    raw.cmd("COMMAND", "DOCS", "xreadgroup")
    docs = raw.read_some()
    assert b"CLAIM" in docs and b"min-idle-time" in docs and b"8.4.0" in docs
