"""Which ``pion`` modules a K/V store and a K/V hit pass through, counted on the call stack.

Why: the store path (``V.STOREBATCH``) and the hit path (``V.FETCH``, ``KV.PREFIX.LOOKUP``) are
the product's reason to exist; docs/architecture.md promises they run one way through at most
six modules. This tool measures it instead of trusting a diagram: it starts a server in this
process (a temporary data directory, the log on), sends each command from a client thread, and
while the command is in flight records, with ``threading.setprofile``, the ``pion.*`` modules on
the server's call stack at every Python call on the loop thread and the worker pool.

For each command it prints:

- **path**: the longest stack that reaches a *sink*, where the bytes are (``storage.arena``: the
  blob written; ``kvcache.layer``: rows kept or read; ``kvcache.prefix``: LOOKUP's index), as its
  chain of modules down to that sink (root first, a module repeated in a row counted once), and
  its length: the modules a request crosses from the connection to its bytes;
- **climbs**: such paths that enter a module, leave it and come back to it lower down
  (A -> B -> A): the "returns up" the one-way rule forbids (0 expected);
- **deepest**: the deepest stack of any call, sink or not (a codec's base class calling its
  subclass, eviction calling back into its space: leaf work below the path, shown for honesty);
- **touched**: every module any call of the command entered (the admission checks, the journal,
  leaf helpers), for a fuller picture.

The command passes through ``connection`` and ``dispatch`` first; modules outside the request
(the cron, the log writer thread) are not counted: only stacks rooted in ``server.net.connection``
(the loop) or ``server.deferred`` (a worker) are. ``--strict N`` exits 1 when a path is longer
than ``N`` modules or has a climb (the test ``tests/server/test_kv_path.py`` runs it that way).

    python tools/kv_path_trace.py            # prints the table
    python tools/kv_path_trace.py --strict 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

ROOTS = ("pion.server.net.connection", "pion.server.deferred")
#: where the bytes of a K/V store land and a hit's are read: the arena files, a layer's rows, the
#: prefix index (LOOKUP's answer)
SINKS = ("pion.storage.arena", "pion.kvcache.layer", "pion.kvcache.prefix")


class Recorder:
    """A profile function that keeps, while ``on``, the module chains of ``pion`` call stacks."""

    def __init__(self) -> None:
        self.on = False
        self.lock = threading.Lock()
        self.chains: set[tuple[str, ...]] = set()

    def __call__(self, frame, event, _arg) -> None:
        if not self.on or event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("pion."):
            return
        stack: list[str] = []
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("pion.") and (not stack or stack[-1] != module):
                stack.append(module)
            frame = frame.f_back
        stack.reverse()
        if stack and stack[0] in ROOTS:
            with self.lock:
                self.chains.add(tuple(stack))

    def take(self) -> set[tuple[str, ...]]:
        with self.lock:
            chains, self.chains = self.chains, set()
        return chains


def short(module: str) -> str:
    return module.removeprefix("pion.")


def to_sink(chain: tuple[str, ...]) -> tuple[str, ...] | None:
    """The chain down to its first sink module (where the bytes are), or None if it has none."""
    for index, module in enumerate(chain):
        if module in SINKS:
            return chain[: index + 1]
    return None


def summary(chains: set[tuple[str, ...]]) -> dict:
    """The longest chain down to a sink (the path), its climbs, the deepest stack of any call
    (codec internals and callbacks included) and every module touched."""
    paths = {p for p in map(to_sink, chains) if p is not None}
    path = max(paths, key=lambda c: (len(c), c), default=())
    climbs = sorted(c for c in paths if len(set(c)) < len(c))
    deepest = max(chains, key=lambda c: (len(c), c), default=())
    touched = sorted({m for c in chains for m in c})
    return {"path": [short(m) for m in path], "modules": len(path),
            "sinks": {short(sink): [short(m) for m in max((p for p in paths if p[-1] == sink), key=len)]
                      for sink in sorted({p[-1] for p in paths})},
            "climbs": [[short(m) for m in c] for c in climbs[:3]], "climb_count": len(climbs),
            "deepest": [short(m) for m in deepest],
            "touched": [short(m) for m in touched], "touched_count": len(touched)}


def resp(*args: bytes | str | int) -> list[bytes]:
    """A RESP2 multibulk frame, as a list of buffers (the big blob is not copied)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        data = a if isinstance(a, bytes | bytearray | memoryview) else str(a).encode()
        out += [b"$%d\r\n" % len(data), data, b"\r\n"]
    return out


