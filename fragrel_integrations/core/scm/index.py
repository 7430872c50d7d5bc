"""An external index over the SCM memory stream: the vector search used for memory activation.

The stream (:class:`~fragrel_integrations.core.scm.stream.SCMStream` or any ``MemoryStream``) stays the ordered
record of every turn; a :class:`StreamIndex` only answers "which earlier turns of this session are closest to
the observation?". Users who already run a vector database (Chroma, pgvector, Qdrant, ...) plug it in through the
framework adapters :class:`fragrel_integrations.langchain.scm_index.VectorStoreStreamIndex` (any LangChain
``VectorStore``) and :class:`fragrel_integrations.llama_index.scm_index.VectorStoreStreamIndex` (any LlamaIndex
vector store). :class:`InMemoryStreamIndex` is the framework-free reference implementation (tests, examples).

Entries are keyed by ``(session_id, interaction index)``; ``add`` must replace an existing entry with the same
key (upsert), so :meth:`SelfControlledMemory.reindex <fragrel_integrations.core.scm.SelfControlledMemory.reindex>`
can always run again. The async workflow calls these sync methods in a worker thread.

>>> import numpy as np
>>> index = InMemoryStreamIndex()
>>> index.add(MemoryItem("ana", 0, "My cat is Miso.", "Nice."), "cat Miso", np.array([1.0, 0.0]))
>>> index.add(MemoryItem("ana", 1, "I live in Lisbon.", "Lovely."), "Lisbon", np.array([0.0, 1.0]))
>>> index.add(MemoryItem("bob", 0, "My dog is Rex.", "Cute."), "dog Rex", np.array([1.0, 0.0]))
>>> [(i, round(s, 3)) for i, s in index.search("ana", "my cat?", np.array([0.9, 0.1]), k=1)]
[(0, 0.994)]
>>> index.delete_session("ana"); index.search("ana", "my cat?", np.array([0.9, 0.1]), k=5)
[]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from .types import MemoryItem

__all__ = [
    "InMemoryStreamIndex",
    "SCMIndexError",
    "StreamIndex",
    "check_entry",
    "check_keys",
    "check_store_options",
    "default_entry_id",
    "read_index",
]


def default_entry_id(session_id: str, index: int) -> str:
    """The id adapters give a turn's entry in an external store: ``f"scm:{session_id}:{index}"``."""
    return f"scm:{session_id}:{index}"


def read_index(value: object) -> int | None:
    """An interaction index read back from store metadata (stores may return it as int, float or str).

    >>> read_index(3), read_index(3.0), read_index("3"), read_index(True), read_index("x")
    (3, 3, 3, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def check_keys(session_key: object, index_key: object) -> tuple[str, str]:
    """Validate the two metadata key names adapters store with each entry (non-empty, different strs)."""
    for name, value in (("session_key", session_key), ("index_key", index_key)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if session_key == index_key:
        raise ValueError(f"session_key and index_key must differ, both are {session_key!r}")
    return session_key, index_key  # type: ignore[return-value]


def check_store_options(
    session_key: object, index_key: object, fetch_k: object, make_id: object
) -> tuple[str, str, int | None, Callable[[str, int], str]]:
    """Validate what both vector-store adapters take: the metadata keys (:func:`check_keys`), ``fetch_k`` (an int
    >= 1 or None) and ``make_id`` (a function ``(session_id, index) -> str``; None: :func:`default_entry_id`)."""
    session_key, index_key = check_keys(session_key, index_key)
    if fetch_k is not None and (isinstance(fetch_k, bool) or not isinstance(fetch_k, int) or fetch_k < 1):
        raise ValueError(f"fetch_k must be an int >= 1 or None, got {fetch_k!r}")
    if make_id is not None and not callable(make_id):
        raise TypeError(f"make_id must be a function (session_id, index) -> str, got {type(make_id).__name__}")
    return session_key, index_key, fetch_k, make_id or default_entry_id  # type: ignore[return-value]


def check_entry(item: object, text: object) -> None:
    """Validate one ``add`` call of an adapter: a :class:`MemoryItem` and its non-empty text."""
    if not isinstance(item, MemoryItem):
        raise TypeError(f"item must be a MemoryItem, got {type(item).__name__}")
    if not isinstance(text, str) or not text:
        raise TypeError(f"text must be a non-empty str, got {text!r}")


@runtime_checkable
class StreamIndex(Protocol):
    """What :class:`~fragrel_integrations.core.scm.SelfControlledMemory` needs from an external index.

    ``isinstance`` checks only that the three methods exist.
    """

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Index one stored turn: ``text`` is what the stream embedded (the summary, else the full turn) and
        ``embedding`` the memory's vector of it. Replaces an entry with the same ``(session_id, index)``."""
        ...

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """At most ``k`` ``(interaction index, similarity)`` pairs of ``session_id`` only, best first.

        ``query`` is the observation and ``embedding`` the memory's vector of it; an index that embeds with its
        own model uses the text."""
        ...

    def delete_session(self, session_id: str) -> None:
        """Remove every entry of ``session_id``."""
        ...


class SCMIndexError(RuntimeError):
    """The external index failed after the turn was written to the stream (nothing is lost).

    ``item`` is the stored turn; ``session_id`` its session. Repair the index with
    ``memory.reindex(session_id)`` (adds are upserts, so already indexed turns are simply rewritten).
    """

    def __init__(self, message: str, item: MemoryItem | None = None, session_id: str | None = None) -> None:
        super().__init__(message)
        self.item = item
        self.session_id = session_id if session_id is not None else (item.session_id if item else None)


class InMemoryStreamIndex:
    """A framework-free :class:`StreamIndex`: brute-force cosine over the memory's embeddings, per session.

    Thread-safe; holds everything in memory (nothing persists). Useful for tests and as a template.
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict[int, tuple[str, np.ndarray]]] = {}
        self._lock = threading.Lock()

    def add(self, item: MemoryItem, text: str, embedding: np.ndarray) -> None:
        """Index one turn (replacing an entry with the same session and interaction index)."""
        if not isinstance(item, MemoryItem):
            raise TypeError(f"item must be a MemoryItem, got {type(item).__name__}")
        vector = np.asarray(embedding, dtype=np.float64).ravel()
        if vector.size == 0 or not np.all(np.isfinite(vector)):
            raise ValueError("embedding must be a non-empty finite vector")
        with self._lock:
            self._entries.setdefault(item.session_id, {})[item.index] = (str(text), vector)

    def search(self, session_id: str, query: str, embedding: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` turns of the session with the highest cosine to ``embedding``, best first (ties: earlier)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        q = np.asarray(embedding, dtype=np.float64).ravel()
        with self._lock:
            entries = sorted(self._entries.get(session_id, {}).items())
        if not entries:
            return []
        e = np.stack([vector for _, (_, vector) in entries])
        if e.shape[1] != q.shape[0]:
            raise ValueError(f"indexed embeddings have dimension {e.shape[1]} but the query has {q.shape[0]}")
        s = (e @ q) / np.maximum(np.linalg.norm(e, axis=1) * max(float(np.linalg.norm(q)), 1e-12), 1e-12)
        top = np.argsort(-s, kind="stable")[:k]
        return [(entries[int(t)][0], float(s[int(t)])) for t in top]

    def delete_session(self, session_id: str) -> None:
        """Forget every entry of the session."""
        with self._lock:
            self._entries.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._entries.values())

    def __repr__(self) -> str:
        return f"InMemoryStreamIndex(sessions={len(self._entries)}, entries={len(self)})"
