"""Client-side caching: CLIENT TRACKING in its modes, RESP3 invalidation pushes, the RESP2
``__redis__:invalidate`` channel, for every write path. Each scenario runs as raw RESP against Pion
and against redis-server 7.0.15 and the bytes must be equal; Pion-only paths (eviction, tenants)
and the clients (redis-py's cache, node-redis clientSideCache) follow."""

from __future__ import annotations

import socket
import time

import pytest
import redis


class Raw:
    def __init__(self, port: int, resp3: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if resp3:
            self.cmd("HELLO", "3")
            self.read()

    def cmd(self, *args: str | bytes) -> None:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode() if isinstance(arg, str) else arg
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))

    def read(self, quiet: float = 0.15) -> bytes:
        """Everything that arrives until the line has been quiet for ``quiet`` seconds."""
        data = b""
        self.sock.settimeout(quiet)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
        return data

    def run(self, *args: str) -> bytes:
        """Send a command; wait (5 s at most) for its reply, then take whatever follows it."""
        self.cmd(*args)
        self.sock.settimeout(5)
        try:
            first = self.sock.recv(65536)
        except TimeoutError:
            return b""
        return first + self.read(0.1)

    def close(self) -> None:
        self.sock.close()


def scenario_default(port):
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on"), me.run("GET", "k"), other.run("SET", "k", "1"), me.read(),
           me.run("SET", "k", "2"),  # not tracked any more: the first change forgot me
           me.run("MGET", "k", "j"), me.run("SET", "k", "3"),  # my own write: after my reply
           me.run("GET", "k"), other.run("DEL", "k"), me.read(), me.run("GET", "h"), other.run("HSET", "h", "f", "v"),
           me.read(), me.run("CLIENT", "TRACKINGINFO"), me.run("CLIENT", "GETREDIR")]
    me.close(), other.close()
    return out


def scenario_transactions_scripts_flush(port):
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on"), me.run("GET", "k")]
    me.cmd("MULTI"), me.cmd("SET", "k", "1"), me.cmd("GET", "k"), me.cmd("EXEC")
    out.append(me.read())
    out += [other.run("EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "k"), me.read()]
    out += [me.run("EVAL", "return redis.call('get', KEYS[1])", "1", "s"), other.run("SET", "s", "1"), me.read()]
    out += [me.run("GET", "k"), other.run("FLUSHALL"), me.read(), me.run("FLUSHDB")]
    me.close(), other.close()
    return out


def scenario_script_declared_keys(port):
    """A script that calls a read command is tracked on its declared keys; one that only writes
    (or only PINGs) is not (Redis 7.0's unit/tracking "Tracking only occurs for scripts ...")."""
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on"), other.run("MSET", "k2", "1", "k1", "1"),
           me.run("EVAL", "redis.call('set', 'k3', 'bar')", "2", "k1", "k2"), other.run("MSET", "k2", "2", "k1", "2"),
           me.read(), me.run("EVAL", "redis.call('get', 'k3')", "2", "k1", "k2"), other.run("MSET", "k2", "2", "k1", "2"),
           me.read(), me.run("EVAL_RO", "redis.call('ping')", "2", "k1", "k2"), other.run("MSET", "k2", "2", "k1", "2"),
           me.read(), me.run("EVAL_RO", "redis.call('get', 'k1')", "2", "k1", "k2"),
           other.run("MSET", "k2", "3", "k1", "3"), me.read(), me.run("PING")]
    me.close(), other.close()
    return out


def scenario_unblocked_client_reply_first(port):
    """A woken BLMOVE's reply precedes the invalidation of the key it pushed to (Redis 7.0's
    unit/tracking "Unblocked BLMOVE gets notification after response")."""
    me, other = Raw(port), Raw(port)
    out = [other.run("RPUSH", "l2", "a"), me.run("CLIENT", "TRACKING", "on"), me.run("LRANGE", "l2", "0", "-1")]
    me.cmd("BLMOVE", "l1", "l2", "LEFT", "LEFT", "0")
    time.sleep(0.2)
    out += [other.run("RPUSH", "l1", "foo"), me.read(0.3)]
    me.close(), other.close()
    return out


def scenario_noloop_optin_optout(port):
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on", "NOLOOP"), me.run("GET", "a"), me.run("SET", "a", "1"),
           me.run("GET", "b"), other.run("SET", "b", "1"), me.read()]
    out += [me.run("CLIENT", "TRACKING", "off"), me.run("CLIENT", "TRACKING", "on", "OPTIN"), me.run("GET", "c"),
            other.run("SET", "c", "1"), me.read(), me.run("CLIENT", "CACHING", "yes"),
            me.run("CLIENT", "TRACKINGINFO"), me.run("GET", "c"), me.run("GET", "d"), other.run("MSET", "c", "2", "d", "2"),
            me.read()]
    out += [me.run("CLIENT", "TRACKING", "off"), me.run("CLIENT", "TRACKING", "on", "OPTOUT"),
            me.run("CLIENT", "CACHING", "no"), me.run("GET", "e"), me.run("GET", "f"),
            other.run("MSET", "e", "1", "f", "1"), me.read(), me.run("CLIENT", "CACHING", "yes")]
    me.close(), other.close()
    return out


