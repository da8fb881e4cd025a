"""Crash harness: many clients write, the server is SIGKILLed at random moments and restarted;
every acknowledged write must be there and no unacknowledged one half-applied.

Each client owns its keys and runs one command at a time, so after a kill each key must hold
either its last acknowledged state or, for the one command in flight, the state that command
would have made (a MULTI/EXEC of two SETs: both or neither). Commands: SET, INCR, HSET, LPUSH,
EXPIRE, DEL, MULTI/EXEC, and SETs of values over the arena threshold. A side thread starts
BGSAVEs at random, so kills also land during snapshots, log cuts and arena compaction.

On a nearly full disk (``disk=`` a filler file on a small tmpfs that holds the data directory)
a side thread keeps filling the disk to its last few KiB and freeing some again, so arena and
log writes fail with ENOSPC at random moments. A write answered -MISCONF is not acknowledged: the
client waits until writes succeed again, makes one write of its own (so every earlier record is
durable), reads its in-flight keys and adopts what it finds if it is the acknowledged state or
the in-flight one whole; anything else is a problem, as after a kill.

    python -m tests.recovery.crash_harness --cycles 100 [--policy everysec] [--clients 32]
    python -m tests.recovery.crash_harness --cycles 50 --full-disk   (mounts a 128 MB tmpfs; root)
    python -m tests.recovery.crash_harness --cycles 50 --full-disk --segment-size 65536
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.servers import ProcessServer

BLOB_THRESHOLD = 16 * 1024
_CONN_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def no_retry_client(port: int) -> redis.Redis:
    """redis-py retries a failed command 10 times by default: after a kill, a retry could run the
    in-flight command again on the restarted server. Here a failure is final."""
    return redis.Redis(port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))


def big_value(cid: int, n: int, rng: random.Random) -> bytes:
    size = rng.choice((20_000, 50_000, 200_000)) if rng.random() > 0.05 else 1_200_000
    seed = hashlib.sha256(b"%d:%d" % (cid, n)).digest()
    return (seed * (size // 32 + 1))[:size]


def digest(data: bytes | None) -> Any:
    return None if data is None else ("big", hashlib.sha256(data).hexdigest(), len(data))


class Worker(threading.Thread):
    """One connection, one command at a time, its own keys; ``model`` is the acknowledged state."""

    def __init__(self, cid: int, model: dict, seed: int) -> None:
        super().__init__(daemon=True)
        self.cid = cid
        self.model = model  # key -> expected state (see ``read_state``)
        self.rng = random.Random(seed)
        self.port = 0
        self.inflight: dict[bytes, Any] | None = None
        self.acked = 0
        self.counter = 0
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None
        #: writes refused with -MISCONF (a full disk), and states that did not fit afterwards
        self.refused = 0
        self.problems: list[str] = []
        #: key -> states a write answered -MISCONF may have left (it may have been kept)
        self.maybe: dict[bytes, list[Any]] = {}

    def key(self, name: str) -> bytes:
        return f"c{self.cid}:{name}".encode()

    def run(self) -> None:
        conn = no_retry_client(self.port)
        try:
            while not self.stop_flag.is_set():
                after, action = self.next_op()
                self.inflight = after
                try:
                    action(conn)
                except redis.exceptions.ResponseError as exc:
                    if "MISCONF" not in str(exc):
                        raise
                    self.refused += 1
                    self.settle(conn, after)  # not acknowledged: see what the server kept
                    continue
                self.adopt(after)
                self.acked += 1
        except _CONN_ERRORS:
            return  # the server was killed: ``inflight`` may or may not have happened
        except BaseException as exc:  # a wrong reply: the harness reports it
            self.error = exc

    def adopt(self, after: dict[bytes, Any]) -> None:
        self.model.update(after)
        for key in [k for k, v in after.items() if v is None]:
            self.model.pop(key, None)
        self.inflight = None

    def settle(self, conn: redis.Redis, after: dict[bytes, Any]) -> None:
        """After -MISCONF: wait for the disk, write once (every earlier record is then durable),
        then the in-flight keys must hold their acknowledged state or the in-flight one, whole."""
        scratch = self.key("scratch")
        while not self.stop_flag.is_set():
            # a SET answered -MISCONF by a failed log write stays in memory and is written by the
            # retry: until one is acknowledged, the scratch key may hold any value tried
            self.maybe.setdefault(scratch, []).append(("string", b"%d" % self.counter, False))
            try:
                conn.set(scratch, b"%d" % self.counter)
                self.maybe.pop(scratch, None)
                break
            except redis.exceptions.ResponseError as exc:
                if "MISCONF" not in str(exc):
                    raise
                time.sleep(0.05)
        else:
            return  # stopping: the kill decides (``inflight`` stays uncertain)
        self.model[scratch] = ("string", b"%d" % self.counter, False)
        actual = {key: read_state(conn, key, _hint(self.model.get(key) or after.get(key))) for key in after}
        acked = {key: self.model.get(key) for key in after}
        if actual == after or actual == acked:
            self.adopt(actual if actual == after else acked)
        else:
            self.problems.append(f"after -MISCONF: got {_short(actual)}, acknowledged {_short(acked)}, "
                                 f"in flight {_short(after)}")
            self.stop_flag.set()

    def next_op(self) -> tuple[dict[bytes, Any], Any]:
        self.counter += 1
        n, rng, model = self.counter, self.rng, self.model
        choice = rng.random()
        if choice < 0.25:
            key, value = self.key(f"s{rng.randrange(20)}"), b"v%d-%d" % (self.cid, n)
            return {key: ("string", value, False)}, lambda c: c.set(key, value)
        if choice < 0.40:
            key = self.key("n")
            current = int(model.get(key, ("string", b"0", False))[1])
            return {key: ("string", b"%d" % (current + 1), False)}, lambda c: c.incr(key)
        if choice < 0.52:
            key, field = self.key("h"), b"f%d" % rng.randrange(10)
            fields = dict(model.get(key, ("hash", {}, False))[1])
            fields[field] = b"%d" % n
            return {key: ("hash", fields, False)}, lambda c: c.hset(key, field, n)
        if choice < 0.64:
            key = self.key("l")
            items = list(model.get(key, ("list", [], False))[1])
            if len(items) > 30:
                return {key: None}, lambda c: c.delete(key)
            return {key: ("list", [b"%d" % n, *items], False)}, lambda c: c.lpush(key, n)
        if choice < 0.72:
            key = self.key(f"s{rng.randrange(20)}")
            state = model.get(key)
            if state is None or state[0] != "string":
                return {}, lambda c: c.ping()
            return {key: (state[0], state[1], True)}, lambda c: c.expire(key, 100_000)
        if choice < 0.80:
            key = self.key(f"s{rng.randrange(20)}")
            return {key: None}, lambda c: c.delete(key)
        if choice < 0.90:
            a, b, value = self.key("pair-a"), self.key("pair-b"), b"p%d" % n

            def pair(c: redis.Redis) -> None:
                pipe = c.pipeline(transaction=True)
                pipe.set(a, value)
                pipe.set(b, value)
                pipe.execute()

            return {a: ("string", value, False), b: ("string", value, False)}, pair
        key = self.key(f"big{rng.randrange(4)}")
        data = big_value(self.cid, n, rng)
        return {key: ("big", digest(data), False)}, lambda c: c.set(key, data)


def read_state(conn: redis.Redis, key: bytes, kind_hint: str | None) -> Any:
    kind = conn.type(key).decode()
    if kind == "none":
        return None
    ttl = conn.pttl(key) > 0
    if kind == "string":
        data = conn.get(key)
        if kind_hint == "big" or (data is not None and len(data) >= BLOB_THRESHOLD):
            return ("big", digest(data), ttl)
        return ("string", data, ttl)
    if kind == "hash":
        return ("hash", conn.hgetall(key), ttl)
    if kind == "list":
        return ("list", conn.lrange(key, 0, -1), ttl)
    return (kind, None, ttl)


def verify(conn: redis.Redis, workers: list[Worker]) -> list[str]:
    """Check every worker's keys; adopt an in-flight command that did happen."""
    problems = []
    for worker in workers:
        inflight = worker.inflight or {}
        keys = set(worker.model) | set(inflight)
        actual = {key: read_state(conn, key, _hint(worker.model.get(key) or inflight.get(key))) for key in keys}
        for key, states in worker.maybe.items():  # an unacknowledged scratch SET that was kept
            if key in actual and actual[key] in states:
                worker.model[key] = actual[key]
        worker.maybe.clear()
        acked = {key: worker.model.get(key) for key in keys}
        applied = {key: inflight[key] if key in inflight else worker.model.get(key) for key in keys}
        if actual == acked:
            pass
        elif inflight and actual == applied:
            worker.model.update({k: v for k, v in inflight.items() if v is not None})
            for key in [k for k, v in inflight.items() if v is None]:
                worker.model.pop(key, None)
        else:
            bad = sorted(key for key in keys if actual[key] not in (acked[key], applied[key]))
            if not bad:
                bad = sorted(inflight)  # each key fits, but not all the same way: half-applied
            for key in bad[:5]:
                problems.append(f"{key!r}: got {_short(actual[key])}, acknowledged {_short(acked[key])}, "
                                f"in flight {_short(applied[key])}")
        worker.inflight = None
    return problems


