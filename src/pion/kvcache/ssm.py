"""``SSM.PREFIX.*``: opaque recurrent-state blobs per (session, layer).

A hybrid model (Mamba, GatedDeltaNet + attention) keeps its attention layers' K/V in the
V-store and each linear layer's state here, under the same namespace, so a prefix and its
recurrent state are evicted together. Blobs are kept as given (a memoryview of the log arena
after replay), never parsed.
"""

from __future__ import annotations


class SSMStore:
    def __init__(self) -> None:
        #: sid -> layer -> blob
        self.sessions: dict[bytes, dict[int, bytes | memoryview]] = {}
        self.nbytes = 0

    def store(self, sid: bytes, layer: int, blob: bytes | memoryview) -> int:
        """Keep (or replace) one blob; returns the change in bytes held."""
        layers = self.sessions.setdefault(sid, {})
        old = layers.get(layer)
        delta = len(blob) - (len(old) if old is not None else 0)
        layers[layer] = blob
        self.nbytes += delta
        return delta

    def fetch(self, sid: bytes, layer: int) -> bytes | memoryview | None:
        layers = self.sessions.get(sid)
        return None if layers is None else layers.get(layer)

    def drop(self, sid: bytes, layer: int | None = None) -> bool:
        """Drop one layer or the whole session; True if anything was held."""
        layers = self.sessions.get(sid)
        if layers is None:
            return False
        if layer is None:
            del self.sessions[sid]
            self.nbytes -= sum(len(blob) for blob in layers.values())
            return True
        blob = layers.pop(layer, None)
        if blob is None:
            return False
        self.nbytes -= len(blob)
        if not layers:
            del self.sessions[sid]
        return True

    def session_bytes(self, sid: bytes) -> int:
        return sum(len(blob) for blob in self.sessions.get(sid, {}).values())
