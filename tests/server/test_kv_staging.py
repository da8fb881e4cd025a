"""Staged stores (issue 12, defect 1): a prefix with a manifest is readable whole or not at all.

Every test here writes through the wire as another client could, so the rule is the server's,
not the Pion client's discipline: token-less writes into a manifest-owned namespace are refused,
a refused REGISTER stages nothing, a publish is atomic, and all of it survives kill -9 and replay.
"""

from __future__ import annotations

import json
import socket
import time

import hiredis
import numpy as np
import pytest
import redis
from tests.support.servers import ProcessServer

from pion.codecs.artifact import pack, unpack
from pion.kvcache import staging as staging_module

DIM = 32


def err(r, *args) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def manifest(tokens: int = 4, layers: int = 2, tag: str = "a", states=()) -> str:
    return json.dumps({"model": tag, "n_layers": layers, "token_count": tokens, "state_layers": list(states)})


def rows(tokens: int, value: float) -> bytes:
    return np.full((tokens, DIM), value, np.float32).tobytes()


def stage_commands(ns: str, text: str, token: str, value: float, *extra) -> list[list]:
    spec = json.loads(text)
    n, layers = spec["token_count"], spec["n_layers"]
    commands = [["KV.PREFIX.REGISTER", ns, DIM, "fp32", "MANIFEST", text, "STAGE", token, *extra]]
    for side in ("_pk", "_pv"):
        for layer in range(layers):
            commands.append(["V.STOREBATCH", ns + side, layer, 0, n, rows(n, value), "TOKEN", token])
    for slot in spec["state_layers"]:
        commands.append(["SSM.PREFIX.STORE", ns, slot, b"state-%d-%d" % (slot, value), "TOKEN", token])
    commands.append(["KV.PREFIX.PUBLISH", ns, token])
    return commands


def pipeline(r, commands: list[list]) -> list:
    pipe = r.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)


def fetched(r, ns: str, tokens: int = 4) -> float:
    raw = r.execute_command("V.FETCH", ns + "_pk", 0, "RANGE", 0, tokens)
    return float(np.frombuffer(raw, np.float32)[0])


def info(r) -> dict:
    lines = r.execute_command("KV.PREFIX.INFO").decode().split("\r\n")
    return dict(line.split(":", 1) for line in lines if ":" in line)


# -- the rule ----------------------------------------------------------------------------------


def test_a_refused_register_stages_nothing_and_its_pipelined_writes_land_nowhere(r):
    assert all(not isinstance(x, Exception) for x in pipeline(r, stage_commands("ns", manifest(tag="a"), "t1", 1.0)))
    bytes_before = info(r)["vstore_bytes"]
    replies = pipeline(r, stage_commands("ns", manifest(tag="b"), "t2", 2.0))
    assert all(isinstance(x, redis.ResponseError) for x in replies)
    assert "holds another prefix (a different manifest)" in str(replies[0])
    assert "no open staged store with this TOKEN" in str(replies[1])
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    assert fetched(r, "ns") == 1.0 and json.loads(r.execute_command("KV.PREFIX.MANIFEST", "ns"))["model"] == "a"
    assert info(r)["vstore_bytes"] == bytes_before and info(r)["staged_prefixes"] == "0"


def test_token_less_writes_into_a_manifest_owned_namespace_are_refused(r):
    pipeline(r, stage_commands("ns", manifest(states=[3]), "t1", 1.0))
    owned = "belongs to the prefix 'ns', registered with a manifest"
    assert owned in err(r, "V.STOREBATCH", "ns_pk", 0, 0, 4, rows(4, 9.0))
    assert owned in err(r, "V.TRUNCATE", "ns_pv", 0, 1)
    assert owned in err(r, "SSM.PREFIX.STORE", "ns", 3, b"other")
    snap = r.execute_command("V.SNAPSHOT", "ns_pk")
    assert owned in err(r, "V.RESTORE", "ns_pk", snap)
    assert "BLOCKS, CHAIN and PARENT change only" in err(r, "KV.PREFIX.REGISTER", "ns", DIM, "fp32", "CHAIN", 4,
                                                         np.arange(4, dtype="<u4").tobytes())
    assert r.execute_command("KV.PREFIX.REGISTER", "ns", DIM, "fp32", "PREFILL_MS", 5) == b"OK"  # a touch
    assert fetched(r, "ns") == 1.0 and r.execute_command("SSM.PREFIX.FETCH", "ns", 3) == b"state-3-1"
    # deleting is allowed: a prefix missing a part is a miss, never a wrong hit
    assert r.execute_command("V.DROP", "ns_pv") == 1
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
    assert owned in err(r, "V.CREATE", "ns_pv", DIM, "VQUANT", "fp32")


