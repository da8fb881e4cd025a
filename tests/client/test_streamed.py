"""Layer-wise streaming on the socket lane (issue 34; ``pion.client.streamed``): the suffix's
forward runs on each layer as its rows arrive, the rows land in buffers allocated before they
arrive, and the closing generation check still decides: a prefix replaced or dropped during the
stream is a miss and a recompute, never logits or a cache mixed from two prefixes."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from pion.client import PionPromptCache, streamed
from pion.client.fastread import RespReader
from tests.client.models import hf_llama, prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def same_cache(a, b) -> bool:
    return all(torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)
               for la, lb in zip(a.layers, b.layers, strict=True))


def reference(adapter, ids, suffix):
    """The prefix's cache prefilled here, then the suffix: what a correct answer is."""
    cache = adapter.prefill(ids)
    return cache, adapter.forward(suffix, cache)


@pytest.mark.parametrize("vquant", ["auto", "fp16"])
def test_a_streamed_hit_is_the_hit_received_whole(url, vquant):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, local_lane=False, vquant=vquant)
    whole = PionPromptCache(model, url=url, local_lane=False, vquant=vquant, stream=False)
    assert pc.stream and not whole.stream
    ids, suffix = prompt(40), [7, 8, 9]
    pc.forward(ids, suffix)  # a miss: prefilled and stored
    cache, logits = pc.forward(ids, suffix)
    assert pc.stats()["streamed_hits"] == 1 and pc.stats()["hits"] == 1 and pc.stats()["misses"] == 1
    expected_cache, expected = whole.forward(ids, suffix)
    assert whole.stats()["hits"] == 1 and whole.stats()["streamed_hits"] == 0
    assert np.array_equal(logits, expected) and same_cache(cache, expected_cache)
    assert all(type(layer) is type(expected_cache.layers[0]) for layer in cache.layers)  # plain DynamicLayers
    if vquant == "auto":  # exact: the cold prefill's own numbers
        cold_cache, cold = reference(pc.adapter, ids, suffix)
        assert np.array_equal(logits, cold) and same_cache(cache, cold_cache)
    # the cache goes on generating as a prefilled one does
    more = pc.adapter.forward([3], cache)
    assert np.array_equal(more, whole.adapter.forward([3], expected_cache))


def test_the_rows_are_received_into_the_buffers_allocated_before_they_arrive(url):
    model = hf_llama()
    pc = PionPromptCache(model, url=url, local_lane=False)
    ids = prompt(32)
    pc.put(ids, pc.adapter.prefill(ids))
    stream = streamed.StreamedFetch(pc.client.redis, pc.namespace(ids), len(ids), pc.adapter.layout, pc.schema)
    try:
        hit, generation, manifest = stream.head()
        assert str(hit).upper() == "HIT" and generation > 0 and bytes(manifest).startswith(b"{")
        for index in range(len(pc.adapter.layout.attn)):
            k, v = stream.layer(index)
            assert k is stream.buffers[index][0] and v is stream.buffers[index][1]
        assert stream.finish() and stream.nbytes == sum(k.nbytes + v.nbytes for k, v in stream.buffers)
    finally:
        stream.close()


def test_an_exact_hit_is_received_into_the_layers_own_tensors_with_room_for_the_suffix(url):
    """With ``spare`` rows (the suffix's), an exact codec's buffer becomes the layer's tensor:
    the prefix rows are received once and never copied, the suffix's K/V written after them."""
    model = hf_llama()
    pc = PionPromptCache(model, url=url, local_lane=False)
    ids, suffix = prompt(36), [5, 6]
    pc.put(ids, pc.adapter.prefill(ids))
    stream = streamed.StreamedFetch(pc.client.redis, pc.namespace(ids), len(ids), pc.adapter.layout, pc.schema,
                                    spare=len(suffix))
    try:
        assert str(stream.head()[0]).upper() == "HIT"
        cache = pc.adapter.streamed_cache(stream.layer, len(ids), pc.schema)
        logits = pc.adapter.forward(suffix, cache)
        assert stream.finish()
    finally:
        stream.close()
    for (k_buf, v_buf), slot in zip(stream._full, pc.adapter.layout.attn, strict=True):
        layer = cache.layers[slot]
        assert layer.keys.data_ptr() == k_buf.ctypes.data and layer.values.data_ptr() == v_buf.ctypes.data
        assert layer.keys.shape[-2] == len(ids) + len(suffix)
    cold_cache, cold = reference(pc.adapter, ids, suffix)
    assert np.array_equal(logits, cold) and same_cache(cache, cold_cache)
    assert np.array_equal(pc.adapter.forward([4], cache), pc.adapter.forward([4], cold_cache))


def test_a_reply_of_another_size_is_not_received_into_the_buffer():
    a, b = socket.socketpair()
    try:
        a.sendall(b"$4\r\nabcd\r\n$3\r\nxyz\r\n")
        reader = RespReader(b)
        exact, other = np.empty(4, np.uint8), np.empty(4, np.uint8)
        assert reader.read(into=exact) is exact and bytes(exact) == b"abcd"
        got = reader.read(into=other)
        assert got is not other and bytes(got) == b"xyz"
    finally:
        a.close()
        b.close()


