"""The expert tier on its own (no server): budget, policy, pins, prunes, prefetch, histograms."""

from __future__ import annotations

import os
from concurrent.futures import Future

import pytest

from pion.codecs.experts import decode_fetch
from pion.moe import ExpertTier, Pruned, TierError
from pion.moe.resident import Entry, run_load
from tests.support.moe_models import write_checkpoint

EXPERT = 3 * 32 * 64 * 4  # bytes of one float32 expert of the default checkpoint (24 KiB, 6 pages)


@pytest.fixture
def tier(tmp_path):
    root = tmp_path / "models"
    expected = write_checkpoint(root / "tiny", "per_expert", n_layers=2, n_experts=4)
    t = ExpertTier(str(root), budget_bytes=3 * EXPERT, data_dir=str(tmp_path))
    t.start()
    t.load_model("tiny")
    t.expected = expected
    yield t
    t.stop()


def fetched(tier, layer, expert, ns="default"):
    found = tier.fetch("tiny", layer, expert, ns)
    entry = found if isinstance(found, Entry) else tier.land(run_load(found))
    blob = b"".join(bytes(p) for p in entry.pieces())
    return [(p, c, bytes(v)) for p, c, v in decode_fetch(blob)], found


def test_a_miss_reads_the_shard_and_the_next_fetch_is_a_hit(tier):
    parts, first = fetched(tier, 1, 2)
    assert isinstance(first, Future) and parts == tier.expected[(1, 2)]
    again, second = fetched(tier, 1, 2)
    assert isinstance(second, Entry) and again == parts
    stats = tier.stats()
    assert (stats["hits"], stats["misses"], stats["resident_experts"]) == (1, 1, 1)
    assert os.path.exists(second.path) and stats["resident_dir"] in second.path


def test_the_budget_is_never_exceeded(tier):
    for layer in range(2):
        for expert in range(4):
            for _ in range(2):
                assert fetched(tier, layer, expert)[0] == tier.expected[(layer, expert)]
    assert tier.resident.used <= tier.resident.budget
    assert len(tier.resident.entries) == 3


def test_a_new_budget_evicts_down_to_it(tier):
    for expert in range(3):
        fetched(tier, 0, expert)
    tier.budget_changed(EXPERT)
    assert tier.resident.used <= EXPERT and len(tier.resident.entries) == 1


def test_a_pruned_expert_is_refused_and_dropped(tier):
    fetched(tier, 0, 1)
    assert tier.prune("tiny", 0, 1, True) == 1
    with pytest.raises(Pruned, match="layer=0 expert=1"):
        tier.fetch("tiny", 0, 1)
    assert ("tiny", 0, 1) not in tier.resident.entries
    assert tier.prune("tiny", 0, 1, False) == 0
    assert fetched(tier, 0, 1)[0] == tier.expected[(0, 1)]


def test_pinned_experts_stay_and_pins_cannot_exceed_the_budget(tier):
    for expert in range(3):
        future = tier.pin("tiny", 0, expert)
        tier.finish_pin(run_load(future))
    with pytest.raises(TierError, match="exceed moe-cache-mib"):
        tier.pin("tiny", 1, 0)
    for expert in range(4):
        fetched(tier, 1, expert)  # misses served without evicting a pin
    assert {k for k in tier.resident.entries} == {("tiny", 0, e) for e in range(3)}
    tier.unpin("tiny", 0, 0)
    assert ("tiny", 0, 0) not in tier.resident.pinned


def test_prefetch_brings_experts_in_and_counts_prefetched_hits(tier):
    assert tier.prefetch("tiny", 1, [0, 3]) == 2
    assert tier.prefetch("tiny", 1, [0]) == 0  # already resident
    _, found = fetched(tier, 1, 3)
    assert isinstance(found, Entry)
    info = tier.model_info("tiny")
    assert (info["prefetches"], info["prefetched_hits"], info["hits"]) == (2, 1, 1)


def test_histograms_count_per_namespace(tier):
    fetched(tier, 0, 0)
    fetched(tier, 0, 0, "chat")
    fetched(tier, 1, 3, "chat")
    hist = tier.model("tiny").hist
    assert hist.get("chat").fetches[1, 3] == 1 and hist.get("default").fetches[0, 0] == 1
    assert [ns for ns in hist.spaces] == ["default", "chat"]


def test_bad_indices_and_unknown_models_are_refused(tier):
    with pytest.raises(TierError, match="out of range"):
        tier.fetch("tiny", 0, 4)
    with pytest.raises(TierError, match="has no experts"):
        tier.fetch("tiny", 7, 0)
    with pytest.raises(TierError, match="no such model"):
        tier.fetch("other", 0, 0)


def test_loading_is_confined_to_the_moe_cache_directory(tier, tmp_path):
    write_checkpoint(tmp_path / "outside", "fused")
    with pytest.raises(TierError, match="outside the moe-cache directory"):
        tier.load_model("../outside")
    with pytest.raises(TierError, match="outside"):
        tier.load_model(str(tmp_path / "outside"))
    assert tier.load_model("tiny") == "tiny"  # loading twice is the same model


def test_local_lane_names_resident_files_or_shard_ranges(tier):
    fetched(tier, 0, 0)
    entry = tier.local("tiny", 0, 0)
    located = tier.locate(entry)
    assert {path for path, *_ in located} == {entry.path}
    whole = open(entry.path, "rb").read()
    assert [(p, c, whole[o:o + n]) for _, p, c, o, n in located] == tier.expected[(0, 0)]
    tier.budget_changed(0)
    ranges = tier.local("tiny", 1, 1)
    assert isinstance(ranges, list)
    for (path, proj, comp, offset, nbytes), want in zip(ranges, tier.expected[(1, 1)], strict=True):
        with open(path, "rb") as handle:
            handle.seek(offset)
            assert (proj, comp, handle.read(nbytes)) == want


def test_unload_drops_resident_experts_and_stop_removes_the_directory(tier):
    fetched(tier, 0, 0)
    directory = tier.resident.directory
    tier.unload_model("tiny")
    assert not tier.resident.entries and not tier.models
    tier.stop()
    assert not directory.exists()


def test_misses_fill_spare_files_made_ahead_and_spares_are_replaced(tier):
    import time

    fetched(tier, 0, 0)
    deadline = time.time() + 10
    while tier.metrics()["moe_spare_bytes"] < 2 * EXPERT and time.time() < deadline:
        time.sleep(0.02)
    spares = sorted(p.name for p in tier.resident.directory.glob(".spare-*"))
    assert len(spares) == 2  # KEEP ready for the next misses
    assert fetched(tier, 0, 1)[0] == tier.expected[(0, 1)]
    assert spares[0] not in {p.name for p in tier.resident.directory.glob(".spare-*")} or \
        spares[1] not in {p.name for p in tier.resident.directory.glob(".spare-*")}  # one was used
