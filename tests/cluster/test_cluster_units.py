"""Pieces of cluster mode without servers: URLs, hash tags, slot runs, the config file."""

from __future__ import annotations

import pytest

from pion.client.cluster import parse_cluster_url, tagged
from pion.protocol.keyslot import hash_tag, key_slot
from pion.server.cluster.state import ClusterState, Node, slot_ranges


def test_cluster_urls():
    assert parse_cluster_url("pion+cluster://a:1,b:2") == ("pion", [("a", 1), ("b", 2)], None, None)
    assert parse_cluster_url("redis+cluster://u:p%40ss@h1,h2:7000") == ("redis", [("h1", 6379), ("h2", 7000)], "u", "p@ss")
    assert parse_cluster_url("pion+cluster://h")[1] == [("h", 1974)]
    with pytest.raises(ValueError):
        parse_cluster_url("pion://h:1")


def test_hash_tags_as_redis():
    assert hash_tag(b"foo{}{bar}") == b"foo{}{bar}" and hash_tag(b"foo{{bar}}zap") == b"{bar"
    assert hash_tag(b"{user}.a") == b"user" and key_slot("123456789") == 12739  # Redis's CRC16 check value
    ns = tagged("pion:abc")
    assert ns == "{pion:abc}" and tagged(ns) == ns
    assert key_slot(ns) == key_slot(ns + "_pk") == key_slot(ns + "_pv")


def test_slot_ranges():
    assert slot_ranges({5, 1, 2, 3, 9}) == [(1, 3), (5, 5), (9, 9)]


def test_config_file_round_trip(tmp_path):
    path = str(tmp_path / "nodes.conf")
    state = ClusterState(path, "127.0.0.1", 7000)
    peer = state.add_node(Node("b" * 40, "127.0.0.1", 7001, epoch=3))
    for slot in range(0, 100):
        state.assign(slot, state.myself)
    state.assign(100, peer)
    state.migrating[5] = peer.id
    state.importing[100] = peer.id
    state.current_epoch = 3
    state.save()
    again = ClusterState(path, "127.0.0.1", 7000)
    assert again.myself.id == state.myself.id and again.current_epoch == 3
    assert again.myself.slots == set(range(100)) and again.owner[100].id == peer.id
    assert again.migrating == {5: peer.id} and again.importing == {100: peer.id}
    assert again.nodes_text() == state.nodes_text()
