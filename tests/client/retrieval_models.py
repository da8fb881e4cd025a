"""Tiny seeded models for the chunk-cache tests, one per RoPE variant the runtimes implement."""

from __future__ import annotations

from tests.client import models

#: transformers ``rope_parameters`` per variant (theta 10000; the tiny head_dim is 16 -> 8 pairs)
HF_ROPE = {
    "default": {},
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 512},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                 "original_max_position_embeddings": 1024},
}

#: mlx-lm ``rope_scaling`` (and ``rope_traditional``) per variant
MLX_ROPE = {
    "default": {},
    "interleaved": {"rope_traditional": True},
    "linear": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    "dynamic": {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 512}},
    "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}},
    "longrope": {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                                  "original_max_position_embeddings": 512}},
}


def hf_rope(variant: str, max_positions: int = 8192, seed: int = 0):
    params = {"rope_theta": 10000.0, **HF_ROPE[variant]}
    return models.hf_llama(seed, max_position_embeddings=max_positions, rope_parameters=params)


def hf_interleaved(kind: str, seed: int = 0):
    """GLM (interleaved pairs, half the head rotated) or Cohere (interleaved, all rotated)."""
    import torch

    torch.manual_seed(seed)
    common = dict(vocab_size=models.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192, pad_token_id=0)
    if kind == "glm":
        from transformers import GlmConfig, GlmForCausalLM

        return GlmForCausalLM(GlmConfig(head_dim=16, partial_rotary_factor=0.5, **common)).eval()
    from transformers import CohereConfig, CohereForCausalLM

    return CohereForCausalLM(CohereConfig(**common)).eval()


def mlx_rope(variant: str, max_positions: int = 8192, seed: int = 0):
    import mlx.core as mx
    from mlx_lm.models import llama

    mx.random.seed(seed)
    fields = {k: v for k, v in models.LLAMA.items() if k not in ("bos_token_id", "eos_token_id")}
    fields.update(max_position_embeddings=max_positions, **MLX_ROPE[variant])
    model = llama.Model(llama.ModelArgs(model_type="llama", **fields))
    mx.eval(model.parameters())
    return model


def hf_gpt2(seed: int = 0):
    """Learned absolute positions, no RoPE: composition must be refused."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=models.VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=1024)).eval()


#: the corpus every chunk-cache test composes: a stub, four chunks of different lengths, a question
STUB = models.prompt(10, offset=9)
CHUNKS = {f"c{i}": models.prompt(14 + 3 * i, offset=i) for i in range(4)}
QUESTION = models.prompt(5, offset=77)


def tiny(runtime: str):
    return models.mlx_llama() if runtime == "mlx" else models.hf_llama()
