"""The expert tier: MoE models' experts served from their safetensors shards through a byte budget.

One ``ExpertTier`` per server (``--moe-cache DIR --moe-cache-mib N``). It loads up to
``MAX_MODELS`` model directories found under DIR (a model's id is its directory's name), keeps
their experts' copies in one ``ResidentSet`` (a byte budget, one policy for all models), counts
every fetch per namespace, and answers what the ``MOE.EXPERT.*`` commands ask. It never imports
the server: the command module turns its results and exceptions into replies, and the server
calls its component hooks (``start``, ``stop``, ``cron``, ``info``, ``metrics``,
``budget_changed``, ``snapshot_extension``).

Threads: every method runs on the event loop. A miss comes back as a future whose read
(``resident.run_load``) the command runs in its own worker thread; a prefetch's read runs in the
resident set's loader threads and lands through ``post`` (the loop's ``call_soon_threadsafe``),
so the loop stays the only writer.

Nothing here is durable: the tier is a cache of files that are the copy of record; histograms
are saved when the operator asks (``HIST SAVE``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from pion.moe.histograms import DEFAULT_NS, Histograms
from pion.moe.layout import ModelLayout, read_layout
from pion.moe.resident import PAGE, Entry, ResidentSet, discard, resident_base
from pion.moe.shards import ShardError, Shards
from pion.paging.policies import DEFAULT_POLICY, make_policy

log = logging.getLogger("pion.moe")

MAX_MODELS = 4
MIB = 1024 * 1024


class TierError(Exception):
    """A request the tier refuses; ``str()`` is the reason (the command layer adds ``ERR``)."""


class Pruned(TierError):
    def __init__(self, layer: int, expert: int) -> None:
        super().__init__(f"layer={layer} expert={expert}")


@dataclass
class Model:
    layout: ModelLayout
    shards: Shards
    hist: Histograms
    ordinal: dict[int, int]
    pruned: set[tuple[int, int]] = field(default_factory=set)
    hits: int = 0
    misses: int = 0
    prefetched_hits: int = 0
    prefetches: int = 0
    bytes_served: int = 0


class ExpertTier:
    def __init__(self, root: str, budget_bytes: int, data_dir: str = ".", policy: str = DEFAULT_POLICY) -> None:
        self.root = Path(os.path.realpath(root))
        self.data_dir = data_dir
        self.resident = ResidentSet(budget_bytes, make_policy(policy))
        self.models: dict[str, Model] = {}
        self.post: Callable[..., object] | None = None
        self.prefetch_failures = 0

    # -- component hooks -------------------------------------------------------------------

    def start(self, post: Callable[..., object] | None = None) -> None:
        """Open the resident-file directory; ``post(fn, *args)`` runs ``fn`` on the loop later."""
        if not self.root.is_dir():
            raise TierError(f"--moe-cache {self.root} is not a directory")
        self.post = post
        self.resident.open(resident_base(str(self.root), self.data_dir))

    def stop(self) -> None:
        """Drop every resident file and close the shards (a clean shutdown)."""
        self.resident.close()
        for model in self.models.values():
            model.shards.close()
        self.models.clear()

    def cron(self) -> None:
        """Nothing periodic yet: eviction happens when a load needs room."""

    def budget_changed(self, budget_bytes: int) -> None:
        """CONFIG SET moe-cache-mib: evict down to the new budget at once."""
        self.resident.shrink_to(budget_bytes)

    def snapshot_extension(self) -> None:
        """The tier persists nothing in snapshots (the shards are the copy of record)."""
        return None

    def metrics(self) -> dict[str, int]:
        models = self.models.values()
        return {
            "moe_models": len(self.models), "moe_budget_bytes": self.resident.budget,
            "moe_resident_bytes": self.resident.used, "moe_resident_experts": len(self.resident.entries),
            "moe_pinned_experts": len(self.resident.pinned), "moe_hits": sum(m.hits for m in models),
            "moe_misses": sum(m.misses for m in models), "moe_prefetched_hits": sum(m.prefetched_hits for m in models),
            "moe_prefetches": sum(m.prefetches for m in models), "moe_evictions": self.resident.evictions,
            "moe_bypasses": self.resident.bypasses, "moe_bytes_served": sum(m.bytes_served for m in models),
            "moe_spare_bytes": self.resident.spares.nbytes() if self.resident.spares else 0,
        }

    def info(self) -> dict[str, object]:
        """INFO's ``# MoE`` section."""
        return {"moe_enabled": 1, "moe_cache_dir": str(self.root), "moe_policy": self.resident.policy.name,
                **self.metrics()}

    # -- models ----------------------------------------------------------------------------

    def load_model(self, directory: str) -> str:
        """Load the model in ``directory`` (relative to DIR, or absolute inside it); its id."""
        path = self.inside_root(directory)
        if not path.is_dir():
            raise TierError(f"{directory} is not a directory")
        model_id = path.name
        found = self.models.get(model_id)
        if found is not None:
            if found.layout.directory != path:
                raise TierError(f"model id '{model_id}' is taken by {found.layout.directory}")
            return model_id
        if len(self.models) >= MAX_MODELS:
            raise TierError(f"{MAX_MODELS} models are loaded already (the limit); MOE.EXPERT.UNLOAD one first")
        try:
            shards = Shards(path)
        except OSError as exc:
            raise TierError(f"{directory}: {exc.strerror or exc}") from None
        except ShardError as exc:
            raise TierError(str(exc)) from None
        try:
            layout = read_layout(model_id, shards)
        except ShardError as exc:
            shards.close()
            raise TierError(str(exc)) from None
        ordinal = {layer: i for i, layer in enumerate(layout.moe_layers)}
        self.models[model_id] = Model(layout, shards, Histograms(layout.n_layers, layout.n_experts), ordinal)
        self.resident.policy.add_model(model_id, len(layout.moe_layers), layout.top_k or 1)
        log.info("MoE model %s: %d layers x %d experts, %s, %d bytes an expert", model_id, len(layout.moe_layers),
                 layout.n_experts, layout.storage, layout.expert_bytes)
        return model_id

    def unload_model(self, model_id: str) -> None:
        model = self.model(model_id)
        for key in [k for k in self.resident.entries if k[0] == model_id]:
            self.resident.evict(key)
        self.resident.policy.drop_model(model_id)
        del self.models[model_id]
        model.shards.close()

    def model(self, model_id: str) -> Model:
        found = self.models.get(model_id)
        if found is None:
            raise TierError(f"no such model '{model_id}' (MOE.EXPERT.LOAD it first)")
        return found

    def key(self, model_id: str, layer: int, expert: int, allow_pruned: bool = False) -> tuple:
        """The policy key of an expert; TierError for a bad index, Pruned for a pruned one."""
        model = self.model(model_id)
        ordinal = model.ordinal.get(layer)
        if ordinal is None:
            raise TierError(f"layer {layer} of '{model_id}' has no experts (MoE layers: {_ranges(model.layout.moe_layers)})")
        if not 0 <= expert < model.layout.n_experts:
            raise TierError(f"expert {expert} is out of range (0..{model.layout.n_experts - 1})")
        if not allow_pruned and (layer, expert) in model.pruned:
            raise Pruned(layer, expert)
        return (model_id, ordinal, expert)

    def inside_root(self, name: str) -> Path:
        """``name`` resolved against DIR; TierError if it leads outside DIR."""
        path = Path(os.path.realpath(self.root / name))
        if path != self.root and self.root not in path.parents:
            raise TierError(f"{name} is outside the moe-cache directory {self.root}")
        return path

    # -- fetching --------------------------------------------------------------------------

    def access(self, model_id: str, layer: int, expert: int, ns: str) -> tuple[tuple, Entry | None, bool]:
        """Count one demand fetch: ``(key, resident entry or None, whether a miss should be cached)``."""
        key = self.key(model_id, layer, expert)
        model = self.models[model_id]
        model.hist.get(ns, create=True)
        self.resident.policy.record(key)
        entry = self.resident.get(key)
        if entry is not None:
            model.hits += 1
            model.hist.count(ns, layer, expert, miss=False, prefetched_hit=entry.prefetched)
            if entry.prefetched:
                model.prefetched_hits += 1
                entry.prefetched = False
            model.bytes_served += entry.nbytes
            return key, entry, False
        model.misses += 1
        model.hist.count(ns, layer, expert, miss=True, prefetched_hit=False)
        model.bytes_served += model.layout.expert_bytes
        return key, None, self.resident.should_cache(key, model.layout.expert_bytes)

    def fetch(self, model_id: str, layer: int, expert: int, ns: str = DEFAULT_NS) -> Entry | Future:
        """A resident expert (a hit), or the future of its load (a miss: ``run_load`` it, then
        ``land`` its result)."""
        key, entry, cache = self.access(model_id, layer, expert, ns)
        if entry is not None:
            return entry
        model = self.models[model_id]
        return self.resident.start_load(key, model.shards, model.layout.parts[(layer, expert)], cache)

    def local(self, model_id: str, layer: int, expert: int, ns: str = DEFAULT_NS):
        """The local lane: a resident entry, the future of its load into a resident file, or (when
        the budget would not keep it) its parts' ranges in the shards (``shard_location``)."""
        key, entry, cache = self.access(model_id, layer, expert, ns)
        if entry is not None:
            return entry
        model = self.models[model_id]
        if cache:
            return self.resident.start_load(key, model.shards, model.layout.parts[(layer, expert)], True)
        return self.shard_location(model_id, layer, expert)

    def land(self, entry: Entry) -> Entry:
        """A finished demand load: cache it if it still fits (the loop's single write)."""
        if not self._is_live(entry.key):
            discard(entry)  # unloaded or pruned meanwhile: serve this once
            return entry
        return self.resident.land(entry)

    def _is_live(self, key: tuple) -> bool:
        model = self.models.get(key[0])
        return model is not None and (model.layout.moe_layers[key[1]], key[2]) not in model.pruned

    def locate(self, entry: Entry) -> list[tuple[str, int, int, int, int]] | None:
        """The local lane: ``[(file, proj, comp, offset, nbytes)]`` of a resident entry's parts."""
        if entry.path is None or not entry.cached:
            return None
        return [(entry.path, proj, comp, off, size) for proj, comp, off, size in entry.offsets]

    def shard_location(self, model_id: str, layer: int, expert: int) -> list[tuple[str, int, int, int, int]]:
        """The local lane for an expert the budget does not hold: its parts' ranges in the shards."""
        model = self.models[model_id]
        paths = model.shards.paths
        return [(str(paths[p.shard]), p.proj, p.comp, p.start, p.nbytes) for p in model.layout.parts[(layer, expert)]]

    def prefetch(self, model_id: str, layer: int, experts: list[int]) -> int:
        """Start loading experts that are neither resident nor under way; how many were started.

        An expert the policy would not admit (or that does not fit) gets a page-cache hint
        (``fadvise WILLNEED``) instead, so its later miss reads from memory."""
        keys = [self.key(model_id, layer, e, allow_pruned=True) for e in experts]
        model = self.models[model_id]
        started = 0
        for expert, key in zip(experts, keys, strict=True):
            if (layer, expert) in model.pruned or key in self.resident.entries or key in self.resident.pending:
                continue
            parts = model.layout.parts[(layer, expert)]
            if not self.resident.should_cache(key, model.layout.expert_bytes, prefetch=True):
                for part in parts:
                    model.shards.advise_willneed(part.shard, part.start, part.nbytes)
                continue
            future = self.resident.start_load(key, model.shards, parts, True, background=True)
            model.prefetches += 1
            started += 1
            if self.post is None:
                self._landed_prefetch(future)
            else:
                future.add_done_callback(lambda f: self.post(self._landed_prefetch, f))
        return started

    def _landed_prefetch(self, future: Future) -> None:
        try:
            entry = future.result()
        except Exception as exc:
            self.prefetch_failures += 1
            log.warning("MoE prefetch failed: %s", exc)
            return
        if self._is_live(entry.key):
            self.resident.land(entry, prefetched=True)
        else:
            discard(entry)

    def pin(self, model_id: str, layer: int, expert: int) -> Future | None:
        """Keep an expert resident; None if it is already, else the future of its load."""
        key = self.key(model_id, layer, expert)
        if key in self.resident.entries:
            self.resident.pinned.add(key)
            return None
        model = self.models[model_id]
        nbytes = -(-model.layout.expert_bytes // PAGE) * PAGE
        if self.resident.pinned_bytes() + nbytes > self.resident.budget:
            raise TierError(f"pinning needs {nbytes} more bytes; pinned experts would exceed moe-cache-mib "
                            f"({self.resident.budget // MIB} MiB)")
        return self.resident.start_load(key, model.shards, model.layout.parts[(layer, expert)], True)

    def finish_pin(self, entry: Entry) -> None:
        landed = self.land(entry)
        if not landed.cached:
            raise TierError("no room to pin this expert (the budget is held by pinned experts)")
        self.resident.pinned.add(landed.key)

    def unpin(self, model_id: str, layer: int, expert: int) -> None:
        self.resident.pinned.discard(self.key(model_id, layer, expert, allow_pruned=True))

    def prune(self, model_id: str, layer: int, expert: int, pruned: bool) -> int:
        """Mark an expert pruned (FETCH answers PRUNED; its copy is dropped) or not; the count."""
        key = self.key(model_id, layer, expert, allow_pruned=True)
        model = self.models[model_id]
        if pruned:
            model.pruned.add((layer, expert))
            self.resident.evict(key)
        else:
            model.pruned.discard((layer, expert))
        return len(model.pruned)

    # -- reports ---------------------------------------------------------------------------

    def model_info(self, model_id: str) -> dict:
        model = self.model(model_id)
        lay = model.layout
        resident = [k for k in self.resident.entries if k[0] == model_id]
        return {
            "model": model_id, "layers": lay.n_layers, "moe_layers": lay.moe_layers, "experts": lay.n_experts,
            "top_k": lay.top_k, "bits": lay.bits, "group_size": lay.group_size, "hidden_size": lay.hidden_size,
            "moe_intermediate": lay.moe_intermediate, "storage": lay.storage, "expert_tensors": lay.expert_tensors,
            "dense_tensors": lay.dense_tensors, "tensors": lay.expert_tensors + lay.dense_tensors,
            "expert_bytes": lay.expert_bytes, "parts": lay.part_specs(), "hits": model.hits, "misses": model.misses,
            "prefetched_hits": model.prefetched_hits, "prefetches": model.prefetches, "ns_count": len(model.hist.spaces),
            "resident_experts": len(resident),
            "pinned": sorted([lay.moe_layers[o], e] for owner, o, e in self.resident.pinned if owner == model_id),
            "pruned": sorted([layer, e] for layer, e in model.pruned),
        }

    def stats(self) -> dict:
        return {"stage": 1, "enabled": True, "policy": self.resident.policy.name, "models": sorted(self.models),
                "budget_bytes": self.resident.budget, "resident_bytes": self.resident.used,
                "resident_experts": len(self.resident.entries), "pinned_experts": len(self.resident.pinned),
                "hits": sum(m.hits for m in self.models.values()), "misses": sum(m.misses for m in self.models.values()),
                "prefetched_hits": sum(m.prefetched_hits for m in self.models.values()),
                "prefetches": sum(m.prefetches for m in self.models.values()),
                "prefetch_failures": self.prefetch_failures, "evictions": self.resident.evictions,
                "bypasses": self.resident.bypasses, "bytes_served": sum(m.bytes_served for m in self.models.values()),
                "resident_dir": str(self.resident.directory or "")}

    def seed_policy(self, model_id: str) -> None:
        """Seed the cache policy from the model's histograms (after ``HIST LOAD``)."""
        model = self.models[model_id]
        seeder = getattr(self.resident.policy, "seed_histogram", None)
        if seeder is not None:
            totals = model.hist.total()
            seeder(model_id, [totals[layer].tolist() for layer in model.layout.moe_layers])


DISABLED_STATS = {"stage": 1, "enabled": False, "models": [], "budget_bytes": 0, "resident_bytes": 0,
                  "hits": 0, "misses": 0, "reason": "MoE expert tier not enabled (use --moe-cache DIR --moe-cache-mib N)"}


def _ranges(layers: list[int]) -> str:
    return ",".join(map(str, layers[:16])) + (",..." if len(layers) > 16 else "")
