"""The fault matrix's machinery (issue #26): a workload with a model of what each reply allows,
a runner that injects one syscall fault per point (``DEBUG SYSFAULT``), and the checks.

One *point* is (op, k, errno, mode): the k-th ``op`` call on a file of the data directory,
counted from the moment the fault is armed, fails with ``errno`` (ONCE: that call only; STICKY:
every call from it until disarmed). Per point:

1. ``FLUSHALL`` (acknowledged: the model starts empty), arm the fault.
2. Phase A, the workload (``Workload.run``): single SETs, packets of 10 pipelined SETs, INCR,
   APPEND, SETs cycling over a few keys, SETs of values above ``blob-threshold`` (arena
   writes), a ``BGSAVE`` and a ``BGREWRITEAOF`` (each waited for), enough bytes to roll the
   64 KiB log segment over several times. Every reply is recorded: ``OK``/an integer is
   acknowledged, ``-MISCONF`` refused; anything else fails the point.
3. The server must still answer ``PING`` (``PONG``, or ``-MISCONF`` as Redis answers it while
   writes are refused).
4. If INFO says ``aof_last_write_status:ok`` again while the fault is still armed (a ONCE fault
   the writer's retry got past), the data directory is copied as it is on disk then (the client
   idle, no save running), with the acknowledged state at that moment. INFO said ok: that copy
   must recover every write acknowledged so far (checked last, on a second server).
5. Disarm ("free the fault"); phase B: a probe SET until one is acknowledged (the writer retries
   every second), then more acknowledged SETs of fresh keys; INFO must say ok now.
6. The live keyspace is read (``memory``), the server is SIGKILLed and restarted, and the
   recovered keyspace is read (``recovered``).

What the model allows after the restart, key by key (``Workload.check``):

- A key written by acknowledged writes only ends at its last acknowledged value.
- A write answered ``-MISCONF`` may have been applied in memory (a failed log write: the record
  is held and goes to the log ahead of the next batch) or not (refused before it ran: a write
  error already set, a failed arena write). Either way it is not acknowledged. It may be visible
  after the restart only if something acknowledged after it made it durable: a later
  acknowledged write (whose record follows it in the one log, so it is durable once that one
  is) or a save started after it (a snapshot is of memory; counted as soon as BGSAVE or
  BGREWRITEAOF answered, whether or not it then succeeded: a permissive bound). After phase B
  every refused write has acknowledged writes after it, so there a refused write may be visible
  or not -- but never a value no write made, never a value older than the key's last
  acknowledged one. In the copy taken when INFO said ok (step 4) the writes refused since the
  last acknowledged one must not be visible.
- So: SET keys end at their last acknowledged value or at the value of a refused SET issued
  after it; a unique key written once and refused is absent or exact; the INCR counter is its
  last acknowledged reply plus at most the number of refused INCRs after it; the APPEND string
  holds every acknowledged token in order as its prefix (the last acknowledged reply's length)
  and after it only tokens of refused APPENDs issued later, in order.
- And stronger: the recovered keyspace equals the live one read just before the kill. The last
  reply before the kill was an acknowledged write, and the log is one sequence: everything the
  server had applied before it is durable with it. A refused write the server kept in memory
  must not vanish at the restart, and one it did not apply must not appear.

A point whose k is past the number of ``op`` calls the workload made this time (the counts vary
a little with timing: group commit batches, snapshot slices) injects nothing; the runner reports
``fired`` so the tests count only points that did fail a call.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.servers import ProcessServer

BLOB_THRESHOLD = 16 * 1024
SERVER_ARGS = ("--appendfsync", "always", "--wal-segment-size", "64kb", "--enable-debug-command", "yes",
               "--blob-threshold", str(BLOB_THRESHOLD), "--save", "", "--auto-aof-rewrite-min-size", "1gb")
OPS = ("open", "write", "pwrite", "fsync", "ftruncate", "rename", "unlink")
ERRNOS = ("ENOSPC", "EIO")


def breadcrumbs_outside(datadir: Path) -> tuple[str, ...]:
    """The status file (rewritten every second) and the crash log go next to the data directory:
    they are no durability files, and their writes would make the counts depend on timing."""
    return ("--status-file", str(datadir.parent / f"{datadir.name}.status"),
            "--crash-log", str(datadir.parent / f"{datadir.name}.crash.log"))


def client(port: int) -> redis.Redis:
    """No retries: a retried command could run twice; a dropped connection is a failure here."""
    return redis.Redis(port=port, socket_timeout=30, retry=Retry(NoBackoff(), 0))


def _value(tag: str, n: int, size: int = 1500) -> bytes:
    head = f"{tag}:{n}:".encode()
    return head + b"x" * (size - len(head))


def _big(n: int) -> bytes:
    seed = hashlib.sha256(b"big%d" % n).digest()
    size = (20_000, 40_000, 70_000)[n % 3]
    return (seed * (size // 32 + 1))[:size]


def short(data: Any) -> Any:
    if isinstance(data, bytes) and len(data) > 40:
        return (data[:24] + b"...", len(data), hashlib.sha256(data).hexdigest()[:10])
    return data


@dataclass
class Outcome:
    """One write: its key, the value it sets (SET) or token (APPEND/INCR), acknowledged or not,
    and the reply's integer (INCR's value, APPEND's length)."""

    kind: str  # set | incr | append
    key: bytes
    value: bytes | None
    acked: bool
    reply: int | None = None