def _hint(state: Any) -> str | None:
    return state[0] if state else None


def _short(state: Any) -> str:
    text = repr(state)
    return text if len(text) < 160 else text[:157] + "..."


def run_harness(datadir: Path, cycles: int, max_seconds: float = 1.5, clients: int = 16,
                policy: str = "always", seed: int = 1, log=print, tamper=None, disk: Path | None = None,
                segment_size: int = 512 * 1024) -> dict:
    """``tamper(datadir)`` (tests of the harness itself) runs after each kill, before the restart;
    ``disk``: a filler file on the data directory's (small) file system, kept nearly full;
    ``segment_size``: the log's ``wal-segment-size`` (64 KiB: rollovers under the full disk)."""
    rng = random.Random(seed)
    models = [dict() for _ in range(clients)]
    server = ProcessServer(datadir, "--appendfsync", policy, "--blob-threshold", str(BLOB_THRESHOLD),
                           "--wal-segment-size", str(segment_size), "--save", "",
                           "--auto-aof-rewrite-min-size", "8mb")
    totals = {"cycles": 0, "acked": 0, "refused": 0, "problems": []}
    for cycle in range(cycles):
        server.start()
        conn = redis.Redis(port=server.port, socket_timeout=20)
        workers = [Worker(i, models[i], rng.randrange(1 << 30)) for i in range(clients)]
        stop_bg = threading.Event()
        bg = threading.Thread(target=_bgsaves, args=(server.port, stop_bg, rng.randrange(1 << 30)), daemon=True)
        pressure = None
        if disk is not None:
            pressure = threading.Thread(target=_fill_and_free, args=(disk, stop_bg, rng.randrange(1 << 30)),
                                        daemon=True)
            pressure.start()
        for worker in workers:
            worker.port = server.port
            worker.start()
        bg.start()
        time.sleep(rng.uniform(0.2, max_seconds))
        server.kill9()
        stop_bg.set()
        if pressure is not None:
            pressure.join(10)
            _free(disk)  # restart with room (the kill may have come with the disk full)
        for worker in workers:
            worker.stop_flag.set()
            worker.join(10)
            if worker.error is not None:
                raise AssertionError(f"client {worker.cid}: unexpected reply: {worker.error!r}")
        acked = sum(w.acked for w in workers)
        for worker in workers:
            totals["problems"].extend(f"cycle {cycle}: client {worker.cid} {p}" for p in worker.problems)
        totals["refused"] += sum(w.refused for w in workers)
        if tamper is not None:
            tamper(datadir)
        server.start()
        conn = redis.Redis(port=server.port, socket_timeout=20)
        problems = verify(conn, workers)
        totals["cycles"] += 1
        totals["acked"] += acked
        totals["problems"].extend(f"cycle {cycle}: {p}" for p in problems)
        log(json.dumps({"cycle": cycle, "acked": acked, "refused": sum(w.refused for w in workers),
                        "keys": conn.dbsize(), "problems": len(problems)}))
        server.kill9()
        if totals["problems"]:
            break
    return totals