def read_reply(sock: socket.socket, buf: bytearray) -> bytes:
    """One reply, roughly: enough for the single-line and bulk replies this tool expects."""
    while b"\r\n" not in buf:
        buf += sock.recv(1 << 20)
    line, _, rest = bytes(buf).partition(b"\r\n")
    if line[:1] == b"$" and int(line[1:]) >= 0:
        need = int(line[1:]) + 2
        while len(rest) < need:
            rest += sock.recv(1 << 20)
        buf[:] = rest[need:]
        return rest[: need - 2]
    if line[:1] == b"*":
        buf[:] = rest
        return b"".join(read_reply(sock, buf) for _ in range(int(line[1:])))
    buf[:] = rest
    if line[:1] == b"-":
        raise RuntimeError(line.decode())
    return line


def run(tokens: int, dim: int) -> list[dict]:
    import uvloop

    from pion.config import settings_from_pairs
    from pion.server.run import make_server

    recorder = Recorder()
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        settings = settings_from_pairs([("port", str(port)), ("dir", tmp), ("appendonly", "yes"),
                                        ("appendfsync", "always")])
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

        threading.setprofile(recorder)
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        ready.wait(120)
        threading.setprofile(None)  # set: the server thread and the pool it starts inherit it
        sock = socket.create_connection(("127.0.0.1", port))
        buf = bytearray()
        rng = np.random.default_rng(0)

        def send(label: str, *args) -> None:
            recorder.take()
            recorder.on = True
            sock.sendall(b"".join(bytes(x) for x in resp(*args)))
            read_reply(sock, buf)
            recorder.on = False
            row = {"command": label, **summary(recorder.take())}
            results.append(row)

        def plain(*args) -> None:
            sock.sendall(b"".join(bytes(x) for x in resp(*args)))
            read_reply(sock, buf)

        plain("KV.PREFIX.REGISTER", "trace", dim, "fp16")
        small = rng.standard_normal((tokens, dim)).astype(np.float16).tobytes()
        big = rng.standard_normal((32 * tokens, dim)).astype(np.float32).tobytes()
        send(f"V.STOREBATCH FMT RAW ({len(small)} B: inline, to the arena)",
             "V.STOREBATCH", "trace_pk", 0, 0, tokens, small, "FMT", "RAW")
        send(f"V.STOREBATCH F32 ({len(big)} B: encoded and written by the worker pool)",
             "V.STOREBATCH", "trace_pk", 1, 0, 32 * tokens, big)
        plain("V.STOREBATCH", "trace_pv", 0, 0, tokens, small, "FMT", "RAW")
        send("KV.PREFIX.LOOKUP", "KV.PREFIX.LOOKUP", "trace")
        send("V.FETCH RANGE FMT RAW", "V.FETCH", "trace_pk", 0, "RANGE", 0, tokens, "FMT", "RAW")
        send("V.FETCH BATCH FMT RAW", "V.FETCH", "trace_pk", "BATCH", 0, tokens, 1, "FMT", "RAW")
        sock.close()
        box["loop"].call_soon_threadsafe(box["loop"].stop)
        thread.join(30)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--strict", type=int, metavar="N", help="exit 1 if a path is longer than N or climbs")
    parser.add_argument("--json", action="store_true", help="one JSON line per command")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    results = run(args.tokens, args.dim)
    bad = False
    for row in results:
        if args.json:
            print(json.dumps(row))
            continue
        lines = [row["command"], f"  path ({row['modules']} modules): {' -> '.join(row['path'])}"]
        lines += [f"  to {sink} ({len(chain)}): {' -> '.join(chain)}" for sink, chain in row["sinks"].items()]
        lines.append(f"  climbs: {row['climb_count']}" + ("  e.g. " + " -> ".join(row["climbs"][0]) if row["climbs"] else ""))
        lines.append(f"  deepest stack ({len(row['deepest'])}): {' -> '.join(row['deepest'])}")
        lines.append(f"  touched ({row['touched_count']}): {', '.join(row['touched'])}")
        print("\n".join(lines))
        if args.strict is not None and (row["modules"] > args.strict or row["climb_count"]):
            bad = True
    if args.strict is not None:
        print(f"strict {args.strict}: {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