def scenario_bcast(port):
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a", "PREFIX", "b", "NOLOOP"),
           other.run("MSET", "a1", "x", "b1", "y", "c1", "z"), me.read(), me.run("SET", "a2", "mine"),
           other.run("SET", "a3", "theirs"), me.read(), me.run("CLIENT", "TRACKINGINFO"),
           me.run("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab"), me.run("CLIENT", "TRACKING", "on"),
           me.run("CLIENT", "TRACKING", "off"), me.run("CLIENT", "TRACKING", "on", "BCAST"),
           other.run("SET", "zzz", "1"), me.read()]
    me.close(), other.close()
    return out


def scenario_resp2_redirect(port):
    sub, me, other = Raw(port, resp3=False), Raw(port, resp3=False), Raw(port)
    sub.cmd("CLIENT", "ID")
    sub_id = sub.read().strip()[1:].decode()
    out = [sub.run("SUBSCRIBE", "__redis__:invalidate"), me.run("CLIENT", "TRACKING", "on", "REDIRECT", sub_id),
           me.run("CLIENT", "GETREDIR").replace(sub_id.encode(), b"ID"), me.run("GET", "k"),
           other.run("SET", "k", "v"), sub.read(), me.run("GET", "k"), other.run("FLUSHALL"), sub.read(),
           me.run("CLIENT", "TRACKING", "on", "REDIRECT", "999999")]
    sub.close(), me.close(), other.close()
    return out


def scenario_broken_redirect(port):
    target, me, other = Raw(port), Raw(port), Raw(port)
    target.cmd("CLIENT", "ID")
    target_id = target.read().strip()[1:].decode()
    out = [me.run("CLIENT", "TRACKING", "on", "REDIRECT", target_id), me.run("GET", "k")]
    target.close()
    time.sleep(0.1)
    shown = b":%s\r\n" % target_id.encode()
    out += [other.run("SET", "k", "v"), me.read().replace(shown, b":ID\r\n"),
            me.run("CLIENT", "TRACKINGINFO").replace(shown, b":ID\r\n")]
    me.close(), other.close()
    return out


def scenario_expiry(port):
    me, other = Raw(port), Raw(port)
    out = [me.run("CLIENT", "TRACKING", "on"), other.run("SET", "t", "v", "PX", "50"), me.run("GET", "t")]
    time.sleep(0.2)
    out += [other.run("GET", "t"), me.read()]
    me.close(), other.close()
    return out


def scenario_errors(port):
    me = Raw(port)
    me.cmd("CLIENT", "ID")
    my_id = me.read().strip()[1:].decode()
    out = [me.run("CLIENT", "CACHING", "yes"), me.run("CLIENT", "TRACKING", "on", "PREFIX", "a"),
           me.run("CLIENT", "TRACKING", "on", "BCAST", "OPTIN"), me.run("CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"),
           me.run("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab", "PREFIX", "a"),
           me.run("CLIENT", "TRACKING", "maybe"), me.run("CLIENT", "TRACKING", "on", "bogus"),
           me.run("CLIENT", "TRACKING", "on", "REDIRECT", my_id, "REDIRECT", my_id),
           me.run("CLIENT", "TRACKING", "on", "OPTIN"), me.run("CLIENT", "CACHING", "no"),
           me.run("CLIENT", "TRACKING", "on", "OPTOUT"), me.run("CLIENT", "CACHING", "maybe"),
           me.run("CLIENT", "TRACKINGINFO"), me.run("CLIENT", "GETREDIR"), me.run("RESET"),
           me.run("CLIENT", "TRACKINGINFO")]
    me.close()
    return out


SCENARIOS = [scenario_default, scenario_transactions_scripts_flush, scenario_script_declared_keys,
             scenario_unblocked_client_reply_first,
             scenario_noloop_optin_optout, scenario_bcast,
             scenario_resp2_redirect, scenario_broken_redirect, scenario_expiry, scenario_errors]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__[9:] for s in SCENARIOS])
def test_same_bytes_as_redis(scenario, server, redis_ref):
    redis.Redis(port=redis_ref.port).flushall()
    expected = scenario(redis_ref.port)
    got = scenario(server.port)
    for step, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert mine == theirs, f"step {step}: {mine!r} != {theirs!r}"


