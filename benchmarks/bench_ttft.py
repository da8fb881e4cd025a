"""Cold vs warm time to first token, per prefix length and codec, against two baselines.

For each prompt of N tokens (default 34, 268, 1,035, 2,049: the reference's sweep) the warm
paths restore the first N-1 tokens and run the last one; the cold path prefills all N. Paths:

- cold: a plain runtime prefill of the same N token ids (one BOS; the model loaded and warmed);
- floor: an in-process copy of the prefix cache (``copy.deepcopy``), then the last token;
- redis: what a user would hand-roll: the same K/V as fp16 blobs in Debian's ``redis-server``,
  one GET per layer and side (pipelined), rebuilt into the runtime's cache;
- pion (same process) and pion (separate process), per codec: ``PionPromptCache.get_or_prefill``;
- first hit in a fresh process (``first_hits``): a worker that starts and serves its first request
  as a hit, with ``warm_up_tokens``, with the defaults on a host new to the model, and with the
  defaults as the next worker of the same model, against the steady warm hit (goal: <= 1.15x);
  and the next worker's fingerprint time against the first one's (goal: <= 10%).
  A codec name alone uses the client's default lane (here, on one host: the local lane, which
  maps the server's ``V.EXPORT`` file); ``<codec>@socket`` forces the rows through the socket
  (``local_lane=False``), what a client on another host gets, streamed layer by layer into the
  suffix's forward; ``<codec>@whole`` is the socket lane receiving every row first.

Methodology (spec 15.1): medians of ``--runs`` after a warm-up forward; model load outside the
clock; within a run every path goes once, back to back (cold, floor, redis, then Pion same and
separate process per codec; the separate processes stay up and answer on request), so load
changes on a shared machine reach every path alike; every Pion run must be a hit, and the
lossless codec must give the cold first token, else the script fails. Each timed path starts
after a 0.25 s pause (``measure.settle``) so the previous path's spinning OpenMP threads do not
steal the CPU from the next one. Prints a table with ratios and writes JSON and a PNG plot (matplotlib).

    python benchmarks/bench_ttft.py                       # demo model, hf runtime, default codecs
    python benchmarks/bench_ttft.py --runtime mlx --codecs auto,fp16
    python benchmarks/bench_ttft.py --smoke               # CI-sized: tiny model, two lengths
    python benchmarks/bench_ttft.py --model builtin:smollm2   # the real SmolLM2-135M-Instruct
    python benchmarks/bench_ttft.py --runtime llama       # llama.cpp: Pion vs LlamaDiskCache
    python benchmarks/bench_ttft.py --model builtin:smollm2 --first-hit-only   # fresh workers only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from pion.client import PionPromptCache  # noqa: E402
from pion.client import measure as M  # noqa: E402

LENGTHS = (34, 268, 1035, 2049)
CODECS = ("auto", "auto@socket", "bf16", "fp16", "fp16@socket", "int8", "turbo4")
TINY = {"vocab_size": 259, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- baselines -------------------------------------------------------------------------------


def floor_ttft(adapter, prefix_cache, last: list[int]) -> tuple[float, int]:
    started = time.perf_counter()
    cache = adapter.copy_cache(prefix_cache)
    token = int(np.argmax(adapter.forward(last, cache)))
    return (time.perf_counter() - started) * 1000, token


def redis_store(r, adapter, prefix_cache, tag: str) -> None:
    kv, _ = adapter.export(prefix_cache)
    pipe = r.pipeline(transaction=False)
    for layer, (k, v) in enumerate(kv):
        pipe.set(f"{tag}:k:{layer}", k.astype(np.float16).tobytes())
        pipe.set(f"{tag}:v:{layer}", v.astype(np.float16).tobytes())
    pipe.execute()


def redis_ttft(r, adapter, tag: str, n: int, last: list[int]) -> tuple[float, int]:
    """GET every layer's K and V (pipelined), widen fp16 to the model dtype, build, run the last token."""
    started = time.perf_counter()
    layout = adapter.layout
    pipe = r.pipeline(transaction=False)
    for layer in range(len(layout.attn)):
        pipe.get(f"{tag}:k:{layer}")
        pipe.get(f"{tag}:v:{layer}")
    blobs = pipe.execute()
    kv = []
    for layer in range(len(layout.attn)):
        k = np.frombuffer(blobs[2 * layer], np.float16).reshape(n, -1)
        v = np.frombuffer(blobs[2 * layer + 1], np.float16).reshape(n, -1)
        kv.append((k, v))
    cache = adapter.build(kv, {})
    token = int(np.argmax(adapter.forward(last, cache)))
    return (time.perf_counter() - started) * 1000, token


