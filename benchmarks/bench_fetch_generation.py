"""What the fetch's consistency check costs: one fetch pipeline with and without its two
``KV.PREFIX.GENERATION`` commands (issue 12: a fetch never mixes two prefixes).

Stores one prefix of the tiny test Llama (2 layers, kv_dim 64, fp32 rows) and times the socket
fetch pipeline (LOOKUP, MANIFEST, every layer's ``V.FETCH ... RANGE``) both ways, alternating,
against a server in this process. Prints the medians, their ratio and the load average.

    python benchmarks/bench_fetch_generation.py [--tokens 2048] [--runs 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.client.models import hf_llama, prompt  # noqa: E402
from tests.conftest import make_settings  # noqa: E402
from tests.support.servers import ThreadServer  # noqa: E402

from pion.client import PionPromptCache, transfer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    server = ThreadServer(make_settings(Path(tempfile.mkdtemp()))).start()
    try:
        pc = PionPromptCache(hf_llama(), url=f"pion://127.0.0.1:{server.port}", local_lane=False)
        ids = prompt(args.tokens)
        pc.get_or_prefill(ids)
        ns, layers = pc.namespace(ids), len(pc.adapter.layout.attn)
        plain = [["KV.PREFIX.LOOKUP", ns], ["KV.PREFIX.MANIFEST", ns],
                 *transfer.row_commands(ns, len(ids), layers, "range")]
        checked = [plain[0], ["KV.PREFIX.GENERATION", ns], *plain[1:], ["KV.PREFIX.GENERATION", ns]]
        times: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(args.runs):
            for name, commands in (("without", plain), ("with", checked)):
                started = time.perf_counter()
                pc.client.pipeline_execute(commands, fast=True)
                times[name].append((time.perf_counter() - started) * 1000)
        nbytes = sum(len(reply) for reply in pc.client.pipeline_execute(plain, fast=True)[2:])
        without, with_check = statistics.median(times["without"]), statistics.median(times["with"])
        print(f"fetch pipeline, {args.tokens} tokens, {nbytes} bytes of rows, {args.runs} alternating runs each:")
        print(f"  median without GENERATION {without:.3f} ms, with {with_check:.3f} ms, "
              f"ratio {with_check / without:.3f}; load average {os.getloadavg()}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
