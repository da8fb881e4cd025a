"""Show the prompt cache at work: cold vs warm time to first token, across processes and a crash.

``pion demo [--model ID_OR_PATH] [--runtime hf|mlx] [--prefix-tokens 2048] [--url URL]`` starts
its own ``pion-server`` on a temporary data directory (or uses ``--url``), then measures, on the
same prompt (a long prefix plus a short question): a plain cold prefill; a warm hit in the same
process; a warm hit from a separate process; and a warm hit after the server was killed with
SIGKILL and restarted. It checks that the warm greedy continuation equals the cold one token for
token. With no ``--model`` it builds the built-in demo model (SmolLM2-135M's shape, random
weights: its text is meaningless, its timings are real). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

SUFFIX = " Question: what did the keeper write? Answer:"
BUILTIN_SUFFIX = " Summary:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="a local path or hub id (default: the built-in demo model, built locally)")
    parser.add_argument("--runtime", choices=("hf", "mlx"), default=None,
                        help="hf = transformers + torch, mlx = mlx-lm (default: hf if installed)")
    parser.add_argument("--prefix-tokens", type=int, default=2048, help="length of the cached prefix")
    parser.add_argument("--url", default=None, help="use this Pion server instead of starting one")
    parser.add_argument("--vquant", default="auto", help="codec of the stored K/V (default auto = exact)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per path (the median is shown)")
    parser.add_argument("--new-tokens", type=int, default=24, help="greedy tokens compared cold vs warm")
    parser.add_argument("--socket", action="store_true",
                        help="send the rows over the socket even to a server on this host (no local lane)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def default_runtime() -> str:
    import importlib.util

    return "hf" if importlib.util.find_spec("transformers") else "mlx"


# -- the server ------------------------------------------------------------------------------


class DemoServer:
    """``pion-server`` on a free port and a temporary data directory, killable with SIGKILL."""

    def __init__(self, datadir: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.datadir = datadir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"pion://127.0.0.1:{self.port}"

    def start(self) -> float:
        started = time.perf_counter()
        log = open(os.path.join(self.datadir, "server.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "pion.cli.server_main", "--port", str(self.port),
                                      "--dir", self.datadir], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pion-server exited with {self.proc.returncode} (log: {self.datadir}/server.log)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return (time.perf_counter() - started) * 1000
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("pion-server did not start listening")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# -- measuring -------------------------------------------------------------------------------


def prompt_parts(loaded, n_prefix: int) -> tuple[list[int], list[int]]:
    from pion.client.measure import filler_prompt

    builtin = hasattr(loaded.tokenizer, "pion_fingerprint")
    return filler_prompt(loaded, n_prefix), loaded.encode(BUILTIN_SUFFIX if builtin else SUFFIX, add_special=False)


def summarize(results: list[dict], cold_first: int) -> dict:
    """Median time; whether every run was a hit and gave the cold first token."""
    from pion.client.measure import median

    return {"ms": median([r["ms"] for r in results]), "all_hits": all(r["hit"] for r in results),
            "same_first": all(r["first"] == cold_first for r in results)}


def worker(spec: str) -> int:
    """The separate process: load the model and warm up, then one timed hit per line read from stdin."""
    from pion.client import PionPromptCache
    from pion.client.measure import load, serve_hits

    args = json.loads(spec)
    loaded = load(args["model"], args["runtime"], progress=lambda m: None)
    pc = PionPromptCache(loaded.model, url=args["url"], vquant=args["vquant"], tokenizer=loaded.tokenizer,
                         model_id=loaded.name, local_lane=False if args.get("socket") else "auto")
    serve_hits(pc, lambda _line: (args["prefix"], args["suffix"]))
    return 0


def separate_process(args, url: str, prefix, suffix):
    """A second Python process with its own copy of the model, answering hits on request."""
    from pion.client.measure import HitWorker

    spec = json.dumps({"model": args.model, "runtime": args.runtime, "url": url, "vquant": args.vquant,
                       "socket": args.socket, "prefix": prefix, "suffix": suffix})
    return HitWorker([sys.executable, "-m", "pion.cli.demo", "--worker", spec], "the separate process")


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return worker(args.worker)
    args.runtime = args.runtime or default_runtime()
    with tempfile.TemporaryDirectory(prefix="pion-demo-") as datadir:
        server = None if args.url else DemoServer(datadir)
        try:
            if server is not None:
                progress(f"starting pion-server on port {server.port} (data: {datadir})")
                server.start()
            return measure_all(args, server, args.url or server.url)
        finally:
            if server is not None:
                server.stop()


def interleaved_runs(args, pc, other, prefix, suffix) -> tuple[dict, object]:
    """Per run: cold, warm here, warm in the other process, back to back (load drift hits all alike)."""
    from pion.client.measure import cold_ttft, settle, timed_hit

    results: dict[str, list] = {"cold": [], "same": [], "process": []}
    for i in range(args.runs):
        progress(f"run {i + 1}/{args.runs}: cold prefill of {len(prefix) + len(suffix)} tokens, "
                 "then warm in this process, then warm in the separate process")
        settle()
        ms, logits, cold_cache = cold_ttft(pc.adapter, prefix + suffix)
        results["cold"].append({"ms": ms, "hit": True, "first": int(logits.argmax()), "logits": logits})
        settle()
        results["same"].append(timed_hit(pc, prefix, suffix))
        settle()
        results["process"].append(other.hit())
    return results, cold_cache


def measure_all(args, server: DemoServer | None, url: str) -> int:
    from pion.client import PionPromptCache
    from pion.client.measure import greedy, load, settle, timed_hit, warm_ttft

    progress(f"loading {'the built-in demo model' if args.model is None else args.model} ({args.runtime})")
    loaded = load(args.model, args.runtime, progress)
    prefix, suffix = prompt_parts(loaded, args.prefix_tokens)
    pc = PionPromptCache(loaded.model, url=url, vquant=args.vquant, tokenizer=loaded.tokenizer, model_id=loaded.name,
                         local_lane=False if args.socket else "auto")
    pc.client.kv_drop(pc.namespace(prefix))  # a clean start even on a shared --url server
    progress("storing the prefix in Pion (one miss: prefill + store)")
    pc.get_or_prefill(prefix)
    progress("starting the separate process (python + model load, outside the clock)")
    other = separate_process(args, url, prefix, suffix)
    try:
        results, cold_cache = interleaved_runs(args, pc, other, prefix, suffix)
    finally:
        other.close()
    cold_logits = results["cold"][-1].pop("logits")
    cold_first = int(cold_logits.argmax())
    rows = {key: summarize(values, cold_first) for key, values in results.items()}
    cold_tokens = greedy(pc.adapter, cold_cache, cold_logits, args.new_tokens)
    _, warm_logits, warm_cache, _ = warm_ttft(pc, prefix, suffix)
    warm_tokens = greedy(pc.adapter, warm_cache, warm_logits, args.new_tokens)
    if server is not None:
        progress("killing pion-server with SIGKILL and restarting it on the same data directory")
        server.kill9()
        rows["restart_ms"] = server.start()
        crash = []
        for i in range(args.runs):
            progress(f"after kill -9: run {i + 1}/{args.runs}")
            settle()
            crash.append(timed_hit(pc, prefix, suffix))
        rows["crash"] = summarize(crash, cold_first)
    print_report(args, loaded, pc, prefix, suffix, rows, cold_logits, warm_logits, cold_tokens, warm_tokens)
    ok = all(r["all_hits"] and r["same_first"] for r in rows.values() if isinstance(r, dict))
    return 0 if ok and cold_tokens == warm_tokens else 1


def print_report(args, loaded, pc, prefix, suffix, rows, cold_logits, warm_logits, cold_tokens, warm_tokens) -> None:
    cold = rows["cold"]["ms"]
    codec = ",".join(sorted(set(pc.schema["k"]) | set(pc.schema["v"])))
    print()
    print(f"Pion demo: {loaded.name} ({args.runtime}, K/V {pc.adapter.layout.dtype}), "
          f"{len(prefix):,}-token prefix + {len(suffix)}-token question, codec {args.vquant} ({codec})")
    print(f"{'path':<42}{'TTFT (median of ' + str(args.runs) + ')':>22}{'speed-up':>10}  hit")
    labels = [("cold", "cold: plain prefill, no cache"), ("same", "warm: same process"),
              ("process", "warm: separate process"), ("crash", "warm: after kill -9 + restart")]
    for key, label in labels:
        row = rows.get(key)
        if row is None:
            print(f"{label:<42}{'skipped (--url: the demo only kills a server it started)':>22}")
            continue
        hit = "-" if key == "cold" else ("yes" if row["all_hits"] else "NO")
        hit += "" if row["same_first"] else " (first token differs from cold!)"
        print(f"{label:<42}{row['ms']:>19,.1f} ms{cold / row['ms']:>9.1f}x  {hit}")
    same = sum(a == b for a, b in zip(cold_tokens, warm_tokens, strict=True))
    verdict = "identical" if cold_tokens == warm_tokens else f"DIFFERENT ({same}/{len(cold_tokens)} equal)"
    diff = float(abs(cold_logits - warm_logits).max())
    print(f"greedy continuation, warm vs cold: {verdict} ({len(cold_tokens)} tokens); "
          f"max |logit difference| {diff:.2e}")
    if "restart_ms" in rows:
        print(f"server restart after kill -9: {rows['restart_ms']:,.0f} ms; stored prefix: "
              f"{pc.stats()['bytes_fetched'] // max(1, pc.stats()['hits']) / 1e6:,.1f} MB fetched per hit")
    lane = ("local: the server's V.EXPORT file, mapped" if pc.local_lane
            else "socket: the rows over the connection")
    print(f"hits in this process: {pc.stats()['local_hits']} of {pc.stats()['hits']} through the local lane "
          f"(lane now {lane})")
    print(f"continuation text: {loaded.decode(warm_tokens)!r}")
    if args.model is None:
        print("(the built-in demo model has random weights: its text is meaningless; pass --model for a real one)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="pion demo")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
