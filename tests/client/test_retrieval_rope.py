"""Exact re-rotation: K moved to a new position equals a fresh prefill there, for every RoPE variant.

The fresh prefill places the same tokens at ``offset...`` with nothing before them (so every
layer's pre-RoPE K is the same, and only the rotation differs). The rotated K of *every* layer
must match within 2e-5 relative (max |diff| / max |K|), at a small and a large offset.
"""

from __future__ import annotations

import numpy as np
import pytest

from pion.client.adapters import adapter_for
from pion.client.retrieval import RopeSpec, RotationRefused
from pion.client.retrieval.compose import Composer, rel_error
from pion.client.retrieval.runtime import runtime_for
from tests.client import models
from tests.client.retrieval_models import HF_ROPE, MLX_ROPE, hf_gpt2, hf_interleaved, hf_rope, mlx_rope

TOL = 2e-5
OFFSETS = (7, 900)


def rotation_errors(model, offsets=OFFSETS, n: int = 24) -> tuple[dict, list[float]]:
    adapter = adapter_for(model)
    runtime = runtime_for(adapter)
    heads = adapter.layout.heads[0][0]
    ids = models.prompt(n)
    base = adapter.export(runtime.prefill_at(ids, 0))[0]
    errors = []
    for offset in offsets:
        fresh = adapter.export(runtime.prefill_at(ids, offset))[0]
        for (k0, v0), (k1, v1) in zip(base, fresh, strict=True):
            errors.append(rel_error(runtime.rope.rotate(k0, heads, np.arange(n), np.arange(offset, offset + n)), k1))
            assert rel_error(v0, v1) < TOL  # V does not depend on position
    return runtime.rope.describe(), errors


@pytest.mark.hf
@pytest.mark.parametrize("variant", sorted(HF_ROPE))
def test_hf_rotated_k_equals_a_fresh_prefill_at_the_offset(variant):
    described, errors = rotation_errors(hf_rope(variant))
    assert described["pairs"] == "split-half" and described["rotated_dims"] == 16
    assert max(errors) < TOL, errors


@pytest.mark.hf
@pytest.mark.parametrize("kind, rotated", [("glm", 8), ("cohere", 16)])
def test_hf_interleaved_and_partial_rope(kind, rotated):
    described, errors = rotation_errors(hf_interleaved(kind))
    assert described["pairs"] == "interleaved" and described["rotated_dims"] == rotated
    assert max(errors) < TOL, errors


@pytest.mark.mlx
@pytest.mark.parametrize("variant", sorted(MLX_ROPE))
def test_mlx_rotated_k_equals_a_fresh_prefill_at_the_offset(variant):
    pytest.importorskip("mlx_lm")
    described, errors = rotation_errors(mlx_rope(variant))
    assert described["pairs"] == ("interleaved" if variant == "interleaved" else "split-half")
    assert max(errors) < TOL, errors


@pytest.mark.hf
def test_the_runtimes_own_angles_beat_the_naive_formula_at_large_offsets():
    """``angle = inv_freq * delta`` is exact math but not what the runtime rounds: at offset
    4,000 it misses the fresh prefill by more than 2e-5, the probed tables do not."""
    model = hf_rope("default")
    adapter, runtime = adapter_for(model), runtime_for(adapter_for(model))
    n, offset, heads = 16, 4000, adapter.layout.heads[0][0]
    base = adapter.export(runtime.prefill_at(models.prompt(n), 0))[0][0][0]
    fresh = adapter.export(runtime.prefill_at(models.prompt(n), offset))[0][0][0]
    ours = runtime.rope.rotate(base, heads, np.arange(n), np.arange(offset, offset + n))
    naive = naive_split_half(base, heads, 16, 10000.0, offset)
    assert rel_error(ours, fresh) < TOL
    assert rel_error(naive, fresh) > TOL


