"""SSM.PREFIX.*, STATE.*, PION.STATS and INFO # Pion on the wire."""

from __future__ import annotations

import re

import pytest
import redis


def err(r, *args) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def test_ssm_prefix_store_fetch_drop(r):
    blob = bytes(range(256)) * 40
    assert r.execute_command("SSM.PREFIX.STORE", "ns", 3, blob) == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 3) == blob
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 4) is None
    assert r.execute_command("SSM.PREFIX.STORE", "ns", 3, b"new") == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 3) == b"new"
    assert r.execute_command("SSM.PREFIX.DROP", "ns", 3) == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 3) is None
    r.execute_command("SSM.PREFIX.STORE", "ns", 0, b"a")
    assert r.execute_command("SSM.PREFIX.DROP", "ns") == b"OK"
    assert r.execute_command("SSM.PREFIX.DROP", "ns") == b"OK"
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 0) is None
    assert err(r, "SSM.PREFIX.STORE", "ns", -1, b"x") == "invalid layer_id (must be >= 0)"
    assert err(r, "SSM.PREFIX.FETCH", "ns", "x") == "invalid layer_id (must be >= 0)"


def test_kv_prefix_drop_takes_the_ssm_state_with_it(r):
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    r.execute_command("SSM.PREFIX.STORE", "ns", 0, b"state")
    assert r.execute_command("KV.PREFIX.DROP", "ns") == 1
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 0) is None


def test_state_buffers(r):
    assert r.execute_command("STATE.ALLOC", "s", 8) == b"OK"
    assert err(r, "STATE.ALLOC", "s", 8) == "STATE.ALLOC: state already allocated (FREE first)"
    assert err(r, "STATE.ALLOC", "t", 0) == "STATE.ALLOC: size must be 1..268435456"
    assert err(r, "STATE.ALLOC", "t", 8, "MODE", "spiral") == "STATE.ALLOC: expected MODE fixed|ring"
    assert r.execute_command("STATE.WRITE", "s", 4, b"abcd") == 4
    assert r.execute_command("STATE.READ", "s", 2, 6) == b"\0\0abcd"
    assert err(r, "STATE.WRITE", "s", 6, b"abc") == "STATE.WRITE: offset+length 9 exceeds size 8"
    assert err(r, "STATE.WRITE", "s", 0, b"") == "STATE.WRITE: empty payload"
    assert err(r, "STATE.READ", "s", 0, 5_000_000) == "STATE.READ: length must be <= 4194304"
    assert err(r, "STATE.READ", "nope", 0, 1) == "STATE: no such buffer (STATE.ALLOC first)"
    assert r.execute_command("STATE.ALLOC", "ring", 4, "MODE", "RING") == b"OK"
    assert r.execute_command("STATE.WRITE", "ring", 2, b"wxyz") == 4
    assert r.execute_command("STATE.READ", "ring", 0, 4) == b"yzwx"
    assert r.execute_command("STATE.INFO", "ring") == b"size:4\r\nmode:ring\r\nwrites:1\r\n"
    assert r.execute_command("STATE.INFO").startswith(b"enabled:1\r\nbuffers:2\r\nbytes:12\r\n")
    assert r.execute_command("STATE.FREE", "s") == 1
    assert r.execute_command("STATE.FREE", "s") == 0


def test_pion_stats_is_a_flat_array_in_resp2(raw):
    raw.cmd("PION.STATS")
    reply = raw.read_some()
    assert reply.startswith(b"*32\r\n$9\r\nworker_id\r\n:0\r\n$17\r\nuptime_in_seconds\r\n:")
    assert b"$23\r\nprefill_seconds_avoided\r\n$5\r\n0.000\r\n" in reply
    assert reply.endswith(b"$14\r\nvector_queries\r\n:0\r\n")
    names = re.findall(rb"\$\d+\r\n([a-z_]+)\r\n", reply)
    assert names == [b"worker_id", b"uptime_in_seconds", b"kvprefix_hits", b"kvprefix_misses",
                     b"kvprefix_hits_measured", b"kvprefix_tokens_served", b"kvprefix_bytes_served",
                     b"kvprefix_prefill_us_saved", b"kvprefix_prefill_us_measured", b"prefill_seconds_avoided",
                     b"prefill_seconds_avoided_measured", b"semantic_hits", b"semantic_misses", b"moe_hits",
                     b"moe_misses", b"vector_queries"]


def test_pion_stats_is_a_map_in_resp3(raw):
    raw.cmd("HELLO", "3")
    raw.read_some()
    raw.cmd("PION.STATS", "whatever")  # an unknown argument is not an error
    assert raw.read_some().startswith(b"%16\r\n$9\r\nworker_id\r\n:0\r\n")
    raw.cmd("PION.STATS", "reset")
    assert raw.read_some() == b"+OK\r\n"


def test_info_has_a_pion_section(r, raw):
    r.execute_command("KV.PREFIX.LOOKUP", "nope")
    raw.cmd("INFO", "pion")
    text = raw.read_some().decode()
    assert text.split("\r\n", 1)[1].startswith(
        "# Pion\r\nstats_scope:worker\r\nworker_id:0\r\nkvprefix_hits:0\r\nkvprefix_misses:1\r\n")
    assert "prefill_seconds_avoided:0.000\r\n" in text and "_us_" not in text
    assert "vstore_bytes:0\r\n" in text
    assert "kvprefix_misses" in r.info()


def test_config_resetstat_resets_the_ledger(r):
    r.execute_command("KV.PREFIX.LOOKUP", "nope")
    r.execute_command("CONFIG", "RESETSTAT")
    stats = dict(zip(*[iter(r.execute_command("PION.STATS"))] * 2, strict=True))
    assert stats[b"kvprefix_misses"] == 0
