"""A separate process that asks Pion for a prefix: ``python -m tests.client.worker RUNTIME URL N [SUFFIX_N]``.

Builds the same tiny model from its seed, calls ``get_or_prefill`` on ``prompt(N)``, runs the
suffix on the cache it got, and prints JSON: the prompt cache's stats and the logits.
"""

from __future__ import annotations

import json
import sys

from pion.client import PionPromptCache
from tests.client import models


def main(argv: list[str]) -> None:
    runtime, url, n = argv[0], argv[1], int(argv[2])
    suffix = models.prompt(int(argv[3]) if len(argv) > 3 else 3, offset=1)
    model = {"hf": models.hf_llama, "mlx": models.mlx_llama, "hf-lfm2": models.hf_lfm2}[runtime]()
    pc = PionPromptCache(model, url=url)
    cache = pc.get_or_prefill(models.prompt(n))
    logits = pc.adapter.forward(suffix, cache)
    print(json.dumps({"stats": pc.stats(), "logits": logits.tolist()}))


if __name__ == "__main__":
    main(sys.argv[1:])
