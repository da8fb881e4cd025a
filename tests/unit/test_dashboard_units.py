"""The dashboard's pieces without a server: the charts' ring buffer, the prefix table's query,
order and columns, the login's session checks."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from pion.kvcache.prefix import Prefix
from pion.server.dashboard.history import History
from pion.server.dashboard.prefixes import COLUMNS, Query, QueryError, codec_of, model_short, ordered
from pion.server.dashboard.readers import Viewer


def test_the_history_gives_intervals_and_survives_a_reset():
    readings = iter([
        {"default": (0, 0, 0), "acme": (0, 0, 0)},
        {"default": (3, 1, 3_000_000), "acme": (5, 5, 1_000_000)},
        {"default": (3, 1, 3_000_000), "acme": (5, 5, 1_000_000)},  # no lookups in between
        {"default": (1, 0, 500_000), "acme": (5, 5, 1_000_000)},  # CONFIG RESETSTAT
    ])
    history = History(lambda: next(readings), interval=0.0, capacity=10)
    for t in range(4):
        assert history.tick(now=100.0 + t)
    mine = history.series(lambda space: space == "default")
    assert [(p["t"], p["hits"], p["misses"], p["hit_rate"]) for p in mine] == [
        (101.0, 3, 1, 0.75), (102.0, 0, 0, None), (103.0, 1, 0, 1.0)]
    assert [p["saved_total_s"] for p in mine] == [3.0, 3.0, 3.5]
    everything = history.series(lambda space: True)
    assert everything[0]["hits"] == 8 and everything[0]["misses"] == 6
    assert json.dumps(mine)  # JSON as it is (no NaN: None without lookups)


def test_the_history_keeps_its_capacity_and_waits_its_interval():
    history = History(lambda: {"default": (1, 0, 0)}, interval=3600.0, capacity=2)
    assert history.tick() is True and history.tick() is False  # not due yet
    history.interval = 0.0
    for _ in range(5):
        history.tick()
    assert len(history.samples) == 2


def test_queries_are_checked():
    assert Query.parse({}) == Query("hits", "desc", 1, 50)
    assert Query.parse({"sort": "ns"}) == Query("ns", "asc", 1, 50)  # each column's own default order
    assert Query.parse({"sort": "bytes", "order": "ASC", "page": "3", "size": "500"}) == Query("bytes", "asc", 3, 500)
    for args, text in (({"sort": "nope"}, "sort must be one of space, ns"), ({"order": "sideways"}, "asc or desc"),
                       ({"page": "0"}, "page must be an integer"), ({"size": "1e3"}, "size must be an integer"),
                       ({"x": "1"}, "unknown parameter 'x'")):
        with pytest.raises(QueryError, match=text):
            Query.parse(args)


@pytest.mark.parametrize("chunk", [1, 2, 1000])  # one run per row, runs across ties, a single run
def test_the_order_breaks_ties_by_space_and_namespace_in_both_directions(chunk):
    rows = [("b", "n2", "", 5, "fp16", 10, 1, 0.0, False), ("a", "n9", "", 5, "fp16", 30, 1, 0.0, True),
            ("a", "n1", "", 7, "int8", 20, 2, 0.0, False)]

    def names(sort: str, order: str) -> list[str]:
        return [r[1] for r in asyncio.run(ordered(rows, sort, order, chunk))]

    assert names("hits", "desc") == ["n1", "n9", "n2"]
    assert names("hits", "asc") == ["n9", "n2", "n1"]
    assert names("tokens", "desc") == ["n1", "n9", "n2"] and names("tokens", "asc") == ["n9", "n2", "n1"]
    assert names("bytes", "desc") == ["n9", "n1", "n2"]
    assert names("ns", "desc") == ["n9", "n2", "n1"] and names("ns", "asc") == ["n1", "n2", "n9"]
    assert names("space", "asc") == ["n1", "n9", "n2"] and names("space", "desc") == ["n2", "n9", "n1"]
    assert names("pinned", "desc") == ["n9", "n1", "n2"]
    assert names("codec", "desc") == ["n1", "n9", "n2"]


def test_the_sliced_sort_is_sorted_and_stable():
    rng = random.Random(5)
    rows = [(rng.choice("ab"), f"n{i:04d}", "", rng.randrange(5), "", 0, rng.randrange(3), 0.0, False)
            for i in range(3000)]
    rng.shuffle(rows)
    for sort in ("hits", "tokens", "ns"):
        for order in ("asc", "desc"):
            at = COLUMNS.index(sort)
            ties = (lambda r: (r[1], r[0])) if sort == "ns" else (lambda r: (r[0], r[1]))
            expected = sorted(sorted(rows, key=ties), key=lambda r, at=at: r[at], reverse=order == "desc")
            assert asyncio.run(ordered(rows, sort, order, chunk=128)) == expected, (sort, order)


def test_model_and_codec_columns_read_the_manifest():
    plain = Prefix(b"ns", 64, "fp16")
    assert model_short(plain) == "" and codec_of(plain) == "fp16"
    staged = Prefix(b"ns", 64, "int8", manifest={
        "fingerprint": {"class": "transformers.models.llama.LlamaForCausalLM"},
        "fingerprint_sha256": "ab12cd34ef56" + "0" * 52, "n_layers": 2,
        "codecs": {"k": ["fp16", "int8"], "v": "int8"}})
    assert model_short(staged) == "LlamaForCausalLM ab12cd34"
    assert codec_of(staged) == "fp16+int8"
    llama_cpp = Prefix(b"ns", 64, "fp16", manifest={"fingerprint": {"model_id": "smollm2-135m", "class": "Llama"}})
    assert model_short(llama_cpp) == "smollm2-135m"


def test_a_viewer_sees_its_space_or_all():
    assert Viewer("default", None).sees("acme") and Viewer("default", None).sees("default")
    assert Viewer("acme", "acme").sees("acme") and not Viewer("acme", "acme").sees("globex")
    assert not Viewer("acme", "acme").sees("default")


def test_binary_slow_log_arguments_are_escaped():
    from pion.server.dashboard.readers import _shown

    assert _shown(b"KV.PREFIX.LOOKUP") == "KV.PREFIX.LOOKUP" and _shown("café".encode()) == "café"
    assert _shown(b"\x00\x80?ab... (12 more bytes)") == "\\x00\\x80?ab... (12 more bytes)"
