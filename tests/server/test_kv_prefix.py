"""KV.PREFIX.*: happy paths, error texts, completeness, durability of HIT, manifests, MATCH."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import redis
from tests.support.servers import ThreadServer

from pion.codecs import block_hashes
from pion.storage.snapshot import FILENAME as SNAPSHOT_FILE


def err(r, *args) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def stats(r) -> dict:
    return dict(zip(*[iter(r.execute_command("PION.STATS"))] * 2, strict=True))


def store_prefix(r, ns: str, tokens: int, layers: int = 2, dim: int = 32, start: int = 0) -> None:
    data = np.ones((tokens - start, dim), np.float32).tobytes()
    for side in ("_pk", "_pv"):
        for layer in range(layers):
            r.execute_command("V.STOREBATCH", ns + side, layer, start, tokens - start, data)


# -- REGISTER ---------------------------------------------------------------------------------


def test_register_creates_both_sessions(r):
    assert r.execute_command("KV.PREFIX.REGISTER", "ns", 64, "fp16", "PREFILL_MS", 1200) == b"OK"
    assert b"v_format:fp16" in r.execute_command("V.INFO", "ns_pk")
    assert b"value_dim:64" in r.execute_command("V.INFO", "ns_pv")
    assert r.execute_command("KV.PREFIX.REGISTER", "ns", 64, "FP16") == b"OK"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ns", 0, "fp16"), "kv_dim out of range"),
        (("ns", 8193, "fp16"), "kv_dim out of range"),
        (("ns", 64, "q4"), "KV.PREFIX.REGISTER: unknown vquant 'q4' (want int8|turbo4|turbo3|turbo2|fp16|fp8|mlx4g32|fp32|bf16)"),
        (("ns", 48, "turbo3"), "KV.PREFIX.REGISTER: vquant 'turbo3' needs kv_dim divisible by 32 (got 48)"),
        (("ns", 64, "fp16", "BLOCKS", 16, 1), "BLOCKS requires: block_size hash_count hash_blob"),
        (("ns", 64, "fp16", "BLOCKS", 0, 1, b"12345678"), "BLOCKS block_size out of range (1..8192)"),
        (("ns", 64, "fp16", "BLOCKS", 16, 1048577, b""), "BLOCKS hash_count out of range (0..1048576)"),
        (("ns", 64, "fp16", "BLOCKS", 16, 2, b"12345678"), "BLOCKS hash_blob length mismatch"),
        (("ns", 64, "fp16", "PREFILL_MS", 86400001), "PREFILL_MS out of range (0..86400000)"),
        (("ns", 64, "fp16", "PREFILL_MS", -1), "PREFILL_MS out of range (0..86400000)"),
        (("ns", 64, "fp16", "PREFILL_MS"), "KV.PREFIX.REGISTER option needs a value"),
        (("ns", 64, "fp16", "COLOR", 1), "KV.PREFIX.REGISTER unknown option (BLOCKS, PREFILL_MS, MANIFEST, CHAIN, SEED, PARENT, STAGE, REPLACE)"),
        (("ns", 64, "fp16", "PREFILL_MS", 5, "BLOCKS", 16, 0, b""), "BLOCKS must come right after vquant"),
        (("ns", 64, "fp16", "CHAIN", 0, b""), "CHAIN block_size out of range (1..8192)"),
        (("ns", 64, "fp16", "CHAIN", 4, b"123"), "CHAIN token_blob length must be a multiple of 4 (u32 token ids)"),
        (("ns", 64, "fp16", "SEED", b"s" * 16), "KV.PREFIX.REGISTER SEED needs CHAIN"),
        (("ns", 64, "fp16", "CHAIN", 4, b"", "SEED", b"s" * 15), "SEED must be 16 bytes"),
        (("ns", 64, "fp16", "SEED", b"s" * 17, "CHAIN", 4, b""), "SEED must be 16 bytes"),
        (("ns", 64, "fp16", "CHAIN", 4, b"", "SEED"), "KV.PREFIX.REGISTER option needs a value"),
        (("ns", 64, "fp16", "MANIFEST", "nope", "STAGE", "t"), "KV.PREFIX.REGISTER: MANIFEST is not valid JSON"),
        (("ns", 64, "fp16", "MANIFEST", "{}"),
         "KV.PREFIX.REGISTER: MANIFEST needs STAGE token: a prefix with a manifest is stored as a staged store "
         "(STAGE token, writes with TOKEN token, then KV.PREFIX.PUBLISH ns token)"),
        (("ns", 64, "fp16", "MANIFEST", "{}", "STAGE", "t"),
         "KV.PREFIX.REGISTER: STAGE needs a MANIFEST with integer n_layers and token_count >= 1"),
        (("ns", 64, "fp16", "STAGE", "t"), "KV.PREFIX.REGISTER: STAGE needs MANIFEST (the manifest says what the "
         "staged rows are)"),
        (("ns", 64, "fp16", "REPLACE"), "KV.PREFIX.REGISTER REPLACE needs STAGE (a replacement is published whole)"),
        (("ns", 64, "fp16", "STAGE", ""), "STAGE/TOKEN must be 1..64 bytes"),
        (("ns", 64, "fp16", "PARENT", "other"), "KV.PREFIX.REGISTER: PARENT 'other' is not a registered namespace"),
        (("", 64, "fp16"), "ns_key length must be 1..200"),
        (("x" * 201, 64, "fp16"), "ns_key length must be 1..200"),
    ],
)
def test_register_errors(r, args, message):
    assert err(r, "KV.PREFIX.REGISTER", *args) == message
    assert r.execute_command("V.INFO").startswith(b"enabled:1\r\nsessions:0\r\n")


def test_re_register_with_another_codec_is_refused_never_kept_silently(r):
    r.execute_command("KV.PREFIX.REGISTER", "ns", 64, "fp16")
    assert err(r, "KV.PREFIX.REGISTER", "ns", 64, "int8") == \
        "KV.PREFIX.REGISTER: namespace 'ns' exists with a different vquant (fp16 != int8)"
    assert err(r, "KV.PREFIX.REGISTER", "ns", 32, "fp16") == \
        "KV.PREFIX.REGISTER: namespace 'ns' exists with a different kv_dim (64 != 32)"


def stage(r, ns, manifest: dict, token: str, *extra, dim: int = 32, fmt: str = "fp16") -> None:
    """A staged store of ``manifest``'s layers and tokens (rows of ones), published."""
    r.execute_command("KV.PREFIX.REGISTER", ns, dim, fmt, "MANIFEST", json.dumps(manifest), "STAGE", token, *extra)
    data = np.ones((manifest["token_count"], dim), np.float32).tobytes()
    for side in ("_pk", "_pv"):
        for layer in range(manifest["n_layers"]):
            r.execute_command("V.STOREBATCH", ns + side, layer, 0, manifest["token_count"], data, "TOKEN", token)
    r.execute_command("KV.PREFIX.PUBLISH", ns, token)