def start_redis(workdir: Path):
    from tests.support.servers import RedisServer

    if not RedisServer.available():
        log("redis-server not installed: skipping the plain-Redis baseline")
        return None
    return RedisServer(workdir).start()


# -- Pion paths ------------------------------------------------------------------------------


def prompt_cache(loaded, url: str, spec: str, warm_up_tokens: int = 0) -> PionPromptCache:
    """The prompt cache a codec label names: ``<codec>`` (the default lane), ``<codec>@socket``
    (the socket lane, streamed layer by layer into the suffix's forward) or ``<codec>@whole``
    (the socket lane, every row received before the forward)."""
    codec, _, lane = spec.partition("@")
    if lane not in ("", "socket", "whole"):
        raise SystemExit(f"unknown lane {lane!r} in {spec!r} (want <codec>, <codec>@socket or <codec>@whole)")
    return PionPromptCache(loaded.model, url=url, vquant=codec, tokenizer=loaded.tokenizer, model_id=loaded.name,
                           local_lane="auto" if not lane else False, warm_up_tokens=warm_up_tokens,
                           stream=lane != "whole")


def worker(spec: str) -> int:
    """Separate process: load and warm the model, then answer one timed hit per line ``N`` on stdin."""
    args = json.loads(spec)
    loaded = M.load(args["model"], args["runtime"], progress=lambda m: None, device=args["device"])
    prompts = {n: M.filler_prompt(loaded, n) for n in args["lengths"]}
    M.serve_hits(prompt_cache(loaded, args["url"], args["codec"], args.get("warm_up", 0)),
                 lambda line: (prompts[int(line)][:-1], prompts[int(line)][-1:]))
    return 0


def cross_process(args, codec: str) -> M.HitWorker:
    """A worker process per codec, kept alive so its runs interleave with the other paths'."""
    spec = json.dumps({"model": args.model, "runtime": args.runtime, "url": args.url, "codec": codec,
                       "device": args.device, "lengths": list(args.lengths)})
    return M.HitWorker([sys.executable, __file__, "--worker", spec], f"the {codec} worker", cwd=ROOT)


# -- first hit in a fresh process ------------------------------------------------------------------


def fresh_worker(args, n: int, warm_up: int, env: dict | None = None) -> M.HitWorker:
    spec = json.dumps({"model": args.model, "runtime": args.runtime, "url": args.url, "codec": "auto",
                       "device": args.device, "lengths": [n], "warm_up": warm_up})
    return M.HitWorker([sys.executable, __file__, "--worker", spec], "a fresh worker", cwd=ROOT,
                       env={**os.environ, **(env or {})})


