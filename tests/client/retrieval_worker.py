"""Another process composing chunks from Pion: ``python -m tests.client.retrieval_worker RUNTIME URL ORDER [RATIO]``.

Builds the same tiny model from its seed, sets the shared stub (a hit: nothing is encoded),
composes the comma-separated chunk ids with ``prepare_multi``, runs the question, and prints
JSON: the cache's stats, the report and the logits; with RATIO, also the logits of the same
composition repaired by CacheBlend at that ratio (``repaired_logits``).
"""

from __future__ import annotations

import json
import sys

from pion.client.retrieval import HybridRetrievalCache, Repair
from tests.client.retrieval_models import QUESTION, STUB, tiny


def main(argv: list[str]) -> None:
    runtime, url, order = argv[0], argv[1], argv[2].split(",")
    rc = HybridRetrievalCache(tiny(runtime), backend="pion", url=url)
    rc.set_shared_stub(STUB)
    cache, suffix = rc.prepare_multi(order, QUESTION)
    out = {"logits": rc.adapter.forward(suffix, cache).tolist()}
    out["report"] = {k: v for k, v in rc.last_prepare.items() if k in ("chunks", "rotated_tokens", "context_tokens")}
    out["stats"] = rc.stats()
    if len(argv) > 3:
        cache, suffix = rc.prepare_multi(order, QUESTION, repair=Repair.cacheblend(float(argv[3])))
        out["repaired_logits"] = rc.adapter.forward(suffix, cache).tolist()
        out["repaired_tokens"] = rc.stats()["repaired_tokens"]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