def test_plain_sessions_keep_the_reference_meaning(r):
    r.execute_command("KV.PREFIX.REGISTER", "plain", DIM, "fp32")
    for side in ("_pk", "_pv"):
        r.execute_command("V.STOREBATCH", "plain" + side, 0, 0, 4, rows(4, 5.0))
    assert r.execute_command("KV.PREFIX.LOOKUP", "plain") == b"HIT"
    r.execute_command("V.STOREBATCH", "plain_pk", 0, 0, 4, rows(4, 6.0))  # overwrite, as the reference
    assert fetched(r, "plain") == 6.0
    assert r.execute_command("SSM.PREFIX.STORE", "plain", 0, b"s") == b"OK"


def test_staged_rows_are_invisible_until_published(r):
    commands = stage_commands("ns", manifest(states=[1]), "t1", 1.0)
    pipeline(r, commands[:-1])
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
    assert r.execute_command("KV.PREFIX.MANIFEST", "ns") is None
    assert "session not found" in err(r, "V.FETCH", "ns_pk", 0, "RANGE", 0, 4)
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 1) is None
    assert info(r)["staged_prefixes"] == "1" and int(info(r)["staged_bytes"]) > 0
    assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t1") == b"OK"
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    assert r.execute_command("SSM.PREFIX.FETCH", "ns", 1) == b"state-1-1"
    assert info(r)["staged_prefixes"] == "0"


def test_an_incomplete_staging_is_refused_at_publish_and_discarded(r):
    commands = stage_commands("ns", manifest(states=[2]), "t1", 1.0)
    pipeline(r, commands[:3])  # register and two of four row batches, no state
    assert "layer 0 of V holds 0 of 4 rows" in err(r, "KV.PREFIX.PUBLISH", "ns", "t1")
    assert info(r)["staged_prefixes"] == "0" and info(r)["vstore_bytes"] == "0"
    pipeline(r, commands[:-1][:-1])  # every row, still no state
    assert "recurrent state slot 2 was not stored" in err(r, "KV.PREFIX.PUBLISH", "ns", "t1")
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"


def test_writes_outside_the_declared_prefix_are_refused(r):
    r.execute_command("KV.PREFIX.REGISTER", "ns", DIM, "fp32", "MANIFEST", manifest(states=[1]), "STAGE", "t1")
    assert "declares 2 layers" in err(r, "V.STOREBATCH", "ns_pk", 2, 0, 4, rows(4, 1.0), "TOKEN", "t1")
    assert "declares 4 tokens" in err(r, "V.STOREBATCH", "ns_pk", 0, 2, 4, rows(4, 1.0), "TOKEN", "t1")
    assert "is for 'ns', not 'other_pk'" in err(r, "V.STOREBATCH", "other_pk", 0, 0, 4, rows(4, 1.0), "TOKEN", "t1")
    assert "declares state slots [1]" in err(r, "SSM.PREFIX.STORE", "ns", 0, b"x", "TOKEN", "t1")
    assert "already open" in err(r, "KV.PREFIX.REGISTER", "ns", DIM, "fp32", "MANIFEST", manifest(), "STAGE", "t1")
    assert r.execute_command("KV.PREFIX.ABORT", "ns", "t1") == 1
    assert r.execute_command("KV.PREFIX.ABORT", "ns", "t1") == 0


def test_concurrent_identical_stores_leave_one_entry(r):
    first = stage_commands("ns", manifest(), "t1", 1.0)
    second = stage_commands("ns", manifest(), "t2", 1.0)
    pipeline(r, first[:-1])
    pipeline(r, second[:-1])
    assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t1") == b"OK"
    assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t2") == b"OK"  # equal and complete: kept, t2 dropped
    assert info(r)["staged_prefixes"] == "0" and info(r)["registered_prefixes"] == "1"
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"