def test_manifest_is_returned_and_a_different_one_refused(r):
    manifest = {"model": "llama-3.2-1b@abc", "n_layers": 2, "n_kv_heads": 2, "head_dim": 16, "dtype": "float16",
                "rope": {"theta": 500000.0}, "tokenizer": "t1", "adapter": None,
                "codecs": {"k": ["fp16", "fp16"], "v": "fp16"}, "token_count": 4, "tokens_sha256": "ab"}
    assert r.execute_command("KV.PREFIX.MANIFEST", "ns") is None
    stage(r, "ns", manifest, "t1")
    text = json.dumps(manifest).encode()
    assert r.execute_command("KV.PREFIX.MANIFEST", "ns") == text
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    reordered = dict(reversed(list(manifest.items())))
    stage(r, "ns", reordered, "t2")  # the same manifest: the complete entry stays
    assert r.execute_command("KV.PREFIX.MANIFEST", "ns") == text
    other = json.dumps({**manifest, "tokenizer": "t2"})
    assert err(r, "KV.PREFIX.REGISTER", "ns", 32, "fp16", "MANIFEST", other, "STAGE", "t3") == \
        "KV.PREFIX.REGISTER: namespace 'ns' holds another prefix (a different manifest); REPLACE overwrites it"
    assert r.execute_command("KV.PREFIX.MANIFEST", "ns") == text


