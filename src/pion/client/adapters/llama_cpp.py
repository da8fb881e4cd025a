"""Adapter for llama-cpp-python: a ``Llama``'s identity and its ``LlamaState`` as a Pion blob.

llama.cpp keeps its K/V inside the C context; llama-cpp-python exposes it only as a whole
``LlamaState`` (``Llama.save_state``/``load_state``: the evaluated token ids, the context's
serialized memory, the seed, and a ``scores`` array). So Pion stores llama.cpp prefixes as
opaque state blobs (``SSM.PREFIX.STORE``), registered like any prefix (block chain, manifest,
and one tiny V-store layer of the token ids: see ``LAYOUT``), and ``PionLlamaCache``
(``llama_cache.py``) serves them to ``Llama.set_cache``.

What makes a state wrong for another ``Llama`` goes into the fingerprint: the SHA-256 of the
GGUF file (every weight), the llama-cpp-python version (the state's byte format), and the context
parameters that shape the stored K/V (K/V cache types, RoPE settings, context size, batch size,
``logits_all``, LoRA). A state made under any other value is never loaded (fail closed).

``scores``: without ``logits_all`` llama-cpp-python never writes that array (sampling reads the
context's own logits), so its content is meaningless and the blob keeps none; ``load_state``
then gets a one-row zero array, which it broadcasts. With ``logits_all=True`` the rows are kept
exactly. The token ids are stored for the evaluated tokens only and padded back to ``n_ctx``.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from pion.client.adapters.layout import CacheLayout, require
from pion.client.state_blob import pack_state, unpack_state

RUNTIME = "llama.cpp"
STATE_TYPE = "LlamaState"
#: slot 0: a one-wide V-store "layer" holding the key's token ids (fp32, exact below 2**24) on
#: both sides, so the server's completeness, LOOKUP, MATCH, eviction and durability rules apply
#: to a state prefix unchanged (they are defined over V-store rows); slot 1: the state blob
LAYOUT = CacheLayout(RUNTIME, 2, (0,), (1,), ((1, 1, 1),), "float32")
SCHEMA = {"k": ["fp32"], "v": ["fp32"]}


def token_rows(ids) -> list[tuple[np.ndarray, np.ndarray]]:
    """The token-id layer of a state prefix (see ``LAYOUT``)."""
    column = np.asarray(ids, dtype=np.float32).reshape(-1, 1)
    if len(ids) and int(np.max(ids)) >= 1 << 24:
        raise ValueError("token ids of 2**24 and above do not fit the token-id layer")
    return [(column, column)]
_GGUF_HASHES: dict[tuple, str] = {}


def file_sha256(path: str) -> str:
    """SHA-256 of a file, remembered per (path, size, mtime) for this process."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _GGUF_HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        _GGUF_HASHES[key] = digest.hexdigest()
    return _GGUF_HASHES[key]


class LlamaCppAdapter:
    """Fingerprint and state (de)serialization for one ``llama_cpp.Llama``."""

    runtime = RUNTIME
    layout = LAYOUT

    def __init__(self, llama, model_id: str | None = None) -> None:
        self.llama_cpp = require("llama_cpp", "llama")
        self.llama = llama
        metadata = getattr(llama, "metadata", None) or {}
        self.model_id = model_id or metadata.get("general.name") or os.path.basename(llama.model_path)

    def fingerprint(self) -> dict:
        """What makes this ``Llama``'s states unusable by another."""
        llama, params = self.llama, self.llama.context_params
        lora = getattr(llama, "lora_path", None)
        return {
            "runtime": RUNTIME, "class": type(llama).__name__, "model_id": self.model_id,
            "gguf_sha256": file_sha256(llama.model_path), "llama_cpp_python": self.llama_cpp.__version__,
            "n_ctx": int(llama.n_ctx()), "n_batch": int(llama.n_batch), "logits_all": bool(llama._logits_all),
            "type_k": int(params.type_k), "type_v": int(params.type_v),
            "rope": [float(params.rope_freq_base), float(params.rope_freq_scale), int(params.rope_scaling_type),
                     float(params.yarn_ext_factor), float(params.yarn_attn_factor)],
            "embeddings": bool(params.embeddings), "flash_attn_type": int(params.flash_attn_type),
            "swa_full": bool(params.swa_full), "n_seq_max": int(params.n_seq_max), "kv_unified": bool(params.kv_unified),
            "lora": [os.path.basename(lora), file_sha256(lora), float(getattr(llama, "lora_scale", 1.0))] if lora else None,
        }

    # -- LlamaState <-> blob -------------------------------------------------------------

    def pack(self, state) -> bytes:
        """A ``LlamaState`` as a Pion state blob (see the module docstring for ``scores``)."""
        n = int(state.n_tokens)
        scores = np.asarray(state.scores, dtype=np.float32) if self.llama._logits_all else None
        raw = np.frombuffer(state.llama_state, dtype=np.uint8, count=int(state.llama_state_size))
        meta = {"n_tokens": n, "seed": int(state.seed), "llama_state_size": int(state.llama_state_size),
                "n_vocab": int(self.llama.n_vocab())}
        arrays = [("input_ids", np.asarray(state.input_ids[:n], dtype="<i4")), ("scores", scores), ("llama_state", raw)]
        return pack_state(STATE_TYPE, arrays, meta)

    def unpack(self, blob: bytes):
        """The ``LlamaState`` a blob holds (ValueError if it is not one, or not for this context)."""
        type_name, arrays, meta = unpack_state(blob)
        if type_name != STATE_TYPE:
            raise ValueError(f"state blob is a {type_name}, not a {STATE_TYPE}")
        named = dict(arrays)
        n, n_ctx = meta["n_tokens"], len(self.llama.input_ids)
        if n > n_ctx or meta["n_vocab"] != self.llama.n_vocab():
            raise ValueError(f"state of {n} tokens / vocab {meta['n_vocab']} does not fit this context")
        input_ids = np.zeros(n_ctx, dtype=np.intc)
        input_ids[:n] = named["input_ids"]
        scores = named["scores"]
        if scores is None:
            scores = np.zeros((1, meta["n_vocab"]), dtype=np.single)
        raw = named["llama_state"]
        if raw.nbytes != meta["llama_state_size"]:
            raise ValueError("state blob is truncated")
        return self.llama_cpp.llama.LlamaState(input_ids=input_ids, scores=scores, n_tokens=n,
                                               llama_state=memoryview(raw), llama_state_size=raw.nbytes,
                                               seed=meta["seed"])


def load_smollm2_gguf(**llama_options):
    """The packaged SmolLM2-135M-Instruct GGUF in llama.cpp (``pion.client.real_model.gguf_path``)."""
    from pion.client.real_model import gguf_path

    llama_cpp = require("llama_cpp", "llama")
    llama_options.setdefault("verbose", False)
    return llama_cpp.Llama(str(gguf_path()), **llama_options)