def _fill_and_free(filler: Path, stop: threading.Event, seed: int) -> None:
    """Keep the disk nearly full: fill it to its last 0-256 KiB, hold 0.1-0.8 s, free 1-24 MiB,
    hold 0.5-2.5 s (writes fill it again meanwhile), and again."""
    rng = random.Random(seed)
    block = b"\0" * 65536
    while not stop.is_set():
        left = rng.choice((0, 4096, 65536, 262144))
        try:
            with open(filler, "ab", buffering=0) as handle:
                while not stop.is_set():
                    handle.write(block)
        except OSError:
            pass  # full
        if left:
            size = filler.stat().st_size
            os.truncate(filler, max(0, size - left))
        if stop.wait(rng.uniform(0.1, 0.8)):
            return
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - rng.randrange(1, 24) * 1024 * 1024))
        if stop.wait(rng.uniform(0.5, 2.5)):  # long enough for the log's 1 s retry to get through
            return


def _free(filler: Path) -> None:
    if filler.exists():
        filler.unlink()


def _bgsaves(port: int, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    conn = no_retry_client(port)
    while not stop.wait(rng.uniform(0.1, 0.6)):
        try:
            conn.bgsave()
        except redis.exceptions.ResponseError:
            pass  # already in progress
        except _CONN_ERRORS:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0, help="longest time before a kill")
    parser.add_argument("--policy", default="always", choices=("always", "everysec", "no"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--dir", default="")
    parser.add_argument("--full-disk", action="store_true", help="on a 128 MB tmpfs kept nearly full (root)")
    parser.add_argument("--segment-size", type=int, default=512 * 1024, help="wal-segment-size in bytes")
    args = parser.parse_args(argv)
    datadir = Path(args.dir or tempfile.mkdtemp(prefix="pion-crash-"))
    if args.full_disk:
        import subprocess

        mount = datadir / "disk"
        mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "none", str(mount)], check=True)
        try:
            totals = run_harness(mount / "data", args.cycles, args.seconds, args.clients, args.policy, args.seed,
                                 disk=mount / "filler", segment_size=args.segment_size)
        finally:
            subprocess.run(["umount", "-l", str(mount)])
    else:
        totals = run_harness(datadir, args.cycles, args.seconds, args.clients, args.policy, args.seed,
                             segment_size=args.segment_size)
    print(json.dumps({"cycles": totals["cycles"], "acked": totals["acked"], "refused": totals["refused"],
                      "problems": len(totals["problems"]), "seed": args.seed, "dir": str(datadir)}))
    for problem in totals["problems"][:20]:
        print("PROBLEM", problem)
    return 1 if totals["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