@dataclass
class Workload:
    """Phase A's commands and every reply; ``check`` says what a recovered keyspace may hold."""

    #: every key starts with it (one per point: a key of an older point seen after the restart
    #: means this point's FLUSHALL record was lost with the records after it)
    prefix: bytes = b""
    writes: list[Outcome] = field(default_factory=list)
    other_errors: list[str] = field(default_factory=list)
    counter = 0

    # -- issuing ---------------------------------------------------------------------------------

    def _record(self, kind: str, key: bytes, value: bytes | None, reply: Any) -> None:
        if isinstance(reply, redis.ResponseError):
            if not str(reply).startswith("MISCONF"):
                self.other_errors.append(f"{kind} {key!r}: {reply}")
            self.writes.append(Outcome(kind, key, value, False))
            return
        if isinstance(reply, Exception):
            raise reply
        self.writes.append(Outcome(kind, key, value, True, reply if isinstance(reply, int) else None))

    def call(self, conn: redis.Redis, kind: str, key: bytes, value: bytes | None) -> None:
        try:
            if kind == "set":
                reply = conn.set(key, value)
            elif kind == "incr":
                reply = conn.incr(key)
            else:
                reply = conn.append(key, value)
        except redis.ResponseError as exc:
            reply = exc
        self._record(kind, key, value, reply)

    def packet(self, conn: redis.Redis, items: list[tuple[str, bytes, bytes | None]]) -> None:
        """Several writes in one packet: one group-commit batch, which may span a rollover."""
        pipe = conn.pipeline(transaction=False)
        for kind, key, value in items:
            if kind == "set":
                pipe.set(key, value)
            elif kind == "incr":
                pipe.incr(key)
            else:
                pipe.append(key, value)
        for (kind, key, value), reply in zip(items, pipe.execute(raise_on_error=False), strict=True):
            self._record(kind, key, value, reply)

    def _n(self) -> int:
        self.counter += 1
        return self.counter

    def _mixed(self, conn: redis.Redis, rounds: int) -> None:
        for _ in range(rounds):
            n = self._n()
            self.call(conn, "set", self.prefix + b"u:%d" % n, _value("u", n))
            self.call(conn, "incr", self.prefix + b"ctr", None)
            self.call(conn, "append", self.prefix + b"log", b"%d," % n)
            self.call(conn, "set", self.prefix + b"s:%d" % (n % 4), _value("s", n, 300))
            if n % 3 == 0:
                self.call(conn, "set", self.prefix + b"big:%d" % n, _big(n))
            items = []
            for _ in range(10):
                m = self._n()
                items.append(("set", self.prefix + b"u:%d" % m, _value("u", m)))
            self.packet(conn, items)

    def run(self, conn: redis.Redis, between: Any = None) -> None:
        """About 230 KB of log: several 64 KiB rollovers, arena blobs, a BGSAVE, a rewrite.
        ``between(conn)`` runs after each step (the runner waits there for a retry)."""
        steps = [lambda: self._mixed(conn, 3), lambda: self._mixed(conn, 3), lambda: self._save(conn, "bgsave"),
                 lambda: self._mixed(conn, 3), lambda: self._mixed(conn, 2), lambda: self._save(conn, "bgrewriteaof"),
                 lambda: self._mixed(conn, 2), lambda: self._mixed(conn, 2)]
        for step in steps:
            step()
            if between is not None:
                between(conn)

    def _save(self, conn: redis.Redis, command: str) -> None:
        try:
            conn.execute_command(command)
        except redis.ResponseError:
            pass  # a save refused or failing to start is no write, and makes nothing durable
        else:  # a save that started snapshots memory: refused writes before it may be visible
            self.writes.append(Outcome("save", b"", None, True))
        wait_saves(conn)

    # -- checking -------------------------------------------------------------------------------

    def acked_prefix(self) -> Workload:
        """The model as it is now (for the copy taken when INFO said ok)."""
        return Workload(self.prefix, list(self.writes))

    def check(self, recovered: dict[bytes, bytes]) -> list[str]:
        """A refused write after the last acknowledged write or started save is not allowed to be
        visible: it is left out of the model (its key, if nothing else wrote it, must be absent)."""
        problems = [f"unexpected error reply: {e}" for e in self.other_errors]
        barrier = max((i for i, w in enumerate(self.writes) if w.acked), default=-1)
        by_key: dict[bytes, list[Outcome]] = {}
        for i, write in enumerate(self.writes):
            if write.kind != "save" and (write.acked or i < barrier):
                by_key.setdefault(write.key, []).append(write)
        for key, writes in by_key.items():
            got = recovered.get(key)
            kind = writes[0].kind
            if kind == "set":
                problem = _check_set(writes, got)
            elif kind == "incr":
                problem = _check_incr(writes, got)
            else:
                problem = _check_append(writes, got)
            if problem:
                problems.append(f"{key!r}: {problem}")
        strangers = sorted(key for key in recovered if key not in by_key and not key.startswith(self.prefix))
        if strangers:
            problems.append(f"{len(strangers)} keys of an earlier point (its FLUSHALL record lost?), "
                            f"e.g. {strangers[:3]}")
        unbacked = sorted(key for key in recovered if key not in by_key and key.startswith(self.prefix))
        if unbacked:
            problems.append(f"{len(unbacked)} keys only a refused write made, with nothing acknowledged after it, "
                            f"are visible, e.g. {unbacked[:3]}")
        return problems