# -- LOOKUP -------------------------------------------------------------------------------------


def test_lookup_is_a_miss_until_every_row_of_both_sides_is_stored(r):
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"  # the reference says HIT here
    store_prefix(r, "ns", 8, layers=2)
    r.execute_command("V.TRUNCATE", "ns_pv", 1, 6)
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"MISS"
    store_prefix(r, "ns", 8, layers=2, start=6)
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    assert stats(r)[b"kvprefix_misses"] == 3


def test_lookup_credits_follow_the_reference_example(r):
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16", "PREFILL_MS", 1200)
    store_prefix(r, "ns", 10)
    for _ in range(3):
        assert r.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
    assert stats(r)[b"prefill_seconds_avoided"] == b"3.600"
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns", "TOKENS", 100) == b"HIT"
    s = stats(r)
    assert s[b"prefill_seconds_avoided"] == b"3.655" and s[b"prefill_seconds_avoided_measured"] == b"3.600"
    assert s[b"kvprefix_tokens_served"] == 3 * 10 + 100 and s[b"kvprefix_hits_measured"] == 3
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns", "prefill_ms", 500) == b"HIT"
    assert stats(r)[b"prefill_seconds_avoided_measured"] == b"4.100"
    assert r.execute_command("PION.STATS", "RESET") == b"OK"
    assert stats(r)[b"kvprefix_hits"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ns", "COLOR", 1), "KV.PREFIX.LOOKUP unknown option (TOKENS, PREFILL_MS)"),
        (("ns", "TOKENS"), "KV.PREFIX.LOOKUP option needs a value"),
        (("ns", "TOKENS", 100000001), "TOKENS out of range (0..100000000)"),
        (("ns", "PREFILL_MS", "x"), "PREFILL_MS out of range (0..86400000)"),
    ],
)
def test_lookup_errors_record_nothing(r, args, message):
    assert err(r, "KV.PREFIX.LOOKUP", *args) == message
    assert stats(r)[b"kvprefix_misses"] == 0


def test_a_hit_waits_until_the_rows_are_durable(server, r):
    """A LOOKUP from another client is not answered HIT before the store's log record is durable."""
    from pion.server.durability.journal import Journal

    class ManualJournal(Journal):
        def __init__(self):
            super().__init__()
            self.waiting = []

        def append(self, effects):
            self.seq += 1
            return self.seq

        def when_durable(self, seq, callback):
            self.waiting.append(callback)

        def release(self):
            self.durable_seq = self.seq
            waiting, self.waiting = self.waiting, []
            for callback in waiting:
                callback()

    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    journal = ManualJournal()
    server.call(setattr, server.server, "journal", journal)
    writer = redis.Redis(port=server.port)
    done = threading.Event()
    threading.Thread(target=lambda: (store_prefix(writer, "ns", 4, layers=1), done.set()), daemon=True).start()
    replies = []
    reader = redis.Redis(port=server.port, socket_timeout=10)
    for _ in range(50):  # release one store at a time until all four are in
        if server.call(lambda: len(journal.waiting)):
            server.call(journal.release)
        if done.wait(0.02):
            break
    assert done.is_set()
    server.call(setattr, journal, "durable_seq", journal.seq - 1)  # pretend the last store is not durable yet
    looker = threading.Thread(target=lambda: replies.append(reader.execute_command("KV.PREFIX.LOOKUP", "ns")), daemon=True)
    looker.start()
    looker.join(0.3)
    assert replies == []
    server.call(journal.release)
    looker.join(5)
    assert replies == [b"HIT"]


# -- DROP, INFO, BLOCKS, MEMBERSHIP, OWNER -------------------------------------------------------


