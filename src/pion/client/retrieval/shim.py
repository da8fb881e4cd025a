"""What every runtime shim shares (a leaf of ``pion.client.retrieval``: the shims import it,
``runtime.runtime_for`` picks one): ``StopForward`` and the lazily probed ``RopeSpec``."""

from __future__ import annotations

from pion.client.retrieval.rope import RopeSpec


class StopForward(Exception):
    """Raised from inside a forward to end it after the layers that were needed."""


class RuntimeShim:
    """What both shims share: the lazily probed ``RopeSpec``."""

    adapter = None
    _rope: RopeSpec | None = None

    def head_dim(self) -> int:
        heads = {h[1] for h in self.adapter.layout.heads}
        if len(heads) != 1:
            raise NotImplementedError("layers with different head sizes cannot be composed")
        return heads.pop()

    @property
    def rope(self) -> RopeSpec:
        if self._rope is None:
            self._rope = RopeSpec.probe(self.rope_apply, self.head_dim(), self.rope_limit())
        return self._rope

    def rope_apply(self, x, start):  # pragma: no cover - each shim defines it
        raise NotImplementedError

    def rope_limit(self) -> int | None:
        return None