def test_concurrent_stores_of_two_models_leave_exactly_the_first_published(r):
    a, b = stage_commands("ns", manifest(tag="a"), "ta", 1.0), stage_commands("ns", manifest(tag="b"), "tb", 2.0)
    pipeline(r, a[:-1])
    pipeline(r, b[:-1])  # both staged while the namespace was free
    assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "tb") == b"OK"
    assert "holds another prefix (a different manifest)" in err(r, "KV.PREFIX.PUBLISH", "ns", "ta")
    assert fetched(r, "ns") == 2.0 and json.loads(r.execute_command("KV.PREFIX.MANIFEST", "ns"))["model"] == "b"


def test_replace_swaps_the_whole_prefix_at_publish(r):
    pipeline(r, stage_commands("ns", manifest(tag="a", states=[0]), "t1", 1.0))
    r.execute_command("KV.PREFIX.PIN", "ns")
    replacement = stage_commands("ns", manifest(tokens=6, tag="b", states=[0]), "t2", 2.0, "REPLACE")
    pipeline(r, replacement[:-1])
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT" and fetched(r, "ns") == 1.0  # the old one, whole
    assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t2") == b"OK"
    assert fetched(r, "ns", 6) == 2.0 and r.execute_command("SSM.PREFIX.FETCH", "ns", 0) == b"state-0-2"
    assert json.loads(r.execute_command("KV.PREFIX.MANIFEST", "ns"))["model"] == "b"
    assert info(r)["pinned_prefixes"] == "1"


def test_the_generation_names_one_entry_and_every_publish_makes_a_new_one(r):
    generation = lambda: r.execute_command("KV.PREFIX.GENERATION", "ns")  # noqa: E731
    assert generation() == 0
    pipeline(r, stage_commands("ns", manifest(tag="a"), "t1", 1.0))
    first = generation()
    assert first > 0
    r.execute_command("KV.PREFIX.LOOKUP", "ns")
    fetched(r, "ns")
    assert pipeline(r, stage_commands("ns", manifest(tag="a"), "t2", 1.0))[-1] == b"OK"  # equal: the entry stays
    assert generation() == first
    pipeline(r, stage_commands("ns", manifest(tokens=4, tag="b"), "t3", 2.0, "REPLACE"))
    replaced = generation()
    assert replaced not in (0, first)
    r.execute_command("KV.PREFIX.DROP", "ns")
    assert generation() == 0
    pipeline(r, stage_commands("ns", manifest(tag="a"), "t4", 1.0))  # the same content again: a new entry
    assert generation() not in (0, first, replaced)


def test_a_reader_whose_replies_back_up_sees_a_publish_mid_pipeline_and_the_generation_tells(server, r):
    """Why readers check the generation: a pipeline is not a transaction. Once a client's unread
    replies fill the socket, the server parks the rest of its pipeline and serves other clients."""
    n, fetches = 4096, 64  # 64 replies of 512 KB: far more than the socket buffers hold (tcp_wmem's max: 4 MB here)
    pipeline(r, stage_commands("ns", manifest(tokens=n, layers=1, tag="a"), "t1", 1.0))
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", server.port))
    reader.settimeout(10)
    commands = [["KV.PREFIX.GENERATION", "ns"], *[["V.FETCH", "ns_pk", 0, "RANGE", 0, n]] * fetches,
                ["KV.PREFIX.GENERATION", "ns"]]
    reader.sendall(b"".join(resp(c) for c in commands))
    parser, replies = hiredis.Reader(), []

    def read_until(count: int) -> None:
        while len(replies) < count:
            parser.feed(reader.recv(1 << 16))
            while (reply := parser.gets()) is not False:
                replies.append(reply)

    read_until(2)  # the server has begun: the generation and the first rows
    replacement = stage_commands("ns", manifest(tokens=n, layers=1, tag="b"), "t2", 2.0, "REPLACE")
    assert pipeline(r, replacement)[-1] == b"OK"  # served while the reader's pipeline waits
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)  # now read the rest quickly
    read_until(len(commands))
    reader.close()
    values = [float(np.frombuffer(raw, np.float32)[0]) for raw in replies[1:-1]]
    assert values[0] == 1.0 and values[-1] == 2.0, "one pipeline read two prefixes"
    assert replies[0] > 0 and replies[-1] > 0 and replies[0] != replies[-1]