def split_stream(monkeypatch, between, after_layer: int = 0):
    """The next stream's pipeline sent in two writes with ``between()`` in the middle (after layer
    ``after_layer``'s K rows): what the server does when it serves other clients while ours waits."""
    real = streamed.StreamedFetch._send

    def send(self, conn):
        monkeypatch.setattr(streamed.StreamedFetch, "_send", real)  # once
        cut = 3 + 2 * after_layer + 1
        conn.send_packed_command(conn.pack_commands(self.commands[:cut]))
        between()
        conn.send_packed_command(conn.pack_commands(self.commands[cut:]))

    monkeypatch.setattr(streamed.StreamedFetch, "_send", send)


@pytest.mark.parametrize("change", ["replace", "drop"])
def test_a_prefix_changed_during_the_stream_is_a_miss_and_a_recompute(url, monkeypatch, change):
    model = hf_llama()
    reader = PionPromptCache(model, url=url, local_lane=False)
    writer = PionPromptCache(model, url=url, local_lane=False)
    old, new, suffix = prompt(48), prompt(48, offset=5), [11, 12]
    assert reader.put(old, reader.adapter.prefill(old), namespace="fixed")
    if change == "replace":
        split_stream(monkeypatch, lambda: writer.put(new, writer.adapter.prefill(new), namespace="fixed", replace=True))
    else:
        split_stream(monkeypatch, lambda: writer.drop(namespace="fixed"))
    cache, logits = reader.forward(old, suffix, namespace="fixed")
    stats = reader.stats()
    assert stats["stream_discards"] == 1 and stats["hits"] == 0 and stats["misses"] == 1 and stats["errors"] == 0
    cold_cache, cold = reference(reader.adapter, old, suffix)
    assert np.array_equal(logits, cold) and same_cache(cache, cold_cache)
    _, other = reference(reader.adapter, new, suffix)
    assert not np.array_equal(logits, other)
    if change == "replace":  # the recompute was not stored over the writer's prefix
        assert writer.forward(new, suffix, namespace="fixed")[1].tolist() == other.tolist()
        assert writer.stats()["streamed_hits"] == 1


def test_without_a_change_the_split_stream_is_a_streamed_hit(url, monkeypatch):
    """The control of the test above: the same split, nobody in between, is a hit."""
    model = hf_llama()
    pc = PionPromptCache(model, url=url, local_lane=False)
    ids, suffix = prompt(48), [11, 12]
    assert pc.put(ids, pc.adapter.prefill(ids), namespace="fixed")
    split_stream(monkeypatch, lambda: None)
    cache, logits = pc.forward(ids, suffix, namespace="fixed")
    assert pc.stats()["streamed_hits"] == 1 and pc.stats()["stream_discards"] == 0
    assert np.array_equal(logits, reference(pc.adapter, ids, suffix)[1])


def test_a_missing_prefix_streams_nothing_and_is_one_miss(url):
    pc = PionPromptCache(hf_llama(), url=url, local_lane=False)
    ids, suffix = prompt(30), [4]
    cache, logits = pc.forward(ids, suffix)
    assert pc.stats()["misses"] == 1 and pc.stats()["hits"] == 0 and pc.stats()["errors"] == 0
    assert np.array_equal(logits, reference(pc.adapter, ids, suffix)[1])
    pc.forward(ids, suffix)
    assert pc.stats()["streamed_hits"] == 1


def test_the_local_lane_forward_is_a_local_hit(url):
    pc = PionPromptCache(hf_llama(), url=url)
    if not pc.local_lane:
        pytest.skip("no local lane here")
    ids, suffix = prompt(30), [4]
    pc.forward(ids, suffix)
    _, logits = pc.forward(ids, suffix)
    assert pc.stats()["local_hits"] == 1 and pc.stats()["streamed_hits"] == 0
    assert np.array_equal(logits, reference(pc.adapter, ids, suffix)[1])


def test_a_streamed_hit_over_tls(make_server, tmp_path):
    """TLS sockets take no receive flags: the stream receives in chunks there, with the same answer."""
    from pion.client import PionClient
    from tests.client.test_client_commands import _self_signed
    from tests.support.servers import free_port

    cert, key = _self_signed(tmp_path)
    tls_port = free_port()
    make_server(tls_port=tls_port, tls_cert_file=str(cert), tls_key_file=str(key), tls_auth_clients="no")
    client = PionClient(f"pions://127.0.0.1:{tls_port}", ssl_ca_certs=str(cert))
    pc = PionPromptCache(hf_llama(), client=client, local_lane=False)
    ids, suffix = prompt(40), [7, 8]
    pc.forward(ids, suffix)
    cache, logits = pc.forward(ids, suffix)
    assert pc.stats()["streamed_hits"] == 1 and pc.stats()["errors"] == 0
    cold_cache, cold = reference(pc.adapter, ids, suffix)
    assert np.array_equal(logits, cold) and same_cache(cache, cold_cache)
    client.close()
