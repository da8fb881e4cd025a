"""Which expert to keep: plain LRU, and expected-next-use (the tier's default).

Expert access is cyclic: every token visits layer 0, 1, ..., L-1 and then layer 0 again, each
layer asking for its routed top-k. LRU is exactly wrong on a cycle: the expert it evicts (the
one used longest ago) belongs to the layer that comes next. Under the skewed routing of real
models a few experts per layer take most of the traffic, and an expert a layer used for the last
token is likely to be used again for the next one (the routers' temporal locality).

``NextUsePolicy`` estimates, for every expert, how many layer steps away its next use is, and
evicts the one farthest away (Belady's rule, with estimates in place of the future):

- per (model, layer) it counts *visits* (a visit starts when a fetch for that layer follows a
  fetch for another one: one token in decode, the whole prompt in prefill);
- per expert it keeps a use frequency per visit, decayed with a half-life of ``half_life``
  visits (seeded from the histograms: ``seed(key, count)``), and the last visit it was used in;
- per layer it measures how often an expert used at one visit is used again at the next
  (``reuse``);
- p = the expert's chance of being used at its layer's next visit: ``max(reuse, frequency)`` if
  it was used at the last one, else its frequency; with d = layer steps until that layer comes
  round again, the expected distance to its next use is ``d + L * (1 - p) / p``.

A missed expert is cached only if its own expected distance is shorter than that of every
expert it would push out (admission); otherwise it is served once and dropped, so a one-off
expert never evicts a popular one. A prefetched expert is assumed to be used at its layer's next
visit (p = 1).

The interface is the same for every policy: ``record(key)`` on each demand access, then the
cache asks ``victim(exclude)`` and ``admits(key, victims)`` before it inserts, and calls
``insert``/``remove`` as it changes. Keys are ``(model, layer, expert)`` tuples with ``layer``
the ordinal of a MoE layer (0 .. n_layers-1); ``add_model(model, n_layers)`` declares a model.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from sortedcontainers import SortedList

Key = tuple  # (model, layer, expert)
Exclude = Callable[[Hashable], bool] | None

#: frequency half-life in visits of a layer, and of the measured reuse rate
HALF_LIFE = 32.0
REUSE_PRIOR = 0.5


class Policy:
    """Base: what a cache needs from a policy (LRU and next-use implement it)."""

    name = "base"

    def add_model(self, model: Hashable, n_layers: int, top_k: int = 1) -> None:
        """A model with ``n_layers`` MoE layers whose keys will be recorded."""

    def drop_model(self, model: Hashable) -> None:
        """Forget a model's statistics (it was unloaded); its keys are no longer resident."""

    def record(self, key: Key) -> None:
        """A demand access to ``key`` (hit or miss), before the cache acts on it."""

    def seed(self, key: Key, count: float) -> None:
        """Prior use of ``key`` (a saved histogram's count); ignored by policies without memory."""

    def insert(self, key: Key) -> None:
        raise NotImplementedError

    def remove(self, key: Key) -> None:
        raise NotImplementedError

    def victim(self, exclude: Exclude = None) -> Key | None:
        """The resident key to drop first (skipping those ``exclude`` says are pinned or in use)."""
        raise NotImplementedError

    def admits(self, key: Key, victims: Iterable[Key], prefetch: bool = False) -> bool:
        """Should ``key`` replace ``victims``? (False: serve it once without caching it.)"""
        return True

    def __contains__(self, key: Key) -> bool:
        raise NotImplementedError


