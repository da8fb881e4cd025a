"""Tiny models for the client tests: a few layers and a small hidden size, built from a seed.

Both runtimes get a plain Llama and a hybrid (LFM2: short-conv layers with recurrent state
interleaved with attention layers), so every adapter path runs in well under a second.
"""

from __future__ import annotations

VOCAB = 300

LLAMA = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rope_theta=10000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
LFM2_LAYERS = ["conv", "full_attention", "conv", "full_attention"]


def hf_llama(seed: int = 0, dtype: str = "float32", **overrides):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**LLAMA, **overrides})).eval()
    return model.to(getattr(torch, dtype))


def hf_lfm2(seed: int = 0):
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(seed)
    config = Lfm2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, layer_types=LFM2_LAYERS, block_ff_dim=128,
                        block_auto_adjust_ff_dim=False, max_position_embeddings=1024)
    return Lfm2ForCausalLM(config).eval()


def mlx_llama(seed: int = 0, dtype: str = "float32"):
    import mlx.core as mx
    from mlx_lm.models import llama

    mx.random.seed(seed)
    fields = {k: v for k, v in LLAMA.items() if k not in ("bos_token_id", "eos_token_id", "max_position_embeddings")}
    model = llama.Model(llama.ModelArgs(model_type="llama", **fields))
    model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())
    return model


def mlx_lfm2(seed: int = 0):
    import mlx.core as mx
    from mlx_lm.models import lfm2

    mx.random.seed(seed)
    args = lfm2.ModelArgs(model_type="lfm2", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, norm_eps=1e-5,
                          conv_bias=False, conv_L_cache=3, block_dim=64, block_multiple_of=16,
                          block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False, block_ff_dim=128,
                          layer_types=LFM2_LAYERS)
    model = lfm2.Model(args)
    mx.eval(model.parameters())
    return model


def prompt(n: int, offset: int = 0) -> list[int]:
    """``n`` deterministic token ids below the vocab size, varied by ``offset``."""
    return [(7 * i + 3 + 11 * offset) % (VOCAB - 10) + 5 for i in range(n)]


def hf_mamba(seed: int = 0):
    """A pure-recurrent model: every cache slot is recurrent state (no attention layer)."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(seed)
    config = MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2,
                         conv_kernel=4, time_step_rank=8)
    return MambaForCausalLM(config).eval()


def mlx_mamba(seed: int = 0):
    """mlx-lm's Mamba: only ``ArraysCache`` slots."""
    import mlx.core as mx
    from mlx_lm.models import mamba

    mx.random.seed(seed)
    args = mamba.ModelArgs(model_type="mamba", vocab_size=VOCAB, hidden_size=64, intermediate_size=128, state_size=8,
                           num_hidden_layers=2, conv_kernel=4, use_bias=False, use_conv_bias=True, time_step_rank=8)
    model = mamba.Model(args)
    mx.eval(model.parameters())
    return model
