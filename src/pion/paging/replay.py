"""Replaying a routing trace through a cache: a policy's hit count, and Belady's offline optimum.

A trace is the sequence of expert keys in the order a model asks for them (token by token,
layer by layer, the routed top-k of each layer together), as integers ``layer * n_experts +
expert``. Capacities are in experts (all experts of one model have one size). The experts of one
layer's top-k are needed at the same moment, so a replay never evicts a key of the group being
fetched (``group`` = k).

Belady's MIN with bypass (evict the resident key whose next use is farthest; if the missed key
itself is used later than all of them, do not cache it) is the optimum for equal sizes: no
policy, online or not, gets more hits from the same capacity.
"""

from __future__ import annotations

import heapq

import numpy as np

from pion.paging.policies import Policy


def next_uses(trace: np.ndarray) -> np.ndarray:
    """For each position, the index of the same key's next access (len(trace) if none)."""
    n = len(trace)
    out = np.full(n, n, dtype=np.int64)
    last: dict[int, int] = {}
    for i in range(n - 1, -1, -1):
        key = int(trace[i])
        out[i] = last.get(key, n)
        last[key] = i
    return out


def belady_hits(trace: np.ndarray, capacity: int) -> int:
    """Hits of the offline optimum (MIN with bypass) on ``trace`` with ``capacity`` slots."""
    if capacity <= 0:
        return 0
    nxt = next_uses(trace)
    resident: dict[int, int] = {}  # key -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, key), stale entries skipped
    hits = 0
    for i, raw in enumerate(trace):
        key, upcoming = int(raw), int(nxt[i])
        if key in resident:
            hits += 1
        elif len(resident) >= capacity:
            while -heap[0][0] != resident.get(heap[0][1], -1):
                heapq.heappop(heap)
            farthest = -heap[0][0]
            if farthest <= upcoming:
                continue  # bypass: every resident key is needed before this one
            del resident[heapq.heappop(heap)[1]]
        resident[key] = upcoming
        heapq.heappush(heap, (-upcoming, key))
    return hits


def replay_hits(policy: Policy, trace: np.ndarray, capacity: int, n_experts: int, group: int = 1) -> int:
    """Hits of an online ``policy`` on ``trace`` with ``capacity`` slots (never evicting the
    other keys of the current group of ``group`` accesses: one layer's top-k)."""
    if capacity <= 0:
        return 0
    keys = [(0, int(k) // n_experts, int(k) % n_experts) for k in trace]
    policy.add_model(0, max(k[1] for k in keys) + 1, group)
    hits = 0
    size = 0
    current: set = set()
    for i, key in enumerate(keys):
        if i % group == 0:
            current = set(keys[i:i + group])
        policy.record(key)
        if key in policy:
            hits += 1
            continue
        victims = []
        while size - len(victims) >= capacity:
            chosen = policy.victim(lambda k, v=victims, c=current: k in c or k in v)
            if chosen is None:
                break
            victims.append(chosen)
        if size - len(victims) >= capacity or not policy.admits(key, victims):
            continue
        for old in victims:
            policy.remove(old)
        size -= len(victims)
        policy.insert(key)
        size += 1
    return hits
