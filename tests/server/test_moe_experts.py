"""MOE.EXPERT.* on the wire: reply layouts, error texts, the tier's life with the server."""

from __future__ import annotations

import json
import time

import pytest
import redis
from tests.support.moe_models import write_checkpoint

from pion.cli.server_main import build_settings, main
from pion.codecs.experts import decode_fetch, decode_mhst


@pytest.fixture
def models(tmp_path):
    root = tmp_path / "models"
    expected = {kind: write_checkpoint(root / kind, kind, n_layers=2, n_experts=4) for kind in ("per_expert", "stacked")}
    expected["big"] = write_checkpoint(root / "big", "fused", n_layers=1, n_experts=3, hidden=128, inter=512)
    return root, expected


@pytest.fixture
def moe(make_server, models):
    root, expected = models
    srv = make_server(moe_cache=str(root), moe_cache_mib=1)
    client = redis.Redis(port=srv.port, socket_timeout=10)
    client.expected = expected
    client.root = root
    client.srv = srv
    yield client
    client.close()


def parts_of(blob):
    return [(p, c, bytes(v)) for p, c, v in decode_fetch(blob)]


def stats(r):
    return json.loads(r.execute_command("MOE.EXPERT.STATS"))


def test_without_the_tier_commands_answer_unavailable(r):
    for args in (["LOAD", "x"], ["FETCH", "m", "0", "0"], ["INFO", "m"], ["HIST", "m"], ["PRUNE", "m", "0", "0"],
                 ["LOCAL", "m", "0", "0"]):
        with pytest.raises(redis.ResponseError) as err:
            r.execute_command(f"MOE.EXPERT.{args[0]}", *args[1:])
        assert str(err.value) == "UNAVAILABLE MoE expert tier not enabled (use --moe-cache DIR --moe-cache-mib N)"
    assert json.loads(r.execute_command("MOE.EXPERT.STATS"))["enabled"] is False
    for name in ("PREFETCH", "PIN", "UNPIN"):
        assert r.execute_command(f"MOE.EXPERT.{name}", "m", "0", "1") == b"OK"


def test_unavailable_is_its_own_error_prefix(raw):
    raw.cmd("MOE.EXPERT.FETCH", "m", "0", "0")
    assert raw.read_some().startswith(b"-UNAVAILABLE MoE expert tier not enabled")


@pytest.mark.parametrize("kind", ["per_expert", "stacked"])
def test_fetch_returns_the_reference_blob_with_the_stored_bytes(moe, kind):
    assert moe.execute_command("MOE.EXPERT.LOAD", kind) == kind.encode()
    for layer in range(2):
        for expert in range(4):
            blob = moe.execute_command("MOE.EXPERT.FETCH", kind, layer, expert)
            assert parts_of(blob) == moe.expected[kind][(layer, expert)]
    again = moe.execute_command("MOE.EXPERT.FETCH", kind, 1, 3)
    assert parts_of(again) == moe.expected[kind][(1, 3)]
    s = stats(moe)
    assert s["misses"] == 8 and s["hits"] == 1 and s["resident_bytes"] <= s["budget_bytes"] == 1024 * 1024


def test_a_large_expert_is_sent_whole_over_resp3(moe):
    r3 = redis.Redis(port=moe.srv.port, protocol=3, socket_timeout=10)
    r3.execute_command("MOE.EXPERT.LOAD", "big")
    for _ in range(2):  # a miss, then a hit from the resident file (786 KiB: written as buffers)
        assert parts_of(r3.execute_command("MOE.EXPERT.FETCH", "big", 0, 1)) == moe.expected["big"][(0, 1)]
    r3.close()


def test_info_is_a_json_manifest(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "stacked")
    info = json.loads(moe.execute_command("MOE.EXPERT.INFO", "stacked"))
    for field in ("layers", "experts", "top_k", "bits", "group_size", "hidden_size", "moe_intermediate", "hits",
                  "misses", "prefetched_hits", "ns_count", "expert_tensors"):
        assert field in info
    assert (info["layers"], info["experts"], info["top_k"], info["storage"]) == (2, 4, 2, "stacked")
    assert [p["shape"] for p in info["parts"]] == [[64, 32], [64, 32], [32, 64]]


def test_errors_have_the_reference_texts(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    cases = [
        (["FETCH", "nope", 0, 0], "no such model 'nope'"),
        (["FETCH", "per_expert", "x", 0], "value is not an integer or out of range"),
        (["FETCH", "per_expert", 0, -1], "value is not an integer or out of range"),
        (["FETCH", "per_expert", 0, 4], "expert 4 is out of range (0..3)"),
        (["FETCH", "per_expert", 5, 0], "layer 5 of 'per_expert' has no experts"),
        (["FETCH", "per_expert", 0, 0, "NS"], "syntax error"),
        (["FETCH", "per_expert", 0, 0, "XX", "a"], "syntax error"),
        (["LOAD", "../.."], "outside the moe-cache directory"),
        (["LOAD", "missing"], "missing is not a directory"),
        (["PRUNE", "per_expert", 0, 0, 2], "syntax error"),
        (["HIST", "per_expert", "NS", "nobody"], "no such namespace 'nobody'"),
    ]
    for args, message in cases:
        with pytest.raises(redis.ResponseError) as err:
            moe.execute_command(f"MOE.EXPERT.{args[0]}", *args[1:])
        assert message in str(err.value), (args, str(err.value))
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0)


