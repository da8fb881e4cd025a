"""Cold vs warm time to first token on llama.cpp (llama-cpp-python), Pion against LlamaDiskCache.

``python benchmarks/bench_ttft.py --runtime llama`` runs this: the packaged SmolLM2-135M-Instruct
GGUF (``--model`` takes another GGUF path) on the CPU, over the same sweep of prompt lengths
(34, 268, 1,035, 2,049 tokens of document-style text). Paths, each once per run, back to back:

- cold: ``Llama.reset()`` then ``Llama.generate`` until the first token (a plain prefill);
- ram, same process: ``LlamaRAMCache`` (llama-cpp-python's in-process cache: the floor);
- disk, separate process: ``LlamaDiskCache`` on a directory the main process filled (the
  anchor a llama.cpp user already has for sharing states across processes and restarts);
- pion, same process / separate process: ``PionLlamaCache`` on a Pion server.

A warm run does what ``Llama.create_completion`` does before its first token: ``cache[prompt]``
(longest stored prefix), ``load_state``, then ``generate`` (which evaluates what the state does
not cover: here the last token) until the first token; the clock stops there. After the clock,
the state is stored back as ``create_completion`` does (``LlamaDiskCache`` pops what it returns).
Each stored state is keyed by the prompt plus its first answer token, so a warm lookup of the
prompt is a longest-prefix hit, as in real use. Every warm run must be a hit and give the cold
first token (greedy), else the script fails. Medians of ``--runs``; ``os.getloadavg()`` is printed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from pion.client import measure as M  # noqa: E402
from pion.client.demo_model import FILLER  # noqa: E402

PATHS = ("cold", "ram/same", "disk/cross", "pion/same", "pion/cross")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)


def new_llama(model: str | None, threads: int):
    from pion.client.adapters.llama_cpp import load_smollm2_gguf

    options = {"n_ctx": 4096, "n_threads": threads, "n_threads_batch": threads, "seed": 0, "verbose": False}
    if model is None:
        return load_smollm2_gguf(**options)
    import llama_cpp

    return llama_cpp.Llama(model, **options)


def prompts(llm, lengths) -> dict[int, list[int]]:
    ids = llm.tokenize(FILLER.encode())
    while len(ids) < max(lengths):
        ids += llm.tokenize(FILLER.encode(), add_bos=False)
    return {n: ids[:n] for n in lengths}


class HitCounting:
    """Wraps a llama cache to count the lookups that found a state (what create_completion loads)."""

    def __init__(self, cache) -> None:
        self.cache, self.hits = cache, 0

    def __getitem__(self, key):
        state = self.cache[key]
        self.hits += 1
        return state

    def __setitem__(self, key, value) -> None:
        self.cache[key] = value


def cold_ttft(llm, prompt: list[int]) -> dict:
    M.settle()
    llm.reset()
    started = time.perf_counter()
    first = next(iter(llm.generate(prompt, temp=0.0)))
    return {"ms": (time.perf_counter() - started) * 1000, "first": int(first), "hit": True}


def warm_ttft(llm, cache: HitCounting, prompt: list[int]) -> dict:
    """create_completion's steps up to the first token; then the state is stored back, off the clock."""
    M.settle()
    llm.reset()
    hits = cache.hits
    started = time.perf_counter()
    try:
        llm.load_state(cache[prompt])
    except KeyError:
        pass
    first = int(next(iter(llm.generate(prompt, temp=0.0))))
    ms = (time.perf_counter() - started) * 1000
    cache[prompt + [first]] = llm.save_state()
    return {"ms": ms, "first": first, "hit": cache.hits == hits + 1}


def make_cache(llm, kind: str, where: str) -> HitCounting:
    if kind == "ram":
        from llama_cpp.llama_cache import LlamaRAMCache

        return HitCounting(LlamaRAMCache(capacity_bytes=8 << 30))
    if kind == "disk":
        from llama_cpp.llama_cache import LlamaDiskCache

        return HitCounting(LlamaDiskCache(cache_dir=where, capacity_bytes=8 << 30))
    from pion.client.adapters.llama_cache import PionLlamaCache

    return HitCounting(PionLlamaCache(llm, url=where))


def worker(spec: str) -> int:
    """Separate process: its own Llama and cache; one timed warm run per line ``N`` on stdin."""
    args = json.loads(spec)
    llm = new_llama(args["model"], args["threads"])
    cache = make_cache(llm, args["kind"], args["where"])
    by_length = prompts(llm, args["lengths"])
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(warm_ttft(llm, cache, by_length[int(line)])), flush=True)
    return 0


