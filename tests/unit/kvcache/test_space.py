"""Registering prefixes, manifests (fail closed), completeness (LOOKUP's HIT) and dropping."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pion.kvcache.space import KVSpace
from pion.protocol.errors import ReplyError
from tests.unit.kvcache.helpers import fill, manifest, register, tokens_blob


@pytest.fixture
def space():
    return KVSpace()


def test_register_creates_both_sides_and_is_idempotent(space):
    assert register(space, b"a", prefill_us=5000)
    assert set(space.vstore.sessions) == {b"a_pk", b"a_pv"}
    assert not register(space, b"a", prefill_us=5000)
    assert space.registry.get(b"a").prefill_us == 5000


def test_re_register_with_a_different_codec_or_dim_is_refused(space):
    register(space, b"a", fmt="fp16")
    with pytest.raises(ReplyError, match="exists with a different vquant \\(fp16 != int8\\)"):
        register(space, b"a", fmt="int8")
    with pytest.raises(ReplyError, match="exists with a different kv_dim \\(32 != 64\\)"):
        register(space, b"a", dim=64)


def test_block_codec_with_a_bad_dim_is_refused_not_switched(space):
    with pytest.raises(ReplyError, match="vquant 'turbo4' needs kv_dim divisible by 32 \\(got 48\\)"):
        register(space, b"a", dim=48, fmt="turbo4")
    assert not space.vstore.sessions


def test_manifest_mismatch_is_refused_and_the_first_one_kept(space):
    register(space, b"a", manifest=manifest())
    register(space, b"a", manifest=manifest())  # the same object, other key order is fine too
    with pytest.raises(ReplyError, match="exists with a different manifest"):
        register(space, b"a", manifest=manifest(model="other"))
    assert space.registry.get(b"a").manifest["model"] == "m"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "is not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (manifest(n_layers=-1), "field 'n_layers' must be a non-negative integer"),
        (manifest(n_kv_heads=3), r"n_kv_heads\*head_dim \(3\*16\) != kv_dim \(32\)"),
        (manifest(codecs={"k": ["fp16", "int8"], "v": "fp16"}), "codec of k layer 1 is int8, the session stores fp16"),
    ],
)
def test_bad_manifests_are_refused(space, raw, message):
    with pytest.raises(ReplyError, match=message):
        register(space, b"a", manifest=raw)


def test_manifest_must_agree_with_the_chain_tokens(space):
    tokens = list(range(8))
    good = hashlib.sha256(tokens_blob(tokens)).hexdigest()
    register(space, b"a", chain=(4, tokens_blob(tokens)), manifest=manifest(tokens_sha256=good))
    with pytest.raises(ReplyError, match="tokens_sha256 does not match"):
        register(space, b"b", chain=(4, tokens_blob(tokens)), manifest=manifest(tokens_sha256="0" * 64))
    with pytest.raises(ReplyError, match="token_count 9 != CHAIN tokens 8"):
        register(space, b"c", chain=(4, tokens_blob(tokens)), manifest=manifest(token_count=9))


def test_a_different_token_chain_is_refused(space):
    register(space, b"a", chain=(4, tokens_blob(range(8))))
    with pytest.raises(ReplyError, match="exists with a different token chain"):
        register(space, b"a", chain=(4, tokens_blob(range(1, 9))))


def test_registered_but_empty_is_not_complete(space):
    register(space, b"a")
    assert space.completeness(b"a") == (False, 0)


def test_complete_only_when_every_layer_of_both_sides_holds_every_row(space):
    register(space, b"a", manifest=manifest(token_count=8, n_layers=2))
    fill(space, b"a", 8, layers=1)
    assert not space.completeness(b"a")[0]  # layer 1 missing
    fill(space, b"a", 7, layers=2)
    assert not space.completeness(b"a")[0]  # row 7 missing
    fill(space, b"a", 8, layers=2, seq=42)
    assert space.completeness(b"a") == (True, 42)
    pv = space.vstore.get(b"a_pv")
    space.vstore.truncate(pv, 1, 4)
    assert not space.completeness(b"a")[0]


def test_without_registration_counts_come_from_the_sessions(space):
    register(space, b"a")
    fill(space, b"a", 5, layers=3)
    assert space.completeness(b"a")[0]
    assert space.hit_tokens(b"a") == 5
    space.vstore.drop(b"a_pv")
    assert not space.completeness(b"a")[0]


def test_parent_is_derived_from_the_chain_and_drop_clears_links(space):
    register(space, b"root", chain=(4, tokens_blob(range(8))))
    register(space, b"leaf", chain=(4, tokens_blob(range(12))))
    register(space, b"other", chain=(4, tokens_blob([9] * 12)))
    assert space.registry.get(b"leaf").parent == b"root"
    assert space.registry.get(b"root").children == {b"leaf"}
    assert space.registry.get(b"other").parent is None
    assert space.drop_prefix(b"root")
    assert space.registry.get(b"leaf").parent is None
    assert not space.drop_prefix(b"root")


def test_unknown_parent_is_refused(space):
    with pytest.raises(ReplyError, match="PARENT 'nope' is not a registered namespace"):
        register(space, b"a", parent=b"nope")


def test_membership_bitmap_is_lsb_first(space):
    register(space, b"a", blocks=(16, np.array([5, 9, 1 << 63], dtype="<u8").tobytes()))
    prefix = space.registry.get(b"a")
    probes = np.array([9, 4, 5, 1 << 63, 0, 0, 0, 0, 9], dtype="<u8").tobytes()
    assert prefix.membership(probes) == bytes([0b00001101, 0b00000001])
    assert prefix.blocks_reply() == np.array([16, 3], "<u4").tobytes() + np.array([5, 9, 1 << 63], "<u8").tobytes()
