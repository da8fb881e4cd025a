"""The weights part of a model fingerprint: a hash of every parameter's bytes, once per model.

Why every byte: a fine-tune that touches only some layers (a LoRA merged into q and v, PEFT's
and mlx-lm's default targets) keeps the shapes and the config. A sampled probe misses it and
loads the base model's K/V. So the adapters hash every parameter and buffer (name, dtype, shape
and raw bytes, in order) with xxh3-128, which runs at memory speed (docs/client.md has the
measured cost), plus the state of unmerged adapters (PEFT/LoRA layers: which adapters are
active, merged or disabled, and their scaling), which changes what the same bytes compute.

The digest is computed once per model object and kept in a ``WeakKeyDictionary``, keyed by the
identity and (torch) version counter of every parameter: replacing a parameter or changing one
in place (``load_state_dict``, ``merge_adapter``, an optimizer step) makes the next call hash
again; checking costs microseconds per parameter. The cache holds references to the arrays it
hashed, so their identities cannot be reused by other arrays while it stands.

A caller who already knows what the weights are (a hub id with its commit hash, a digest of the
checkpoint) passes ``fingerprint=`` to ``PionPromptCache`` and no byte is hashed; the contract
is theirs: that string must change whenever any weight or adapter changes, and must be equal
only for models whose K/V are interchangeable.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Iterable

#: model -> (identity key, digest, references that keep the key's identities unique)
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
PREFIX = "xxh3-128:"


def _xxh3():
    try:
        import xxhash
    except ImportError as exc:  # pragma: no cover - a dependency of the hf and mlx extras
        raise ImportError("xxhash is not installed; install it with: pip install 'pion[hf]' (or pion[mlx]), "
                          "or pass fingerprint= to PionPromptCache") from exc
    return xxhash.xxh3_128()


def digest(items: Iterable[tuple[str, str, tuple, object]], extra: object = None) -> str:
    """xxh3-128 over ``(name, dtype, shape, buffer)`` items in order, then ``extra`` as JSON."""
    h = _xxh3()
    for name, dtype, shape, buffer in items:
        h.update(f"{name}|{dtype}|{tuple(shape)}|".encode())
        h.update(buffer)
    if extra is not None:
        h.update(json.dumps(extra, sort_keys=True, default=str, separators=(",", ":")).encode())
    return PREFIX + h.hexdigest()


#: own bytes up to this size are hashed with hashlib's BLAKE2b (no import: the next worker's
#: proof hashes only a few small buffers, and importing xxhash would cost it ~1 ms); larger ones
#: with xxh3-128, ~10x faster per byte
SMALL_BYTES = 1 << 20


def own_digest(buffer) -> str:
    """A 128-bit hash of one buffer's bytes (what describes a tensor that lies in no weights file)."""
    if memoryview(buffer).nbytes <= SMALL_BYTES:
        return "b2b-128:" + hashlib.blake2b(buffer, digest_size=16).hexdigest()
    h = _xxh3()
    h.update(buffer)
    return PREFIX + h.hexdigest()


def cached(model, key: tuple, refs: list, compute: Callable[[], str]) -> str:
    """The model's digest for this identity ``key``, computed (``compute()``) only when it changed."""
    try:
        found = _CACHE.get(model)
    except TypeError:  # not weak-referenceable: hash every time
        return compute()
    if found is not None and found[0] == key:
        return found[1]
    value = compute()
    _CACHE[model] = (key, value, refs)
    return value


def forget(model) -> None:
    """Drop a model's cached digest (the next fingerprint hashes every byte again)."""
    _CACHE.pop(model, None)


class Background:
    """A fingerprint computed in a daemon thread from the moment the prompt cache is made.

    Why: hashing every weight costs memory-speed reads of the whole model (hundreds of ms for a
    1B model, seconds for a 7B one); paid inside the first request, it doubled a fresh worker's
    first time to first token. ``result()`` waits only when the thread is not done yet, and
    re-raises what the thread raised (every time: a cache without a fingerprint cannot serve).
    ``ms`` is how long the hash took (wall clock), ``cpu_ms`` the CPU time of its thread (what it
    spent, whatever else runs on a loaded machine); ``waited_ms`` how long callers waited for it.
    """

    def __init__(self, compute: Callable[[], object]) -> None:
        import threading
        import time

        self._compute, self._time = compute, time.perf_counter
        self._value: object = None
        self._error: BaseException | None = None
        self.ms = 0.0
        self.cpu_ms = 0.0
        self.waited_ms = 0.0
        self._thread = threading.Thread(target=self._run, name="pion-fingerprint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import time

        started, cpu = self._time(), time.thread_time()
        try:
            self._value = self._compute()
        except BaseException as exc:  # noqa: BLE001 - handed to the first caller, never dropped
            self._error = exc
        finally:
            self.cpu_ms = (time.thread_time() - cpu) * 1000
            self.ms = (self._time() - started) * 1000

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self):
        if self._thread.is_alive():
            started = self._time()
            self._thread.join()
            self.waited_ms += (self._time() - started) * 1000
        if self._error is not None:
            raise self._error
        return self._value
