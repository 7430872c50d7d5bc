"""A persistent response cache (SQLite) and a wrapper that puts it around any ChatModel.

The key is a SHA-256 of the model id, the normalised messages and the generation parameters (temperature,
max_tokens, stop), so rebuilding a summary tree with the same model and prompts pays for each call once.
Sampled answers (temperature > 0) are cached too: the first sample is replayed, which is what makes a rebuild
reproducible. Use a different ``namespace`` (or a fresh file) to draw new samples.

>>> from fragrel_integrations.testing import ScriptedChatModel
>>> model = CachedChatModel(ScriptedChatModel(["first", "second"]), ":memory:")
>>> model.invoke("hi"), model.invoke("hi"), (model.hits, model.misses)
('first', 'first', (1, 1))
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._closing import Closing
from .._sqlite import SavedFormat
from .chat import ChatModel, ChatModelBase, Messages, check_chat_model, check_params, model_id, to_messages
from .structured import ReplyFormat, supports_format

__all__ = ["CachedChatModel", "ResponseCache", "cache_key"]

_KEY_VERSION = 1
_FORMAT = SavedFormat(
    "fragrel-response-cache",
    _KEY_VERSION,
    "FragRel response cache",
    (
        "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, "
        "response TEXT NOT NULL, created REAL NOT NULL)",
    ),
)


def cache_key(
    model: str,
    messages: Messages,
    *,
    temperature: float | None = None,
    max_tokens: int | None = None,
    stop: str | Sequence[str] | None = None,
    namespace: str = "",
) -> str:
    """Hex SHA-256 of the canonical JSON of everything that determines a response.

    >>> cache_key("m", "hi") == cache_key("m", [{"role": "user", "content": "hi"}])
    True
    >>> cache_key("m", "hi", temperature=0.0) == cache_key("m", "hi", temperature=0.7)
    False
    """
    t, n, s = check_params(temperature, max_tokens, stop)
    payload = {
        "v": _KEY_VERSION,
        "ns": namespace,
        "model": model,
        "messages": to_messages(messages),
        "temperature": t,
        "max_tokens": n,
        "stop": s,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache(Closing):
    """SQLite table ``responses(key, model, request, response, created)``; safe to share between threads.

    ``path`` is a file (created with its parent folders; a
    :class:`~fragrel_integrations._sqlite.SavedFormat`, so a file of something else is refused with a ValueError)
    or ``":memory:"``. Writes are transactional.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path) if str(path) == ":memory:" else str(Path(path).expanduser())
        self._lock = threading.Lock()
        self._conn = _FORMAT.open(self.path, threads=True, wal=True, timeout=30.0)

    def get(self, key: str) -> str | None:
        """The stored response for ``key``, or None."""
        with self._lock:
            row = self._conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, response: str, *, model: str = "", request: object = None) -> None:
        """Store (or replace) ``response`` under ``key``; ``request`` is kept as JSON for inspection."""
        if not isinstance(response, str):
            raise TypeError(f"response must be str, got {type(response).__name__}")
        req = json.dumps(request, ensure_ascii=False, sort_keys=True, default=str)
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, request, response, created) VALUES (?, ?, ?, ?, ?)",
                (key, model, req, response, time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def clear(self) -> None:
        """Delete every stored response."""
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM responses")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r})"


class CachedChatModel(ChatModelBase):
    """Wrap any :class:`ChatModel` with a :class:`ResponseCache` (a path, ``":memory:"`` or a cache object).

    ``model_name`` overrides the id used in keys (default: :func:`~fragrel_integrations.models.chat.model_id`);
    give one when two different models would otherwise share an id. ``hits`` and ``misses`` count lookups.
    """

    def __init__(
        self,
        model: ChatModel,
        cache: ResponseCache | str | Path,
        *,
        model_name: str | None = None,
        namespace: str = "",
    ) -> None:
        self.model = check_chat_model(model)
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.model_name = model_name or model_id(model)
        self.namespace = namespace
        self.hits = 0
        self.misses = 0
        self._count_lock = threading.Lock()

    @property
    def context_window(self) -> int | None:
        from .chat import context_window

        return context_window(self.model)

    def count_tokens(self, text: str) -> int:
        from .tokens import count_tokens

        return count_tokens(self.model, text)

    def _key(
        self,
        messages: list[dict[str, str]],
        t: float | None,
        n: int | None,
        s: list[str] | None,
        reply_format: ReplyFormat | None = None,
    ) -> str:
        namespace = self.namespace
        if reply_format is not None:  # a constrained reply is another request than a free one
            namespace += "\x00format:" + json.dumps([reply_format.kind, reply_format.spec, reply_format.choices])
        return cache_key(self.model_name, messages, temperature=t, max_tokens=n, stop=s, namespace=namespace)

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """The wrapped model's answer (the cache keeps constrained and free replies apart)."""
        return supports_format(self.model, reply_format)

    def yes_no_probability(self, messages: Messages) -> float | None:
        """The wrapped model's ``P(yes)`` (not cached; None when it gives no probabilities)."""
        from .yes_no import yes_no_probability

        return yes_no_probability(self.model, messages)

    async def ayes_no_probability(self, messages: Messages) -> float | None:
        from .yes_no import ayes_no_probability

        return await ayes_no_probability(self.model, messages)

    def _lookup(
        self,
        messages: list[dict[str, str]],
        t: float | None,
        n: int | None,
        s: list[str] | None,
        reply_format: ReplyFormat | None,
    ) -> tuple[str, str | None, dict[str, Any]]:
        """The request's key, the cached reply (None on a miss, counted) and the keywords for the wrapped model."""
        key = self._key(messages, t, n, s, reply_format)
        hit = self.cache.get(key)
        with self._count_lock:
            if hit is None:
                self.misses += 1
            else:
                self.hits += 1
        options: dict[str, Any] = {"temperature": t, "max_tokens": n, "stop": s}
        if reply_format is not None:
            options["reply_format"] = reply_format
        return key, hit, options

    def _store(self, key: str, messages: list[dict[str, str]], options: dict[str, Any], out: str) -> str:
        params = {name: options[name] for name in ("temperature", "max_tokens", "stop")}
        request = {"messages": messages, **params, "namespace": self.namespace}
        self.cache.put(key, out, model=self.model_name, request=request)
        return out

    def _generate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        key, hit, options = self._lookup(messages, temperature, max_tokens, stop, reply_format)
        if hit is not None:
            return hit
        return self._store(key, messages, options, self.model.invoke(messages, **options))

    async def _agenerate_format(self, messages, temperature, max_tokens, stop, reply_format) -> str:  # type: ignore[no-untyped-def]
        key, hit, options = self._lookup(messages, temperature, max_tokens, stop, reply_format)
        if hit is not None:
            return hit
        return self._store(key, messages, options, await self.model.ainvoke(messages, **options))

    def _generate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return self._generate_format(messages, temperature, max_tokens, stop, None)

    async def _agenerate(
        self, messages: list[dict[str, str]], temperature: float | None, max_tokens: int | None, stop: list[str] | None
    ) -> str:
        return await self._agenerate_format(messages, temperature, max_tokens, stop, None)