def _check_set(writes: list[Outcome], got: bytes | None) -> str | None:
    last = max((i for i, w in enumerate(writes) if w.acked), default=-1)
    allowed = [writes[last].value] if last >= 0 else [None]
    allowed += [w.value for w in writes[last + 1:] if not w.acked]
    if got in allowed:
        return None
    why = "lost" if last >= 0 and got is None else "not a value it may hold"
    return (f"{why}: got {short(got)}, last acknowledged {short(allowed[0])}, "
            f"{len(allowed) - 1} refused after it")


def _check_incr(writes: list[Outcome], got: bytes | None) -> str | None:
    last = max((i for i, w in enumerate(writes) if w.acked), default=-1)
    base = writes[last].reply if last >= 0 else 0
    refused_after = sum(1 for w in writes[last + 1:] if not w.acked)
    value = int(got) if got is not None else 0
    if base <= value <= base + refused_after:
        return None
    return f"counter {value}: last acknowledged {base}, {refused_after} refused INCRs after it"


def _check_append(writes: list[Outcome], got: bytes | None) -> str | None:
    last = max((i for i, w in enumerate(writes) if w.acked), default=-1)
    got = got or b""
    length = writes[last].reply if last >= 0 else 0
    head, tail = got[:length], got[length:]
    tokens = [t + b"," for t in head.split(b",")[:-1]]
    acked = [w.value for w in writes[: last + 1] if w.acked]
    if not set(acked) <= set(tokens) or len(head) != length:
        return f"acknowledged APPENDs lost: got {short(got)} (the last acknowledged length was {length})"
    refused_before = {w.value for w in writes[: last + 1] if not w.acked}
    if not set(tokens) <= set(acked) | refused_before:
        return f"a token no write made in {short(head)}"
    later = [w.value for w in writes[last + 1:] if not w.acked]
    rest = [t + b"," for t in tail.split(b",")[:-1]]
    if b",".join(t[:-1] for t in rest) + (b"," if rest else b"") != tail or not _in_order(rest, later):
        return f"after the last acknowledged APPEND: {short(tail)} is not refused tokens in order"
    return None


