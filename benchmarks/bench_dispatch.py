"""Per-command CPU cost in-process: pipelined RESP fed to one ``Connection`` (no sockets).

The server is built as ``pion-server`` builds it (``appendonly no`` unless ``--durable``); a fake
transport takes the replies, so what is measured is Pion's Python per command: parsing,
dispatch, admission, the handler, bookkeeping, reply encoding (docs/performance.md). CPU time
(``time.process_time``) is printed with the load average; compare two trees by running this
twice with a different ``PYTHONPATH``, alternating, in the same minutes.

    python benchmarks/bench_dispatch.py                       # GET, SET -P 16; GET -P 1; --pipe; EVAL
    python benchmarks/bench_dispatch.py --shapes get --batch 1 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pion.config import settings_from_pairs  # noqa: E402
from pion.server.run import make_server  # noqa: E402

try:
    from pion.server.net.connection import Connection  # noqa: E402
except ImportError:  # a tree from before the server's wings (another tree on PYTHONPATH)
    from pion.server.connection import Connection  # type: ignore[no-redef]  # noqa: E402


class _Transport:
    """Takes the replies; reports nothing buffered, so flow control never pauses."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def writelines(self, buffers: list) -> None:
        self.writes += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, **limits: int) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 1974)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _frames(commands: list[list[bytes]]) -> bytes:
    return b"".join(b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)
                    for argv in commands)


def _reads(shape: str, count: int, batch: int) -> list[bytes]:
    """The reads a client sends: ``batch`` commands each, or 256 KiB of a SET stream (pipe)."""
    if shape == "pipe":
        data = _frames([[b"SET", b"key:%d" % i, b"value:%d" % i] for i in range(count)])
        return [data[i:i + 262144] for i in range(0, len(data), 262144)]
    if shape.startswith("eval"):
        body = b"for i=1,%d do redis.call('incr',KEYS[1]) end return 1" % int(shape[4:] or 1)
        one = _frames([[b"EVAL", body, b"1", b"counter"]] * batch)
    else:
        one = _frames([[b"SET", b"key:%d" % i, b"xxx"] if shape == "set" else [b"GET", b"key:%d" % i]
                       for i in range(batch)])
    return [one] * max(count // batch, 1)


async def _run(shape: str, count: int, batch: int, durable: bool, profile: bool) -> None:
    work = tempfile.mkdtemp(prefix="bench-dispatch-")
    pairs = [("port", "0"), ("dir", work)] + ([] if durable else [("appendonly", "no")])
    server = make_server(settings_from_pairs(pairs))
    await server.start()
    conn = Connection(server)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    reads = _reads(shape, count, batch)
    commands = count if shape == "pipe" else len(reads) * batch
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    start = time.process_time()
    for data in reads:
        conn.data_received(data)
        while conn.waiting_durable:  # the durable config: replies wait for the log's fsync
            await asyncio.sleep(0)
    cpu = time.process_time() - start
    if profiler is not None:
        profiler.disable()
    print(f"{shape:<7} batch {batch if shape != 'pipe' else '256KiB':>6}  {'durable' if durable else 'appendonly no':<13}"
          f"{cpu / commands * 1e6:8.2f} us CPU/command  ({commands} commands, {transport.writes} writes, "
          f"load {os.getloadavg()[0]:.2f})", flush=True)
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    await server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="get,set,get1,pipe,eval0,eval10",
                        help="get, set, get1 (one command per read), pipe, evalN (N redis.calls)")
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=16, help="commands per read")
    parser.add_argument("--durable", action="store_true", help="the default durable config")
    parser.add_argument("--profile", action="store_true", help="cProfile, the top 30 by own time")
    args = parser.parse_args()
    import uvloop

    for shape in args.shapes.split(","):
        batch = 1 if shape == "get1" else args.batch
        count = args.count // 5 if shape.startswith("eval") else args.count
        uvloop.run(_run("get" if shape == "get1" else shape, count, batch, args.durable, args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
