"""Stage 2 through transformers' AttentionInterface: greedy decode equals local decode, token for token."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.models import VOCAB, hf_llama

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """torch's own threads spin against the server's (same process) on a small machine: 5-10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def greedy_local(model, ids, steps):
    """Plain transformers: prefill the whole prompt, then one token at a time (logits kept)."""
    from transformers import DynamicCache

    return greedy_stage2(model, DynamicCache(config=model.config), ids, steps)


def greedy_stage2(model, cache, first_ids, steps):
    """``first_ids`` on top of ``cache``, then ``steps`` greedy tokens: ``(tokens, logits)``."""
    out, logits = [], []
    with torch.no_grad():
        step = model(input_ids=torch.tensor([first_ids]), cache=cache, use_cache=True).logits[0, -1]
        for _ in range(steps):
            logits.append(step.float().numpy())
            token = int(step.argmax())
            out.append(token)
            step = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits[0, -1]
    return out, logits


@pytest.fixture
def prompt():
    rng = np.random.default_rng(0)
    return [int(t) for t in rng.integers(3, VOCAB, 300)], [int(t) for t in rng.integers(3, VOCAB, 7)]


@pytest.mark.parametrize("lane", ["server", "inproc"])
def test_dense_stage2_greedy_decode_equals_local_decode(url, prompt, lane):
    from pion.client import PionPromptCache

    model = hf_llama(seed=1)
    prefix, suffix = prompt
    want, want_logits = greedy_local(model, prefix + suffix, 24)
    pc = PionPromptCache(model, url=url, vquant="fp32")
    stage2 = pc.enable_stage2(lane=lane)
    cache = stage2.cache_for(prefix)
    got, logits = greedy_stage2(model, cache, suffix, 24)
    assert got == want
    np.testing.assert_allclose(np.array(logits), np.array(want_logits), atol=2e-4, rtol=0)
    stats = stage2.stats()
    layers = model.config.num_hidden_layers
    assert stats["queries"] == layers * 25 and stats["selected_fraction"] == 1.0
    if lane == "server":
        assert stats["round_trips"] == layers * 25 and stats["prefixes_stored"] == 1
        assert stats["bytes_sent"] > 0 and stats["bytes_received"] > 0
    else:
        assert stats["round_trips"] == 0
    stage2.disable()
    assert greedy_local(model, prefix + suffix, 24)[0] == want  # the model is itself again


def test_another_client_finds_the_stored_prefix_and_generate_works(url, prompt):
    from pion.client import PionPromptCache

    prefix, suffix = prompt
    first = PionPromptCache(hf_llama(seed=1), url=url, vquant="fp32").enable_stage2()
    first.cache_for(prefix)
    model = hf_llama(seed=1)
    want, _ = greedy_local(model, prefix + suffix, 10)
    stage2 = PionPromptCache(model, url=url, vquant="fp32").enable_stage2()
    cache = stage2.cache_for(prefix)
    assert stage2.stats()["prefixes_found"] == 1 and stage2.stats()["prefixes_stored"] == 0
    with torch.no_grad():
        generated = model.generate(torch.tensor([prefix + suffix]), cache=cache, max_new_tokens=10,
                                   do_sample=False)
    assert generated[0, len(prefix) + len(suffix):].tolist() == want


def test_a_normal_cache_still_runs_locally_while_stage2_is_on(url, prompt):
    from pion.client import PionPromptCache

    model = hf_llama(seed=2)
    prefix, suffix = prompt
    want, _ = greedy_local(model, prefix + suffix, 8)
    stage2 = PionPromptCache(model, url=url).enable_stage2()
    assert greedy_local(model, prefix + suffix, 8)[0] == want
    assert stage2.stats()["round_trips"] == 0


@pytest.mark.parametrize("lane", ["server", "inproc"])
def test_sparse_decode_selects_blocks_and_both_lanes_agree(url, lane):
    from pion.client import PionPromptCache

    rng = np.random.default_rng(3)
    prefix = [int(t) for t in rng.integers(3, VOCAB, 700)]
    suffix = [5, 6, 7]
    outs = {}
    for mode in ("server", "inproc"):
        model = hf_llama(seed=4)
        stage2 = PionPromptCache(model, url=url, vquant="fp32").enable_stage2(
            sparse={"block": 64, "budget": 256, "selector": "quest"}, lane=mode)
        outs[mode] = greedy_stage2(model, stage2.cache_for(prefix), suffix, 6)
        stats = stage2.stats()
        layers = model.config.num_hidden_layers
        assert stats["sparse_queries"] == layers * 6  # decode steps only: the suffix prefill stays dense
        sparse_fraction = (256 + 700 % 64) / 700
        assert stats["selected_fraction"] == pytest.approx((layers * 1 + layers * 6 * sparse_fraction) / (layers * 7), rel=1e-6)
    assert outs["server"][0] == outs["inproc"][0]
    np.testing.assert_allclose(np.array(outs["server"][1]), np.array(outs["inproc"][1]), atol=1e-4)


def test_bad_sparse_options_are_refused(url):
    from pion.client import PionPromptCache

    pc = PionPromptCache(hf_llama(), url=url)
    with pytest.raises(ValueError, match="unknown sparse option"):
        pc.enable_stage2(sparse={"blocks": 64})
    with pytest.raises(ValueError, match="unknown selector"):
        pc.enable_stage2(sparse={"selector": "h2o"})
    with pytest.raises(ValueError, match="lane"):
        pc.enable_stage2(lane="gpu")


def test_demo_model_greedy_decode_through_stage2_equals_local_decode(url):
    """The SmolLM2-135M-shaped demo model (30 layers, 9 heads over 3 K/V heads, GQA)."""
    from pion.client import PionPromptCache
    from pion.client.adapters.transformers import load_demo
    from pion.client.demo_model import demo_prompt, ensure_demo_model

    model = load_demo(ensure_demo_model(), dtype="float32")
    ids = demo_prompt(200)
    prefix, suffix = ids[:190], ids[190:]
    want, _ = greedy_local(model, ids, 12)
    stage2 = PionPromptCache(model, url=url).enable_stage2()
    got, _ = greedy_stage2(model, stage2.cache_for(prefix), suffix, 12)
    assert got == want
    assert stage2.stats()["round_trips"] == 30 * 13


def test_a_prefix_of_another_model_is_never_attended(url, prompt):
    from pion.client import PionPromptCache

    prefix, _ = prompt
    first = PionPromptCache(hf_llama(seed=1), url=url, vquant="fp32")
    ns = first.namespace(prefix)
    first.put(prefix, first.adapter.prefill(prefix), namespace=ns)
    other = PionPromptCache(hf_llama(seed=5), url=url, vquant="fp32")  # other weights: another fingerprint
    stage2 = other.enable_stage2()
    stage2.pc.namespace = lambda ids: ns  # force the same namespace (a collision, or a forged one)
    with pytest.raises(RuntimeError, match="fail closed"):
        stage2.cache_for(prefix)
    assert stage2.stats()["round_trips"] == 0
