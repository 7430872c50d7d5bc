"""A persistent SQLite response cache (:class:`ResponseCache`) and :class:`CachedChatModel` around any chat model.

Keys hash the model id, messages and parameters; a sampled reply is replayed too (another ``namespace`` resamples).

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
from .._validation import check_type
from .chat import ChatModel, ChatModelBase, Messages, check_chat_model, check_params, model_id, to_messages
from .structured import ReplyFormat, supports_format
from .tokens import count_tokens
from .yes_no import ayes_no_probability, yes_no_probability

__all__ = ["CachedChatModel", "ResponseCache", "cache_key"]

_KEY_VERSION = 1
_TABLE = (
    "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, "
    "response TEXT NOT NULL, created REAL NOT NULL)"
)
_FORMAT = SavedFormat("fragrel-response-cache", _KEY_VERSION, "FragRel response cache", (_TABLE,))


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
    """
    t, n, s = check_params(temperature, max_tokens, stop)
    payload = {"v": _KEY_VERSION, "ns": namespace, "model": model, "messages": to_messages(messages)}
    payload.update(temperature=t, max_tokens=n, stop=s)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache(Closing):
    """Table ``responses(key, model, request, response, created)`` in a SQLite file or ``":memory:"``; thread-safe."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(Path(path).expanduser())
        self._lock = threading.Lock()
        self._conn = _FORMAT.open(self.path, threads=True, wal=True, timeout=30.0)

    def _run(self, sql: str, *args: object) -> list[Any]:
        with self._lock, self._conn:  # one transaction
            return self._conn.execute(sql, args).fetchall()

    def get(self, key: str) -> str | None:
        """The stored response for ``key``, or None."""
        rows = self._run("SELECT response FROM responses WHERE key = ?", key)
        return rows[0][0] if rows else None

    def put(self, key: str, response: str, *, model: str = "", request: object = None) -> None:
        """Store (or replace) ``response`` under ``key``; ``request`` is kept as JSON for inspection."""
        check_type(response, str, "response must be str")
        req = json.dumps(request, ensure_ascii=False, sort_keys=True, default=str)
        self._run("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", key, model, req, response, time.time())

    def __len__(self) -> int:
        return int(self._run("SELECT COUNT(*) FROM responses")[0][0])

    def clear(self) -> None:
        """Delete every stored response."""
        self._run("DELETE FROM responses")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r})"


class CachedChatModel(ChatModelBase):
    """A :class:`ChatModel` behind a :class:`ResponseCache` (or its path); ``model_name`` is the id in keys."""

    def __init__(
        self, model: ChatModel, cache: ResponseCache | str | Path, *, model_name: str | None = None, namespace: str = ""
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
        return count_tokens(self.model, text)

    def supports_format(self, reply_format: ReplyFormat) -> bool:
        """The wrapped model's answer (constrained and free replies have different keys)."""
        return supports_format(self.model, reply_format)

    def yes_no_probability(self, messages: Messages) -> float | None:
        return yes_no_probability(self.model, messages)

    async def ayes_no_probability(self, messages: Messages) -> float | None:
        return await ayes_no_probability(self.model, messages)

    def _lookup(self, messages, t, n, s, reply_format) -> tuple[str, str | None, dict[str, Any]]:  # type: ignore[no-untyped-def]
        """The key, the cached reply (None on a miss) and the keywords for the wrapped model."""
        namespace = self.namespace
        kw: dict[str, Any] = {"temperature": t, "max_tokens": n, "stop": s}
        if reply_format is not None:
            namespace += "\x00format:" + json.dumps([reply_format.kind, reply_format.spec, reply_format.choices])
            kw["reply_format"] = reply_format
        key = cache_key(self.model_name, messages, temperature=t, max_tokens=n, stop=s, namespace=namespace)
        hit = self.cache.get(key)
        with self._count_lock:
            self.hits += hit is not None
            self.misses += hit is None
        return key, hit, kw

    def _store(self, key: str, messages: list[dict[str, str]], kw: dict[str, Any], out: str) -> str:
        request = {"messages": messages, **kw, "namespace": self.namespace}
        request.pop("reply_format", None)
        self.cache.put(key, out, model=self.model_name, request=request)
        return out

    def _generate(self, messages, temperature, max_tokens, stop, reply_format=None) -> str:  # type: ignore[no-untyped-def]
        key, hit, kw = self._lookup(messages, temperature, max_tokens, stop, reply_format)
        return hit if hit is not None else self._store(key, messages, kw, self.model.invoke(messages, **kw))

    async def _agenerate(self, messages, temperature, max_tokens, stop, reply_format=None) -> str:  # type: ignore[no-untyped-def]
        key, hit, kw = self._lookup(messages, temperature, max_tokens, stop, reply_format)
        return hit if hit is not None else self._store(key, messages, kw, await self.model.ainvoke(messages, **kw))

    _generate_format = _generate  # the same calls, with the format in the key and the keywords
    _agenerate_format = _agenerate
