"""The prompt cache with a real Redis or Valkey Cluster as its storage tier (``redis+cluster://``).

Layout: one hash per prefix, its key the namespace with a hash tag (``{pion:...}``), holding
``manifest``, ``tokens`` (u32 LE ids), ``k<layer>``/``v<layer>`` (each layer's encoded rows)
and ``s<slot>`` (recurrent state blobs). One key, so rows and manifest are in one slot and are
written at once, by a Lua script that also refuses to overwrite another prefix unless asked
(the Pion server's PUBLISH rule). LMCache's cluster mode writes two keys per chunk in different
slots, non-atomically; this writes one.

Longest-prefix match: every full block of a stored prefix gets a pointer key
``pion:blk:{<block hash>}`` -> the namespace (written after the prefix; pointers are hints). A
lookup sends ``GET`` for every block of the prompt, one pipeline per node (one round trip per
node), takes the longest hit, then reads that prefix's stored tokens and counts the tokens it
really shares with the prompt. Every hit is then checked against its manifest by the prompt
cache (``_verify``), so a stale pointer or a foreign prefix is a miss, never a wrong answer.
"""

from __future__ import annotations

import secrets
from collections import defaultdict

import numpy as np

from pion.client.cluster import ClusterNodes, NodeDown, tagged
from pion.client.errors import NamespaceRefused, PionConnectionError, PionError
from pion.client.transfer import Fetched, encode_layer

#: KEYS[1] the prefix; ARGV[1] its manifest, ARGV[2] "1" to replace, then field, value, ...
STORE_SCRIPT = """
local cur = redis.call('HGET', KEYS[1], 'manifest')
if cur and cur ~= ARGV[1] and ARGV[2] ~= '1' then
  return redis.error_reply('NSCONFLICT namespace holds another prefix')
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'manifest', ARGV[1], unpack(ARGV, 3))
return 1
"""


def block_key(block_hash: bytes) -> str:
    return "pion:blk:{" + block_hash.hex() + "}"


