"""Finding the experts of a checkpoint in every layout real MoE checkpoints use."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from pion.moe.layout import read_layout
from pion.moe.shards import ShardError, Shards
from tests.support.moe_models import write_checkpoint


def layout_of(path):
    shards = Shards(path)
    try:
        return read_layout(path.name, shards), shards
    except BaseException:
        shards.close()
        raise


@pytest.mark.parametrize("kind", ["per_expert", "qwen", "stacked", "fused"])
def test_every_layout_gives_each_experts_exact_bytes(tmp_path, kind):
    expected = write_checkpoint(tmp_path / kind, kind, n_layers=3, n_experts=4, shards=3)
    layout, shards = layout_of(tmp_path / kind)
    assert layout.storage == ("per_expert" if kind == "qwen" else kind)
    assert (layout.moe_layers, layout.n_experts, layout.top_k, layout.hidden_size) == ([0, 1, 2], 4, 2, 32)
    assert layout.bits == 32 and layout.group_size == 0
    for key, parts in expected.items():
        got = [(p.proj, p.comp, bytes(shards.view(p.shard, p.start, p.start + p.nbytes))) for p in layout.parts[key]]
        assert got == parts
    assert layout.expert_bytes == 3 * 32 * 64 * 4
    shards.close()


def test_quantized_stacked_experts_keep_codes_scales_and_biases_as_stored(tmp_path):
    expected = write_checkpoint(tmp_path / "q", "stacked", bits=4, group_size=32)
    layout, shards = layout_of(tmp_path / "q")
    assert (layout.bits, layout.group_size) == (4, 32)
    specs = [(s["proj"], s["comp"], s["dtype"]) for s in layout.part_specs()]
    assert specs == [(p, c, d) for p in range(3) for c, d in ((0, "U32"), (1, "F16"), (2, "F16"))]
    part = layout.parts[(1, 3)][4]  # up biases
    assert bytes(shards.view(part.shard, part.start, part.start + part.nbytes)) == expected[(1, 3)][4][2]
    shards.close()


def test_sparse_layers_are_found_by_their_index(tmp_path):
    write_checkpoint(tmp_path / "s", "qwen", n_layers=4, moe_every=2)
    layout, shards = layout_of(tmp_path / "s")
    assert layout.moe_layers == [1, 3] and layout.n_layers == 4
    shards.close()


def test_a_missing_expert_is_refused(tmp_path):
    path = tmp_path / "gap"
    write_checkpoint(path, "per_expert", shards=1)
    shard = next(path.glob("*.safetensors"))
    from safetensors.numpy import load_file

    tensors = {k: v for k, v in load_file(str(shard)).items() if ".experts.2." not in k or "layers.1." not in k}
    save_file(tensors, str(shard))
    with pytest.raises(ShardError, match="layer 1 has no expert 2"):
        layout_of(path)


def test_config_that_disagrees_with_the_shards_is_refused(tmp_path):
    path = tmp_path / "cfg"
    write_checkpoint(path, "fused")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_local_experts": 8}))
    with pytest.raises(ShardError, match="declares 8 experts"):
        layout_of(path)


@pytest.mark.parametrize("header", [b"not json", b'{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 999]}}',
                                    b'{"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}',
                                    b'{"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 4]}}'])
def test_hostile_headers_are_refused_with_the_reason(tmp_path, header):
    (tmp_path / "bad.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    with pytest.raises(ShardError):
        Shards(tmp_path)


def test_a_directory_without_experts_is_refused(tmp_path):
    save_file({"model.embed_tokens.weight": np.zeros((4, 4), np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ShardError, match="no expert tensors"):
        layout_of(tmp_path)
