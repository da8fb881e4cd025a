"""What the model fingerprint costs: xxh3-128 over every weight, once per model object.

For each shape (the demo model, SmolLM2-135M's architecture, in fp32 as the demo runs it; and
Llama-3.2-1B's shape in bf16 and fp32), the model is built on the meta device, given memory and
filled (so every page is resident, as after a real load), then timed: the first
``TransformersAdapter.weights_hash()`` (every byte hashed), a second one (the cached digest: only
the identity and version of each parameter are checked), and ``xxh3_128`` alone over one
contiguous buffer of the same size (the memory-speed ceiling). Prints one JSON line per shape
with the load average.

    python benchmarks/bench_fingerprint.py
    python benchmarks/bench_fingerprint.py --shapes demo --repeat 1     # CI-sized
    python benchmarks/bench_fingerprint.py --reuse --repeat 15          # the next worker's cost

``--reuse``: the real SmolLM2-135M-Instruct, mapped from its file (``real_model.load_smollm2``),
timed alternately as the first worker of a host (an empty cache dir: the proof, every byte hashed,
the record written) and as the next worker (the record there: the proof and the lookup only),
wall clock and the thread's CPU time, so both see the same load; the goal is <= 10%.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHAPES = {"demo": ("smollm2-135m-shape", "float32"), "1b-bf16": ("llama-3.2-1b-shape", "bfloat16"),
          "1b-fp32": ("llama-3.2-1b-shape", "float32")}


def build(shape: str, dtype: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pion.client.demo_model import SHAPES as MODEL_SHAPES

    config = LlamaConfig(**{k: v for k, v in MODEL_SHAPES[shape].items() if not k.startswith("_")})
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model = model.to_empty(device="cpu").eval()
    with torch.no_grad():
        for index, param in enumerate(model.parameters()):
            param.fill_(0.01 * (index % 7))  # every page touched: resident, as after a load
    return model


def measure(name: str, repeat: int) -> dict:
    import numpy as np
    import xxhash

    from pion.client.adapters.transformers import TransformersAdapter
    from pion.client.fingerprint import forget

    shape, dtype = SHAPES[name]
    model = build(shape, dtype)
    adapter = TransformersAdapter(model)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    nbytes += sum(b.numel() * b.element_size() for b in model.buffers())
    first, cached = [], []
    for _ in range(repeat):
        forget(model)
        started = time.perf_counter()
        adapter.weights_hash()
        first.append(time.perf_counter() - started)
        started = time.perf_counter()
        adapter.weights_hash()
        cached.append(time.perf_counter() - started)
    flat = np.ones(nbytes, np.uint8)
    ceiling = []
    for _ in range(repeat):
        started = time.perf_counter()
        xxhash.xxh3_128(flat).hexdigest()
        ceiling.append(time.perf_counter() - started)
    best = min(first)
    return {"shape": shape, "dtype": dtype, "bytes": nbytes, "params": len(list(model.parameters())),
            "first_ms": round(1000 * best, 1), "gbps": round(nbytes / best / 1e9, 2),
            "cached_ms": round(1000 * min(cached), 3), "xxh3_alone_ms": round(1000 * min(ceiling), 1),
            "all_first_ms": [round(1000 * x, 1) for x in first], "loadavg": [round(x, 2) for x in os.getloadavg()]}


def reuse(repeat: int) -> dict:
    import tempfile

    from pion.client.adapters.transformers import TransformersAdapter
    from pion.client.fingerprint import forget
    from pion.client.real_model import load_smollm2

    model, _ = load_smollm2()
    adapter = TransformersAdapter(model)
    times: dict[str, list] = {"first": [], "next": [], "first_cpu": [], "next_cpu": []}
    with tempfile.TemporaryDirectory(prefix="bench-fp-") as tmp:
        for run in range(repeat):
            for label in ("first", "next"):
                if label == "first":  # a host that never hashed this model
                    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, f"host-{run}")
                forget(model)
                time.sleep(0.05)
                started, cpu = time.perf_counter(), time.thread_time()
                adapter.weights_hash()
                times[label + "_cpu"].append(1000 * (time.thread_time() - cpu))
                times[label].append(1000 * (time.perf_counter() - started))

    def med(values):
        return round(sorted(values)[len(values) // 2], 2)

    out = {"model": "SmolLM2-135M-Instruct (mapped)", "runs": repeat,
           **{f"{k}_ms_median": med(v) for k, v in times.items()}, **{f"{k}_ms_min": round(min(v), 2) for k, v in times.items()}}
    out["next_vs_first_median"] = round(out["next_ms_median"] / out["first_ms_median"], 4)
    out["next_vs_first_cpu_median"] = round(out["next_cpu_ms_median"] / out["first_cpu_ms_median"], 4)
    out["all_ms"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated: {', '.join(SHAPES)}")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    parser.add_argument("--reuse", action="store_true", help="the next worker's cost against the first one's")
    args = parser.parse_args(argv)
    if args.reuse:
        print(json.dumps(reuse(args.repeat)), flush=True)
        return 0
    for name in args.shapes.split(","):
        print(json.dumps(measure(name, args.repeat)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
