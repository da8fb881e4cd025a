"""redis-py's vector-set API (``r.vset()``), unchanged, in RESP2 and RESP3, with and without
decode_responses: its response callbacks must read Pion's replies as they read Redis 8's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import redis
from redis.commands.vectorset.commands import QuantizationOptions


@pytest.fixture(params=[(2, False), (2, True), (3, False), (3, True)], ids=["resp2", "resp2-dec", "resp3", "resp3-dec"])
def vs(request, server):
    proto, decode = request.param
    client = redis.Redis(port=server.port, protocol=proto, decode_responses=decode)
    yield client.vset(), decode
    client.close()


def s(value, decode):
    return value if decode else value.encode()


def test_add_similar_and_scores(vs):
    v, dec = vs
    assert v.vadd("set", [1, 0, 0], "a") == 1
    assert v.vadd("set", np.array([0, 1, 0], dtype="<f4").tobytes(), "b", attributes={"k": 2}) == 1
    assert v.vadd("set", [0.9, 0.1, 0], "c", cas=True, ef=50) == 1
    assert v.vcard("set") == 3 and v.vdim("set") == 3
    assert v.vsim("set", [1, 0, 0], count=2) == [s("a", dec), s("c", dec)]
    scores = v.vsim("set", "a", with_scores=True)
    assert list(scores) == [s("a", dec), s("c", dec), s("b", dec)]
    assert scores[s("a", dec)] == pytest.approx(1.0) and scores[s("b", dec)] == pytest.approx(0.5, abs=1e-3)
    both = v.vsim("set", "b", with_scores=True, with_attribs=True, count=1)
    assert both == {s("b", dec): {"score": pytest.approx(1.0), "attributes": {"k": 2}}}
    attrs = v.vsim("set", "b", with_attribs=True, count=2)
    assert attrs[s("b", dec)] == {"k": 2}
    assert v.vsim("set", [1, 0, 0], filter=".k == 2") == [s("b", dec)]
    assert v.vsim("set", [1, 0, 0], filter=".k == 2", filter_ef=10, truth=True, no_thread=True, epsilon=0.9, ef=20) == [s("b", dec)]


def test_quantizations_and_embeddings(vs):
    v, _ = vs
    v.vadd("q", [1, 4.32, 0.11], "e", quantization=QuantizationOptions.NOQUANT)
    assert v.vemb("q", "e") == pytest.approx([1, 4.32, 0.11], rel=1e-6)
    v.vadd("b", [1, 4.32, 0.0, 0.05, -2.9], "e", quantization=QuantizationOptions.BIN)
    assert v.vemb("b", "e") == [1, 1, -1, 1, -1]
    v.vadd("8", [1, 4.32, 10.0, -21, -2.9], "e", quantization=QuantizationOptions.Q8, numlinks=8)
    raw = v.vemb("8", "e", raw=True)
    assert raw["quantization"] in ("int8", b"int8") and len(raw["raw"]) == 5
    assert raw["l2"] == pytest.approx(np.linalg.norm([1, 4.32, 10.0, -21, -2.9]), rel=1e-5)
    assert raw["range"] == pytest.approx(21 / raw["l2"], rel=1e-5)
    assert v.vemb("8", "missing") is None


def test_reduce_info_links_and_attributes(vs):
    v, dec = vs
    for i in range(12):
        v.vadd("r", [1, i, 0, i % 3, 1], f"e{i}", reduce_dim=3)
    assert v.vdim("r") == 3
    info = v.vinfo("r")
    assert info[s("projection-input-dim", dec)] == 5 and info[s("size", dec)] == 12
    assert info[s("quant-type", dec)] == s("int8", dec)
    links = v.vlinks("r", "e0")
    assert isinstance(links, list) and links[-1]
    scored = v.vlinks("r", "e0", with_scores=True)
    assert [list(level) for level in scored] == links
    assert v.vsetattr("r", "e1", {"x": [1, 2]}) == 1
    assert v.vgetattr("r", "e1") == {"x": [1, 2]}
    assert v.vsetattr("r", "e1", "") == 1 and v.vgetattr("r", "e1") is None
    assert v.vrem("r", "e1") == 1 and v.vrem("r", "e1") == 0
    assert v.vcard("r") == 11


def test_random_members_and_ranges(vs):
    v, dec = vs
    for name in ("a", "b", "c", "d"):
        v.vadd("m", [1, ord(name)], name)
    assert v.vrandmember("m") in [s(n, dec) for n in "abcd"]
    assert sorted(v.vrandmember("m", 10)) == [s(n, dec) for n in "abcd"]
    assert len(v.vrandmember("m", -6)) == 6
    assert v.vrandmember("missing") is None
    assert v.vrange("m", "[b", "+") == [s(n, dec) for n in "bcd"]
    assert v.vrange("m", "-", "(c", 1) == [s("a", dec)]


def test_errors_map_to_response_error(vs):
    v, _ = vs
    v.vadd("e", [1, 2], "x")
    with pytest.raises(redis.ResponseError, match="Vector dimension mismatch"):
        v.vadd("e", [1, 2, 3], "y")
    with pytest.raises(redis.ResponseError, match="element not found in set"):
        v.vsim("e", "nope")
    with pytest.raises(redis.ResponseError, match="invalid FILTER-EF"):
        v.vsim("e", "x", filter=".a", filter_ef="0")
    with pytest.raises(redis.ResponseError, match="key does not exist"):
        v.vdim("missing")
    assert json.loads(json.dumps(v.vinfo("missing"))) is None
