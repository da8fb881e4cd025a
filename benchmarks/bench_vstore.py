"""V-store throughput: store and fetch a whole prefix, per codec, against two yardsticks.

Shapes: a 2,048-token prefix of 30 layers at kv_dim 192 (Llama-3.2-1B-like, K and V) and of
16 layers at kv_dim 512. For each codec, measured in one run against servers in their own
processes, through redis-py (hiredis parser), pipelined:

- store: ``V.STOREBATCH`` of every layer's fp32 rows, both sides (payload = fp32 bytes sent), and
  ``FMT RAW`` of the same rows already encoded (what ``pion.client`` sends: the server stores the
  bytes as they are; payload = encoded bytes sent);
- fetch: ``V.FETCH <sid> BATCH 0 2048 FMT NATIVE`` and ``FMT RAW`` for both sides (payload =
  bytes received; RAW ships the stored encoding, so a 4-bit codec moves ~1/4 of fp16's bytes);
- loopback: a raw socket moving the same blobs between two Python processes (the ceiling a
  Python client on this machine can reach);
- redis-server: ``SET`` of the same per-layer blobs, ``MGET`` of blobs the size of Pion's reply.

Prints one JSON line per result and a table: GB/s and the ratios Pion/loopback (goal >= 0.7)
and Pion/redis-server (goal >= 1.2). ``fp16_equiv_gbps`` counts a fetch as the fp16 bytes it
stands for (what a client gets per second in tokens).

    python benchmarks/bench_vstore.py              # both shapes, every codec
    python benchmarks/bench_vstore.py --smoke      # CI-sized
    python benchmarks/bench_vstore.py --durable    # Pion with its default durable log too
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.support.servers import ProcessServer, RedisServer, free_port  # noqa: E402

from pion.codecs import get_codec  # noqa: E402

SHAPES = {"30x192": (30, 192), "16x512": (16, 512)}
CODECS = ["fp32", "fp16", "bf16", "int8", "fp8", "turbo4", "turbo3", "turbo2", "mlx4g32"]

SINK = r"""
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen(1)
conn, _ = srv.accept(); conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = bytearray(64 << 20); view = memoryview(buf)
def recv_exact(n):
    while n:
        n -= conn.recv_into(view[: min(n, len(buf))])
while True:
    head = bytearray()
    while len(head) < 9:
        part = conn.recv(9 - len(head))
        if not part: sys.exit(0)
        head += part
    mode, size = head[:1], int.from_bytes(head[1:], "little")
    if mode == b"r":          # client sends size bytes, sink acks
        recv_exact(size); conn.sendall(b"k")
    else:                     # sink sends size bytes
        chunk = bytes(min(size, 16 << 20)); left = size
        while left:
            n = min(left, len(chunk)); conn.sendall(chunk[:n]); left -= n