def _in_order(items: list[bytes], pool: list[bytes]) -> bool:
    it = iter(pool)
    return all(any(x == y for y in it) for x in items)


def wait_saves(conn: redis.Redis, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = conn.info("persistence")
        if not info["rdb_bgsave_in_progress"] and not info["aof_rewrite_in_progress"]:
            return
        time.sleep(0.02)
    raise AssertionError("a save did not finish within 30 s")


def dump(conn: redis.Redis) -> dict[bytes, bytes]:
    return {key: conn.get(key) for key in conn.scan_iter(count=1000)}


@dataclass
class PointResult:
    op: str
    k: int
    errno: str
    mode: str
    fired: int = 0
    refused: int = 0
    acked: int = 0
    ok_copy: bool = False
    problems: list[str] = field(default_factory=list)


class MatrixRunner:
    """One server on ``datadir``; each point leaves a restarted server behind for the next."""

    def __init__(self, datadir: Path) -> None:
        self.datadir = datadir
        self.server = ProcessServer(datadir, *SERVER_ARGS, *breadcrumbs_outside(datadir))
        self.results: list[PointResult] = []

    def start(self) -> MatrixRunner:
        self.server.start(timeout=120)
        return self

    def stop(self) -> None:
        self.server.kill9()

    def count(self) -> tuple[dict[str, int], list[tuple[str, int, str]]]:
        """How many calls of each op the workload makes (no fault armed), and the trace of them."""
        conn = client(self.server.port)
        conn.flushall()
        conn.execute_command("DEBUG", "SYSFAULT", "WATCH")
        Workload().run(conn)
        counts = _counts(conn)
        trace = [_parse_trace(line) for line in conn.execute_command("DEBUG", "SYSFAULT", "TRACE")]
        conn.execute_command("DEBUG", "SYSFAULT", "OFF")
        return counts, trace

    def point(self, op: str, k: int, errno: str, mode: str = "ONCE", tamper: Any = None,
              also: tuple[str, int, str] | None = None) -> PointResult:
        """``also``: a second fault (op, nth, errno), ONCE, its nth counted from the arming (the
        ``ftruncate`` that cuts a failed write back happens only after a first failure);
        ``tamper(datadir)`` (the harness's own test) runs after the kill, before the restart."""
        result = PointResult(op if also is None else f"{op}+{also[0]}", k, errno, mode)
        self.results.append(result)
        conn = client(self.server.port)
        conn.flushall()
        work = Workload(b"p%d:" % len(self.results))
        conn.execute_command("DEBUG", "SYSFAULT", op, k, errno, mode)
        if also is not None:
            conn.execute_command("DEBUG", "SYSFAULT", "ALSO", *also)
        copy: list[tuple[Path, Workload]] = []

        def between(conn: redis.Redis) -> None:
            # after a ONCE fault fired, wait for the writer's retry (INFO ok again) before the
            # workload goes on, and copy the directory as it is on disk the first time INFO says ok
            if mode == "ONCE" and not copy and any(not w.acked for w in work.writes):
                found = self._copy_when_ok(conn, work)
                if found is not None:
                    copy.append(found)

        try:
            work.run(conn, between)
            _alive(conn)
            result.fired = _counts(conn)["injected"]
        finally:
            conn.execute_command("DEBUG", "SYSFAULT", "OFF")
        result.refused = sum(1 for w in work.writes if not w.acked)
        self._phase_b(conn, work)
        result.acked = sum(1 for w in work.writes if w.acked)
        status = conn.info("persistence")["aof_last_write_status"]
        memory = dump(conn)
        self.server.kill9()
        if tamper is not None:
            tamper(self.datadir)
        self.server.start(timeout=120)
        recovered = dump(client(self.server.port))
        result.problems += work.check(recovered)
        if status != "ok":
            result.problems.append(f"INFO said aof_last_write_status:{status} after writes were acknowledged again")
        if recovered != memory:
            result.problems += _diff("the restart differs from the memory before the kill", memory, recovered)
        if copy:
            result.ok_copy = True
            result.problems += [f"INFO said ok, yet on disk then: {p}" for p in self._check_copy(*copy[0])]
        return result

    def _copy_when_ok(self, conn: redis.Redis, work: Workload) -> tuple[Path, Workload] | None:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            if conn.info("persistence")["aof_last_write_status"] == "ok":
                wait_saves(conn)
                target = self.datadir.parent / "ok-copy"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(self.datadir, target, ignore=shutil.ignore_patterns("*.lock", "server.log"))
                return target, work.acked_prefix()
            time.sleep(0.05)
        return None

    def _phase_b(self, conn: redis.Redis, work: Workload) -> None:
        """The fault is free: writes are acknowledged again (after the writer's retry)."""
        deadline = time.monotonic() + 15
        n = 0
        while True:
            n += 1
            before = len(work.writes)
            work.call(conn, "set", work.prefix + b"b:%d" % n, b"after %d" % n)
            if work.writes[before].acked:
                break
            if time.monotonic() > deadline:
                raise AssertionError("writes were still refused 15 s after the fault was freed")
            time.sleep(0.1)
        for _ in range(10):
            n += 1
            work.call(conn, "set", work.prefix + b"b:%d" % n, b"after %d" % n)
        assert all(w.acked for w in work.writes[-10:]), "a write after the fault was freed was refused"

    def _check_copy(self, copy: Path, work: Workload) -> list[str]:
        (copy / "server.log").unlink(missing_ok=True)
        side = ProcessServer(copy, *SERVER_ARGS, *breadcrumbs_outside(copy))
        try:
            side.start(timeout=120)
            recovered = dump(client(side.port))
        except Exception as exc:
            return [f"the copy did not start: {exc!r}: {side.log()[-2000:]}"]
        finally:
            side.kill9()
            shutil.rmtree(copy, ignore_errors=True)
        # only what was acknowledged when INFO said ok must be there; refused writes may be
        return work.check(recovered)


def _parse_trace(line: bytes) -> tuple[str, int, str]:
    op, n, path = line.decode().split(" ", 2)
    return op, int(n), path


def boundaries(trace: list[tuple[str, int, str]], op: str) -> list[int]:
    """The k of each first ``op`` call on a log file or directory: a rollover's open, header
    write and sync, where a batch spans two segments (the issue's failure)."""
    seen: set[str] = set()
    found = []
    for name, n, path in trace:
        if name == op and "/wal" in path and path not in seen:
            seen.add(path)
            found.append(n)
    return found


def _alive(conn: redis.Redis) -> None:
    """The server still answers: PING (Redis answers it -MISCONF too while writes are refused)."""
    try:
        assert conn.ping()
    except redis.ResponseError as exc:
        assert str(exc).startswith("MISCONF"), exc


def _counts(conn: redis.Redis) -> dict[str, int]:
    raw = conn.execute_command("DEBUG", "SYSFAULT", "COUNT")
    if isinstance(raw, list):
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def _diff(what: str, before: dict[bytes, bytes], after: dict[bytes, bytes]) -> list[str]:
    keys = sorted(set(before) | set(after))
    bad = [k for k in keys if before.get(k) != after.get(k)]
    return [f"{what}: {len(bad)} keys, e.g. " + "; ".join(
        f"{k!r} live {short(before.get(k))} recovered {short(after.get(k))}" for k in bad[:4])]


def spread(n: int, samples: int) -> list[int]:
    """First, last and ``samples - 2`` values spread between (all of 1..n when n is small)."""
    if n <= samples:
        return list(range(1, n + 1))
    inner = [1 + round(i * (n - 1) / (samples - 1)) for i in range(samples)]
    return sorted(set(inner))
