"""FT.CREATE refuses absurd VECTOR parameters up front, as RediSearch does, instead of creating
an index whose first write or query runs out of memory (``M 1000000000``, ``EF_RUNTIME 10^9``,
``INITIAL_CAP 10^12``) or answers an internal error (``M 1``). Texts: RediSearch's ``Bad
arguments for ...`` and its server-limit messages (spec.c)."""

from __future__ import annotations

import pytest
import redis

BASE = ["TYPE", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2"]
VEC = b"\0" * 16


def create(r, algo, *extra):
    params = BASE + list(extra)
    return r.execute_command("FT.CREATE", "i", "SCHEMA", "v", "VECTOR", algo, str(len(params)), *params)


@pytest.mark.parametrize("algo,extra,error", [
    ("HNSW", ["M", "1000000000"], "^Bad arguments for algorithm HNSW parameter M: Value is outside acceptable bounds$"),
    ("HNSW", ["M", "32768"], "parameter M: Value is outside acceptable bounds"),
    ("HNSW", ["M", "1"], "parameter M: Value is outside acceptable bounds"),
    ("HNSW", ["M", "0"], "parameter M: Value is outside acceptable bounds"),
    ("HNSW", ["EF_CONSTRUCTION", "1000000000"], "parameter EF_CONSTRUCTION: Value is outside acceptable bounds"),
    ("HNSW", ["EF_CONSTRUCTION", "0"], "parameter EF_CONSTRUCTION: Value is outside acceptable bounds"),
    ("HNSW", ["EF_RUNTIME", "1000000000"], "parameter EF_RUNTIME: Value is outside acceptable bounds"),
    ("HNSW", ["INITIAL_CAP", "1000000000000"], r"^Vector index initial capacity 1000000000000 exceeded server limit \(\d+ with the given parameters\)$"),
    ("FLAT", ["INITIAL_CAP", "1000000000000"], "^Vector index initial capacity 1000000000000 exceeded server limit"),
    ("FLAT", ["BLOCK_SIZE", "1000000000000"], r"^Vector index block size 1000000000000 exceeded server limit \(\d+ with"),
    ("FLAT", ["BLOCK_SIZE", "0"], "parameter BLOCK_SIZE: Value is outside acceptable bounds"),
])
def test_absurd_vector_parameters_refused(r, algo, extra, error):
    with pytest.raises(redis.ResponseError, match=error):
        create(r, algo, *extra)
    assert r.execute_command("FT._LIST") == []  # nothing was created


@pytest.mark.parametrize("params,error", [
    (["FOO", "FLOAT32", "DIM", "4", "DISTANCE_METRIC", "L2"], "^Bad arguments for algorithm HNSW: FOO$"),
    (["TYPE", "FLOAT32", "DIM", "0", "DISTANCE_METRIC", "L2"], "parameter DIM: Value is outside acceptable bounds"),
    (["TYPE", "FLOAT32", "DIM", "99999999999", "DISTANCE_METRIC", "L2"], "index dim: value is larger than 32768"),
])
def test_unknown_attribute_and_dim_refused(r, params, error):
    with pytest.raises(redis.ResponseError, match=error):
        r.execute_command("FT.CREATE", "i", "SCHEMA", "v", "VECTOR", "HNSW", str(len(params)), *params)
    assert r.execute_command("FT._LIST") == []


def test_limits_themselves_work(r):
    # the largest accepted values make a working index; a huge INITIAL_CAP that fits memory is
    # only a hint (a few rows up front), so it costs nothing until vectors arrive
    assert create(r, "HNSW", "M", "32767", "EF_CONSTRUCTION", "1000000", "EF_RUNTIME", "1000000",
                  "INITIAL_CAP", "10000") == b"OK"
    r.hset("d1", "v", VEC)
    r.hset("d2", "v", b"\0" * 12 + b"\x00\x00\x80\x3f")
    reply = r.execute_command("FT.SEARCH", "i", "*=>[KNN 2 @v $b]", "PARAMS", "2", "b", VEC, "NOCONTENT", "DIALECT", "2")
    assert reply == [2, b"d1", b"d2"]


def test_query_ef_runtime_past_the_graph_is_clamped(r):
    assert create(r, "HNSW") == b"OK"
    r.hset("d1", "v", VEC)
    # EF_RUNTIME 10^12 used to reach usearch as is (RuntimeError: Out of memory!)
    reply = r.execute_command("FT.SEARCH", "i", "*=>[KNN 1000000000000 @v $b EF_RUNTIME 1000000000000]",
                              "PARAMS", "2", "b", VEC, "NOCONTENT", "DIALECT", "2")
    assert reply == [1, b"d1"]
