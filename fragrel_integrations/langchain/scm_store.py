"""The SCM memory stream in a LangGraph store: :class:`LangGraphStoreStream` over any ``BaseStore``.

Each interaction is one store item under the namespace ``namespace + (session_id,)``, keyed by its index
zero-padded to ten digits (``"0000000000"``, ``"0000000001"``, ...) so that keys sort in time order. The value is
a JSON-compatible dict: ``observation``, ``response``, ``summary``, ``embedding`` (a list of floats, or None),
``created`` (a Unix timestamp) and ``index``. Items are written with ``index=False``: SCM scores the stored
embeddings itself (cosine plus the optional FragRel relation), so a store configured with an ``index`` must not
embed them again. Use the same store object you pass to ``create_agent(store=...)`` (an ``InMemoryStore``, a
``PostgresStore``, ...). The sync store methods are used; with an async store (``AsyncPostgresStore``) call the
stream from a worker thread, as the async methods of the SCM memory do.

Session ids are free text: ``%``, ``.`` and NUL (not allowed in a namespace label) are percent-encoded in the
label and decoded by :meth:`LangGraphStoreStream.sessions`.

Trade-offs against the SQLite :class:`~fragrel_integrations.core.scm.SCMStream`:

* a ``BaseStore`` has no transactions. The next index is the largest stored key plus one (checked against the
  store before every append); within one process a lock serialises appends, but two *processes* appending to the
  same session at the same moment could both take the same index and one write would replace the other. Use
  ``SCMStream``'s SQLite file when several processes write one session concurrently.
* :meth:`LangGraphStoreStream.items` keeps each session's items in memory, as ``SCMStream`` does. On every call
  it asks the store, in one ``store.batch`` of ``get`` operations, for the first and last cached items (to check
  that they are still the same writes: their ``created`` must match, so a clear by another stream object or
  process is noticed) and for the keys that follow the last one (items appended since, by any writer; indices
  are contiguous because every append takes the newest index plus one). Only those new items are decoded. When
  the check fails, or nothing is cached, the whole session is read with ``store.search`` (in pages of
  ``page_size``; it returns 10 items unless told otherwise). ``get`` by key works the same on every
  ``BaseStore``; a ``search`` filter such as ``{"index": {"$gt": last}}`` does not: ``InMemoryStore`` compares
  numbers but scans the whole namespace, and ``PostgresStore`` compares ``value->>'index'`` as text
  (``"10" < "9"``). Unlike ``SCMStream``, which also counts the rows, a deletion in the *middle* of a session
  that leaves its first and last items in place (the stream itself never deletes single items; a direct
  ``store.delete`` or a TTL sweep could) is not noticed while the cache lasts; :meth:`LangGraphStoreStream.close`
  drops the cache. A store with a default TTL (``PostgresStore(ttl={"default_ttl": ...})``) expires items on its
  own, so no cache is kept there: every call reads the whole session, as before. :meth:`LangGraphStoreStream.count`
  always reads the whole session.

>>> import numpy as np
>>> from langgraph.store.memory import InMemoryStore
>>> store = InMemoryStore()
>>> stream = LangGraphStoreStream(store)
>>> item = stream.append("ana", "Hi, I am Ana.", "Hello Ana!", summary="The user is Ana.", embedding=np.ones(2))
>>> item.index, stream.count("ana"), stream.count("bo"), stream.sessions()
(0, 1, 0, ['ana'])
>>> stream.last("ana").summary, stream.items("ana")[0].embedding.tolist()
('The user is Ana.', [1.0, 1.0])
>>> store.get(("fragrel", "scm", "ana"), "0000000000").value["response"]
'Hello Ana!'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import numpy as np

from .._closing import Closing
from .._optional import require
from .._validation import check_min_int

require("langgraph.store.base", "langchain")

from langgraph.store.base import BaseStore, GetOp, Item, PutOp  # noqa: E402

from ..core.scm.stream import check_session, check_turn  # noqa: E402
from ..core.scm.types import MemoryItem  # noqa: E402

__all__ = ["DEFAULT_NAMESPACE", "LangGraphStoreStream"]

#: The namespace prefix of the stream's items (the session id is appended as the last label).
DEFAULT_NAMESPACE: tuple[str, ...] = ("fragrel", "scm")

_KEY_DIGITS = 10
_FIELDS = ("observation", "response", "summary")


def _key(index: int) -> str:
    return f"{index:0{_KEY_DIGITS}d}"


def _index(key: str) -> int | None:
    """The interaction index of a key, or None for a key the stream did not write."""
    return int(key) if len(key) == _KEY_DIGITS and key.isascii() and key.isdigit() else None


def _label(session_id: str) -> str:
    """The namespace label of a session (``%``, ``.`` and NUL percent-encoded; :func:`unquote` reverses it)."""
    return session_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")


def _check_namespace(namespace: object) -> tuple[str, ...]:
    if not isinstance(namespace, tuple) or not namespace:
        raise TypeError(f"namespace must be a non-empty tuple of str, got {namespace!r}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(f"namespace labels must be non-empty str without '.' or NUL, got {label!r}")
    if namespace[0] == "langgraph":
        raise ValueError("the namespace cannot start with 'langgraph' (reserved by LangGraph)")
    return namespace


def _created(item: Item | None) -> float | None:
    value = None if item is None else item.value
    created = value.get("created") if isinstance(value, Mapping) else None
    return float(created) if isinstance(created, int | float) else None


def _decode(session_id: str, index: int, item: Item) -> MemoryItem:
    value = item.value
    if not isinstance(value, Mapping) or any(not isinstance(value.get(f), str) for f in _FIELDS):
        raise ValueError(
            f"store item {item.namespace}/{item.key} is not an SCM interaction (needs str observation, response "
            "and summary): keep other data out of the stream's namespace"
        )
    raw = value.get("embedding")
    embedding = None
    if raw is not None:
        embedding = np.asarray(raw, dtype=np.float32).ravel()
        embedding.flags.writeable = False
    created = value.get("created")
    return MemoryItem(
        session_id,
        index,
        value["observation"],
        value["response"],
        value["summary"],
        embedding,
        float(created) if isinstance(created, int | float) else 0.0,
    )


class LangGraphStoreStream(Closing):
    """An SCM memory stream in a LangGraph ``BaseStore`` (see the module docstring for the layout and caveats).

    Implements :class:`~fragrel_integrations.core.scm.MemoryStream`; pass it as
    ``SelfControlledMemory(..., stream=LangGraphStoreStream(store))`` or ``SCMMiddleware(..., store=store)``.

    Args:
        store: the LangGraph store (the caller owns it: :meth:`close` leaves it open).
        namespace: prefix of the stream's namespaces; each session lives under ``namespace + (session_id,)``.
        page_size: items per ``store.search`` / ``store.list_namespaces`` call when reading a whole session; also
            the most keys asked in one ``store.batch`` when following the items appended since the last read.
    """

    def __init__(
        self, store: BaseStore, *, namespace: tuple[str, ...] = DEFAULT_NAMESPACE, page_size: int = 100
    ) -> None:
        if not isinstance(store, BaseStore):
            raise TypeError(
                "store must be a LangGraph BaseStore (e.g. langgraph.store.memory.InMemoryStore() or a "
                f"PostgresStore), got {type(store).__name__}"
            )
        check_min_int(page_size, "page_size", 1)
        self.store = store
        self.namespace = _check_namespace(namespace)
        self.page_size = page_size
        self._lock = threading.RLock()
        self._tail: dict[str, tuple[int, float]] = {}  # session -> (index, created) of the newest item seen
        self._items: dict[str, list[MemoryItem]] = {}  # session -> its items as last read, in time order
        # With a default TTL the store expires items (the stream passes no ttl of its own), oldest or not: then
        # items() keeps no cache and reads the whole session, which also refreshes every item's TTL on read.
        ttl = getattr(store, "ttl_config", None) or {}
        self._cache_items = not (getattr(store, "supports_ttl", False) and ttl.get("default_ttl") is not None)

    # ------------------------------------------------------------------------------------------- helpers

    def _ns(self, session_id: str) -> tuple[str, ...]:
        return (*self.namespace, _label(check_session(session_id)))

    def _scan(self, ns: tuple[str, ...]) -> dict[int, Item]:
        """Every item of one session namespace by index, paging through ``store.search``."""
        found: dict[int, Item] = {}
        offset = 0
        while True:
            page = self.store.search(ns, limit=self.page_size, offset=offset)
            for item in page:
                index = _index(item.key)
                if tuple(item.namespace) == ns and index is not None:
                    found[index] = item
            if len(page) < self.page_size:
                return found
            offset += len(page)

    def _get_many(self, ns: tuple[str, ...], indices: list[int]) -> list[Item | None]:
        """The items under ``indices`` of one session, in one ``store.batch`` (``None`` where missing)."""
        config = getattr(self.store, "ttl_config", None) or {}
        refresh = bool(config.get("refresh_on_read", True))  # as BaseStore.get does by default
        results = self.store.batch([GetOp(ns, _key(i), refresh) for i in indices])
        return [item if isinstance(item, Item) else None for item in results]

    def _read_all(self, session_id: str, ns: tuple[str, ...]) -> list[MemoryItem]:
        found = self._scan(ns)
        return [_decode(session_id, i, found[i]) for i in sorted(found)]

    def _read_new(self, session_id: str, ns: tuple[str, ...], cached: list[MemoryItem]) -> list[MemoryItem] | None:
        """The cached items plus those appended since (read by key), or None when the cache is stale: its first
        or last item is gone or was rewritten (``created`` differs), e.g. after a clear by another writer."""
        first, last = cached[0], cached[-1]
        checks = [first.index] if first is last else [first.index, last.index]
        block = min(8, self.page_size)
        found = self._get_many(ns, [*checks, *range(last.index + 1, last.index + 1 + block)])
        for item, result in zip((first, last), found[: len(checks)], strict=False):
            if result is None or _created(result) != item.created:
                return None
        fresh: list[MemoryItem] = []
        following, after = found[len(checks) :], last.index + 1
        while True:
            for result in following:
                if result is None:
                    return cached + fresh
                fresh.append(_decode(session_id, after, result))
                after += 1
            block = min(2 * block, self.page_size)
            following = self._get_many(ns, list(range(after, after + block)))

    def _remember(self, session_id: str, index: int, created: float | None) -> None:
        if created is not None:
            with self._lock:
                self._tail[session_id] = (index, created)

    def _newest(self, session_id: str, ns: tuple[str, ...]) -> tuple[int, Item] | None:
        """The newest stored item of the session: the cached tail if the store still has it, else a full scan;
        then any items written after it (by another stream) are followed."""
        newest: tuple[int, Item] | None = None
        cached = self._tail.get(session_id)
        if cached is not None:
            item = self.store.get(ns, _key(cached[0]))
            if item is not None and _created(item) == cached[1]:
                newest = (cached[0], item)
        if newest is None:
            found = self._scan(ns)
            if found:
                top = max(found)
                newest = (top, found[top])
        while True:
            following = 0 if newest is None else newest[0] + 1
            item = self.store.get(ns, _key(following))
            if item is None:
                break
            newest = (following, item)
        if newest is None:
            self._tail.pop(session_id, None)
        else:
            self._remember(session_id, newest[0], _created(newest[1]))
        return newest

    # ------------------------------------------------------------------------------------------- stream

    def append(
        self,
        session_id: str,
        observation: str,
        response: str,
        *,
        summary: str = "",
        embedding: np.ndarray | None = None,
    ) -> MemoryItem:
        """Write one interaction at the end of the session's stream and return it (with its index)."""
        ns = self._ns(session_id)
        vector = check_turn(observation, response, summary, embedding)
        with self._lock:
            newest = self._newest(session_id, ns)
            index = 0 if newest is None else newest[0] + 1
            created = time.time()
            value: dict[str, Any] = {
                "observation": observation,
                "response": response,
                "summary": summary,
                "embedding": None if vector is None else [float(x) for x in vector.tolist()],
                "created": created,
                "index": index,
            }
            self.store.put(ns, _key(index), value, index=False)
            self._tail[session_id] = (index, created)
        return MemoryItem(session_id, index, observation, response, summary, vector, created)

    def items(self, session_id: str) -> list[MemoryItem]:
        """Every interaction of the session, in time order (a new list; items appended since the last call are
        read by key, the rest comes from memory unless the session was cleared or rewritten meanwhile)."""
        ns = self._ns(session_id)
        with self._lock:
            cached = self._items.get(session_id)
            result = self._read_new(session_id, ns, cached) if cached else None
            if result is None:
                result = self._read_all(session_id, ns)
            if result and self._cache_items:
                self._items[session_id] = result
                self._remember(session_id, result[-1].index, result[-1].created)
            else:
                self._items.pop(session_id, None)
            return list(result)

    def last(self, session_id: str) -> MemoryItem | None:
        """The latest interaction (the flash memory of the next turn), or None for an empty session."""
        ns = self._ns(session_id)
        with self._lock:
            newest = self._newest(session_id, ns)
        return None if newest is None else _decode(session_id, *newest)

    def count(self, session_id: str) -> int:
        """Number of interactions in the session."""
        return len(self._scan(self._ns(session_id)))

    def sessions(self) -> list[str]:
        """The session ids with at least one interaction, sorted."""
        depth = len(self.namespace) + 1
        labels: set[str] = set()
        offset = 0
        while True:
            page = self.store.list_namespaces(
                prefix=self.namespace, max_depth=depth, limit=self.page_size, offset=offset
            )
            labels.update(ns[-1] for ns in page if len(ns) == depth and tuple(ns[:-1]) == self.namespace)
            if len(page) < self.page_size:
                break
            offset += len(page)
        # a store may keep listing a namespace whose items were all deleted
        names = [unquote(label) for label in labels]
        return sorted(name for name in names if name and self._scan_one(self._ns(name)))

    def _scan_one(self, ns: tuple[str, ...]) -> bool:
        offset = 0
        while True:
            page = self.store.search(ns, limit=self.page_size, offset=offset)
            if any(tuple(it.namespace) == ns and _index(it.key) is not None for it in page):
                return True
            if len(page) < self.page_size:
                return False
            offset += len(page)

    def clear(self, session_id: str) -> int:
        """Delete the session's interactions (one ``store.batch`` of deletes); returns how many were deleted."""
        ns = self._ns(session_id)
        with self._lock:
            self._tail.pop(session_id, None)
            self._items.pop(session_id, None)
            keys = [item.key for item in self._scan(ns).values()]
            if keys:
                self.store.batch([PutOp(ns, key, None) for key in keys])
            return len(keys)

    def close(self) -> None:
        """Forget the cached items and tails; the store itself belongs to the caller and stays open."""
        with self._lock:
            self._tail.clear()
            self._items.clear()

    def __repr__(self) -> str:
        return f"LangGraphStoreStream({type(self.store).__name__}, namespace={self.namespace!r})"