class LRUPolicy(Policy):
    """Least recently used: the baseline every expert-offloading system starts from."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[Key, None] = OrderedDict()

    def record(self, key: Key) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def insert(self, key: Key) -> None:
        self._order[key] = None

    def remove(self, key: Key) -> None:
        self._order.pop(key, None)

    def victim(self, exclude: Exclude = None) -> Key | None:
        for key in self._order:
            if exclude is None or not exclude(key):
                return key
        return None

    def __contains__(self, key: Key) -> bool:
        return key in self._order


@dataclass
class _Layer:
    """One (model, layer): its visit clock, reuse rate and resident experts."""

    ordinal: int
    visit: int = 0
    reuse: float = REUSE_PRIOR
    used_now: set = field(default_factory=set)
    used_before: set = field(default_factory=set)
    #: residents not used at the current visit, by stationary log-frequency (first = rarest)
    old: SortedList = field(default_factory=SortedList)
    #: residents used at the current visit
    recent: set = field(default_factory=set)


@dataclass
class _Model:
    n_layers: int
    top_k: int
    current: int | None = None
    layers: list[_Layer] = field(default_factory=list)


class NextUsePolicy(Policy):
    """Evict the expert whose estimated next use is farthest away (see the module docstring)."""

    name = "nextuse"

    def __init__(self, half_life: float = HALF_LIFE) -> None:
        self._decay = 2.0 ** (-1.0 / half_life)
        self._rate = 1.0 / half_life  # log2 of the per-visit decay
        self._reuse_keep = 2.0 ** (-1.0 / HALF_LIFE)
        self._models: dict[Hashable, _Model] = {}
        #: key -> (decayed count at visit ``when``, when, last visit used)
        self._seen: dict[Key, tuple[float, int, int]] = {}
        self._resident: dict[Key, float] = {}  # key -> its log-score while in ``old``

    # -- models and statistics -------------------------------------------------------------

    def add_model(self, model: Hashable, n_layers: int, top_k: int = 1) -> None:
        if model not in self._models:
            self._models[model] = _Model(n_layers, max(1, top_k), None, [_Layer(i) for i in range(n_layers)])

    def drop_model(self, model: Hashable) -> None:
        self._models.pop(model, None)
        for key in [k for k in self._seen if k[0] == model]:
            del self._seen[key]
        for key in [k for k in self._resident if k[0] == model]:
            del self._resident[key]

    def _layer(self, key: Key) -> tuple[_Model, _Layer]:
        found = self._models.get(key[0])
        if found is None:
            raise KeyError(f"model {key[0]!r} was not added to the policy")
        return found, found.layers[key[1]]

    def _start_visit(self, model: _Model, layer: _Layer) -> None:
        """A fetch for this layer after one for another: close its last visit, open a new one."""
        if layer.used_now:
            if layer.used_before:
                again = len(layer.used_now & layer.used_before) / len(layer.used_before)
                layer.reuse = layer.reuse * self._reuse_keep + (1.0 - self._reuse_keep) * again
            layer.used_before = layer.used_now
            layer.used_now = set()
        layer.visit += 1
        for key in layer.recent:
            score = self._log_score(key)
            self._resident[key] = score
            layer.old.add((score, key))
        layer.recent = set()
        model.current = layer.ordinal

    def _log_score(self, key: Key) -> float:
        """log2 of the decayed count, referred to visit 0 (so it never changes between uses)."""
        count, when, _ = self._seen.get(key, (0.0, 0, -1))
        return (math.log2(count) if count > 0 else -1e9) + when * self._rate

    def record(self, key: Key) -> None:
        model, layer = self._layer(key)
        if model.current != layer.ordinal:
            self._start_visit(model, layer)
        count, when, _ = self._seen.get(key, (0.0, layer.visit, -1))
        self._seen[key] = (count * self._decay ** (layer.visit - when) + 1.0, layer.visit, layer.visit)
        layer.used_now.add(key)
        if key in self._resident and key not in layer.recent:
            layer.old.remove((self._resident[key], key))
            layer.recent.add(key)

    def seed(self, key: Key, count: float) -> None:
        """A saved histogram's ``count`` for ``key``, over ``layer_total / top_k`` visits."""
        if count <= 0:
            return
        was_resident = key in self._resident
        if was_resident:
            self.remove(key)
        model, layer = self._layer(key)
        old, when, last = self._seen.get(key, (0.0, layer.visit, -1))
        self._seen[key] = (old * self._decay ** (layer.visit - when) + float(count), layer.visit, last)
        if was_resident:
            self.insert(key)

    def seed_histogram(self, model: Hashable, counts) -> None:
        """Seed every expert of ``model`` from a ``[n_layers][n_experts]`` count table, scaled to
        the per-visit rate each implies (a layer's visits ~ its total / top_k)."""
        m = self._models[model]
        for ordinal, row in enumerate(counts):
            total = float(sum(row))
            if total <= 0:
                continue
            visits = total / m.top_k
            for expert, c in enumerate(row):
                if c:
                    self.seed((model, ordinal, expert), (c / visits) / (1.0 - self._decay))

    # -- the estimate ----------------------------------------------------------------------

    def _use_chance(self, key: Key, layer: _Layer) -> float:
        count, when, last = self._seen.get(key, (0.0, layer.visit, -1))
        frequency = count * self._decay ** (layer.visit - when) * (1.0 - self._decay)
        if last == layer.visit:
            return min(1.0, max(layer.reuse, frequency))
        return min(0.999, frequency)

    def _distance(self, model: _Model, layer: _Layer, chance: float) -> float:
        """Expected layer steps to the next use, for a use chance per visit of ``chance``."""
        if chance <= 1e-12:
            return math.inf
        steps = (layer.ordinal - model.current) % model.n_layers if model.current is not None else 0
        return (steps or model.n_layers) + model.n_layers * (1.0 - chance) / chance

    def distance(self, key: Key, prefetch: bool = False) -> float:
        model, layer = self._layer(key)
        return self._distance(model, layer, 1.0 if prefetch else self._use_chance(key, layer))

    # -- residency -------------------------------------------------------------------------

    def insert(self, key: Key) -> None:
        _, layer = self._layer(key)
        if key in self._resident:
            return
        _, _, last = self._seen.get(key, (0.0, 0, -1))
        if last == layer.visit:
            self._resident[key] = 0.0
            layer.recent.add(key)
        else:
            self._resident[key] = score = self._log_score(key)
            layer.old.add((score, key))

    def remove(self, key: Key) -> None:
        score = self._resident.pop(key, None)
        if score is None:
            return
        _, layer = self._layer(key)
        if key in layer.recent:
            layer.recent.discard(key)
        else:
            layer.old.remove((score, key))

    def victim(self, exclude: Exclude = None) -> Key | None:
        best, farthest = None, -1.0
        for model in self._models.values():
            for layer in model.layers:
                key, chance = self._layer_victim(layer, exclude)
                if key is None:
                    continue
                distance = self._distance(model, layer, chance)
                if distance > farthest:
                    best, farthest = key, distance
        return best

    def _layer_victim(self, layer: _Layer, exclude: Exclude) -> tuple[Key | None, float]:
        """The resident of this layer least likely to be used at its next visit."""
        best, lowest = None, 2.0
        for _, key in layer.old:
            if exclude is None or not exclude(key):
                best, lowest = key, self._use_chance(key, layer)
                break
        for key in layer.recent:
            if exclude is None or not exclude(key):
                chance = self._use_chance(key, layer)
                if chance < lowest:
                    best, lowest = key, chance
        return best, lowest

    def admits(self, key: Key, victims: Iterable[Key], prefetch: bool = False) -> bool:
        mine = self.distance(key, prefetch)
        return all(mine < self.distance(v) for v in victims)

    def __contains__(self, key: Key) -> bool:
        return key in self._resident


POLICIES: dict[str, type[Policy]] = {"lru": LRUPolicy, "nextuse": NextUsePolicy}
DEFAULT_POLICY = "nextuse"


def make_policy(name: str = DEFAULT_POLICY) -> Policy:
    """A policy by name (``lru`` | ``nextuse``)."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown cache policy '{name}' (want {'|'.join(POLICIES)})") from None