def naive_split_half(k: np.ndarray, heads: int, dim: int, theta: float, delta: int) -> np.ndarray:
    """The reference system's rotation: ``inv_freq_i = theta^(-2i/dim)``, angle = inv_freq * delta (fp32)."""
    inv_freq = (theta ** (-np.arange(0, dim, 2, dtype=np.float32) / dim)).astype(np.float32)
    angle = (inv_freq * np.float32(delta)).astype(np.float32)
    cos, sin = np.cos(np.concatenate([angle, angle])), np.sin(np.concatenate([angle, angle]))
    x = k.astype(np.float32).reshape(k.shape[0], heads, dim)
    rotated_half = np.concatenate([-x[..., dim // 2:], x[..., : dim // 2]], axis=-1)
    return (x * cos + rotated_half * sin).reshape(k.shape)


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.hf
@pytest.mark.parametrize("variant, limit", [("dynamic", 256), ("longrope", 1024)])
def test_length_dependent_rope_is_refused_past_where_it_changes(variant, limit):
    model = hf_rope(variant, max_positions=limit if variant == "dynamic" else 4096)
    composer = Composer(adapter_for(model))
    composer.verify_rotation(limit - 10)  # inside: exact
    with pytest.raises(RotationRefused, match="depend on the sequence length"):
        composer.verify_rotation(limit + 100)


@pytest.mark.mlx
def test_mlx_dynamic_rope_is_refused_past_its_max_positions():
    pytest.importorskip("mlx_lm")
    composer = Composer(adapter_for(mlx_rope("dynamic", max_positions=256)))
    composer.verify_rotation(200)
    with pytest.raises(RotationRefused, match="depend on the sequence length"):
        composer.verify_rotation(400)


@pytest.mark.hf
def test_length_dependence_is_detected_even_when_the_config_does_not_declare_it():
    """With no declared limit, the table check itself sees the first positions' angles move."""
    runtime = runtime_for(adapter_for(hf_rope("dynamic", max_positions=256)))
    spec = RopeSpec.probe(runtime.rope_apply, runtime.head_dim(), limit=None)
    spec.ensure(200)
    with pytest.raises(RotationRefused, match="dynamic scaling"):
        spec.ensure(1000)


@pytest.mark.hf
def test_a_model_without_rope_is_refused():
    with pytest.raises(RotationRefused, match="rotary-embedding modules"):
        runtime_for(adapter_for(hf_gpt2())).rope  # noqa: B018


def test_a_mapping_that_is_not_a_rotation_is_refused():
    def mixing(x, start):  # every dimension leaks into two others
        return x + np.roll(x, 1, axis=-1) * 0.1 + np.roll(x, 2, axis=-1) * 0.1

    with pytest.raises(RotationRefused, match="not a pairwise rotation"):
        RopeSpec.probe(mixing, 8)

    def scaled(x, start):  # a scale that grows with position
        return x * (1 + start)

    with pytest.raises(RotationRefused, match="position-dependent"):
        RopeSpec.probe(scaled, 8)

    def identity(x, start):
        return x

    with pytest.raises(RotationRefused, match="no rotary"):
        RopeSpec.probe(identity, 8)


def test_rotation_keeps_unrotated_dims_and_composes():
    """A synthetic split-half RoPE on half the head: rotating p->q->r equals p->r; the unrotated half is untouched."""
    dim, heads = 8, 2
    inv = 10000.0 ** (-np.arange(0, 4, 2) / 4)

    def partial(x, start):
        pos = np.arange(start, start + x.shape[1])[:, None] * inv[None, :]
        c, s = np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)
        out = x.copy()
        a, b = x[..., 0:2], x[..., 2:4]
        out[..., 0:2], out[..., 2:4] = a * c - b * s, a * s + b * c
        return out

    spec = RopeSpec.probe(partial, dim)
    assert spec.describe()["rotated_dims"] == 4 and list(spec.keep) == [4, 5, 6, 7]
    k = np.random.default_rng(0).standard_normal((5, heads * dim)).astype(np.float32)
    p, q, r = np.arange(5), np.arange(100, 105), np.arange(37, 42)
    two_steps = spec.rotate(spec.rotate(k, heads, p, q), heads, q, r)
    assert rel_error(two_steps, spec.rotate(k, heads, p, r)) < 1e-6
    kept = k.reshape(5, heads, dim)[..., 4:]
    assert np.array_equal(spec.rotate(k, heads, p, q).reshape(5, heads, dim)[..., 4:], kept)


@pytest.mark.parametrize("runtime", [pytest.param("hf", marks=pytest.mark.hf), pytest.param("mlx", marks=pytest.mark.mlx)])
def test_the_fresh_prefill_check_refuses_a_wrong_rotation(runtime):
    """``verify_rotation`` compares with a real prefill at the offset: a table that rotates the
    wrong way (as a runtime whose RoPE we misread would) is refused with the measured error."""
    pytest.importorskip("mlx_lm" if runtime == "mlx" else "transformers")
    model = mlx_rope("default") if runtime == "mlx" else hf_rope("default")
    composer = Composer(adapter_for(model))
    assert composer.verify_rotation(300) < TOL and composer.verified_upto >= 300
    wrong = Composer(adapter_for(model))
    wrong.runtime.rope.ensure(2048)
    wrong.runtime.rope._sin = -wrong.runtime.rope._sin
    with pytest.raises(RotationRefused, match="differs from a fresh prefill"):
        wrong.verify_rotation(300)