def first_hits(args, n: int, workdir: Path) -> dict:
    """A worker that starts and serves its first request as a hit, against the steady warm hit.

    Per run, fresh processes each load and warm the model outside the clock (as a serving
    process does before it accepts requests), build their prompt cache and say they are ready;
    each one's first hit is timed:

    - ``warm_up``: with ``warm_up_tokens=n`` (its prompt cache prefaults the first hit's memory);
    - ``defaults``: no argument, on a host that never ran this model (its own empty cache dir):
      it hashes every weight in the background and has no prefix size to prefault;
    - ``restart``: no argument, the next worker of the same model (the same cache dir, now
      holding the first one's fingerprint record and prefix size).

    The warm-up and defaults workers then serve two more hits each: the steady warm hit.
    """
    rows: dict[str, list] = {"first": [], "first_without_warm_up": [], "restart": [], "steady": []}
    for run in range(args.first_hit_runs):
        log(f"N={n}: first hit in a fresh process, run {run + 1}/{args.first_hit_runs}")
        cache_dir = {"XDG_CACHE_HOME": str(workdir / f"xdg-first-{run}")}  # a host new to this model
        for label, warm_up, env, steady in (("first", n, None, 2), ("first_without_warm_up", 0, cache_dir, 2),
                                            ("restart", 0, cache_dir, 0)):
            fresh = fresh_worker(args, n, warm_up, env)
            try:
                M.settle()
                rows[label].append(fresh.hit(str(n)))
                for _ in range(steady):
                    M.settle()
                    rows["steady"].append(fresh.hit(str(n)))
            finally:
                fresh.close()
    first, cold_start, restart, steady = rows["first"], rows["first_without_warm_up"], rows["restart"], rows["steady"]
    row = {"n": n, "runs": args.first_hit_runs, "first_ms": M.median([x["ms"] for x in first]),
           "first_without_warm_up_ms": M.median([x["ms"] for x in cold_start]),
           "restart_ms": M.median([x["ms"] for x in restart]),
           "steady_ms": M.median([x["ms"] for x in steady]),
           "hits": all(x["hit"] for x in first + cold_start + restart + steady),
           **{f"all_{key}_ms": [round(x["ms"], 2) for x in value] for key, value in rows.items()}}
    row["ratio"] = row["first_ms"] / row["steady_ms"]
    row["ratio_without_warm_up"] = row["first_without_warm_up_ms"] / row["steady_ms"]
    row["ratio_restart"] = row["restart_ms"] / row["steady_ms"]
    for key, value in rows.items():
        row[f"{key}_cpu_ms"] = M.median([x.get("cpu_ms", float("nan")) for x in value])
        row[f"{key}_faults"] = M.median([x.get("faults", float("nan")) for x in value])
        row[f"{key}_fingerprint_ms"] = M.median([x.get("fingerprint_ms", float("nan")) for x in value])
        row[f"{key}_fingerprint_cpu_ms"] = M.median([x.get("fingerprint_cpu_ms", float("nan")) for x in value])
        row[f"{key}_fingerprint_wait_ms"] = M.median([x.get("fingerprint_wait_ms", float("nan")) for x in value])
        row[f"{key}_warmed_bytes"] = M.median([x.get("warmed_bytes", 0) for x in value])
    row["fingerprint_second_vs_first"] = row["restart_fingerprint_ms"] / row["first_without_warm_up_fingerprint_ms"]
    row["fingerprint_cpu_second_vs_first"] = (row["restart_fingerprint_cpu_ms"]
                                              / row["first_without_warm_up_fingerprint_cpu_ms"])
    return row


def print_first_hit(row: dict) -> None:
    print(f"\nfirst hit in a fresh process at N={row['n']} (auto, medians of {row['runs']} runs), "
          f"against the steady {row['steady_ms']:.1f} ms:")
    for label, key, ratio in (("warm_up_tokens=N", "first", "ratio"),
                              ("defaults, host new to the model", "first_without_warm_up", "ratio_without_warm_up"),
                              ("defaults, the next worker", "restart", "ratio_restart")):
        print(f"  {label:>32}: {row[key + '_ms']:7.1f} ms = {row[ratio]:.2f}x "
              f"(goal <= 1.15x: {'met' if row[ratio] <= 1.15 else 'MISSED'}); fingerprint "
              f"{row[key + '_fingerprint_ms']:.1f} ms, waited {row[key + '_fingerprint_wait_ms']:.1f} ms; "
              f"prefaulted {row[key + '_warmed_bytes'] / 2**20:.0f} MiB; CPU {row[key + '_cpu_ms']:.1f} ms, "
              f"{row[key + '_faults']:.0f} minor faults")
    print(f"  steady: CPU {row['steady_cpu_ms']:.1f} ms, {row['steady_faults']:.0f} minor faults")
    print(f"  the next worker's fingerprint: {row['restart_fingerprint_ms']:.1f} ms against the first one's "
          f"{row['first_without_warm_up_fingerprint_ms']:.1f} ms = {row['fingerprint_second_vs_first']:.1%} "
          f"(goal <= 10%: {'met' if row['fingerprint_second_vs_first'] <= 0.10 else 'MISSED'}); CPU time of the "
          f"thread {row['restart_fingerprint_cpu_ms']:.1f} against {row['first_without_warm_up_fingerprint_cpu_ms']:.1f}"
          f" ms = {row['fingerprint_cpu_second_vs_first']:.1%}")