def test_drop_counts_namespaces_that_held_anything(r):
    r.execute_command("KV.PREFIX.REGISTER", "a", 32, "fp16")
    r.execute_command("KV.PREFIX.REGISTER", "b", 32, "fp16")
    assert r.execute_command("KV.PREFIX.DROP", "a", "b", "c") == 2
    assert r.execute_command("KV.PREFIX.DROP", "a") == 0
    assert err(r, "KV.PREFIX.DROP", "a", "") == "ns_key length must be 1..200"
    assert b"sessions:0\r\n" in r.execute_command("V.INFO")


def test_info_fields(r):
    r.execute_command("KV.PREFIX.REGISTER", "a", 32, "fp16")
    store_prefix(r, "a", 5, layers=3)
    info = dict(line.split(":", 1) for line in r.execute_command("KV.PREFIX.INFO").decode().split("\r\n") if line)
    assert info["registered_prefixes"] == "1" and info["total_prefix_tokens"] == "5"
    assert info["total_prefix_rows"] == "15" and info["vstore_sessions"] == "2"
    assert info["vstore_bytes"] == str(2 * 3 * 5 * 64) and info["my_worker_id"] == "0"
    for key in ("vstore_total_fetches", "vstore_evictions", "vstore_max_sessions", "wal_enabled", "wal_bytes",
                "wal_appended", "wal_replayed", "directory_enabled", "directory_entries", "sdpa_warm", "sdpa_cold",
                "sdpa_demotions", "sdpa_rehydrates", "kv_maxmemory", "pinned_prefixes"):
        assert key in info


def test_blocks_and_membership(r, raw):
    hashes = np.array([11, 22, 33], "<u8")
    assert r.execute_command("KV.PREFIX.BLOCKS", "ns") == b"UNKNOWN"
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16", "BLOCKS", 64, 3, hashes.tobytes(), "PREFILL_MS", 9)
    body = np.array([64, 3], "<u4").tobytes() + hashes.tobytes()
    raw.cmd("KV.PREFIX.BLOCKS", "ns")
    assert raw.read_exactly(b"$32\r\n" + body + b"\r\n") == b"$32\r\n" + body + b"\r\n"
    probes = np.array([22, 44, 11], "<u8").tobytes()
    assert r.execute_command("KV.PREFIX.MEMBERSHIP", "ns", 3, probes) == bytes([0b101])
    assert r.execute_command("KV.PREFIX.MEMBERSHIP", "other", 3, probes) == b"UNKNOWN"
    assert err(r, "KV.PREFIX.MEMBERSHIP", "ns", 2, probes) == "hash_blob length mismatch"
    assert err(r, "KV.PREFIX.MEMBERSHIP", "ns", -1, b"") == "hash_count out of range (0..1048576)"


def test_owner_is_this_node(r):
    assert r.execute_command("KV.PREFIX.OWNER", "ns") == b"-1"
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    assert r.execute_command("KV.PREFIX.OWNER", "ns") == b"0"


# -- MATCH, PIN, COMMIT, SAVE --------------------------------------------------------------------