# -- Pion's own paths -------------------------------------------------------------------------------


def test_eviction_invalidates(make_server):
    srv = make_server(maxmemory=3 * 1024 * 1024, maxmemory_policy="allkeys-lru")
    me, other = Raw(srv.port), Raw(srv.port)
    me.run("CLIENT", "TRACKING", "on")
    me.run("GET", "victim")
    other.run("SET", "victim", "x")
    me.read()
    me.run("GET", "victim")
    for i in range(60):
        other.cmd("SET", f"fill:{i}", "x" * 100_000)
    other.read(0.5)
    assert b"invalidate" in me.read(0.3) and b"victim" in me.run("CLIENT", "TRACKINGINFO") + b"victim"
    info = redis.Redis(port=srv.port).info("stats")
    assert info["evicted_keys"] > 0
    me.close(), other.close()


def test_eviction_invalidation_precedes_the_reply(make_server):
    """A key evicted to make room for a command is invalidated before that command's reply."""
    srv = make_server(maxmemory=10**10, maxmemory_policy="volatile-random")
    admin = redis.Redis(port=srv.port)
    me = Raw(srv.port)
    me.run("CLIENT", "TRACKING", "on")
    used = admin.info("memory")["used_memory"]
    admin.config_set("maxmemory", used + 100 * 1024)
    me.run("SETEX", "volatile-key", "10000", "x"), me.run("GET", "volatile-key")
    me.run("SETBIT", "big-key", "1600000", "0")
    assert me.run("GETBIT", "big-key", "0") == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$12\r\nvolatile-key\r\n:0\r\n"
    me.close()


def test_lowered_table_limit_is_enforced_without_another_read(server):
    """CONFIG SET tracking-table-max-keys takes effect in the cron (Redis's unit/tracking
    "Tracking gets notification on tracking table key eviction" waits for it)."""
    me, admin = Raw(server.port), redis.Redis(port=server.port)
    try:
        me.run("CLIENT", "TRACKING", "on"), me.run("MGET", "t1", "t2", "t3")
        admin.config_set("tracking-table-max-keys", 1)
        pushes = b""
        for _ in range(20):
            pushes += me.read(0.1)
            if pushes.count(b"invalidate") == 2:
                break
        assert pushes.count(b"invalidate") == 2 and admin.info("stats")["tracking_total_keys"] == 1
    finally:
        admin.config_set("tracking-table-max-keys", 1000000)
        me.close()


def test_tenants_see_only_their_keys(make_server):
    srv = make_server(requirepass="adm", tenants=("alice:apw", "bob:bpw"))
    alice, bob, admin = (Raw(srv.port, resp3=False) for _ in range(3))
    alice.run("HELLO", "3", "AUTH", "alice", "apw"), bob.run("HELLO", "3", "AUTH", "bob", "bpw")
    admin.run("AUTH", "adm")
    for conn in (alice, bob):
        conn.run("CLIENT", "TRACKING", "on", "BCAST")
        conn.run("GET", "shared")
    admin.run("SET", "shared", "admin's")
    assert b"shared" in bob.run("SET", "shared", "bob's")  # its own write, broadcast after the reply
    assert alice.read() == b""
    bob_id = bob.run("CLIENT", "ID").strip()[1:]
    assert alice.run("CLIENT", "TRACKING", "off") == b"+OK\r\n"
    assert b"does not exist" in alice.run("CLIENT", "TRACKING", "on", "REDIRECT", bob_id)
    alice.close(), bob.close(), admin.close()


def test_info_and_client_list(server):
    me = Raw(server.port)
    me.run("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "x")
    c = redis.Redis(port=server.port)
    assert c.info("clients")["tracking_clients"] == 1
    mine = [line for line in c.client_list() if "t" in line["flags"]]
    assert mine and mine[0]["flags"] == "tB" and mine[0]["redir"] == "0"
    me.close()
    time.sleep(0.1)
    assert c.info("clients")["tracking_clients"] == 0


def test_redis_py_tracking_commands(server):
    """redis-py's test_client_tracking and test_client_trackinginfo (its client-side cache itself
    asks for Redis 7.4, so it is off for Pion's 7.2.0 as for Redis 7.0)."""
    r, r2 = redis.Redis(port=server.port), redis.Redis(port=server.port)
    assert r.client_tracking_on() and r.client_tracking_off()
    client_id = r.client_id()
    assert r.client_tracking_on(client_id) and r.client_tracking_off(client_id)
    client_id = r2.client_id()
    assert r.client_tracking_on(client_id) and r2.client_tracking_off(client_id)
    res = r.client_trackinginfo()
    assert len(res) > 2 and ("prefixes" in res or b"prefixes" in res)
    r.close(), r2.close()