# -- one length --------------------------------------------------------------------------------


def one_run(args, loaded, prompt, prefix_cache, caches: dict, workers: dict, r) -> dict:
    """Every path once, back to back, so load changes on a shared machine hit all of them alike."""
    adapter, n = loaded.adapter, len(prompt)
    prefix, last = prompt[:-1], prompt[-1:]
    M.settle()
    ms, logits, _ = M.cold_ttft(adapter, prompt)
    out = {"cold": {"ms": ms, "first": int(np.argmax(logits)), "hit": True}}
    M.settle()
    ms, first = floor_ttft(adapter, prefix_cache, last)
    out["floor"] = {"ms": ms, "first": first, "hit": True}
    if r is not None:
        M.settle()
        ms, first = redis_ttft(r, adapter, f"bench:{n}", n - 1, last)
        out["redis"] = {"ms": ms, "first": first, "hit": True}
    for codec, pc in caches.items():
        M.settle()
        out[f"same/{codec}"] = M.timed_hit(pc, prefix, last)
        M.settle()
        out[f"cross/{codec}"] = workers[codec].hit(str(n))
    return out


def measure_length(args, loaded, n: int, caches: dict, workers: dict, r) -> dict:
    prompt = M.filler_prompt(loaded, n)
    prefix_cache = loaded.adapter.prefill(prompt[:-1])
    if r is not None:
        redis_store(r, loaded.adapter, prefix_cache, f"bench:{n}")
    for codec, pc in caches.items():
        if not pc.put(prompt[:-1], prefix_cache):
            raise RuntimeError(f"Pion failed to store the prefix with codec {codec}")
    runs = []
    for i in range(args.runs):
        log(f"N={n}: run {i + 1}/{args.runs} (cold, floor, redis, Pion same/cross process per codec)")
        runs.append(one_run(args, loaded, prompt, prefix_cache, caches, workers, r))
    row = {"n": n}
    for path in runs[0]:
        results = [run[path] for run in runs]
        row[path] = {"ms": M.median([x["ms"] for x in results]), "hits": all(x["hit"] for x in results),
                     "first": results[-1]["first"], "all_ms": [round(x["ms"], 2) for x in results]}
    return row


def check(rows: list[dict], codecs: list[str]) -> list[str]:
    """The methodology's refusals: a miss, or the lossless codec's first token differing from cold."""
    problems = []
    for row in rows:
        for label in [f"{where}/{c}" for c in codecs for where in ("same", "cross")]:
            result = row[label]
            if not result["hits"]:
                problems.append(f"N={row['n']} {label}: not a hit")
            if label.split("/")[1].partition("@")[0] == "auto" and result["first"] != row["cold"]["first"]:
                problems.append(f"N={row['n']} {label}: first token {result['first']} != cold {row['cold']['first']}")
    return problems


# -- output ----------------------------------------------------------------------------------


