"""TTFT measurement shared by ``pion demo`` and ``benchmarks/``: one method, written once.

The rules are the reference's corrected methodology (spec section 15.1): the model is loaded
and warmed (one untimed forward) before any clock starts; the cold side is a plain runtime
prefill of exactly the same token ids (one BOS, no second one), producing logits for the last
position only; a warm run counts only if it really was a hit and its first token equals the
cold one. TTFT ends when the first generated token id is known.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class LoadedModel:
    model: object
    adapter: object
    tokenizer: object
    name: str
    runtime: str

    def encode(self, text: str, add_special: bool) -> list[int]:
        tok = self.tokenizer
        if hasattr(tok, "pion_fingerprint"):
            return tok.encode(text, add_bos=add_special)
        return list(tok.encode(text, add_special_tokens=add_special))

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids)


def load(model_arg: str | None, runtime: str, progress=print, device: str | None = None) -> LoadedModel:
    """The built-in random-weight model (``model_arg`` None or ``builtin:random``), another built-in
    shape (``builtin:<shape>``), the packaged real SmolLM2-135M-Instruct (``builtin:smollm2``,
    ``pion.client.real_model``), a directory written by ``demo_model.write_model_dir``, or any
    other model (hub id or path), in the asked runtime; ``device`` (hf only, e.g. ``"cuda"``)
    moves the model there before the warm-up."""
    from pion.client import demo_model, real_model
    from pion.client.adapters import adapter_for

    if model_arg == "builtin:random":
        model_arg = None
    if model_arg == real_model.SMOLLM2_ARG:
        model, tokenizer = load_real(runtime, progress)
        name = real_model.SMOLLM2_ID
    elif model_arg is None or model_arg.startswith("builtin:") or demo_model.is_demo_format(model_arg):
        if model_arg is None or model_arg.startswith("builtin:"):
            shape = "smollm2-135m-shape" if model_arg is None else model_arg.split(":", 1)[1]
            if shape not in demo_model.SHAPES:
                choices = ", ".join(f"builtin:{n}" for n in ("random", "smollm2", *demo_model.SHAPES))
                raise ValueError(f"unknown built-in model {model_arg!r}; choose one of {choices}")
            path, name = demo_model.ensure_demo_model(progress, shape), f"pion-demo/{shape}"
        else:
            path, name = model_arg, model_arg
        if runtime == "mlx":
            from pion.client.adapters.mlx_lm import load_demo
        else:
            from pion.client.adapters.transformers import load_demo
        model, tokenizer = load_demo(path), demo_model.ByteTokenizer()
    elif runtime == "mlx":
        from pion.client.adapters.mlx_lm import load_model

        (model, tokenizer), name = load_model(model_arg), model_arg
    else:
        from pion.client.adapters.transformers import load_model

        (model, tokenizer), name = load_model(model_arg), model_arg
    if device is not None:
        if runtime != "hf":
            raise ValueError("--device applies to the hf runtime only (mlx picks its own device)")
        model = model.to(device)
    adapter = adapter_for(model, model_id=name)
    warm = adapter.new_cache()  # warm-up, untimed: a prefill and a decode step (kernel set-up)
    adapter.forward([0, 0, 0, 0], warm)
    adapter.forward([0], warm)
    return LoadedModel(model, adapter, tokenizer, name, runtime)


def load_real(runtime: str, progress):
    """The packaged SmolLM2-135M-Instruct: transformers reads the fp32 conversion of the GGUF;
    mlx-lm (which has no GGUF reader, only a writer) loads that same converted directory."""
    from pion.client import real_model

    if runtime == "mlx":
        from pion.client.adapters.mlx_lm import load_model

        return load_model(str(real_model.ensure_converted(progress)))
    return real_model.load_smollm2(progress=progress)


def filler_prompt(loaded: LoadedModel, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` ids of document-style text, with the tokenizer's own single BOS."""
    from pion.client.demo_model import FILLER, demo_prompt

    if hasattr(loaded.tokenizer, "pion_fingerprint"):
        return demo_prompt(n_tokens)
    ids = loaded.encode(FILLER, add_special=True)
    while len(ids) < n_tokens:
        ids += loaded.encode(FILLER, add_special=False)
    return ids[:n_tokens]


