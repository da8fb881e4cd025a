"""A needle in a 64K-token haystack, found by Stage 2 sparse attention in the server.

Prerequisites: the base install only (numpy; no model, no extra). The full run stores a
65,536-token prefix (8 kv heads, head dim 64: 268 MB of fp32 K+V) and takes about 10 s on two
cores (load average 5); ``--smoke`` uses 4,096 tokens and takes a few seconds.

    python examples/needle_stage2.py                 # starts a throwaway Pion server
    python examples/needle_stage2.py --url pion://127.0.0.1:1974 --tokens 32768
    python examples/needle_stage2.py --smoke

The K/V of one attention layer are stored in the server (``ATTEND.PREFIX.STORE``): random keys
with uneven channel scales, as real keys have, and one *needle*, a key aligned with the query
so that dense attention gives it most of its mass, whose value row carries a code. The query is
then answered twice by the server: dense over every token (``ATTEND.PREFIX.QUERY``), and sparse
(``ATTEND.PREFIX.QUERY_SPARSE_AUTO``, Quest), attending only max(1% of N, 512) tokens in whole
64-token blocks the server picks. Both outputs must carry the needle's code (cosine > 0.8);
the difference between them and the time of each are printed. The same commands are what
``PionPromptCache.enable_stage2(sparse=...)`` sends for a transformers model (docs/attention.md;
``benchmarks/bench_attention_e2e.py`` runs it on the real SmolLM2 with a pass key).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server  # noqa: E402

BLOCK, QUEST = 64, 1


def haystack(n: int, kv_heads: int, dim: int, seed: int = 0):
    """``(k, v, q, position, code)``: [H, N, D] fp32 keys and values with one needle, its query."""
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.normal(0, 0.5, dim)).astype(np.float32)
    k = rng.standard_normal((kv_heads, n, dim), dtype=np.float32) * scales
    v = rng.standard_normal((kv_heads, n, dim), dtype=np.float32)
    position = int(rng.integers(n // 10, n - n // 10))
    q = rng.standard_normal((kv_heads, 1, dim)).astype(np.float32)
    logit = math.log(n) + 2  # dense attention gives the needle about 88% of its mass
    code = np.sign(rng.standard_normal((kv_heads, dim))).astype(np.float32) * 3
    for h in range(kv_heads):
        k[h, position] = q[h, 0] * (logit * math.sqrt(dim) / float(q[h, 0] @ q[h, 0]))
        v[h, position] = code[h]
    return k, v, q, position, code


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1), b.reshape(-1)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run(url: str, n: int, kv_heads: int = 8, dim: int = 64) -> int:
    from pion.client import PionClient

    client = PionClient(url)
    try:
        k, v, q, position, code = haystack(n, kv_heads, dim)
        t0 = time.perf_counter()
        client.execute("ATTEND.PREFIX.STORE", "haystack", 0, kv_heads, n, dim, k.tobytes(), v.tobytes())
        print(f"stored {n} tokens x {kv_heads} heads x {dim} (K+V {2 * k.nbytes / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t0:.2f} s; the needle is at token {position}")
        k_top = math.ceil(max(0.01 * n, 512) / BLOCK)
        outputs, times = {}, {}
        for name, args in (
            ("dense", ("ATTEND.PREFIX.QUERY", "haystack", 0, kv_heads, dim, n, q.tobytes())),
            ("sparse", ("ATTEND.PREFIX.QUERY_SPARSE_AUTO", "haystack", 0, kv_heads, dim, BLOCK, k_top, kv_heads,
                        q.tobytes(), b"", -1, QUEST)),
        ):
            client.execute(*args)  # the first query builds the server's warm view and block summaries
            t0 = time.perf_counter()
            reply = client.execute(*args)
            times[name] = (time.perf_counter() - t0) * 1000
            outputs[name] = np.frombuffer(reply, "<f4").reshape(kv_heads, dim)
        attended = min(n, k_top * BLOCK)
        for name in ("dense", "sparse"):
            share = 1.0 if name == "dense" else attended / n
            print(f"{name:6s}: {times[name]:7.1f} ms, attended {share:.1%} of the prefix, "
                  f"cosine with the needle's code {cosine(outputs[name], code):.3f}")
        gap = float(np.abs(outputs["sparse"] - outputs["dense"]).max())
        print(f"sparse vs dense: max abs difference {gap:.4f}; speed-up {times['dense'] / times['sparse']:.1f}x")
        found = all(cosine(outputs[name], code) > 0.8 for name in outputs)
        print(f"needle found by both: {found}")
        client.execute("KV.PREFIX.DROP", "haystack")
        return 0 if found else 1
    finally:
        client.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--tokens", type=int, default=65536, help="prefix length (default 64K)")
    parser.add_argument("--smoke", action="store_true", help="4,096 tokens, a few seconds")
    args = parser.parse_args(argv)
    n = 4096 if args.smoke else args.tokens
    if args.url:
        return run(args.url, n)
    with pion_server("--appendonly", "no") as url:
        return run(url, n)


if __name__ == "__main__":
    sys.exit(main())
