"""Vector sets' graph code, compiled kernel against pure Python against usearch, interleaved.

One run, the same data (a Gaussian mixture of ``--n`` vectors, ``--dim`` dimensions, 50
clusters, held-out queries; ground truth by an exact numpy cosine scan), the same HNSW shape (M
``--m``, build EF 200 as VADD's default, search EF 100 as VSIM's default), Q8 in Pion and i8 in
usearch (``--quant NOQUANT``: f32 in both). Two phases, each interleaved in rounds (the systems
take turns on each slice of the inserts and of the queries, the order rotating every round, so
a change in the machine's load hits all of them alike):

- **engine**: in-process, no socket. ``VectorSet.add`` one element at a time and
  ``VectorSet.search`` (COUNT 10), on the pure-Python path and on the compiled kernel (the same
  random levels, so both build the same graph: checked), beside usearch's ``Index.add`` one
  vector at a time and ``Index.search`` with one thread.
- **resp**: two ``pion-server`` processes, one compiled, one with ``PION_PURE=1``; VADDs
  pipelined (batches of ``--batch``) from one writer, VSIM COUNT 10 from one client, beside a
  fresh usearch index built and searched in this process. VSIM is also sent to the compiled
  server from a raw socket client (commands encoded in advance, no client library), which
  separates redis-py's own cost per command from the server's.

Per system: inserts/s, queries/s, recall@10, and the ratio to usearch measured round by round
(the median of the per-round ratios, which the load cannot bias). Prints the load average, a
markdown table and a JSON line; writes ``benchmarks/results/vset_kernel_<n>x<dim>.json`` (not
with ``--smoke`` or a single ``--phase``).

    python benchmarks/bench_vset_kernel.py              # 10,000 x 384
    python benchmarks/bench_vset_kernel.py --smoke      # CI-sized
    python benchmarks/bench_vset_kernel.py --phase resp --no-pure --baseline-src ../other/src
                                                        # before/after: another tree's server beside this one
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.support.raw_resp import RawClient, encode  # noqa: E402
from tests.support.servers import ProcessServer  # noqa: E402

from pion.vector.vset import kernel, quant  # noqa: E402
from pion.vector.vset.graph import Graph  # noqa: E402
from pion.vector.vset.vectorset import DEFAULT_BUILD_EF, DEFAULT_SEARCH_EF, VectorSet  # noqa: E402

QUANTS = {"Q8": (quant.Q8, "i8"), "NOQUANT": (quant.F32, "f32")}


def mixture(n: int, dim: int, seed: int, centers: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(centers), n)
    return (centers[picks] + 0.6 * rng.normal(size=(n, dim))).astype(np.float32)


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return [set(np.argsort(-row)[:k].tolist()) for row in q @ unit.T]


def recall(found: list[list[int]], truth: list[set[int]]) -> float:
    return float(np.mean([len(set(f) & t) / len(t) for f, t in zip(found, truth, strict=True)]))


# -- the systems: each inserts a slice of ids and answers a slice of queries ----------------------


class PionEngine:
    """A VectorSet in this process on one of the two paths."""

    def __init__(self, compiled: bool, dim: int, qt: int, m: int, levels: list[int]) -> None:
        self.compiled, self.levels = compiled, levels
        self.vs = VectorSet(dim, qt, m)

    def insert(self, data: np.ndarray, ids: range) -> None:
        kernel.use(self.compiled)
        vs, levels = self.vs, self.levels
        for i in ids:
            vs.add(b"e%d" % i, data[i], None, DEFAULT_BUILD_EF, level=levels[i])

    def query(self, queries: np.ndarray) -> list[list[int]]:
        kernel.use(self.compiled)
        vs, out = self.vs, []
        for q in queries:
            unit, _ = vs.unit(q)
            hits = vs.search(unit, 10, DEFAULT_SEARCH_EF, None, 0, False)
            out.append([int(vs.names[s][1:]) for _, s, _ in hits])
        return out


class USearch:
    """usearch in this process, one vector per add and one query per search, one thread."""

    def __init__(self, dim: int, dtype: str, m: int) -> None:
        from usearch.index import Index

        self.index = Index(ndim=dim, metric="cos", dtype=dtype, connectivity=m,
                           expansion_add=DEFAULT_BUILD_EF, expansion_search=DEFAULT_SEARCH_EF)

    def insert(self, data: np.ndarray, ids: range) -> None:
        add = self.index.add
        for i in ids:
            add(i, data[i], threads=1)

    def query(self, queries: np.ndarray) -> list[list[int]]:
        search = self.index.search
        return [search(q, 10, threads=1).keys.tolist() for q in queries]


class PionServer:
    """A pion-server process: VADDs pipelined from one writer, VSIMs from one client."""

    def __init__(self, srv: ProcessServer, quant_opt: str, batch: int, nothread: bool = False) -> None:
        self.srv, self.quant_opt, self.batch = srv, quant_opt, batch
        self.extra = ["NOTHREAD"] if nothread else []
        self.r = redis.Redis(port=srv.port, socket_timeout=600, protocol=2)

    def insert(self, data: np.ndarray, ids: range) -> None:
        for lo in range(ids.start, ids.stop, self.batch):
            pipe = self.r.pipeline(transaction=False)
            for i in range(lo, min(lo + self.batch, ids.stop)):
                pipe.execute_command("VADD", "vs", "FP32", data[i].tobytes(), f"e{i}", self.quant_opt)
            pipe.execute()

    def query(self, queries: np.ndarray) -> list[list[int]]:
        return [[int(name[1:]) for name in self.r.execute_command("VSIM", "vs", "FP32", q.tobytes(), "COUNT", 10,
                                                                  *self.extra)]
                for q in queries]


class RawServer(PionServer):
    """The same server from a client with no library: commands encoded in advance and sent over a
    plain socket (``tests/support/raw_resp.py``), so the rate is the server's, without redis-py's
    own cost per command; VADD pipelined as above, VSIM one at a time."""

    def __init__(self, srv: ProcessServer, quant_opt: str, batch: int) -> None:
        super().__init__(srv, quant_opt, batch)
        self.raw = RawClient(srv.port)

    def insert(self, data: np.ndarray, ids: range) -> None:
        payloads = [encode("VADD", "vs", "FP32", data[i].tobytes(), f"e{i}", self.quant_opt) for i in ids]
        for lo in range(0, len(payloads), self.batch):
            self.raw.pipeline(payloads[lo:lo + self.batch])

    def query(self, queries: np.ndarray) -> list[list[int]]:
        payloads = [encode("VSIM", "vs", "FP32", q.tobytes(), "COUNT", 10) for q in queries]
        call = self.raw.call
        return [[int(name[1:]) for name in call(p)] for p in payloads]


# -- interleaving ------------------------------------------------------------------------------------


def interleaved(systems: dict, data: np.ndarray, queries: np.ndarray, rounds: int,
                query_only: dict | None = None) -> dict[str, dict]:
    """Insert and then query in ``rounds`` slices, the systems taking turns on each;
    ``query_only`` systems (another way to query one of them) join the query rounds."""
    names = list(systems)
    stats = {n: {"insert_s": [], "query_s": [], "found": []} for n in [*names, *(query_only or {})]}
    bounds = np.linspace(0, len(data), rounds + 1).astype(int)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            systems[name].insert(data, range(bounds[r], bounds[r + 1]))
            stats[name]["insert_s"].append(time.perf_counter() - t0)
        print(f"  inserted {bounds[r + 1]}/{len(data)}: " + ", ".join(
            f"{n} {(bounds[r + 1] - bounds[r]) / stats[n]['insert_s'][-1]:.0f}/s" for n in names), flush=True)
    qbounds = np.linspace(0, len(queries), rounds + 1).astype(int)
    systems = {**systems, **(query_only or {})}
    names = list(systems)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        part = queries[qbounds[r]: qbounds[r + 1]]
        for name in order:
            t0 = time.perf_counter()
            stats[name]["found"].extend(systems[name].query(part))
            stats[name]["query_s"].append(time.perf_counter() - t0)
    return stats


def summarize(stats: dict[str, dict], n: int, nq: int, truth: list[set[int]], peer: str, phase: str) -> list[dict]:
    rows = []
    for name, s in stats.items():
        q_ratio = [s2 / s1 for s1, s2 in zip(s["query_s"], stats[peer]["query_s"], strict=True)]
        row = {"phase": phase, "system": name, "insert_per_s": None, "insert_vs_usearch": None,
               "query_per_s": round(nq / sum(s["query_s"])), "query_vs_usearch": round(statistics.median(q_ratio), 3),
               "recall@10": round(recall(s["found"], truth), 4)}
        if s["insert_s"]:
            ins_ratio = [s2 / s1 for s1, s2 in zip(s["insert_s"], stats[peer]["insert_s"], strict=True)]
            row["insert_per_s"] = round(n / sum(s["insert_s"]))
            row["insert_vs_usearch"] = round(statistics.median(ins_ratio), 3)
        rows.append(row)
    return rows


def wait_for_log(srv: ProcessServer, want: str, timeout: float = 10.0) -> None:
    """The server's start-up log names the graph code it runs: make sure it is the one meant."""
    deadline = time.monotonic() + timeout
    while want not in srv.log():
        if time.monotonic() > deadline:
            sys.exit(f"the server on port {srv.port} does not run the {want}:\n{srv.log()[-2000:]}")
        time.sleep(0.1)