"""


class Loopback:
    """A raw socket to a sink process: the transfer ceiling for these byte counts."""

    def __init__(self) -> None:
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-c", SINK, str(port)])
        self.sock = _connect(port)  # the sink serves exactly one connection: this one
        self.buf = bytearray(64 << 20)

    def send(self, blobs: list[bytes]) -> float:
        total = sum(len(b) for b in blobs)
        start = time.perf_counter()
        self.sock.sendall(b"r" + total.to_bytes(8, "little"))
        for blob in blobs:
            self.sock.sendall(blob)
        self.sock.recv(1)
        return time.perf_counter() - start

    def receive(self, total: int) -> float:
        start = time.perf_counter()
        self.sock.sendall(b"s" + total.to_bytes(8, "little"))
        view = memoryview(self.buf)
        while total:
            total -= self.sock.recv_into(view[: min(total, len(self.buf))])
        return time.perf_counter() - start

    def close(self) -> None:
        self.sock.close()
        self.proc.kill()
        self.proc.wait()


def _connect(port: int) -> socket.socket:
    for _ in range(200):
        try:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(port)


def best(fn, repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pion_store(client: redis.Redis, ns: str, blobs: dict[str, list[bytes]], tokens: int, fmt: str = "F32") -> float:
    pipe = client.pipeline(transaction=False)
    for side, layers in blobs.items():
        for layer, blob in enumerate(layers):
            pipe.execute_command("V.STOREBATCH", ns + side, layer, 0, tokens, blob, "FMT", fmt)
    return timed(pipe.execute)


def pion_fetch(client: redis.Redis, ns: str, tokens: int, fmt: str, out: list) -> float:
    pipe = client.pipeline(transaction=False)
    for side in ("_pk", "_pv"):
        pipe.execute_command("V.FETCH", ns + side, "BATCH", 0, tokens, "FMT", fmt)

    def run() -> None:
        out[:] = pipe.execute()

    return timed(run)


class Wire:
    """A plain socket speaking RESP with no copy of the blobs: each command's header lines are
    joined, every blob goes to ``sendmsg`` as it is (redis-py's hiredis packer copies every
    argument into one ``bytes`` first: ~80 ms of client CPU per 94 MB here). This measures what
    the server takes, as the loopback measures what the socket takes."""

    def __init__(self, port: int) -> None:
        self.sock = _connect(port)

    def run(self, commands: list[list]) -> float:
        parts: list = []
        small: list[bytes] = []
        for argv in commands:
            small.append(b"*%d\r\n" % len(argv))
            for a in argv:
                data = a if isinstance(a, bytes | memoryview) else str(a).encode()
                small.append(b"$%d\r\n" % len(data))
                if len(data) >= 65536:
                    parts += [b"".join(small), data]
                    small = [b"\r\n"]
                else:
                    small += [data, b"\r\n"]
        parts.append(b"".join(small))
        start = time.perf_counter()
        for at in range(0, len(parts), 512):
            batch = [memoryview(p).cast("B") for p in parts[at:at + 512]]
            while batch:
                sent = self.sock.sendmsg(batch)
                while batch and sent >= batch[0].nbytes:
                    sent -= batch[0].nbytes
                    batch.pop(0)
                if batch and sent:
                    batch[0] = batch[0][sent:]
        buf = b""
        for _ in commands:  # one-line replies (+OK, -ERR ...)
            while b"\r\n" not in buf:
                buf += self.sock.recv(65536)
            line, buf = buf.split(b"\r\n", 1)
            if line[:1] == b"-":
                raise RuntimeError(line.decode())
        return time.perf_counter() - start

    def close(self) -> None:
        self.sock.close()


def wire_store(wire: Wire, ns: str, blobs: dict[str, list[bytes]], tokens: int, fmt: str = "F32") -> float:
    return wire.run([["V.STOREBATCH", ns + side, layer, 0, tokens, blob, "FMT", fmt]
                     for side, layers in blobs.items() for layer, blob in enumerate(layers)])


def wire_set(wire: Wire, blobs: dict[str, list[bytes]]) -> float:
    return wire.run([["SET", f"k{side}{layer}", blob] for side, layers in blobs.items() for layer, blob in enumerate(layers)])


def redis_set(client: redis.Redis, blobs: dict[str, list[bytes]]) -> float:
    pipe = client.pipeline(transaction=False)
    for side, layers in blobs.items():
        for layer, blob in enumerate(layers):
            pipe.set(f"k{side}{layer}", blob)
    return timed(pipe.execute)


def redis_mget(client: redis.Redis, sizes: list[int]) -> float:
    half = len(sizes) // 2
    pipe = client.pipeline(transaction=False)
    for i, size in enumerate(sizes):
        pipe.set(f"g{i}", bytes(size))
    pipe.execute()
    pipe = client.pipeline(transaction=False)
    pipe.mget([f"g{i}" for i in range(half)])
    pipe.mget([f"g{i}" for i in range(half, len(sizes))])
    return timed(pipe.execute)


def row(shape: str, codec: str, op: str, fmt: str, payload: int, seconds: float, loop_s: float,
        redis_s: float, fp16_bytes: int, server: str) -> dict:
    gbps = payload / seconds / 1e9
    return {
        "shape": shape, "codec": codec, "op": op, "fmt": fmt, "server": server, "payload_bytes": payload,
        "seconds": round(seconds, 5), "gbps": round(gbps, 3),
        "loopback_gbps": round(payload / loop_s / 1e9, 3), "redis_gbps": round(payload / redis_s / 1e9, 3),
        "vs_loopback": round(loop_s / seconds, 2), "vs_redis": round(redis_s / seconds, 2),
        "fp16_equiv_gbps": round(fp16_bytes / seconds / 1e9, 3),
    }


def bench_shape(shape: str, layers: int, dim: int, tokens: int, codecs: list[str], pion: redis.Redis,
                red: redis.Redis, loop: Loopback, repeat: int, server: str,
                wires: tuple[Wire, Wire] | None = None) -> list[dict]:
    rng = np.random.default_rng(0)
    blobs = {side: [rng.standard_normal((tokens, dim)).astype(np.float32).tobytes() for _ in range(layers)]
             for side in ("_pk", "_pv")}
    flat = blobs["_pk"] + blobs["_pv"]
    store_bytes = sum(len(b) for b in flat)
    fp16_bytes = store_bytes // 2
    loop_store = best(lambda: loop.send(flat), repeat)
    redis_store = best(lambda: redis_set(red, blobs), repeat)
    red.flushall()
    results = []
    for codec in codecs:
        ns = f"bench{shape}{codec}"
        pion.execute_command("KV.PREFIX.REGISTER", ns, dim, codec)
        seconds = best(lambda: pion_store(pion, ns, blobs, tokens), repeat)  # noqa: B023
        results.append(row(shape, codec, "store", "F32", store_bytes, seconds, loop_store, redis_store,
                           fp16_bytes, server))
        if wires is not None:  # the same store without redis-py's packing copy, both servers
            seconds = best(lambda: wire_store(wires[0], ns, blobs, tokens), repeat)  # noqa: B023
            redis_wire = best(lambda: wire_set(wires[1], blobs), repeat)
            red.flushall()
            results.append(row(shape, codec, "store", "F32-wire", store_bytes, seconds, loop_store, redis_wire,
                               fp16_bytes, server))
        assert pion.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT"
        encoder = get_codec(codec)
        encoded = {side: [encoder.encode(np.frombuffer(b, dtype=np.float32).reshape(tokens, dim)) for b in layers]
                   for side, layers in blobs.items()}
        raw_bytes = sum(len(b) for layers in encoded.values() for b in layers)
        seconds = best(lambda: pion_store(pion, ns, encoded, tokens, "RAW"), repeat)  # noqa: B023
        loop_s = best(lambda: loop.send(encoded["_pk"] + encoded["_pv"]), repeat)  # noqa: B023
        redis_s = best(lambda: redis_set(red, encoded), repeat)  # noqa: B023
        red.flushall()
        results.append(row(shape, codec, "store", "RAW", raw_bytes, seconds, loop_s, redis_s, fp16_bytes, server))
        for fmt in ("NATIVE", "RAW"):
            out: list = []
            seconds = best(lambda: pion_fetch(pion, ns, tokens, fmt, out), repeat)  # noqa: B023
            sizes = [len(layer) for side in out for layer in side]
            payload = sum(sizes)
            loop_s = best(lambda: loop.receive(payload), repeat)  # noqa: B023
            redis_s = best(lambda: redis_mget(red, sizes), repeat)  # noqa: B023
            red.flushall()
            results.append(row(shape, codec, "fetch", fmt, payload, seconds, loop_s, redis_s, fp16_bytes, server))
        pion.execute_command("KV.PREFIX.DROP", ns)
    return results


def table(results: list[dict]) -> str:
    """One row per (server, shape, codec): GB/s of each op, then Pion/loopback and Pion/redis."""
    cells: dict[tuple, dict[str, dict]] = {}
    for r in results:
        cells.setdefault((r["server"], r["shape"], r["codec"]), {})[f"{r['op']} {r['fmt']}"] = r
    keys = ("store F32", "store F32-wire", "store RAW", "fetch NATIVE", "fetch RAW")
    lines = ["| server | shape | codec | store F32 GB/s (xloop, xredis) | store F32, zero-copy client (xloop, xredis) "
             "| store RAW GB/s (xloop, xredis) "
             "| fetch NATIVE GB/s (xloop, xredis) | fetch RAW GB/s (xloop, xredis) | RAW fp16-equiv GB/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (server, shape, codec), ops in cells.items():
        parts = []
        for key in keys:
            r = ops.get(key)
            parts.append("-" if r is None else f"{r['gbps']} ({r['vs_loopback']}, {r['vs_redis']})")
        raw = ops.get("fetch RAW")
        lines.append(f"| {server} | {shape} | {codec} | " + " | ".join(parts) + f" | {raw['fp16_equiv_gbps'] if raw else '-'} |")
    return "\n".join(lines)


def from_json(path: str) -> list[dict]:
    """Result lines of an earlier run (``--table-from FILE`` reprints its table)."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    parser.add_argument("--durable", action="store_true", help="also run Pion with appendfsync always")
    parser.add_argument("--table-from", metavar="FILE", help="print the table of an earlier run's JSON lines")
    parser.add_argument("--no-wire", action="store_true", help="skip the zero-copy client's store rows")
    args = parser.parse_args()
    if args.table_from:
        print(table(from_json(args.table_from)))
        return 0
    if shutil.which("redis-server") is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    shapes = {name: SHAPES[name] for name in args.shapes.split(",")}
    codecs = args.codecs.split(",")
    if args.smoke:
        args.tokens, args.repeat, codecs = 64, 1, ["fp16", "turbo4"]
        shapes = {"2x64": (2, 64)}
    modes = [("pion-nolog", ("--appendonly", "no"))] + ([("pion-fsync-always", ())] if args.durable else [])
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        red_srv = RedisServer(Path(tmp) / "redis", "--proto-max-bulk-len", "1gb").start()
        loop = Loopback()
        try:
            for server_name, flags in modes:
                pion_srv = ProcessServer(Path(tmp) / server_name, *flags).start()
                try:
                    pion = redis.Redis(port=pion_srv.port, socket_timeout=300)
                    red = redis.Redis(port=red_srv.port, socket_timeout=300)
                    wires = None if args.no_wire else (Wire(pion_srv.port), Wire(red_srv.port))
                    for shape, (layers, dim) in shapes.items():
                        for result in bench_shape(shape, layers, dim, args.tokens, codecs, pion, red, loop,
                                                  args.repeat, server_name, wires):
                            result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
                            print(json.dumps(result), flush=True)
                            results.append(result)
                finally:
                    for wire in wires or ():
                        wire.close()
                    pion_srv.stop()
        finally:
            loop.close()
            red_srv.stop()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