def print_table(rows: list[dict], codecs: list[str]) -> None:
    print(f"\n{'N':>6} {'cold ms':>9} {'floor ms':>9} {'redis ms':>9}", end="")
    for codec in codecs:
        print(f" {codec + ' same':>13} {codec + ' cross':>13}", end="")
    print()
    for row in rows:
        cold = row["cold"]["ms"]
        redis = f"{row['redis']['ms']:9.1f}" if "redis" in row else f"{'-':>9}"
        print(f"{row['n']:>6} {cold:9.1f} {row['floor']['ms']:9.1f} {redis}", end="")
        for codec in codecs:
            same, other = row[f"same/{codec}"]["ms"], row[f"cross/{codec}"]["ms"]
            print(f" {same:7.1f} {cold / same:4.0f}x {other:7.1f} {cold / other:4.0f}x", end="")
        print()
    last = rows[-1]
    print(f"\nratios at N={last['n']}:")
    for codec in codecs:
        other, same = last[f"cross/{codec}"]["ms"], last[f"same/{codec}"]["ms"]
        vs_redis = f", plain Redis/cross {last['redis']['ms'] / other:.2f}" if "redis" in last else ""
        print(f"  {codec:>7}: cold/cross-process {last['cold']['ms'] / other:.1f}x, cross/same-process "
              f"{other / same:.2f}{vs_redis}, cross/floor {other / last['floor']['ms']:.2f}")


def plot(rows: list[dict], codecs: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [row["n"] for row in rows]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    ax.plot(n, [r["cold"]["ms"] for r in rows], "k-o", label="cold prefill")
    ax.plot(n, [r["floor"]["ms"] for r in rows], "k:", label="in-process copy (floor)")
    if "redis" in rows[0]:
        ax.plot(n, [r["redis"]["ms"] for r in rows], "r--s", label="plain redis-server, fp16 GETs")
    for codec in codecs:
        line = ax.plot(n, [r[f"same/{codec}"]["ms"] for r in rows], "-^", label=f"Pion {codec}, same process")[0]
        ax.plot(n, [r[f"cross/{codec}"]["ms"] for r in rows], "--v", color=line.get_color(),
                label=f"Pion {codec}, separate process")
    ax.set(xlabel="prompt tokens (prefix = all but the last)", ylabel="time to first token (ms)", title=title)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model (default: the built-in random-weight demo model; "
                   "builtin:smollm2 = the real SmolLM2-135M-Instruct; with --runtime llama: a GGUF path)")
    p.add_argument("--runtime", choices=("hf", "mlx", "llama"), default="hf",
                   help="llama = llama.cpp on the packaged GGUF, against LlamaDiskCache (bench_ttft_llama.py)")
    p.add_argument("--threads", type=int, default=2, help="llama only: llama.cpp threads")
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=list(LENGTHS))
    p.add_argument("--codecs", type=lambda s: s.split(","), default=list(CODECS))
    p.add_argument("--runs", type=int, default=None, help="medians of N runs (default 5; --smoke: 1)")
    p.add_argument("--device", default=None, help="hf only: run the model there (e.g. cuda); default: CPU")
    p.add_argument("--url", default=None, help="an existing Pion (default: start one)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--smoke", action="store_true", help="tiny model, two lengths, one run, two codecs")
    p.add_argument("--first-hit-runs", type=int, default=3,
                   help="runs of the first-hit-in-a-fresh-process path, at the largest length (0: skip)")
    p.add_argument("--first-hit-only", action="store_true",
                   help="only the first-hit rows (the prefix stored once, at the largest length): the fresh "
                        "workers' first hits and fingerprints, e.g. fingerprint_second_vs_first")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.lengths, args.codecs, args.first_hit_runs = [34, 68], ["auto", "auto@socket", "int8"], 1
    args.runs = args.runs or (1 if args.smoke else 5)
    return args


def smoke_model(workdir: Path) -> str:
    from pion.client.demo_model import DEMO_CONFIG, write_model_dir

    return str(write_model_dir(workdir / "tiny", {**DEMO_CONFIG, **TINY}, 0))