def test_match_finds_the_longest_stored_prefix_in_one_round_trip(r, raw):
    tokens = np.arange(40, dtype="<u4")
    r.execute_command("KV.PREFIX.REGISTER", "p", 32, "fp16", "CHAIN", 16, tokens[:32].tobytes())
    store_prefix(r, "p", 32)
    request = np.concatenate([tokens[:20], np.full(28, 7, "<u4")]).astype("<u4")
    hashes = b"".join(block_hashes(request, 16))
    assert r.execute_command("KV.PREFIX.MATCH", 16, hashes, "TOKENS", request.tobytes()) == [b"p", 1]
    full = b"".join(block_hashes(tokens, 16))
    raw.cmd("KV.PREFIX.MATCH", "16", full, "TOKENS", tokens.tobytes())
    assert raw.read_exactly(b"*2\r\n$1\r\np\r\n:2\r\n") == b"*2\r\n$1\r\np\r\n:2\r\n"
    raw.cmd("KV.PREFIX.MATCH", "16", full[:16], "TOKENS", np.arange(1, 17, dtype="<u4").tobytes())
    assert raw.read_exactly(b"*2\r\n$-1\r\n:0\r\n") == b"*2\r\n$-1\r\n:0\r\n"
    assert err(r, "KV.PREFIX.MATCH", 16, b"x" * 15) == \
        "KV.PREFIX.MATCH hash_blob must be a multiple of 16 bytes (at most 1048576 hashes)"
    assert err(r, "KV.PREFIX.MATCH", 0, b"") == "KV.PREFIX.MATCH block_size out of range (1..8192)"
    assert err(r, "KV.PREFIX.MATCH", 16, b"", "TOKEN", b"") == "KV.PREFIX.MATCH unknown option (TOKENS, SEED, WITHTOKENS)"
    assert err(r, "KV.PREFIX.MATCH", 16, b"", "TOKENS", b"abc") == \
        "KV.PREFIX.MATCH TOKENS blob length must be a multiple of 4 (u32 token ids)"


def test_match_withtokens_answers_every_shared_token_across_block_sizes(r):
    tokens = np.arange(40, dtype="<u4")
    seed = b"S" * 16
    r.execute_command("KV.PREFIX.REGISTER", "p", 32, "fp16", "CHAIN", 16, tokens.tobytes(), "SEED", seed)
    store_prefix(r, "p", 40)
    r.execute_command("KV.PREFIX.REGISTER", "short", 32, "fp16", "CHAIN", 16, (tokens[:10] + 100).tobytes(),
                      "SEED", seed)
    store_prefix(r, "short", 10)
    longer = np.concatenate([tokens, [7, 7, 7]]).astype("<u4")
    hashes = b"".join(block_hashes(longer, 16, seed))
    gen_p, gen_short = (r.execute_command("KV.PREFIX.GENERATION", ns) for ns in ("p", "short"))
    assert 0 < gen_p != gen_short > 0
    # a stored prefix of 40 tokens serves all 40 of a longer request, not the 32 of whole blocks
    assert r.execute_command("KV.PREFIX.MATCH", 16, hashes, "TOKENS", longer.tobytes(), "WITHTOKENS") == \
        [b"p", 2, 40, 16, 40, gen_p]
    # a client hashing with another block size finds it through SEED (the server hashes for 16)
    other = b"".join(block_hashes(longer, 8, seed))
    assert r.execute_command("KV.PREFIX.MATCH", 8, other, "TOKENS", longer.tobytes(), "WITHTOKENS") == \
        [None, 0, 0, 0, 0, 0]
    assert r.execute_command("KV.PREFIX.MATCH", 8, other, "TOKENS", longer.tobytes(), "SEED", seed, "WITHTOKENS") == \
        [b"p", 2, 40, 16, 40, gen_p]
    # a request shorter than the stored prefix gets its head; a prefix shorter than one block is found by SEED
    head = tokens[:35]
    assert r.execute_command("KV.PREFIX.MATCH", 16, b"".join(block_hashes(head, 16, seed)), "TOKENS", head.tobytes(),
                             "SEED", seed, "WITHTOKENS") == [b"p", 2, 35, 16, 40, gen_p]
    small = np.concatenate([tokens[:10] + 100, [1, 2]]).astype("<u4")
    assert r.execute_command("KV.PREFIX.MATCH", 16, b"", "TOKENS", small.tobytes(), "SEED", seed, "WITHTOKENS") == \
        [b"short", 0, 10, 16, 10, gen_short]
    assert err(r, "KV.PREFIX.MATCH", 16, b"", "WITHTOKENS") == "KV.PREFIX.MATCH WITHTOKENS needs TOKENS"
    assert err(r, "KV.PREFIX.MATCH", 16, b"", "SEED", b"x") == "SEED must be 16 bytes"


SEED_A, SEED_B = b"A" * 16, b"B" * 16


def seeded_hashes(tokens, seed: bytes = b"\0" * 16) -> bytes:
    return b"".join(block_hashes(tokens, 16, seed))


