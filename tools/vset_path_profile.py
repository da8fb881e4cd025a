"""Where a served VSIM and VADD spend their time, from the socket to the reply.

Why: the vector-set benchmark (``benchmarks/bench_vset_kernel.py``) compares a served VSIM/VADD
with usearch in-process; this tool says how much of a command is the compiled kernel's walk and
how much is the Python around it (parsing, the vector's normalization and quantization, the
reply, the log record), so the next change goes where the time is.

A server runs in this process (its event loop in a thread, the log on with ``appendfsync no``);
a client runs in a child process (its own interpreter, as a real client), fills a set with
``--n`` vectors by pipelined VADDs, then times, one command at a time over a raw socket with the
commands encoded in advance (so no client library is in the numbers): PING, VSIM (COUNT 10, the
default EF), VADD of new elements; and the same VSIM through redis-py, for the client library's
share. Two rounds: the first timed, the second under ``cProfile`` on the server's loop thread
(the profiler's own cost inflates that round, so read its shares, not its times). Prints the
load average, the per-command round trips (median, microseconds) and the profile's top entries.

    python tools/vset_path_profile.py              # 10,000 x 384 Q8
    python tools/vset_path_profile.py --n 3000 --dim 64 --calls 300
    python tools/vset_path_profile.py --src ../other/src   # another tree's server, this client
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.raw_resp import RawClient, encode  # noqa: E402


def client(port: int, n: int, dim: int, calls: int) -> None:
    """The child: fill, then per round wait for a line on stdin and time the commands."""
    import redis

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(50, dim))
    data = (centers[rng.integers(0, 50, n + 4 * calls)] + 0.6 * rng.normal(size=(n + 4 * calls, dim))).astype("<f4")
    queries = (centers[rng.integers(0, 50, calls)] + 0.6 * rng.normal(size=(calls, dim))).astype("<f4")
    r = redis.Redis(port=port, socket_timeout=600)
    for lo in range(0, n, 500):
        pipe = r.pipeline(transaction=False)
        for i in range(lo, min(n, lo + 500)):
            pipe.execute_command("VADD", "vs", "FP32", data[i].tobytes(), f"e{i}")
        pipe.execute()
    raw = RawClient(port)
    next_new = n
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        out = {}

        def timed(label: str, payloads: list[bytes], out: dict = out) -> None:
            times = []
            for p in payloads:
                t0 = time.perf_counter()
                raw.call(p)
                times.append(time.perf_counter() - t0)
            out[label] = round(float(np.median(times)) * 1e6, 1)

        timed("PING", [encode("PING")] * calls)
        timed("VSIM", [encode("VSIM", "vs", "FP32", q.tobytes(), "COUNT", 10) for q in queries])
        vadds = [encode("VADD", "vs", "FP32", data[next_new + j].tobytes(), f"e{next_new + j}") for j in range(calls)]
        next_new += calls
        timed("VADD (new element)", vadds)
        times = []
        for q in queries:
            t0 = time.perf_counter()
            r.execute_command("VSIM", "vs", "FP32", q.tobytes(), "COUNT", 10)
            times.append(time.perf_counter() - t0)
        out["VSIM via redis-py"] = round(float(np.median(times)) * 1e6, 1)
        t0 = time.perf_counter()
        for _ in range(calls):
            r.ping()
        out["PING via redis-py"] = round((time.perf_counter() - t0) / calls * 1e6, 1)
        print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--src", default=str(ROOT / "src"),
                    help="the tree whose server runs (its src/ directory; default this checkout's)")
    ap.add_argument("--client-port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client_port:
        client(args.client_port, args.n, args.dim, args.calls)
        return
    sys.path.insert(0, str(Path(args.src).resolve()))
    import uvloop

    from pion.config import settings_from_pairs
    from pion.server.assembly import make_server
    from pion.vector.vset import kernel

    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        settings = settings_from_pairs([("port", str(port)), ("dir", tmp), ("appendonly", "yes"),
                                        ("appendfsync", "no")])
        ready = threading.Event()
        box: dict = {}

        def serve() -> None:
            loop = uvloop.new_event_loop()
            asyncio.set_event_loop(loop)
            box["server"] = server = make_server(settings)
            loop.run_until_complete(server.start())
            box["loop"] = loop
            ready.set()
            loop.run_forever()
            loop.run_until_complete(server.stop())
            loop.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        ready.wait(120)
        loop = box["loop"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
        child = subprocess.Popen([sys.executable, __file__, "--client-port", str(port), "--n", str(args.n),
                                  "--dim", str(args.dim), "--calls", str(args.calls)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert child.stdout is not None and child.stdin is not None
            if child.stdout.readline().strip() != "ready":
                sys.exit("the client did not fill the set")
            load = os.getloadavg()
            child.stdin.write("go\n")
            child.stdin.flush()
            timed = json.loads(child.stdout.readline())

            def toggle(on: bool) -> None:
                done = threading.Event()

                def flip() -> None:
                    (prof.enable if on else prof.disable)()
                    done.set()

                loop.call_soon_threadsafe(flip)
                done.wait(10)

            toggle(True)
            child.stdin.write("go\n")
            child.stdin.flush()
            profiled = json.loads(child.stdout.readline())
            toggle(False)
            child.stdin.close()
            child.wait(60)
        finally:
            if child.poll() is None:
                child.kill()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(60)
    print(f"{kernel.describe()}; {args.n} x {args.dim} Q8, {args.calls} calls each; load average "
          f"{load[0]:.2f} -> {os.getloadavg()[0]:.2f}")
    print("round trip, median us (raw socket, commands encoded in advance):", json.dumps(timed))
    print("the same under cProfile on the server's loop:", json.dumps(profiled))
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.top)
    print(text.getvalue())
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