def run(args) -> int:
    if args.runtime == "llama":
        import bench_ttft_llama

        return bench_ttft_llama.bench(args)
    with tempfile.TemporaryDirectory(prefix="bench-ttft-") as tmp:
        workdir = Path(tmp)
        args.workdir = workdir
        # the bench's own cache dir (pion.client.worker_state): no record from earlier runs or users
        os.environ["XDG_CACHE_HOME"] = str(workdir / "xdg")
        if args.smoke:
            args.model = smoke_model(workdir)
        server = None
        if args.url is None:
            from tests.support.servers import ProcessServer

            server = ProcessServer(workdir / "pion").start()
            args.url = f"pion://127.0.0.1:{server.port}"
        redis_srv = start_redis(workdir / "redis")
        try:
            return bench(args, redis_srv)
        finally:
            if redis_srv is not None:
                redis_srv.stop()
            if server is not None:
                server.stop()


def bench(args, redis_srv) -> int:
    import redis

    log(f"loading {args.model or 'the built-in demo model'} ({args.runtime})")
    loaded = M.load(args.model, args.runtime, log, device=args.device)
    if args.first_hit_only:
        return first_hit_only(args, loaded)
    caches = {c: prompt_cache(loaded, args.url, c) for c in args.codecs}
    for pc in caches.values():
        pc.client.kv_drop(*[pc.namespace(M.filler_prompt(loaded, n)[:-1]) for n in args.lengths])
    r = redis.Redis(port=redis_srv.port) if redis_srv is not None else None
    log("starting one separate process per codec (model load outside the clock)")
    workers = {c: cross_process(args, c) for c in args.codecs}
    try:
        rows = [measure_length(args, loaded, n, caches, workers, r) for n in args.lengths]
    finally:
        for w in workers.values():
            w.close()
    first = first_hits(args, max(args.lengths), args.workdir) if args.first_hit_runs else None
    print_table(rows, args.codecs)
    if first is not None:
        print_first_hit(first)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = (f"ttft_{args.runtime}" + ("_smollm2" if args.model == "builtin:smollm2" else "")
            + (f"_{args.device}" if args.device else "") + ("_smoke" if args.smoke else ""))
    meta = {"model": loaded.name, "runtime": args.runtime, "device": args.device or "cpu", "runs": args.runs,
            "loadavg": os.getloadavg(), "first_hit": first}
    (args.out_dir / f"{stem}.json").write_text(json.dumps({"rows": rows, **meta}, indent=1))
    plot(rows, args.codecs, args.out_dir / f"{stem}.png", f"TTFT, {loaded.name} ({args.runtime})")
    log(f"wrote {args.out_dir / stem}.json and .png")
    problems = check(rows, args.codecs) + ([] if first is None or first["hits"] else ["first hit: not a hit"])
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


def first_hit_only(args, loaded) -> int:
    """``--first-hit-only``: the prefix of the largest length stored once, then ``first_hits``."""
    n = max(args.lengths)
    prompt = M.filler_prompt(loaded, n)
    pc = prompt_cache(loaded, args.url, "auto")
    pc.client.kv_drop(pc.namespace(prompt[:-1]))
    if not pc.put(prompt[:-1], loaded.adapter.prefill(prompt[:-1])):
        raise RuntimeError("Pion failed to store the prefix")
    first = first_hits(args, n, args.workdir)
    print_first_hit(first)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = (f"ttft_{args.runtime}" + ("_smollm2" if args.model == "builtin:smollm2" else "")
            + (f"_{args.device}" if args.device else "") + "_first_hit_only")
    meta = {"model": loaded.name, "runtime": args.runtime, "device": args.device or "cpu",
            "loadavg": os.getloadavg(), "first_hit": first}
    (args.out_dir / f"{stem}.json").write_text(json.dumps(meta, indent=1))
    log(f"wrote {args.out_dir / stem}.json")
    if not first["hits"]:
        print("FAIL: first hit: not a hit")
    return 0 if first["hits"] else 1


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    sys.exit(worker(arguments.worker) if arguments.worker else run(arguments))