def test_prune_answers_the_count_and_fetch_answers_pruned(moe, raw):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    assert moe.execute_command("MOE.EXPERT.PRUNE", "per_expert", 1, 2) == 1
    assert moe.execute_command("MOE.EXPERT.PRUNE", "per_expert", 0, 3, 1) == 2
    wire = type(raw)(moe.srv.port)
    wire.cmd("MOE.EXPERT.FETCH", "per_expert", "1", "2")
    assert wire.read_some() == b"-PRUNED layer=1 expert=2\r\n"
    wire.close()
    assert moe.execute_command("MOE.EXPERT.PRUNE", "per_expert", 1, 2, 0) == 1
    assert parts_of(moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 1, 2)) == moe.expected["per_expert"][(1, 2)]


def test_histograms_per_namespace_and_mhst_files(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    for layer, expert, ns in [(0, 1, None), (0, 1, None), (1, 3, "chat"), (1, 3, "chat"), (1, 3, "chat")]:
        moe.execute_command("MOE.EXPERT.FETCH", "per_expert", layer, expert, *(["NS", ns] if ns else []))
    hist = json.loads(moe.execute_command("MOE.EXPERT.HIST", "per_expert"))
    assert {k: hist[k] for k in ("n_layers", "n_experts", "total_fetches", "active")} == {
        "n_layers": 2, "n_experts": 4, "total_fetches": 2, "active": [[0, 1, 2]]}
    chat = json.loads(moe.execute_command("MOE.EXPERT.HIST", "per_expert", "NS", "chat"))
    assert chat["active"] == [[1, 3, 3]] and chat["misses"] == [[1, 3, 1]]
    names = json.loads(moe.execute_command("MOE.EXPERT.HIST", "per_expert", "NSLIST"))
    assert [n["name"] for n in names] == ["default", "chat"]
    assert moe.execute_command("MOE.EXPERT.HIST", "per_expert", "SAVE", "chat.mhst", "NS", "chat") == 1
    assert decode_mhst((moe.root / "chat.mhst").read_bytes()) == [(1, 3, 3)]
    assert moe.execute_command("MOE.EXPERT.HIST", "per_expert", "LOAD", "chat.mhst", "NS", "warm") == 1
    warm = json.loads(moe.execute_command("MOE.EXPERT.HIST", "per_expert", "NS", "warm"))
    assert warm["active"] == [[1, 3, 3]]
    with pytest.raises(redis.ResponseError, match="outside the moe-cache directory"):
        moe.execute_command("MOE.EXPERT.HIST", "per_expert", "SAVE", "/tmp/x.mhst")
    (moe.root / "junk.mhst").write_bytes(b"nope")
    with pytest.raises(redis.ResponseError, match="not an MHST file"):
        moe.execute_command("MOE.EXPERT.HIST", "per_expert", "LOAD", "junk.mhst")


def test_too_many_namespaces_are_refused(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    for i in range(7):
        moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, 0, "NS", f"n{i}")
    with pytest.raises(redis.ResponseError, match="too many namespaces"):
        moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, 0, "NS", "one-more")


def test_local_lane_names_files_this_host_can_map(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "stacked")
    for _ in range(2):
        located = moe.execute_command("MOE.EXPERT.LOCAL", "stacked", 1, 2)
        got = []
        for path, proj, comp, offset, nbytes in located:
            with open(path, "rb") as handle:
                handle.seek(offset)
                got.append((proj, comp, handle.read(nbytes)))
        assert got == moe.expected["stacked"][(1, 2)]
    assert stats(moe)["hits"] == 1


def test_prefetch_warms_and_pin_keeps(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    assert moe.execute_command("MOE.EXPERT.PREFETCH", "per_expert", 1, 0, 1, 2) == b"OK"
    deadline = time.time() + 10
    while stats(moe)["resident_experts"] < 3 and time.time() < deadline:
        time.sleep(0.02)
    moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 1, 2)
    info = json.loads(moe.execute_command("MOE.EXPERT.INFO", "per_expert"))
    assert (info["prefetches"], info["prefetched_hits"], info["misses"]) == (3, 1, 0)
    assert moe.execute_command("MOE.EXPERT.PIN", "per_expert", 0, 0) == b"OK"
    assert json.loads(moe.execute_command("MOE.EXPERT.INFO", "per_expert"))["pinned"] == [[0, 0]]
    assert moe.execute_command("MOE.EXPERT.UNPIN", "per_expert", 0, 0) == b"OK"


def test_pion_stats_counts_moe_hits_and_misses(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    for _ in range(3):
        moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, 0)
    counts = moe.execute_command("PION.STATS")  # redis-py gives it as a dict
    assert (counts[b"moe_hits"], counts[b"moe_misses"]) == (2, 1)