def test_attention_stores_cannot_rewrite_a_manifest_owned_prefix(r):
    pipeline(r, stage_commands("ns", manifest(), "t1", 1.0))
    cube = np.full((1, 4, DIM), 9.0, np.float32).tobytes()
    assert "belongs to the prefix 'ns', registered with a manifest" in err(
        r, "ATTEND.PREFIX.STORE", "ns", 0, 1, 4, DIM, cube, cube)
    assert fetched(r, "ns") == 1.0 and r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    assert r.execute_command("ATTEND.PREFIX.STORE", "free", 0, 1, 4, DIM, cube, cube) == b"OK"


def resp(command: list) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for item in command:
        data = item if isinstance(item, bytes) else str(item).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def test_a_staging_with_a_silent_writer_is_aborted(server, r, monkeypatch):
    monkeypatch.setattr(staging_module, "STAGE_IDLE_S", 0.3)
    pipeline(r, stage_commands("ns", manifest(), "t1", 1.0)[:2])
    assert info(r)["staged_prefixes"] == "1"
    deadline = time.time() + 10
    while info(r)["staged_prefixes"] != "0" and time.time() < deadline:
        time.sleep(0.05)
    assert info(r)["staged_prefixes"] == "0" and info(r)["vstore_bytes"] == "0"


# -- durability ----------------------------------------------------------------------------------


def test_a_staging_survives_kill_9_and_replay_and_publishes_after_it(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=30)
        commands = stage_commands("ns", manifest(states=[0]), "t1", 3.0)
        pipeline(r, stage_commands("gone", manifest(), "t9", 1.0)[:3])
        r.execute_command("KV.PREFIX.ABORT", "gone", "t9")
        pipeline(r, commands[:3])
        r.execute_command("SAVE")  # the open staging goes into the snapshot
        pipeline(r, commands[3:-1])  # and the rest into the log after it
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert info(r)["staged_prefixes"] == "1"
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
        assert r.execute_command("KV.PREFIX.PUBLISH", "ns", "t1") == b"OK"
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
        assert fetched(r, "ns") == 3.0 and r.execute_command("SSM.PREFIX.FETCH", "ns", 0) == b"state-0-3"
        assert info(r)["staged_prefixes"] == "0" and r.execute_command("KV.PREFIX.LOOKUP", "gone") == b"MISS"
    finally:
        srv.stop()


def test_a_refused_publish_is_logged_as_an_abort(tmp_path):
    srv = ProcessServer(tmp_path / "data").start()
    try:
        r = redis.Redis(port=srv.port, socket_timeout=30)
        pipeline(r, stage_commands("ns", manifest(), "t1", 1.0)[:2])
        assert "incomplete" in err(r, "KV.PREFIX.PUBLISH", "ns", "t1")
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert info(r)["staged_prefixes"] == "0"
        # the token is free again: a new staging with it replays cleanly
        assert all(not isinstance(x, Exception) for x in pipeline(r, stage_commands("ns", manifest(), "t1", 2.0)))
        srv.kill9()
        srv = ProcessServer(tmp_path / "data", port=srv.port).start()
        r = redis.Redis(port=srv.port, socket_timeout=30)
        assert fetched(r, "ns") == 2.0
    finally:
        srv.stop()


# -- defect 3: one oversized prefix wiped the cache ---------------------------------------------


def test_a_prefix_larger_than_the_budget_is_refused_up_front_evicting_nothing(make_server):
    srv = make_server(kv_maxmemory=400_000)
    r = redis.Redis(port=srv.port, socket_timeout=10)
    for i in range(4):
        pipeline(r, stage_commands(f"small{i}", manifest(tokens=100, layers=2), f"t{i}", 1.0))  # 51,200 B each
    before = info(r)
    big = stage_commands("big", manifest(tokens=1024, layers=2), "tb", 2.0)  # 524,288 B
    replies = pipeline(r, big)
    assert isinstance(replies[0], redis.exceptions.OutOfMemoryError)
    assert "the prefix needs 524288 bytes, more than kv-maxmemory (400000)" in str(replies[0])
    assert all(isinstance(x, redis.ResponseError) for x in replies)
    assert all(r.execute_command("KV.PREFIX.LOOKUP", f"small{i}") == b"HIT" for i in range(4))
    after = info(r)
    assert after["vstore_bytes"] == before["vstore_bytes"] and after["vstore_evictions"] == "0"
    assert after["staged_prefixes"] == "0" and r.execute_command("KV.PREFIX.LOOKUP", "big") == b"MISS"