def cold_ttft(adapter, token_ids) -> tuple[float, np.ndarray, object]:
    """``(ms, logits, cache)``: a plain prefill of ``token_ids`` in a fresh cache."""
    started = time.perf_counter()
    cache = adapter.new_cache()
    logits = adapter.forward(token_ids, cache)
    int(np.argmax(logits))
    return (time.perf_counter() - started) * 1000, logits, cache


def warm_ttft(prompt_cache, prefix_ids, suffix_ids) -> tuple[float, np.ndarray, object, bool]:
    """``(ms, logits, cache, was_hit)``: the prefix from Pion, then the suffix run on it
    (``PionPromptCache.forward``: on the socket lane a hit streams into the suffix's forward)."""
    hits = prompt_cache.stats()["hits"]
    started = time.perf_counter()
    cache, logits = prompt_cache.forward(prefix_ids, suffix_ids)
    int(np.argmax(logits))
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, logits, cache, prompt_cache.stats()["hits"] == hits + 1


def greedy(adapter, cache, logits: np.ndarray, steps: int, stop=()) -> list[int]:
    """``steps`` greedy tokens continuing from ``logits`` (the cache is extended in place); a
    token in ``stop`` (end of turn) ends the list early, itself included."""
    out = [int(np.argmax(logits))]
    while len(out) < steps and out[-1] not in stop:
        logits = adapter.forward([out[-1]], cache)
        out.append(int(np.argmax(logits)))
    return out


def settle(seconds: float = 0.25) -> None:
    """Let the runtime's idle worker threads stop spinning before the next timed path.

    After a forward, OpenMP threads busy-wait for a while; on a small machine they would steal
    the CPU the Pion server (or the next process) needs, and the next measurement would pay
    for the previous one. A real request does not arrive in that instant.
    """
    time.sleep(seconds)


def median(values) -> float:
    return float(statistics.median(values)) if values else float("nan")


def timed_hit(prompt_cache, prefix_ids, suffix_ids) -> dict:
    """One warm run as a JSON-able row: ``ms``, whether it was a ``hit``, the ``first`` token, and
    this process's CPU time (``cpu_ms``, user + system) and minor page faults (``faults``) during
    it: on a loaded machine they say where the time went better than the wall clock does."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF)
    ms, logits, _, hit = warm_ttft(prompt_cache, prefix_ids, suffix_ids)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return {"ms": ms, "hit": hit, "first": int(np.argmax(logits)), "cpu_ms": round(cpu, 2),
            "faults": after.ru_minflt - before.ru_minflt}


def serve_hits(prompt_cache, prompt_for) -> None:
    """The separate process's side: say ``ready``, then one timed hit per stdin line, a JSON row
    each on stdout; ``prompt_for(line)`` gives ``(prefix_ids, suffix_ids)``."""
    import json
    import sys

    prompt_cache.client.ping()  # connected, as a serving process is
    print("ready", flush=True)
    for line in sys.stdin:
        row = timed_hit(prompt_cache, *prompt_for(line.strip()))
        stats = prompt_cache.stats()  # the fingerprint's cost and what the first hits waited of it
        row.update(fingerprint_ms=stats["fingerprint_ms"], fingerprint_cpu_ms=stats.get("fingerprint_cpu_ms", 0.0),
                   fingerprint_wait_ms=stats["fingerprint_wait_ms"],
                   warmed_bytes=getattr(prompt_cache, "warmed_bytes", 0))
        print(json.dumps(row), flush=True)


class HitWorker:
    """A separate Python process (``argv``) with its own model, answering timed hits on request:
    the model loads outside any clock, and the process stays up between runs."""

    def __init__(self, argv: list[str], name: str, **popen) -> None:
        import subprocess

        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **popen)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name} did not start (exit {self.proc.wait()})")

    def hit(self, line: str = "go") -> dict:
        import json

        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"{self.name} died (exit {self.proc.wait()})")
        return json.loads(reply)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)
