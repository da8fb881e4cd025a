"""The local lane: a hit on the server's own host maps the V.EXPORT file; elsewhere, the socket."""

from __future__ import annotations

import pytest

from pion.client import PionPromptCache
from pion.client.local_lane import export_args, is_local
from tests.client.models import hf_lfm2, hf_llama, prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.hf


def same_cache(a, b) -> bool:
    for la, lb in zip(a.layers, b.layers, strict=True):
        if getattr(la, "keys", None) is not None:
            if la.keys.dtype != lb.keys.dtype or not torch.equal(la.keys, lb.keys) or not torch.equal(la.values, lb.values):
                return False
    return True


@pytest.mark.parametrize(
    ("url", "local"),
    [("pion://127.0.0.1:1974", True), ("pion://localhost", True), ("redis://[::1]:6379", True),
     ("unix:///tmp/pion.sock", True), ("pion://10.0.0.5:1974", False), ("pions://cache.example.com", False),
     ("pion://127.0.0.2", True)],
)
def test_is_local_means_this_host(url, local):
    assert is_local(url) is local


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_local_and_socket_lanes_give_the_same_cache_as_the_prefill(url, dtype):
    model = hf_llama(dtype=dtype)
    ids = prompt(45)
    local = PionPromptCache(model, url=url)
    socket = PionPromptCache(model, url=url, local_lane=False)
    assert local.local_lane and not socket.local_lane
    cold = local.get_or_prefill(ids)
    via_file, via_socket = local.get_or_prefill(ids), socket.get_or_prefill(ids)
    assert same_cache(cold, via_file) and same_cache(cold, via_socket)
    assert local.stats()["local_hits"] == 1 and socket.stats()["local_hits"] == 0
    assert local.stats()["bytes_fetched"] == socket.stats()["bytes_fetched"] > 0


def test_a_lossy_codec_decodes_the_same_on_either_lane(url):
    model = hf_llama()
    ids = prompt(40)
    local = PionPromptCache(model, url=url, vquant="int8", boundary_protect=1)
    socket = PionPromptCache(model, url=url, vquant="int8", boundary_protect=1, local_lane=False)
    local.get_or_prefill(ids)
    assert same_cache(local.get_or_prefill(ids), socket.get_or_prefill(ids))
    assert local.stats()["local_hits"] == 1


def test_fetch_nearest_maps_the_partial_prefix(url):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, block_size=16)
    stored = prompt(40)
    pc.get_or_prefill(stored)
    cache, rest = pc.fetch_nearest(stored[:32] + prompt(5, offset=3))
    assert cache.get_seq_length() == 32 and len(rest) == 5
    full = pc.adapter.prefill(stored[:32])
    assert same_cache(full, cache) and pc.stats()["local_hits"] == 1


def test_a_hybrid_model_takes_its_recurrent_state_over_the_socket_and_k_v_from_the_file(url):
    model = hf_lfm2()
    pc = PionPromptCache(model, url=url)
    ids = prompt(30)
    cold = pc.get_or_prefill(ids)
    warm = pc.get_or_prefill(ids)
    assert same_cache(cold, warm) and pc.stats()["local_hits"] == 1
    suffix = prompt(3, offset=2)
    assert torch.equal(torch.tensor(pc.adapter.forward(suffix, cold)), torch.tensor(pc.adapter.forward(suffix, warm)))


def test_an_unreachable_file_turns_the_lane_off_and_the_hit_goes_through_the_socket(url, monkeypatch):
    import pion.client.prompt_cache as module

    def unreachable(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/elsewhere/export.safetensors")

    model = hf_llama()
    ids = prompt(33)
    pc = PionPromptCache(model, url=url)
    cold = pc.get_or_prefill(ids)
    monkeypatch.setattr(module, "open_export", unreachable)
    with pytest.warns(RuntimeWarning, match="local lane off.*cannot map the server's export file"):
        warm = pc.get_or_prefill(ids)
    assert same_cache(cold, warm) and not pc.local_lane
    stats = pc.stats()
    assert stats["hits"] == 1 and stats["local_hits"] == 0 and stats["errors"] == 0


def test_a_server_with_exports_disabled_turns_the_lane_off_at_the_first_store(make_server):
    srv = make_server(kv_export_maxbytes=0)
    pc = PionPromptCache(hf_llama(), url=f"pion://127.0.0.1:{srv.port}")
    ids = prompt(20)
    with pytest.warns(RuntimeWarning, match=r"refused V.EXPORT \(ERR V.EXPORT is disabled"):
        pc.get_or_prefill(ids)
    assert not pc.local_lane
    pc.get_or_prefill(ids)
    assert pc.stats()["hits"] == 1 and pc.stats()["local_hits"] == 0


def test_a_remote_url_or_an_irregular_layout_never_uses_the_lane(url):
    model = hf_llama()
    assert not PionPromptCache(model, url="pion://10.1.2.3:1974").local_lane
    assert PionPromptCache(model, url=url, keep_freed_memory=False).allocator_tuned is False
    layout = PionPromptCache(model, url=url).adapter.layout
    assert export_args("a_pk", "a_pv", 8, layout)[:5] == ["V.EXPORT", "a_pk", "a_pv", 0, 8]
    uneven = type(layout)(layout.runtime, 2, (0, 1), (), ((2, 16, 16), (4, 16, 16)), layout.dtype)
    assert export_args("a_pk", "a_pv", 8, uneven) is None
    with pytest.raises(ValueError, match="local_lane"):
        PionPromptCache(model, url=url, local_lane="sometimes")
