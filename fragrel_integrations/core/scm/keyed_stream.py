"""The layout of an SCM memory stream in a key-value store with namespaces (LangGraph's ``BaseStore``, through
:class:`fragrel_integrations.langchain.scm_store.LangGraphStoreStream`), without the framework.

Each interaction is one item under ``namespace + (session label,)``; its key is the slot it claimed, zero-padded,
plus a random suffix (:func:`new_key`), so keys sort in time order and no write replaces another. Items are read
duck-typed (``namespace``, ``key``, ``value``), so the helpers work on any store's items.

>>> slot_of(new_key(7)), slot_of("0000000007"), slot_of("notes")
(7, 7, None)
>>> session_label("a.b%"), seq(3)
('a%2Eb%25', '0000000003')
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from .types import MemoryItem

__all__ = [
    "RACE_SLOTS",
    "Cached",
    "Entry",
    "check_namespace",
    "created_of",
    "decode_item",
    "entries",
    "merge_new",
    "new_key",
    "seq",
    "session_label",
    "slot_of",
    "store_lock",
    "turn_value",
]

KEY_DIGITS = 10
FIELDS = ("observation", "response", "summary")
#: How far below the last cached slot a read looks for a write that another process made late.
RACE_SLOTS = 4

_LOCKS_GUARD = threading.Lock()
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_BY_ID: dict[int, threading.RLock] = {}  # for a store that cannot be weakly referenced


def store_lock(store: object) -> threading.RLock:
    """The one lock of this process for ``store``: every stream object on the same store shares it."""
    with _LOCKS_GUARD:
        try:
            lock = _LOCKS.get(store)
            if lock is None:
                lock = _LOCKS[store] = threading.RLock()
        except TypeError:  # not weak-referenceable
            lock = _LOCKS_BY_ID.setdefault(id(store), threading.RLock())
        return lock


def seq(slot: int) -> str:
    return f"{slot:0{KEY_DIGITS}d}"


def new_key(slot: int) -> str:
    """A key no other writer can repeat: the slot, then a random suffix."""
    return f"{seq(slot)}-{uuid.uuid4().hex}"


def slot_of(key: str) -> int | None:
    """The slot of a key the stream wrote (``0000000007`` or ``0000000007-<hex>``), or None for any other key."""
    head, sep, tail = key.partition("-")
    if len(head) != KEY_DIGITS or not (head.isascii() and head.isdigit()):
        return None
    if sep and not (tail and tail.isascii() and tail.isalnum()):
        return None
    return int(head)


def session_label(session_id: str) -> str:
    """The namespace label of a session (``%``, ``.`` and NUL percent-encoded; :func:`unquote` reverses it)."""
    return session_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")


def check_namespace(namespace: object) -> tuple[str, ...]:
    if not isinstance(namespace, tuple) or not namespace:
        raise TypeError(f"namespace must be a non-empty tuple of str, got {namespace!r}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(f"namespace labels must be non-empty str without '.' or NUL, got {label!r}")
    if namespace[0] == "langgraph":
        raise ValueError("the namespace cannot start with 'langgraph' (reserved by LangGraph)")
    return namespace


def created_of(item: Any) -> float | None:
    value = None if item is None else item.value
    created = value.get("created") if isinstance(value, Mapping) else None
    return float(created) if isinstance(created, int | float) else None


class Entry(NamedTuple):
    """One stored interaction: its order (slot, created, key) and the item read from the store."""

    slot: int
    created: float
    key: str
    item: Any


def entries(ns: tuple[str, ...], items: Iterable[Any]) -> list[Entry]:
    """The stream's items among ``items`` (those of exactly ``ns`` with a stream key), unsorted."""
    out = []
    for item in items:
        slot = slot_of(item.key)
        if tuple(item.namespace) == ns and slot is not None:
            out.append(Entry(slot, created_of(item) or 0.0, item.key, item))
    return out


def decode_item(session_id: str, index: int, item: Any) -> MemoryItem:
    value = item.value
    if not isinstance(value, Mapping) or any(not isinstance(value.get(f), str) for f in FIELDS):
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


class Cached(NamedTuple):
    """A session as last read: the order of each item and its decoded form (same length, same order)."""

    order: list[tuple[int, float, str]]
    items: list[MemoryItem]


def turn_value(observation: str, response: str, summary: str, vector: np.ndarray | None, slot: int) -> dict[str, Any]:
    """The JSON-compatible store value of one interaction at ``slot`` (``created`` is now)."""
    return {
        "observation": observation,
        "response": response,
        "summary": summary,
        "embedding": None if vector is None else [float(x) for x in vector.tolist()],
        "created": time.time(),
        "index": slot,
        "seq": seq(slot),
    }


def merge_new(session_id: str, cached: Cached, new: Iterable[Entry], floor: int) -> Cached | None:
    """``cached`` plus the ``new`` entries found at or above slot ``floor`` (a search that also returns cached
    ones), or None when one sorts before the last cached item (a late write by another process: read again)."""
    known = set()
    for slot, _, key in reversed(cached.order):  # the cached items the search returns again
        if slot < floor:
            break
        known.add(key)
    fresh = sorted(e for e in new if e.slot >= floor and e.key not in known)
    if not fresh:
        return cached
    if fresh[0][:3] < cached.order[-1]:
        return None
    start = len(cached.items)
    return Cached(
        [*cached.order, *(e[:3] for e in fresh)],
        [*cached.items, *(decode_item(session_id, start + i, e.item) for i, e in enumerate(fresh))],
    )