def test_pipelined_misses_keep_reply_order_and_multi_works(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    pipe = moe.pipeline(transaction=False)
    for expert in range(4):
        pipe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, expert)
        pipe.ping()
    replies = pipe.execute()
    assert [parts_of(replies[2 * e]) for e in range(4)] == [moe.expected["per_expert"][(0, e)] for e in range(4)]
    assert replies[1::2] == [True] * 4
    tx = moe.pipeline(transaction=True)
    tx.execute_command("MOE.EXPERT.FETCH", "per_expert", 1, 1)
    tx.execute_command("MOE.EXPERT.FETCH", "per_expert", 1, 1)
    first, second = tx.execute()
    assert parts_of(first) == parts_of(second) == moe.expected["per_expert"][(1, 1)]


def test_the_budget_is_live_in_config(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "big")
    for expert in range(3):
        moe.execute_command("MOE.EXPERT.FETCH", "big", 0, expert)
    assert moe.config_get("moe-cache-mib") == {"moe-cache-mib": "1"}
    moe.config_set("moe-cache-mib", "0")
    assert stats(moe)["resident_bytes"] == 0
    assert parts_of(moe.execute_command("MOE.EXPERT.FETCH", "big", 0, 2)) == moe.expected["big"][(0, 2)]
    with pytest.raises(redis.ResponseError, match="moe-cache can only be set at start"):
        moe.config_set("moe-cache", "/tmp")


def test_a_fifth_model_and_a_taken_id_are_refused(moe, models):
    root, _ = models
    for name in ("a", "b", "c"):
        write_checkpoint(root / name, "fused")
    for name in ("per_expert", "a", "b", "c"):
        moe.execute_command("MOE.EXPERT.LOAD", name)
    with pytest.raises(redis.ResponseError, match="4 models are loaded already"):
        moe.execute_command("MOE.EXPERT.LOAD", "stacked")
    assert moe.execute_command("MOE.EXPERT.UNLOAD", "a") == b"OK"
    assert moe.execute_command("MOE.EXPERT.LOAD", "stacked") == b"stacked"


def test_flags_set_the_directory_and_budget(tmp_path, capsys):
    settings = build_settings(["--moe-cache", str(tmp_path), "--moe-cache-mib", "64"])
    assert (settings.moe_cache, settings.moe_cache_mib) == (str(tmp_path), 64)
    assert main(["--moe-cache-mib", "-1", "--port", "0"]) == 2
    assert "moe-cache-mib must be" in capsys.readouterr().err


def test_a_missing_moe_cache_directory_stops_the_start(make_server, tmp_path):
    with pytest.raises(Exception, match="is not a directory"):
        make_server(moe_cache=str(tmp_path / "absent"))


def test_tenants_fetch_but_keep_their_histograms_apart(make_server, models):
    root, expected = models
    srv = make_server(moe_cache=str(root), requirepass="pw", tenants=("t1:tpw", "t2:tpw2"))
    admin = redis.Redis(port=srv.port, password="pw")
    t1 = redis.Redis(port=srv.port, username="t1", password="tpw")
    t2 = redis.Redis(port=srv.port, username="t2", password="tpw2")
    with pytest.raises(redis.exceptions.NoPermissionError):
        t1.execute_command("MOE.EXPERT.LOAD", "per_expert")
    admin.execute_command("MOE.EXPERT.LOAD", "per_expert")
    assert parts_of(t1.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, 2)) == expected["per_expert"][(0, 2)]
    t2.execute_command("MOE.EXPERT.FETCH", "per_expert", 1, 1, "NS", "mine")
    assert json.loads(t1.execute_command("MOE.EXPERT.HIST", "per_expert"))["active"] == [[0, 2, 1]]
    assert [n["name"] for n in json.loads(t2.execute_command("MOE.EXPERT.HIST", "per_expert", "NSLIST"))] == ["t2/mine"]
    with pytest.raises(redis.ResponseError, match="no such namespace"):
        t2.execute_command("MOE.EXPERT.HIST", "per_expert", "NS", "t1/default")  # t2 asks for "t2/t1/default"
    with pytest.raises(redis.exceptions.NoPermissionError):
        t1.execute_command("MOE.EXPERT.HIST", "per_expert", "SAVE", "x.mhst")
    assert json.loads(admin.execute_command("MOE.EXPERT.HIST", "per_expert"))["total_fetches"] == 0
    for c in (admin, t1, t2):
        c.close()


def test_info_has_a_moe_section_with_the_tiers_counters(moe):
    moe.execute_command("MOE.EXPERT.LOAD", "per_expert")
    moe.execute_command("MOE.EXPERT.FETCH", "per_expert", 0, 0)
    info = moe.info("moe")
    assert info["moe_enabled"] == 1 and info["moe_models"] == 1 and info["moe_misses"] == 1
    assert info["moe_policy"] == "nextuse" and info["moe_budget_bytes"] == 1024 * 1024
