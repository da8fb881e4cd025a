"""The FT query evaluator's cost per query, in process (no server, no reply): what FT.PROFILE's
hook in ``query_exec._eval`` (one attribute test a node when not profiling) costs a query that is
not profiled, and what profiling one costs.

Run it once per source tree, interleaved, and compare the medians of the same run:

    for t in /tmp/before/src src /tmp/before/src src; do PYTHONPATH=$t python benchmarks/bench_query_eval.py; done

Prints one JSON line per query: ``us`` the median microseconds of an evaluation over ``--rounds``
rounds of ``--reps`` evaluations, and ``profiled_us`` the same with a profiler (trees that have one).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

QUERIES = ["apple", "red apple", "apple|banana -red", "@t:{a|b} @n:[10 500]", "(red apple) | (green pear) ~ripe",
           "appl*", '"red apple"']
WORDS = ["apple", "apples", "red", "green", "pear", "banana", "ripe", "sweet", "sour", "fruit", "pie", "skin"]


def build(n: int):
    from pion.storage.hash_value import HashValue
    from pion.vector.index import SearchIndex
    from pion.vector.schema import parse_create

    definition = parse_create([b"FT.CREATE", b"i", b"ON", b"HASH", b"SCHEMA", b"b", b"TEXT", b"t", b"TAG",
                               b"n", b"NUMERIC"])
    index = SearchIndex(definition, 0)
    rng = random.Random(7)
    for k in range(n):
        value = HashValue()
        value.fields.update({b"b": " ".join(rng.choice(WORDS) for _ in range(12)).encode(),
                             b"t": rng.choice("abcd").encode(), b"n": str(rng.randrange(1000)).encode()})
        index.index_key(f"k{k}".encode(), value)
    return index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from pion.vector import query_exec
    from pion.vector.query_parser import parse_query

    try:
        from pion.vector import query_profile
    except ImportError:  # a tree before FT.PROFILE's recorder
        query_profile = None
    index = build(args.docs)
    for text in QUERIES:
        root = parse_query(text, 2).root
        row = {"query": text, "docs": args.docs}
        for label, profiled in (("us", False), ("profiled_us", True)):
            if profiled and query_profile is None:
                continue
            times = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                for _ in range(args.reps):
                    ctx = query_exec.ExecContext(index=index)
                    if profiled:
                        ctx.profile = query_profile.Profiler()
                    query_exec.evaluate(root, ctx)
                times.append((time.perf_counter() - started) / args.reps * 1e6)
            row[label] = round(statistics.median(times), 1)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
