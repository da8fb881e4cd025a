"""The built-in demo model: shaped like SmolLM2-135M, random weights from a fixed seed.

Why: ``pion demo`` and the benchmarks must run on a fresh machine with nothing downloaded. The
model has SmolLM2-135M's Llama architecture (30 layers, 9 heads, 3 K/V heads, head dim 64,
hidden 576, intermediate 1536, tied embeddings) and a byte-level tokenizer (256 byte tokens +
3 specials), so its prefill cost and K/V size per token match the real model. Its weights are
random, so the text it writes is meaningless; the caching it demonstrates is not.

The files (``config.json``, ``model.safetensors`` in bf16, ``pion_tokenizer.json``) are written
once with numpy, under ``~/.cache/pion/`` (or ``$PION_CACHE_DIR``), atomically, and loaded by
the transformers and mlx-lm adapters alike. This module imports neither runtime.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np

DEMO_MODEL_ID = "pion-demo/smollm2-135m-shape"
DEMO_SEED = 0
FORMAT_VERSION = 1
BOS, EOS, PAD = 256, 257, 258

DEMO_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 259,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "torch_dtype": "bfloat16",
    "_name_or_path": DEMO_MODEL_ID,
}

FILLER = (
    "The lighthouse keeper wrote in the log each night. The tide came in at nine and went out at "
    "three; the lamp was trimmed twice; a schooner passed to the north, heading for the harbour. "
    "Records of the weather, the ships and the oil used were kept in a bound book on the desk. "
)


class ByteTokenizer:
    """Bytes are tokens 0..255; ``<bos>`` 256, ``<eos>`` 257, ``<pad>`` 258."""

    bos_token_id, eos_token_id, pad_token_id = BOS, EOS, PAD
    vocab_size = 259
    pion_fingerprint = "pion-byte-tokenizer-v1|bos=256|eos=257|pad=258"

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        return ([BOS] if add_bos else []) + list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(t) for t in ids if int(t) < 256).decode("utf-8", errors="replace")


def demo_prompt(n_tokens: int, seed: int = 0) -> list[int]:
    """Exactly ``n_tokens`` ids: one ``<bos>`` then document-style filler (varied by ``seed``)."""
    if n_tokens < 1:
        raise ValueError("n_tokens must be >= 1")
    text = f"Log book {seed}. " + FILLER * (n_tokens // len(FILLER) + 2)
    return ByteTokenizer().encode(text)[:n_tokens]


def cache_root() -> Path:
    return Path(os.environ.get("PION_CACHE_DIR") or Path.home() / ".cache" / "pion")


#: other built-in shapes (random weights, byte tokenizer), by name: ``builtin:<name>``
SHAPES = {
    "smollm2-135m-shape": DEMO_CONFIG,
    "llama-3.2-1b-shape": {
        **DEMO_CONFIG, "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "rope_theta": 500000.0, "max_position_embeddings": 131072, "_name_or_path": "pion-demo/llama-3.2-1b-shape",
    },
}


def demo_model_dir(shape: str = "smollm2-135m-shape") -> Path:
    return cache_root() / f"{shape}-v{FORMAT_VERSION}-seed{DEMO_SEED}"


def ensure_demo_model(progress=None, shape: str = "smollm2-135m-shape") -> Path:
    """The built-in model's directory, created once (the demo model: a few seconds, about 215 MB)."""
    path = demo_model_dir(shape)
    if (path / "model.safetensors").exists():
        return path
    if progress:
        progress(f"creating the {shape} weights once, in {path.parent}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{shape}-", dir=path.parent))
    write_model_dir(tmp, SHAPES[shape], DEMO_SEED)
    try:
        tmp.rename(path)
    except OSError:  # another process won the race; its copy is identical
        for child in tmp.iterdir():
            child.unlink()
        tmp.rmdir()
    return path


def write_model_dir(path: Path, config: dict, seed: int) -> Path:
    """A model directory the adapters' ``load_demo`` read: config, random bf16 weights, byte tokenizer."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "pion_tokenizer.json").write_text(json.dumps({"type": "byte", "fingerprint": ByteTokenizer.pion_fingerprint}))
    write_safetensors(path / "model.safetensors", random_llama_weights(config, seed))
    return path


def is_demo_format(path) -> bool:
    return (Path(path) / "pion_tokenizer.json").exists()


def llama_weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Hugging Face parameter names and shapes of a Llama model with config ``cfg``."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        }
    shapes["model.norm.weight"] = (h,)
    if not cfg.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    return shapes


def random_llama_weights(cfg: dict, seed: int, std: float = 0.02) -> dict[str, np.ndarray]:
    """Normal(0, std) matrices and unit norms, in bf16, deterministic for ``seed``."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in llama_weight_shapes(cfg).items():
        if len(shape) == 1:
            arr = np.ones(shape, np.float32)
        else:
            arr = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        out[name] = arr.astype(ml_dtypes.bfloat16)
    return out


_ST_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A minimal safetensors writer (8-byte header length, JSON header, raw data)."""
    header, offset = {}, 0
    for name, arr in tensors.items():
        size = arr.nbytes
        header[name] = {"dtype": _ST_DTYPES[arr.dtype.name], "shape": list(arr.shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for arr in tensors.values():
            fh.write(np.ascontiguousarray(arr).tobytes())
