"""``PionSemanticCache``: answers of an LLM found again by the meaning of the prompt (AI.SEMANTIC_CACHE).

The server embeds the prompt and decides hit or miss with one rule: **a hit when the cosine
similarity of the prompt to a cached one is at least the threshold** (``threshold`` here, or
the server's ``semantic-cache-threshold`` when None). The sync and the async methods build the
same command with the same number and pass it through unchanged (the anchors' sync and async
paths read one threshold on two scales: redis-vl-python#407, langchain-redis#98); nothing on the
client converts it. A candidate above the threshold is then verified by the server (``verify``:
off, lexical or model; ``pion.semantic.verify``) and ``decide`` returns the server's reason too.

    cache = PionSemanticCache("pion://127.0.0.1:1974", threshold=0.9, ttl=3600)

    @cache.cached
    def ask(prompt: str) -> str:
        return llm(prompt)          # called only on a miss; the answer is stored

    @cache.cached
    async def ask_async(prompt: str) -> str:
        return await allm(prompt)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pion.client.client import DEFAULT_URL, redis_url
from pion.client.errors import translate

VERIFY_MODES = ("off", "lexical", "model")


@dataclass(frozen=True)
class CacheHit:
    response: str
    similarity: float
    workspace: bytes | None = None
    #: why the server served it ("hit: verified (lexical), similarity 0.93; refused first: ...")
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    """A lookup's outcome with the server's reason: ``hit`` is None on a miss, and ``reason`` says
    why (no entry, below the threshold, or which candidate the verifier refused and in which category)."""

    hit: CacheHit | None
    reason: str


@dataclass
class _Options:
    threshold: float | None
    ttl: int | None
    tags: tuple[str, ...] = field(default_factory=tuple)
    verify: str | None = None


def _verify(mode: str | None) -> str | None:
    if mode is not None and mode not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)} (or None: the server's default)")
    return mode


def _tags(tags: Iterable[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    chosen = default if tags is None else tuple(tags)
    for tag in chosen:
        if "," in tag:
            raise ValueError(f"a tag may not contain a comma: {tag!r}")
    return chosen


class PionSemanticCache:
    def __init__(self, url: str = DEFAULT_URL, *, threshold: float | None = None, ttl: int | None = None,
                 tags: Iterable[str] = (), verify: str | None = None, client: Any = None, async_client: Any = None,
                 socket_timeout: float = 120.0, **redis_kwargs: Any) -> None:
        if threshold is not None and not -1.0 <= threshold <= 1.0:
            raise ValueError("threshold is a cosine similarity: it must be between -1 and 1")
        self.url = url
        self.options = _Options(threshold, ttl, _tags(tags, ()), _verify(verify))
        self._redis_kwargs = dict(redis_kwargs, socket_timeout=socket_timeout)
        self._client = client
        self._async = async_client
        self._async_own: Any = None
        self._async_loop: Any = None

    # -- connections -----------------------------------------------------------------------------

    @property
    def redis(self) -> Any:
        if self._client is None:
            from pion.client.agent_memory import connect

            self._client = connect(self.url, **self._redis_kwargs)
        return self._client

    @property
    def aredis(self) -> Any:
        """The asyncio client of the running event loop (one is made per loop: a redis.asyncio
        connection belongs to the loop that opened it, and ``asyncio.run`` makes a new loop each
        time); one given to the constructor is always used."""
        if self._async is not None:
            return self._async
        import asyncio

        loop = asyncio.get_running_loop()
        if self._async_loop is not loop:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._async_own = redis.asyncio.Redis.from_url(redis_url(self.url), protocol=3,
                                                           retry=Retry(NoBackoff(), 0), **self._redis_kwargs)
            self._async_loop = loop
        return self._async_own

    # -- the commands, built once for both paths -------------------------------------------------

    def _get_args(self, prompt: str, threshold: float | None, tags: Iterable[str] | None,
                  verify: str | None = None) -> list[Any]:
        args: list[Any] = ["AI.SEMANTIC_CACHE", "GET", prompt, "WITHSCORE", "WITHWORKSPACE", "WITHREASON"]
        chosen = self.options.threshold if threshold is None else threshold
        if chosen is not None:
            args += ["THRESHOLD", repr(float(chosen))]
        mode = self.options.verify if verify is None else _verify(verify)
        if mode is not None:
            args += ["VERIFY", mode]
        wanted = _tags(tags, self.options.tags)
        if wanted:
            args += ["FILTER", ",".join(wanted)]
        return args

    def _set_args(self, prompt: str, response: str, ttl: int | None, tags: Iterable[str] | None,
                  workspace: bytes | None) -> list[Any]:
        args: list[Any] = ["AI.SEMANTIC_CACHE", "SET", prompt, response]
        chosen = self.options.ttl if ttl is None else ttl
        if chosen:
            args += ["TTL", int(chosen)]
        if workspace is not None:
            args += ["WORKSPACE", workspace]
        wanted = _tags(tags, self.options.tags)
        if wanted:
            args += ["TAGS", ",".join(wanted)]
        return args

    @staticmethod
    def _decision(reply: Any) -> Decision:
        response, score, workspace, reason = reply
        why = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        if response is None:
            return Decision(None, why)
        text = response.decode("utf-8", "replace") if isinstance(response, bytes) else str(response)
        return Decision(CacheHit(text, float(score), workspace, why), why)

    # -- sync --------------------------------------------------------------------------------------

    def decide(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
               verify: str | None = None) -> Decision:
        """The hit or None, with the server's reason (``verify``: off, lexical or model; None: the
        cache's, else the server's ``semantic-cache-verify``)."""
        args = self._get_args(prompt, threshold, tags, verify)
        try:
            return self._decision(self.redis.execute_command(*args))
        except Exception as exc:
            raise translate(exc) from exc

    def lookup(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
               verify: str | None = None) -> CacheHit | None:
        """The hit (response, similarity, workspace, reason) or None."""
        return self.decide(prompt, threshold=threshold, tags=tags, verify=verify).hit

    def get(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
            verify: str | None = None) -> str | None:
        hit = self.lookup(prompt, threshold=threshold, tags=tags, verify=verify)
        return None if hit is None else hit.response

    def set(self, prompt: str, response: str, *, ttl: int | None = None, tags: Iterable[str] | None = None,
            workspace: bytes | None = None) -> None:
        args = self._set_args(prompt, response, ttl, tags, workspace)  # a bad tag is a ValueError, before any I/O
        try:
            self.redis.execute_command(*args)
        except Exception as exc:
            raise translate(exc) from exc

    def delete(self, prompt: str) -> int:
        return int(self.redis.execute_command("AI.SEMANTIC_CACHE", "DEL", prompt))

    def clear(self) -> int:
        return int(self.redis.execute_command("AI.SEMANTIC_CACHE", "FLUSH"))

    def stats(self) -> dict[str, Any]:
        raw = self.redis.execute_command("AI.SEMANTIC_CACHE", "STATS")
        if isinstance(raw, list):
            raw = dict(zip(raw[::2], raw[1::2], strict=True))
        return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in raw.items()}

    # -- async -------------------------------------------------------------------------------------

    async def adecide(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
                      verify: str | None = None) -> Decision:
        args = self._get_args(prompt, threshold, tags, verify)
        try:
            return self._decision(await self.aredis.execute_command(*args))
        except Exception as exc:
            raise translate(exc) from exc

    async def alookup(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
                      verify: str | None = None) -> CacheHit | None:
        return (await self.adecide(prompt, threshold=threshold, tags=tags, verify=verify)).hit

    async def aget(self, prompt: str, *, threshold: float | None = None, tags: Iterable[str] | None = None,
                   verify: str | None = None) -> str | None:
        hit = await self.alookup(prompt, threshold=threshold, tags=tags, verify=verify)
        return None if hit is None else hit.response

    async def aset(self, prompt: str, response: str, *, ttl: int | None = None, tags: Iterable[str] | None = None,
                   workspace: bytes | None = None) -> None:
        args = self._set_args(prompt, response, ttl, tags, workspace)
        try:
            await self.aredis.execute_command(*args)
        except Exception as exc:
            raise translate(exc) from exc

    # -- the decorator -----------------------------------------------------------------------------

    def cached(self, fn: Callable | None = None, *, prompt_arg: str | int = 0, threshold: float | None = None,
               ttl: int | None = None, tags: Iterable[str] | None = None) -> Any:
        """Wrap an LLM call (sync or async): a hit returns the cached answer without calling it; a
        miss calls it and stores a ``str`` answer. ``prompt_arg`` names the prompt parameter (its
        position or keyword; the first argument by default)."""

        def decorate(func: Callable) -> Callable:
            signature = inspect.signature(func)

            def prompt_of(args: tuple, kwargs: dict) -> str:
                bound = signature.bind(*args, **kwargs)
                if isinstance(prompt_arg, int):
                    return str(list(bound.arguments.values())[prompt_arg])
                return str(bound.arguments[prompt_arg])

            if inspect.iscoroutinefunction(func):
                @functools.wraps(func)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    prompt = prompt_of(args, kwargs)
                    hit = await self.aget(prompt, threshold=threshold, tags=tags)
                    if hit is not None:
                        return hit
                    answer = await func(*args, **kwargs)
                    if isinstance(answer, str):
                        await self.aset(prompt, answer, ttl=ttl, tags=tags)
                    return answer
                return async_wrapper

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                prompt = prompt_of(args, kwargs)
                hit = self.get(prompt, threshold=threshold, tags=tags)
                if hit is not None:
                    return hit
                answer = func(*args, **kwargs)
                if isinstance(answer, str):
                    self.set(prompt, answer, ttl=ttl, tags=tags)
                return answer
            return wrapper

        return decorate(fn) if fn is not None else decorate

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