def test_a_seed_keeps_apart_chains_of_the_same_tokens(server, r):
    """Two models storing the same token ids: MATCH with one's seed never answers the other's."""
    tokens = np.arange(32, dtype="<u4")
    for ns, seed in (("a", SEED_A), ("b", SEED_B), ("z", None)):
        r.execute_command("KV.PREFIX.REGISTER", ns, 32, "fp16", "CHAIN", 16, tokens.tobytes(),
                          *(("SEED", seed) if seed else ()))
        store_prefix(r, ns, 32)
    for ns, seed in (("a", SEED_A), ("b", SEED_B), ("z", b"\0" * 16)):
        assert r.execute_command("KV.PREFIX.MATCH", 16, seeded_hashes(tokens, seed)) == [ns.encode(), 2]
        assert r.execute_command("KV.PREFIX.MATCH", 16, seeded_hashes(tokens, seed), "TOKENS", tokens.tobytes()) == \
            [ns.encode(), 2]
    assert r.execute_command("KV.PREFIX.MATCH", 16, seeded_hashes(tokens, b"C" * 16)) == [None, 0]
    # a longer chain becomes the child of the registered head of its own seed only
    longer = np.arange(48, dtype="<u4").tobytes()
    r.execute_command("KV.PREFIX.REGISTER", "a2", 32, "fp16", "SEED", SEED_A, "CHAIN", 16, longer)
    r.execute_command("KV.PREFIX.REGISTER", "c2", 32, "fp16", "CHAIN", 16, longer, "SEED", b"C" * 16)
    r.execute_command("KV.PREFIX.REGISTER", "z2", 32, "fp16", "CHAIN", 16, longer)
    registry = server.server.parts.kvcache.default.registry
    parents = server.call(lambda: {ns: registry.get(ns).parent for ns in (b"a2", b"c2", b"z2")})
    assert parents == {b"a2": b"a", b"c2": None, b"z2": b"z"}