def test_a_prefix_that_fits_only_by_evicting_pinned_ones_is_refused_up_front(make_server):
    srv = make_server(kv_maxmemory=400_000)
    r = redis.Redis(port=srv.port, socket_timeout=10)
    pipeline(r, stage_commands("pinned", manifest(tokens=500, layers=2), "t0", 1.0))  # 256,000 B
    r.execute_command("KV.PREFIX.PIN", "pinned")
    pipeline(r, stage_commands("other", manifest(tokens=100, layers=2), "t1", 1.0))  # 51,200 B
    reply = pipeline(r, stage_commands("big", manifest(tokens=350, layers=2), "t2", 2.0))[0]  # 179,200 B
    assert isinstance(reply, redis.exceptions.OutOfMemoryError)
    assert "the prefix needs 179200 bytes, but at most 144000 of kv-maxmemory (400000)" in str(reply)
    assert r.execute_command("KV.PREFIX.LOOKUP", "other") == b"HIT" and info(r)["vstore_evictions"] == "0"
    fits = pipeline(r, stage_commands("fits", manifest(tokens=250, layers=2), "t3", 2.0))  # evicts "other"
    assert not any(isinstance(x, Exception) for x in fits)
    assert r.execute_command("KV.PREFIX.LOOKUP", "other") == b"MISS" and info(r)["vstore_evictions"] == "1"


# -- the portable artifact ----------------------------------------------------------------------


def test_an_exported_artifact_is_plain_safetensors_and_imports_whole(make_server):
    import safetensors.numpy

    text = json.dumps({"model": "a", "n_layers": 2, "token_count": 4, "state_layers": [5]})
    src = redis.Redis(port=make_server().port)
    chain = ["CHAIN", 4, np.arange(4, dtype="<u4").tobytes()]
    commands = stage_commands("ns", text, "t", 1.5)
    commands[0] = commands[0][:-2] + chain + commands[0][-2:]
    pipeline(src, commands)
    blob = src.execute_command("KV.PREFIX.EXPORT", "ns")
    tensors = safetensors.numpy.load(blob)
    assert sorted(tensors) == ["k.0", "k.1", "state.5", "tokens", "v.0", "v.1"]
    assert np.frombuffer(tensors["k.1"].tobytes(), np.float32).tolist() == [1.5] * 4 * DIM
    dst = redis.Redis(port=make_server().port)
    assert dst.execute_command("KV.PREFIX.IMPORT", blob) == b"ns"
    assert dst.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT" and fetched(dst, "ns") == 1.5
    assert dst.execute_command("SSM.PREFIX.FETCH", "ns", 5) == b"state-5-1"
    assert dst.execute_command("KV.PREFIX.MANIFEST", "ns") == text.encode()
    assert dst.execute_command("KV.PREFIX.IMPORT", blob) == b"ns"  # the same prefix again: kept
    art = unpack(blob)
    art.manifest_raw = art.manifest_raw.replace(b'"model": "a"', b'"model": "b"')
    other = pack(art)
    assert "checksum does not match" in err(dst, "KV.PREFIX.IMPORT", blob[:-1] + b"X")
    assert "KV.PREFIX.IMPORT: namespace 'ns' holds another prefix" in err(dst, "KV.PREFIX.IMPORT", other)
    assert dst.execute_command("KV.PREFIX.IMPORT", other, "REPLACE") == b"ns"
    assert json.loads(dst.execute_command("KV.PREFIX.MANIFEST", "ns"))["model"] == "b"
    assert info(dst)["staged_prefixes"] == "0"


def test_export_refuses_what_an_importer_could_not_check(r):
    r.execute_command("KV.PREFIX.REGISTER", "plain", DIM, "fp32")
    assert "is not a prefix registered with a manifest" in err(r, "KV.PREFIX.EXPORT", "plain")
    pipeline(r, stage_commands("nochain", manifest(), "t", 1.0))
    assert "has no token chain" in err(r, "KV.PREFIX.EXPORT", "nochain")
    assert "syntax error" in err(r, "KV.PREFIX.IMPORT", b"x", "NOW")