def same_graph(a: VectorSet, b: VectorSet) -> bool:
    ga, gb = a.graph, b.graph
    arrays = all(np.array_equal(getattr(ga, f), getattr(gb, f)) for f in ("rows", "levels", "links0", "n0"))
    return arrays and ga.upper.keys() == gb.upper.keys() and all(
        np.array_equal(v, gb.upper[k]) for k, v in ga.upper.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--batch", type=int, default=500, help="VADDs per pipeline")
    ap.add_argument("--quant", default="Q8", choices=sorted(QUANTS))
    ap.add_argument("--phase", default="both", choices=["both", "engine", "resp"])
    ap.add_argument("--no-pure", action="store_true", help="resp: leave out the pure-Python server (faster)")
    ap.add_argument("--baseline-src", default="", metavar="DIR",
                    help="resp: also a compiled server running another tree's code (its src/ directory, "
                         "kernel built there), interleaved with this one: a before/after in one run")
    ap.add_argument("--smoke", action="store_true", help="CI size: 1,500 x 16, 40 queries, 4 rounds")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.dim, args.queries, args.rounds = 1500, 16, 40, 4
    if not kernel.available():
        sys.exit("the compiled kernel is not built: python setup.py build_ext --inplace")
    qt, udtype = QUANTS[args.quant]
    load_before = os.getloadavg()
    centers = np.random.default_rng(0).normal(size=(50, args.dim))
    data = mixture(args.n, args.dim, 1, centers)
    queries = mixture(args.queries, args.dim, 2, centers)
    truth = exact_top(data, queries, 10)
    random.seed(7)
    levels = [Graph.random_level() for _ in range(args.n)]
    rows: list[dict] = []
    identical = None
    if args.phase in ("both", "engine"):
        print(f"engine: {args.n} x {args.dim} {args.quant}, M {args.m}, interleaved in {args.rounds} rounds", flush=True)
        systems = {"pion pure": PionEngine(False, args.dim, qt, args.m, levels),
                   "pion compiled": PionEngine(True, args.dim, qt, args.m, levels),
                   "usearch": USearch(args.dim, udtype, args.m)}
        stats = interleaved(systems, data, queries, args.rounds)
        rows += summarize(stats, args.n, args.queries, truth, "usearch", "engine")
        identical = same_graph(systems["pion pure"].vs, systems["pion compiled"].vs)
        print(f"  pure and compiled built the same graph: {identical}", flush=True)
        kernel.use(True)
    if args.phase in ("both", "resp"):
        print(f"resp: two pion-server processes, VADD pipelined by {args.batch}, interleaved", flush=True)
        # the servers run this checkout's code (and its built kernel), not whatever is installed
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
        with tempfile.TemporaryDirectory() as tmp:
            base = ["--appendfsync", "no"]
            compiled_srv = ProcessServer(Path(tmp) / "compiled", *base).start()
            pure_srv = ProcessServer(Path(tmp) / "pure", *base)
            baseline_srv = ProcessServer(Path(tmp) / "baseline", *base)
            try:
                expected = [(compiled_srv, "compiled HNSW kernel")]
                if not args.no_pure:
                    os.environ[kernel.PURE_ENV] = "1"
                    try:
                        pure_srv.start()
                    finally:
                        os.environ.pop(kernel.PURE_ENV, None)
                    expected.append((pure_srv, "pure-Python HNSW"))
                if args.baseline_src:
                    mine = os.environ["PYTHONPATH"]
                    os.environ["PYTHONPATH"] = str(Path(args.baseline_src).resolve())
                    try:
                        baseline_srv.start()
                    finally:
                        os.environ["PYTHONPATH"] = mine
                    expected.append((baseline_srv, "compiled HNSW kernel"))
                for srv, want in expected:
                    wait_for_log(srv, want)
                systems = {}
                if not args.no_pure:
                    systems["pion-server pure"] = PionServer(pure_srv, args.quant, args.batch)
                if args.baseline_src:
                    systems["pion-server compiled, baseline tree"] = PionServer(baseline_srv, args.quant, args.batch)
                systems["pion-server compiled"] = PionServer(compiled_srv, args.quant, args.batch)
                systems["usearch"] = USearch(args.dim, udtype, args.m)
                # VSIM on a large set runs in a worker thread (as Redis's); NOTHREAD on the loop
                nothread = {"pion-server compiled NOTHREAD": PionServer(compiled_srv, args.quant, args.batch, True),
                            "pion-server compiled, raw RESP client": RawServer(compiled_srv, args.quant, args.batch)}
                stats = interleaved(systems, data, queries, args.rounds, nothread)
                rows += summarize(stats, args.n, args.queries, truth, "usearch", "resp")
            finally:
                compiled_srv.stop()
                pure_srv.stop()
                baseline_srv.stop()
    load_after = os.getloadavg()
    summary = {"n": args.n, "dim": args.dim, "quant": args.quant, "m": args.m, "build_ef": DEFAULT_BUILD_EF,
               "search_ef": DEFAULT_SEARCH_EF, "queries": args.queries, "rounds": args.rounds,
               "same_graph_pure_and_compiled": identical,
               "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
               "rows": rows}
    print(json.dumps(summary))
    print(f"\nvector sets {args.n} x {args.dim} {args.quant} (usearch {udtype}), M {args.m}, build EF "
          f"{DEFAULT_BUILD_EF}, search EF {DEFAULT_SEARCH_EF}; load average {load_before[0]:.2f} -> "
          f"{load_after[0]:.2f}\n")
    print("| phase | system | inserts/s | x usearch | VSIM/s | x usearch | recall@10 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['phase']} | {r['system']} | {r['insert_per_s'] or '-'} | {r['insert_vs_usearch'] or '-'} | "
              f"{r['query_per_s']} | {r['query_vs_usearch']} | {r['recall@10']} |")
    print("\n(x usearch: the median over the rounds of usearch's time / this system's time on the same slice)")
    if args.smoke or args.phase != "both" or args.no_pure or args.baseline_src:
        return  # the published results are of a whole run
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / f"vset_kernel_{args.n}x{args.dim}.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