def test_re_registering_with_another_seed_is_refused(r):
    tokens = np.arange(32, dtype="<u4").tobytes()
    r.execute_command("KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens, "SEED", SEED_A)
    assert r.execute_command("KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens, "SEED", SEED_A) == b"OK"
    refused = "KV.PREFIX.REGISTER: namespace 'a' exists with a different token chain"
    assert err(r, "KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens, "SEED", SEED_B) == refused
    assert err(r, "KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens) == refused  # no SEED: the zero seed
    r.execute_command("KV.PREFIX.REGISTER", "z", 32, "fp16", "CHAIN", 16, tokens)
    assert err(r, "KV.PREFIX.REGISTER", "z", 32, "fp16", "CHAIN", 16, tokens, "SEED", b"\1" * 16) == \
        "KV.PREFIX.REGISTER: namespace 'z' exists with a different token chain"


def test_a_seed_survives_a_restart_from_the_log(make_server):
    srv = make_server()
    r = redis.Redis(port=srv.port)
    tokens = np.arange(32, dtype="<u4")
    r.execute_command("KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens.tobytes(), "SEED", SEED_A)
    store_prefix(r, "a", 32)
    r.close()
    srv.stop()
    assert not Path(srv.settings.dir, SNAPSHOT_FILE).exists()  # what comes back comes from the log
    again = ThreadServer(srv.settings).start()
    try:
        r2 = redis.Redis(port=again.port)
        assert r2.execute_command("KV.PREFIX.MATCH", 16, seeded_hashes(tokens, SEED_A)) == [b"a", 2]
        assert r2.execute_command("KV.PREFIX.MATCH", 16, seeded_hashes(tokens)) == [None, 0]
        replayed = int(r2.execute_command("KV.PREFIX.INFO").split(b"wal_replayed:")[1].split(b"\r\n")[0])
        assert replayed >= 5  # the REGISTER and the rows came back from log records
        assert err(r2, "KV.PREFIX.REGISTER", "a", 32, "fp16", "CHAIN", 16, tokens.tobytes()) == \
            "KV.PREFIX.REGISTER: namespace 'a' exists with a different token chain"
    finally:
        again.stop()


def test_pin_and_unpin(r):
    assert r.execute_command("KV.PREFIX.PIN", "ns") == 0
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "fp16")
    assert r.execute_command("KV.PREFIX.PIN", "ns") == 1
    assert b"pinned_prefixes:1\r\n" in r.execute_command("KV.PREFIX.INFO")
    assert r.execute_command("KV.PREFIX.UNPIN", "ns") == 1
    assert b"pinned_prefixes:0\r\n" in r.execute_command("KV.PREFIX.INFO")


def test_commit_is_a_barrier_and_refused_without_a_log(make_server):
    on = make_server()
    assert redis.Redis(port=on.port).execute_command("KV.PREFIX.COMMIT") == b"OK"
    off = make_server(appendonly=False)
    assert err(redis.Redis(port=off.port), "KV.PREFIX.COMMIT") == "KV.PREFIX.COMMIT: --no-wal, writes are not logged"


@pytest.mark.parametrize("path", ["/etc/x", "~/x", "a/../b", "..", "a\x01b"])
def test_save_refuses_paths_outside_the_data_directory(r, path):
    assert err(r, "KV.PREFIX.SAVE", path) == \
        "KV.PREFIX.SAVE: path must be relative to the data directory (no leading '/', no '..', no control bytes)"


def test_save_with_a_custom_relative_path_is_refused_clearly(r):
    assert err(r, "KV.PREFIX.SAVE", "snap.bin") == \
        "KV.PREFIX.SAVE: a custom path is not supported (the snapshot is written to the data directory)"


def test_save_snapshots_the_kv_state_and_a_restart_loads_it(make_server):
    srv = make_server()
    r = redis.Redis(port=srv.port)
    r.execute_command("KV.PREFIX.REGISTER", "ns", 32, "turbo4", "CHAIN", 4, np.arange(8, dtype="<u4").tobytes())
    store_prefix(r, "ns", 8)
    r.execute_command("KV.PREFIX.REGISTER", "seeded", 32, "fp16", "CHAIN", 4, np.arange(8, dtype="<u4").tobytes(),
                      "SEED", SEED_A)
    store_prefix(r, "seeded", 8)
    raw_rows = r.execute_command("V.FETCH", "ns_pk", 1, "RANGE", 0, 8, "FMT", "RAW")
    big = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)  # 64 KiB: kept in an arena
    r.execute_command("V.CREATE", "big", 64, "VQUANT", "fp32")
    r.execute_command("V.STOREBATCH", "big", 0, 0, 256, big.tobytes())
    r.execute_command("V.STOREBATCH", "big", 0, 10, 1, np.zeros(64, np.float32).tobytes())  # split the chunk
    big[10] = 0
    assert r.execute_command("KV.PREFIX.SAVE") == b"OK"
    datadir = srv.settings.dir
    srv.stop()
    import shutil

    from tests.support.servers import ThreadServer

    from pion.storage.recovery import WAL_DIR

    shutil.rmtree(f"{datadir}/{WAL_DIR}")  # only the snapshot is left: the K/V state must be in it

    again = ThreadServer(srv.settings).start()
    try:
        r2 = redis.Redis(port=again.port)
        assert r2.execute_command("KV.PREFIX.LOOKUP", "ns") == b"HIT"
        assert r2.execute_command("V.FETCH", "ns_pk", 1, "RANGE", 0, 8, "FMT", "RAW") == raw_rows
        assert r2.execute_command("V.FETCH", "big", 0, "RANGE", 0, 256) == big.tobytes()
        assert r2.execute_command("KV.PREFIX.MATCH", 4, b"".join(block_hashes(np.arange(8), 4))) == [b"ns", 2]
        assert r2.execute_command("KV.PREFIX.MATCH", 4, b"".join(block_hashes(np.arange(8), 4, SEED_A))) == \
            [b"seeded", 2]
    finally:
        again.stop()