def quiet_stderr():
    """LlamaDiskCache prints three lines per store to stderr; keep the workers' stderr for errors only."""
    return open(os.devnull, "w")


def bench(args) -> int:
    from tests.support.servers import ProcessServer

    with tempfile.TemporaryDirectory(prefix="bench-ttft-llama-") as tmp:
        server = None
        url = args.url
        if url is None:
            server = ProcessServer(Path(tmp) / "pion").start()
            url = f"pion://127.0.0.1:{server.port}"
        try:
            return measure(args, url, str(Path(tmp) / "diskcache"))
        finally:
            if server is not None:
                server.stop()


def measure(args, url: str, disk_dir: str) -> int:
    from pion.client.measure import HitWorker

    log(f"loading {args.model or 'the packaged SmolLM2-135M-Instruct GGUF'} in llama.cpp")
    llm = new_llama(args.model, args.threads)
    by_length = prompts(llm, args.lengths)
    caches = {"ram": make_cache(llm, "ram", ""), "disk": make_cache(llm, "disk", disk_dir),
              "pion": make_cache(llm, "pion", url)}
    log("filling every cache once per length (a cold completion's store, off the clock)")
    for prompt in by_length.values():
        cold = cold_ttft(llm, prompt)
        state = llm.save_state()
        for cache in caches.values():
            cache[prompt + [cold["first"]]] = state
    log("starting the separate processes (llama.cpp load outside the clock)")
    spec = {"model": args.model, "threads": args.threads, "lengths": list(args.lengths)}
    workers = {kind: HitWorker([sys.executable, __file__, "--worker",
                                json.dumps({**spec, "kind": kind, "where": where})],
                               f"the {kind} worker", cwd=ROOT, stderr=quiet_stderr())
               for kind, where in (("disk", disk_dir), ("pion", url))}
    rows = []
    try:
        for n, prompt in by_length.items():
            runs = []
            for i in range(args.runs):
                log(f"N={n}: run {i + 1}/{args.runs} (cold, ram, disk cross, pion same, pion cross)")
                runs.append({"cold": cold_ttft(llm, prompt), "ram/same": warm_ttft(llm, caches["ram"], prompt),
                             "disk/cross": workers["disk"].hit(str(n)),
                             "pion/same": warm_ttft(llm, caches["pion"], prompt),
                             "pion/cross": workers["pion"].hit(str(n))})
            rows.append({"n": n, **{p: summarize([r[p] for r in runs]) for p in PATHS}})
    finally:
        for w in workers.values():
            w.close()
    sizes = {n: len(caches["pion"].cache.adapter.pack(llm.save_state())) for n in list(by_length)[-1:]}
    return report(args, rows, sizes)


def summarize(results: list[dict]) -> dict:
    return {"ms": M.median([r["ms"] for r in results]), "hits": all(r["hit"] for r in results),
            "first": results[-1]["first"], "all_ms": [round(r["ms"], 2) for r in results]}


def report(args, rows: list[dict], sizes: dict) -> int:
    print(f"\n{'N':>6}" + "".join(f" {p:>18}" for p in PATHS))
    for row in rows:
        cold = row["cold"]["ms"]
        cells = [f"{row[p]['ms']:9.1f} {cold / row[p]['ms']:6.1f}x" for p in PATHS]
        print(f"{row['n']:>6}" + "".join(f" {c:>18}" for c in cells))
    print(f"load average: {os.getloadavg()}")
    problems = [f"N={row['n']} {p}: " + ("not a hit" if not row[p]["hits"] else
                                          f"first token {row[p]['first']} != cold {row['cold']['first']}")
                for row in rows for p in PATHS[1:]
                if not row[p]["hits"] or row[p]["first"] != row["cold"]["first"]]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = "ttft_llama" + ("_smoke" if args.smoke else "")
    (args.out_dir / f"{stem}.json").write_text(json.dumps(
        {"rows": rows, "runtime": "llama.cpp", "model": args.model or "SmolLM2-135M-Instruct.Q4_1.gguf",
         "runs": args.runs, "threads": args.threads, "loadavg": os.getloadavg(),
         "pion_blob_bytes_at_last_state": sizes}, indent=1))
    log(f"wrote {args.out_dir / stem}.json")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2]))
    raise SystemExit("run it as: python benchmarks/bench_ttft.py --runtime llama")
