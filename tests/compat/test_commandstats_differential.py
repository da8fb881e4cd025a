"""INFO commandstats and errorstats against redis-server 7.0.15: a call refused for its arity is a
rejected call of the command it names (top level, inside MULTI, EVAL's own arity), one refused
before a command is known (an unknown name or subcommand) belongs to no command; a failed
``redis.pcall`` inside a script is the inner command's failed call (info.tcl's errorstats tests)."""

from __future__ import annotations

import re

import pytest
import redis

pytestmark = pytest.mark.redis

SCENARIO = [
    ("SET",), ("CONFIG",), ("CONFIG", "GET"), ("CONFIG", "nosuch"), ("nosuch",), ("EVAL", "a"),
    ("EVAL", "redis.pcall('XGROUP', 'CREATECONSUMER', 's1', 'mygroup', 'consumer') return", "0"),
    ("GET", "k"), ("INCR", "notanumber"),
]


def _stats(client: redis.Redis) -> dict[str, object]:
    client.execute_command("CONFIG", "RESETSTAT")
    client.set("notanumber", "x")
    client.execute_command("CONFIG", "RESETSTAT")
    for argv in SCENARIO:
        try:
            client.execute_command(*argv)
        except redis.ResponseError:
            pass
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("SET")  # queued with an arity error: the EXEC is aborted
    with pytest.raises(redis.ResponseError):
        pipe.execute()
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("INFO", "commandstats")
        text = conn.read_response().decode()
        conn.send_command("INFO", "errorstats")
        errors = conn.read_response().decode()
    finally:
        client.connection_pool.release(conn)
    shown = {m.group(1): (m.group(2), m.group(3), m.group(4))
             for m in re.finditer(r"cmdstat_(\S+):calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)", text)}
    shown.pop("info", None)
    return {"commandstats": shown, "errorstats": sorted(re.findall(r"errorstat_\S+", errors))}


def test_command_and_error_stats_match_redis(server, redis_ref):
    seen = []
    for srv in (server, redis_ref):
        client = redis.Redis(port=srv.port)
        seen.append(_stats(client))
        client.close()
    assert seen[0] == seen[1]
