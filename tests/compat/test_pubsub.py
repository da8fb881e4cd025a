"""Pub/Sub through redis-py in RESP2 and RESP3, plus exact bytes for the subscribed-mode rules."""

import time

import pytest
import redis


def _next_message(pubsub, timeout=2.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            return message
    raise AssertionError("no message")


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def proto(request):
    return request.param


def test_subscribe_publish_receive(server, proto):
    sub = redis.Redis(port=server.port, protocol=proto)
    pub = redis.Redis(port=server.port, protocol=proto)
    ps = sub.pubsub()
    ps.subscribe("news")
    assert _next_message(ps)["type"] == "subscribe"
    assert pub.publish("news", "hello") == 1
    message = _next_message(ps)
    assert message["type"] == "message" and message["channel"] == b"news" and message["data"] == b"hello"


def test_pattern_subscription_receives_pmessage(server, proto):
    sub = redis.Redis(port=server.port, protocol=proto)
    ps = sub.pubsub()
    ps.psubscribe("news.*")
    assert _next_message(ps)["type"] == "psubscribe"
    assert redis.Redis(port=server.port).publish("news.tech", "x") == 1
    message = _next_message(ps)
    assert message["type"] == "pmessage" and message["pattern"] == b"news.*" and message["channel"] == b"news.tech"


def test_publish_counts_channel_and_pattern_receivers(server):
    ps1 = redis.Redis(port=server.port).pubsub()
    ps1.subscribe("c")
    ps2 = redis.Redis(port=server.port).pubsub()
    ps2.psubscribe("c*")
    _next_message(ps1), _next_message(ps2)
    assert redis.Redis(port=server.port).publish("c", "m") == 2


def test_subscribe_replies_raw_resp2(raw):
    raw.cmd("SUBSCRIBE", "a", "b")
    expected = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("GET", "x")
    err = b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    assert raw.read_exactly(err) == err
    raw.cmd("PING")
    pong = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    assert raw.read_exactly(pong) == pong
    raw.cmd("UNSUBSCRIBE")
    expected = b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("GET", "x")
    assert raw.read_exactly(b"$-1\r\n") == b"$-1\r\n"


def test_resp3_subscribed_client_may_run_any_command(raw):
    raw.cmd("HELLO", "3")
    raw.read_some()
    raw.cmd("SUBSCRIBE", "a")
    expected = b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("GET", "x")
    assert raw.read_exactly(b"_\r\n") == b"_\r\n"


def test_unsubscribe_without_subscriptions(raw):
    raw.cmd("UNSUBSCRIBE")
    expected = b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
    assert raw.read_exactly(expected) == expected


def test_pubsub_introspection(server, r):
    ps = redis.Redis(port=server.port).pubsub()
    ps.subscribe("ch1", "ch2")
    ps.psubscribe("p*")
    for _ in range(3):
        _next_message(ps)
    assert sorted(r.pubsub_channels()) == [b"ch1", b"ch2"]
    assert r.pubsub_channels("ch1") == [b"ch1"]
    assert r.pubsub_numsub("ch1", "nope") == [(b"ch1", 1), (b"nope", 0)]
    assert r.pubsub_numpat() == 1


def test_numsub_is_a_flat_array_in_resp3(r3):
    assert r3.execute_command("PUBSUB", "NUMSUB", "a", "a") == [b"a", 0, b"a", 0]


def test_shard_channels(server, r):
    sub = redis.Redis(port=server.port)
    ps = sub.pubsub()
    ps.ssubscribe("sc")
    assert _next_message(ps)["type"] == "ssubscribe"
    assert r.spublish("sc", "hi") == 1
    message = _next_message(ps)
    assert message["type"] == "smessage" and message["data"] == b"hi"
    assert r.pubsub_shardchannels() == [b"sc"]
    assert r.pubsub_shardnumsub("sc") == [(b"sc", 1)]


def test_disconnect_removes_subscriptions(server, r):
    sub = redis.Redis(port=server.port)
    ps = sub.pubsub()
    ps.subscribe("gone")
    _next_message(ps)
    ps.close()
    sub.close()
    deadline = time.time() + 2
    while time.time() < deadline and r.publish("gone", "x") != 0:
        time.sleep(0.02)
    assert r.publish("gone", "x") == 0


def test_keyspace_notifications(make_server):
    srv = make_server(notify_keyspace_events="KEA")
    sub = redis.Redis(port=srv.port).pubsub()
    sub.psubscribe("__key*__:*")
    _next_message(sub)
    redis.Redis(port=srv.port).set("nk", "v")
    messages = {(_m := _next_message(sub))["channel"]: _m["data"] for _ in range(2)}
    assert messages == {b"__keyspace@0__:nk": b"set", b"__keyevent@0__:set": b"nk"}


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_subscribe_confirmations_are_sent_even_with_client_reply_off(raw):
    raw.cmd("CLIENT", "REPLY", "OFF")
    raw.cmd("SUBSCRIBE", "ch")
    expected = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("UNSUBSCRIBE", "ch")
    expected = b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"
    assert raw.read_exactly(expected) == expected
    raw.cmd("PING")  # still off for ordinary replies
    raw.cmd("CLIENT", "REPLY", "ON")
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"


def test_new_key_events_fire_once_per_created_key(server, r):
    r.config_set("notify-keyspace-events", "En")
    sub = redis.Redis(port=server.port).pubsub()
    sub.psubscribe("*")
    _next_message(sub)
    r.set("foo", "bar")
    r.set("foo", "baz")  # not new
    r.lpush("bar", "x")
    assert _next_message(sub)["channel"] == b"__keyevent@0__:new"
    message = _next_message(sub)
    assert (message["channel"], message["data"]) == (b"__keyevent@0__:new", b"bar")
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": "nE"}


def test_config_set_maxmemory_evicts_at_once_with_evicted_events(server, r):
    r.config_set("notify-keyspace-events", "Ee")
    r.config_set("maxmemory-policy", "allkeys-lru")
    sub = redis.Redis(port=server.port).pubsub()
    sub.psubscribe("*")
    _next_message(sub)
    r.set("foo", "bar")
    try:
        r.config_set("maxmemory", 1)
        message = _next_message(sub)
        assert (message["channel"], message["data"]) == (b"__keyevent@0__:evicted", b"foo")
    finally:
        r.config_set("maxmemory", 0)
    assert r.exists("foo") == 0


def test_claims_and_group_reads_announce_the_consumers_they_create(server, r):
    r.config_set("notify-keyspace-events", "Kt")
    sub = redis.Redis(port=server.port).pubsub()
    sub.psubscribe("*")
    _next_message(sub)
    r.xgroup_create("s", "g", "$", mkstream=True)
    r.xadd("s", {"f": "v"}, id="1-0")
    r.xreadgroup("g", "Alice", {"s": ">"})
    r.xclaim("s", "g", "Mike", 0, ["1-0"])
    r.xautoclaim("s", "g", "Mike", 0, "0-0")  # Mike exists: no event
    r.xgroup_delconsumer("s", "g", "Lee")  # nobody to delete: no event
    r.xgroup_delconsumer("s", "g", "Alice")
    events = [_next_message(sub)["data"] for _ in range(5)]
    assert events == [b"xgroup-create", b"xadd", b"xgroup-createconsumer", b"xgroup-createconsumer",
                      b"xgroup-delconsumer"]  # what redis-server 7.0 sends for the same commands