class RedisClusterStore:
    """What ``PionPromptCache`` needs of its client, over a Redis/Valkey Cluster."""

    tag = staticmethod(tagged)

    def __init__(self, url: str, **options) -> None:
        self.url = url
        self.nodes = ClusterNodes(url, **options)

    # -- helpers -----------------------------------------------------------------------------

    def _run(self, key, commands: list[list]) -> list:
        """One pipeline on the node of ``key``; a redirect refreshes the map and retries once."""
        for attempt in (0, 1):
            addr = self.nodes.node_for(key)
            try:
                replies = self.nodes.client(addr).pipeline_execute(commands)
            except PionConnectionError as exc:
                self.nodes.mark_down(addr)
                raise NodeDown(f"cluster node {addr[0]}:{addr[1]} does not answer: {exc}") from exc
            moved = any(isinstance(r, PionError) and str(r).startswith(("MOVED", "ASK", "TRYAGAIN")) for r in replies)
            if not moved or attempt:
                return replies
            self.nodes.refresh()
        return replies

    # -- the prompt cache's calls ------------------------------------------------------------

    def store_prefix(self, _client, ns: str, ids: list[int], kv, states: dict[int, bytes], schema: dict,
                     manifest: bytes, block_size: int, prefill_ms, after=(), seed: bytes | None = None,
                     replace: bool = False) -> list:
        from pion.client.blocks import block_hashes, token_blob

        # a fresh id per stored entry (Pion's KV.PREFIX.GENERATION): a partial hit checks that the
        # entry it fetches is the one MATCH compared the tokens of, not a replacement stored between
        fields: list = ["tokens", token_blob(ids), "block_size", block_size,
                        "generation", secrets.randbits(62) + 1]
        for layer, (k_rows, v_rows) in enumerate(kv):
            fields += [f"k{layer}", bytes(encode_layer(k_rows, schema["k"][layer])),
                       f"v{layer}", bytes(encode_layer(v_rows, schema["v"][layer]))]
        for slot, blob in states.items():
            fields += [f"s{slot}", blob]
        (reply,) = self._run(ns, [["EVAL", STORE_SCRIPT, 1, ns, manifest, "1" if replace else "0", *fields]])
        if isinstance(reply, PionError):
            if "NSCONFLICT" in str(reply):
                raise NamespaceRefused(str(reply))
            raise reply
        hashes = block_hashes(ids, block_size, **({"root": seed} if seed is not None else {}))
        by_node: dict = defaultdict(list)
        for h in hashes:
            key = block_key(h)
            try:
                by_node[self.nodes.node_for(key)].append(["SET", key, ns])
            except NodeDown:
                continue  # the pointer's node is down: that block length is not findable
        for commands in by_node.values():
            try:
                self._run(commands[0][1], commands)
            except NodeDown:
                continue
        return []

    def fetch_prefix(self, _client, ns: str, n_tokens: int, layout, partial: bool = False,
                     form: str = "range", generation: int | None = None) -> Fetched | None:
        # the whole prefix (manifest, tokens, rows) is one hash read by one HMGET, which Redis runs
        # atomically, so no other prompt's rows are mixed in; ``generation`` (from kv_match_tokens)
        # makes an entry replaced since the MATCH a miss
        n_layers = len(layout.attn)
        fields = ["manifest", "tokens", *(f"k{i}" for i in range(n_layers)), *(f"v{i}" for i in range(n_layers)),
                  *(f"s{s}" for s in layout.state)]
        (values,) = self._run(ns, [["HMGET", ns, "generation", *fields]])
        if isinstance(values, PionError):
            raise values
        stored_generation, values = values[0], values[1:]
        if generation is not None and int(stored_generation or 0) != generation:
            return None
        manifest, tokens = values[0], values[1]
        if manifest is None or tokens is None or any(v is None for v in values[2:]):
            return None
        stored = len(tokens) // 4
        if n_tokens > stored:
            return None
        rows = []
        for raw in values[2:2 + 2 * n_layers]:
            per_row = len(raw) // stored if stored else 0
            rows.append(memoryview(raw)[: n_tokens * per_row])
        states = dict(zip(layout.state, values[2 + 2 * n_layers:], strict=True))
        nbytes = sum(len(x) for x in rows) + sum(len(s) for s in states.values())
        return Fetched(bytes(manifest), rows[:n_layers], rows[n_layers:], states, nbytes)

    def kv_match_tokens(self, block_size: int, hash_blob: bytes, tokens: bytes, seed: bytes | None = None):
        """``(namespace, tokens it shares with the prompt, block size, tokens it stores, generation)``
        or None."""
        from pion.client.blocks import HASH_BYTES

        hashes = [hash_blob[i:i + HASH_BYTES] for i in range(0, len(hash_blob), HASH_BYTES)]
        by_node: dict = defaultdict(list)
        for index, h in enumerate(hashes):
            try:
                by_node[self.nodes.node_for(block_key(h))].append(index)
            except NodeDown:
                continue
        found: dict[int, bytes] = {}
        for indexes in by_node.values():
            try:
                replies = self._run(block_key(hashes[indexes[0]]), [["GET", block_key(hashes[i])] for i in indexes])
            except NodeDown:
                continue
            found.update((i, r) for i, r in zip(indexes, replies, strict=True) if isinstance(r, bytes))
        for index in sorted(found, reverse=True):
            ns = found[index].decode()
            try:
                (values,) = self._run(ns, [["HMGET", ns, "tokens", "block_size", "generation"]])
            except NodeDown:
                continue
            if isinstance(values, PionError) or values[0] is None:
                continue
            stored = np.frombuffer(values[0], dtype="<u4")
            prompt = np.frombuffer(tokens, dtype="<u4")
            n = min(len(stored), len(prompt))
            differ = np.flatnonzero(stored[:n] != prompt[:n])
            held = int(differ[0]) if differ.size else n
            if held > 0:
                return ns, held, int(values[1] or block_size), len(stored), int(values[2] or 0)
        return None

    def kv_drop(self, *namespaces) -> int:
        return sum(int(self._run(ns, [["DEL", ns]])[0]) for ns in namespaces)

    def ssm_drop(self, sid, layer: int | None = None) -> None:
        """State blobs live in the prefix's hash: dropped with it."""

    def close(self) -> None:
        self.nodes.close()
